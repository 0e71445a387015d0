"""The lab is real: a kube-apiserver at the pinned version, fake GPU nodes with GPU capacity, and helm
installing a chart whose pod the real scheduler places on a fake node."""

from __future__ import annotations

import subprocess
import time

import accel_constants
import pytest
from kubernetes import client, config

pytestmark = pytest.mark.lab


def _api(lab):
    return config.new_client_from_config(str(lab.kubeconfig))


def test_server_reports_pinned_version(lab):
    from lab import versions  # scripts/lab.py

    info = client.VersionApi(_api(lab)).get_code()
    assert info.git_version == versions()["K8S_VERSION"]


def test_fake_gpu_nodes_carry_pool_capacity(lab):
    nodes = {n.metadata.name: n for n in client.CoreV1Api(_api(lab)).list_node().items}
    mps = nodes["lab-mps-0"]
    # lab-mps-0 is an A30 host snapshot with 4 MPS replicas per GPU.
    gpus = int(mps.metadata.labels["nvidia.com/gpu.count"])
    assert gpus >= 1
    assert mps.status.allocatable["nvidia.com/gpu"] == str(gpus * 4)
    vcuda = nodes["lab-vcuda-0"]
    memory = int(vcuda.metadata.labels["nvidia.com/gpu.memory"])
    count = int(vcuda.metadata.labels["nvidia.com/gpu.count"])
    assert vcuda.status.allocatable["tencent.com/vcuda-core"] == str(100 * count)
    assert vcuda.status.allocatable["tencent.com/vcuda-memory"] == str(count * (memory // 256))
    assert nodes["lab-pgpu-0"].metadata.labels[accel_constants.LABELS["mode"]] == "pgpu"
    # lab-timeslice-0: one A100-80GB, 8 time-slicing replicas renamed nvidia.com/gpu.shared (renameByDefault).
    sliced = nodes["lab-timeslice-0"]
    assert sliced.metadata.labels[accel_constants.LABELS["mode"]] == "timeslice"
    assert sliced.metadata.labels["nvidia.com/device-plugin.config"] == "timeslice-8-multi"
    shared = int(sliced.metadata.labels["nvidia.com/gpu.count"]) * 8
    assert sliced.status.allocatable["nvidia.com/gpu.shared"] == str(shared)
    assert "nvidia.com/gpu" not in sliced.status.allocatable
    assert set(lab.nodes_by_pool) == {"vgpu-hami", "vgpu-vcuda", "pgpu", "mps", "mig", "timeslice"}


def test_helm_chart_pod_runs_on_a_fake_node(lab, tmp_path):
    chart = tmp_path / "throwaway"
    subprocess.run([str(lab.helm), "create", str(chart)], check=True, capture_output=True)
    ns, release = "lab-smoke", "throwaway"
    env_args = ["--kubeconfig", str(lab.kubeconfig)]
    subprocess.run(
        [str(lab.helm), "upgrade", "--install", release, str(chart), "-n", ns, "--create-namespace",
         "--wait", "--timeout", "2m", *env_args],
        check=True, capture_output=True, text=True,
    )
    try:
        core = client.CoreV1Api(_api(lab))
        apps = client.AppsV1Api(_api(lab))
        deploy = apps.read_namespaced_deployment(release, ns)
        assert deploy.status.ready_replicas == 1
        selector = ",".join(f"{k}={v}" for k, v in deploy.spec.selector.match_labels.items())
        deadline = time.time() + 60
        while True:
            pods = core.list_namespaced_pod(ns, label_selector=selector).items
            if pods and pods[0].status.phase == "Running" or time.time() > deadline:
                break
            time.sleep(1)
        assert len(pods) == 1
        pod = pods[0]
        assert pod.status.phase == "Running"
        node = core.read_node(pod.spec.node_name)
        assert node.metadata.annotations.get("kwok.x-k8s.io/node") == "fake"
    finally:
        subprocess.run([str(lab.helm), "uninstall", release, "-n", ns, "--wait", *env_args],
                       check=False, capture_output=True)
        client.CoreV1Api(_api(lab)).delete_namespace(ns)
