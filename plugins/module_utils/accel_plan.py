# Copyright: kube-accel contributors
# Apache License 2.0
"""Plan rules: pure functions that list every problem with a host's plan before anything changes.

Public API (the preflight role reaches it through the ``accel_plan_problems`` filter):

- ``host_problems(host, settings, facts=None, pools=None, pool_groups=None) -> list[str]``: all problems of one
  host. ``settings`` are the host's ``accel_*`` variables, ``facts`` its ``nvidia_gpus`` fact, ``pools`` its pool
  memberships from ``pool_memberships``, ``pool_groups`` every pool group's settings from ``pool_groups``.
- ``pool_groups(export)``: every pool group with the settings its hosts get from group vars (all, gpu_pools, the
  group), to find two groups that name one pool with different settings.
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

from ansible_collections.kube_accel.gpu.plugins.module_utils import accel_driver as driver
from ansible_collections.kube_accel.gpu.plugins.module_utils import accel_k8s_names as names
from ansible_collections.kube_accel.gpu.plugins.module_utils.accel_constants import (
    MIN_KUBERNETES,
    MODES,
    VCUDA_CORES_PER_GPU,
    VGPU_BACKENDS,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.accel_inventory import (
    MPS_MAX_REPLICAS,
    MPS_MIN_REPLICAS,
    RUNTIME_FACTS,
    TIMESLICE_MAX_REPLICAS,
    TIMESLICE_MIN_REPLICAS,
    VARIABLES,
    default_of,
    did_you_mean,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.accel_mig import (
    MIN_DRIVER,
    MODELS,
    driver_problems,
    geometry_problems,
    model_for_device,
)

# MPS client CUDA contexts per GPU by compute capability, newest first (nvidia-cuda-mps-control(1); the limits are
# accel_inventory's). Pre-Volta GPUs are refused for MPS altogether, so the Volta row is the only one kube-accel serves.
MPS_MAX_CLIENTS_BY_CC = (((7, 0), MPS_MAX_REPLICAS),)
MPS_MIN_COMPUTE_CAPABILITY = MPS_MAX_CLIENTS_BY_CC[-1][0]  # Volta: isolated client address spaces
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
# The first driver branch whose CUDA knows each GPU architecture (CUDA Toolkit release notes, "CUDA Toolkit and
# Corresponding Driver Versions": sm_70 CUDA 9.0 / 384, sm_75 10.0 / 410, sm_80 11.0 / 450, sm_86 11.1 / 455, sm_89
# and sm_90 11.8 / 520, sm_100 and sm_120 12.8 / 570), newest first. A model with a published minimum (accel_mig
# MIN_DRIVER, the MIG User Guide's table) uses that instead: H100 525, H200 550, B300 580.
MIN_BRANCH_BY_CC = (((12, 0), 570), ((10, 0), 570), ((9, 0), 520), ((8, 9), 520), ((8, 6), 455), ((8, 0), 450),
                    ((7, 5), 410), ((7, 0), 384))
# Where an image registry prefix is spliced: registry[:port][/path], as a container image reference's domain and
# path components are written (no scheme, no tag or digest, no trailing "/").
REGISTRY_PREFIX_RE = re.compile(
    r"^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*(:[0-9]{1,5})?"
    r"(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*$")
SEMVER_RE = re.compile(r"^v?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$")
REBOOT_SERIAL_PERCENT_RE = re.compile(r"^\s*(\d+)\s*%\s*$")


@dataclass
class Context:
    host: str
    settings: dict
    facts: dict = field(default_factory=dict)
    pools: list | None = None
    pool_groups: list | None = None

    def get(self, name, default=None):
        return self.settings.get(name, default)

    def value(self, name):
        """The variable as the roles will use it: the inventory's value, else its default (accel_inventory)."""
        return self.settings.get(name, default_of(name))

    @property
    def gpus(self) -> list:
        return list((self.facts or {}).get("gpus") or [])

    def problem(self, field_name: str, value, what: str, allowed: str) -> str:
        shown = "(not set)" if value is _UNSET else repr(value)
        return f"{self.host}: {field_name} = {shown}: {what}; allowed: {allowed}"


_UNSET = object()


def _int_problem(ctx: Context, name: str, raw, low: int, high: int | None, meaning: str) -> list[str]:
    """``raw`` is an integer in low..high (high None: no maximum); says "not an integer" for text and floats."""
    allowed = f"an integer {low}..{high} ({meaning})" if high is not None else f"an integer >= {low} ({meaning})"
    number = _as_int(raw)
    if number is None:
        return [ctx.problem(name, raw, "not an integer", allowed)]
    if number < low or (high is not None and number > high):
        return [ctx.problem(name, raw, "out of range", allowed)]
    return []


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
        problems += _int_problem(ctx, "accel_vgpu_split_count", ctx.get("accel_vgpu_split_count"), 1, None,
                                 "tasks sharing one GPU")
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
    if raw is _UNSET:
        problems.append(ctx.problem("accel_mps_replicas", raw, "required with accel_mode mps",
                                    f"an integer {MPS_MIN_REPLICAS}..{MPS_MAX_REPLICAS} (MPS clients per GPU)"))
    else:
        problems += _int_problem(ctx, "accel_mps_replicas", raw, MPS_MIN_REPLICAS, MPS_MAX_REPLICAS,
                                 "MPS clients per GPU")
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
    if raw is _UNSET:
        problems.append(ctx.problem("accel_timeslice_replicas", raw, "required with accel_mode timeslice",
                                    f"an integer {TIMESLICE_MIN_REPLICAS}..{TIMESLICE_MAX_REPLICAS} "
                                    f"(pods sharing one GPU in turns)"))
    else:
        problems += _int_problem(ctx, "accel_timeslice_replicas", raw, TIMESLICE_MIN_REPLICAS,
                                 TIMESLICE_MAX_REPLICAS, "pods sharing one GPU in turns")
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
    if not ctx.get("accel_mig_geometry") or ctx.value("accel_mig_owner") != "operator":
        return []
    if "accel_gpu_operator_enabled" in ctx.settings and not _as_bool(ctx.get("accel_gpu_operator_enabled")):
        return [ctx.problem("accel_mig_owner", ctx.value("accel_mig_owner"),
                            "the GPU Operator's mig-manager applies the geometry, but accel_gpu_operator_enabled "
                            "is false", "accel_mig_owner: host, or accel_gpu_operator_enabled: true")]
    return []


def rule_sriov(ctx: Context) -> list[str]:
    raw = ctx.value("accel_sriov_numvfs")
    problems = _int_problem(ctx, "accel_sriov_numvfs", raw, 0, None, "0 disables SR-IOV")
    if problems:
        return problems
    numvfs = _as_int(raw)
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
    if _as_bool(ctx.value("accel_vfio_passthrough")):
        iommu_on = bool((ctx.facts or {}).get("iommu_enabled"))
        if not iommu_on and not _as_bool(ctx.value("accel_iommu")):
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
        if not isinstance(pci_id, str) or not PCI_ID_RE.fullmatch(pci_id):
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
    policy = ctx.value("accel_numa_policy")
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


def rule_names(ctx: Context) -> list[str]:
    """Values that become Kubernetes names, checked the way the API server checks them (accel_k8s_names)."""
    problems = []
    pool = ctx.get("accel_pool", _UNSET)
    if pool is not _UNSET:
        what = "empty" if pool in ("", None) else names.label_value(pool)
        if what:
            problems.append(ctx.problem("accel_pool", pool, f"{what}: it becomes the kube-accel.io/pool label and "
                                        "taint value", names.LABEL_VALUE_ALLOWED))
    for name, may_be_empty in (("accel_namespace", False), ("accel_monitoring_dashboards_namespace", True),
                               ("accel_monitoring_hpa_adapter_namespace", True)):
        value = ctx.get(name, _UNSET)
        if value is _UNSET or (may_be_empty and value in ("", None)):
            continue
        what = names.dns1123_label(value)
        if what:
            problems.append(ctx.problem(name, value, f"{what}: not a namespace name", names.DNS1123_LABEL_ALLOWED))
    secrets = ctx.get("accel_image_pull_secrets")
    if isinstance(secrets, list):  # not a list: the argument spec reports the type
        for secret in secrets:
            what = names.dns1123_subdomain(secret)
            if what:
                problems.append(ctx.problem("accel_image_pull_secrets", secret, f"{what}: not a Secret name",
                                            names.DNS1123_SUBDOMAIN_ALLOWED))
    for name in ("accel_gpu_operator_service_monitor_labels", "accel_monitoring_rule_labels"):
        value = ctx.get(name)
        if isinstance(value, dict):
            for what in names.labels(value):
                problems.append(ctx.problem(name, value, what,
                                            f"label keys: {names.LABEL_KEY_ALLOWED}; values: "
                                            f"{names.LABEL_VALUE_ALLOWED}"))
    return problems


def _reboot_serial_problem(value) -> str:
    if isinstance(value, list):
        return next((p for p in map(_reboot_serial_problem, value) if p), "" if value else "an empty list")
    match = REBOOT_SERIAL_PERCENT_RE.match(value) if isinstance(value, str) else None
    if match:
        return "" if 1 <= int(match.group(1)) <= 100 else f"{value!r} is not a percentage 1..100"
    number = _as_int(value)
    if number is None:
        return f"{value!r} is neither a host count nor a percentage"
    return "" if number >= 1 else f"{value!r} is not a host count >= 1"


def rule_cluster_settings(ctx: Context) -> list[str]:
    """Cluster-wide settings (group_vars/all) whose type alone does not make them usable."""
    problems = []
    registry = ctx.get("accel_image_registry")
    if isinstance(registry, str) and registry and not REGISTRY_PREFIX_RE.fullmatch(registry):
        problems.append(ctx.problem("accel_image_registry", registry,
                                    "not a registry prefix (it replaces the registry of every image reference)",
                                    "host[:port][/path], e.g. \"registry.example.com:5000/mirror\": no scheme, "
                                    "tag, digest or trailing \"/\"; empty for the upstream registries"))
    serial = ctx.get("accel_reboot_serial", _UNSET)
    if serial is not _UNSET:
        what = _reboot_serial_problem(serial)
        if what:
            problems.append(ctx.problem("accel_reboot_serial", serial, what,
                                        "a host count >= 1, a percentage \"1%\"..\"100%\", or a list of those "
                                        "(Ansible serial batches)"))
    if "accel_reboot_max_fail_percentage" in ctx.settings:
        problems += _int_problem(ctx, "accel_reboot_max_fail_percentage",
                                 ctx.get("accel_reboot_max_fail_percentage"), 0, 100, "percent of a reboot batch")
    if "accel_run_lock_wait" in ctx.settings:
        problems += _int_problem(ctx, "accel_run_lock_wait", ctx.get("accel_run_lock_wait"), 0, None,
                                 "seconds; 0 fails at once")
    version = ctx.get("accel_gpu_operator_chart_version")
    if version not in (None, "") and not (isinstance(version, str) and SEMVER_RE.fullmatch(version)):
        problems.append(ctx.problem("accel_gpu_operator_chart_version", version, "not a chart version",
                                    "a semantic version such as \"v26.7.0\" (Helm chart versions are SemVer 2)"))
    kube = ctx.get("accel_kubernetes_version")
    oldest = ".".join(map(str, MIN_KUBERNETES))
    if kube not in (None, "") and not re.fullmatch(r"v?1\.\d+(\.\d+)?", str(kube)):
        problems.append(ctx.problem("accel_kubernetes_version", kube, "not a Kubernetes version",
                                    f"a version such as \"1.36\" or \"v1.36.3\", {oldest} or newer"))
    elif kube not in (None, "") and _version_tuple(kube) < MIN_KUBERNETES:
        problems.append(ctx.problem("accel_kubernetes_version", kube,
                                    f"older than every kube-accel chart accepts (kubeVersion >= {oldest}): the run "
                                    "would fail at the first helm install, after the hosts changed",
                                    f"{oldest} or newer"))
    return problems


def minimum_driver_branch(gpu: dict) -> tuple[int, str] | None:
    """(branch, where the number comes from) for one GPU of the facts, or None when nothing is known."""
    model = model_for_device(gpu.get("pci_device_id")) if gpu.get("pci_device_id") is not None else None
    if model is not None:
        return int(MIN_DRIVER[model.name].split(".")[0]), f"{model.name} needs driver {MIN_DRIVER[model.name]}"
    cc = _version_tuple(gpu.get("compute_capability", ""))
    if cc is None:
        return None
    for minimum, branch in MIN_BRANCH_BY_CC:
        if cc >= minimum:
            return branch, (f"compute capability {gpu.get('compute_capability')} needs a CUDA that knows it, "
                            f"driver branch {branch} or newer")
    return None


def rule_driver_branch_gpus(ctx: Context) -> list[str]:
    """The planned branch must know every GPU of the host (MIG minimums are rule_mig_geometry's)."""
    branch = _driver_branch(ctx.get("accel_driver_branch"))
    if branch is None or _as_bool(ctx.value("accel_vfio_passthrough")):
        return []  # passthrough hosts run no host driver
    mig_pool = bool(ctx.get("accel_mig_geometry")) and ctx.get("accel_mode") == "pgpu"
    problems, seen = [], set()
    for gpu in ctx.gpus:
        found = minimum_driver_branch(gpu)
        if found is None or found[0] <= branch or gpu.get("name") in seen:
            continue
        if mig_pool and model_for_device(gpu.get("pci_device_id")) is not None:
            continue  # rule_mig_geometry reports the same minimum for MIG models
        seen.add(gpu.get("name"))
        problems.append(ctx.problem("accel_driver_branch", ctx.get("accel_driver_branch"),
                                    f"older than {_gpu_label(gpu)} supports: {found[1]}",
                                    f"accel_driver_branch {found[0]} or newer"))
    return problems


def rule_pool_groups_agree(ctx: Context) -> list[str]:
    """Two pool groups that name one pool must give it the same settings: one pool is one label, one chart
    config and one set of Jobs, built from one host's settings (accel_pools.pools_from_hostvars)."""
    if not ctx.pool_groups or ctx.pools is None:
        return []
    mine = {p["group"] for p in ctx.pools}
    pool = ctx.get("accel_pool")
    same = [g for g in ctx.pool_groups if g["vars"].get("accel_pool") == pool and pool is not None]
    if len(same) < 2 or not mine & {g["group"] for g in same}:
        return []
    pool_vars = sorted(n for n, v in VARIABLES.items() if v["scope"] == "pool" and n != "accel_pool")
    differing = [n for n in pool_vars if len({repr(g["vars"].get(n)) for g in same}) > 1]
    if not differing:
        return []
    shown = "; ".join(f"{n}: " + ", ".join(f"{g['group']}={g['vars'].get(n, '(unset)')!r}" for g in same)
                      for n in differing)
    return [ctx.problem("accel_pool", pool, f"pool groups {[g['group'] for g in same]} name this pool with "
                        f"different settings ({shown})",
                        "one pool group per accel_pool, or the same pool settings in every group naming it")]


def rule_driver_flavor(ctx: Context) -> list[str]:
    """accel_driver_flavor against the GPUs: Blackwell and Grace Hopper run only with the open kernel modules, which
    in turn exist only from Turing on (accel_driver.open_modules_required / open_modules_supported)."""
    flavor = ctx.get("accel_driver_flavor")
    if flavor not in driver.FLAVORS or _as_bool(ctx.value("accel_vfio_passthrough")):
        return []  # unset: the role picks; bad value: the argument spec reports it; passthrough: no host driver
    problems, seen = [], set()
    for gpu in ctx.gpus:
        if gpu.get("name") in seen:
            continue
        if flavor == "proprietary" and driver.open_modules_required(gpu):
            seen.add(gpu.get("name"))
            problems.append(ctx.problem("accel_driver_flavor", flavor, f"{_gpu_label(gpu)}: "
                                        f"{driver.open_modules_required(gpu)}", "open, or leave it unset"))
        elif flavor == "open" and not driver.open_modules_supported(gpu):
            seen.add(gpu.get("name"))
            problems.append(ctx.problem(
                "accel_driver_flavor", flavor,
                f"{_gpu_label(gpu)} (compute capability {gpu.get('compute_capability')}) is older than Turing; "
                "NVIDIA's open kernel modules do not drive it", "proprietary, or leave it unset"))
    return problems


def rule_fabric_manager(ctx: Context) -> list[str]:
    """An NVSwitch system (nvidia_gpus.nvswitch) needs NVIDIA Fabric Manager of the driver's exact version: a branch
    NVIDIA publishes none for leaves CUDA unable to use the GPUs."""
    facts = ctx.facts or {}
    if not facts.get("nvswitch") or _as_bool(ctx.value("accel_vfio_passthrough")):
        return []
    raw = ctx.get("accel_driver_branch", _UNSET)
    if raw is _UNSET or _driver_branch(raw) is None or driver.fabric_manager_available(raw):
        return []
    found = list(facts.get("nvswitch_evidence") or ["NVSwitch fabric"])
    evidence = found[0] + (f", and {len(found) - 1} more" if len(found) > 1 else "")
    return [ctx.problem("accel_driver_branch", raw,
                        f"the GPUs sit on an NVSwitch fabric ({evidence}) and need NVIDIA Fabric Manager of the "
                        f"driver's version, which NVIDIA publishes for no {_driver_branch(raw)} branch",
                        "a branch with a Fabric Manager: "
                        + ", ".join(str(b) for b in sorted(driver.FABRIC_MANAGER_BRANCHES)))]


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
    rule_names,
    rule_cluster_settings,
    rule_driver_branch_gpus,
    rule_pool_groups_agree,
    rule_driver_flavor,
    rule_fabric_manager,
)


def host_problems(host: str, settings: dict, facts: dict | None = None, pools: list | None = None,
                  pool_groups: list | None = None) -> list[str]:
    """Every problem with one host's plan (empty list = the plan is fine)."""
    ctx = Context(host=host, settings=dict(settings or {}), facts=dict(facts or {}), pools=pools,
                  pool_groups=pool_groups)
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


def pool_groups(export: dict) -> list[dict]:
    """Every pool group (child of gpu_pools) with the settings its hosts get from group vars: all, gpu_pools, then
    its own (host vars aside, which rule_one_pool's per-host view covers)."""
    inherited = {**((export.get("all") or {}).get("vars") or {}), **((export.get(POOLS_GROUP) or {}).get("vars") or {})}
    return [{"group": group, "vars": {**inherited, **((export.get(group) or {}).get("vars") or {})}}
            for group in (export.get(POOLS_GROUP) or {}).get("children") or []]


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
