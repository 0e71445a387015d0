"""The cluster-wide settings the chart values read (helm.pool_charts.cluster_settings), the one code path the
cluster play's pool_charts role, the lab and the chart tests share."""

from __future__ import annotations

from pathlib import Path

import yaml
from ansible_collections.kube_accel.gpu.plugins.filter import accel_pool_filters
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm import pool_charts as cv
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import pools as ap
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.cluster_settings import (
    CLUSTER_SETTINGS,
    cluster_problems,
    cluster_settings,
)

ROLE = Path(__file__).resolve().parents[2] / "roles" / "pool_charts"
DIGEST = "sha256:" + "ab" * 32


def _pool(name, **settings):
    return {"pool": name, "hosts": [f"{name}-1"],
            "settings": ap.pool_settings({"accel_pool": name, **{f"accel_{k}": v for k, v in settings.items()}})}


def test_the_role_reads_exactly_the_settings_cluster_settings_knows():
    names = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["pool_charts_cluster_vars"]
    assert names == [name for name, _default in CLUSTER_SETTINGS.values()]
    assert "accel_cluster_settings" in (ROLE / "defaults" / "main.yml").read_text()


def test_unset_settings_are_empty_and_set_ones_pass_through():
    empty = cluster_settings({})
    assert empty == {"image_registry": "", "image_pull_secrets": [], "image_digests": {}, "control_plane_cidrs": [],
                     "metrics_cidrs": [], "metrics_namespaces": [], "cluster_components_on_pool_nodes": False,
                     "runtime_class": "nvidia", "dra_claim_namespaces": [],
                     "rollout_max_unavailable": None}
    # The vars lookup answers "" for an unset variable: the same as unset.
    assert cluster_settings({"accel_control_plane_cidrs": "", "accel_image_digests": None}) == empty
    full = accel_pool_filters.accel_cluster_settings(
        {"accel_control_plane_cidrs": ["10.0.0.11/32"], "accel_metrics_cidrs": ["10.1.0.0/24"],
         "accel_metrics_namespaces": ["monitoring"], "accel_image_digests": {"projecthami/hami:v2.10.0": DIGEST}},
        "nvidia-cdi")
    assert full["runtime_class"] == "nvidia-cdi" and full["metrics_namespaces"] == ["monitoring"]


def test_vgpu_values_carry_metrics_peers_and_control_plane():
    cluster = cluster_settings({"accel_control_plane_cidrs": ["10.0.0.11/32"],
                                   "accel_metrics_cidrs": ["10.1.0.0/24"], "accel_metrics_namespaces": ["monitoring"]})
    values = cv.release_values("vgpu-gpu-manager", [_pool("g", mode="vgpu", vgpu_backend="gpu-manager")], cluster)
    assert values["controlPlaneFrom"] == [{"ipBlock": {"cidr": "10.0.0.11/32"}}]
    assert values["metricsFrom"] == [
        {"ipBlock": {"cidr": "10.1.0.0/24"}},
        {"namespaceSelector": {"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["monitoring"]}]}}]
    # No metrics settings: no peers, which the chart renders as no pod-network source.
    assert cv.release_values("vgpu-hami", [_pool("h", mode="vgpu", vgpu_backend="hami")], {})["metricsFrom"] == []


def test_image_digests_reach_every_chart_as_global_image_digests():
    cluster = cluster_settings({"accel_image_digests": {"nvidia/k8s-device-plugin:v0.20.0": DIGEST}})
    for key, pool in (("pgpu", _pool("p", mode="pgpu")), ("mps", _pool("m", mode="mps", mps_replicas=4)),
                      ("vgpu-hami", _pool("h", mode="vgpu", vgpu_backend="hami"))):
        values = cv.release_values(key, [pool], cluster)
        assert values["global"]["imageDigests"] == {"nvidia/k8s-device-plugin:v0.20.0": DIGEST}
    assert "imageDigests" not in cv.release_values("pgpu", [_pool("p", mode="pgpu")], {})["global"]


def test_cluster_problems_name_the_hami_pools():
    pools = [_pool("h1", mode="vgpu", vgpu_backend="hami"), _pool("g", mode="vgpu", vgpu_backend="gpu-manager"),
             _pool("p", mode="pgpu")]
    (problem,) = cluster_problems(pools, cluster_settings({}))
    assert "h1" in problem and " g," not in problem and "accel_control_plane_cidrs" in problem
    assert cluster_problems(pools, cluster_settings({"accel_control_plane_cidrs": ["10.0.0.0/24"]})) == []
    assert cluster_problems(pools[1:], cluster_settings({})) == []
