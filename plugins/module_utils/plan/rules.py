# Copyright: kube-accel contributors
# Apache License 2.0
"""Plan rules: pure functions that list every problem with a host's plan before anything changes.

The inventory as a whole (unknown names in every source, strict types as written, the grammar of each value, cluster
settings, pool membership and agreement, settings a mode ignores) is checked first by ``plan.inventory_check``; the
rules here get one host's settings that passed those checks, and its facts, and find what only the combination shows:
a mode the host's GPUs cannot serve, a MIG geometry that does not fit, a driver branch older than the GPUs, settings
that contradict each other.

Public API (the preflight role reaches it through the ``accel_plan_problems`` filter):

- ``host_problems(host, settings, facts=None, invalid=(), origins=None) -> list[str]``: all problems of one host.
  ``settings`` are the host's ``accel_*`` variables (each is checked with ``plan.values`` first, so a caller may pass
  unchecked ones), ``facts`` its ``nvidia_gpus`` fact, ``invalid`` names already reported (no rule repeats them),
  ``origins`` where each setting came from (named in the messages).
- ``vcuda_core_problems(value, where)``: a ``tencent.com/vcuda-core`` request is 1..100 or a multiple of 100.
- One ``rule_*`` function per rule, each ``(ctx) -> list[str]``; ``RULES`` lists them in order.

Every message reads ``<host>: <field> = <value> (<origin>): <what is wrong>; allowed: <what is allowed>``.
"""

from __future__ import annotations

from ansible_collections.kube_accel.gpu.plugins.module_utils.common.constants import (
    MIG_RECORD_FILE,
    MODES,
    VCUDA_CORES_PER_GPU,
    VGPU_BACKENDS,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.dra_rules import (
    rule_dra_driver_branch,
    rule_dra_kubernetes,
    rule_dra_runtime,
    rule_dra_sharing,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.driver_rules import (
    CUDA12_FIRST_DRIVER_BRANCH,
    rule_driver_branch_gpus,
    rule_driver_flavor,
    rule_fabric_manager,
    rule_hami_driver,
    rule_preinstalled_driver,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.inventory import (
    MPS_MAX_REPLICAS,
    MPS_MIN_REPLICAS,
    TIMESLICE_MAX_REPLICAS,
    TIMESLICE_MIN_REPLICAS,
    VARIABLES,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.mig import (
    MODELS,
    driver_problems,
    geometry_problems,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.rule_context import (
    MPS_MAX_CLIENTS_BY_CC,
    UNSET,
    Context,
    branch_number,
    gpu_label,
    pre_volta,
    version_tuple,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.values import value_problems

# kubelet_gpu sets the NUMA policy in a kubelet --config-dir drop-in: alpha behind KubeletConfigDropInDir in
# 1.28-1.29, on by default from 1.30; older kubelets do not start with the flag.
MIN_KUBERNETES_NUMA = (1, 30)
GPU_MANAGER_MAX_CUDA_MAJOR = 11  # GPU-Manager's vcuda library intercepts the CUDA 11 driver API only
# gpu-manager v1.1.5 talks CRI v1alpha2 only (pkg/runtime/runtime.go:15), which containerd 2.0 removed, and finds
# container processes under the cgroup v1 memory hierarchy only (pkg/types/types.go:55, /sys/fs/cgroup/memory).
GPU_MANAGER_MAX_CONTAINERD_MAJOR = 1
GPU_MANAGER_CGROUP_VERSION = 1


def rule_mode(ctx: Context) -> list[str]:
    if "accel_mode" in ctx.settings:
        return []  # its value is plan.values' to check
    return [ctx.problem("accel_mode", UNSET, "not set for this GPU host",
                        f"{', '.join(MODES)} ({VARIABLES['accel_mode']['note']})")]


def rule_vgpu_backend(ctx: Context) -> list[str]:
    if ctx.get("accel_mode") != "vgpu":
        return []
    backend = ctx.get("accel_vgpu_backend", UNSET)
    if backend not in VGPU_BACKENDS:
        what = "required with accel_mode vgpu" if backend is UNSET else "not a vGPU backend"
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
    containerd = version_tuple(runtime.get("containerd_version") or "")
    if containerd is not None and containerd[0] > GPU_MANAGER_MAX_CONTAINERD_MAJOR:
        problems.append(ctx.problem(
            "accel_vgpu_backend", backend,
            f"the host runs containerd {runtime['containerd_version']}, which no longer serves CRI v1alpha2, the "
            "only CRI GPU-Manager v1.1.5 speaks", "hami with containerd 2; gpu-manager only with containerd 1.x"))
    branch = branch_number(ctx.get("accel_driver_branch"))
    if branch is not None and branch >= CUDA12_FIRST_DRIVER_BRANCH:
        problems.append(ctx.problem(
            "accel_driver_branch", ctx.get("accel_driver_branch"),
            "with accel_vgpu_backend 'gpu-manager' the planned driver branch ships a CUDA 12+ driver, which "
            "GPU-Manager does not support", allowed))
    return problems


def rule_mig_exclusive(ctx: Context) -> list[str]:
    mode = ctx.get("accel_mode")
    if mode not in ("vgpu", "mps", "timeslice"):
        return []
    allowed = ("accel_mode pgpu or dra for MIG; vgpu, mps and timeslice need GPUs with MIG disabled "
               "(no accel_mig_geometry, accel_mig_strategy none)")
    problems = []
    # MIG kube-accel turned on is turned off by the hosts play before the cluster play switches the node's mode.
    for gpu in ([] if _mig_turned_on_by_kube_accel(ctx) else ctx.gpus):
        if gpu.get("mig_mode_current") or gpu.get("mig_mode_pending"):
            problems.append(ctx.problem(
                "accel_mode", mode,
                f"{gpu_label(gpu)} has MIG enabled (current={gpu.get('mig_mode_current')}, "
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
    raw = ctx.get("accel_mps_replicas", UNSET)
    replicas = raw if raw is not UNSET else None
    if raw is UNSET:
        problems.append(ctx.problem("accel_mps_replicas", raw, "required with accel_mode mps",
                                    f"an integer {MPS_MIN_REPLICAS}..{MPS_MAX_REPLICAS} (MPS clients per GPU)"))
    problems += [ctx.problem("accel_mode", "mps", why,
                             "mps on compute capability 7.0 (Volta) or newer; use pgpu or vgpu on older GPUs")
                 for why in pre_volta(ctx)]
    seen = set()
    for gpu in ctx.gpus:
        cc = version_tuple(gpu.get("compute_capability", ""))
        limit = mps_max_clients(cc) if cc is not None else None
        if replicas is not None and limit is not None and replicas > limit and (gpu.get("name"), cc) not in seen:
            seen.add((gpu.get("name"), cc))
            problems.append(ctx.problem(
                "accel_mps_replicas", raw,
                f"{gpu_label(gpu)} (compute capability {gpu.get('compute_capability')}) serves at most {limit} "
                f"MPS clients", f"an integer {MPS_MIN_REPLICAS}..{limit} on this GPU"))
    return problems


def rule_timeslice(ctx: Context) -> list[str]:
    """A timeslice pool names its replicas (the other accel_timeslice_* settings apply to timeslice pools only:
    plan.inventory ``applies``; one sharing mechanism per GPU, never with MPS or MIG)."""
    if ctx.get("accel_mode") != "timeslice" or "accel_timeslice_replicas" in ctx.settings:
        return []
    return [ctx.problem("accel_timeslice_replicas", UNSET, "required with accel_mode timeslice",
                        f"an integer {TIMESLICE_MIN_REPLICAS}..{TIMESLICE_MAX_REPLICAS} (pods sharing one GPU in "
                        "turns)")]


def rule_mig_geometry(ctx: Context) -> list[str]:
    """A MIG geometry (pgpu, or dra: the same rules) fits the pool's GPUs, with a strategy and a driver that knows
    it."""
    geometry = ctx.get("accel_mig_geometry")
    if not geometry or ctx.get("accel_mode") not in ("pgpu", "dra"):
        return []  # vgpu/mps with a MIG plan are reported by rule_mig_exclusive
    if not isinstance(geometry, dict):
        return [ctx.problem("accel_mig_geometry", geometry, "not a mapping",
                            "a mapping of MIG profile -> count per GPU, e.g. {'3g.40gb': 1, '1g.10gb': 4}")]
    problems = []
    strategy = ctx.get("accel_mig_strategy", UNSET)
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
        branch = branch_number(ctx.get("accel_driver_branch"))
        for device_id, gpu in device_ids.items():
            texts = geometry_problems(device_id, geometry, gpu=gpu_label(gpu))
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
    if ctx.get("accel_mode") == "dra":
        # plan.pools.operator_mig: the operator's mig-manager is labelled onto pgpu pools only. It would also pause
        # and restart only the operator's GPU clients around a change, not the DRA kubelet plugin, which publishes
        # the MIG devices it found when it started.
        return [ctx.problem("accel_mig_owner", ctx.value("accel_mig_owner"),
                            "a dra pool's MIG geometry is applied by the host (roles/mig, before the DRA kubelet "
                            "plugin starts); the GPU Operator's mig-manager serves pgpu pools only",
                            "accel_mig_owner: host on dra pools with accel_mig_geometry")]
    if ctx.get("accel_gpu_operator_enabled") is False:
        return [ctx.problem("accel_mig_owner", ctx.value("accel_mig_owner"),
                            "the GPU Operator's mig-manager applies the geometry, but accel_gpu_operator_enabled "
                            "is false", "accel_mig_owner: host, or accel_gpu_operator_enabled: true")]
    return []


def rule_sriov(ctx: Context) -> list[str]:
    """Virtual functions within what each GPU offers, and with the IOMMU that SR-IOV needs to hand them out."""
    numvfs = ctx.value("accel_sriov_numvfs")
    if not numvfs:
        return []
    problems = []
    for gpu in ctx.gpus:
        total = gpu.get("sriov_totalvfs") or 0
        if numvfs > total:
            what = (f"{gpu_label(gpu)} is not SR-IOV capable (sriov_totalvfs 0)" if total == 0
                    else f"above {gpu_label(gpu)}'s sriov_totalvfs {total}")
            problems.append(ctx.problem("accel_sriov_numvfs", numvfs, what, f"0..{total}"))
    if not (ctx.facts or {}).get("iommu_enabled") and not ctx.value("accel_iommu"):
        problems.append(ctx.problem(
            "accel_sriov_numvfs", numvfs, "SR-IOV virtual functions need the IOMMU, which is neither enabled on "
            "this host (no /sys/kernel/iommu_groups) nor planned (accel_iommu is false)",
            "accel_iommu: true with accel_sriov_numvfs, or accel_sriov_numvfs: 0"))
    return problems


def _pci_ids(gpu: dict) -> str | None:
    """``vvvv:dddd`` of a GPU from its NVML PCI device ID (``0xDDDDVVVV``)."""
    raw = gpu.get("pci_device_id")
    try:
        number = int(str(raw), 16)
    except (TypeError, ValueError):
        return None
    return f"{number & 0xFFFF:04x}:{number >> 16 & 0xFFFF:04x}"


def rule_vfio(ctx: Context) -> list[str]:
    """VM passthrough: the IOMMU, a whole-GPU pool (the GPUs leave the host's driver, so no host-side sharing mode
    can serve them), and vfio IDs that match the host's GPUs."""
    problems = []
    if ctx.value("accel_vfio_passthrough"):
        if not (ctx.facts or {}).get("iommu_enabled") and not ctx.value("accel_iommu"):
            problems.append(ctx.problem(
                "accel_vfio_passthrough", ctx.get("accel_vfio_passthrough"),
                "vfio-pci passthrough needs the IOMMU, which is neither enabled on this host (no "
                "/sys/kernel/iommu_groups) nor planned (accel_iommu is false)",
                "accel_iommu: true with accel_vfio_passthrough, or accel_vfio_passthrough: false"))
        mode = ctx.get("accel_mode")
        if mode in MODES and mode != "pgpu":
            problems.append(ctx.problem(
                "accel_vfio_passthrough", True, f"VM passthrough on a pool with accel_mode {mode}: GPUs bound to "
                f"vfio-pci leave the host's driver, so nothing on the host can share them ({mode})",
                "accel_vfio_passthrough with accel_mode pgpu (whole GPUs for VMs), or accel_vfio_passthrough: false"))
    ids = ctx.get("accel_vfio_pci_ids") or []
    present = {pci for pci in map(_pci_ids, ctx.gpus) if pci}
    if ids and present:
        unmatched = [pci for pci in ids if pci.lower() not in present]
        if unmatched:
            problems.append(ctx.problem(
                "accel_vfio_pci_ids", ids, f"{unmatched!r} match none of this host's GPUs "
                f"({', '.join(sorted(present))}): vfio-pci would bind nothing, or another device",
                "the vendor:device IDs of the host's GPUs"))
    return problems


def rule_kubernetes_numa(ctx: Context) -> list[str]:
    policy = ctx.value("accel_numa_policy")
    if policy in (None, "none"):
        return []
    raw = ctx.get("accel_kubernetes_version", UNSET)
    version = version_tuple(raw) if raw is not UNSET else None
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


def rule_kubernetes_distribution(ctx: Context) -> list[str]:
    """What kube-accel does not do on k3s and RKE2 (roles/container_toolkit README, "Kubernetes distributions"): their
    containerd is 2.x, which GPU-Manager cannot speak to. (NUMA pools are supported there: kubelet_gpu puts its
    drop-in in the --config-dir their service passes the kubelet.)"""
    dist = ctx.value("accel_kubernetes_distribution")
    if dist in (None, "kubeadm"):
        return []
    problems = []
    if ctx.get("accel_mode") == "vgpu" and ctx.get("accel_vgpu_backend") == "gpu-manager":
        problems.append(ctx.problem(
            "accel_vgpu_backend", "gpu-manager",
            f"{dist} runs containerd 2.x, which no longer serves CRI v1alpha2, the only CRI GPU-Manager v1.1.5 "
            "speaks", f"hami on {dist}"))
    return problems


def rule_mig_left_on(ctx: Context) -> list[str]:
    """A whole-GPU pool without a MIG plan on GPUs that have MIG on: nothing kube-accel runs turns it off, so the
    pool would serve MIG devices nobody planned (and the exclusive config sees no whole GPU)."""
    if (ctx.get("accel_mode") not in ("pgpu", "dra") or ctx.get("accel_mig_geometry")
            or ctx.value("accel_vfio_passthrough")):
        return []
    on = [gpu for gpu in ctx.gpus if gpu.get("mig_mode_current") or gpu.get("mig_mode_pending")]
    if not on or _mig_turned_on_by_kube_accel(ctx):
        return []
    return [ctx.problem("accel_mode", ctx.get("accel_mode"),
                        f"{len(on)} GPU(s) have MIG enabled ({gpu_label(on[0])}: current="
                        f"{on[0].get('mig_mode_current')}, pending={on[0].get('mig_mode_pending')}) and the pool plans "
                        "no MIG geometry; kube-accel turns off only MIG it turned on (no record of that here: "
                        f"{MIG_RECORD_FILE}), so nothing would turn it off",
                        "an accel_mig_geometry for the pool, or MIG disabled on the host first (nvidia-smi -mig 0)")]


def _mig_turned_on_by_kube_accel(ctx: Context) -> bool:
    """kube-accel put a MIG geometry on this host (roles/mig's record, read by the preflight): a plan without MIG
    has the hosts play turn it off (roles/mig), so GPUs with MIG on are expected there."""
    return bool((ctx.facts or {}).get("mig_record"))


def rule_recorded_snapshot(ctx: Context) -> list[str]:
    """A recorded NVML snapshot stands in for the GPUs of lab and test hosts; on a host whose NVIDIA driver is
    loaded it would check the plan against GPUs the host does not have."""
    if "accel_nvml_snapshot" not in ctx.settings or ctx.get("accel_lab") is True:
        return []
    if not (ctx.facts or {}).get("host_driver_loaded"):
        return []
    return [ctx.problem("accel_nvml_snapshot", ctx.get("accel_nvml_snapshot"),
                        "a recorded snapshot on a host whose NVIDIA driver is loaded (/proc/driver/nvidia/version): "
                        "the plan would be checked against recorded GPUs, not the host's",
                        "no accel_nvml_snapshot on real GPU hosts (or accel_lab: true on lab hosts)")]


RULES = (
    rule_mode,
    rule_recorded_snapshot,
    rule_preinstalled_driver,
    rule_vgpu_backend,
    rule_hami_driver,
    rule_mig_exclusive,
    rule_mig_left_on,
    rule_mps,
    rule_timeslice,
    rule_mig_geometry,
    rule_mig_owner,
    rule_sriov,
    rule_vfio,
    rule_kubernetes_numa,
    rule_kubernetes_distribution,
    rule_dra_kubernetes,
    rule_dra_driver_branch,
    rule_dra_runtime,
    rule_dra_sharing,
    rule_driver_branch_gpus,
    rule_driver_flavor,
    rule_fabric_manager,
)


def host_problems(host: str, settings: dict, facts: dict | None = None, invalid=(), origins: dict | None = None
                  ) -> list[str]:
    """Every problem with one host's plan (empty list = the plan is fine).

    Each known setting is checked with ``plan.values`` first (the preflight passes settings that already passed,
    so this costs nothing there); a setting with a problem, or named in ``invalid``, is left out of the rules, so
    a wrong value is reported once, never again as the cause of a rule's finding.
    """
    ctx = Context(host=host, settings={}, facts=dict(facts or {}), origins=dict(origins or {}))
    problems: list[str] = []
    skipped = set(invalid or ())
    for name, value in (settings or {}).items():
        if name in skipped:
            continue
        if name in VARIABLES:
            found = value_problems(name, value)
            if found:
                skipped.add(name)
                problems.extend(ctx.problem(name, value, what, allowed) for what, allowed in found)
                continue
        ctx.settings[name] = value
    for rule in RULES:
        problems.extend(_with_origin(ctx, text) for text in rule(ctx) if _field(host, text) not in skipped)
    return problems


def _with_origin(ctx: Context, text: str) -> str:
    """A rule message written outside ``ctx.problem`` (plan.mig's) with the field's origin after its value."""
    name = _field(ctx.host, text)
    origin = ctx.origins.get(name)
    if not origin or f"({origin})" in text:
        return text
    head = f"{ctx.host}: {name} = "
    cut = text.find(": ", len(head))
    return text if cut < 0 else f"{text[:cut]} ({origin}){text[cut:]}"


def _field(host: str, text: str) -> str:
    """The field a rule's message is about: ``<host>: <field> = ...``."""
    return text[len(host) + 2:].split(" ", 1)[0] if text.startswith(f"{host}: ") else ""


def vcuda_core_problems(value, where: str = "tencent.com/vcuda-core") -> list[str]:
    """A vcuda-core request is a share of one GPU (1..100) or whole GPUs (a multiple of 100)."""
    number = value if isinstance(value, int) and not isinstance(value, bool) else None
    if isinstance(value, str) and value.strip().isdigit():
        number = int(value)
    if number is not None and (1 <= number <= VCUDA_CORES_PER_GPU or
                               (number > 0 and number % VCUDA_CORES_PER_GPU == 0)):
        return []
    return [f"{where} = {value!r}: not a valid vcuda-core request; allowed: 1..{VCUDA_CORES_PER_GPU} "
            f"(a share of one GPU) or a multiple of {VCUDA_CORES_PER_GPU} (whole GPUs)"]
