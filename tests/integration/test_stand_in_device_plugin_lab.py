"""The lab's device-plugin stand-in runs the upstream config-manager of each NVIDIA device-plugin pod.

`lab.py up` starts `device-plugin-standin` (scripts/kalab/standins.py). Once the cluster play's pgpu, mps and timeslice
releases run a device-plugin pod on a lab node, the stand-in runs that pod's config-manager sidecar (k8s-device-plugin
v0.20.0, built from the archive) with its rendered env and the ConfigMap's files, and registers the capacity the
plugin would for the config config-manager chose, read by the plugin's own loader. Here: the config each node got
is the one its label names; a label naming no rendered config makes config-manager exit with its own error while the
node keeps its capacity (as the plugin keeps its config), and the sidecar is restarted like a failed container once
the label is right again; a new device-plugin pod gets a sidecar of its own. The capacity itself is checked by
verify against the inventory's promise (test_site_lab.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from lab_fixture import converge_cluster, wait_for

pytestmark = [pytest.mark.lab, pytest.mark.cluster_only]

REPO = Path(__file__).resolve().parents[2]
LABEL = "nvidia.com/device-plugin.config"
NODES = ("lab-mps-0", "lab-pgpu-0", "lab-timeslice-0")


@pytest.fixture(scope="module")
def standin(lab):
    """The stand-in's directory, with the cluster play's releases deployed and every node registered (the cluster
    play runs here unless an earlier test installed them: converge_cluster)."""
    from kalab.processes import running
    from kalab.standins import DP_STANDIN

    root = lab.kubeconfig.parent
    assert DP_STANDIN in running(root), "`lab.py up` starts device-plugin-standin"
    converge_cluster(lab, {"kube-accel-pgpu", "kube-accel-mps", "kube-accel-timeslice"}, namespace="kube-accel")
    for name in NODES:
        wait_for(f"{name} registered by the stand-in",
                 lambda name=name: lab.node(name)["metadata"]["annotations"].get("kube-accel.lab/capacity")
                 == DP_STANDIN, timeout=60)
    return root



def gpu_capacity(lab, name: str) -> dict[str, str]:
    return {k: v for k, v in lab.node(name)["status"]["allocatable"].items() if "/" in k}


def applied(root: Path, name: str) -> str | None:
    dst = root / "device-plugin" / name / "config" / "config.yaml"
    return Path(os.readlink(dst)).name if dst.is_symlink() else None


def sidecar_pid(root: Path, name: str) -> int | None:
    from kalab.processes import running

    return running(root).get(f"config-manager-{name}")


def test_each_node_got_the_config_its_label_names(lab, standin):
    for name in NODES:
        label = lab.node(name)["metadata"]["labels"][LABEL]
        assert applied(standin, name) == label, name
        log = (standin / "procs" / f"config-manager-{name}.log").read_text()
        assert f"Label change detected: {LABEL}={label}" in log, log[-2000:]


def test_a_label_naming_no_config_stops_the_sidecar_and_the_node_keeps_its_capacity(lab, standin):
    name = "lab-mps-0"
    label = lab.node(name)["metadata"]["labels"][LABEL]
    before, pid = gpu_capacity(lab, name), sidecar_pid(standin, name)
    assert before and pid
    lab.kubectl_run("label", "node", name, "--overwrite", f"{LABEL}=mps-999")
    try:
        wait_for("config-manager to refuse mps-999", lambda: sidecar_pid(standin, name) is None, timeout=30)
        log = (standin / "procs" / f"config-manager-{name}.log").read_text()
        assert "specified config mps-999 does not exist" in log, log[-2000:]
        assert gpu_capacity(lab, name) == before
    finally:
        lab.kubectl_run("label", "node", name, "--overwrite", f"{LABEL}={label}")
    # Restarted like a failed container (back-off), it applies the right config again.
    wait_for("the sidecar to be restarted", lambda: sidecar_pid(standin, name) not in (None, pid), timeout=40)
    wait_for("the restarted sidecar to apply its config", lambda: applied(standin, name) == label, timeout=30)
    assert gpu_capacity(lab, name) == before


def test_a_new_device_plugin_pod_gets_a_sidecar_of_its_own(lab, standin):
    name = "lab-pgpu-0"
    pid = sidecar_pid(standin, name)
    pods = json.loads(lab.kubectl_run("get", "pods", "-n", "kube-accel", "--field-selector", f"spec.nodeName={name}",
                                      "-l", "app.kubernetes.io/component=device-plugin", "-o", "json").stdout)["items"]
    (pod,) = pods
    lab.kubectl_run("delete", "pod", "-n", "kube-accel", pod["metadata"]["name"], "--wait=false")
    wait_for("a sidecar for the DaemonSet's new pod", lambda: sidecar_pid(standin, name) not in (None, pid), timeout=60)
    wait_for("its config", lambda: applied(standin, name) == lab.node(name)["metadata"]["labels"][LABEL], timeout=30)
    log = (standin / "procs" / "device-plugin-standin.log").read_text()
    assert log.count(f"config-manager-{name} started for pod") >= 2, log[-2000:]
