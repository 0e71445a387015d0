"""Node agents that register after verify started: the verify play waits until each pool's scheduler can read the
nodes and passes, saying how long it waited; given no time to wait, the same play fails naming the nodes that are
not registered (the negative control).

The agents: HAMi's device plugin on the vgpu-hami nodes, NVIDIA's device plugin on the pgpu node, the DRA driver's
kubelet plugin on the dra node. Their pods are replaced and what they registered is taken back (HAMi's annotation and
count resource, the plugins' capacity; the DRA stand-in deletes the node's slices when its pod goes), as after an
agent's restart on a node; `lab.py delay-registration` has the stand-ins register the new pods only DELAY s later.

Evidence: upstream HAMi v2.10.0 scheduler extender with kube-scheduler (lab processes: what refuses or binds the
Job's pod, and HAMi's metrics for when it read the nodes), upstream kube-controller-manager (the DaemonSets' new
pods, the Jobs); the registrations come from the lab's stand-ins (kalab.standins), told to wait.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm.pool_charts import DRA_DRIVER_IMAGE
from ansible_collections.kube_accel.gpu.plugins.module_utils.verify.scheduling import HAMI_REGISTER
from lab_fixture import LAB_DIR, LAB_NAME, converge_cluster, inventory_args, lab_env, wait_for

pytestmark = [pytest.mark.lab, pytest.mark.cluster_only]

REPO = Path(__file__).resolve().parents[2]
LAB = REPO / "inventories" / "lab"
PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")
DELAY = 60


def lab_py(*args: str) -> None:
    subprocess.run([sys.executable, str(REPO / "scripts" / "lab.py"), "--dir", str(LAB_DIR), "--name", LAB_NAME,
                    *args], check=True, capture_output=True, text=True)


def verify(lab, *extra: str) -> subprocess.CompletedProcess:
    """verify.yml on this lab, without the GPU Operator's operands (not under test here; on a lab without hosts the
    operator holds them back)."""
    return subprocess.run([PLAYBOOK, *inventory_args(LAB / "hosts.yml"), str(REPO / "ansible" / "verify.yml"),
                           "-e", f"accel_kubeconfig={lab.kubeconfig}", "-e", "pool_verify_gpu_operator=false", *extra],
                          cwd=REPO, env=lab_env(lab.helm.parent), capture_output=True, text=True, check=False,
                          timeout=600)


def agent_pods(lab, nodes: dict[str, str]) -> dict[str, dict]:
    """The Running agent pod of each node in ``nodes`` (node: image fragment), by node."""
    pods = json.loads(lab.kubectl_run("get", "pods", "-A", "-o", "json").stdout)["items"]
    found = {}
    for pod in pods:
        node = pod["spec"].get("nodeName")
        owner = [o["kind"] for o in pod["metadata"].get("ownerReferences") or []]
        if (node in nodes and owner == ["DaemonSet"] and pod["status"].get("phase") == "Running"
                and not pod["metadata"].get("deletionTimestamp")
                and any(nodes[node] in c["image"] for c in pod["spec"]["containers"])):
            found[node] = pod
    return found


def hami_registered_nodes(info: dict) -> set[str]:
    """The nodes HAMi's scheduler has devices of (its metrics, read from its own cache)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{info['metrics_port']}/metrics", timeout=5).read().decode()
    return set(re.findall(r'hami_gpu_memory_limit_bytes\{[^}]*node="([^"]+)"', text))


def test_verify_waits_for_agents_that_register_after_it_started(lab):
    from kubernetes import client, config  # noqa: PLC0415

    info = json.loads((LAB_DIR / "hami" / "info.json").read_text())
    converge_cluster(lab, {info["release"]}, namespace=info["namespace"])
    hami, pgpu, dra = lab.nodes_by_pool["vgpu-hami"], lab.nodes_by_pool["pgpu"], lab.nodes_by_pool["dra"]
    agents = {**dict.fromkeys(hami, "projecthami/hami"), **dict.fromkeys(pgpu, "k8s-device-plugin"),
              **dict.fromkeys(dra, DRA_DRIVER_IMAGE)}
    wait_for("HAMi's scheduler to have the vgpu-hami nodes", lambda: set(hami) <= hami_registered_nodes(info),
             timeout=120)
    before = agent_pods(lab, agents)
    assert set(before) == set(agents), f"agent pods found on {sorted(before)}, expected {sorted(agents)}"
    api = client.CoreV1Api(config.new_client_from_config(str(lab.kubeconfig)))
    lab_py("delay-registration", str(DELAY))
    try:
        for pod in before.values():
            lab.kubectl_run("delete", "pod", "-n", pod["metadata"]["namespace"], pod["metadata"]["name"],
                            "--wait=false")

        def replaced():
            now = agent_pods(lab, agents)
            return set(now) == set(agents) and all(now[n]["metadata"]["uid"] != before[n]["metadata"]["uid"]
                                                   for n in now)

        wait_for("the DaemonSets' new agent pods", replaced, timeout=120)
        # What the old agents registered goes (a restarted agent's node, as the kubelet and HAMi's scheduler see it).
        for node in hami + pgpu:
            api.patch_node_status(node, {"status": {"capacity": {"nvidia.com/gpu": None},
                                                    "allocatable": {"nvidia.com/gpu": None}}})
        for node in hami:
            api.patch_node(node, {"metadata": {"annotations": {HAMI_REGISTER: None}}})
        wait_for("HAMi's scheduler to drop the unregistered nodes",
                 lambda: not set(hami) & hami_registered_nodes(info), timeout=60)

        # Negative control: no time to wait. The play fails, naming each node that is not registered.
        hasty = verify(lab, "-e", json.dumps({"pool_verify_hosts": hami + pgpu + dra, "pool_verify_settle_timeout": 3,
                                              "pool_verify_job_timeout": 5}))
        assert hasty.returncode != 0, hasty.stdout[-3000:]
        for node in hami:
            assert f"{node}: HAMi's device plugin has not registered the node" in hasty.stdout, hasty.stdout[-4000:]
        for node in pgpu:
            assert f"{node}: allocatable has no nvidia.com/gpu" in hasty.stdout, hasty.stdout[-4000:]
        for node in dra:
            assert f"{node}: no ResourceSlice with devices from gpu.nvidia.com" in hasty.stdout, hasty.stdout[-4000:]
        assert not set(hami) & hami_registered_nodes(info), "registered before the patient run started: raise DELAY"

        started = time.time()
        # Not the dra pool: its DeviceClass selects the pool's GPUs by the UUIDs the hosts play gathers, and this lab
        # has no hosts, so no claim of it can be allocated here; its late slices are what the hasty run named.
        patient = verify(lab, "-e", json.dumps({"pool_verify_hosts": hami + pgpu}))
        assert patient.returncode == 0, patient.stdout[-5000:]
        waited = re.search(r"settle: node checks passed after (\d+) s", patient.stdout)
        assert waited, patient.stdout[-3000:]
        # The registrations arrived while this run was waiting for them, not before it started.
        assert int(waited.group(1)) >= 5, patient.stdout[-3000:]
        # HAMi's scheduler reads registrations on its own 15 s clock: the HAMi Job may have needed a second attempt.
        attempts = sorted(set(re.findall(r"completed on [a-z0-9,-]+, attempt (\d+)", patient.stdout)))
        print(f"verify waited {waited.group(1)} s for the registrations (delay {DELAY} s from the agents' restart; "
              f"run took {time.time() - started:.0f} s); later Job attempts: {attempts or 'none'}")
    finally:
        lab_py("delay-registration", "0")
