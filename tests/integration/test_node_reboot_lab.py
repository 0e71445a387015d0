"""node_reboot's cordon/drain and uncordon against the lab's real API server, on a kwok fake node.

The role's drain.yml and uncordon.yml run through ansible-playbook exactly as the reboot path includes them
(delegated to the controller with the lab kubeconfig); the node's ``spec.unschedulable`` and the fate of a
Deployment's pod pinned to the node are read back through the Kubernetes API after each step. The reboot
itself cannot happen here (see molecule/node_reboot).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from lab_fixture import run_localhost_playbook

pytestmark = pytest.mark.lab

NODE = "lab-mig-0"
NAMESPACE = "node-reboot-test"


def run_step(lab, step: str, tmp_path: Path) -> subprocess.CompletedProcess:
    book = [
        {
            "name": f"node_reboot {step}",
            "hosts": "localhost",
            "connection": "local",
            "gather_facts": False,
            "tasks": [
                {
                    "name": f"Include node_reboot {step}",
                    "ansible.builtin.include_role": {"name": "kube_accel.gpu.node_reboot", "tasks_from": step},
                    "vars": {
                        "node_reboot_node_name": NODE,
                        "node_reboot_kubeconfig": str(lab.kubeconfig),
                        "node_reboot_drain_timeout": 90,
                        "node_reboot_grace_period": 0,
                    },
                }
            ],
        }
    ]
    return run_localhost_playbook(book, tmp_path / f"{step}.yml")


@pytest.fixture
def core(lab):
    from kubernetes import client, config

    return client.CoreV1Api(config.new_client_from_config(str(lab.kubeconfig)))


@pytest.fixture
def pinned_pod(lab, core):
    """A Deployment's pod on NODE, tolerating the node's own taints (but not the cordon)."""
    from kubernetes import client, config

    apps = client.AppsV1Api(config.new_client_from_config(str(lab.kubeconfig)))
    node = core.read_node(NODE)
    assert not node.spec.unschedulable, f"{NODE} is cordoned before the test"
    tolerations = [
        {"key": t.key, "operator": "Exists", "effect": t.effect}
        for t in node.spec.taints or []
        if t.key != "node.kubernetes.io/unschedulable"
    ]
    core.create_namespace({"metadata": {"name": NAMESPACE}})
    labels = {"app": "node-reboot-test"}
    apps.create_namespaced_deployment(
        NAMESPACE,
        {
            "metadata": {"name": "pinned"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": NODE},
                        "tolerations": tolerations,
                        "terminationGracePeriodSeconds": 0,
                        "containers": [{"name": "app", "image": "registry.invalid/pause:1"}],
                    },
                },
            },
        },
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            pods = core.list_namespaced_pod(NAMESPACE, label_selector="app=node-reboot-test").items
            running = [p for p in pods if p.spec.node_name == NODE and p.status.phase == "Running"]
            if running:
                break
            time.sleep(1)
        else:
            pytest.fail(f"the pinned pod never ran on {NODE}")
        yield running[0].metadata.name
    finally:
        lab.kubectl_run("uncordon", NODE, check=False)
        core.delete_namespace(NAMESPACE)


def test_drain_then_uncordon(lab, core, pinned_pod, tmp_path):
    proc = run_step(lab, "drain", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert core.read_node(NODE).spec.unschedulable is True
    # The drain evicted the pod (its controller's replacement cannot schedule on the cordoned node).
    names = [
        p.metadata.name for p in core.list_namespaced_pod(NAMESPACE).items if p.metadata.deletion_timestamp is None
    ]
    assert pinned_pod not in names
    pending = [p for p in core.list_namespaced_pod(NAMESPACE).items if p.metadata.name != pinned_pod]
    assert all(p.spec.node_name is None for p in pending)

    proc = run_step(lab, "uncordon", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not core.read_node(NODE).spec.unschedulable


def test_decide_defers_without_touching_the_node(lab, core, tmp_path):
    """policy defer with reasons: the whole role runs, reports, and the node stays schedulable."""
    book = [
        {
            "name": "node_reboot defer",
            "hosts": "localhost",
            "connection": "local",
            "gather_facts": False,
            "vars": {
                "accel_reboot_policy": "defer",
                "accel_reboot_required": ["iommu: booted kernel command line lacks intel_iommu=on"],
                "node_reboot_node_name": NODE,
                "node_reboot_kubeconfig": str(lab.kubeconfig),
            },
            "roles": ["kube_accel.gpu.node_reboot"],
        }
    ]
    proc = run_localhost_playbook(book, tmp_path / "defer.yml")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "REBOOT DEFERRED on localhost" in proc.stdout
    assert not core.read_node(NODE).spec.unschedulable
