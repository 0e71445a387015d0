"""Verify-play checks and summary rendering."""

from __future__ import annotations

from ansible_collections.kube_accel.gpu.plugins.module_utils.verify import pool_checks as av


def test_label_and_allocatable_problems_name_node_key_and_values():
    assert av.label_problems("n1", {"a": "1"}, {"a": "1"}) == []
    assert av.label_problems("n1", {}, {"kube-accel.io/pool": "mps"}) == [
        "n1: label kube-accel.io/pool=None, expected 'mps'"]
    assert av.allocatable_problems("n1", {"nvidia.com/gpu": "8"}, {"nvidia.com/gpu": 8}) == []
    assert av.allocatable_problems("n1", {"nvidia.com/gpu": "4"}, {"nvidia.com/gpu": 8}) == [
        "n1: allocatable nvidia.com/gpu=4, expected 8"]
    assert av.allocatable_problems("n1", {}, {"tencent.com/vcuda-core": 0}) == [
        "n1: allocatable has no tencent.com/vcuda-core (expected 0)"]
    assert av.allocatable_problems("n1", {"x": "0"}, {"x": 0}) == ["n1: allocatable x=0, expected more than 0"]


def test_daemon_problems():
    assert av.daemon_problems("n", []) == ["n: no device-plugin DaemonSet pod of the pool's release"]
    assert av.daemon_problems("n", [{"name": "p", "ready": False}]) == ["n: DaemonSet pod(s) p not Ready"]
    assert av.daemon_problems("n", [{"name": "p", "ready": True}]) == []


def test_job_manifest_pins_pool_and_requests_resource():
    job = av.job_manifest("j", "ns", "kube-accel.io/pool", "mps", {"nvidia.com/gpu": "1"}, "img", ["true"],
                          "kube-accel.io/pool")
    spec = job["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"kube-accel.io/pool": "mps"}
    assert spec["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert spec["tolerations"][0]["value"] == "mps"
    assert job["spec"]["backoffLimit"] == 0


def test_table_mentions_fake_nodes():
    rows = [{"pool": "mps", "mode": "mps", "nodes": 1, "labels": "ok", "daemonset": "ok", "allocatable": "ok",
             "job": "completed on n", "result": "PASS"}]
    text = av.render_table(rows, 1, 1)
    assert text.splitlines()[0].split() == ["pool", "mode", "nodes", "labels", "daemonset", "allocatable", "job",
                                            "result"]
    assert "mps" in text.splitlines()[2] and "PASS" in text.splitlines()[2]
    assert "1 of 1 nodes are kwok fakes" in text
    assert "kwok" not in av.render_table(rows, 0, 1)


def test_table_names_each_checks_source_and_never_checks_lab_capacity():
    rows = [{"pool": "h", "mode": "vgpu", "nodes": 2, "labels": "ok", "daemonset": "ok", "allocatable": av.STAND_IN,
             "job": "completed on n", "hami": "ok", "result": "PASS"}]
    text = av.render_table(rows, 2, 2, inventory_nodes=2)
    assert text.splitlines()[0].split()[-2:] == ["hami", "result"]
    evidence = text[text.index("evidence"):]
    assert "upstream kube-apiserver" in evidence and "upstream kube-controller-manager" in evidence
    assert "kwok (stand-in for the kubelet)" in evidence
    assert "not checked on the 2 fake node(s)" in evidence and "scripts/lab.py" in evidence
    assert "device-plugin stand-ins" not in evidence  # no fake node's capacity came from a stand-in
    assert "upstream HAMi v2.10.0" in evidence and "hami-device-plugin-standin" in evidence
    real = av.render_table([{**rows[0], "allocatable": "ok"}], 0, 2)
    assert "stand-in" not in real and "upstream device plugins" in real


def test_evidence_separates_stand_in_registrations_from_inventory_copies():
    (line,) = [x for x in av.evidence(5, 6, False, inventory_nodes=2) if x.lstrip().startswith("allocatable")]
    assert "upstream device plugins (registered with the kubelet) on the real node(s)" in line
    assert "on 3 fake node(s) the lab's device-plugin stand-ins" in line and "config-manager" in line
    assert "not checked on the 2 fake node(s)" in line
    (only_standins,) = [x for x in av.evidence(3, 3, False) if x.lstrip().startswith("allocatable")]
    assert "not checked" not in only_standins and "real node" not in only_standins


def test_dra_nodes_are_not_counted_as_device_plugin_registrations():
    """A dra pool's fake node has no device plugin (its slices column names the publisher): the lab's table said
    'on -1 fake node(s) the lab's device-plugin stand-ins' and 'True of 8 nodes' before."""
    row = {"pool": "dra", "mode": "dra", "nodes": 1, "labels": "ok", "daemonset": "ok", "allocatable": "ok",
           "slices": f"published by {av.DRA_SLICES_STANDIN}", "job": "completed on n", "result": "PASS"}
    text = av.render_table([row], 8, 8, inventory_nodes=2, dra_nodes=1)
    assert "note: 8 of 8 nodes are kwok fakes" in text
    assert "on 5 fake node(s) the lab's device-plugin stand-ins" in text
    assert "  slices       the DRA driver's ResourceSlices" in text
    assert "  slices " not in av.render_table([{k: v for k, v in row.items() if k != "slices"}], 1, 1)


def test_hami_problems_need_hamis_scheduler_and_assignment():
    good = {"name": "p", "scheduler": "hami-scheduler", "node": "n1",
            "annotations": {av.HAMI_ASSIGNED_NODE: "n1", av.HAMI_DEVICES_ALLOCATED: "GPU-1,NVIDIA,1000,0:;"}}
    assert av.hami_problems("h", good, "hami-scheduler") == []
    assert "webhook did not mutate" in av.hami_problems("h", {**good, "scheduler": "default-scheduler"},
                                                        "hami-scheduler")[0]
    assert "no HAMi device assignment" in av.hami_problems("h", {**good, "annotations": {}}, "hami-scheduler")[0]
    assert av.hami_problems("h", {**good, "node": None}, "hami-scheduler")


def test_job_pod_labels():
    job = av.job_manifest("j", "ns", "k", "p", {"nvidia.com/gpu": "1"}, "img", ["true"], None,
                          {"hami.io/webhook": "ignore"})
    assert job["spec"]["template"]["metadata"]["labels"] == {"app.kubernetes.io/component": "verify",
                                                             "hami.io/webhook": "ignore"}


def test_job_manifest_names_the_pools_runtime_class_only_when_given():
    job = av.job_manifest("j", "ns", "k", "p", {"nvidia.com/gpu": "1"}, "img", ["true"], None, runtime_class="nvidia")
    assert job["spec"]["template"]["spec"]["runtimeClassName"] == "nvidia"
    job = av.job_manifest("j", "ns", "k", "p", {"nvidia.com/gpu": "1"}, "img", ["true"], None)
    assert "runtimeClassName" not in job["spec"]["template"]["spec"]


def test_expected_pools_take_the_runtime_class_from_the_release_values():
    """pgpu, mps and timeslice releases (the lab's mig pool is in the pgpu release) hand GPUs out by volume-mounts,
    which only the NVIDIA runtime reads: their Jobs name the RuntimeClass the release runs its agents with. vGPU
    pools name none (HAMi pools run nvidia as the default runtime, gpu-manager injects its own devices), nor does the
    dra pool (the DRA driver hands its devices to the container engine as CDI devices)."""
    from ansible_collections.kube_accel.gpu.plugins.module_utils.helm import pool_charts as accel_chart_values
    from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import pools as accel_pools
    from kalab.site import gpu_hosts, inventory

    pools = accel_pools.collect_pools(gpu_hosts(inventory()))
    for name in ("nvidia", "nvidia-site"):
        releases = accel_chart_values.pool_releases(pools, {"runtime_class": name})
        values = {pool: r["values"].get("runtimeClassName") for r in releases for pool in r["pools"]}
        got = {p["pool"]: p.get("runtime_class") for p in av.expected_pools(pools, releases)}
        assert got == values
        assert got == {"pgpu": name, "mig": name, "mps": name, "timeslice": name, "vgpu-hami": None,
                       "vgpu-vcuda": None, "dra": None}


def test_operand_problems_want_each_operand_exactly_where_kube_accel_means_it():
    exporter, mig = av.OPERATOR_DCGM_EXPORTER, av.OPERATOR_MIG_MANAGER
    pods = [{"name": "nvidia-dcgm-exporter-x", "daemonset": exporter, "ready": True}]
    assert av.operand_problems("n", pods, {exporter: True, mig: False}) == []
    assert av.operand_problems("n", pods, {exporter: True, mig: True}) == [
        "n: no nvidia-mig-manager pod (the GPU Operator should run it here)"]
    assert av.operand_problems("n", pods, {exporter: False, mig: False}) == [
        "n: nvidia-dcgm-exporter pod nvidia-dcgm-exporter-x runs here; kube-accel keeps it off this pool"]
    assert av.operand_problems("n", [{**pods[0], "ready": False}], {exporter: True}) == [
        "n: nvidia-dcgm-exporter pod(s) nvidia-dcgm-exporter-x not Ready"]


def test_expected_pools_carry_the_operands_only_with_the_operator():
    """The lab inventory's pools through the same filters the verify role uses: the MIG manager on the pool whose
    MIG layout the operator owns (mig_owner operator), the DCGM exporter on every pool."""
    from ansible_collections.kube_accel.gpu.plugins.module_utils.helm import pool_charts as accel_chart_values
    from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import pools as accel_pools
    from kalab.site import gpu_hosts, inventory

    pools = accel_pools.collect_pools(gpu_hosts(inventory()))
    releases = accel_chart_values.pool_releases(pools, {})
    assert all("operands" not in p for p in av.expected_pools(pools, releases))
    operands = {p["pool"]: p["operands"] for p in av.expected_pools(pools, releases, gpu_operator=True)}
    assert {pool for pool, o in operands.items() if o[av.OPERATOR_MIG_MANAGER]} == {"mig"}
    assert all(o[av.OPERATOR_DCGM_EXPORTER] for o in operands.values())
    passthrough = {**pools[0]["settings"], "accel_vfio_passthrough": True}
    assert av.operator_operands(passthrough) == {av.OPERATOR_MIG_MANAGER: False, av.OPERATOR_DCGM_EXPORTER: False}


def test_operator_column_and_evidence_only_where_the_operator_was_checked():
    row = {"pool": "mig", "mode": "pgpu", "nodes": 1, "labels": "ok", "daemonset": "ok", "allocatable": "ok",
           "operator": "ok", "job": "completed on n", "result": "PASS"}
    text = av.render_table([row], 1, 1)
    assert text.splitlines()[0].split() == ["pool", "mode", "nodes", "labels", "daemonset", "allocatable", "operator",
                                            "job", "result"]
    assert "upstream GPU Operator v26.7.0 controller" in text
    skipped = av.render_table([{**row, "operator": av.NOT_INSTALLED}], 1, 1)
    assert "not installed" in skipped and "GPU Operator v26.7.0" not in skipped
    assert "operator" not in av.render_table([{k: v for k, v in row.items() if k != "operator"}], 1, 1)
