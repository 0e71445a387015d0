"""What kube-accel owns, and what a run removes (helm.ownership), and the role that does it (release_cleanup)."""

from __future__ import annotations

from pathlib import Path

import yaml
from ansible_collections.kube_accel.gpu.plugins.filter.accel_pool_filters import FilterModule
from ansible_collections.kube_accel.gpu.plugins.module_utils.common.constants import OWNERSHIP_CONFIGMAP
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm import ownership as own

ROLE = Path(__file__).resolve().parents[2] / "roles" / "release_cleanup"


def test_pool_releases_are_kube_accels_by_name_and_the_record_adds_the_rest():
    desired = ["kube-accel/kube-accel-pgpu", "kube-accel/kube-accel-timeslice", "gpu-operator/gpu-operator"]
    # Before any record (a cluster installed by 0.1.0): every pool release name but the desired ones.
    assert own.stale(desired, None, "kube-accel") == [
        "kube-accel/kube-accel-dra", "kube-accel/kube-accel-dra-driver", "kube-accel/kube-accel-mps",
        "kube-accel/kube-accel-vgpu-gpu-manager", "kube-accel/kube-accel-vgpu-hami"]
    # The operator is no pool release: kube-accel removes it only where its record names it.
    record = own.record_data(desired + ["kube-accel/kube-accel-monitoring"])
    assert own.stale(desired[:2], record, "kube-accel") == [
        "gpu-operator/gpu-operator", "kube-accel/kube-accel-dra", "kube-accel/kube-accel-dra-driver",
        "kube-accel/kube-accel-monitoring",
        "kube-accel/kube-accel-mps",
        "kube-accel/kube-accel-vgpu-gpu-manager", "kube-accel/kube-accel-vgpu-hami"]
    assert "gpu-operator/gpu-operator" not in own.stale(desired[:2], None, "kube-accel")


def test_a_record_this_version_cannot_read_owns_nothing_more():
    assert own.recorded({"releases": "not json"}) == []
    assert own.recorded({"releases": '["kube-accel/x", 7, "no-namespace"]'}) == ["kube-accel/x"]


def test_filters_and_the_roles_record_name():
    filters = FilterModule().filters()
    assert filters["accel_stale_releases"](["ns/kube-accel-mps"], {}, "ns")[:3] == [
        "ns/kube-accel-dra", "ns/kube-accel-dra-driver", "ns/kube-accel-pgpu"]
    assert filters["accel_ownership_record"](["b/y", "a/x", "a/x"]) == {"releases": '["a/x", "b/y"]'}
    assert yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())["release_cleanup_record"] == OWNERSHIP_CONFIGMAP


def test_desired_releases_follow_the_pools_modes_and_backends():
    from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.pools import pool_settings

    def pool(**s):
        return {"pool": s["pool"], "settings": pool_settings({f"accel_{k}": v for k, v in s.items()})}

    pools = [pool(pool="a", mode="pgpu"), pool(pool="b", mode="pgpu"), pool(pool="h", mode="vgpu", vgpu_backend="hami"),
             pool(pool="t", mode="timeslice", timeslice_replicas=4)]
    assert own.desired(pools, "ka", ["ka/kube-accel-monitoring", ""]) == [
        "ka/kube-accel-monitoring", "ka/kube-accel-pgpu", "ka/kube-accel-timeslice", "ka/kube-accel-vgpu-hami"]
    # The pool "mps" switched to timeslice: its release is the one to go.
    assert own.stale(own.desired(pools, "ka"), own.record_data(own.desired(pools, "ka") + ["ka/kube-accel-mps"]),
                     "ka") == ["ka/kube-accel-dra", "ka/kube-accel-dra-driver", "ka/kube-accel-mps",
                               "ka/kube-accel-vgpu-gpu-manager"]


def test_dra_pools_bring_the_dra_driver_and_take_it_along():
    """NVIDIA's DRA driver is wanted while any pool is dra (beside the pools' kube-accel-dra release), and is a
    leftover release_cleanup removes (and verify names) once none is."""
    from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.pools import pool_settings

    def pool(**s):
        return {"pool": s["pool"], "settings": pool_settings({f"accel_{k}": v for k, v in s.items()})}

    with_dra = own.desired([pool(pool="a", mode="pgpu"), pool(pool="d", mode="dra")], "ka")
    assert with_dra == ["ka/kube-accel-dra", "ka/kube-accel-dra-driver", "ka/kube-accel-pgpu"]
    # The pool d switched back to pgpu: both dra releases go, whether or not the record names them.
    without = own.desired([pool(pool="a", mode="pgpu"), pool(pool="d", mode="pgpu")], "ka")
    for record in (own.record_data(with_dra), None):
        assert own.stale(without, record, "ka")[:2] == ["ka/kube-accel-dra", "ka/kube-accel-dra-driver"]
