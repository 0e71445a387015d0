"""Rolling maintenance of the hosts play (ansible/hosts.yml) on the lab's real API
server and its podman hosts (lab-*: the Ansible hosts, whose names are also the kwok fake nodes').

What is recorded, and where from:
- cordon, uncordon and kube-accel's annotations: a watch on the Node objects (API server);
- the drain: a watch on a Deployment's pod pinned to the node (its eviction, API server);
- the host change: the modification time of a managed file the roles put back on the podman host;
- the checks: ``checked_at`` in the ``kube-accel.io/last-maintenance`` annotation the uncordon writes.
The GPUs the checks read are the lab hosts' recorded NVML snapshots (no GPU here), and lab containers run no
container runtime: that check is skipped there and says so.

Scenario (one module, runs in order):
A. lab-mps-0 (pinned pod), lab-pgpu-0 (cordoned by an "operator" first) and lab-mig-0 (given a snapshot whose GPU
   has MIG mode off: its MIG pool's checks must fail) all drifted: mps goes cordon < drain < change < check <
   uncordon; pgpu is drained and changed but stays cordoned without kube-accel's annotation; mig stays cordoned with
   it and is named in the failure and the run's summary.
B. lab-timeslice-0 drifted, its run killed (SIGKILL) once kube-accel's cordon is on the node.
C. The next run returns mig and timeslice to service (it recognises the earlier runs' cordons), leaves pgpu alone.
D. The run after that changes nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest
from lab_fixture import REPO, converge_cluster

pytestmark = pytest.mark.lab

from ansible_collections.kube_accel.gpu.plugins.module_utils.common import constants as accel_constants  # noqa: E402

CORDONED_BY = accel_constants.ANNOTATIONS["cordoned_by"]
LAST = accel_constants.ANNOTATIONS["last_maintenance"]
DRIFTED = "/etc/modprobe.d/kube-accel-blacklist-nouveau.conf"
NAMESPACE = "rolling-maintenance-test"
MPS, PGPU, MIG, TIMESLICE = "lab-mps-0", "lab-pgpu-0", "lab-mig-0", "lab-timeslice-0"
INVENTORY = REPO / "inventories" / "lab" / "hosts.yml"


def host(name: str, script: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", "exec", name, "sh", "-c", script], capture_output=True, text=True, check=check)


def playbook_argv(*args: str) -> list[str]:
    return [
        str(Path(sys.executable).parent / "ansible-playbook"),
        "-i",
        str(INVENTORY),
        *args,
        str(REPO / "ansible" / "hosts.yml"),
    ]


ENV = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        playbook_argv(*args), cwd=REPO, env=ENV, capture_output=True, text=True, timeout=900, check=False
    )


def recap(output: str) -> dict[str, dict[str, int]]:
    rows = {}
    for line in output.splitlines():
        parts = line.split()
        if len(parts) > 2 and parts[1] == ":" and parts[2].startswith("ok="):
            rows[parts[0]] = {k: int(v) for k, v in (p.split("=") for p in parts[2:])}
    return rows


class Recorder:
    """Node and pod watch events with the local time they arrived (the podman hosts share this clock)."""

    def __init__(self, kubeconfig: Path):
        from kubernetes import client, config

        self.api = client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))
        self.nodes: list[tuple[float, str, bool, str | None, str | None]] = []
        self.pods: list[tuple[float, str, str, str | None, bool]] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._watch, args=(kind,), daemon=True) for kind in ("node", "pod")]

    def _watch(self, kind: str) -> None:
        from kubernetes import watch

        while not self.stop.is_set():
            stream = watch.Watch()
            # The bound API method itself: its docstring tells the watch which type to decode events into.
            call = (self.api.list_node,) if kind == "node" else (self.api.list_namespaced_pod, NAMESPACE)
            for event in stream.stream(*call, timeout_seconds=2):
                obj, now = event["object"], time.time()
                if isinstance(obj, dict):  # ERROR/BOOKMARK events carry a raw Status, not the object
                    continue
                if kind == "node":
                    notes = obj.metadata.annotations or {}
                    self.nodes.append(
                        (now, obj.metadata.name, bool(obj.spec.unschedulable), notes.get(CORDONED_BY), notes.get(LAST))
                    )
                else:
                    self.pods.append(
                        (
                            now,
                            event["type"],
                            obj.metadata.name,
                            obj.spec.node_name,
                            obj.metadata.deletion_timestamp is not None,
                        )
                    )
                if self.stop.is_set():
                    stream.stop()

    def __enter__(self):
        for t in self.threads:
            t.start()
        time.sleep(1)  # both watches are listening before anything happens
        return self

    def __exit__(self, *exc):
        time.sleep(1)
        self.stop.set()
        for t in self.threads:
            t.join(10)

    def first(self, node: str, predicate, after: float = 0.0):
        return next((e for e in self.nodes if e[1] == node and e[0] > after and predicate(e)), None)


def node_state(api, name: str) -> tuple[bool, dict]:
    node = api.read_node(name)
    return bool(node.spec.unschedulable), node.metadata.annotations or {}


def pinned_deployment(lab, api, node: str) -> None:
    from kubernetes import client, config

    apps = client.AppsV1Api(config.new_client_from_config(str(lab.kubeconfig)))
    tolerations = [
        {"key": t.key, "operator": "Exists", "effect": t.effect}
        for t in api.read_node(node).spec.taints or []
        if t.key != "node.kubernetes.io/unschedulable"
    ]
    lab.kubectl_run("delete", "namespace", NAMESPACE, "--wait=true", check=False)
    api.create_namespace({"metadata": {"name": NAMESPACE}})
    labels = {"app": "rolling"}
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
                        "nodeSelector": {"kubernetes.io/hostname": node},
                        "tolerations": tolerations,
                        "terminationGracePeriodSeconds": 0,
                        "containers": [{"name": "app", "image": "registry.invalid/pause:1"}],
                    },
                },
            },
        },
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if any(p.status.phase == "Running" for p in api.list_namespaced_pod(NAMESPACE).items):
            return
        time.sleep(1)
    pytest.fail(f"the pinned pod never ran on {node}")


@pytest.fixture(scope="module")
def scenario(lab, tmp_path_factory):
    from kubernetes import client, config

    api = client.CoreV1Api(config.new_client_from_config(str(lab.kubeconfig)))
    work = tmp_path_factory.mktemp("rolling")
    hosts = [MPS, PGPU, MIG, TIMESLICE]
    for name in hosts:
        lab.kubectl_run("uncordon", name, check=False)
        lab.kubectl_run("annotate", "node", name, f"{CORDONED_BY}-", f"{LAST}-", check=False)
    # lab-mig-0 reads a snapshot of the same GPU model with MIG mode off: its pool's geometry needs it on, since the
    # cluster play has labelled the node with the pool's nvidia.com/mig.config (mig-manager was told to turn it on).
    converge_cluster(lab, {"kube-accel-pgpu"})
    assert lab.node(MIG)["metadata"]["labels"].get(
        "nvidia.com/mig.config", "all-disabled") != "all-disabled"
    broken = work / "mig-off.yml"
    broken.write_text(
        json.dumps(
            {
                "all": {
                    "children": {
                        "gpu_pools": {"children": {"pool_mig": {"hosts": {MIG: {"accel_lab_gpu": "a100-80gb"}}}}}
                    }
                }
            }
        )
    )
    out: dict = {"api": api}
    try:
        pinned_deployment(lab, api, MPS)
        lab.kubectl_run("cordon", PGPU)
        for name in (MPS, PGPU, MIG):
            host(name, f"rm -f {DRIFTED}")
        with Recorder(lab.kubeconfig) as rec:
            out["A"] = run("--limit", f"{MPS},{PGPU},{MIG}", "-i", str(broken))
        out["rec"] = rec
        out["A_after"] = {name: node_state(api, name) for name in (MPS, PGPU, MIG)}
        out["mps_changed_at"] = float(host(MPS, f"stat -c %.9Y {DRIFTED}").stdout)

        # B: killed once kube-accel's cordon is on the node.
        host(TIMESLICE, f"rm -f {DRIFTED}")
        proc = subprocess.Popen(
            playbook_argv("--limit", TIMESLICE),
            cwd=REPO,
            env=ENV,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and proc.poll() is None:
            unschedulable, notes = node_state(api, TIMESLICE)
            if unschedulable and CORDONED_BY in notes:
                break
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        out["B_after"] = node_state(api, TIMESLICE)

        out["C"] = run("--limit", f"{MPS},{PGPU},{MIG},{TIMESLICE}")
        out["C_after"] = {name: node_state(api, name) for name in hosts}
        with Recorder(lab.kubeconfig) as rec_d:
            out["D"] = run("--limit", f"{MPS},{PGPU},{MIG},{TIMESLICE}")
        out["rec_D"] = rec_d
        yield out
    finally:
        lab.kubectl_run("uncordon", PGPU, check=False)
        lab.kubectl_run("delete", "namespace", NAMESPACE, "--wait=false", check=False)


def stamp(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def test_cordon_drain_change_check_uncordon_in_that_order(scenario):
    rec = scenario["rec"]
    ours = rec.first(MPS, lambda e: e[2] and e[3] is not None)
    assert ours, f"no cordon by kube-accel seen on {MPS}: {[e for e in rec.nodes if e[1] == MPS]}"
    assert json.loads(ours[3])["reason"].startswith("host roles:")
    evicted = next((e for e in rec.pods if e[3] == MPS and (e[1] == "DELETED" or e[4])), None)
    assert evicted, f"the pinned pod was not evicted: {rec.pods}"
    back = rec.first(MPS, lambda e: not e[2] and e[3] is None and e[4] is not None, after=ours[0])
    assert back, f"{MPS} never came back: {[e for e in rec.nodes if e[1] == MPS]}"
    last = json.loads(back[4])
    checked = stamp(last["checks"]["checked_at"])
    changed = scenario["mps_changed_at"]
    assert ours[0] < evicted[0] < changed < checked < back[0], (ours[0], evicted[0], changed, checked, back[0])
    assert last["checks"]["gpus"].startswith("1 GPU(s), driver 535.161.08")  # the a30 snapshot
    assert "not checked" in last["checks"]["runtime"]
    # Nothing of kube-accel's cordon is left on the node.
    assert scenario["A_after"][MPS][0] is False and CORDONED_BY not in scenario["A_after"][MPS][1]


def test_an_operators_cordon_is_kept(scenario):
    rec, output = scenario["rec"], scenario["A"].stdout
    assert f"{PGPU}: cordoned by someone else" in output
    assert f"{PGPU} stays cordoned: someone other than kube-accel cordoned it" in output
    assert all(e[2] and e[3] is None for e in rec.nodes if e[1] == PGPU), [e for e in rec.nodes if e[1] == PGPU]
    assert recap(output)[PGPU]["failed"] == 0 and recap(output)[PGPU]["changed"] > 0
    unschedulable, notes = scenario["C_after"][PGPU]
    assert unschedulable and CORDONED_BY not in notes


def test_a_failing_host_stays_cordoned_and_is_named(scenario):
    proc = scenario["A"]
    assert proc.returncode != 0
    assert recap(proc.stdout)[MIG]["failed"] == 1
    assert f"{MIG}: failed at" in proc.stdout and "MIG mode off, the pool's geometry needs it on" in proc.stdout
    assert f"Node {MIG} stays cordoned: kube-accel.io/cordoned-by records this run" in proc.stdout
    summary = proc.stdout[proc.stdout.index("CUSTOM STATS") :]
    assert "kube_accel_maintenance_failed" in summary and MIG in summary
    unschedulable, notes = scenario["A_after"][MIG]
    assert unschedulable and CORDONED_BY in notes


def test_a_killed_runs_cordon_is_returned_by_the_next_run(scenario):
    unschedulable, notes = scenario["B_after"]
    assert unschedulable and CORDONED_BY in notes, "the killed run left no cordon of its own"
    killed = json.loads(notes[CORDONED_BY])["holder"]
    output = scenario["C"].stdout
    assert scenario["C"].returncode == 0, output[-4000:]
    for name in (TIMESLICE, MIG):
        assert f"{name}: cordon left by an earlier kube-accel run" in output
        unschedulable, notes = scenario["C_after"][name]
        assert not unschedulable and CORDONED_BY not in notes
    assert json.loads(scenario["C_after"][TIMESLICE][1][LAST])["holder"] == killed


def test_the_run_after_changes_nothing_and_cordons_nothing(scenario):
    proc = scenario["D"]
    assert proc.returncode == 0, proc.stdout[-4000:]
    rows = recap(proc.stdout)
    assert all(r["changed"] == 0 for r in rows.values()), rows
    assert "Find which changing hosts are cluster nodes" not in proc.stdout  # no API call at all
    assert not [e for e in scenario["rec_D"].nodes if e[1] != PGPU and e[2]]
