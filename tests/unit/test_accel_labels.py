"""Label and taint reconciliation decisions (pure logic; the lab test exercises the API)."""

from __future__ import annotations

from ansible.module_utils.accel_labels import node_patch, plan

MANAGED = {"kube-accel.io/pool", "kube-accel.io/mode", "nvidia.com/mps.capable"}
TAINT = {"kube-accel.io/pool"}


def test_no_patch_when_node_already_matches():
    labels = {"kube-accel.io/pool": "mps", "other": "x"}
    assert node_patch(labels, [], {"kube-accel.io/pool": "mps"}, MANAGED, [], TAINT) is None


def test_sets_changed_labels_and_removes_stale_managed_ones_only():
    current = {"kube-accel.io/pool": "old", "nvidia.com/mps.capable": "true", "team": "ml"}
    patch = node_patch(current, [], {"kube-accel.io/pool": "pgpu"}, MANAGED, [], TAINT)
    assert patch == {"metadata": {"labels": {"kube-accel.io/pool": "pgpu", "nvidia.com/mps.capable": None}}}


def test_taints_replace_only_managed_keys():
    foreign = {"key": "dedicated", "value": "x", "effect": "NoExecute"}
    desired = [{"key": "kube-accel.io/pool", "value": "mps", "effect": "NoSchedule"}]
    patch = node_patch({}, [foreign], {}, MANAGED, desired, TAINT)
    assert patch == {"spec": {"taints": [foreign, desired[0]]}}
    # Already tainted: nothing to do.
    assert node_patch({}, [foreign, desired[0]], {}, MANAGED, desired, TAINT) is None
    # Taint no longer wanted: removed, the foreign one kept.
    assert node_patch({}, [foreign, desired[0]], {}, MANAGED, [], TAINT) == {"spec": {"taints": [foreign]}}


def test_plan_reports_missing_nodes_and_patches_only_differences():
    nodes = {"a": {"labels": {"kube-accel.io/pool": "p"}, "taints": []}, "b": {"labels": {}, "taints": []}}
    desired = {n: {"labels": {"kube-accel.io/pool": "p"}} for n in ("a", "b", "c")}
    patches, missing = plan(nodes, desired, MANAGED, TAINT)
    assert list(patches) == ["b"]
    assert missing == ["c"]
