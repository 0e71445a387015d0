"""Pod Security levels of kube-accel's namespaces: what the cluster play creates, labels or refuses."""

from __future__ import annotations

import pytest
from ansible_collections.kube_accel.gpu.plugins.module_utils.cluster import pod_security as ps

PRIV = ps.level_labels("privileged")


def test_missing_namespace_is_created_with_the_level():
    create, patch, refused = ps.plan({"kube-accel": None}, {"kube-accel": "privileged"})
    assert create == {"kube-accel": PRIV} and patch == {} and refused == []
    assert PRIV == {"pod-security.kubernetes.io/enforce": "privileged",
                    "pod-security.kubernetes.io/audit": "privileged",
                    "pod-security.kubernetes.io/warn": "privileged"}


def test_unlabelled_namespace_gets_the_labels_it_lacks():
    current = {"kube-accel": {"kubernetes.io/metadata.name": "kube-accel",
                              "pod-security.kubernetes.io/warn": "baseline"}}
    create, patch, refused = ps.plan(current, {"kube-accel": "privileged"})
    assert create == {} and refused == []
    # warn is the owner's choice and never refuses a pod: kept.
    assert patch == {"kube-accel": {"pod-security.kubernetes.io/enforce": "privileged",
                                    "pod-security.kubernetes.io/audit": "privileged"}}


@pytest.mark.parametrize("level", ["baseline", "restricted", "Privileged"])
def test_stricter_or_unknown_enforced_level_is_refused_and_nothing_is_written(level):
    current = {"kube-accel": None, "gpu-operator": {ps.ENFORCE: level}}
    create, patch, refused = ps.plan(current, {"kube-accel": "privileged", "gpu-operator": "privileged"})
    assert create == {} and patch == {}
    (reason,) = refused
    assert "namespace gpu-operator" in reason and repr(level) in reason and "'privileged'" in reason


def test_enforced_privileged_is_left_alone_and_check_only_is_never_written():
    current = {"kube-accel": {ps.ENFORCE: "privileged"}, "gpu-operator": None}
    assert ps.plan(current, {"kube-accel": "privileged", "gpu-operator": "privileged"}, {"gpu-operator"}) == (
        {}, {}, [])
    # A baseline-level need is met by a privileged namespace.
    assert ps.plan({"ns": {ps.ENFORCE: "privileged"}}, {"ns": "baseline"}) == ({}, {}, [])
    with pytest.raises(ValueError, match="unknown Pod Security level"):
        ps.plan({"ns": None}, {"ns": "admin"})


def test_namespace_manifest():
    assert ps.namespace_manifest("kube-accel", PRIV) == {
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-accel", "labels": PRIV}}
