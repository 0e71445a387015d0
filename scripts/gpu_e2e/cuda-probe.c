/*
 * cuda-probe: a tiny CUDA workload for containers that have no CUDA toolkit.
 *
 * The NVIDIA container runtime injects the driver library libcuda.so.1 into a GPU pod, but the pod's image need not
 * carry any CUDA toolkit. This program dlopens libcuda.so.1, loads a hand-written PTX kernel (the driver's JIT
 * compiles it for whatever GPU is present), runs it on every visible device and prints ONE JSON object on stdout
 * saying what the container got: devices, memory as the context sees it (MPS or HAMi limits show here), how many SMs
 * the kernel's blocks actually landed on (MPS thread-percentage limits show here) and, with --alloc-mib, which
 * allocations succeed. Only the primary context is used (cuCtxCreate's ABI changed in CUDA 13).
 *
 * Build (glibc only, no CUDA headers):  gcc -O2 -Wall -Wextra -Werror -o cuda-probe cuda-probe.c -ldl
 * Usage: cuda-probe [--alloc-mib N[,N...]] [--spin-cycles N] [--blocks N] [--hold-s N]
 * Exit 0 when cuInit succeeded, at least one device exists and the kernel ran on every device; 1 otherwise.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- The few driver API types we need (ABI-compatible with cuda.h on 64-bit Linux). ---- */
typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;               /* struct CUctx_st * */
typedef void *CUmodule;                /* struct CUmod_st * */
typedef void *CUfunction;              /* struct CUfunc_st * */
typedef void *CUstream;                /* struct CUstream_st *; NULL is the default stream */
typedef unsigned long long CUdeviceptr; /* CUdeviceptr_v2 */
typedef struct {
    char bytes[16];
} CUuuid;

#define CUDA_SUCCESS 0
#define CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT 16
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76

static struct {
    CUresult (*Init)(unsigned int flags);
    CUresult (*DriverGetVersion)(int *version);
    CUresult (*DeviceGetCount)(int *count);
    CUresult (*DeviceGet)(CUdevice *dev, int ordinal);
    CUresult (*DeviceGetName)(char *name, int len, CUdevice dev);
    CUresult (*DeviceGetUuid)(CUuuid *uuid, CUdevice dev);
    CUresult (*DeviceTotalMem)(size_t *bytes, CUdevice dev);
    CUresult (*DeviceGetAttribute)(int *value, int attrib, CUdevice dev);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *ctx, CUdevice dev);
    CUresult (*DevicePrimaryCtxRelease)(CUdevice dev);
    CUresult (*CtxSetCurrent)(CUcontext ctx);
    CUresult (*MemGetInfo)(size_t *free_bytes, size_t *total_bytes);
    CUresult (*ModuleLoadData)(CUmodule *module, const void *image);
    CUresult (*ModuleGetFunction)(CUfunction *func, CUmodule module, const char *name);
    CUresult (*LaunchKernel)(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                             unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                             unsigned int sharedMemBytes, CUstream stream, void **kernelParams, void **extra);
    CUresult (*CtxSynchronize)(void);
    CUresult (*MemAlloc)(CUdeviceptr *dptr, size_t bytes);
    CUresult (*MemFree)(CUdeviceptr dptr);
    CUresult (*MemcpyDtoH)(void *dst, CUdeviceptr src, size_t bytes);
    CUresult (*MemsetD8)(CUdeviceptr dst, unsigned char value, size_t count);
    CUresult (*GetErrorName)(CUresult error, const char **name); /* optional */
} cu;

/*
 * smid_kernel(u32 *out, u64 spin_cycles): thread 0 of each block spins on %clock64 for spin_cycles, so that the
 * blocks are resident at the same time and the block scheduler spreads them over every SM this process may use,
 * then writes %smid to out[%ctaid.x]. The other threads of the block exit at once.
 */
static const char kPtx[] =
    ".version 7.0\n"
    ".target sm_75\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry smid_kernel(\n"
    "\t.param .u64 smid_kernel_param_0,\n"
    "\t.param .u64 smid_kernel_param_1\n"
    ")\n"
    "{\n"
    "\t.reg .pred %p<3>;\n"
    "\t.reg .b32 %r<4>;\n"
    "\t.reg .b64 %rd<10>;\n"
    "\n"
    "\tmov.u32 %r1, %tid.x;\n"
    "\tsetp.ne.u32 %p1, %r1, 0;\n"
    "\t@%p1 bra $L_done;\n"
    "\tld.param.u64 %rd1, [smid_kernel_param_0];\n"
    "\tld.param.u64 %rd2, [smid_kernel_param_1];\n"
    "\tcvta.to.global.u64 %rd3, %rd1;\n"
    "\tmov.u64 %rd4, %clock64;\n"
    "$L_spin:\n"
    "\tmov.u64 %rd5, %clock64;\n"
    "\tsub.u64 %rd6, %rd5, %rd4;\n"
    "\tsetp.lt.u64 %p2, %rd6, %rd2;\n"
    "\t@%p2 bra $L_spin;\n"
    "\tmov.u32 %r2, %smid;\n"
    "\tmov.u32 %r3, %ctaid.x;\n"
    "\tmul.wide.u32 %rd7, %r3, 4;\n"
    "\tadd.u64 %rd8, %rd3, %rd7;\n"
    "\tst.global.u32 [%rd8], %r2;\n"
    "$L_done:\n"
    "\tret;\n"
    "}\n";

#define MAX_DEVICES 64
#define MAX_ALLOCS 64
#define ERR_LEN 320
#define UNWRITTEN 0xFFFFFFFFu

struct device_result {
    int index;
    CUdevice dev;
    int have_name, have_uuid;
    char name[256];
    char uuid[48];
    long long total_mib, free_mib, ctx_total_mib; /* -1: unknown */
    int sm_count_attr, cc_major, cc_minor;       /* -1: unknown */
    int have_ctx;
    int kernel_ran;
    unsigned int blocks;
    long long sms_used, max_smid, blocks_unwritten; /* -1: unknown */
    double kernel_ms;
    char error[ERR_LEN]; /* empty: none */
};

struct alloc_result {
    unsigned long long mib;
    int ok;
    const char *stage; /* where it failed: "alloc", "memset", "free" or "context"; NULL when ok */
    char error[ERR_LEN];
};

static int driver_version = -1;
static int device_count = 0;
static int n_results = 0;
static struct device_result results[MAX_DEVICES];
static int n_allocs = 0;
static struct alloc_result allocs[MAX_ALLOCS];
static unsigned long long alloc_mib[MAX_ALLOCS];
static char top_error[ERR_LEN + 64];

static const char *err_name(CUresult r, char *buf, size_t len) {
    const char *s = NULL;
    if (cu.GetErrorName && cu.GetErrorName(r, &s) == CUDA_SUCCESS && s)
        return s;
    snprintf(buf, len, "CUDA_ERROR_%d", r);
    return buf;
}

/* Formats "<what>: <CUDA_ERROR_NAME>" into out (when out is still empty: the first error wins). */
static void set_cu_error(char *out, size_t len, const char *what, CUresult r) {
    char buf[32];
    if (out[0])
        return;
    snprintf(out, len, "%s: %s", what, err_name(r, buf, sizeof buf));
}

static void set_top_error(const char *msg) {
    if (!top_error[0])
        snprintf(top_error, sizeof top_error, "%s", msg);
}

/* ---- JSON output ---- */

/* Length of the valid UTF-8 sequence at p, or 0 if it is not one. */
static int utf8_len(const unsigned char *p) {
    unsigned char c = p[0];
    if (c >= 0xC2 && c <= 0xDF)
        return (p[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        unsigned char lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        return p[1] >= lo && p[1] <= hi && (p[2] & 0xC0) == 0x80 ? 3 : 0;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        unsigned char lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        return p[1] >= lo && p[1] <= hi && (p[2] & 0xC0) == 0x80 && (p[3] & 0xC0) == 0x80 ? 4 : 0;
    }
    return 0;
}

/* Writes s as a JSON string (null for NULL); invalid UTF-8 bytes become U+FFFD. */
static void json_str(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    if (!s) {
        fputs("null", stdout);
        return;
    }
    putchar('"');
    while (*p) {
        unsigned char c = *p;
        if (c == '"' || c == '\\') {
            putchar('\\');
            putchar(c);
            p++;
        } else if (c == '\n') {
            fputs("\\n", stdout);
            p++;
        } else if (c == '\t') {
            fputs("\\t", stdout);
            p++;
        } else if (c == '\r') {
            fputs("\\r", stdout);
            p++;
        } else if (c < 0x20 || c == 0x7F) {
            printf("\\u%04x", c);
            p++;
        } else if (c < 0x80) {
            putchar(c);
            p++;
        } else {
            int n = utf8_len(p);
            if (n) {
                fwrite(p, 1, (size_t)n, stdout);
                p += n;
            } else {
                fputs("\\ufffd", stdout);
                p++;
            }
        }
    }
    putchar('"');
}

static void json_ll_or_null(long long v) {
    if (v < 0)
        fputs("null", stdout);
    else
        printf("%lld", v);
}

static void json_err_or_null(const char *e) { json_str(e[0] ? e : NULL); }

static void print_json(int ok) {
    static const char *const env_names[] = {"NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "CUDA_MPS_PIPE_DIRECTORY",
                                            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"};
    char host[256];
    size_t i;
    int d, a;

    if (gethostname(host, sizeof host) != 0)
        host[0] = '\0';
    host[sizeof host - 1] = '\0';

    printf("{\"ok\": %s, \"error\": ", ok ? "true" : "false");
    json_err_or_null(top_error);
    fputs(", \"driver_version\": ", stdout);
    json_ll_or_null(driver_version);
    printf(", \"device_count\": %d, \"devices\": [", device_count);
    for (d = 0; d < n_results; d++) {
        const struct device_result *r = &results[d];
        printf("%s{\"index\": %d, \"name\": ", d ? ", " : "", r->index);
        json_str(r->have_name ? r->name : NULL);
        fputs(", \"uuid\": ", stdout);
        json_str(r->have_uuid ? r->uuid : NULL);
        fputs(", \"total_mib\": ", stdout);
        json_ll_or_null(r->total_mib);
        fputs(", \"free_mib\": ", stdout);
        json_ll_or_null(r->free_mib);
        fputs(", \"ctx_total_mib\": ", stdout);
        json_ll_or_null(r->ctx_total_mib);
        fputs(", \"sm_count_attr\": ", stdout);
        json_ll_or_null(r->sm_count_attr);
        fputs(", \"compute_capability\": ", stdout);
        if (r->cc_major >= 0 && r->cc_minor >= 0)
            printf("\"%d.%d\"", r->cc_major, r->cc_minor);
        else
            fputs("null", stdout);
        fputs(", \"sms_used\": ", stdout);
        json_ll_or_null(r->sms_used);
        fputs(", \"max_smid\": ", stdout);
        json_ll_or_null(r->max_smid);
        fputs(", \"blocks\": ", stdout);
        json_ll_or_null(r->blocks ? (long long)r->blocks : -1);
        fputs(", \"blocks_unwritten\": ", stdout);
        json_ll_or_null(r->blocks_unwritten);
        fputs(", \"kernel_ms\": ", stdout);
        if (r->kernel_ms >= 0)
            printf("%.3f", r->kernel_ms);
        else
            fputs("null", stdout);
        fputs(", \"driver_version\": ", stdout);
        json_ll_or_null(driver_version);
        printf(", \"ok\": %s, \"error\": ", r->kernel_ran && !r->error[0] ? "true" : "false");
        json_err_or_null(r->error);
        putchar('}');
    }
    fputs("], \"allocs\": [", stdout);
    for (a = 0; a < n_allocs; a++) {
        const struct alloc_result *r = &allocs[a];
        printf("%s{\"mib\": %llu, \"ok\": %s, \"error\": ", a ? ", " : "", r->mib, r->ok ? "true" : "false");
        json_err_or_null(r->error);
        fputs(", \"stage\": ", stdout);
        json_str(r->stage);
        putchar('}');
    }
    fputs("], \"env\": {", stdout);
    for (i = 0; i < sizeof env_names / sizeof env_names[0]; i++) {
        printf("%s\"%s\": ", i ? ", " : "", env_names[i]);
        json_str(getenv(env_names[i]));
    }
    fputs("}, \"hostname\": ", stdout);
    json_str(host);
    fputs("}\n", stdout);
    fflush(stdout);
}

/* ---- Probing ---- */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_u32(const void *a, const void *b) {
    unsigned int x = *(const unsigned int *)a, y = *(const unsigned int *)b;
    return (x > y) - (x < y);
}

/* Loads one symbol into *slot (a function pointer's storage); returns 0 when it is missing. */
static int load_sym(void *lib, void *slot, size_t slot_size, const char *name, const char *fallback) {
    void *p = dlsym(lib, name);
    if (!p && fallback)
        p = dlsym(lib, fallback);
    if (!p)
        return 0;
    memcpy(slot, &p, slot_size);
    return 1;
}

#define LOAD(field, name, fallback)                                                           \
    do {                                                                                      \
        if (!load_sym(lib, &cu.field, sizeof cu.field, name, fallback) && !missing[0])        \
            snprintf(missing, sizeof missing, "dlsym %s: not found in libcuda.so.1", name);   \
    } while (0)

static int load_driver(void) {
    char missing[160] = "";
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(top_error, sizeof top_error, "dlopen libcuda.so.1: %s", e ? e : "unknown error");
        return 0;
    }
    LOAD(Init, "cuInit", NULL);
    LOAD(DriverGetVersion, "cuDriverGetVersion", NULL);
    LOAD(DeviceGetCount, "cuDeviceGetCount", NULL);
    LOAD(DeviceGet, "cuDeviceGet", NULL);
    LOAD(DeviceGetName, "cuDeviceGetName", NULL);
    LOAD(DeviceGetUuid, "cuDeviceGetUuid_v2", "cuDeviceGetUuid");
    LOAD(DeviceTotalMem, "cuDeviceTotalMem_v2", NULL);
    LOAD(DeviceGetAttribute, "cuDeviceGetAttribute", NULL);
    LOAD(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", NULL);
    LOAD(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease");
    LOAD(CtxSetCurrent, "cuCtxSetCurrent", NULL);
    LOAD(MemGetInfo, "cuMemGetInfo_v2", NULL);
    LOAD(ModuleLoadData, "cuModuleLoadData", NULL);
    LOAD(ModuleGetFunction, "cuModuleGetFunction", NULL);
    LOAD(LaunchKernel, "cuLaunchKernel", NULL);
    LOAD(CtxSynchronize, "cuCtxSynchronize", NULL);
    LOAD(MemAlloc, "cuMemAlloc_v2", NULL);
    LOAD(MemFree, "cuMemFree_v2", NULL);
    LOAD(MemcpyDtoH, "cuMemcpyDtoH_v2", NULL);
    LOAD(MemsetD8, "cuMemsetD8_v2", NULL);
    if (!load_sym(lib, &cu.GetErrorName, sizeof cu.GetErrorName, "cuGetErrorName", NULL))
        cu.GetErrorName = NULL; /* only used to name errors */
    if (missing[0]) {
        snprintf(top_error, sizeof top_error, "%s", missing);
        return 0;
    }
    return 1;
}

static CUcontext contexts[MAX_DEVICES];

/* Runs smid_kernel on out (blocks entries) and fills sms_used/max_smid/blocks_unwritten; returns 0 on failure. */
static int run_kernel(struct device_result *r, CUfunction fn, unsigned long long spin_cycles) {
    CUdeviceptr out = 0;
    unsigned int *host = NULL;
    size_t bytes = (size_t)r->blocks * sizeof(unsigned int);
    void *params[2];
    CUresult rc;
    double t0;
    unsigned int i;
    int ok = 0;

    host = malloc(bytes);
    if (!host) {
        snprintf(r->error, sizeof r->error, "malloc: out of host memory");
        return 0;
    }
    if ((rc = cu.MemAlloc(&out, bytes)) != CUDA_SUCCESS) {
        set_cu_error(r->error, sizeof r->error, "cuMemAlloc_v2", rc);
        out = 0;
        goto done;
    }
    /* 0xFF..: a block that never wrote its slot shows as UNWRITTEN. */
    if ((rc = cu.MemsetD8(out, 0xFF, bytes)) != CUDA_SUCCESS) {
        set_cu_error(r->error, sizeof r->error, "cuMemsetD8_v2", rc);
        goto done;
    }
    params[0] = &out;
    params[1] = &spin_cycles;
    t0 = now_ms();
    rc = cu.LaunchKernel(fn, r->blocks, 1, 1, 32, 1, 1, 0, NULL, params, NULL);
    if (rc != CUDA_SUCCESS) {
        set_cu_error(r->error, sizeof r->error, "cuLaunchKernel", rc);
        goto done;
    }
    if ((rc = cu.CtxSynchronize()) != CUDA_SUCCESS) {
        set_cu_error(r->error, sizeof r->error, "cuCtxSynchronize", rc);
        goto done;
    }
    r->kernel_ms = now_ms() - t0;
    if ((rc = cu.MemcpyDtoH(host, out, bytes)) != CUDA_SUCCESS) {
        set_cu_error(r->error, sizeof r->error, "cuMemcpyDtoH_v2", rc);
        goto done;
    }
    r->blocks_unwritten = 0;
    for (i = 0; i < r->blocks; i++)
        if (host[i] == UNWRITTEN)
            r->blocks_unwritten++;
    qsort(host, r->blocks, sizeof host[0], cmp_u32);
    r->sms_used = 0;
    r->max_smid = -1;
    for (i = 0; i < r->blocks; i++) {
        if (host[i] == UNWRITTEN)
            break; /* sorted: the rest are unwritten too */
        if (i == 0 || host[i] != host[i - 1])
            r->sms_used++;
        r->max_smid = host[i];
    }
    if (r->blocks_unwritten) {
        snprintf(r->error, sizeof r->error, "smid_kernel: %lld of %u blocks wrote nothing", r->blocks_unwritten,
                 r->blocks);
        goto done;
    }
    ok = 1;
done:
    if (out && (rc = cu.MemFree(out)) != CUDA_SUCCESS) {
        set_cu_error(r->error, sizeof r->error, "cuMemFree_v2", rc);
        ok = 0;
    }
    free(host);
    return ok;
}

static void probe_device(int index, unsigned int blocks_opt, unsigned long long spin_cycles) {
    struct device_result *r = &results[index];
    CUdevice dev;
    CUuuid uuid;
    CUmodule mod = NULL;
    CUfunction fn = NULL;
    size_t total = 0, free_b = 0;
    CUresult rc;
    int v;

    memset(r, 0, sizeof *r);
    r->index = index;
    r->total_mib = r->free_mib = r->ctx_total_mib = -1;
    r->sm_count_attr = r->cc_major = r->cc_minor = -1;
    r->sms_used = r->max_smid = r->blocks_unwritten = -1;
    r->kernel_ms = -1;

    if ((rc = cu.DeviceGet(&dev, index)) != CUDA_SUCCESS) {
        set_cu_error(r->error, sizeof r->error, "cuDeviceGet", rc);
        return;
    }
    r->dev = dev;
    /* Facts about the device: a failure is recorded, but the kernel is still tried. */
    if ((rc = cu.DeviceGetName(r->name, (int)sizeof r->name, dev)) == CUDA_SUCCESS) {
        r->name[sizeof r->name - 1] = '\0';
        r->have_name = 1;
    } else {
        set_cu_error(r->error, sizeof r->error, "cuDeviceGetName", rc);
    }
    if ((rc = cu.DeviceGetUuid(&uuid, dev)) == CUDA_SUCCESS) {
        const unsigned char *b = (const unsigned char *)uuid.bytes;
        snprintf(r->uuid, sizeof r->uuid,
                 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3],
                 b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
        r->have_uuid = 1;
    } else {
        set_cu_error(r->error, sizeof r->error, "cuDeviceGetUuid", rc);
    }
    if ((rc = cu.DeviceTotalMem(&total, dev)) == CUDA_SUCCESS)
        r->total_mib = (long long)(total >> 20);
    else
        set_cu_error(r->error, sizeof r->error, "cuDeviceTotalMem_v2", rc);
    if ((rc = cu.DeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)) == CUDA_SUCCESS)
        r->sm_count_attr = v;
    else
        set_cu_error(r->error, sizeof r->error, "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)", rc);
    if ((rc = cu.DeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)) == CUDA_SUCCESS)
        r->cc_major = v;
    else
        set_cu_error(r->error, sizeof r->error, "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)", rc);
    if ((rc = cu.DeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)) == CUDA_SUCCESS)
        r->cc_minor = v;
    else
        set_cu_error(r->error, sizeof r->error, "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MINOR)", rc);

    /* Default: 8 blocks per SM, at least 1024 (blocks of one warp: many fit on an SM at once). */
    r->blocks = blocks_opt ? blocks_opt : 1024;
    if (!blocks_opt && r->sm_count_attr > 128 && r->sm_count_attr < (1 << 20))
        r->blocks = 8u * (unsigned int)r->sm_count_attr;

    /* The context: kept (retained) until the end of the program; released in main. */
    if ((rc = cu.DevicePrimaryCtxRetain(&contexts[index], dev)) != CUDA_SUCCESS) {
        set_cu_error(r->error, sizeof r->error, "cuDevicePrimaryCtxRetain", rc);
        return;
    }
    r->have_ctx = 1;
    if ((rc = cu.CtxSetCurrent(contexts[index])) != CUDA_SUCCESS) {
        set_cu_error(r->error, sizeof r->error, "cuCtxSetCurrent", rc);
        return;
    }
    if ((rc = cu.MemGetInfo(&free_b, &total)) == CUDA_SUCCESS) {
        r->free_mib = (long long)(free_b >> 20);
        r->ctx_total_mib = (long long)(total >> 20);
    } else {
        set_cu_error(r->error, sizeof r->error, "cuMemGetInfo_v2", rc);
    }
    if ((rc = cu.ModuleLoadData(&mod, kPtx)) != CUDA_SUCCESS) {
        set_cu_error(r->error, sizeof r->error, "cuModuleLoadData", rc);
        return;
    }
    if ((rc = cu.ModuleGetFunction(&fn, mod, "smid_kernel")) != CUDA_SUCCESS) {
        set_cu_error(r->error, sizeof r->error, "cuModuleGetFunction", rc);
        return;
    }
    r->kernel_ran = run_kernel(r, fn, spin_cycles);
}

/* On device 0's context: allocate each size, touch it (some limits act on first use), free it. */
static void probe_allocs(void) {
    char buf[32];
    int a;
    for (a = 0; a < n_allocs; a++) {
        struct alloc_result *r = &allocs[a];
        CUdeviceptr p = 0;
        CUresult rc;
        size_t bytes = (size_t)(alloc_mib[a] << 20);
        r->mib = alloc_mib[a];
        r->ok = 0;
        if (n_results < 1 || !results[0].have_ctx) {
            r->stage = "context";
            snprintf(r->error, sizeof r->error, "no context on device 0");
            continue;
        }
        if ((rc = cu.CtxSetCurrent(contexts[0])) != CUDA_SUCCESS) {
            r->stage = "context";
            snprintf(r->error, sizeof r->error, "%s", err_name(rc, buf, sizeof buf));
            continue;
        }
        if ((rc = cu.MemAlloc(&p, bytes)) != CUDA_SUCCESS) {
            r->stage = "alloc";
            snprintf(r->error, sizeof r->error, "%s", err_name(rc, buf, sizeof buf));
            continue;
        }
        /* cuMemsetD8 on device memory may be asynchronous: synchronize to see its errors here. */
        rc = cu.MemsetD8(p, 0, bytes);
        if (rc == CUDA_SUCCESS)
            rc = cu.CtxSynchronize();
        if (rc != CUDA_SUCCESS) {
            r->stage = "memset";
            snprintf(r->error, sizeof r->error, "%s", err_name(rc, buf, sizeof buf));
        }
        if ((rc = cu.MemFree(p)) != CUDA_SUCCESS && !r->error[0]) {
            r->stage = "free";
            snprintf(r->error, sizeof r->error, "%s", err_name(rc, buf, sizeof buf));
        }
        r->ok = !r->error[0];
    }
}

/* ---- Options ---- */

static int parse_ull(const char *s, unsigned long long max, unsigned long long *out) {
    char *end;
    unsigned long long v;
    if (!s || !*s || *s < '0' || *s > '9')
        return 0;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || *end || v > max)
        return 0;
    *out = v;
    return 1;
}

static int parse_alloc_list(const char *s) {
    char tmp[1024];
    char *tok, *save = NULL;
    if (!s || strlen(s) >= sizeof tmp)
        return 0;
    strcpy(tmp, s);
    n_allocs = 0;
    for (tok = strtok_r(tmp, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        unsigned long long v;
        /* 2^24 MiB = 16 TiB: far above any GPU, and bytes stay well inside size_t. */
        if (n_allocs >= MAX_ALLOCS || !parse_ull(tok, 1ULL << 24, &v))
            return 0;
        alloc_mib[n_allocs++] = v;
    }
    return n_allocs > 0;
}

int main(int argc, char **argv) {
    unsigned long long spin_cycles = 200000, blocks = 0, hold_s = 0;
    int ok = 0, i, d, n = 0;
    CUresult rc;

    for (i = 1; i < argc; i++) {
        const char *opt = argv[i], *val = NULL, *eq = strchr(opt, '=');
        char name[32];
        int good;
        if (strncmp(opt, "--", 2) == 0 && eq && (size_t)(eq - opt) < sizeof name) {
            memcpy(name, opt, (size_t)(eq - opt));
            name[eq - opt] = '\0';
            val = eq + 1;
        } else {
            snprintf(name, sizeof name, "%s", opt);
            if (i + 1 < argc)
                val = argv[++i];
        }
        if (strcmp(name, "--alloc-mib") == 0)
            good = parse_alloc_list(val);
        else if (strcmp(name, "--spin-cycles") == 0)
            good = parse_ull(val, 100000000000ULL, &spin_cycles);
        else if (strcmp(name, "--blocks") == 0)
            good = parse_ull(val, 1ULL << 24, &blocks) && blocks > 0;
        else if (strcmp(name, "--hold-s") == 0)
            good = parse_ull(val, 31536000ULL, &hold_s);
        else {
            snprintf(top_error, sizeof top_error,
                     "unknown option %s (usage: cuda-probe [--alloc-mib N[,N...]] [--spin-cycles N] [--blocks N] "
                     "[--hold-s N])",
                     opt);
            print_json(0);
            return 1;
        }
        if (!good) {
            snprintf(top_error, sizeof top_error, "bad value for %s: %s", name, val ? val : "(missing)");
            print_json(0);
            return 1;
        }
    }

    if (!load_driver()) {
        print_json(0);
        return 1;
    }
    /* cuDriverGetVersion works before cuInit: report it even if cuInit fails. */
    if (cu.DriverGetVersion(&driver_version) != CUDA_SUCCESS)
        driver_version = -1;
    if ((rc = cu.Init(0)) != CUDA_SUCCESS) {
        set_cu_error(top_error, sizeof top_error, "cuInit", rc);
        print_json(0);
        return 1;
    }
    if ((rc = cu.DeviceGetCount(&device_count)) != CUDA_SUCCESS) {
        device_count = 0;
        set_cu_error(top_error, sizeof top_error, "cuDeviceGetCount", rc);
        print_json(0);
        return 1;
    }
    if (device_count < 1)
        set_top_error("no CUDA device visible");

    n = device_count < MAX_DEVICES ? device_count : MAX_DEVICES;
    ok = n > 0;
    for (d = 0; d < n; d++) {
        probe_device(d, (unsigned int)blocks, spin_cycles);
        n_results = d + 1;
        if (!results[d].kernel_ran || results[d].error[0]) {
            char msg[ERR_LEN + 64];
            ok = 0;
            snprintf(msg, sizeof msg, "device %d: %s", d, results[d].error[0] ? results[d].error : "kernel did not run");
            set_top_error(msg);
        }
    }
    probe_allocs();
    print_json(ok);

    if (hold_s) {
        struct timespec ts = {(time_t)hold_s, 0};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
    }
    for (d = 0; d < n_results; d++)
        if (results[d].have_ctx)
            cu.DevicePrimaryCtxRelease(results[d].dev);
    return ok ? 0 : 1;
}
