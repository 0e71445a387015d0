"""What each pool promises: labels and advertised resources per mode."""

from __future__ import annotations

from ansible_collections.kube_accel.gpu.plugins.module_utils.host import system_facts as accel_host_facts
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import pools as ap


def s(**kw):
    """A pool's settings as the play reads them: inventory names (accel_ + keyword), the model's defaults filled."""
    return ap.pool_settings({"accel_pool": "p", **{f"accel_{k}": v for k, v in kw.items()}})


def test_labels_per_mode():
    mps = ap.node_labels(s(mode="mps", mps_replicas=8))
    assert mps["kube-accel.io/pool"] == "p"
    assert mps["nvidia.com/mps.capable"] == "true"
    assert mps["nvidia.com/device-plugin.config"] == "mps-8"
    vgpu = ap.node_labels(s(mode="vgpu", vgpu_backend="gpu-manager"))
    assert vgpu["nvidia.com/gpu.deploy.device-plugin"] == "false"
    assert vgpu["kube-accel.io/vgpu-backend"] == "gpu-manager"
    assert "nvidia.com/device-plugin.config" not in vgpu
    pgpu = ap.node_labels(s(mode="pgpu"))
    assert pgpu["nvidia.com/device-plugin.config"] == "exclusive"
    assert "nvidia.com/mps.capable" not in pgpu and "nvidia.com/mig.config" not in pgpu
    mig = ap.node_labels(s(mode="pgpu", mig_strategy="mixed", mig_geometry={"3g.40gb": 1, "1g.10gb": 2}))
    assert mig["nvidia.com/device-plugin.config"] == "mig-mixed"
    assert mig["nvidia.com/mig.config"] == "kube-accel-1g.10gb-2.3g.40gb-1"
    host_owned = ap.node_labels(s(mode="pgpu", mig_strategy="single", mig_owner="host",
                                  mig_geometry={"1g.10gb": 7}))
    assert "nvidia.com/mig.config" not in host_owned


def test_operator_input_labels():
    # NFD's NVIDIA PCI label keeps the GPU Operator's gpu.present and gpu.deploy.* labels on every pool node.
    for settings in (s(mode="mps", mps_replicas=2), s(mode="vgpu", vgpu_backend="hami"), s(mode="pgpu"),
                     s(mode="pgpu", vfio_passthrough=True)):
        assert ap.node_labels(settings)["feature.node.kubernetes.io/pci-10de.present"] == "true"
    # kube-accel's charts own the device plugin everywhere; VM passthrough nodes get no operator operand at all.
    assert ap.node_labels(s(mode="pgpu"))["nvidia.com/gpu.deploy.device-plugin"] == "false"
    vfio = ap.node_labels(s(mode="pgpu", vfio_passthrough=True))
    assert vfio["nvidia.com/gpu.deploy.operands"] == "false" and "nvidia.com/gpu.deploy.device-plugin" not in vfio
    mig = ap.node_labels(s(mode="pgpu", mig_strategy="mixed", mig_geometry={"7g.80gb": 1}))
    assert mig["nvidia.com/mig.capable"] == "true" and mig["nvidia.com/gpu.deploy.mig-manager"] == "true"
    # Every other pool says "false": the operator would otherwise take an A100/A30/H100 for MIG capable by its product
    # label and run its MIG manager there (gpu-operator v26.7.0 hasMIGCapableGPU, seen in the lab).
    host_owned = ap.node_labels(s(mode="pgpu", mig_strategy="single", mig_owner="host", mig_geometry={"1g.10gb": 7}))
    for other in (host_owned, vfio, ap.node_labels(s(mode="pgpu")), ap.node_labels(s(mode="mps", mps_replicas=2)),
                  ap.node_labels(s(mode="vgpu", vgpu_backend="hami")),
                  ap.node_labels(s(mode="timeslice", timeslice_replicas=4))):
        assert other["nvidia.com/mig.capable"] == "false" and "nvidia.com/gpu.deploy.mig-manager" not in other
    vfio_mig = ap.node_labels(s(mode="pgpu", vfio_passthrough=True, mig_strategy="mixed", mig_geometry={"7g.80gb": 1}))
    assert vfio_mig["nvidia.com/mig.capable"] == "false" and "nvidia.com/mig.config" not in vfio_mig


def test_os_release_becomes_nfds_os_labels_and_is_never_removed():
    text = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\nVERSION_ID="12"\nID=debian\n'
    assert accel_host_facts.parse_os_release(text) == {"id": "debian", "version_id": "12"}
    assert accel_host_facts.parse_os_release("ID='rhel'\nVERSION_ID=9.4\n") == {"id": "rhel", "version_id": "9.4"}
    assert accel_host_facts.parse_os_release("") == {}
    assert ap.os_labels({"id": "ubuntu", "version_id": "22.04"}) == {
        "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
        "feature.node.kubernetes.io/system-os_release.VERSION_ID": "22.04"}
    # Not a label value (spaces, too long): left out rather than refused by the API server.
    assert ap.os_labels({"id": "my distro", "version_id": "1" * 64}) == {}
    assert ap.os_labels(None) == {}
    pools = [{"pool": "p", "settings": s(mode="pgpu"), "hosts": ["a", "b"],
              "os_release": {"a": {"id": "debian", "version_id": "12"}}}]
    nodes = ap.desired_nodes(pools)
    assert nodes["a"]["labels"]["feature.node.kubernetes.io/system-os_release.ID"] == "debian"
    assert "feature.node.kubernetes.io/system-os_release.ID" not in nodes["b"]["labels"]
    # NFD may own them where it runs: the cluster play never removes them.
    assert not set(ap.os_labels({"id": "debian", "version_id": "12"})) & ap.managed_label_keys()


def test_every_label_set_is_managed():
    for settings in (s(mode="mps", mps_replicas=2), s(mode="vgpu", vgpu_backend="hami"),
                     s(mode="pgpu", mig_strategy="mixed", mig_geometry={"7g.80gb": 1})):
        assert set(ap.node_labels(settings)) <= ap.managed_label_keys()


def test_advertised_resources():
    assert ap.advertised_resources(s(mode="pgpu"), 8, 81920) == {"nvidia.com/gpu": 8}
    assert ap.advertised_resources(s(mode="mps", mps_replicas=4), 2, 24576) == {"nvidia.com/gpu": 8}
    assert ap.advertised_resources(s(mode="vgpu", vgpu_backend="hami", vgpu_split_count=10), 1, 81920) == {
        "nvidia.com/gpu": 10}
    # 15360 MiB T4 -> 60 units of 256 MiB per GPU.
    assert ap.advertised_resources(s(mode="vgpu", vgpu_backend="gpu-manager"), 2, 15360) == {
        "tencent.com/vcuda-core": 200, "tencent.com/vcuda-memory": 120}
    mixed = ap.advertised_resources(s(mode="pgpu", mig_strategy="mixed",
                                      mig_geometry={"3g.40gb": 1, "1g.10gb": 2}), 2, 81920)
    assert mixed == {"nvidia.com/mig-3g.40gb": 2, "nvidia.com/mig-1g.10gb": 4}
    single = ap.advertised_resources(s(mode="pgpu", mig_strategy="single", mig_geometry={"1g.10gb": 7}), 2, 81920)
    assert single == {"nvidia.com/gpu": 14}
    assert ap.advertised_resources(s(mode="pgpu"), 0, 0) == {}


def test_collect_pools_and_release_keys():
    hosts = {
        "b": {"accel_pool": "mps", "accel_mode": "mps", "accel_mps_replicas": 2, "ansible_host": "x"},
        "a": {"accel_pool": "mps", "accel_mode": "mps", "accel_mps_replicas": 2},
        "c": {"accel_pool": "h", "accel_mode": "vgpu", "accel_vgpu_backend": "hami"},
        "cp": {"ansible_connection": "local"},
    }
    pools = ap.collect_pools(hosts)
    assert [(p["pool"], p["hosts"]) for p in pools] == [("h", ["c"]), ("mps", ["a", "b"])]
    assert ap.release_key(pools[0]["settings"]) == "vgpu-hami"
    assert ap.release_key(pools[1]["settings"]) == "mps"


def test_requests_fit_the_gpu_manager_contract():
    req = ap.request_for(s(mode="vgpu", vgpu_backend="gpu-manager"))
    core = int(req["tencent.com/vcuda-core"])
    assert 1 <= core <= 100 or core % 100 == 0
    assert ap.request_for(s(mode="mps", mps_replicas=2)) == {"nvidia.com/gpu": "1"}


def _pool(name, hosts, **settings):
    return {"pool": name, "hosts": hosts, "settings": s(pool=name, **settings)}


def test_desired_nodes_taint_only_tainted_pools():
    nodes = ap.desired_nodes([_pool("a", ["n1"], mode="pgpu", node_taint=True),
                              _pool("b", ["n2"], mode="mps", mps_replicas=2)])
    assert nodes["n1"]["taints"] == [{"key": "kube-accel.io/pool", "value": "a", "effect": "NoSchedule"}]
    assert nodes["n2"]["taints"] == []
    assert nodes["n2"]["labels"]["kube-accel.io/pool"] == "b"


def test_timeslice_pools():
    one_per_pod = s(mode="timeslice", timeslice_replicas=4)
    labels = ap.node_labels(one_per_pod)
    assert labels["kube-accel.io/mode"] == "timeslice"
    assert labels["nvidia.com/device-plugin.config"] == "timeslice-4"
    assert labels["nvidia.com/gpu.deploy.device-plugin"] == "false"
    assert "nvidia.com/mps.capable" not in labels and "nvidia.com/mig.config" not in labels
    # kube-accel's defaults: renamed (nvidia.com/gpu.shared) and one replica per pod.
    assert ap.time_slicing(one_per_pod) == {"replicas": 4, "renameByDefault": True, "failRequestsGreaterThanOne": True}
    assert ap.advertised_resources(one_per_pod, 2, 15360) == {"nvidia.com/gpu.shared": 8}
    assert ap.request_for(one_per_pod) == {"nvidia.com/gpu.shared": "1"}
    oversubscribed = s(mode="timeslice", timeslice_replicas=8, timeslice_rename_by_default=False,
                       timeslice_fail_requests_greater_than_one="false")
    assert ap.device_plugin_config(oversubscribed) == "timeslice-8-gpu-multi"
    assert ap.advertised_resources(oversubscribed, 1, 81920) == {"nvidia.com/gpu": 8}
    assert ap.device_plugin_config(s(mode="timeslice", timeslice_replicas=2,
                                     timeslice_fail_requests_greater_than_one=False)) == "timeslice-2-multi"
