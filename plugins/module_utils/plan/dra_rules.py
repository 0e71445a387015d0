# Copyright: kube-accel contributors
# Apache License 2.0
"""Plan rules of dra pools (NVIDIA's DRA driver): the Kubernetes version, the driver branch, a container runtime that
passes CDI devices on, and the sharing against the driver's feature gates. ``plan.rules`` runs them in its ``RULES``."""

from __future__ import annotations

from ansible_collections.kube_accel.gpu.plugins.module_utils.common.constants import (
    DRA_DRIVER_VERSION,
    DRA_FEATURE_GATES,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import pools
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.rule_context import (
    UNSET,
    Context,
    branch_number,
    is_off,
    pre_volta,
    version_triple,
    version_tuple,
)

# NVIDIA's DRA driver v0.4.1 (docs/prerequisites.md): Kubernetes v1.34.2 or later (resource.k8s.io/v1, DRA on by
# default), NVIDIA driver 565 or later for GPU allocation, and CDI enabled in the container runtime ("enabled by default
# in containerd 2.0+ and CRIO v1.27+"; containerd 1.7 has enable_cdi off, and roles/container_toolkit does not turn it
# on). Docker (cri-dockerd) passes no CDI devices from DRA claims to containers.
MIN_KUBERNETES_DRA = (1, 34, 2)
MIN_DRIVER_BRANCH_DRA = 565
MIN_CONTAINERD_MAJOR_DRA = 2
DRA_RUNTIMES = ("containerd", "crio")


def rule_dra_kubernetes(ctx: Context) -> list[str]:
    """A dra pool needs Kubernetes 1.34.2 or newer (the DRA driver's floor: resource.k8s.io/v1 on by default)."""
    if ctx.get("accel_mode") != "dra":
        return []
    raw = ctx.get("accel_kubernetes_version", UNSET)
    version = version_triple(raw) if raw is not UNSET else None
    minimum = ".".join(map(str, MIN_KUBERNETES_DRA))
    allowed = f"Kubernetes {minimum} or newer (\"1.34\" with patch 2 or later, \"1.35\", \"1.36\"), or no dra pool"
    if version is None:
        return [ctx.problem("accel_kubernetes_version", raw, "needed to check accel_mode 'dra' and not a version",
                            allowed)]
    major_minor = version[:2]
    if major_minor < MIN_KUBERNETES_DRA[:2] or (major_minor == MIN_KUBERNETES_DRA[:2] and version[2] is not None
                                                and version[2] < MIN_KUBERNETES_DRA[2]):
        return [ctx.problem("accel_kubernetes_version", raw,
                            f"accel_mode 'dra' needs Kubernetes {minimum} or newer: NVIDIA's DRA driver "
                            f"v{DRA_DRIVER_VERSION} allocates through resource.k8s.io/v1, on by default from 1.34 "
                            "(docs/prerequisites.md)", allowed)]
    return []


def rule_dra_driver_branch(ctx: Context) -> list[str]:
    """A dra pool needs driver branch 565 or newer (the DRA driver's floor for GPU allocation)."""
    if ctx.get("accel_mode") != "dra":
        return []
    raw = ctx.value("accel_driver_branch")
    branch = branch_number(raw)
    if branch is None or branch >= MIN_DRIVER_BRANCH_DRA:
        return []
    default = "" if "accel_driver_branch" in ctx.settings else " (kube-accel's default)"
    return [ctx.problem("accel_driver_branch", raw,
                        f"driver branch {branch}{default} is older than NVIDIA's DRA driver v{DRA_DRIVER_VERSION} "
                        f"supports for GPU allocation ({MIN_DRIVER_BRANCH_DRA} or later, docs/prerequisites.md)",
                        f"accel_driver_branch \"{MIN_DRIVER_BRANCH_DRA}\" or newer on dra pools, e.g. \"570\" or "
                        "\"580\"")]


def rule_dra_runtime(ctx: Context) -> list[str]:
    """A dra pool's containers get their GPUs as CDI devices (the DRA kubelet plugin writes the CDI spec of each
    claim): the runtime roles/container_toolkit configures must pass CDI devices on."""
    if ctx.get("accel_mode") != "dra":
        return []
    problems = []
    runtime = ctx.value("accel_container_runtime")
    if runtime not in DRA_RUNTIMES:
        problems.append(ctx.problem(
            "accel_container_runtime", runtime, f"{runtime} (through cri-dockerd) passes no CDI devices from DRA "
            "claims to containers, so a dra pool's pods would start without their GPUs",
            "containerd (2.0 or newer) or crio on dra pools"))
    facts = ctx.facts or {}
    if is_off(facts.get("container_toolkit_cdi")):
        problems.append(ctx.problem(
            "container_toolkit_cdi", facts.get("container_toolkit_cdi"),
            "turns off roles/container_toolkit's CDI specification (nvidia-ctk cdi generate and its boot unit) on a "
            "host of a dra pool, whose GPUs reach containers as CDI devices only",
            "container_toolkit_cdi: true (the role's default) on dra pools"))
    containerd = version_tuple((facts.get("host_runtime") or {}).get("containerd_version") or "")
    if runtime == "containerd" and containerd is not None and containerd[0] < MIN_CONTAINERD_MAJOR_DRA:
        problems.append(ctx.problem(
            "accel_container_runtime", runtime,
            f"the host runs containerd {facts['host_runtime']['containerd_version']}, whose CRI plugin has CDI off "
            "(enable_cdi = false by default before containerd 2.0) and roles/container_toolkit does not turn it "
            "on: claimed GPUs would not reach the containers",
            "containerd 2.0 or newer (CDI on by default), or crio, on dra pools"))
    return problems


def rule_dra_sharing(ctx: Context) -> list[str]:
    """A dra pool's sharing against the driver's feature gates (alpha gates are never turned on silently), its MIG
    devices and its GPUs; the opaque config kube-accel renders from it is what the driver's API accepts."""
    if ctx.get("accel_mode") != "dra":
        return []
    problems = []
    sharing = ctx.value("accel_dra_sharing")
    written = ctx.get("accel_dra_feature_gates", UNSET)
    gates = written if isinstance(written, dict) else {}
    for gate in sorted(pools.dra_feature_gates_needed({**ctx.settings, "accel_dra_sharing": sharing})):
        if gates.get(gate) is True:
            continue
        stage = DRA_FEATURE_GATES[gate][1].lower()
        problems.append(ctx.problem(
            "accel_dra_feature_gates", written,
            f"accel_dra_sharing '{sharing}' needs the DRA driver's feature gate {gate}, which is {stage} in "
            f"v{DRA_DRIVER_VERSION} and off by default (the driver refuses the pool's config without it); "
            "kube-accel turns no alpha gate on by itself",
            f"accel_dra_feature_gates: {{{gate}: true}} (accepting an {stage} feature), or accel_dra_sharing "
            "exclusive"))
    if gates.get("DynamicMIG") is True and ctx.get("accel_mig_geometry"):
        problems.append(ctx.problem(
            "accel_dra_feature_gates", gates, "DynamicMIG lets the driver create and destroy MIG devices per claim, "
            "while this pool's accel_mig_geometry has them created by kube-accel",
            "DynamicMIG off (or unset) with an accel_mig_geometry; or no geometry"))
    mig = bool(ctx.get("accel_mig_geometry"))
    interval = ctx.get("accel_dra_timeslice_interval")
    if mig and sharing == "timeslice" and interval not in (None, "Default"):
        problems.append(ctx.problem(
            "accel_dra_timeslice_interval", interval, "a MIG pool's claims get MigDeviceConfig, which has no "
            "time-slice interval (v0.4.1 MigDeviceSharing: strategy and mpsConfig only): MIG devices time-slice "
            "at the default", "Default (or unset) on a pool with accel_mig_geometry"))
    if sharing == "mps":
        problems += [ctx.problem("accel_dra_sharing", "mps", why,
                                 "mps on compute capability 7.0 (Volta) or newer; exclusive or timeslice on older GPUs")
                     for why in pre_volta(ctx)]
    return problems
