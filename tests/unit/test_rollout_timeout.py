"""helm's --timeout of a release scaled with the nodes its DaemonSets roll (accel_chart_values.rollout_timeout)."""

from __future__ import annotations

import pytest
from ansible_collections.kube_accel.gpu.plugins.module_utils import accel_chart_values as cv
from ansible_collections.kube_accel.gpu.plugins.module_utils import accel_pools as ap
from ansible_collections.kube_accel.gpu.plugins.module_utils.accel_helm import release_specs


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
