# Copyright: kube-accel contributors
# Apache License 2.0
"""The pool model: what a node pool is (its ``accel_*`` settings, defaults filled) and what it promises Kubernetes
(its node labels, the extended resources its nodes advertise, the release that serves it).

Settings keep their inventory names (``accel_mps_replicas`` stays ``accel_mps_replicas``) and their defaults come
from the inventory model (``inventory.VARIABLES``), so nothing here repeats a default. Used by the cluster play
(labels), the verify play (expected allocatable), each chart's values (``helm.pool_charts``) and the lab.
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.kube_accel.gpu.plugins.module_utils.common.constants import (
    DRA_CONFIG_API_VERSION,
    LABELS,
    NFD_OS_LABELS,
    RESOURCES,
    UPSTREAM_LABELS,
    VCUDA_CORES_PER_GPU,
    VCUDA_MEMORY_UNIT_MIB,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import inventory
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import mig as mig_model

# A Kubernetes label value: at most 63 characters, alphanumerics with - _ . inside.
LABEL_VALUE_RE = re.compile(r"^(?=.{1,63}$)[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def pool_settings(hostvars: dict[str, Any]) -> dict[str, Any]:
    """The ``accel_*`` variables of one host, under their own names, with every pool default the host does not set."""
    return {**inventory.defaults("pool"), **{k: v for k, v in hostvars.items() if k.startswith("accel_")}}


def mig_enabled(settings: dict[str, Any]) -> bool:
    return bool(settings.get("accel_mig_geometry")) and settings["accel_mig_strategy"] != "none"


def setting_on(settings: dict[str, Any], name: str) -> bool:
    """A boolean pool setting, as the inventory may write it (true, "yes", "on")."""
    value = settings[name]
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "on", "1")
    return bool(value)


def time_slicing(settings: dict[str, Any]) -> dict[str, Any]:
    """A timeslice pool's ``sharing.timeSlicing`` settings: replicas, renameByDefault, failRequestsGreaterThanOne.

    kube-accel's defaults differ from the plugin's (both false): renamed replicas (nvidia.com/gpu.shared) keep pods
    that expect an exclusive nvidia.com/gpu off shared GPUs, and one replica per pod is upstream's recommendation.
    """
    return {"replicas": int(settings["accel_timeslice_replicas"]),
            "renameByDefault": setting_on(settings, "accel_timeslice_rename_by_default"),
            "failRequestsGreaterThanOne": setting_on(settings, "accel_timeslice_fail_requests_greater_than_one")}


def device_plugin_config(settings: dict[str, Any]) -> str | None:
    """Name of the device-plugin config a node selects with ``nvidia.com/device-plugin.config``."""
    mode = settings["accel_mode"]
    if mode == "mps":
        return f"mps-{int(settings['accel_mps_replicas'])}"
    if mode == "timeslice":
        # timeslice-<replicas>[-gpu: advertised as nvidia.com/gpu][-multi: a pod may take several replicas]
        ts = time_slicing(settings)
        return (f"timeslice-{ts['replicas']}" + ("" if ts["renameByDefault"] else "-gpu")
                + ("" if ts["failRequestsGreaterThanOne"] else "-multi"))
    if mode == "pgpu":
        return f"mig-{settings['accel_mig_strategy']}" if mig_enabled(settings) else "exclusive"
    return None


# The sharing strategies of the DRA driver's opaque configs, by accel_dra_sharing (v0.4.1
# api/nvidia.com/resource/v1beta1/sharing.go TimeSlicingStrategy, MpsStrategy), and the alpha feature gate each needs
# (validate.go validateSharingStrategy: the driver refuses the config while the gate is off).
DRA_STRATEGIES = {"timeslice": "TimeSlicing", "mps": "MPS"}
DRA_SHARING_GATES = {"timeslice": "TimeSlicingSettings", "mps": "MPSSupport"}


def dra_opaque_config(settings: dict[str, Any]) -> dict[str, Any] | None:
    """A dra pool's opaque device config exactly as NVIDIA's DRA driver decodes it (v0.4.1 GpuConfig for whole GPUs,
    MigDeviceConfig for a pool with a MIG geometry; api/nvidia.com/resource/v1beta1); None for other modes.

    exclusive carries no ``sharing``: the driver's own default (DefaultGpuConfig: a GPU prepared for one claim, not
    shared in time or by MPS). timeslice names its interval (GpuConfig's timeSlicingConfig; a MigDeviceConfig has no
    interval field, MIG devices keep the default). mps carries only the limits the inventory sets (an empty mpsConfig:
    the driver's defaults).
    """
    if settings.get("accel_mode") != "dra":
        return None
    mig = mig_enabled(settings)
    config: dict[str, Any] = {"apiVersion": DRA_CONFIG_API_VERSION, "kind": "MigDeviceConfig" if mig else "GpuConfig"}
    sharing = settings.get("accel_dra_sharing", inventory.default_of("accel_dra_sharing"))
    if sharing == "timeslice":
        config["sharing"] = {"strategy": DRA_STRATEGIES[sharing]}
        if not mig:
            interval = settings.get("accel_dra_timeslice_interval",
                                    inventory.default_of("accel_dra_timeslice_interval"))
            config["sharing"]["timeSlicingConfig"] = {"interval": interval}
    elif sharing == "mps":
        mps: dict[str, Any] = {}
        if settings.get("accel_dra_mps_active_thread_percentage") is not None:
            mps["defaultActiveThreadPercentage"] = int(settings["accel_dra_mps_active_thread_percentage"])
        if settings.get("accel_dra_mps_pinned_memory_limit") is not None:
            mps["defaultPinnedDeviceMemoryLimit"] = str(settings["accel_dra_mps_pinned_memory_limit"])
        config["sharing"] = {"strategy": DRA_STRATEGIES[sharing], "mpsConfig": mps}
    return config


def dra_feature_gates_needed(settings: dict[str, Any]) -> set[str]:
    """The DRA driver's feature gates a dra pool's sharing needs turned on (both alpha in v0.4.1)."""
    if settings.get("accel_mode") != "dra":
        return set()
    gate = DRA_SHARING_GATES.get(settings.get("accel_dra_sharing") or "")
    return {gate} if gate else set()


def mig_config_name(settings: dict[str, Any]) -> str:
    """mig-parted config name for a pool's geometry (``mig_model.mig_config_name``)."""
    return mig_model.mig_config_name(settings.get("accel_mig_geometry") or {})


def node_labels(settings: dict[str, Any]) -> dict[str, str]:
    """Labels kube-accel sets on a pool's nodes (product labels plus what upstream components read)."""
    mode = settings["accel_mode"]
    labels = {
        LABELS["pool"]: str(settings["accel_pool"]),
        LABELS["mode"]: mode,
        LABELS["managed"]: "true",
        UPSTREAM_LABELS["gpu_present"]: "true",
        # The GPU Operator resets gpu.present to "false" and drops its gpu.deploy.* labels without this NFD label.
        UPSTREAM_LABELS["nfd_pci_nvidia"]: "true",
    }
    if setting_on(settings, "accel_vfio_passthrough"):
        # GPUs bound to vfio-pci have no driver: the operator runs none of its operands here (and removes every
        # gpu.deploy.* label itself, so kube-accel sets none).
        labels[UPSTREAM_LABELS["deploy_operands"]] = "false"
    else:
        # kube-accel's charts own the device plugin on every pool, not the GPU Operator (and a dra pool has none at
        # all: its GPUs are the DRA driver's). The operator keeps a non-empty deploy label as it is, and its MIG
        # manager leaves "false" alone while it reconfigures.
        labels[UPSTREAM_LABELS["deploy_device_plugin"]] = "false"
        # As the operator sets it on GPU nodes; mig-manager pauses the pgpu agents through it (charts/pgpu).
        labels[UPSTREAM_LABELS["deploy_client"]] = "true"
    if mode == "vgpu":
        labels[LABELS["vgpu_backend"]] = settings["accel_vgpu_backend"]
    if mode == "dra":
        # The DRA driver's kubelet plugin selects these nodes; no device-plugin config label (device_plugin_config is
        # None), so no NVIDIA device plugin or config-manager of kube-accel's charts selects them.
        labels[LABELS["dra"]] = "true"
    config = device_plugin_config(settings)
    if config:
        labels[UPSTREAM_LABELS["device_plugin_config"]] = config
    if mode == "mps":
        # GFD is the only upstream writer of this label; setting it lets MPS run without GFD.
        labels[UPSTREAM_LABELS["mps_capable"]] = "true"
    if operator_mig(settings):
        labels[UPSTREAM_LABELS["mig_config"]] = mig_config_name(settings)
        # Without GFD this is what makes the operator label the node for its MIG manager.
        labels[UPSTREAM_LABELS["mig_capable"]] = "true"
        labels[UPSTREAM_LABELS["deploy_mig_manager"]] = "true"
    else:
        # Keeps the operator's MIG manager (and its mig.config=all-disabled) off pools whose MIG layout is not its
        # own: it would take an A100, A30 or H100 node without this label for MIG capable (common.constants).
        labels[UPSTREAM_LABELS["mig_capable"]] = "false"
    return labels


def operator_mig(settings: dict[str, Any]) -> bool:
    """The GPU Operator's mig-manager owns this pool's MIG layout (pgpu with a geometry, mig_owner operator; never
    on VM passthrough pools, where the operator runs no operand)."""
    return (settings["accel_mode"] == "pgpu" and mig_enabled(settings)
            and not setting_on(settings, "accel_vfio_passthrough") and settings["accel_mig_owner"] == "operator")


def os_labels(os_release: dict[str, str] | None) -> dict[str, str]:
    """NFD's OS labels for a host's os-release (common.constants.NFD_OS_LABELS); values that are not valid label
    values are left out rather than refused by the API server."""
    out = {}
    for key, label in NFD_OS_LABELS.items():
        value = (os_release or {}).get(key) or ""
        if LABEL_VALUE_RE.match(value):
            out[label] = value
    return out


def sharing_label_keys() -> set[str]:
    """The labels that decide how a node shares its GPUs: a change moves its device plugin to another config (or
    another release), so its GPU pods are drained first (roles/pool_labels)."""
    # LABELS["dra"] follows the mode label, whose change already drains.
    return {LABELS["pool"], LABELS["mode"], LABELS["vgpu_backend"], UPSTREAM_LABELS["device_plugin_config"],
            UPSTREAM_LABELS["mig_config"]}


def managed_label_keys() -> set[str]:
    """Every label key kube-accel may set; keys in this set that a node should no longer carry get removed."""
    return set(LABELS.values()) | set(UPSTREAM_LABELS.values())


def advertised_resources(settings: dict[str, Any], gpu_count: int, gpu_memory_mib: int) -> dict[str, int]:
    """Extended resources a node of this pool advertises once its device plugin runs.

    A dra pool advertises none: its GPUs are devices in the DRA driver's ResourceSlices, allocated by claim, and its
    nodes carry no nvidia.com/gpu (or any other) extended resource; what verify checks there are allocated claims.
    """
    mode = settings["accel_mode"]
    if gpu_count <= 0 or mode == "dra":
        return {}
    if mode == "vgpu" and settings["accel_vgpu_backend"] == "gpu-manager":
        return {
            RESOURCES["vgpu_core_gpu_manager"]: gpu_count * VCUDA_CORES_PER_GPU,
            # gpu-manager v1.1.5 divides the node's total memory once (NvidiaTopoAllocator.capacity), not each GPU's.
            RESOURCES["vgpu_memory_gpu_manager"]: (gpu_count * gpu_memory_mib) // VCUDA_MEMORY_UNIT_MIB,
        }
    if mode == "vgpu":
        return {RESOURCES["vgpu_hami"]: gpu_count * int(settings["accel_vgpu_split_count"])}
    if mode == "mps":
        return {RESOURCES["mps"]: gpu_count * int(settings["accel_mps_replicas"])}
    if mode == "timeslice":
        ts = time_slicing(settings)
        return {RESOURCES["timeslice_shared" if ts["renameByDefault"] else "timeslice"]: gpu_count * ts["replicas"]}
    if mig_enabled(settings):
        geometry = settings["accel_mig_geometry"]
        if settings["accel_mig_strategy"] == "single":
            # single strategy: every GPU carries one profile; nvidia.com/gpu counts MIG devices.
            return {RESOURCES["pgpu"]: gpu_count * sum(int(c) for c in geometry.values())}
        # The plugin writes a profile's "+" as "." (k8s-device-plugin v0.20.0 internal/rm/rm.go:145).
        return {f"nvidia.com/mig-{profile}".replace("+", "."): gpu_count * int(c) for profile, c in geometry.items()}
    return {RESOURCES["pgpu"]: gpu_count}


def request_for(settings: dict[str, Any]) -> dict[str, str]:
    """The smallest resource request a workload makes to land on this pool (used by the verify Jobs); none for a dra
    pool, whose workloads ask by ResourceClaim (its ResourceClaimTemplate), not by an extended resource."""
    if settings["accel_mode"] == "dra":
        return {}
    resources = advertised_resources(settings, 1, 16 * 1024)
    if settings["accel_mode"] == "vgpu" and settings["accel_vgpu_backend"] == "gpu-manager":
        # vcuda-core: 1-100 (a fraction) or multiples of 100; vcuda-memory in 256 MiB units.
        return {RESOURCES["vgpu_core_gpu_manager"]: "50", RESOURCES["vgpu_memory_gpu_manager"]: "4"}
    name = sorted(resources)[0]
    return {name: "1"}


def collect_pools(hosts: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Pools from the GPU hosts' hostvars: one entry per ``accel_pool`` with its settings and hosts.

    Settings are taken from the first host; preflight guarantees a pool's hosts agree on its mode.
    """
    pools: dict[str, dict[str, Any]] = {}
    for host in sorted(hosts):
        settings = pool_settings(hosts[host])
        if "accel_pool" not in settings:
            continue
        name = settings["accel_pool"]
        entry = pools.setdefault(name, {"pool": name, "settings": settings, "hosts": []})
        entry["hosts"].append(host)
    return [pools[name] for name in sorted(pools)]


def release_key(settings: dict[str, Any]) -> str:
    """The chart release a pool belongs to: one per mode, and one per backend for vGPU."""
    if settings["accel_mode"] == "vgpu":
        return f"vgpu-{settings['accel_vgpu_backend']}"
    return settings["accel_mode"]


def desired_nodes(pools: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Node name -> {labels, taints} for every host of every pool."""
    nodes = {}
    for pool in pools:
        settings = pool["settings"]
        taints = []
        if setting_on(settings, "accel_node_taint"):
            taints.append({"key": LABELS["pool"], "value": str(settings["accel_pool"]), "effect": "NoSchedule"})
        labels = node_labels(settings)
        for host in pool["hosts"]:
            # os_release: host -> the os-release the preflight read (accel_pools_of); unknown hosts get no OS labels.
            nodes[host] = {"labels": {**labels, **os_labels((pool.get("os_release") or {}).get(host))},
                           "taints": taints}
    return nodes
