# Copyright: kube-accel contributors
# Apache License 2.0
"""Each chart's values: pools grouped into releases (one per mode, one per vGPU backend) and the values of each.

What a pool is and promises lives in ``plan.pools``, the cluster-wide settings in ``plan.cluster_settings``; this file
only turns pools into the values of the chart that serves them.
"""

from __future__ import annotations

import math
import os
import re
from typing import Any

from ansible_collections.kube_accel.gpu.plugins.module_utils.common.constants import (
    LABELS,
    ROLLOUT_MAX_UNAVAILABLE,
    RUNTIME_CLASS,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import pools as pool_model
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.pools import (
    advertised_resources,
    device_plugin_config,
    mig_enabled,
    release_key,
    setting_on,
    time_slicing,
)

RELEASE_PREFIX = "kube-accel"


def metrics_peers(cluster: dict[str, Any]) -> list[dict[str, Any]]:
    """NetworkPolicy peers allowed to scrape metrics ports: the CIDRs, then the namespaces (by their name label)."""
    peers: list[dict[str, Any]] = [{"ipBlock": {"cidr": c}} for c in cluster.get("metrics_cidrs") or []]
    namespaces = list(cluster.get("metrics_namespaces") or [])
    if namespaces:
        peers.append({"namespaceSelector": {"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces}]}})
    return peers


# The dra pools' release installs kube-accel's DeviceClasses and ResourceClaimTemplates (charts/dra-pools); NVIDIA's
# DRA driver is a release of its own (roles/dra_driver, dra_driver_release).
DRA_POOLS_CHART = "dra-pools"


def dra_driver_release(prefix: str = RELEASE_PREFIX) -> str:
    """The release of NVIDIA's DRA driver (roles/dra_driver), in the charts' namespace while any pool is dra."""
    return f"{prefix}-dra-driver"


def dra_device_class(pool: str, prefix: str = RELEASE_PREFIX) -> str:
    """The DeviceClass of a dra pool, and the name of its ResourceClaimTemplates."""
    return f"{prefix}-{pool}"


def chart_for(key: str) -> str:
    """The chart directory (under charts/) a release key installs (timeslice: the pgpu chart's device plugin with
    sharing.timeSlicing configs; dra: the pools' DeviceClasses and claim templates)."""
    if key == "timeslice":
        return "pgpu"
    if key == "dra":
        return DRA_POOLS_CHART
    return "vgpu" if key.startswith("vgpu-") else key


# The charts' rollingUpdate.maxUnavailable default (charts/{pgpu,mps,vgpu}/values.yaml): node agents restarted at once.
DEFAULT_MAX_UNAVAILABLE = ROLLOUT_MAX_UNAVAILABLE
# helm --wait of a release: this much for the release itself, plus ROLLOUT_BATCH_S for each batch of maxUnavailable
# nodes whose agent pods are replaced one batch after the other (pull, start, readiness of one pod).
ROLLOUT_BASE_S = 300
ROLLOUT_BATCH_S = 60


def max_unavailable_nodes(max_unavailable: int | str, nodes: int) -> int:
    """Nodes a DaemonSet rolls at once: a count, or "N%" of ``nodes`` rounded up as the DaemonSet controller does
    (intstr.GetScaledValueFromIntOrPercent with roundUp); at least 1."""
    if isinstance(max_unavailable, bool):
        raise ValueError(f"maxUnavailable must be an integer >= 1 or a percentage 'N%', not {max_unavailable!r}")
    if isinstance(max_unavailable, int):
        count = max_unavailable
    else:
        match = re.fullmatch(r"\s*(\d+)\s*%\s*", str(max_unavailable))
        if match:
            count = math.ceil(max(nodes, 0) * int(match.group(1)) / 100)
        elif str(max_unavailable).strip().isdigit():
            count = int(max_unavailable)
        else:
            raise ValueError(f"maxUnavailable must be an integer >= 1 or a percentage 'N%', not {max_unavailable!r}")
    return max(count, 1)


def rollout_timeout(nodes: int, max_unavailable: int | str = DEFAULT_MAX_UNAVAILABLE, base_s: int = ROLLOUT_BASE_S,
                    batch_s: int = ROLLOUT_BATCH_S) -> str:
    """helm's --timeout for a release whose node agents run on ``nodes`` nodes, as a Go duration ("900s"): ``base_s``
    plus ``batch_s`` per batch of ``max_unavailable`` nodes, so that a rollout over hundreds of nodes is not cut off
    (and rolled back) by a timeout sized for a few."""
    batches = math.ceil(max(nodes, 0) / max_unavailable_nodes(max_unavailable, nodes))
    return f"{base_s + batches * batch_s}s"


def pool_releases(pools: list[dict[str, Any]], cluster: dict[str, Any], prefix: str = RELEASE_PREFIX,
                  chart_dir: str = "", timeout: str = "") -> list[dict[str, Any]]:
    """Pools grouped into releases: [{name, key, chart, values, pools, timeout}], sorted by key.

    ``chart`` is the chart's directory name under charts/, or its path under ``chart_dir`` when given. ``timeout``:
    helm's --timeout of every release; "" gives each one ``rollout_timeout`` of its pools' nodes.
    """
    grouped: dict[str, list] = {}
    for pool in pools:
        grouped.setdefault(release_key(pool["settings"]), []).append(pool)
    releases = []
    for key in sorted(grouped):
        members = grouped[key]
        memory = {p["pool"]: p.get("gpu_memory_mib", 0) for p in members}
        chart = chart_for(key)
        values = release_values(key, members, cluster, memory)
        nodes = len({h for p in members for h in p.get("hosts") or []})
        max_unavailable = (values.get("rollingUpdate") or {}).get("maxUnavailable", DEFAULT_MAX_UNAVAILABLE)
        releases.append({
            "name": f"{prefix}-{key}",
            "key": key,
            "chart": os.path.join(chart_dir, chart) if chart_dir else chart,
            "values": values,
            "pools": [p["pool"] for p in members],
            "timeout": timeout or rollout_timeout(nodes, max_unavailable),
        })
    return releases


def release_values(key: str, pools: list[dict[str, Any]], cluster: dict[str, Any],
                   gpu_memory_mib: dict[str, int] | None = None) -> dict[str, Any]:
    """Values of one release (see ``release_key``) serving ``pools``.

    ``cluster``: cluster-wide settings without the ``accel_`` prefix (``cluster_settings``).
    ``gpu_memory_mib``: pool -> GPU memory, from the facts, for the MPS pinned-memory notes.
    """
    names = [p["pool"] for p in pools]
    if key == "dra":
        return dra_values(pools, cluster)
    values: dict[str, Any] = {
        "global": {
            "imageRegistry": cluster.get("image_registry") or "",
            "imagePullSecrets": list(cluster.get("image_pull_secrets") or []),
        },
        "poolLabelKey": LABELS["pool"],
        "pools": names,
    }
    if cluster.get("image_digests"):
        values["global"]["imageDigests"] = dict(cluster["image_digests"])
    if any(setting_on(p["settings"], "accel_node_taint") for p in pools):
        values["tolerations"] = [
            {"key": "CriticalAddonsOnly", "operator": "Exists"},
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": LABELS["pool"], "operator": "Exists", "effect": "NoSchedule"},
        ]
    if key in ("pgpu", "mps", "timeslice"):
        values["runtimeClassName"] = cluster.get("runtime_class") or RUNTIME_CLASS
    if cluster.get("rollout_max_unavailable") is not None:
        values["rollingUpdate"] = {"maxUnavailable": cluster["rollout_max_unavailable"]}
    if key == "pgpu":
        vfio = [p["pool"] for p in pools if setting_on(p["settings"], "accel_vfio_passthrough")]
        values["pools"] = [n for n in names if n not in vfio] or names[:0]
        if vfio:
            values["passthrough"] = {"enabled": True, "pools": vfio}
        # The static CPU manager rewrites cgroups; device specs keep GPU access (upstream compat mode).
        values["compatWithCPUManager"] = any(p["settings"]["accel_numa_policy"] != "none" for p in pools)
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
            replicas = int(p["settings"]["accel_mps_replicas"])
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
        if cluster.get("cluster_components_on_pool_nodes"):
            values["clusterComponents"] = {"avoidPoolNodes": False}
        # The API server (webhook) and a cluster scheduler (extender) are the only peers of those ports.
        values["controlPlaneFrom"] = [{"ipBlock": {"cidr": c}} for c in cluster.get("control_plane_cidrs") or []]
        values["metricsFrom"] = metrics_peers(cluster)
        if backend == "hami":
            first = pools[0]["settings"]
            values["hami"] = {
                **_hami_device_settings(first),
                # One inventory policy for both levels: binpack fills nodes and GPUs before using new ones.
                "scheduler": {"nodeSchedulerPolicy": first["accel_vgpu_scheduler_policy"],
                              "gpuSchedulerPolicy": first["accel_vgpu_scheduler_policy"]},
            }
            # The release's settings are its first pool's; HAMi takes a node's own split count and scaling from its
            # nodeconfig entry (HAMi v2.10.0 plugin/server.go readFromConfigFile), so every other pool's nodes get one.
            node_config = [{"name": host, **_hami_node_settings(p["settings"])}
                           for p in pools[1:] if _hami_device_settings(p["settings"]) != _hami_device_settings(first)
                           for host in p["hosts"]]
            if node_config:
                values["hami"]["nodeConfig"] = node_config
    return values


def dra_values(pools: list[dict[str, Any]], cluster: dict[str, Any]) -> dict[str, Any]:
    """charts/dra-pools values: per pool a DeviceClass selecting the pool's GPUs by UUID (``gpu_uuids`` from the
    hosts' NVML facts, accel_pools_of) or their MIG devices, with the pool's opaque config
    (plan.pools.dra_opaque_config), and its ResourceClaimTemplate in each claim namespace."""
    return {
        "poolLabelKey": LABELS["pool"],
        "pools": [p["pool"] for p in pools],
        "devicePools": [{
            "pool": p["pool"],
            "deviceClassName": dra_device_class(p["pool"]),
            "deviceType": "mig" if mig_enabled(p["settings"]) else "gpu",
            "gpuUUIDs": sorted(p.get("gpu_uuids") or []),
            "config": pool_model.dra_opaque_config(p["settings"]),
        } for p in pools],
        "claimTemplates": {"namespaces": list(cluster.get("dra_claim_namespaces") or [])},
    }


# NVIDIA's DRA driver image (its chart's image.repository at registry.k8s.io; the tag is the chart's appVersion with
# a "v"): accel_image_registry replaces the registry as for every other image.
DRA_DRIVER_REGISTRY = "registry.k8s.io"
DRA_DRIVER_IMAGE = "dra-driver-nvidia/dra-driver-nvidia-gpu"
# Where the driver's files are on a node: kube-accel's nvidia_driver role (or the host's image) installs the driver
# on the host itself, never in the GPU Operator's driver container (/run/nvidia/driver).
DRA_DRIVER_ROOT = "/"


def dra_driver_values(pools: list[dict[str, Any]], cluster: dict[str, Any], feature_gates: dict[str, Any] | None = None,
                      version: str = "") -> dict[str, Any]:
    """Values of NVIDIA's dra-driver-nvidia-gpu chart (v0.4.1 keys) for the dra pools: GPUs only (no
    ComputeDomains: no controller, no IMEX), the kubelet plugin on the dra pools' nodes alone, the feature gates the
    inventory sets (never an alpha gate by itself), the image from the site's mirror.

    The chart's own kubelet-plugin affinity selects every node with an NVIDIA PCI device or nvidia.com/gpu.present,
    which kube-accel sets on every pool: it is replaced (a list replaces a list in Helm's merge) by one term on the
    dra label, and the nodeSelector says the same. gpuResourcesEnabledOverride acknowledges the chart's refusal to run
    GPU resources next to NVIDIA's device plugin: kube-accel runs none on dra nodes (their labels select no device
    plugin, and the preflight refuses a node in two pools).
    """
    dra_term = {"matchExpressions": [{"key": LABELS["dra"], "operator": "In", "values": ["true"]}]}
    tolerations = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    if any(setting_on(p["settings"], "accel_node_taint") for p in pools if p["settings"].get("accel_mode") == "dra"):
        tolerations.append({"key": LABELS["pool"], "operator": "Exists", "effect": "NoSchedule"})
    registry = cluster.get("image_registry") or DRA_DRIVER_REGISTRY
    image: dict[str, Any] = {"repository": f"{registry}/{DRA_DRIVER_IMAGE}"}
    if version:
        image["tag"] = f"v{version.lstrip('v')}"
    values: dict[str, Any] = {
        "nvidiaDriverRoot": DRA_DRIVER_ROOT,
        "gpuResourcesEnabledOverride": True,
        "resources": {"gpus": {"enabled": True}, "computeDomains": {"enabled": False}},
        "featureGates": dict(feature_gates or {}),
        "image": image,
        "imagePullSecrets": [{"name": n} for n in cluster.get("image_pull_secrets") or []],
        "webhook": {"enabled": False},
        "kubeletPlugin": {
            "nodeSelector": {LABELS["dra"]: "true"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [dra_term]}}},
            "tolerations": tolerations,
        },
    }
    return values


def _hami_device_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """A HAMi pool's device settings under the chart's names (hami.deviceSplitCount, ...)."""
    return {"deviceSplitCount": int(settings["accel_vgpu_split_count"]),
            "deviceMemoryScaling": float(settings["accel_vgpu_memory_scaling"]),
            "deviceCoreScaling": float(settings["accel_vgpu_core_scaling"])}


def _hami_node_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """The same settings as a HAMi nodeconfig entry names them (pkg/device/nvidia/device.go NodeDefaultConfig)."""
    return {key.lower(): value for key, value in _hami_device_settings(settings).items()}
