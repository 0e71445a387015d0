# Copyright: kube-accel contributors
# Apache License 2.0
"""Plan rules about the NVIDIA driver: a preinstalled driver, the branch HAMi's limits are promised on, the oldest
branch each GPU needs, the kernel module flavour and Fabric Manager. ``plan.rules`` runs them in its ``RULES``."""

from __future__ import annotations

from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import driver
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.mig import MIN_DRIVER, model_for_device
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.rule_context import (
    UNSET,
    Context,
    branch_number,
    gpu_label,
    version_tuple,
)

CUDA12_FIRST_DRIVER_BRANCH = 525  # R525 is the first branch shipping a CUDA 12.0 driver
# The drivers a HAMi pool promises its limits on (docs/modes/vgpu.md): CUDA 12 and newer (kube-accel
# offers HAMi for CUDA 12+, gpu-manager below), up to the newest branch HAMi-core's hooks were written for and its
# memory limit was measured on: HAMi-core 8f3a89c covers the driver API up to CUDA 13.0 (src/libvgpu.c:159,
# src/cuda/device.c:58 "#if CUDA_VERSION < 13000"), and held a 4 GiB limit for PyTorch (CUDA 13) and the driver API on
# driver 580.159.04 (recorded on an H200, 2026-11-26, ../shared/gpu-records/h200-2026-11-26/hami-core).
HAMI_MIN_DRIVER_BRANCH = CUDA12_FIRST_DRIVER_BRANCH
HAMI_MAX_VERIFIED_DRIVER_BRANCH = 580
# The first driver branch whose CUDA knows each GPU architecture (CUDA Toolkit release notes, "CUDA Toolkit and
# Corresponding Driver Versions": sm_70 CUDA 9.0 / 384, sm_75 10.0 / 410, sm_80 11.0 / 450, sm_86 11.1 / 455, sm_89
# and sm_90 11.8 / 520, sm_100 and sm_120 12.8 / 570), newest first. A model with a published minimum (plan.mig
# MIN_DRIVER, the MIG User Guide's table) uses that instead: H100 525, H200 550, B300 580.
MIN_BRANCH_BY_CC = (((12, 0), 570), ((10, 0), 570), ((9, 0), 520), ((8, 9), 520), ((8, 6), 455), ((8, 0), 450),
                    ((7, 5), 410), ((7, 0), 384))


def rule_preinstalled_driver(ctx: Context) -> list[str]:
    """accel_driver_source preinstalled: the driver the host's image brings must answer NVML, be the planned branch,
    have its kernel module loaded, and on NVSwitch systems have its fabric up (Fabric Manager running)."""
    if ctx.value("accel_driver_source") != "preinstalled" or ctx.value("accel_vfio_passthrough"):
        return []
    facts = ctx.facts or {}
    allowed_source = "a host whose image has the driver loaded, or accel_driver_source distro or cuda-repo"
    if not facts.get("count") and not facts.get("driver_version"):
        return [ctx.problem("accel_driver_source", "preinstalled", "no NVIDIA driver answers on this host (NVML: "
                            f"{facts.get('reason') or 'no GPU'})", allowed_source)]
    problems = []
    installed = str(facts.get("driver_version") or "")
    branch = branch_number(installed)
    raw = ctx.value("accel_driver_branch")
    if branch is not None and branch != branch_number(raw):
        problems.append(ctx.problem("accel_driver_branch", raw, f"the host's preinstalled driver is {installed} "
                                    f"(branch {branch})", f"accel_driver_branch \"{branch}\" for this image, or "
                                    "accel_driver_source distro or cuda-repo to install the planned branch"))
    modules = facts.get("kernel_modules")
    if modules and "nvidia" not in modules:
        problems.append(ctx.problem("accel_driver_source", "preinstalled", f"the nvidia kernel module is not loaded "
                                    f"(loaded: {', '.join(modules)})", allowed_source))
    if facts.get("nvswitch"):
        waiting = sorted({g.get("fabric_state") for g in ctx.gpus} - {"completed", None, "not-supported"})
        if waiting:
            problems.append(ctx.problem(
                "accel_driver_source", "preinstalled", f"the GPUs sit on an NVSwitch fabric whose state is "
                f"{', '.join(waiting)}: NVIDIA Fabric Manager of the driver's version is not running on this image",
                "nvidia-fabricmanager of the driver's version running on NVSwitch systems, or accel_driver_source "
                "distro or cuda-repo (which install it)"))
    return problems


def rule_hami_driver(ctx: Context) -> list[str]:
    """A HAMi pool only on the drivers its limits are promised for (HAMI_MIN/MAX_*): below CUDA 12 the backend is
    gpu-manager; newer than verified needs accel_vgpu_hami_unverified_driver."""
    if ctx.get("accel_mode") != "vgpu" or ctx.get("accel_vgpu_backend") != "hami":
        return []
    raw = ctx.value("accel_driver_branch")
    branch = branch_number(raw)
    if branch is None:
        return []
    verified = f"{HAMI_MIN_DRIVER_BRANCH}..{HAMI_MAX_VERIFIED_DRIVER_BRANCH}"
    if branch < HAMI_MIN_DRIVER_BRANCH:
        return [ctx.problem("accel_driver_branch", raw, "HAMi pools run on CUDA 12 and newer drivers (branch "
                            f"{HAMI_MIN_DRIVER_BRANCH}+): kube-accel promises HAMi's limits there only",
                            f"a branch {verified} for hami, or accel_vgpu_backend gpu-manager for a CUDA 11 driver")]
    if branch > HAMI_MAX_VERIFIED_DRIVER_BRANCH and not ctx.value("accel_vgpu_hami_unverified_driver"):
        return [ctx.problem("accel_driver_branch", raw, f"newer than the newest branch HAMi-core's limits were "
                            f"written and verified for ({HAMI_MAX_VERIFIED_DRIVER_BRANCH}, CUDA 13.0): they may not "
                            "hold", f"a branch {verified}, or accel_vgpu_hami_unverified_driver: true to accept that")]
    return []


def minimum_driver_branch(gpu: dict) -> tuple[int, str] | None:
    """(branch, where the number comes from) for one GPU of the facts, or None when nothing is known."""
    model = model_for_device(gpu.get("pci_device_id")) if gpu.get("pci_device_id") is not None else None
    if model is not None:
        return int(MIN_DRIVER[model.name].split(".")[0]), f"{model.name} needs driver {MIN_DRIVER[model.name]}"
    cc = version_tuple(gpu.get("compute_capability", ""))
    if cc is None:
        return None
    for minimum, branch in MIN_BRANCH_BY_CC:
        if cc >= minimum:
            return branch, (f"compute capability {gpu.get('compute_capability')} needs a CUDA that knows it, "
                            f"driver branch {branch} or newer")
    return None


def rule_driver_branch_gpus(ctx: Context) -> list[str]:
    """The planned branch must know every GPU of the host (MIG minimums are rule_mig_geometry's)."""
    branch = branch_number(ctx.get("accel_driver_branch"))
    if branch is None or ctx.value("accel_vfio_passthrough"):
        return []  # passthrough hosts run no host driver
    mig_pool = bool(ctx.get("accel_mig_geometry")) and ctx.get("accel_mode") in ("pgpu", "dra")
    problems, seen = [], set()
    for gpu in ctx.gpus:
        found = minimum_driver_branch(gpu)
        if found is None or found[0] <= branch or gpu.get("name") in seen:
            continue
        if mig_pool and model_for_device(gpu.get("pci_device_id")) is not None:
            continue  # rule_mig_geometry reports the same minimum for MIG models
        seen.add(gpu.get("name"))
        problems.append(ctx.problem("accel_driver_branch", ctx.get("accel_driver_branch"),
                                    f"older than {gpu_label(gpu)} supports: {found[1]}",
                                    f"accel_driver_branch {found[0]} or newer"))
    return problems


def rule_driver_flavor(ctx: Context) -> list[str]:
    """accel_driver_flavor against the GPUs: Blackwell and Grace Hopper run only with the open kernel modules, which
    in turn exist only from Turing on (plan.driver.open_modules_required / open_modules_supported)."""
    flavor = ctx.get("accel_driver_flavor")
    if flavor not in driver.FLAVORS or ctx.value("accel_vfio_passthrough"):
        return []  # unset: the role picks; bad value: the argument spec reports it; passthrough: no host driver
    problems, seen = [], set()
    for gpu in ctx.gpus:
        if gpu.get("name") in seen:
            continue
        if flavor == "proprietary" and driver.open_modules_required(gpu):
            seen.add(gpu.get("name"))
            problems.append(ctx.problem("accel_driver_flavor", flavor, f"{gpu_label(gpu)}: "
                                        f"{driver.open_modules_required(gpu)}", "open, or leave it unset"))
        elif flavor == "open" and not driver.open_modules_supported(gpu):
            seen.add(gpu.get("name"))
            problems.append(ctx.problem(
                "accel_driver_flavor", flavor,
                f"{gpu_label(gpu)} (compute capability {gpu.get('compute_capability')}) is older than Turing; "
                "NVIDIA's open kernel modules do not drive it", "proprietary, or leave it unset"))
    return problems


def rule_fabric_manager(ctx: Context) -> list[str]:
    """An NVSwitch system (nvidia_gpus.nvswitch) needs NVIDIA Fabric Manager of the driver's exact version: a branch
    NVIDIA publishes none for leaves CUDA unable to use the GPUs."""
    facts = ctx.facts or {}
    if not facts.get("nvswitch") or ctx.value("accel_vfio_passthrough"):
        return []
    raw = ctx.get("accel_driver_branch", UNSET)
    if raw is UNSET or branch_number(raw) is None or driver.fabric_manager_available(raw):
        return []
    found = list(facts.get("nvswitch_evidence") or ["NVSwitch fabric"])
    evidence = found[0] + (f", and {len(found) - 1} more" if len(found) > 1 else "")
    return [ctx.problem("accel_driver_branch", raw,
                        f"the GPUs sit on an NVSwitch fabric ({evidence}) and need NVIDIA Fabric Manager of the "
                        f"driver's version, which NVIDIA publishes for no {branch_number(raw)} branch",
                        "a branch with a Fabric Manager: "
                        + ", ".join(str(b) for b in sorted(driver.FABRIC_MANAGER_BRANCHES)))]
