"""GPU Operator values built from kube-accel pools, validated against schemas/gpu-operator-values.schema.json."""

from __future__ import annotations

import copy
import json

import jsonschema
import pytest
import yaml
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm import operator_values as opv
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import pools as accel_pools
from chartlib import REPO

SCHEMA = json.loads((REPO / "schemas" / "gpu-operator-values.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)



def pool_entry(**settings):
    """A collect_pools entry for one pool: inventory names (accel_ + keyword), the model's defaults filled."""
    name = settings["pool"]
    return {"pool": name, "hosts": [f"{name}-0"],
            "settings": accel_pools.pool_settings({f"accel_{k}": v for k, v in settings.items()})}


def variant(entry, **changes):
    """The same pool with some settings changed."""
    return pool_entry(**{**{k.removeprefix("accel_"): v for k, v in entry["settings"].items()}, **changes})


MIG_POOL = pool_entry(pool="mig", mode="pgpu", mig_strategy="mixed", mig_owner="operator",
                      mig_geometry={"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2})
LAB_POOLS = [
    pool_entry(pool="vgpu-hami", mode="vgpu", vgpu_backend="hami"),
    pool_entry(pool="pgpu", mode="pgpu", numa_policy="single-numa-node"),
    pool_entry(pool="mps", mode="mps", mps_replicas=4),
    MIG_POOL,
]


def errors(values):
    return sorted(e.message for e in VALIDATOR.iter_errors(values))


def test_schema_is_valid():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    # The schema names the chart version its keys were checked against; the version itself is tied to the pinned
    # archive in tests/conformance/test_version_pins.py.
    assert opv.OPERATOR_CHART_VERSION in SCHEMA["description"]


def test_lab_values():
    values = opv.gpu_operator_values(LAB_POOLS, {"service_monitor": False})
    assert errors(values) == []
    assert values["driver"]["enabled"] is False and values["toolkit"]["enabled"] is False
    assert values["devicePlugin"]["enabled"] is False
    assert values["mig"] == {"strategy": "mixed"}
    assert values["dcgmExporter"]["enabled"] is True
    assert values["dcgmExporter"]["serviceMonitor"]["enabled"] is False
    assert values["nfd"] == {"enabled": False} and values["gfd"]["enabled"] is False
    mm = values["migManager"]
    assert mm["enabled"] is True and mm["config"]["name"] == opv.MIG_PARTED_CONFIGMAP
    assert mm["config"]["default"] == "all-disabled"
    doc = yaml.safe_load(mm["config"]["data"]["config.yaml"])
    assert doc["version"] == "v1"
    # The config is named like the nvidia.com/mig.config label the cluster play sets on the pool's nodes.
    label = accel_pools.node_labels(MIG_POOL["settings"])["nvidia.com/mig.config"]
    (entry,) = doc["mig-configs"][label]
    assert entry["mig-enabled"] is True and entry["devices"] == "all"
    assert entry["mig-devices"] == {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}
    assert "0x20B210DE" in entry["device-filter"]  # A100-80GB
    assert doc["mig-configs"]["all-disabled"] == [{"devices": "all", "mig-enabled": False}]
    assert mm["env"] == [{"name": "WITH_REBOOT", "value": "false"}]


def test_private_registry_rewrites_every_image():
    values = opv.gpu_operator_values(
        LAB_POOLS, {"image_registry": "registry.dc1.example.net/mirror", "image_pull_secrets": ["mirror-pull"],
                    "service_monitor": True, "nfd": True, "gfd": True},
    )
    assert errors(values) == []
    for operand in opv.IMAGES:
        node = values
        for part in operand.split("."):
            node = node[part]
        assert node["repository"].startswith("registry.dc1.example.net/mirror/"), operand
        if operand != "driver.manager":
            assert node["imagePullSecrets"] == ["mirror-pull"], operand
    assert values["migManager"]["repository"] == "registry.dc1.example.net/mirror/nvidia/cloud-native"
    assert values["node-feature-discovery"]["image"]["repository"] == (
        "registry.dc1.example.net/mirror/nfd/node-feature-discovery"
    )
    assert values["dcgmExporter"]["serviceMonitor"]["enabled"] is True
    # The target's namespace/pod/container would shadow the exporter's pod attribution (docs/monitoring.md; the lab's
    # live chain, test_site_monitoring_lab.py, shows what they do).
    assert values["dcgmExporter"]["serviceMonitor"]["relabelings"] == [
        {"action": "labeldrop", "regex": "namespace|pod|container"}]
    images = opv.operator_images(values)
    # Pulled by the digests NVIDIA's operator bundle pins for these tags; listed with the tag to mirror them under.
    assert ("registry.dc1.example.net/mirror/nvidia/k8s/dcgm-exporter:4.6.0-4.8.3-distroless"
            "@sha256:613ab03c11d442fd960ff515f547e9921537454a712d08160bc8f677f89f1c35") in images
    assert ("registry.dc1.example.net/mirror/nvidia/k8s-device-plugin:v0.20.0"
            "@sha256:a61ba9fd8efb82f3a79f877f7580e02c1e8e7593f62473644bc9c79e315c3312") in images  # GFD on
    assert not any("driver:" in i or "container-toolkit" in i for i in images)


def test_no_mig_pools_disables_mig_manager():
    values = opv.gpu_operator_values([p for p in LAB_POOLS if p is not MIG_POOL])
    assert errors(values) == []
    assert values["migManager"]["enabled"] is False and "config" not in values["migManager"]
    assert values["mig"] == {"strategy": "single"}


def test_host_owned_mig_is_left_out():
    host_owned = variant(MIG_POOL, mig_owner="host")
    values = opv.gpu_operator_values([host_owned])
    assert values["migManager"]["enabled"] is False


def test_single_strategy_and_toggles():
    single = variant(MIG_POOL, pool="mig-single", mig_strategy="single", mig_geometry={"1g.10gb": 7})
    values = opv.gpu_operator_values(
        [single], {"driver_managed_by_kube_accel": False, "toolkit_managed_by_kube_accel": False,
                   "dcgm_exporter": False, "service_monitor": True, "mig_with_reboot": True, "cdi": True},
    )
    assert errors(values) == []
    assert values["mig"] == {"strategy": "single"}
    assert values["driver"]["enabled"] is True and values["toolkit"]["enabled"] is True
    assert values["dcgmExporter"]["enabled"] is False
    assert values["dcgmExporter"]["serviceMonitor"]["enabled"] is False  # no exporter, no ServiceMonitor
    assert values["migManager"]["env"] == [{"name": "WITH_REBOOT", "value": "true"}]
    assert values["cdi"] == {"enabled": True}


def test_collect_pools_shape_and_taints():
    hosts = {"lab-mig-0": {"accel_pool": "mig", "accel_mode": "pgpu", "accel_mig_strategy": "mixed",
                           "accel_mig_geometry": {"7g.80gb": 1}, "accel_node_taint": True}}
    values = opv.gpu_operator_values(accel_pools.collect_pools(hosts))
    assert errors(values) == []
    assert {"key": "kube-accel.io/pool", "operator": "Exists", "effect": "NoSchedule"} in (
        values["daemonsets"]["tolerations"]
    )
    assert "kube-accel-7g.80gb-1" in values["migManager"]["config"]["data"]["config.yaml"]


def test_illegal_geometry_is_refused():
    bad = variant(MIG_POOL, mig_geometry={"7g.80gb": 1, "1g.10gb": 1})
    with pytest.raises(ValueError, match="kube-accel-1g.10gb-1.7g.80gb-1"):
        opv.gpu_operator_values([bad])


def test_unknown_image_override_is_refused():
    with pytest.raises(ValueError, match="image_overrides has unknown operand"):
        opv.gpu_operator_values([], {"image_overrides": {"dcgm-exporter": {"version": "x"}}})


def test_image_override():
    values = opv.gpu_operator_values([], {"image_overrides": {"dcgmExporter": {"version": "4.6.1-4.8.4-distroless"}}})
    assert values["dcgmExporter"]["version"] == "4.6.1-4.8.4-distroless"
    assert errors(values) == []


def mutate(path, value):
    values = opv.gpu_operator_values(LAB_POOLS)
    node = values
    *parents, last = path
    for part in parents:
        node = node[part]
    if value is KeyError:
        del node[last]
    else:
        node[last] = value
    return values


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("devicePlugin", "enabled"), True, "False was expected"),
        (("mig", "strategy"), "none", "is not one of ['single', 'mixed']"),
        (("driver", "version"), 595.91, "595.91 is not of type 'string'"),
        (("dcgmExporter", "repository"), "nvcr.io/nvidia/k8s/", "does not match"),
        (("dcgmExporter", "serviceMonitor", "enabled"), "yes", "'yes' is not of type 'boolean'"),
        (("migManager", "config"), KeyError, "'config' is a required property"),
        (("migManager", "config", "data"), {"config.yml": "version: v1\n"}, "'config.yaml' is a required property"),
        (("migManager", "config", "create"), False, "True was expected"),
        # v26.7.0's chart no longer reads operator.defaultRuntime (the operator detects the runtime per node).
        (("operator", "defaultRuntime"), "containerd", "('defaultRuntime' was unexpected)"),
        (("psa", "enabled"), "true", "'true' is not of type 'boolean'"),
        (("dcgmExporter", "serviceMonitor", "additionalLabels"), {"release": 1}, "1 is not of type 'string'"),
        (("dcgmExporter", "serviceMonitor", "additionalLabels"), {"bad key!": "x"}, "does not match"),
        (("nfd", "enabled"), "true", "'true' is not of type 'boolean'"),
        (("toolkit", "enabled"), KeyError, "'enabled' is a required property"),
        (("gfd", "typo"), True, "Additional properties are not allowed ('typo' was unexpected)"),
    ],
)
def test_schema_refuses(path, value, message):
    values = mutate(path, value)
    found = errors(values)
    assert any(message in e for e in found), found


def test_generated_values_are_not_shared():
    first = opv.gpu_operator_values(LAB_POOLS)
    copy.deepcopy(first)["migManager"]["config"]["name"] = "x"
    assert opv.gpu_operator_values(LAB_POOLS) == first


def test_filter_plugin():
    from ansible_collections.kube_accel.gpu.plugins.filter import accel_operator

    filters = accel_operator.FilterModule().filters()
    values = filters["accel_gpu_operator_values"](LAB_POOLS, {"service_monitor": True})
    assert values == opv.gpu_operator_values(LAB_POOLS, {"service_monitor": True})
    assert filters["accel_gpu_operator_images"](values) == opv.operator_images(values)


def test_service_monitor_labels():
    values = opv.gpu_operator_values(LAB_POOLS, {"service_monitor": True,
                                                 "service_monitor_labels": {"release": "kube-prometheus-stack"}})
    assert errors(values) == []
    assert values["dcgmExporter"]["serviceMonitor"]["additionalLabels"] == {"release": "kube-prometheus-stack"}
    assert opv.gpu_operator_values(LAB_POOLS)["dcgmExporter"]["serviceMonitor"]["additionalLabels"] == {}
    with pytest.raises(ValueError, match="must be a mapping"):
        opv.gpu_operator_values(LAB_POOLS, {"service_monitor_labels": "release=prom"})


def test_pod_security_and_no_runtime_key():
    values = opv.gpu_operator_values(LAB_POOLS)
    assert values["psa"] == {"enabled": True} and "defaultRuntime" not in values["operator"]
    assert opv.gpu_operator_values(LAB_POOLS, {"psa": False})["psa"] == {"enabled": False}


def test_string_flags_from_ansible():
    values = opv.gpu_operator_values(LAB_POOLS, {"service_monitor": "False", "nfd": "true", "cdi": "no"})
    assert values["dcgmExporter"]["serviceMonitor"]["enabled"] is False
    assert values["nfd"] == {"enabled": True} and values["cdi"] == {"enabled": False}
    with pytest.raises(ValueError, match="service_monitor='maybe' is not a boolean"):
        opv.gpu_operator_values(LAB_POOLS, {"service_monitor": "maybe"})


def test_node_agents_run_the_digests_nvidia_publishes_and_the_site_may_pin_its_own():
    """The operator's privileged node agents (mig-manager, dcgm-exporter, GFD) run the image NVIDIA's
    v26.7.0 bundle pins for their tag; accel_image_digests replaces it ("" pulls by tag); the images the operator
    chart writes as repository/image:version never get a digest (that would be image:sha256:...)."""
    values = opv.gpu_operator_values(LAB_POOLS, {"service_monitor": False})
    assert errors(values) == []
    mig_manager = "nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.15.0"
    assert values["migManager"]["version"] == opv.PUBLISHED_DIGESTS[mig_manager]
    assert values["dcgm"]["version"] == "4.6.0-1-ubuntu24.04"  # no digest published for this tag
    assert values["operator"]["version"] == values["validator"]["version"] == opv.OPERATOR_CHART_VERSION
    site = "sha256:" + "ef" * 32
    pinned = opv.gpu_operator_values(LAB_POOLS, {"service_monitor": False, "image_digests": {
        "nvidia/cloud-native/k8s-mig-manager:v0.15.0": site, "nvidia/k8s/dcgm-exporter:4.6.0-4.8.3-distroless": "",
        "nvidia/gpu-operator:" + opv.OPERATOR_CHART_VERSION: site}})
    assert errors(pinned) == []
    assert pinned["migManager"]["version"] == site
    assert pinned["dcgmExporter"]["version"] == "4.6.0-4.8.3-distroless"
    assert pinned["operator"]["version"] == opv.OPERATOR_CHART_VERSION
    assert pinned["nodeStatusExporter"]["version"] == site
    # A tag other than the one the digest was published for gets none.
    other = opv.gpu_operator_values(LAB_POOLS, {"image_overrides": {"migManager": {"version": "v0.16.0"}}})
    assert other["migManager"]["version"] == "v0.16.0"


def test_the_charts_ship_the_operator_bundles_device_plugin_digest():
    for chart in ("pgpu", "mps"):
        image = yaml.safe_load((REPO / "charts" / chart / "values.yaml").read_text())["image"]
        ref = f"{image['registry']}/{image['repository']}:{image['tag']}"
        assert image["digest"] == opv.PUBLISHED_DIGESTS[ref], chart
    passthrough = yaml.safe_load((REPO / "charts" / "pgpu" / "values.yaml").read_text())["passthrough"]["image"]
    ref = f"{passthrough['registry']}/{passthrough['repository']}:{passthrough['tag']}"
    assert passthrough["digest"] == opv.PUBLISHED_DIGESTS[ref]
