# Copyright: kube-accel contributors
# Apache License 2.0
"""Plan rules: pure functions that list every problem with a host's plan before anything changes.

Public API (the preflight role reaches it through the ``accel_plan_problems`` filter):

- ``host_problems(host, settings, facts=None, pools=None) -> list[str]``: all problems of one host. ``settings``
  are the host's ``accel_*`` variables, ``facts`` its ``nvidia_gpus`` fact, ``pools`` its pool memberships from
  ``pool_memberships``.
- ``pool_memberships(export, host)``: ``[{"group", "vars"}]`` for each pool group (child of ``gpu_pools``) holding
  the host, from ``ansible-inventory --list --export`` output (group_vars are merged per host, so the groups'
  own settings are only visible there).
- ``vcuda_core_problems(value, where)``: a ``tencent.com/vcuda-core`` request is 1..100 or a multiple of 100.
- ``merge_spec_errors(host, problems, spec_errors)``: adds argument-spec errors for fields no rule already named.
- One ``rule_*`` function per rule, each ``(ctx) -> list[str]``; ``RULES`` lists them in order.

Every message reads ``<host>: <field> = <value>: <what is wrong>; allowed: <what is allowed>``.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

from ansible.module_utils.accel_constants import MODES, VCUDA_CORES_PER_GPU, VGPU_BACKENDS
from ansible.module_utils.accel_inventory import RUNTIME_FACTS, VARIABLES, did_you_mean
from ansible.module_utils.accel_mig import MODELS, driver_problems, geometry_problems

MPS_MIN_REPLICAS = 2
# MPS client CUDA contexts per GPU by compute capability, newest first. NVIDIA's nvidia-cuda-mps-control(1): "For
# compute capability SM 3.5 through SM 6.0 the limit is 16 clients per GPU at a time. Compute capability SM 7.0 has a
# limit of 48." Pre-Volta GPUs are refused for MPS altogether, so the Volta row is the only one kube-accel serves.
MPS_MAX_CLIENTS_BY_CC = (((7, 0), 48),)
MPS_MAX_REPLICAS = MPS_MAX_CLIENTS_BY_CC[0][1]
MPS_MIN_COMPUTE_CAPABILITY = MPS_MAX_CLIENTS_BY_CC[-1][0]  # Volta: isolated client address spaces
# Time-slicing replicas per GPU. The plugin needs at least 2 (k8s-device-plugin v0.20.0 api/config/v1/replicas.go:251)
# and sets no maximum; every replica is one more pod whose CUDA context (a few hundred MiB) shares the GPU's memory
# without isolation, so kube-accel stops at 64, beyond which a pod's turn and memory share stop being useful.
TIMESLICE_MIN_REPLICAS = 2
TIMESLICE_MAX_REPLICAS = 64
TIMESLICE_VARIABLES = ("accel_timeslice_replicas", "accel_timeslice_rename_by_default",
                       "accel_timeslice_fail_requests_greater_than_one")
GPU_MANAGER_MAX_CUDA_MAJOR = 11  # GPU-Manager's vcuda library intercepts the CUDA 11 driver API only
# gpu-manager v1.1.5 talks CRI v1alpha2 only (pkg/runtime/runtime.go:15), which containerd 2.0 removed, and finds
# container processes under the cgroup v1 memory hierarchy only (pkg/types/types.go:55, /sys/fs/cgroup/memory).
GPU_MANAGER_MAX_CONTAINERD_MAJOR = 1
GPU_MANAGER_CGROUP_VERSION = 1
CUDA12_FIRST_DRIVER_BRANCH = 525  # R525 is the first branch shipping a CUDA 12.0 driver
# kubelet_gpu sets the NUMA policy in a kubelet --config-dir drop-in: alpha behind KubeletConfigDropInDir in
# 1.28-1.29, on by default from 1.30; older kubelets do not start with the flag.
MIN_KUBERNETES_NUMA = (1, 30)
PCI_ID_RE = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{4}$")
POOLS_GROUP = "gpu_pools"


@dataclass
class Context:
    host: str
    settings: dict
    facts: dict = field(default_factory=dict)
    pools: list | None = None

    def get(self, name, default=None):
        return self.settings.get(name, default)

    @property
    def gpus(self) -> list:
        return list((self.facts or {}).get("gpus") or [])

    def problem(self, field_name: str, value, what: str, allowed: str) -> str:
        shown = "(not set)" if value is _UNSET else repr(value)
        return f"{self.host}: {field_name} = {shown}: {what}; allowed: {allowed}"


_UNSET = object()


def _as_int(value):
    """An int, or an int written as a string (argument specs convert those); ``None`` otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


_BOOL_WORDS = ("true", "false", "yes", "no", "on", "off", "1", "0")


def _as_bool(value) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "1", "on")
    return bool(value)


def _gpu_label(gpu: dict) -> str:
    return f"GPU {gpu.get('index')} ({gpu.get('name')})"


def _version_tuple(text) -> tuple[int, int] | None:
    match = re.match(r"^\s*v?(\d+)\.(\d+)", str(text))
    return (int(match.group(1)), int(match.group(2))) if match else None


def _driver_branch(value) -> int | None:
    """Branch number of ``accel_driver_branch``; names may carry a flavour suffix ("535-server", "550-open")."""
    match = re.match(r"^\s*(\d+)", "" if value is None else str(value))
    return int(match.group(1)) if match else None


def rule_mode(ctx: Context) -> list[str]:
    mode = ctx.get("accel_mode", _UNSET)
    if mode in MODES:
        return []
    what = "not set for this GPU host" if mode is _UNSET else "not a kube-accel mode"
    return [ctx.problem("accel_mode", mode, what,
                        f"{', '.join(MODES)} (MIG slices are mode pgpu with accel_mig_geometry)")]


def rule_one_pool(ctx: Context) -> list[str]:
    if ctx.pools is None:  # membership unknown (no inventory export): nothing to check
        return []
    if not ctx.pools:
        return [f"{ctx.host}: group_names: the host is in {POOLS_GROUP} but in none of its pool groups; "
                f"allowed: exactly one pool group under {POOLS_GROUP}"]
    if len(ctx.pools) == 1:
        return []
    described = ", ".join(f"{p['group']} (accel_mode={p['vars'].get('accel_mode', '(inherited)')})"
                          for p in ctx.pools)
    modes = {p["vars"].get("accel_mode") for p in ctx.pools if "accel_mode" in p["vars"]}
    what = "different modes on one host" if len(modes) > 1 else "one host in two pools"
    return [f"{ctx.host}: group_names = {[p['group'] for p in ctx.pools]!r}: {what}: {described}; allowed: "
            f"exactly one pool group under {POOLS_GROUP}, so one mode per host"]


def rule_vgpu_backend(ctx: Context) -> list[str]:
    if ctx.get("accel_mode") != "vgpu":
        return []
    backend = ctx.get("accel_vgpu_backend", _UNSET)
    if backend not in VGPU_BACKENDS:
        what = "required with accel_mode vgpu" if backend is _UNSET else "not a vGPU backend"
        return [ctx.problem("accel_vgpu_backend", backend, what, ", ".join(VGPU_BACKENDS))]
    if backend != "gpu-manager":
        return []
    allowed = (f"hami for CUDA 12 and newer drivers; gpu-manager only with a CUDA "
               f"{GPU_MANAGER_MAX_CUDA_MAJOR}.x driver (branch {CUDA12_FIRST_DRIVER_BRANCH - 5} or older)")
    problems = []
    major = (ctx.facts or {}).get("cuda_driver_version_major")
    if isinstance(major, int) and major > GPU_MANAGER_MAX_CUDA_MAJOR:
        problems.append(ctx.problem(
            "accel_vgpu_backend", backend,
            f"GPU-Manager does not support the CUDA {ctx.facts.get('cuda_driver_version')} driver "
            f"(driver {ctx.facts.get('driver_version')}) on this host", allowed))
    runtime = (ctx.facts or {}).get("host_runtime") or {}
    if runtime.get("cgroup_version") not in (None, GPU_MANAGER_CGROUP_VERSION):
        problems.append(ctx.problem(
            "accel_vgpu_backend", backend,
            f"the host runs cgroup v{runtime['cgroup_version']}; GPU-Manager v1.1.5 reads cgroup v1 paths only",
            "hami on cgroup v2 hosts; gpu-manager only on cgroup v1 hosts"))
    containerd = _version_tuple(runtime.get("containerd_version") or "")
    if containerd is not None and containerd[0] > GPU_MANAGER_MAX_CONTAINERD_MAJOR:
        problems.append(ctx.problem(
            "accel_vgpu_backend", backend,
            f"the host runs containerd {runtime['containerd_version']}, which no longer serves CRI v1alpha2, the "
            "only CRI GPU-Manager v1.1.5 speaks", "hami with containerd 2; gpu-manager only with containerd 1.x"))
    branch = _driver_branch(ctx.get("accel_driver_branch"))
    if branch is not None and branch >= CUDA12_FIRST_DRIVER_BRANCH:
        problems.append(ctx.problem(
            "accel_driver_branch", ctx.get("accel_driver_branch"),
            "with accel_vgpu_backend 'gpu-manager' the planned driver branch ships a CUDA 12+ driver, which "
            "GPU-Manager does not support", allowed))
    return problems


def rule_hami_settings(ctx: Context) -> list[str]:
    if ctx.get("accel_mode") != "vgpu" or ctx.get("accel_vgpu_backend") != "hami":
        return []
    problems = []
    if "accel_vgpu_split_count" in ctx.settings:
        raw = ctx.get("accel_vgpu_split_count")
        split = _as_int(raw)
        if split is None or split < 1:
            problems.append(ctx.problem("accel_vgpu_split_count", raw, "not a positive task count",
                                        "an integer >= 1 (tasks sharing one GPU)"))
    for name in ("accel_vgpu_memory_scaling", "accel_vgpu_core_scaling"):
        if name not in ctx.settings:
            continue
        raw = ctx.get(name)
        try:
            ok = not isinstance(raw, bool) and float(raw) > 0
        except (TypeError, ValueError):
            ok = False
        if not ok:
            problems.append(ctx.problem(name, raw, "not a positive factor",
                                        "a number > 0 (1.0 = no oversubscription)"))
    return problems


def rule_mig_exclusive(ctx: Context) -> list[str]:
    mode = ctx.get("accel_mode")
    if mode not in ("vgpu", "mps", "timeslice"):
        return []
    allowed = ("accel_mode pgpu for MIG; vgpu, mps and timeslice need GPUs with MIG disabled "
               "(no accel_mig_geometry, accel_mig_strategy none)")
    problems = []
    for gpu in ctx.gpus:
        if gpu.get("mig_mode_current") or gpu.get("mig_mode_pending"):
            problems.append(ctx.problem(
                "accel_mode", mode,
                f"{_gpu_label(gpu)} has MIG enabled (current={gpu.get('mig_mode_current')}, "
                f"pending={gpu.get('mig_mode_pending')})", allowed))
    if ctx.get("accel_mig_geometry"):
        problems.append(ctx.problem("accel_mig_geometry", ctx.get("accel_mig_geometry"),
                                    f"a MIG plan on a pool with accel_mode {mode}", allowed))
    elif ctx.get("accel_mig_strategy") in ("single", "mixed"):
        problems.append(ctx.problem("accel_mig_strategy", ctx.get("accel_mig_strategy"),
                                    f"a MIG plan on a pool with accel_mode {mode}", allowed))
    return problems


def mps_max_clients(compute_capability: tuple[int, int]) -> int | None:
    """MPS clients one GPU of this compute capability serves; None below Volta (kube-accel refuses MPS there)."""
    for minimum, clients in MPS_MAX_CLIENTS_BY_CC:
        if compute_capability >= minimum:
            return clients
    return None


def rule_mps(ctx: Context) -> list[str]:
    if ctx.get("accel_mode") != "mps":
        return []
    problems = []
    raw = ctx.get("accel_mps_replicas", _UNSET)
    replicas = _as_int(raw)
    in_range = replicas is not None and MPS_MIN_REPLICAS <= replicas <= MPS_MAX_REPLICAS
    if not in_range:
        what = "required with accel_mode mps" if raw is _UNSET else "out of range"
        problems.append(ctx.problem("accel_mps_replicas", raw, what,
                                    f"an integer {MPS_MIN_REPLICAS}..{MPS_MAX_REPLICAS} "
                                    f"(MPS clients per GPU)"))
    seen = set()
    for gpu in ctx.gpus:
        cc = _version_tuple(gpu.get("compute_capability", ""))
        if cc is not None and cc < MPS_MIN_COMPUTE_CAPABILITY:
            problems.append(ctx.problem(
                "accel_mode", "mps",
                f"{_gpu_label(gpu)} has compute capability {gpu.get('compute_capability')} (pre-Volta)",
                "mps on compute capability 7.0 (Volta) or newer; use pgpu or vgpu on older GPUs"))
            continue
        limit = mps_max_clients(cc) if cc is not None else None
        if in_range and limit is not None and replicas > limit and (gpu.get("name"), cc) not in seen:
            seen.add((gpu.get("name"), cc))
            problems.append(ctx.problem(
                "accel_mps_replicas", raw,
                f"{_gpu_label(gpu)} (compute capability {gpu.get('compute_capability')}) serves at most {limit} "
                f"MPS clients", f"an integer {MPS_MIN_REPLICAS}..{limit} on this GPU"))
    return problems


def rule_timeslice(ctx: Context) -> list[str]:
    """Time-slicing settings belong to mode timeslice only (one sharing mechanism per GPU: not with MPS, whose
    daemon owns the GPU, nor on a pgpu pool); replicas in range; the two switches are booleans."""
    mode = ctx.get("accel_mode")
    problems = []
    if mode != "timeslice":
        for name in TIMESLICE_VARIABLES:
            if name in ctx.settings:
                problems.append(ctx.problem(
                    name, ctx.get(name), f"a time-slicing setting on a pool with accel_mode {mode}",
                    "accel_timeslice_* only with accel_mode timeslice (one sharing mechanism per GPU: "
                    "time-slicing is never combined with MPS or MIG)"))
        return problems
    raw = ctx.get("accel_timeslice_replicas", _UNSET)
    replicas = _as_int(raw)
    if replicas is None or not TIMESLICE_MIN_REPLICAS <= replicas <= TIMESLICE_MAX_REPLICAS:
        what = "required with accel_mode timeslice" if raw is _UNSET else "out of range"
        problems.append(ctx.problem("accel_timeslice_replicas", raw, what,
                                    f"an integer {TIMESLICE_MIN_REPLICAS}..{TIMESLICE_MAX_REPLICAS} "
                                    f"(pods sharing one GPU in turns)"))
    for name in TIMESLICE_VARIABLES[1:]:
        value = ctx.get(name)
        if name in ctx.settings and not (isinstance(value, bool) or str(value).strip().lower() in _BOOL_WORDS):
            problems.append(ctx.problem(name, ctx.get(name), "not a boolean", "true or false"))
    return problems


def rule_mig_geometry(ctx: Context) -> list[str]:
    geometry = ctx.get("accel_mig_geometry")
    if not geometry or ctx.get("accel_mode") != "pgpu":
        return []  # vgpu/mps with a MIG plan are reported by rule_mig_exclusive
    if not isinstance(geometry, dict):
        return [ctx.problem("accel_mig_geometry", geometry, "not a mapping",
                            "a mapping of MIG profile -> count per GPU, e.g. {'3g.40gb': 1, '1g.10gb': 4}")]
    problems = []
    strategy = ctx.get("accel_mig_strategy", _UNSET)
    if strategy not in ("single", "mixed"):
        problems.append(ctx.problem("accel_mig_strategy", strategy, "a MIG geometry needs a MIG strategy",
                                    "single (one profile, counted as nvidia.com/gpu) or mixed"))
    elif strategy == "single" and len(geometry) > 1:
        problems.append(ctx.problem("accel_mig_geometry", geometry,
                                    "accel_mig_strategy single exposes every MIG device as nvidia.com/gpu, so "
                                    "all must have the same profile",
                                    "one profile with strategy single, or accel_mig_strategy mixed"))
    device_ids = {}
    for gpu in ctx.gpus:
        device_ids.setdefault(gpu.get("pci_device_id"), gpu)
    if device_ids:
        # The planned branch is what MIG will run on; the installed driver only counts when none is planned.
        branch = _driver_branch(ctx.get("accel_driver_branch"))
        for device_id, gpu in device_ids.items():
            texts = geometry_problems(device_id, geometry, gpu=_gpu_label(gpu))
            texts += driver_problems(device_id, geometry, ctx.facts.get("driver_version"), branch)
            problems.extend(f"{ctx.host}: {text}" for text in texts)
        return problems
    # No GPU visible yet (driver not installed): the geometry must at least be legal on some MIG model.
    per_model = {name: geometry_problems(m.device_ids[0], geometry) for name, m in MODELS.items()}
    if all(per_model.values()):
        # Name the model whose profile names the geometry uses, if any: its problem is the telling one.
        closest = min(per_model.items(), key=lambda item: (any("does not exist" in p for p in item[1]),
                                                           len(item[1])))
        problems.append(ctx.problem("accel_mig_geometry", geometry,
                                    f"legal on no MIG-capable GPU model (e.g. {closest[0]}: "
                                    f"{closest[1][0]})",
                                    "a geometry legal on the pool's GPU model"))
    return problems


def rule_mig_owner(ctx: Context) -> list[str]:
    if not ctx.get("accel_mig_geometry") or ctx.get("accel_mig_owner", "operator") != "operator":
        return []
    if "accel_gpu_operator_enabled" in ctx.settings and not _as_bool(ctx.get("accel_gpu_operator_enabled")):
        return [ctx.problem("accel_mig_owner", ctx.get("accel_mig_owner", "operator"),
                            "the GPU Operator's mig-manager applies the geometry, but accel_gpu_operator_enabled "
                            "is false", "accel_mig_owner: host, or accel_gpu_operator_enabled: true")]
    return []


def rule_sriov(ctx: Context) -> list[str]:
    raw = ctx.get("accel_sriov_numvfs", 0)
    numvfs = _as_int(raw)
    if numvfs is None or numvfs < 0:
        return [ctx.problem("accel_sriov_numvfs", raw, "not a count", "an integer >= 0 (0 disables SR-IOV)")]
    problems = []
    if numvfs == 0:
        return problems
    for gpu in ctx.gpus:
        total = gpu.get("sriov_totalvfs") or 0
        if numvfs > total:
            what = (f"{_gpu_label(gpu)} is not SR-IOV capable (sriov_totalvfs 0)" if total == 0
                    else f"above {_gpu_label(gpu)}'s sriov_totalvfs {total}")
            problems.append(ctx.problem("accel_sriov_numvfs", raw, what, f"0..{total}"))
    return problems


def rule_vfio(ctx: Context) -> list[str]:
    problems = []
    if _as_bool(ctx.get("accel_vfio_passthrough", False)):
        iommu_on = bool((ctx.facts or {}).get("iommu_enabled"))
        if not iommu_on and not _as_bool(ctx.get("accel_iommu", False)):
            problems.append(ctx.problem(
                "accel_vfio_passthrough", ctx.get("accel_vfio_passthrough"),
                "vfio-pci passthrough needs the IOMMU, which is neither enabled on this host (no "
                "/sys/kernel/iommu_groups) nor planned (accel_iommu is false)",
                "accel_iommu: true with accel_vfio_passthrough, or accel_vfio_passthrough: false"))
    ids = ctx.get("accel_vfio_pci_ids") or []
    if not isinstance(ids, list):
        problems.append(ctx.problem("accel_vfio_pci_ids", ids, "not a list", "a list of \"vvvv:dddd\" IDs"))
        return problems
    for pci_id in ids:
        if not isinstance(pci_id, str) or not PCI_ID_RE.match(pci_id):
            problems.append(ctx.problem("accel_vfio_pci_ids", pci_id, "not a PCI vendor:device ID",
                                        "4 hex digits, a colon, 4 hex digits, e.g. \"10de:20b5\""))
    return problems


def rule_control_plane_cidrs(ctx: Context) -> list[str]:
    value = ctx.get("accel_control_plane_cidrs")
    if not isinstance(value, list):
        return []  # absent, or not a list: the argument spec reports the type
    bad = []
    for cidr in value:
        try:
            ipaddress.ip_network(str(cidr), strict=True)
        except ValueError:
            bad.append(cidr)
    if not bad:
        return []
    return [ctx.problem("accel_control_plane_cidrs", value, f"{bad!r} not network addresses in CIDR notation",
                        'CIDRs such as "10.0.0.10/32" or "10.0.0.0/24" (no host bits set)')]


def rule_kubernetes_numa(ctx: Context) -> list[str]:
    policy = ctx.get("accel_numa_policy", "none")
    if policy in (None, "none"):
        return []
    raw = ctx.get("accel_kubernetes_version", _UNSET)
    version = _version_tuple(raw) if raw is not _UNSET else None
    minimum = ".".join(map(str, MIN_KUBERNETES_NUMA))
    if version is None:
        return [ctx.problem("accel_kubernetes_version", raw,
                            f"needed to check accel_numa_policy {policy!r} and not a version",
                            f"a Kubernetes version such as \"1.36\" (at least {minimum})")]
    if version < MIN_KUBERNETES_NUMA:
        return [ctx.problem("accel_kubernetes_version", raw,
                            f"accel_numa_policy {policy!r} (NUMA-aligned GPUs through the kubelet Topology "
                            f"Manager) needs Kubernetes {minimum} or newer: kube-accel sets it in a kubelet "
                            f"--config-dir drop-in, a flag kubelet accepts by default only from {minimum}",
                            f">= {minimum}, or accel_numa_policy none")]
    return []


def rule_unknown_variables(ctx: Context) -> list[str]:
    problems = []
    for name in sorted(ctx.settings):
        if name.startswith("accel_") and name not in VARIABLES and name not in RUNTIME_FACTS:
            hint = did_you_mean(name)
            what = f"unknown variable (did you mean {hint}?)" if hint else "unknown variable"
            problems.append(ctx.problem(name, ctx.settings[name], what,
                                        "the variables of kube-accel's inventory model (README)"))
    # Names without the prefix in a pool's own group_vars, when they look like a known variable.
    for pool in ctx.pools or []:
        for name in sorted(pool["vars"]):
            if name.startswith(("accel_", "ansible_")) or name in ctx.settings:
                continue
            hint = did_you_mean(name)
            if hint:
                problems.append(ctx.problem(
                    name, pool["vars"][name],
                    f"unknown variable in pool group {pool['group']} (did you mean {hint}?)",
                    "the variables of kube-accel's inventory model (README)"))
    return problems


RULES = (
    rule_unknown_variables,
    rule_mode,
    rule_one_pool,
    rule_vgpu_backend,
    rule_hami_settings,
    rule_mig_exclusive,
    rule_mps,
    rule_timeslice,
    rule_mig_geometry,
    rule_mig_owner,
    rule_sriov,
    rule_vfio,
    rule_kubernetes_numa,
    rule_control_plane_cidrs,
)


def host_problems(host: str, settings: dict, facts: dict | None = None, pools: list | None = None) -> list[str]:
    """Every problem with one host's plan (empty list = the plan is fine)."""
    ctx = Context(host=host, settings=dict(settings or {}), facts=dict(facts or {}), pools=pools)
    problems: list[str] = []
    for rule in RULES:
        problems.extend(rule(ctx))
    return problems


def pool_memberships(export: dict, host: str) -> list[dict]:
    """Pool groups (children of gpu_pools) that hold ``host``, each with its own vars."""
    def hosts_of(group: str, seen: set) -> set:
        if group in seen:
            return set()
        seen.add(group)
        entry = export.get(group) or {}
        found = set(entry.get("hosts") or [])
        for child in entry.get("children") or []:
            found |= hosts_of(child, seen)
        return found

    pools = []
    for group in (export.get(POOLS_GROUP) or {}).get("children") or []:
        if host in hosts_of(group, set()):
            pools.append({"group": group, "vars": dict((export.get(group) or {}).get("vars") or {})})
    return pools


def vcuda_core_problems(value, where: str = "tencent.com/vcuda-core") -> list[str]:
    """A vcuda-core request is a share of one GPU (1..100) or whole GPUs (a multiple of 100)."""
    number = _as_int(value)
    if number is not None and (1 <= number <= VCUDA_CORES_PER_GPU or
                               (number > 0 and number % VCUDA_CORES_PER_GPU == 0)):
        return []
    return [f"{where} = {value!r}: not a valid vcuda-core request; allowed: 1..{VCUDA_CORES_PER_GPU} "
            f"(a share of one GPU) or a multiple of {VCUDA_CORES_PER_GPU} (whole GPUs)"]


_FIELD_RE = re.compile(r"\b(accel_[a-z0-9_]+)\b")


def merge_spec_errors(host: str, problems: list, spec_errors) -> list[str]:
    """Argument-spec errors (types, choices) for fields that no plan rule already reported."""
    named = {m for text in problems for m in _FIELD_RE.findall(text.split(";")[0])}
    merged = list(problems)
    for error in spec_errors or []:
        # Unknown names ("Unsupported parameters ... Supported parameters include ...") are rule_unknown_variables'
        # job, which knows the run-time facts and suggests the intended name.
        if "Supported parameters include" in str(error):
            continue
        fields = set(_FIELD_RE.findall(str(error)))
        if fields and fields <= named:
            continue
        merged.append(f"{host}: {error}")
    return merged

