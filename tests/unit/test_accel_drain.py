"""cluster.drain.select_pods: the pods a drain evicts, decided in kubectl drain's order (k8s.io/kubectl/pkg/drain
filters.go). The pods are API JSON as the module lists them. The case that made kube-accel stop using
kubernetes.core.k8s_drain is first: a DaemonSet pod with an emptyDir volume stays (kubernetes.core#622 deletes it)."""

from __future__ import annotations

import pytest
from ansible_collections.kube_accel.gpu.plugins.module_utils.cluster.drain import MIRROR_ANNOTATION, select_pods


def pod(name, *, owner="ReplicaSet", phase="Running", emptydir=False, annotations=None):
    meta = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "annotations": annotations or {}}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "x", "controller": True}]
    volumes = [{"name": "scratch", "emptyDir": {}}] if emptydir else [{"name": "cfg", "configMap": {"name": "c"}}]
    return {"metadata": meta, "spec": {"volumes": volumes}, "status": {"phase": phase}}


def test_daemonset_pod_with_emptydir_stays():
    sel = select_pods([pod("device-plugin", owner="DaemonSet", emptydir=True), pod("job", emptydir=True)])
    assert [p["name"] for p in sel.evict] == ["job"]
    assert sel.skipped == {"DaemonSet-managed": ["ns/device-plugin"]}
    assert not sel.errors


def test_mirror_pods_stay_and_finished_pods_go():
    sel = select_pods([pod("static", owner=None, annotations={MIRROR_ANNOTATION: "x"}),
                       pod("done", owner=None, phase="Succeeded", emptydir=True),
                       pod("ds-done", owner="DaemonSet", phase="Failed")])
    assert sorted(p["name"] for p in sel.evict) == ["done", "ds-done"]
    assert sel.skipped == {"mirror (static) pod": ["ns/static"]}


@pytest.mark.parametrize(("kwargs", "refused"), [
    ({"force": False}, "cannot delete Pods that declare no controller (set force): ns/bare"),
    ({"delete_emptydir_data": False}, "cannot delete Pods with local storage (set delete_emptydir_data): ns/cache"),
    ({"ignore_daemonsets": False}, "cannot delete DaemonSet-managed Pods (set ignore_daemonsets): ns/agent"),
])
def test_each_refusal_names_the_pods_and_what_allows_them(kwargs, refused):
    pods = [pod("bare", owner=None), pod("cache", emptydir=True), pod("agent", owner="DaemonSet"), pod("web")]
    options = {"force": True, "delete_emptydir_data": True, "ignore_daemonsets": True, **kwargs}
    sel = select_pods(pods, **options)
    assert sel.errors == [refused]


def test_force_evicts_pods_without_a_controller():
    sel = select_pods([pod("bare", owner=None)], force=True)
    assert [p["uid"] for p in sel.evict] == ["uid-bare"]


def ds_pod(name, ds_uid, revision):
    p = pod(name, owner="DaemonSet")
    p["metadata"]["ownerReferences"][0]["uid"] = ds_uid
    p["metadata"]["labels"] = {"controller-revision-hash": revision}
    return p


def revision(ds_uid, number, digest):
    return {"metadata": {"labels": {"controller-revision-hash": digest},
                         "ownerReferences": [{"kind": "DaemonSet", "uid": ds_uid, "controller": True}]},
            "revision": number}


def test_only_out_of_date_pods_of_on_delete_daemonsets_are_replaced():
    from ansible_collections.kube_accel.gpu.plugins.module_utils.cluster.drain import (
        newest_revisions,
        outdated_on_delete,
    )

    daemonsets = {"mps": {"spec": {"updateStrategy": {"type": "OnDelete"}}},
                  "same": {"spec": {"updateStrategy": {"type": "OnDelete"}}},
                  "rolling": {"spec": {"updateStrategy": {"type": "RollingUpdate"}}}}
    current = newest_revisions([revision("mps", 1, "aaa"), revision("mps", 3, "ccc"), revision("mps", 2, "bbb"),
                                revision("same", 1, "sss"), revision("rolling", 2, "rrr")])
    assert current == {"mps": "ccc", "same": "sss", "rolling": "rrr"}
    pods = [ds_pod("mps-daemon", "mps", "bbb"), ds_pod("other-daemon", "same", "sss"),
            ds_pod("plugin", "rolling", "old"), pod("job")]
    assert [p["name"] for p in outdated_on_delete(pods, daemonsets, current)] == ["mps-daemon"]
    # A pod already being deleted, or one whose DaemonSet is gone, is left alone.
    pods[0]["metadata"]["deletionTimestamp"] = "2026-11-27T06:00:00Z"
    assert outdated_on_delete(pods, daemonsets, current) == []
    assert outdated_on_delete([ds_pod("orphan", "gone", "x")], daemonsets, current) == []


def test_daemonset_namespaces_are_those_of_controlling_daemonsets_only():
    from ansible_collections.kube_accel.gpu.plugins.module_utils.cluster.drain import daemonset_namespaces

    other = ds_pod("log-shipper", "ls", "a")
    other["metadata"]["namespace"] = "logging"
    owned_not_controlled = pod("sidecar", owner=None)
    owned_not_controlled["metadata"].update(namespace="apps", ownerReferences=[{"kind": "DaemonSet", "uid": "u"}])
    assert daemonset_namespaces([ds_pod("mps", "m", "a"), other, owned_not_controlled, pod("job")]) == ["logging", "ns"]
