/*
 * fake_libcuda.c: a stand-in libcuda.so.1 for testing scripts/gpu_e2e/cuda-probe.c on machines without a GPU.
 *
 * It exports exactly the driver API symbols cuda-probe resolves, with fake devices whose memory is host memory:
 * a "device pointer" of a small allocation is a real malloc pointer, so cuLaunchKernel can write its results.
 * It is strict where the real driver is (calls before cuInit, memory calls without a current context, frees of
 * unknown pointers, a primary context released more often than retained) so that misuse fails the tests, and it
 * reports leaked allocations or retained contexts on stderr at exit.
 *
 * Build: gcc -O2 -Wall -Wextra -Werror -shared -fPIC -o libcuda.so.1 fake_libcuda.c
 * Environment:
 *   FAKE_CUDA_DEVICES       number of devices (default 1, at most 8); 0 makes cuInit return CUDA_ERROR_NO_DEVICE
 *   FAKE_CUDA_SM_COUNT      multiprocessor count (default 132)
 *   FAKE_CUDA_ACTIVE_SMS    SMs the kernel's blocks land on (default: all), like an MPS thread-percentage limit
 *   FAKE_CUDA_TOTAL_MIB     device memory (default 81559)
 *   FAKE_CUDA_LIMIT_MIB     a per-process memory limit: cuMemGetInfo reports it as the total and allocations beyond
 *                           it fail with CUDA_ERROR_OUT_OF_MEMORY
 *   FAKE_CUDA_TOUCH_LIMIT_MIB  allocations larger than this succeed but fail on first use (cuMemsetD8)
 *   FAKE_CUDA_NAME          device name (default "NVIDIA H100 80GB HBM3")
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUstream;
typedef unsigned long long CUdeviceptr;
typedef struct {
    char bytes[16];
} CUuuid;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_IMAGE = 200,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_INVALID_PTX = 218,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_ILLEGAL_ADDRESS = 700,
    CUDA_ERROR_UNKNOWN = 999,
};

#define MIB (1ULL << 20)
#define MAX_DEV 8
#define BACKED_MAX (64 * MIB) /* larger allocations get an address but no host memory */

struct fake_ctx {
    unsigned int magic;
    CUdevice dev;
    int refs;
};

struct alloc {
    struct alloc *next;
    CUdevice dev;
    unsigned long long base, size;
    int backed;
};

static int initialized, n_dev;
static unsigned long long total_bytes, limit_bytes, touch_limit_bytes;
static int sm_count, active_sms;
static struct fake_ctx ctxs[MAX_DEV];
static __thread struct fake_ctx *current;
static struct alloc *allocs;
static unsigned long long used[MAX_DEV];
static unsigned long long next_fake_addr = 0x100000000000ULL;
static unsigned int module_token = 0x4d4f44u, function_token = 0x46554eu;

static long long env_ll(const char *name, long long dflt) {
    const char *s = getenv(name);
    char *end;
    long long v;
    if (!s || !*s)
        return dflt;
    v = strtoll(s, &end, 10);
    return *end ? dflt : v;
}

static CUresult need_ctx(void) {
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!current || current->refs < 1)
        return CUDA_ERROR_INVALID_CONTEXT;
    return CUDA_SUCCESS;
}

static struct alloc *find_alloc(CUdeviceptr p, unsigned long long len) {
    struct alloc *a;
    for (a = allocs; a; a = a->next)
        if (p >= a->base && p - a->base < a->size && len <= a->size - (p - a->base))
            return a;
    return NULL;
}

CUresult cuDriverGetVersion(int *version) {
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    *version = 12080;
    return CUDA_SUCCESS;
}

CUresult cuInit(unsigned int flags) {
    int i;
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    n_dev = (int)env_ll("FAKE_CUDA_DEVICES", 1);
    if (n_dev <= 0)
        return CUDA_ERROR_NO_DEVICE;
    if (n_dev > MAX_DEV)
        n_dev = MAX_DEV;
    sm_count = (int)env_ll("FAKE_CUDA_SM_COUNT", 132);
    active_sms = (int)env_ll("FAKE_CUDA_ACTIVE_SMS", sm_count);
    if (active_sms < 1 || active_sms > sm_count)
        active_sms = sm_count;
    total_bytes = (unsigned long long)env_ll("FAKE_CUDA_TOTAL_MIB", 81559) * MIB;
    limit_bytes = (unsigned long long)env_ll("FAKE_CUDA_LIMIT_MIB", 0) * MIB;
    if (!limit_bytes || limit_bytes > total_bytes)
        limit_bytes = total_bytes;
    touch_limit_bytes = (unsigned long long)env_ll("FAKE_CUDA_TOUCH_LIMIT_MIB", 0) * MIB;
    for (i = 0; i < MAX_DEV; i++) {
        ctxs[i].magic = 0x435458u;
        ctxs[i].dev = i;
    }
    initialized = 1;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count) {
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = n_dev;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *dev, int ordinal) {
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!dev)
        return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= n_dev)
        return CUDA_ERROR_INVALID_DEVICE;
    *dev = ordinal;
    return CUDA_SUCCESS;
}

static CUresult check_dev(CUdevice dev) {
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    return dev >= 0 && dev < n_dev ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
    const char *n = getenv("FAKE_CUDA_NAME");
    CUresult rc = check_dev(dev);
    if (rc)
        return rc;
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "%s", n ? n : "NVIDIA H100 80GB HBM3");
    return CUDA_SUCCESS;
}

static CUresult get_uuid(CUuuid *uuid, CUdevice dev) {
    static const unsigned char bytes[16] = {0x12, 0x34, 0xAB, 0xCD, 0xEF, 0x01, 0x23, 0x45,
                                            0x67, 0x89, 0xAB, 0xCD, 0xEF, 0xFE, 0xDC, 0x00};
    CUresult rc = check_dev(dev);
    if (rc)
        return rc;
    if (!uuid)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(uuid->bytes, bytes, sizeof bytes);
    uuid->bytes[15] = (char)dev;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) { return get_uuid(uuid, dev); }

CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) { return get_uuid(uuid, dev); }

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    CUresult rc = check_dev(dev);
    if (rc)
        return rc;
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    *bytes = (size_t)total_bytes;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *value, int attrib, CUdevice dev) {
    CUresult rc = check_dev(dev);
    if (rc)
        return rc;
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    switch (attrib) {
    case 16: /* CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT */
        *value = sm_count;
        return CUDA_SUCCESS;
    case 75: /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR */
        *value = 9;
        return CUDA_SUCCESS;
    case 76: /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR */
        *value = 0;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev) {
    CUresult rc = check_dev(dev);
    if (rc)
        return rc;
    if (!ctx)
        return CUDA_ERROR_INVALID_VALUE;
    ctxs[dev].refs++;
    *ctx = &ctxs[dev];
    return CUDA_SUCCESS;
}

static CUresult release(CUdevice dev) {
    CUresult rc = check_dev(dev);
    struct alloc **pp;
    if (rc)
        return rc;
    if (ctxs[dev].refs < 1)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (--ctxs[dev].refs > 0)
        return CUDA_SUCCESS;
    /* The context is destroyed: so are its allocations (counted as leaks at exit all the same). */
    for (pp = &allocs; *pp;) {
        struct alloc *a = *pp;
        if (a->dev == dev) {
            fprintf(stderr, "fake libcuda: leaked allocation of %llu bytes on device %d\n", a->size, dev);
            *pp = a->next;
            if (a->backed)
                free((void *)(uintptr_t)a->base);
            free(a);
        } else {
            pp = &a->next;
        }
    }
    used[dev] = 0;
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return release(dev); }

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) { return release(dev); }

CUresult cuCtxSetCurrent(CUcontext ctx) {
    struct fake_ctx *c = ctx;
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (c && (c < ctxs || c >= ctxs + MAX_DEV || c->magic != 0x435458u || c->refs < 1))
        return CUDA_ERROR_INVALID_CONTEXT;
    current = c;
    return CUDA_SUCCESS;
}

CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total) {
    CUresult rc = need_ctx();
    if (rc)
        return rc;
    if (!free_bytes || !total)
        return CUDA_ERROR_INVALID_VALUE;
    *total = (size_t)limit_bytes;
    *free_bytes = (size_t)(limit_bytes - used[current->dev]);
    return CUDA_SUCCESS;
}

CUresult cuModuleLoadData(CUmodule *module, const void *image) {
    const char *text = image;
    CUresult rc = need_ctx();
    if (rc)
        return rc;
    if (!module || !image)
        return CUDA_ERROR_INVALID_VALUE;
    /* PTX must be NUL-terminated text; look for the NUL within 1 MiB. */
    if (strnlen(text, 1 << 20) == (1 << 20))
        return CUDA_ERROR_INVALID_PTX;
    if (strncmp(text, ".version", 8) != 0 && !strstr(text, "\n.version"))
        return CUDA_ERROR_INVALID_PTX;
    if (!strstr(text, ".target") || !strstr(text, ".entry smid_kernel"))
        return CUDA_ERROR_INVALID_PTX;
    *module = &module_token;
    return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction *func, CUmodule module, const char *name) {
    CUresult rc = need_ctx();
    if (rc)
        return rc;
    if (!func || !name)
        return CUDA_ERROR_INVALID_VALUE;
    if (module != &module_token)
        return CUDA_ERROR_INVALID_HANDLE;
    if (strcmp(name, "smid_kernel") != 0)
        return CUDA_ERROR_NOT_FOUND;
    *func = &function_token;
    return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                        unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                        unsigned int sharedMemBytes, CUstream stream, void **kernelParams, void **extra) {
    CUdeviceptr out;
    struct alloc *a;
    unsigned int *slots, i;
    CUresult rc = need_ctx();
    if (rc)
        return rc;
    if (f != &function_token)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!gridDimX || !gridDimY || !gridDimZ || !blockDimX || !blockDimY || !blockDimZ ||
        (unsigned long long)blockDimX * blockDimY * blockDimZ > 1024 || sharedMemBytes > 48 * 1024)
        return CUDA_ERROR_INVALID_VALUE;
    if (stream || !kernelParams || extra || !kernelParams[0] || !kernelParams[1])
        return CUDA_ERROR_INVALID_VALUE;
    /* smid_kernel(u32 *out, u64 spin_cycles): params[i] points at the i-th argument's value. */
    memcpy(&out, kernelParams[0], sizeof out);
    a = find_alloc(out, 4ULL * gridDimX);
    if (!a || !a->backed || a->dev != current->dev)
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    slots = (unsigned int *)(uintptr_t)out;
    for (i = 0; i < gridDimX; i++)
        slots[i] = i % (unsigned int)active_sms;
    return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void) { return need_ctx(); }

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes) {
    struct alloc *a;
    CUresult rc = need_ctx();
    if (rc)
        return rc;
    if (!dptr || !bytes)
        return CUDA_ERROR_INVALID_VALUE;
    if (bytes > limit_bytes - used[current->dev])
        return CUDA_ERROR_OUT_OF_MEMORY;
    a = calloc(1, sizeof *a);
    if (!a)
        return CUDA_ERROR_UNKNOWN;
    a->dev = current->dev;
    a->size = bytes;
    if (bytes <= BACKED_MAX) {
        void *p = malloc(bytes);
        if (!p) {
            free(a);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        a->base = (CUdeviceptr)(uintptr_t)p;
        a->backed = 1;
    } else {
        a->base = next_fake_addr;
        next_fake_addr += (bytes + (1ULL << 30)) & ~((1ULL << 30) - 1);
    }
    a->next = allocs;
    allocs = a;
    used[a->dev] += bytes;
    *dptr = a->base;
    return CUDA_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr dptr) {
    struct alloc **pp;
    CUresult rc = need_ctx();
    if (rc)
        return rc;
    for (pp = &allocs; *pp; pp = &(*pp)->next) {
        struct alloc *a = *pp;
        if (a->base == dptr) {
            *pp = a->next;
            used[a->dev] -= a->size;
            if (a->backed)
                free((void *)(uintptr_t)a->base);
            free(a);
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t bytes) {
    struct alloc *a;
    CUresult rc = need_ctx();
    if (rc)
        return rc;
    if (!dst)
        return CUDA_ERROR_INVALID_VALUE;
    a = find_alloc(src, bytes);
    if (!a)
        return CUDA_ERROR_INVALID_VALUE;
    if (a->backed)
        memcpy(dst, (const void *)(uintptr_t)src, bytes);
    else
        memset(dst, 0, bytes);
    return CUDA_SUCCESS;
}

CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t count) {
    struct alloc *a;
    CUresult rc = need_ctx();
    if (rc)
        return rc;
    a = find_alloc(dst, count);
    if (!a)
        return CUDA_ERROR_INVALID_VALUE;
    if (touch_limit_bytes && a->size > touch_limit_bytes)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (a->backed)
        memset((void *)(uintptr_t)dst, value, count);
    return CUDA_SUCCESS;
}

CUresult cuGetErrorName(CUresult error, const char **name) {
    static const struct {
        CUresult code;
        const char *name;
    } names[] = {
        {CUDA_SUCCESS, "CUDA_SUCCESS"},
        {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE"},
        {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY"},
        {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED"},
        {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE"},
        {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE"},
        {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE"},
        {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT"},
        {CUDA_ERROR_INVALID_PTX, "CUDA_ERROR_INVALID_PTX"},
        {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE"},
        {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND"},
        {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS"},
        {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN"},
    };
    size_t i;
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    for (i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (names[i].code == error) {
            *name = names[i].name;
            return CUDA_SUCCESS;
        }
    }
    *name = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

__attribute__((destructor)) static void report_leaks(void) {
    struct alloc *a;
    int d;
    for (a = allocs; a; a = a->next)
        fprintf(stderr, "fake libcuda: leaked allocation of %llu bytes on device %d\n", a->size, a->dev);
    for (d = 0; d < MAX_DEV; d++)
        if (ctxs[d].refs)
            fprintf(stderr, "fake libcuda: leaked primary context of device %d (%d references)\n", d, ctxs[d].refs);
}
