"""DRA pools: the inventory variables, the pool model (opaque configs, gates, labels, resources) and the
preflight rules, each positive and negative, on GPU facts from the recorded snapshots in tests/data/nvml (composed
from published device data, not recorded on a GPU). That the opaque configs are exactly what NVIDIA's DRA driver
decodes and validates is tests/conformance/test_dra_config.py's: it runs the driver's own code on them."""

from __future__ import annotations

import pytest
from ansible_collections.kube_accel.gpu.plugins.module_utils.common.constants import (
    DRA_FEATURE_GATES,
    LABELS,
    UPSTREAM_LABELS,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import inventory as accel_inventory
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import inventory_check as accel_plan_inventory
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import pools as ap
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import rules as plan
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.grammars import quantity_bytes
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.values import value_problems
from test_plan import gpus

HOST = "gpu-01"
GATES = {"MPSSupport": True, "TimeSlicingSettings": True}
BASE = {"accel_kubernetes_version": "1.36", "accel_driver_branch": "570", "accel_dra_feature_gates": GATES}


def dra(**kw):
    return {**BASE, "accel_pool": "d", "accel_mode": "dra", **{f"accel_{k}": v for k, v in kw.items()}}


def settings(**kw):
    """The pool model's view: inventory names, the model's defaults filled."""
    return ap.pool_settings(dra(**kw))


def check(values, snapshot="h100-80gb", facts=None):
    return plan.host_problems(HOST, values, {**gpus(snapshot), **(facts or {})})


# --- the pool model -----------------------------------------------------------------------------------------------


def test_exclusive_is_the_drivers_default_config():
    # DefaultGpuConfig(): apiVersion and kind, no sharing (the GPU is the claim's alone).
    assert ap.dra_opaque_config(settings()) == {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig"}
    assert ap.dra_feature_gates_needed(settings()) == set()


def test_timeslice_names_its_interval_on_gpus_and_none_on_mig_devices():
    assert ap.dra_opaque_config(settings(dra_sharing="timeslice", dra_timeslice_interval="Long")) == {
        "apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
        "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}}
    # The interval's default is written out, as the driver's Normalize would fill it.
    assert ap.dra_opaque_config(settings(dra_sharing="timeslice"))["sharing"]["timeSlicingConfig"] == {
        "interval": "Default"}
    mig = settings(dra_sharing="timeslice", mig_strategy="mixed", mig_geometry={"3g.40gb": 2})
    assert ap.dra_opaque_config(mig) == {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "MigDeviceConfig",
                                         "sharing": {"strategy": "TimeSlicing"}}
    assert ap.dra_feature_gates_needed(mig) == {"TimeSlicingSettings"}


def test_mps_carries_only_the_limits_the_inventory_sets():
    assert ap.dra_opaque_config(settings(dra_sharing="mps", dra_mps_active_thread_percentage=25,
                                         dra_mps_pinned_memory_limit="10Gi"))["sharing"] == {
        "strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 25,
                                         "defaultPinnedDeviceMemoryLimit": "10Gi"}}
    assert ap.dra_opaque_config(settings(dra_sharing="mps"))["sharing"] == {"strategy": "MPS", "mpsConfig": {}}
    assert ap.dra_feature_gates_needed(settings(dra_sharing="mps")) == {"MPSSupport"}


def test_no_opaque_config_and_no_gates_for_device_plugin_pools():
    for mode in ("pgpu", "mps", "timeslice"):
        assert ap.dra_opaque_config(ap.pool_settings({"accel_pool": "p", "accel_mode": mode})) is None
        assert ap.dra_feature_gates_needed(ap.pool_settings({"accel_pool": "p", "accel_mode": mode})) == set()


def test_dra_nodes_carry_the_dra_label_and_nothing_that_starts_a_device_plugin():
    labels = ap.node_labels(settings(dra_sharing="mps"))
    assert labels[LABELS["dra"]] == "true" and labels[LABELS["mode"]] == "dra"
    assert UPSTREAM_LABELS["device_plugin_config"] not in labels  # no device plugin or config-manager config
    assert UPSTREAM_LABELS["mps_capable"] not in labels  # the MPS device plugin's control daemon selects on it
    assert labels[UPSTREAM_LABELS["deploy_device_plugin"]] == "false"  # nor the GPU Operator's device plugin
    assert labels[UPSTREAM_LABELS["mig_capable"]] == "false"  # nor its mig-manager
    assert LABELS["dra"] not in ap.node_labels(ap.pool_settings({"accel_pool": "p", "accel_mode": "pgpu"}))
    assert LABELS["dra"] in ap.managed_label_keys()  # removed from a node that leaves DRA


def test_a_dra_node_advertises_no_extended_resource():
    assert ap.advertised_resources(settings(), 8, 81559) == {}
    assert ap.request_for(settings()) == {}


# --- inventory values -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "count"), [("10Gi", 10 * 2 ** 30), ("1Mi", 2 ** 20), ("1.5Gi", 3 * 2 ** 29),
                                             ("1e9", 10 ** 9), ("2G", 2 * 10 ** 9), ("1048576000m", 2 ** 20),
                                             (".5Gi", 2 ** 29), ("1.000001m", 1)])
def test_quantities_as_kubernetes_counts_them(text, count):
    assert quantity_bytes(text) == count


@pytest.mark.parametrize(("value", "what"), [
    ("10GB", "not a Kubernetes quantity"), ("10 Gi", "not a Kubernetes quantity"), ("", "not a Kubernetes quantity"),
    ("1M", "1000000 bytes, less than 1Mi"), ("0", "not a positive quantity"), ("-1Gi", "not a positive quantity"),
    ("10Gi\n", "contains a newline or control character"), ("10e18", "more bytes than the driver's int64")])
def test_pinned_memory_limits_the_driver_refuses(value, what):
    found = value_problems("accel_dra_mps_pinned_memory_limit", value)
    assert found and found[0][0].startswith(what), found


def test_feature_gates_are_the_drivers_booleans_and_its_rules_between_them():
    assert value_problems("accel_dra_feature_gates", {"MPSSupport": True, "TimeSlicingSettings": True}) == []
    assert value_problems("accel_dra_feature_gates", {g: d for g, (d, _s) in DRA_FEATURE_GATES.items()}) == []
    (what, allowed), = value_problems("accel_dra_feature_gates", {"MpsSupport": True})
    assert what.startswith("unknown gate 'MpsSupport' (did you mean MPSSupport?)")
    assert "MPSSupport (alpha, default false)" in allowed and "TimeSlicingSettings (alpha" in allowed
    assert value_problems("accel_dra_feature_gates", {"MPSSupport": "true"})[0][0] == (
        "MPSSupport is the string 'true', not true or false")
    assert "mutually exclusive" in value_problems("accel_dra_feature_gates", {"MPSSupport": True,
                                                                              "DynamicMIG": True})[0][0]
    # ComputeDomainCliques is on by default and needs IMEXDaemonsWithDNSNames, also on by default.
    assert "ComputeDomainCliques on needs IMEXDaemonsWithDNSNames on" in value_problems(
        "accel_dra_feature_gates", {"IMEXDaemonsWithDNSNames": False})[0][0]
    assert "LoggingStableOptions" not in DRA_FEATURE_GATES  # a constant of component-base, never registered


def test_dra_settings_of_another_sharing_or_mode_are_refused_where_set_for_the_pool():
    def inventory(pool_vars):
        record = {k: {"value": v, "origin": f"group_vars/pool_d.yml:{i}"} for i, (k, v) in enumerate(pool_vars.items())}
        return {"groups": {"all": {"children": ["gpu_pools"]}, "gpu_pools": {"children": ["pool_d"]},
                           "pool_d": {"vars": record, "hosts": ["d-0"]}},
                "hosts": {"d-0": {"vars": {}}}, "effective": {"d-0": record}, "gpu_hosts": ["d-0"]}

    found = accel_plan_inventory.check(inventory({"accel_pool": "d", "accel_mode": "dra",
                                                  "accel_dra_mps_active_thread_percentage": 25}))
    assert any("accel_dra_mps_active_thread_percentage = 25" in p and "accel_dra_sharing mps" in p
               for p in found["hosts"]["d-0"]["problems"]), found
    found = accel_plan_inventory.check(inventory({"accel_pool": "d", "accel_mode": "pgpu",
                                                  "accel_dra_sharing": "mps"}))
    assert any("accel_dra_sharing = 'mps'" in p and "it applies with accel_mode dra" in p
               for p in found["hosts"]["d-0"]["problems"]), found


def test_a_host_in_a_dra_pool_and_a_device_plugin_pool():
    record = {"accel_pool": {"value": "d"}, "accel_mode": {"value": "dra"}}
    groups = {"all": {"children": ["gpu_pools"]}, "gpu_pools": {"children": ["pool_d", "pool_p"]},
              "pool_d": {"vars": record, "hosts": ["n-0"]},
              "pool_p": {"vars": {"accel_pool": {"value": "p"}, "accel_mode": {"value": "pgpu"}}, "hosts": ["n-0"]}}
    found = accel_plan_inventory.check({"groups": groups, "hosts": {"n-0": {"vars": {}}},
                                        "effective": {"n-0": record}, "gpu_hosts": ["n-0"]})
    assert any("a DRA pool and a device-plugin pool on one host" in p for p in found["hosts"]["n-0"]["problems"])


def test_the_variables_are_in_the_model_and_the_argument_spec():
    spec = accel_inventory.argument_spec()
    for name in ("accel_dra_sharing", "accel_dra_timeslice_interval", "accel_dra_mps_active_thread_percentage",
                 "accel_dra_mps_pinned_memory_limit", "accel_dra_feature_gates", "accel_dra_driver_chart",
                 "accel_dra_driver_chart_version", "accel_dra_driver_chart_fallback", "accel_dra_claim_namespaces"):
        assert name in spec
    assert "dra" in spec["accel_mode"]["choices"]
    assert spec["accel_dra_timeslice_interval"]["choices"] == ["Default", "Short", "Medium", "Long"]


# --- preflight rules ------------------------------------------------------------------------------------------------

GOOD = [
    ("exclusive on H100", dra(), "h100-80gb"),
    ("mps with limits", dra(dra_sharing="mps", dra_mps_active_thread_percentage=25,
                            dra_mps_pinned_memory_limit="10Gi"), "h100-80gb"),
    ("timeslice Long", dra(dra_sharing="timeslice", dra_timeslice_interval="Long"), "a30"),
    ("MIG devices by the host", dra(mig_strategy="mixed", mig_owner="host",
                                    mig_geometry={"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}), "a100-80gb"),
    ("MPS on MIG devices", dra(dra_sharing="mps", mig_strategy="single", mig_owner="host",
                               mig_geometry={"1g.10gb": 7}), "a100-80gb"),
    ("Kubernetes 1.34.2", {**dra(), "accel_kubernetes_version": "v1.34.2"}, "h100-80gb"),
    ("containerd 2 and CDI on", dra(), "h100-80gb"),
]


@pytest.mark.parametrize(("title", "values", "snapshot"), GOOD, ids=[g[0] for g in GOOD])
def test_good_dra_plans_have_no_problems(title, values, snapshot):
    facts = {"host_runtime": {"containerd_version": "2.1.4"}, "container_toolkit_cdi": True}
    assert check(values, snapshot, facts) == []


def one(problems, *fragments):
    found = [p for p in problems if all(f in p for f in fragments)]
    assert found, problems
    return found[0]


@pytest.mark.parametrize("version", ["1.33", "v1.34.1", "1.30"])
def test_kubernetes_older_than_the_drivers_floor(version):
    text = one(check({**dra(), "accel_kubernetes_version": version}), f"accel_kubernetes_version = '{version}'")
    assert "needs Kubernetes 1.34.2 or newer" in text and text.endswith(
        "allowed: Kubernetes 1.34.2 or newer (\"1.34\" with patch 2 or later, \"1.35\", \"1.36\"), or no dra pool")
    # The same version is fine for a device-plugin pool.
    assert check({**BASE, "accel_pool": "p", "accel_mode": "pgpu", "accel_kubernetes_version": version}) == []


def test_driver_branch_older_than_565():
    text = one(check(dra(driver_branch="550")), "accel_driver_branch = '550'")
    assert "older than NVIDIA's DRA driver v0.4.1 supports" in text and "\"565\" or newer" in text
    values = dra()
    del values["accel_driver_branch"]
    one(check(values, "t4"), "accel_driver_branch = '535'", "(kube-accel's default)")
    assert check(dra(driver_branch="565")) == []


def test_runtime_without_cdi():
    one(check(dra(container_runtime="docker")), "accel_container_runtime = 'docker'", "passes no CDI devices")
    for off in (False, "false", "no"):
        one(check(dra(), facts={"container_toolkit_cdi": off}), "container_toolkit_cdi = ",
            "container_toolkit_cdi: true (the role's default) on dra pools")
    one(check(dra(), facts={"host_runtime": {"containerd_version": "1.7.24"}}),
        "the host runs containerd 1.7.24", "containerd 2.0 or newer (CDI on by default)")
    # Device-plugin pools are not asked (their plugins mount devices through the nvidia runtime).
    pgpu = {**BASE, "accel_pool": "p", "accel_mode": "pgpu"}
    assert check(pgpu, facts={"container_toolkit_cdi": False, "host_runtime": {"containerd_version": "1.7.24"}}) == []


@pytest.mark.parametrize(("sharing", "gate"), [("mps", "MPSSupport"), ("timeslice", "TimeSlicingSettings")])
def test_a_sharing_needs_its_alpha_gate_set_by_the_operator(sharing, gate):
    for gates in ({}, {gate: False}, {"MPSSupport": True, "TimeSlicingSettings": True} | {gate: False}):
        text = one(check({**dra(dra_sharing=sharing), "accel_dra_feature_gates": gates}),
                   f"needs the DRA driver's feature gate {gate}, which is alpha in v0.4.1")
        assert text.endswith(f"allowed: accel_dra_feature_gates: {{{gate}: true}} (accepting an alpha feature), or "
                             "accel_dra_sharing exclusive")
    unset = {k: v for k, v in dra(dra_sharing=sharing).items() if k != "accel_dra_feature_gates"}
    one(check(unset), "accel_dra_feature_gates = (not set)", gate)


def test_mig_on_dra_pools_follows_the_pgpu_rules_and_the_host_applies_it():
    one(check(dra(mig_strategy="mixed", mig_owner="host", mig_geometry={"3g.40gb": 3}), "a100-80gb"),
        "accel_mig_geometry['3g.40gb'] = 3", "at most 2 per GPU on A100-80GB")
    one(check(dra(mig_owner="host", mig_geometry={"3g.40gb": 2}), "a100-80gb"),
        "accel_mig_strategy = (not set)", "a MIG geometry needs a MIG strategy")
    one(check(dra(mig_strategy="single", mig_owner="host", mig_geometry={"3g.40gb": 1, "1g.10gb": 1}), "a100-80gb"),
        "accel_mig_geometry = ", "all must have the same profile")
    one(check(dra(mig_strategy="mixed", mig_geometry={"3g.40gb": 2}), "a100-80gb"),
        "accel_mig_owner = 'operator'", "accel_mig_owner: host on dra pools with accel_mig_geometry")
    one(check(dra(mig_strategy="mixed", mig_owner="host", mig_geometry={"3g.40gb": 2}, dra_sharing="timeslice",
                  dra_timeslice_interval="Long"), "a100-80gb"),
        "accel_dra_timeslice_interval = 'Long'", "MigDeviceConfig, which has no time-slice interval")
    # MIG on GPUs whose pool plans none, and kube-accel did not turn it on: refused as on pgpu.
    one(check(dra(), "a100-80gb-mig"), "accel_mode = 'dra'", "plans no MIG geometry")
    one(check({**dra(mig_strategy="mixed", mig_owner="host", mig_geometry={"3g.40gb": 2}),
               "accel_dra_feature_gates": {"DynamicMIG": True}}, "a100-80gb"),
        "DynamicMIG lets the driver create and destroy MIG devices")


def test_the_preflight_passes_only_opaque_configs_the_pool_model_renders_from_valid_values():
    """Every accepted dra plan renders a config (the conformance test runs the driver on it); a refused value never
    reaches dra_opaque_config's caller, because the preflight stops first."""
    for _title, values, _snapshot in GOOD:
        assert ap.dra_opaque_config(ap.pool_settings(values))["apiVersion"] == "resource.nvidia.com/v1beta1"
    assert check(dra(dra_sharing="mps", dra_mps_active_thread_percentage=101))
    assert check(dra(dra_sharing="mps", dra_mps_pinned_memory_limit="10GB"))
