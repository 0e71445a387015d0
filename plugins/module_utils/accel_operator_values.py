# Copyright: kube-accel contributors
# Apache License 2.0
"""Values for the upstream NVIDIA GPU Operator chart (``nvidia/gpu-operator``), built from kube-accel's pools.

kube-accel installs the driver, the container toolkit and every device plugin itself (charts/pgpu, mps, vgpu);
the operator only runs what kube-accel does not: the MIG manager (with a mig-parted config generated from the
pools' validated geometries) and the DCGM exporter, plus optional NFD/GFD.

The keys were checked against the chart's values.yaml of **gpu-operator v26.7.0** (``OPERATOR_CHART_VERSION``;
see ../shared/reference/upstream-charts.md section 4.2). ``schemas/gpu-operator-values.schema.json`` describes exactly
the keys this module sets; tests validate generated values against it.
"""

from __future__ import annotations

import copy
from typing import Any

from ansible_collections.kube_accel.gpu.plugins.module_utils.accel_constants import GPU_OPERATOR_VERSION, LABELS
from ansible_collections.kube_accel.gpu.plugins.module_utils.accel_mig import mig_parted_config_for_hosts
from ansible_collections.kube_accel.gpu.plugins.module_utils.accel_pools import operator_mig, setting_on
from ansible_collections.kube_accel.gpu.plugins.module_utils.accel_yaml import yaml

OPERATOR_CHART_VERSION = GPU_OPERATOR_VERSION
MIG_PARTED_CONFIGMAP = "kube-accel-mig-parted-config"

# Operand -> (repository, image, version) as in the v26.7.0 chart defaults. kube-accel disables driver, toolkit,
# device plugin and the sandbox operands, but their images stay overridable so a mirror is complete if a site
# turns one back on. The validator and the node-status exporter ship in the operator image (values.yaml
# validator/nodeStatusExporter: nvcr.io/nvidia/gpu-operator, version defaulting to the chart's appVersion);
# the version is pinned here because a chart built from git carries appVersion "main-latest".
IMAGES: dict[str, tuple[str, str, str]] = {
    "operator": ("nvcr.io/nvidia", "gpu-operator", OPERATOR_CHART_VERSION),
    "validator": ("nvcr.io/nvidia", "gpu-operator", OPERATOR_CHART_VERSION),
    "driver": ("nvcr.io/nvidia", "driver", "595.91.07"),
    "driver.manager": ("nvcr.io/nvidia/cloud-native", "k8s-driver-manager", "v0.12.0"),
    "toolkit": ("nvcr.io/nvidia/k8s", "container-toolkit", "v1.20.0"),
    "devicePlugin": ("nvcr.io/nvidia", "k8s-device-plugin", "v0.20.0"),
    "gfd": ("nvcr.io/nvidia", "k8s-device-plugin", "v0.20.0"),
    "dcgm": ("nvcr.io/nvidia/cloud-native", "dcgm", "4.6.0-1-ubuntu24.04"),
    "dcgmExporter": ("nvcr.io/nvidia/k8s", "dcgm-exporter", "4.6.0-4.8.3-distroless"),
    "migManager": ("nvcr.io/nvidia/cloud-native", "k8s-mig-manager", "v0.15.0"),
    "nodeStatusExporter": ("nvcr.io/nvidia", "gpu-operator", OPERATOR_CHART_VERSION),
    "vfioManager": ("nvcr.io/nvidia/cloud-native", "k8s-driver-manager", "v0.12.0"),
    "sandboxDevicePlugin": ("nvcr.io/nvidia", "kubevirt-gpu-device-plugin", "v1.6.0"),
}
UPSTREAM_REGISTRIES = ("nvcr.io", "registry.k8s.io", "docker.io")


def _flag(cluster: dict[str, Any], key: str, default: bool) -> bool:
    """A boolean setting; Ansible may hand over "true"/"False" strings from templated vars."""
    value = cluster.get(key, default)
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "on", "1"):
        return True
    if text in ("false", "no", "off", "0", ""):
        return False
    raise ValueError(f"{key}={value!r} is not a boolean (true/false)")


def _mirror(repository: str, registry: str) -> str:
    """``nvcr.io/nvidia/k8s`` -> ``<registry>/nvidia/k8s``: one private mirror, upstream paths kept."""
    if not registry:
        return repository
    host, _unused, path = repository.partition("/")
    if host not in UPSTREAM_REGISTRIES:
        path = repository
    return f"{registry.rstrip('/')}/{path}"


def operator_mig_pools(pools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pools whose MIG layout the operator's mig-manager owns (accel_pools.operator_mig)."""
    return [pool for pool in pools if operator_mig(pool["settings"])]


def mig_parted_document(pools: list[dict[str, Any]]) -> dict[str, Any]:
    """mig-parted ``version: v1`` config with one entry per operator-owned MIG geometry.

    Config names are the ``nvidia.com/mig.config`` label values the cluster play puts on the pool's nodes
    (accel_mig.mig_config_name); device filters come from the pools' ``device_ids`` (from the GPU facts) or cover
    every model the geometry fits; ``all-disabled`` is always present. Raises ValueError for an illegal geometry.
    """
    hosts = {
        pool["pool"]: {"geometry": pool["settings"]["accel_mig_geometry"], "device_ids": pool.get("device_ids") or []}
        for pool in operator_mig_pools(pools)
    }
    return mig_parted_config_for_hosts(hosts)


def gpu_operator_values(pools: list[dict[str, Any]], cluster: dict[str, Any] | None = None) -> dict[str, Any]:
    """Values for nvidia/gpu-operator v26.7.0.

    ``pools``: accel_pools.collect_pools entries ({pool, settings, hosts}, optionally device_ids from the facts).
    ``cluster``: cluster settings, all optional:
      image_registry (""), image_pull_secrets ([]), service_monitor (False), service_monitor_interval ("15s"),
      service_monitor_labels ({}: ServiceMonitor labels a Prometheus selects on), dcgm_exporter (True),
      driver_managed_by_kube_accel (True), toolkit_managed_by_kube_accel (True), nfd (False), gfd (False),
      cdi (False), psa (True), mig_with_reboot (False), image_overrides ({operand: {repository, image, version}}).
    The container runtime is not an input: v26.7.0 detects it per node (state_manager.go getRuntime) and its chart
    no longer reads operator.defaultRuntime.
    """
    cluster = dict(cluster or {})
    registry = cluster.get("image_registry") or ""
    secrets = list(cluster.get("image_pull_secrets") or [])
    overrides = cluster.get("image_overrides") or {}
    unknown = set(overrides) - set(IMAGES)
    if unknown:
        raise ValueError(f"image_overrides has unknown operand(s) {', '.join(sorted(unknown))}; "
                         f"allowed: {', '.join(sorted(IMAGES))}")

    values: dict[str, Any] = {}

    def section(path: str) -> dict[str, Any]:
        node = values
        for part in path.split("."):
            node = node.setdefault(part, {})
        return node

    for operand, (repository, image, version) in IMAGES.items():
        spec = {"repository": repository, "image": image, "version": version, **(overrides.get(operand) or {})}
        node = section(operand)
        node["repository"] = _mirror(spec["repository"], registry)
        node["image"] = spec["image"]
        node["version"] = str(spec["version"])
        if operand != "driver.manager":  # the driver manager inherits the driver's pull secrets
            node["imagePullSecrets"] = list(secrets)

    if registry:
        # The NFD subchart (0.19.0) pulls from registry.k8s.io/nfd; mirror it too when NFD is on.
        values["node-feature-discovery"] = {
            "image": {"repository": _mirror("registry.k8s.io/nfd/node-feature-discovery", registry)},
            "imagePullSecrets": [{"name": s} for s in secrets],
        }

    mig_pools = operator_mig_pools(pools)
    strategies = {p["settings"]["accel_mig_strategy"] for p in mig_pools}
    # The operator's mig.strategy drives its GFD labels only (kube-accel's pgpu chart sets the strategy per node
    # through named device-plugin configs). Mixed pools, or disagreeing ones, need the per-profile view.
    values["mig"] = {"strategy": "single" if strategies == {"single"} else "mixed" if mig_pools else "single"}

    taint_toleration = [{"key": LABELS["pool"], "operator": "Exists", "effect": "NoSchedule"}]
    values["daemonsets"] = {
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        + (taint_toleration if any(setting_on(p["settings"], "accel_node_taint") for p in pools) else []),
    }
    # The operator labels its own namespace for the privileged Pod Security level (state_manager.go
    # setPodSecurityLabelsForNamespace); the cluster play labels it too, before the install.
    values["psa"] = {"enabled": _flag(cluster, "psa", True)}

    values["driver"]["enabled"] = not _flag(cluster, "driver_managed_by_kube_accel", True)
    values["toolkit"]["enabled"] = not _flag(cluster, "toolkit_managed_by_kube_accel", True)
    # kube-accel's charts own the device plugin on every pool (one nvidia.com/gpu advertiser per node).
    values["devicePlugin"]["enabled"] = False
    values["cdi"] = {"enabled": _flag(cluster, "cdi", False)}
    values["nfd"] = {"enabled": _flag(cluster, "nfd", False)}
    values["gfd"]["enabled"] = _flag(cluster, "gfd", False)
    # VM passthrough is the pgpu chart's sandbox device plugin; the operator's sandbox operands stay off.
    values["sandboxWorkloads"] = {"enabled": False}
    values["nodeStatusExporter"]["enabled"] = False

    dcgm_exporter = _flag(cluster, "dcgm_exporter", True)
    values["dcgmExporter"]["enabled"] = dcgm_exporter
    monitor_labels = cluster.get("service_monitor_labels") or {}
    if not isinstance(monitor_labels, dict):
        raise ValueError(f"service_monitor_labels={monitor_labels!r} must be a mapping of label -> value")
    values["dcgmExporter"]["serviceMonitor"] = {
        "enabled": dcgm_exporter and _flag(cluster, "service_monitor", False),
        "interval": str(cluster.get("service_monitor_interval", "15s")),
        "honorLabels": False,
        # The exporter names the pod using each GPU in its own namespace/pod/container labels. The Prometheus
        # Operator also sets those as target labels (the exporter's own pod), so Prometheus would rename the
        # exporter's to exported_* and give every idle GPU the exporter pod's; dropping the target labels keeps the
        # exporter's (found by the lab's live chain, tests/integration/test_monitoring_lab.py).
        "relabelings": [{"action": "labeldrop", "regex": "namespace|pod|container"}],
        # A Prometheus whose serviceMonitorSelector matches labels only scrapes ServiceMonitors carrying them.
        "additionalLabels": {str(k): str(v) for k, v in monitor_labels.items()},
    }
    values["dcgm"]["enabled"] = False  # the exporter's embedded host engine is enough

    mig_manager = values["migManager"]
    mig_manager["enabled"] = bool(mig_pools)
    if mig_pools:
        document = mig_parted_document(pools)
        mig_manager["config"] = {
            "create": True,
            "name": MIG_PARTED_CONFIGMAP,
            "default": "all-disabled",
            "data": {"config.yaml": yaml.safe_dump(document, sort_keys=False)},
        }
        mig_manager["env"] = [{"name": "WITH_REBOOT", "value": str(_flag(cluster, "mig_with_reboot", False)).lower()}]
    return copy.deepcopy(values)


def operator_images(values: dict[str, Any]) -> list[str]:
    """Image references the values make the operator pull (enabled operands only), for mirroring lists."""
    enabled = {
        "operator": True,
        "validator": True,
        "driver": values["driver"]["enabled"],
        "driver.manager": values["driver"]["enabled"],
        "toolkit": values["toolkit"]["enabled"],
        "devicePlugin": values["devicePlugin"]["enabled"],
        "gfd": values["gfd"]["enabled"],
        "dcgm": values["dcgm"]["enabled"],
        "dcgmExporter": values["dcgmExporter"]["enabled"],
        "migManager": values["migManager"]["enabled"],
        "nodeStatusExporter": values["nodeStatusExporter"]["enabled"],
        "vfioManager": values["sandboxWorkloads"]["enabled"],
        "sandboxDevicePlugin": values["sandboxWorkloads"]["enabled"],
    }
    out = []
    for operand, on in enabled.items():
        if not on:
            continue
        node = values
        for part in operand.split("."):
            node = node[part]
        out.append(f"{node['repository']}/{node['image']}:{node['version']}")
    return sorted(set(out))
