"""A host decommissioned from the running lab, its pool's release removed, then the host set up again (issue 29.3).

test_decommission_podman.py proves the host side file by file on hosts without a cluster; here the same play runs
against the lab's cluster with a pod on the node: the node is drained (the pod evicted) and left cordoned for the
operator, it loses kube-accel's labels, the host loses kube-accel's files; the next site.yml without the host (it was
its pool's last) uninstalls the pool's release, and once the host is back in the inventory site.yml sets it up again
from nothing (a full run: no record) and verify passes. Other pools' nodes are not touched.

Evidence: the lab's real kube-apiserver (nodes, pods, releases through helm) and its podman host lab-timeslice-0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from lab_fixture import LAB_INVENTORY, REPO, lab_inventory_without, remove_changed_inventory, site_play
from test_day2_lab import TAGS, pinned_pod, releases, running_pod

pytestmark = pytest.mark.lab

HOST = "lab-timeslice-0"
WORKLOADS = "decommission-workloads"
RELEASE = "kube-accel-timeslice"
# What kube-accel writes on a lab host and decommission removes (the full list: test_decommission_podman.py).
GONE = ["/etc/kube-accel", "/var/lib/kube-accel", "/etc/containerd/conf.d/99-nvidia.toml"]


def on_host(*paths: str) -> list[str]:
    """Which of ``paths`` exist on HOST."""
    proc = subprocess.run(["podman", "exec", HOST, "sh", "-c", 'for p; do [ -e "$p" ] && echo "$p"; done; true', "_",
                           *paths], capture_output=True, text=True, check=True)
    return proc.stdout.split()


def node(lab) -> dict:
    return json.loads(lab.kubectl_run("get", "node", HOST, "-o", "json").stdout)


@pytest.fixture
def workloads(lab):
    lab.namespace(WORKLOADS)
    yield
    lab.kubectl_run("delete", "namespace", WORKLOADS, "--wait=false", check=False)
    remove_changed_inventory()


def test_a_decommissioned_host_leaves_nothing_and_comes_back(lab, workloads):
    from ansible_collections.kube_accel.gpu.plugins.module_utils import accel_constants  # noqa: PLC0415

    if len(on_host(*GONE)) < len(GONE) or RELEASE not in releases(lab):
        # Run alone: converge the lab first (in the lab lane, test_upgrade_lab.py has).
        ready = site_play(lab, LAB_INVENTORY / "hosts.yml")
        assert ready.returncode == 0, ready.stdout[-4000:]
    pod = pinned_pod(lab, "on-timeslice", HOST, WORKLOADS)
    bystander = pinned_pod(lab, "on-pgpu", "lab-pgpu-0", WORKLOADS)

    bin_dir = os.path.dirname(sys.executable)
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "PATH": f"{lab.helm.parent}:{bin_dir}:{os.environ['PATH']}"}
    gone = subprocess.run([os.path.join(bin_dir, "ansible-playbook"), "-i", str(LAB_INVENTORY / "hosts.yml"),
                           str(REPO / "ansible" / "decommission.yml"), "--limit", HOST],
                          cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=900)
    assert gone.returncode == 0, gone.stdout[-5000:] + gone.stderr[-2000:]
    # Evicted; its replacement cannot run on the cordoned node.
    assert running_pod(lab, "on-timeslice", WORKLOADS) != pod
    assert running_pod(lab, "on-pgpu", WORKLOADS) == bystander
    now = node(lab)
    assert now["spec"].get("unschedulable") is True, "decommission leaves the node cordoned for the operator"
    assert accel_constants.ANNOTATIONS["cordoned_by"] in now["metadata"]["annotations"]
    labels = now["metadata"]["labels"]
    assert not set(accel_constants.LABELS.values()) & set(labels), labels
    assert accel_constants.UPSTREAM_LABELS["device_plugin_config"] not in labels
    assert on_host(*GONE) == []

    # The host was its pool's last: site.yml without it removes the pool's release.
    without = site_play(lab, lab_inventory_without("pool_timeslice"), *TAGS)
    assert without.returncode == 0, without.stdout[-5000:]
    assert RELEASE not in releases(lab)
    assert "releases: no leftover" in without.stdout

    # Back in the inventory, returned to service by the operator: set up from nothing, verified.
    lab.kubectl_run("uncordon", HOST)
    back = site_play(lab, LAB_INVENTORY / "hosts.yml")
    assert back.returncode == 0, back.stdout[-5000:]
    assert "Host roles run: no record of a full run" in back.stdout
    assert releases(lab)[RELEASE] == "deployed"
    assert on_host(*GONE) == GONE
    assert node(lab)["metadata"]["labels"][accel_constants.LABELS["pool"]] == "timeslice"
