"""Day 2 in the lab: a pool's MIG geometry removed, then added back, through site.yml, with a GPU workload
running on the pool's node and another on a pool that does not change.

Removed: the hosts play drains lab-mig-0 before roles/mig turns MIG off with nvidia-smi (compute instances, GPU
instances, then the mode: the order a real driver requires), the check before the node returns to service reads MIG
off from the host's NVML state, and the cluster play drains the node again before it takes the node's
nvidia.com/mig.config away. Added back: no deadlock (the hosts play does not wait for a MIG mode that only the GPU
Operator's mig-manager turns on once the cluster play has labelled the node), and the node is drained before that
label returns.

Evidence: the lab's real kube-apiserver (pods, node labels and maintenance annotations), kube-accel's playbooks as a
user runs them, and a named stand-in for the driver: scripts/kalab/nvidia_smi.py installed as lab-mig-0's nvidia-smi,
acting on the host's recorded NVML snapshot (tests/data/nvml/a100-80gb-mig.json, copied into the host), which the
run's NVML facts read back through the host's filesystem (accel_nvml_snapshot pointed at it). Not here: a GPU reset,
and mig-manager applying the label (the lab's GPU Operator controller schedules it: test_gpu_operator_lab.py).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from lab_fixture import LAB_INVENTORY, changed_lab_inventory, remove_changed_inventory, site_play
from test_day2_lab import WORKLOADS, pinned_pod, running_pod, workloads  # noqa: F401 (fixture)

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
MIG, BYSTANDER = "lab-mig-0", "lab-pgpu-0"
LIMIT = ("--limit", f"lab-control-plane,{MIG},{BYSTANDER}")
STATE_DIR = "/var/lib/kube-accel-lab"
MIG_CONFIG = "nvidia.com/mig.config"


def host(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *argv], capture_output=True, text=True, check=True)


def ordered(out: str, *marks: str) -> list[int]:
    """Where each of ``marks`` first appears in ``out``, each after the one before it (-1 when missing there)."""
    at, found = 0, []
    for mark in marks:
        at = out.find(mark, at)
        found.append(at)
        if at < 0:
            break
    return found


@pytest.fixture
def mig_host(lab, tmp_path):
    """lab-mig-0 with the nvidia-smi stand-in and its NVML state (the recorded snapshot its pool reads); the state
    file's path through the container's filesystem, as the controller reads it."""
    snapshot = REPO / "tests" / "data" / "nvml" / "a100-80gb-mig.json"
    host("exec", MIG, "mkdir", "-p", STATE_DIR)
    host("cp", str(snapshot), f"{MIG}:{STATE_DIR}/nvml.json")
    host("cp", str(REPO / "scripts" / "kalab" / "nvidia_smi.py"), f"{MIG}:/usr/local/bin/nvidia-smi")
    host("exec", MIG, "chmod", "0755", "/usr/local/bin/nvidia-smi")
    root = Path(host("mount", MIG).stdout.strip())
    state = root / STATE_DIR.lstrip("/") / "nvml.json"
    assert json.loads(state.read_text()) == json.loads(snapshot.read_text())
    yield state
    subprocess.run(["podman", "exec", MIG, "rm", "-rf", STATE_DIR, "/usr/local/bin/nvidia-smi"], check=False)
    subprocess.run(["podman", "unmount", MIG], check=False, capture_output=True)


def test_a_mig_geometry_removed_then_added_back(lab, mig_host, workloads, tmp_path):  # noqa: F811 (fixture)
    state = mig_host
    # In a full run the tests before this one have converged the lab; alone, the lab's own inventory first.
    if subprocess.run(["podman", "exec", MIG, "test", "-e", "/etc/kube-accel/mig-geometry"], check=False).returncode:
        ready = site_play(lab, LAB_INVENTORY / "hosts.yml")
        assert ready.returncode == 0, ready.stdout[-4000:]
    assert lab.node(MIG)["metadata"]["labels"].get(MIG_CONFIG, "all-disabled") != "all-disabled"
    tenant = pinned_pod(lab, "on-mig", MIG)
    bystander = pinned_pod(lab, "on-pgpu", BYSTANDER)

    def no_mig(pool: dict) -> None:
        for key in ("accel_mig_strategy", "accel_mig_owner", "accel_mig_geometry"):
            pool.pop(key)

    # The pool's MIG settings removed (a copy of the lab inventory), and a second inventory source whose host variable
    # (it takes precedence over group_vars) reads lab-mig-0's NVML facts from its state. The copy gives the bystander's
    # host the same inputs as the lab inventory (its paths are canonical): it is not drained.
    overlay = tmp_path / "mig-state.yml"
    overlay.write_text(json.dumps({"all": {"hosts": {MIG: {"accel_nvml_snapshot": str(state)}}}}))
    try:
        removed = site_play(lab, changed_lab_inventory("pool_mig.yml", no_mig), "-i", str(overlay), *LIMIT)
    finally:
        remove_changed_inventory()
    out = removed.stdout
    assert removed.returncode == 0, out[-6000:] + removed.stderr[-2000:]
    # The hosts play: drained, then the driver's MIG teardown in the order the driver requires, then checked.
    marks = ordered(out, "node_reboot : Drain the node]", "mig : Destroy the MIG compute and GPU instances]",
                    "mig : Turn MIG mode off]", "node_reboot : Check the GPUs against the plan]",
                    "node_reboot : Uncordon the node if kube-accel cordoned it]")
    assert min(marks) >= 0, (marks, out[-6000:])
    calls = [line.split(" ", 1)[1] for line in
             host("exec", MIG, "cat", f"{STATE_DIR}/nvidia-smi.log").stdout.splitlines()]
    assert calls == ["mig -i 0 -dci", "mig -i 0 -dgi", "-i 0 -mig 0"], calls
    gpu = json.loads(state.read_text())["nvml"]["devices"][0]
    assert gpu["mig_mode"] == [0, 0] and gpu["mig_devices"] == [], gpu
    assert host("exec", MIG, "sh", "-c", "test ! -e /etc/kube-accel/mig-geometry && echo gone").stdout.strip() \
        == "gone", "the record of kube-accel's geometry stays after MIG went off"
    # The cluster play: drained before the relabel that takes the geometry away; back in service at the end.
    drained = out.index("Cordon or drain a node whose sharing changes: drain")
    assert drained < out.index("pool_labels : Reconcile the labels and taints of every pool's nodes]")
    after = lab.node(MIG)
    assert MIG_CONFIG not in after["metadata"]["labels"] or \
        after["metadata"]["labels"][MIG_CONFIG] == "all-disabled", after["metadata"]["labels"]
    assert not after["spec"].get("unschedulable"), f"{MIG} left cordoned"
    last = json.loads(after["metadata"]["annotations"]["kube-accel.io/last-maintenance"])
    assert last["reason"].startswith("kube-accel: sharing changes: ") and MIG_CONFIG in last["reason"], last
    assert running_pod(lab, "on-mig") != tenant, "the tenant on the MIG node was not evicted"
    assert running_pod(lab, "on-pgpu") == bystander, "a pool that did not change lost its pod"
    assert f"{BYSTANDER}" not in out[out.index("Cordon or drain a node whose sharing changes: cordon"):drained]

    # Added back (the lab's own inventory): the hosts play records the geometry and checks no MIG mode that only
    # mig-manager turns on later; the cluster play drains the node before its nvidia.com/mig.config returns.
    tenant = pinned_pod(lab, "on-mig", MIG)
    added = site_play(lab, LAB_INVENTORY / "hosts.yml", *LIMIT)
    out = added.stdout
    assert added.returncode == 0, out[-6000:] + added.stderr[-2000:]
    after = lab.node(MIG)
    assert host("exec", MIG, "cat", "/etc/kube-accel/mig-geometry").stdout.strip() == \
        after["metadata"]["labels"][MIG_CONFIG]
    drained = out.index("Cordon or drain a node whose sharing changes: drain")
    assert drained < out.index("pool_labels : Reconcile the labels and taints of every pool's nodes]")
    last = json.loads(after["metadata"]["annotations"]["kube-accel.io/last-maintenance"])
    assert last["reason"].startswith("kube-accel: sharing changes: ") and MIG_CONFIG in last["reason"], last
    assert not after["spec"].get("unschedulable"), f"{MIG} left cordoned"
    assert running_pod(lab, "on-mig") != tenant
    assert running_pod(lab, "on-pgpu") == bystander
    assert "releases: no leftover" in out
