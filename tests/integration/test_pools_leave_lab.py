"""Two pools leave the running lab in one site run, then come back in one.

The sequence, with a pod pinned to a node of each leaving pool and one to a node that stays:
1. ``decommission.yml --limit lab-timeslice-0``: the host leaves kube-accel (test_decommission_podman.py proves the
   host side file by file on hosts without a cluster; here the node is a cluster node with a pod on it);
2. ``site.yml`` (cluster side) on the lab inventory without the pools ``timeslice`` (the host above was its last) and
   ``vgpu-hami`` (its two hosts simply leave the inventory, not decommissioned);
3. ``site.yml`` on the whole lab inventory again: the decommissioned host is set up from nothing, the HAMi hosts are
   relabelled, both releases return.

HAMi's MutatingWebhookConfiguration goes with its pool: left behind, it would send every nvidia.com/gpu pod of the
other pools to a scheduler that does not serve them. The cluster play of step 3 returns two nodes to service at once.

Evidence: the lab's real kube-apiserver, kube-scheduler (verify's Jobs of the remaining pools) and helm, the pods'
UIDs, the lab's podman host lab-timeslice-0. The lab serves HAMi's webhook from a process of its own through a copy of
the chart's configuration (kalab.upstream LAB_WEBHOOK), which the HAMi stand-in keeps only while the chart's exists
(kalab.standins), as a cluster does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from lab_fixture import LAB_INVENTORY, REPO, lab_inventory_without, remove_changed_inventory, site_play, wait_for
from test_day2_lab import TAGS, pinned_pod, releases, running_pod

pytestmark = pytest.mark.lab

DECOMMISSIONED = "lab-timeslice-0"
HAMI_NODES = ("lab-hami-0", "lab-hami-1")
STAYS = "lab-pgpu-0"
TIMESLICE, HAMI = "kube-accel-timeslice", "kube-accel-vgpu-hami"
WORKLOADS = "leave-workloads"
# What kube-accel writes on a lab host and decommission removes (the full list: test_decommission_podman.py).
HOST_FILES = ["/etc/kube-accel", "/var/lib/kube-accel", "/etc/containerd/conf.d/99-nvidia.toml"]


def on_host(*paths: str) -> list[str]:
    """Which of ``paths`` exist on the decommissioned host."""
    proc = subprocess.run(["podman", "exec", DECOMMISSIONED, "sh", "-c",
                           'for p; do [ -e "$p" ] && echo "$p"; done; true', "_", *paths],
                          capture_output=True, text=True, check=True)
    return proc.stdout.split()



def instances(lab, kind: str, namespaced: bool = True) -> set[str]:
    """The app.kubernetes.io/instance labels of every object of ``kind`` (in every namespace)."""
    out = lab.kubectl_run("get", kind, *(["-A"] if namespaced else []), "-o", "json").stdout
    return {(o["metadata"].get("labels") or {}).get("app.kubernetes.io/instance", "") for o in json.loads(out)["items"]}


def lab_webhook(lab) -> bool:
    from kalab.upstream import LAB_WEBHOOK  # noqa: PLC0415

    return LAB_WEBHOOK in lab.kubectl_run("get", "mutatingwebhookconfigurations", "-o", "name").stdout


@pytest.fixture(scope="module")
def left(lab):
    """Steps 1 and 2, with what each left behind."""
    if len(on_host(*HOST_FILES)) < len(HOST_FILES) or not {TIMESLICE, HAMI} <= set(releases(lab)):
        # Run alone: converge the lab first (in the lab lane, test_upgrade_lab.py has).
        ready = site_play(lab, LAB_INVENTORY / "hosts.yml")
        assert ready.returncode == 0, ready.stdout[-4000:]
    wait_for("the lab's copy of HAMi's webhook", lambda: lab_webhook(lab), timeout=30)
    lab.namespace(WORKLOADS)
    pods = {n: pinned_pod(lab, f"on-{n}", n, WORKLOADS) for n in (DECOMMISSIONED, HAMI_NODES[0], STAYS)}

    bin_dir = os.path.dirname(sys.executable)
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "PATH": f"{lab.helm.parent}:{bin_dir}:{os.environ['PATH']}"}
    decommission = subprocess.run([os.path.join(bin_dir, "ansible-playbook"), "-i", str(LAB_INVENTORY / "hosts.yml"),
                                   str(REPO / "ansible" / "decommission.yml"), "--limit", DECOMMISSIONED],
                                  cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=900)
    assert decommission.returncode == 0, decommission.stdout[-5000:] + decommission.stderr[-2000:]
    after_decommission = {"node": lab.node(DECOMMISSIONED), "files": on_host(*HOST_FILES),
                          "pods": {n: running_pod(lab, f"on-{n}", WORKLOADS) for n in pods}}

    without = site_play(lab, lab_inventory_without("pool_timeslice", "pool_vgpu_hami"), *TAGS)
    assert without.returncode == 0, without.stdout[-5000:] + without.stderr[-2000:]
    yield {"pods": pods, "decommissioned": after_decommission, "without": without}
    remove_changed_inventory()
    lab.kubectl_run("delete", "namespace", WORKLOADS, "--wait=false", check=False)


def test_the_decommissioned_node_is_drained_unlabelled_and_left_cordoned(left):
    """Its pod evicted (the replacement cannot run on the cordoned node), the other nodes' pods untouched; kube-accel's
    cordon, none of its labels; the host's kube-accel files gone."""
    from ansible_collections.kube_accel.gpu.plugins.module_utils.common import constants as accel_constants  # noqa: PLC0415

    after = left["decommissioned"]
    assert after["pods"][DECOMMISSIONED] != left["pods"][DECOMMISSIONED]
    assert after["pods"][STAYS] == left["pods"][STAYS] and after["pods"][HAMI_NODES[0]] == left["pods"][HAMI_NODES[0]]
    assert after["node"]["spec"].get("unschedulable") is True, "decommission leaves the node cordoned for the operator"
    assert accel_constants.ANNOTATIONS["cordoned_by"] in after["node"]["metadata"]["annotations"]
    labels = after["node"]["metadata"]["labels"]
    assert not set(accel_constants.LABELS.values()) & set(labels), labels
    assert accel_constants.UPSTREAM_LABELS["device_plugin_config"] not in labels
    assert after["files"] == []


def test_the_hami_pool_leaves_whole_and_the_other_pools_keep_scheduling(lab, left):
    """HAMi's nodes are drained before they lose their labels, then return to service; its release goes whole
    (webhook, scheduler, device plugin, services); the node that stays keeps its pod; verify's Jobs of every
    remaining pool (nvidia.com/gpu pods, placed by the upstream kube-scheduler) complete."""
    from ansible_collections.kube_accel.gpu.plugins.module_utils.common import constants as accel_constants  # noqa: PLC0415

    out = left["without"].stdout
    drained = out.index("Cordon or drain a node whose sharing changes: drain")
    assert drained < out.index("pool_labels : Reconcile the labels and taints of every pool's nodes]")
    assert HAMI not in releases(lab)
    for kind, namespaced in (("mutatingwebhookconfigurations", False), ("deployments", True),
                             ("daemonsets", True), ("services", True)):
        assert HAMI not in instances(lab, kind, namespaced), f"a {kind} of {HAMI} is left"
    assert not lab_webhook(lab)
    assert running_pod(lab, f"on-{HAMI_NODES[0]}", WORKLOADS) != left["pods"][HAMI_NODES[0]]  # evicted by the drain
    assert running_pod(lab, f"on-{STAYS}", WORKLOADS) == left["pods"][STAYS]
    for name in HAMI_NODES:
        now = lab.node(name)
        assert not set(accel_constants.LABELS.values()) & set(now["metadata"]["labels"]), now["metadata"]["labels"]
        assert not now["spec"].get("unschedulable"), f"{name} left cordoned"
    # The decommissioned node keeps the operator's cordon: only cordons for a change of sharing are lifted.
    assert lab.node(DECOMMISSIONED)["spec"].get("unschedulable") is True


def test_the_last_hosts_pool_release_goes_and_nothing_is_left(lab, left):
    assert TIMESLICE not in releases(lab)
    assert "releases: no leftover" in left["without"].stdout


def test_both_pools_come_back_with_one_site_run(lab, left):
    """The operator uncordons the decommissioned node and puts both pools back: one site.yml sets the host up from
    nothing (no record: a full run), relabels the HAMi nodes and reinstalls both releases; verify passes."""
    lab.kubectl_run("uncordon", DECOMMISSIONED)
    back = site_play(lab, LAB_INVENTORY / "hosts.yml")
    assert back.returncode == 0, back.stdout[-5000:]
    assert "Host roles run: no record of a full run" in back.stdout
    assert {TIMESLICE, HAMI} <= {name for name, status in releases(lab).items() if status == "deployed"}
    assert on_host(*HOST_FILES) == HOST_FILES
    assert HAMI in instances(lab, "mutatingwebhookconfigurations", namespaced=False)
    wait_for("the lab's copy of HAMi's webhook back", lambda: lab_webhook(lab), timeout=30)
