"""Label and taint reconciliation decisions (pure logic; the lab test exercises the API)."""

from __future__ import annotations

import threading
import time

from ansible_collections.kube_accel.gpu.plugins.module_utils.cluster.labels import (
    describe_switch,
    diff_of,
    node_patch,
    nodes_from_list,
    plan,
    send_patches,
    switching,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.pools import (
    managed_label_keys,
    sharing_label_keys,
)

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


def test_nodes_from_list_reads_raw_json_and_keeps_api_taint_fields():
    listing = {"items": [
        {"metadata": {"name": "a", "labels": {"kube-accel.io/pool": "p"}},
         "spec": {"taints": [{"key": "dedicated", "effect": "NoExecute", "timeAdded": "2026-01-01T00:00:00Z"}]}},
        {"metadata": {"name": "b"}, "spec": {}},
    ]}
    nodes = nodes_from_list(listing)
    assert nodes == {
        "a": {"labels": {"kube-accel.io/pool": "p"},
              "taints": [{"key": "dedicated", "effect": "NoExecute", "timeAdded": "2026-01-01T00:00:00Z"}]},
        "b": {"labels": {}, "taints": []},
    }
    assert nodes_from_list({"items": None}) == {}


def test_send_patches_sends_each_once_within_the_bound():
    lock, in_flight, peak, sent = threading.Lock(), [0], [0], []

    def send(name, patch):
        with lock:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
        time.sleep(0.01)
        with lock:
            in_flight[0] -= 1
            sent.append((name, patch))

    patches = {f"n{i:03d}": {"metadata": {"labels": {"i": str(i)}}} for i in range(60)}
    assert send_patches(send, patches, workers=8) == {}
    assert sorted(sent) == sorted(patches.items())
    assert 1 < peak[0] <= 8


def test_send_patches_reports_every_failure_and_sends_the_rest():
    sent = []

    def send(name, patch):
        if name in {"b", "d"}:
            raise RuntimeError(f"refused {name}")
        sent.append(name)

    failed = send_patches(send, dict.fromkeys("abcde", {"metadata": {}}))
    assert list(failed) == ["b", "d"]
    assert str(failed["d"]) == "refused d"
    assert sorted(sent) == ["a", "c", "e"]
    assert send_patches(send, {}) == {}


def test_diff_shows_only_patched_label_keys_and_the_taints():
    current = {"a": {"labels": {"kube-accel.io/pool": "old", "team": "ml"}, "taints": []}}
    patches = {"a": {"metadata": {"labels": {"kube-accel.io/pool": "new", "nvidia.com/mps.capable": None}}}}
    assert diff_of(current, patches) == {
        "before": {"a": {"labels": {"kube-accel.io/pool": "old", "nvidia.com/mps.capable": None}, "taints": []}},
        "after": {"a": {"labels": {"kube-accel.io/pool": "new", "nvidia.com/mps.capable": None}, "taints": []}},
    }
    tainted = {"a": {"spec": {"taints": [{"key": "kube-accel.io/pool", "value": "p", "effect": "NoSchedule"}]}}}
    assert diff_of(current, tainted)["after"]["a"]["taints"] == tainted["a"]["spec"]["taints"]


def test_switching_names_the_nodes_whose_sharing_changes_not_those_labelled_first():
    """The pool "mps" moved to time-slicing: its node switches (mode and plugin config); a new node does not; a node
    that only gains an unrelated label (nvidia.com/mps.capable removed on the same node counts with its mode)."""
    keys = sharing_label_keys()
    nodes = {
        "mps-0": {"labels": {"kube-accel.io/pool": "mps", "kube-accel.io/mode": "mps",
                             "nvidia.com/device-plugin.config": "mps-2", "nvidia.com/mps.capable": "true"},
                  "taints": []},
        "new-0": {"labels": {}, "taints": []},
        "pgpu-0": {"labels": {"kube-accel.io/pool": "pgpu", "kube-accel.io/mode": "pgpu"}, "taints": []},
    }
    desired = {
        "mps-0": {"labels": {"kube-accel.io/pool": "mps", "kube-accel.io/mode": "timeslice",
                             "nvidia.com/device-plugin.config": "timeslice-4"}},
        "new-0": {"labels": {"kube-accel.io/pool": "mps", "kube-accel.io/mode": "timeslice"}},
        "pgpu-0": {"labels": {"kube-accel.io/pool": "pgpu", "kube-accel.io/mode": "pgpu", "team": "ml"}},
    }
    patches, _ = plan(nodes, desired, managed_label_keys() | {"team"}, set())
    assert set(patches) == {"mps-0", "new-0", "pgpu-0"}
    assert switching(nodes, patches, keys) == {"mps-0": {"kube-accel.io/mode": ["mps", "timeslice"],
                                                         "nvidia.com/device-plugin.config": ["mps-2", "timeslice-4"]}}


def test_a_mig_geometry_added_to_a_pool_in_service_switches_its_nodes():
    """mig-manager repartitions the GPUs once the label is there: the pods on them must be gone first."""
    nodes = {"a100-0": {"labels": {"kube-accel.io/pool": "big", "kube-accel.io/mode": "pgpu"}, "taints": []}}
    desired = {"a100-0": {"labels": {"kube-accel.io/pool": "big", "kube-accel.io/mode": "pgpu",
                                     "nvidia.com/mig.config": "kube-accel-3g.40gb-2"}}}
    patches, _ = plan(nodes, desired, managed_label_keys(), set())
    assert switching(nodes, patches, sharing_label_keys()) == {
        "a100-0": {"nvidia.com/mig.config": [None, "kube-accel-3g.40gb-2"]}}


def test_a_node_leaving_its_pool_switches_with_its_labels_removed():
    nodes = {"gone-0": {"labels": {"kube-accel.io/pool": "mps", "kube-accel.io/mode": "mps",
                                   "kube-accel.io/managed": "true"}, "taints": []}}
    patches, _ = plan(nodes, {"gone-0": {"labels": {}, "taints": []}}, managed_label_keys(), set())
    assert switching(nodes, patches, sharing_label_keys()) == {
        "gone-0": {"kube-accel.io/mode": ["mps", None], "kube-accel.io/pool": ["mps", None]}}


def test_sharing_keys_are_labels_kube_accel_owns():
    """Only labels kube-accel writes (and removes) can start a drain; the node's other labels never do."""
    assert sharing_label_keys() <= managed_label_keys()
    assert sharing_label_keys() == {"kube-accel.io/pool", "kube-accel.io/mode", "kube-accel.io/vgpu-backend",
                                    "nvidia.com/device-plugin.config", "nvidia.com/mig.config"}


def test_the_cordon_reason_names_each_label_before_and_after():
    assert describe_switch({"nvidia.com/mig.config": [None, "kube-accel-3g.40gb-2"],
                            "kube-accel.io/mode": ["mps", "timeslice"], "kube-accel.io/pool": ["mps", None]}) == (
        "kube-accel.io/mode mps -> timeslice; kube-accel.io/pool mps -> (removed); "
        "nvidia.com/mig.config (none) -> kube-accel-3g.40gb-2")
