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

from ansible_collections.kube_accel.gpu.plugins.module_utils.common.constants import GPU_OPERATOR_VERSION, LABELS
from ansible_collections.kube_accel.gpu.plugins.module_utils.common.pyyaml import yaml
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.mig import mig_parted_config_for_hosts
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.pools import operator_mig, setting_on

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
# The digests NVIDIA publishes for these tags: the GPU Operator v26.7.0 release's OLM bundle
# (bundle/manifests/gpu-operator-certified.clusterserviceversion.yaml, relatedImages), the operator's own pins. The
# operator pulls repository/image@version when version is a digest (v26.7.0 internal/image/image.go ImagePath), so
# these operands (privileged node agents among them: mig-manager, dcgm-exporter) run exactly that image. The bundle
# names no digest for the other tags (dcgm 4.6.0-1-ubi10 there, the driver by digest only, the operator itself as
# main-latest): those are pulled by tag unless the site pins them (accel_image_digests). charts/pgpu and charts/mps
# ship the same device plugin digest (tests/charts/test_operator_values.py checks they agree).
PUBLISHED_DIGESTS: dict[str, str] = {
    "nvcr.io/nvidia/k8s-device-plugin:v0.20.0":
        "sha256:a61ba9fd8efb82f3a79f877f7580e02c1e8e7593f62473644bc9c79e315c3312",
    "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0-4.8.3-distroless":
        "sha256:613ab03c11d442fd960ff515f547e9921537454a712d08160bc8f677f89f1c35",
    "nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.15.0":
        "sha256:cab2cf9deafc9602da69d0832a82958a7687f22f4a2f19674099dc9a5c4ea8e2",
    "nvcr.io/nvidia/cloud-native/k8s-driver-manager:v0.12.0":
        "sha256:7d98d08a751cc528d1c8c8bdc2f9d9fcd59714b158a3985a5a0262f1620098e4",
    "nvcr.io/nvidia/k8s/container-toolkit:v1.20.0":
        "sha256:f8c647d581f7c8b178efdb7e6c94f5fb6eb12ebc05e2157fa314d327560fcb7a",
    "nvcr.io/nvidia/kubevirt-gpu-device-plugin:v1.6.0":
        "sha256:367c597799aa6925f5bd2bc4bcdc45c26f018d13cdc2ce9aaf1ca07c492c6d9e",
}


# Operands whose image the operator chart itself writes as repository/image:version (templates/_helpers.tpl
# gpu-operator.fullimage, validator.fullimage, driver-manager.fullimage): never given a digest.
CHART_BUILT_IMAGES = ("operator", "validator", "driver.manager")


def _digest(repository: str, image: str, tag: str, site: dict[str, str]) -> str:
    """The digest an operand is pulled by ("": by tag): the site's ("repository:tag" as the charts key it, without
    the registry host; "" pulls by tag) over the one NVIDIA publishes for that exact upstream image and tag."""
    host, _unused, path = repository.partition("/")
    key = f"{path if host in UPSTREAM_REGISTRIES else repository}/{image}:{tag}"
    if key in site:
        return str(site[key] or "")
    return PUBLISHED_DIGESTS.get(f"{repository}/{image}:{tag}", "")


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
    """Pools whose MIG layout the operator's mig-manager owns (plan.pools.operator_mig)."""
    return [pool for pool in pools if operator_mig(pool["settings"])]


def mig_parted_document(pools: list[dict[str, Any]]) -> dict[str, Any]:
    """mig-parted ``version: v1`` config with one entry per operator-owned MIG geometry.

    Config names are the ``nvidia.com/mig.config`` label values the cluster play puts on the pool's nodes
    (plan.mig.mig_config_name); device filters come from the pools' ``device_ids`` (from the GPU facts) or cover
    every model the geometry fits; ``all-disabled`` is always present. Raises ValueError for an illegal geometry.
    """
    hosts = {
        pool["pool"]: {"geometry": pool["settings"]["accel_mig_geometry"], "device_ids": pool.get("device_ids") or []}
        for pool in operator_mig_pools(pools)
    }
    return mig_parted_config_for_hosts(hosts)


def gpu_operator_values(pools: list[dict[str, Any]], cluster: dict[str, Any] | None = None) -> dict[str, Any]:
    """Values for nvidia/gpu-operator v26.7.0.

    ``pools``: plan.pools.collect_pools entries ({pool, settings, hosts}, optionally device_ids from the facts).
    ``cluster``: cluster settings, all optional:
      image_registry (""), image_pull_secrets ([]), service_monitor (False), service_monitor_interval ("15s"),
      service_monitor_labels ({}: ServiceMonitor labels a Prometheus selects on), dcgm_exporter (True),
      driver_managed_by_kube_accel (True), toolkit_managed_by_kube_accel (True), nfd (False), gfd (False),
      cdi (False), psa (True), mig_with_reboot (False), image_overrides ({operand: {repository, image, version}}),
      image_digests ({"repository:tag": "sha256:..."}, as the charts' global.imageDigests).
    The container runtime is not an input: v26.7.0 detects it per node (state_manager.go getRuntime) and its chart
    no longer reads operator.defaultRuntime.
    """
    cluster = dict(cluster or {})
    registry = cluster.get("image_registry") or ""
    secrets = list(cluster.get("image_pull_secrets") or [])
    overrides = cluster.get("image_overrides") or {}
    site_digests = dict(cluster.get("image_digests") or {})
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
        # A digest replaces the tag: the operator then pulls repository/image@digest.
        digest = "" if operand in CHART_BUILT_IMAGES else _digest(
            str(spec["repository"]), str(spec["image"]), str(spec["version"]), site_digests)
        node["version"] = digest or str(spec["version"])
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
        version = str(node["version"])
        if version.startswith("sha256:"):
            # With the tag a mirror stores the digest under, where it is the default one.
            tag = IMAGES[operand][2] if node["image"] == IMAGES[operand][1] else ""
            out.append(f"{node['repository']}/{node['image']}{':' + tag if tag else ''}@{version}")
        else:
            out.append(f"{node['repository']}/{node['image']}:{version}")
    return sorted(set(out))
