"""helm's --timeout of a release scaled with the nodes its DaemonSets roll (helm.pool_charts.rollout_timeout)."""

from __future__ import annotations

import pytest
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm import pool_charts as cv
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm.release import release_specs
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import inventory as accel_inventory
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import pools as ap
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import values as accel_values
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.cluster_settings import cluster_settings


def _pool(name, hosts, **settings):
    return {"pool": name, "hosts": hosts,
            "settings": ap.pool_settings({"accel_pool": name, **{f"accel_{k}": v for k, v in settings.items()}})}


@pytest.mark.parametrize(("value", "nodes", "at_once"), [
    (1, 500, 1), (25, 10, 25), ("3", 10, 3),
    ("10%", 500, 50), ("10%", 9, 1), ("10%", 11, 2),  # rounded up, as the DaemonSet controller does
    ("100%", 7, 7), ("1%", 0, 1), (" 5 % ", 40, 2),
])
def test_max_unavailable_nodes(value, nodes, at_once):
    assert cv.max_unavailable_nodes(value, nodes) == at_once


@pytest.mark.parametrize("value", ["abc", "%", "10%%", "-1", True, "1.5"])
def test_max_unavailable_nodes_refuses_what_the_schema_refuses(value):
    with pytest.raises(ValueError, match="maxUnavailable"):
        cv.max_unavailable_nodes(value, 10)


@pytest.mark.parametrize(("nodes", "value", "timeout"), [
    (0, "10%", "300s"),        # nothing to roll: the base
    (1, "10%", "360s"),
    (10, "10%", "900s"),       # 10% of 10 is one node at a time
    (500, "10%", "900s"),      # 50 at a time: 10 batches
    (501, "10%", "900s"),      # 51 at a time (rounded up): still 10 batches
    (300, 1, "18300s"),        # one at a time: why the old 5m timed out
    (300, 100, "480s"),
])
def test_rollout_timeout(nodes, value, timeout):
    assert cv.rollout_timeout(nodes, value) == timeout


def test_rollout_timeout_base_and_batch():
    assert cv.rollout_timeout(20, 5, base_s=60, batch_s=30) == "180s"


def test_pool_releases_scale_the_timeout_with_their_nodes_unless_given():
    hosts = [f"n{i}" for i in range(200)]
    pools = [_pool("big", hosts[:150], mode="mps", mps_replicas=4), _pool("big2", hosts[150:], mode="mps",
                                                                          mps_replicas=8),
             _pool("small", ["s1", "s2"], mode="pgpu")]
    releases = {r["name"]: r for r in cv.pool_releases(pools, {})}
    # 200 mps nodes, 10% (20) at a time: 10 batches; 2 pgpu nodes, 1 at a time: 2 batches.
    assert releases["kube-accel-mps"]["timeout"] == "900s"
    assert releases["kube-accel-pgpu"]["timeout"] == "420s"
    assert {r["timeout"] for r in cv.pool_releases(pools, {}, timeout="45m")} == {"45m"}


def test_release_specs_take_a_release_timeout_over_the_shared_one():
    specs = release_specs([{"name": "a", "chart": "c", "timeout": "900s"}, {"name": "b", "chart": "c"}],
                          namespace="ns", wait=True, timeout="5m", atomic=True, create_namespace=True)
    assert [s.timeout for s in specs] == ["900s", "5m"]


def test_the_inventorys_max_unavailable_reaches_every_node_agent_release_and_its_timeout():
    """accel_rollout_max_unavailable (group_vars/all): the careful operator rolls 5 nodes at a time instead of 10 %;
    every device-plugin and vGPU release gets it, and helm's --timeout follows the slower rollout."""
    hosts = [f"n{i}" for i in range(200)]
    pools = [_pool("big", hosts[:150], mode="mps", mps_replicas=4),
             _pool("ts", hosts[150:], mode="timeslice", timeslice_replicas=4),
             _pool("hami", ["h1"], mode="vgpu", vgpu_backend="hami")]
    cluster = cluster_settings({"accel_rollout_max_unavailable": 5})
    releases = {r["name"]: r for r in cv.pool_releases(pools, cluster)}
    assert {name: r["values"]["rollingUpdate"] for name, r in releases.items()} == dict.fromkeys(
        ("kube-accel-mps", "kube-accel-timeslice", "kube-accel-vgpu-hami"), {"maxUnavailable": 5})
    assert releases["kube-accel-mps"]["timeout"] == f"{cv.ROLLOUT_BASE_S + 30 * cv.ROLLOUT_BATCH_S}s"
    # Unset: the charts' own default, which is the inventory model's.
    unset = cv.pool_releases(pools, cluster_settings({}))
    assert all("rollingUpdate" not in r["values"] for r in unset)
    assert accel_inventory.defaults("cluster")["accel_rollout_max_unavailable"] == cv.DEFAULT_MAX_UNAVAILABLE


@pytest.mark.parametrize("bad", [0, "0%", "150%", True, [1, 2], "5", "fast"])
def test_the_inventory_refuses_a_max_unavailable_the_daemonset_cannot_take(bad):
    problems = accel_values.value_problems("accel_rollout_max_unavailable", bad)
    assert problems, bad
    assert all("node count" in allowed for _what, allowed in problems)


@pytest.mark.parametrize("good", [1, 25, "1%", "10%", "100%"])
def test_the_inventory_takes_counts_and_percentages(good):
    assert accel_values.value_problems("accel_rollout_max_unavailable", good) == []
    assert cv.max_unavailable_nodes(good, 100) >= 1
