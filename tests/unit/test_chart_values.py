"""Each chart's values from the pools a release serves (helm.pool_charts)."""

from __future__ import annotations

from ansible_collections.kube_accel.gpu.plugins.module_utils.helm import pool_charts as cv
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import pools as ap
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.cluster_settings import cluster_settings


def _pool(name, hosts, **settings):
    """A collect_pools entry: inventory names (accel_ + keyword), the model's defaults filled."""
    return {"pool": name, "hosts": hosts,
            "settings": ap.pool_settings({"accel_pool": name, **{f"accel_{k}": v for k, v in settings.items()}})}


def test_release_values_per_mode():
    cluster = {"image_registry": "mirror.example/r", "image_pull_secrets": ["pull"]}
    pgpu = cv.release_values("pgpu", [_pool("train", ["n"], mode="pgpu", numa_policy="single-numa-node"),
                                      _pool("vm", ["v"], mode="pgpu", vfio_passthrough=True)], cluster)
    assert pgpu["global"] == {"imageRegistry": "mirror.example/r", "imagePullSecrets": ["pull"]}
    assert pgpu["pools"] == ["train"]
    assert pgpu["passthrough"] == {"enabled": True, "pools": ["vm"]}
    assert pgpu["compatWithCPUManager"] is True
    assert "tolerations" not in pgpu
    mps = cv.release_values("mps", [_pool("a", ["n"], mode="mps", mps_replicas=4, node_taint=True),
                                    _pool("b", ["m"], mode="mps", mps_replicas=8),
                                    _pool("c", ["o"], mode="mps", mps_replicas=4)], {},
                            {"a": 24576, "b": 81920, "c": 16384})
    assert mps["configs"]["mps-4"]["replicas"] == 4
    assert mps["configs"]["mps-4"]["gpuMemoryMiB"] == 16384  # smallest GPU among pools sharing mps-4
    assert mps["configs"]["mps-8"]["gpuMemoryMiB"] == 81920
    assert mps["defaultConfig"] == "mps-4"
    assert {"key": "kube-accel.io/pool", "operator": "Exists", "effect": "NoSchedule"} in mps["tolerations"]
    hami = cv.release_values("vgpu-hami", [_pool("h", ["n"], mode="vgpu", vgpu_backend="hami", vgpu_split_count=5,
                                                 vgpu_scheduler_policy="spread")], {})
    assert hami["backend"] == "hami"
    assert hami["hami"]["deviceSplitCount"] == 5 and hami["hami"]["scheduler"]["gpuSchedulerPolicy"] == "spread"
    assert hami["controlPlaneFrom"] == []
    fenced = cv.release_values("vgpu-hami", [_pool("h", ["n"], mode="vgpu", vgpu_backend="hami")],
                               {"control_plane_cidrs": ["10.0.0.11/32", "10.0.0.12/32"]})
    assert fenced["controlPlaneFrom"] == [{"ipBlock": {"cidr": "10.0.0.11/32"}}, {"ipBlock": {"cidr": "10.0.0.12/32"}}]
    manager = cv.release_values("vgpu-gpu-manager", [_pool("g", ["n"], mode="vgpu", vgpu_backend="gpu-manager")], {})
    assert manager["backend"] == "gpu-manager"
    assert cv.chart_for("vgpu-hami") == "vgpu" and cv.chart_for("mps") == "mps"



def test_timeslice_release_uses_the_pgpu_chart():
    pools = [_pool("a", ["n1"], mode="timeslice", timeslice_replicas=4),
             _pool("b", ["n2"], mode="timeslice", timeslice_replicas=8, timeslice_rename_by_default=False)]
    assert ap.release_key(pools[0]["settings"]) == "timeslice"
    assert cv.chart_for("timeslice") == "pgpu"
    values = cv.release_values("timeslice", pools, {})
    assert values["pools"] == ["a", "b"]
    assert values["runtimeClassName"] == "nvidia"
    assert values["configs"] == {
        "exclusive": None, "mig-mixed": None, "mig-single": None,
        "timeslice-4": {"migStrategy": "none", "timeSlicing": {"replicas": 4, "renameByDefault": True,
                                                               "failRequestsGreaterThanOne": True}},
        "timeslice-8-gpu": {"migStrategy": "none", "timeSlicing": {"replicas": 8, "renameByDefault": False,
                                                                   "failRequestsGreaterThanOne": True}}}
    assert values["defaultConfig"] == "timeslice-4"
    assert values["test"] == {"resource": "nvidia.com/gpu.shared"}


def test_pool_releases_group_pools_by_mode_and_backend():
    pools = [_pool("m1", ["a"], mode="mps", mps_replicas=4), _pool("h", ["b"], mode="vgpu", vgpu_backend="hami"),
             _pool("m2", ["c"], mode="mps", mps_replicas=8), _pool("g", ["d"], mode="vgpu", vgpu_backend="gpu-manager")]
    releases = cv.pool_releases(pools, {}, chart_dir="/c")
    assert [(r["name"], r["chart"], r["pools"]) for r in releases] == [
        ("kube-accel-mps", "/c/mps", ["m1", "m2"]),
        ("kube-accel-vgpu-gpu-manager", "/c/vgpu", ["g"]),
        ("kube-accel-vgpu-hami", "/c/vgpu", ["h"])]
    assert releases[0]["values"] == cv.release_values("mps", [pools[0], pools[2]], {}, {"m1": 0, "m2": 0})


def test_hami_pools_with_their_own_split_count_get_nodeconfig_entries():
    pools = [_pool("a", ["a1"], mode="vgpu", vgpu_backend="hami"),
             _pool("b", ["b1", "b2"], mode="vgpu", vgpu_backend="hami", vgpu_split_count=4, vgpu_core_scaling=2),
             _pool("c", ["c1"], mode="vgpu", vgpu_backend="hami")]
    hami = cv.release_values("vgpu-hami", pools, {})["hami"]
    assert hami["deviceSplitCount"] == 10  # the first pool's (the model's default)
    # Pool c matches the release; pool b's nodes carry their own settings under HAMi's nodeconfig names.
    assert hami["nodeConfig"] == [
        {"name": host, "devicesplitcount": 4, "devicememoryscaling": 1.0, "devicecorescaling": 2.0}
        for host in ("b1", "b2")]
    assert "nodeConfig" not in cv.release_values("vgpu-hami", pools[:1], {})["hami"]


def test_cluster_components_on_pool_nodes_reaches_the_vgpu_chart():
    """accel_cluster_components_on_pool_nodes turns the vgpu chart's clusterComponents.avoidPoolNodes off; by default
    the chart keeps them off pool nodes (its own default, no value written)."""
    from ansible_collections.kube_accel.gpu.plugins.module_utils.helm import pool_charts as cv
    from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.pools import pool_settings

    pools = [{"pool": "v", "settings": pool_settings({"accel_pool": "v", "accel_mode": "vgpu",
                                                      "accel_vgpu_backend": "hami"}), "hosts": ["h1"]}]
    off = cluster_settings({"accel_control_plane_cidrs": ["10.0.0.1/32"]})
    assert "clusterComponents" not in cv.release_values("vgpu-hami", pools, off)
    on = cluster_settings({"accel_control_plane_cidrs": ["10.0.0.1/32"],
                              "accel_cluster_components_on_pool_nodes": True})
    assert cv.release_values("vgpu-hami", pools, on)["clusterComponents"] == {"avoidPoolNodes": False}
