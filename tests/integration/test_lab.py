"""The lab is real: a kube-apiserver at the pinned version, fake GPU nodes labelled by the cluster play's own role,
and helm installing a chart whose pod the real scheduler places on a fake node."""

from __future__ import annotations

import subprocess
import time

import pytest
from ansible_collections.kube_accel.gpu.plugins.module_utils.common import constants as accel_constants
from kubernetes import client, config

pytestmark = [pytest.mark.lab, pytest.mark.cluster_only]


def _api(lab):
    return config.new_client_from_config(str(lab.kubeconfig))


def test_server_reports_pinned_version(lab):
    from kalab.site import versions

    info = client.VersionApi(_api(lab)).get_code()
    assert info.git_version == versions()["K8S_VERSION"]


def test_pool_labels_role_labels_the_fresh_nodes(lab):
    """The fixture labels the lab's fresh nodes with the cluster play's pool_labels role: the labels come from that
    role on a real API server, the expected values from the lab inventory as written. The nodes' GPU capacity is
    not checked here: the device-plugin stand-ins write it once the cluster play's releases run
    (test_site_lab.py checks it through verify); plan.pools.advertised_resources is checked against the
    upstream device plugins (tests/conformance/test_device_plugin.py, test_vgpu_capacity.py)."""
    nodes = {n.metadata.name: n for n in client.CoreV1Api(_api(lab)).list_node().items}
    assert nodes["lab-pgpu-0"].metadata.labels[accel_constants.LABELS["mode"]] == "pgpu"
    # inventories/lab pool_timeslice: 8 replicas, a pod may take several (fail_requests_greater_than_one false).
    sliced = nodes["lab-timeslice-0"]
    assert sliced.metadata.labels[accel_constants.LABELS["mode"]] == "timeslice"
    assert sliced.metadata.labels["nvidia.com/device-plugin.config"] == "timeslice-8-multi"
    assert set(lab.nodes_by_pool) == {"vgpu-hami", "vgpu-vcuda", "pgpu", "mps", "mig", "timeslice", "dra"}


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
