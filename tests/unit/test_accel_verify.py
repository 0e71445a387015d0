"""Verify-play checks and summary rendering."""

from __future__ import annotations

from ansible_collections.kube_accel.gpu.plugins.module_utils import accel_verify as av


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
    text = av.render_table(rows, 2, 2)
    assert text.splitlines()[0].split()[-2:] == ["hami", "result"]
    evidence = text[text.index("evidence"):]
    assert "upstream kube-apiserver" in evidence and "upstream kube-controller-manager" in evidence
    assert "kwok (stand-in for the kubelet)" in evidence
    assert "not checked on the 2 fake node(s)" in evidence and "scripts/lab.py" in evidence
    assert "upstream HAMi v2.10.0" in evidence and "hami-device-plugin-standin" in evidence
    real = av.render_table([{**rows[0], "allocatable": "ok"}], 0, 2)
    assert "stand-in" not in real and "upstream device plugins" in real


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
