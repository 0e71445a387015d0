# Copyright: kube-accel contributors
# Apache License 2.0
"""What a node pool promises Kubernetes: its node labels and the extended resources its nodes advertise.

One function each, shared by the cluster play (labels), the verify play (expected allocatable) and the lab
(fake nodes sized like the device plugin of their pool would size them).
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.kube_accel.gpu.plugins.module_utils import accel_mig
from ansible_collections.kube_accel.gpu.plugins.module_utils.accel_constants import (
    LABELS,
    NFD_OS_LABELS,
    RESOURCES,
    RUNTIME_CLASS,
    UPSTREAM_LABELS,
    VCUDA_CORES_PER_GPU,
    VCUDA_MEMORY_UNIT_MIB,
)

POOL_KEYS = ("accel_pool", "accel_mode")
# A Kubernetes label value: at most 63 characters, alphanumerics with - _ . inside.
LABEL_VALUE_RE = re.compile(r"^(?=.{1,63}$)[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def pool_settings(hostvars: dict[str, Any]) -> dict[str, Any]:
    """The accel_* settings of one host, without the ``accel_`` prefix."""
    return {k[len("accel_"):]: v for k, v in hostvars.items() if k.startswith("accel_")}


def mig_enabled(settings: dict[str, Any]) -> bool:
    return bool(settings.get("mig_geometry")) and settings.get("mig_strategy", "none") != "none"


def _flag(settings: dict[str, Any], name: str, default: bool) -> bool:
    value = settings.get(name, default)
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "on", "1")
    return bool(value)


def time_slicing(settings: dict[str, Any]) -> dict[str, Any]:
    """A timeslice pool's ``sharing.timeSlicing`` settings: replicas, renameByDefault, failRequestsGreaterThanOne.

    kube-accel's defaults differ from the plugin's (both false): renamed replicas (nvidia.com/gpu.shared) keep pods
    that expect an exclusive nvidia.com/gpu off shared GPUs, and one replica per pod is upstream's recommendation.
    """
    return {"replicas": int(settings.get("timeslice_replicas", 2)),
            "renameByDefault": _flag(settings, "timeslice_rename_by_default", True),
            "failRequestsGreaterThanOne": _flag(settings, "timeslice_fail_requests_greater_than_one", True)}


def device_plugin_config(settings: dict[str, Any]) -> str | None:
    """Name of the device-plugin config a node selects with ``nvidia.com/device-plugin.config``."""
    mode = settings.get("mode")
    if mode == "mps":
        return f"mps-{int(settings.get('mps_replicas', 2))}"
    if mode == "timeslice":
        # timeslice-<replicas>[-gpu: advertised as nvidia.com/gpu][-multi: a pod may take several replicas]
        ts = time_slicing(settings)
        return (f"timeslice-{ts['replicas']}" + ("" if ts["renameByDefault"] else "-gpu")
                + ("" if ts["failRequestsGreaterThanOne"] else "-multi"))
    if mode == "pgpu":
        return f"mig-{settings['mig_strategy']}" if mig_enabled(settings) else "exclusive"
    return None


def mig_config_name(settings: dict[str, Any]) -> str:
    """mig-parted config name for a pool's geometry (``accel_mig.mig_config_name``)."""
    return accel_mig.mig_config_name(settings.get("mig_geometry") or {})


def node_labels(settings: dict[str, Any]) -> dict[str, str]:
    """Labels kube-accel sets on a pool's nodes (product labels plus what upstream components read)."""
    mode = settings["mode"]
    labels = {
        LABELS["pool"]: str(settings["pool"]),
        LABELS["mode"]: mode,
        LABELS["managed"]: "true",
        UPSTREAM_LABELS["gpu_present"]: "true",
        # The GPU Operator resets gpu.present to "false" and drops its gpu.deploy.* labels without this NFD label.
        UPSTREAM_LABELS["nfd_pci_nvidia"]: "true",
    }
    if settings.get("vfio_passthrough"):
        # GPUs bound to vfio-pci have no driver: the operator runs none of its operands here (and removes every
        # gpu.deploy.* label itself, so kube-accel sets none).
        labels[UPSTREAM_LABELS["deploy_operands"]] = "false"
    else:
        # kube-accel's charts own the device plugin on every pool, not the GPU Operator. The operator keeps a
        # non-empty deploy label as it is, and its MIG manager leaves "false" alone while it reconfigures.
        labels[UPSTREAM_LABELS["deploy_device_plugin"]] = "false"
        # As the operator sets it on GPU nodes; mig-manager pauses the pgpu agents through it (charts/pgpu).
        labels[UPSTREAM_LABELS["deploy_client"]] = "true"
    if mode == "vgpu":
        labels[LABELS["vgpu_backend"]] = settings.get("vgpu_backend", "hami")
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
        # own: it would take an A100, A30 or H100 node without this label for MIG capable (accel_constants).
        labels[UPSTREAM_LABELS["mig_capable"]] = "false"
    return labels


def operator_mig(settings: dict[str, Any]) -> bool:
    """The GPU Operator's mig-manager owns this pool's MIG layout (pgpu with a geometry, mig_owner operator; never
    on VM passthrough pools, where the operator runs no operand)."""
    return (settings.get("mode") == "pgpu" and mig_enabled(settings) and not settings.get("vfio_passthrough")
            and settings.get("mig_owner", "operator") == "operator")


def parse_os_release(text: str) -> dict[str, str]:
    """``ID`` and ``VERSION_ID`` of an os-release(5) file as {"id", "version_id"} (absent keys left out)."""
    out = {}
    for line in (text or "").splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key in ("ID", "VERSION_ID"):
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            out[key.lower()] = value
    return out


def os_labels(os_release: dict[str, str] | None) -> dict[str, str]:
    """NFD's OS labels for a host's os-release (accel_constants.NFD_OS_LABELS); values that are not valid label
    values are left out rather than refused by the API server."""
    out = {}
    for key, label in NFD_OS_LABELS.items():
        value = (os_release or {}).get(key) or ""
        if LABEL_VALUE_RE.match(value):
            out[label] = value
    return out


def managed_label_keys() -> set[str]:
    """Every label key kube-accel may set; keys in this set that a node should no longer carry get removed."""
    return set(LABELS.values()) | set(UPSTREAM_LABELS.values())


def advertised_resources(settings: dict[str, Any], gpu_count: int, gpu_memory_mib: int) -> dict[str, int]:
    """Extended resources a node of this pool advertises once its device plugin runs."""
    mode = settings["mode"]
    if gpu_count <= 0:
        return {}
    if mode == "vgpu" and settings.get("vgpu_backend", "hami") == "gpu-manager":
        return {
            RESOURCES["vgpu_core_gpu_manager"]: gpu_count * VCUDA_CORES_PER_GPU,
            RESOURCES["vgpu_memory_gpu_manager"]: gpu_count * (gpu_memory_mib // VCUDA_MEMORY_UNIT_MIB),
        }
    if mode == "vgpu":
        return {RESOURCES["vgpu_hami"]: gpu_count * int(settings.get("vgpu_split_count", 10))}
    if mode == "mps":
        return {RESOURCES["mps"]: gpu_count * int(settings.get("mps_replicas", 2))}
    if mode == "timeslice":
        ts = time_slicing(settings)
        return {RESOURCES["timeslice_shared" if ts["renameByDefault"] else "timeslice"]: gpu_count * ts["replicas"]}
    if mig_enabled(settings):
        geometry = settings["mig_geometry"]
        if settings["mig_strategy"] == "single":
            # single strategy: every GPU carries one profile; nvidia.com/gpu counts MIG devices.
            return {RESOURCES["pgpu"]: gpu_count * sum(int(c) for c in geometry.values())}
        # The plugin writes a profile's "+" as "." (k8s-device-plugin v0.20.0 internal/rm/rm.go:145).
        return {f"nvidia.com/mig-{profile}".replace("+", "."): gpu_count * int(c) for profile, c in geometry.items()}
    return {RESOURCES["pgpu"]: gpu_count}


def request_for(settings: dict[str, Any]) -> dict[str, str]:
    """The smallest resource request a workload makes to land on this pool (used by the verify Jobs)."""
    resources = advertised_resources(settings, 1, 16 * 1024)
    if settings["mode"] == "vgpu" and settings.get("vgpu_backend", "hami") == "gpu-manager":
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
        if "pool" not in settings:
            continue
        entry = pools.setdefault(settings["pool"], {"pool": settings["pool"], "settings": settings, "hosts": []})
        entry["hosts"].append(host)
    return [pools[name] for name in sorted(pools)]


def release_key(settings: dict[str, Any]) -> str:
    """The chart release a pool belongs to: one per mode, and one per backend for vGPU."""
    if settings["mode"] == "vgpu":
        return f"vgpu-{settings.get('vgpu_backend', 'hami')}"
    return settings["mode"]


def desired_nodes(pools: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Node name -> {labels, taints} for every host of every pool."""
    nodes = {}
    for pool in pools:
        settings = pool["settings"]
        taints = []
        if settings.get("node_taint"):
            taints.append({"key": LABELS["pool"], "value": str(settings["pool"]), "effect": "NoSchedule"})
        labels = node_labels(settings)
        for host in pool["hosts"]:
            # os_release: host -> the os-release the preflight read (accel_pools_of); unknown hosts get no OS labels.
            nodes[host] = {"labels": {**labels, **os_labels((pool.get("os_release") or {}).get(host))},
                           "taints": taints}
    return nodes


def chart_for(key: str) -> str:
    """The chart directory (under charts/) a release key installs (timeslice: the pgpu chart's device plugin with
    sharing.timeSlicing configs)."""
    if key == "timeslice":
        return "pgpu"
    return "vgpu" if key.startswith("vgpu-") else key


def release_values(key: str, pools: list[dict[str, Any]], cluster: dict[str, Any],
                   gpu_memory_mib: dict[str, int] | None = None) -> dict[str, Any]:
    """Values of one release (see ``release_key``) serving ``pools``.

    ``cluster``: cluster-wide settings without the ``accel_`` prefix (image_registry, image_pull_secrets).
    ``gpu_memory_mib``: pool -> GPU memory, from the facts, for the MPS pinned-memory notes.
    """
    names = [p["pool"] for p in pools]
    values: dict[str, Any] = {
        "global": {
            "imageRegistry": cluster.get("image_registry") or "",
            "imagePullSecrets": list(cluster.get("image_pull_secrets") or []),
        },
        "poolLabelKey": LABELS["pool"],
        "pools": names,
    }
    if any(p["settings"].get("node_taint") for p in pools):
        values["tolerations"] = [
            {"key": "CriticalAddonsOnly", "operator": "Exists"},
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": LABELS["pool"], "operator": "Exists", "effect": "NoSchedule"},
        ]
    if key in ("pgpu", "mps", "timeslice"):
        values["runtimeClassName"] = cluster.get("runtime_class") or RUNTIME_CLASS
    if key == "pgpu":
        vfio = [p["pool"] for p in pools if p["settings"].get("vfio_passthrough")]
        values["pools"] = [n for n in names if n not in vfio] or names[:0]
        if vfio:
            values["passthrough"] = {"enabled": True, "pools": vfio}
        # The static CPU manager rewrites cgroups; device specs keep GPU access (upstream compat mode).
        values["compatWithCPUManager"] = any(p["settings"].get("numa_policy", "none") != "none" for p in pools)
        # Only the configs the pools select: a MIG config makes the agents add SYS_ADMIN (null drops a chart default).
        used = {device_plugin_config(p["settings"]) for p in pools if p["pool"] in values["pools"]} or {"exclusive"}
        values["configs"] = {name: ({"migStrategy": name[len("mig-"):] if name.startswith("mig-") else "none"}
                                    if name in used else None) for name in ("exclusive", "mig-mixed", "mig-single")}
        values["defaultConfig"] = "exclusive" if "exclusive" in used else sorted(used)[0]
    elif key == "timeslice":
        # The pgpu chart's named configs with sharing.timeSlicing; its defaults (exclusive, MIG) are dropped.
        ts_configs: dict[str, Any] = dict.fromkeys(("exclusive", "mig-mixed", "mig-single"))
        for p in pools:
            ts_configs[device_plugin_config(p["settings"])] = {"migStrategy": "none",
                                                               "timeSlicing": time_slicing(p["settings"])}
        values["configs"] = ts_configs
        used = sorted(name for name, c in ts_configs.items() if c)
        values["defaultConfig"] = used[0]
        # helm test asks for one replica of what the default config advertises.
        values["test"] = {"resource": next(iter(advertised_resources(pools[0]["settings"], 1, 0)))}
    elif key == "mps":
        configs: dict[str, Any] = {}
        for p in pools:
            replicas = int(p["settings"].get("mps_replicas", 2))
            name = device_plugin_config(p["settings"])
            # Pools sharing a config may differ in GPU memory: the notes quote the smallest.
            memories = [m for m in ((gpu_memory_mib or {}).get(p["pool"], 0),
                                    configs.get(name, {}).get("gpuMemoryMiB", 0)) if m]
            configs[name] = {"replicas": replicas, "renameByDefault": False, "failRequestsGreaterThanOne": True,
                             "gpuMemoryMiB": min(memories, default=0)}
        values["configs"] = configs
        values["defaultConfig"] = sorted(configs)[0]
    elif key.startswith("vgpu-"):
        backend = key[len("vgpu-"):]
        values["backend"] = backend
        # The API server (webhook) and a cluster scheduler (extender) are the only peers of those ports.
        values["controlPlaneFrom"] = [{"ipBlock": {"cidr": c}} for c in cluster.get("control_plane_cidrs") or []]
        if backend == "hami":
            first = pools[0]["settings"]
            values["hami"] = {
                "deviceSplitCount": int(first.get("vgpu_split_count", 10)),
                "deviceMemoryScaling": float(first.get("vgpu_memory_scaling", 1.0)),
                "deviceCoreScaling": float(first.get("vgpu_core_scaling", 1.0)),
                # One inventory policy for both levels: binpack fills nodes and GPUs before using new ones.
                "scheduler": {"nodeSchedulerPolicy": first.get("vgpu_scheduler_policy", "binpack"),
                              "gpuSchedulerPolicy": first.get("vgpu_scheduler_policy", "binpack")},
            }
    return values
