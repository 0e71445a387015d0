"""Day 2 in the lab: a pool that changes mode leaves no release of its old mode behind.

The lab's pool "mps" switches to time-slicing. The cluster play's last role (release_cleanup) uninstalls what
kube-accel owns and no pool needs, records what it owns, and verify fails naming any leftover. A `kube-accel-mps` left
at its old revision would keep its device plugin and MPS control daemon on the node beside the time-slicing release's
plugin, and verify would fail ("allocatable has no nvidia.com/gpu.shared").

Evidence: the lab's real kube-apiserver and helm (the releases, their DaemonSets, the ownership record), the
device-plugin stand-in's capacity for the node (the upstream config-manager following the new label).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from lab_fixture import (
    LAB_INVENTORY,
    changed_lab_inventory,
    converge_cluster,
    remove_changed_inventory,
    site_play,
    wait_for,
)

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")
LAB = LAB_INVENTORY
TAGS = ("--tags", "preflight,cluster,verify")
WORKLOADS = "day2-workloads"


def site(lab, inventory: Path, *args: str) -> subprocess.CompletedProcess:
    """site.yml on ``inventory`` with ``args`` (default: the cluster side, TAGS)."""
    return site_play(lab, inventory, *(args or TAGS))


def releases(lab) -> dict[str, str]:
    return {name: r["status"] for name, r in lab.releases().items()}


def daemonsets(lab) -> set[str]:
    out = lab.kubectl_run("get", "daemonsets", "-n", "kube-accel", "-o", "json").stdout
    return {d["metadata"]["labels"].get("app.kubernetes.io/instance", "") for d in json.loads(out)["items"]}


@pytest.fixture
def switched():
    """The lab inventory with pool "mps" switched to time-slicing (4 replicas), removed afterwards."""
    def to_timeslice(pool: dict) -> None:
        pool.pop("accel_mps_replicas")
        pool.update(accel_mode="timeslice", accel_timeslice_replicas=4)

    yield changed_lab_inventory("pool_mps.yml", to_timeslice)
    remove_changed_inventory()


def pinned_pod(lab, name: str, node: str, namespace: str = WORKLOADS) -> str:
    """A Deployment's pod on ``node`` (tolerating the pool's taint, as a GPU workload there does): its UID once
    running (kwok runs it)."""
    taints = lab.node(node)["spec"].get("taints") or []
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "terminationGracePeriodSeconds": 0,
                     "tolerations": [{"key": t["key"], "operator": "Exists", "effect": t["effect"]} for t in taints
                                     if t["key"] != "node.kubernetes.io/unschedulable"],
                     "containers": [{"name": "app", "image": "registry.invalid/pause:1"}]}}}}
    subprocess.run([str(lab.kubectl), "--kubeconfig", str(lab.kubeconfig), "apply", "-f", "-"],
                   input=json.dumps(deployment), text=True, capture_output=True, check=True)
    return wait_for(f"a running pod of {name}", lambda: running_pod(lab, name, namespace))


def running_pod(lab, name: str, namespace: str = WORKLOADS) -> str | None:
    pods = json.loads(lab.kubectl_run("get", "pods", "-n", namespace, "-l", f"app={name}", "-o", "json").stdout)
    return next((p["metadata"]["uid"] for p in pods["items"] if p["status"].get("phase") == "Running"
                 and not p["metadata"].get("deletionTimestamp")), None)


@pytest.fixture
def workloads(lab):
    lab.namespace(WORKLOADS)
    yield
    lab.kubectl_run("delete", "namespace", WORKLOADS, "--wait=false", check=False)


def test_a_pool_switched_from_mps_to_timeslice_leaves_nothing_behind(lab, switched, workloads):
    """And its node is drained before it is relabelled, returned to service at the end; other pools' nodes are not
    touched. Evidence: the run's task order, the pods' UIDs and the node as the API server holds it."""
    converge_cluster(lab, {"kube-accel-mps", "kube-accel-pgpu"}, namespace="kube-accel")
    assert "kube-accel-mps" in releases(lab) and "kube-accel-mps" in daemonsets(lab)
    mps_pod = pinned_pod(lab, "on-mps", "lab-mps-0")
    bystander = pinned_pod(lab, "on-pgpu", "lab-pgpu-0")

    proc = site(lab, switched)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    assert "Uninstall the releases no pool or setting needs any more" in proc.stdout
    out = proc.stdout
    drained = out.index("Cordon or drain a node whose sharing changes: drain")
    assert drained < out.index("pool_labels : Reconcile the labels and taints of every pool's nodes]")
    assert "lab-pgpu-0" not in out[out.index("Cordon or drain a node whose sharing changes: cordon"):drained]
    assert running_pod(lab, "on-mps") != mps_pod  # evicted; its Deployment made another
    assert running_pod(lab, "on-pgpu") == bystander
    node = lab.node("lab-mps-0")
    assert not node["spec"].get("unschedulable"), "lab-mps-0 left cordoned"
    last = json.loads(node["metadata"]["annotations"]["kube-accel.io/last-maintenance"])
    assert last["reason"].startswith("kube-accel: sharing changes: "), last
    assert "kube-accel.io/mode mps -> timeslice" in last["reason"], last
    now = releases(lab)
    assert "kube-accel-mps" not in now and now["kube-accel-timeslice"] == "deployed", now
    assert "kube-accel-mps" not in daemonsets(lab)
    labels = node["metadata"]["labels"]
    assert labels["kube-accel.io/mode"] == "timeslice" and labels["nvidia.com/device-plugin.config"] == "timeslice-4"
    owned = json.loads(lab.kubectl_run("get", "configmap", "kube-accel-owned", "-n", "kube-accel", "-o",
                                       "json").stdout)["data"]["releases"]
    assert "kube-accel/kube-accel-mps" not in json.loads(owned)
    assert "releases: no leftover" in proc.stdout

    # And back: the MPS release returns, the time-slicing release serves its own pool only.
    back = site(lab, LAB / "hosts.yml")
    assert back.returncode == 0, back.stdout[-5000:]
    assert releases(lab)["kube-accel-mps"] == "deployed" and "kube-accel-mps" in daemonsets(lab)


def test_what_an_earlier_run_owned_and_no_one_wants_is_a_leftover_then_removed(lab):
    """A release the ownership record names (as an earlier version would have recorded one it created) that nothing
    wants now fails verify, which names it; the next cluster run uninstalls it and drops it from the record. A release
    of the same kind the record does not name is never touched (tests/unit/test_accel_ownership.py)."""
    name = "kube-accel-retired"
    # Converged, with a record (the test above leaves the lab so; run alone, the site run makes it so).
    if lab.kubectl_run("get", "configmap", "kube-accel-owned", "-n", "kube-accel", check=False).returncode:
        site(lab, LAB / "hosts.yml")
    tiny = REPO / "tests" / "data" / "charts" / "tiny"
    subprocess.run([str(lab.helm), "install", name, str(tiny), "-n", "kube-accel", "--kubeconfig",
                    str(lab.kubeconfig)], check=True, capture_output=True)
    record = json.loads(lab.kubectl_run("get", "configmap", "kube-accel-owned", "-n", "kube-accel", "-o",
                                        "json").stdout)["data"]["releases"]
    patch = {"data": {"releases": json.dumps(sorted(json.loads(record) + [f"kube-accel/{name}"]))}}
    lab.kubectl_run("patch", "configmap", "kube-accel-owned", "-n", "kube-accel", "--type", "merge", "-p",
                    json.dumps(patch))
    try:
        env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
        verify = subprocess.run([PLAYBOOK, "-i", str(LAB / "hosts.yml"), str(REPO / "ansible" / "verify.yml")],
                                cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=600)
        assert verify.returncode != 0
        assert f"release kube-accel/{name} is still deployed but no pool or setting wants it (leftover)" in \
            verify.stdout, verify.stdout[-4000:]
        cleaned = site(lab, LAB / "hosts.yml")
        assert cleaned.returncode == 0, cleaned.stdout[-4000:]
        assert name not in releases(lab)
        record = lab.kubectl_run("get", "configmap", "kube-accel-owned", "-n", "kube-accel", "-o", "json").stdout
        assert name not in record
    finally:
        subprocess.run([str(lab.helm), "uninstall", name, "-n", "kube-accel", "--kubeconfig", str(lab.kubeconfig)],
                       check=False, capture_output=True)

