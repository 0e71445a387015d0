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
from lab_fixture import run_localhost_playbook, wait_for

pytestmark = [pytest.mark.lab, pytest.mark.cluster_only]

NODE = "lab-mig-0"
NAMESPACE = "node-reboot-test"


def run_step(lab, step: str, tmp_path: Path, **extra) -> subprocess.CompletedProcess:
    """node_reboot's STEP on NODE; EXTRA replaces the role variables below (None: the role's default)."""
    variables = {"node_reboot_node_name": NODE, "node_reboot_kubeconfig": str(lab.kubeconfig),
                 "node_reboot_drain_timeout": 90, "node_reboot_grace_period": 0, **extra}
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
                    "vars": {k: v for k, v in variables.items() if v is not None},
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
    yield from pinned(lab, core, {"terminationGracePeriodSeconds": 0})


def pinned(lab, core, spec: dict, metadata: dict | None = None):
    """Yield the name of a running pod of a one-replica Deployment on NODE; SPEC and METADATA go into its template."""
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
                    "metadata": {"labels": labels, **(metadata or {})},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": NODE},
                        "tolerations": tolerations,
                        "containers": [{"name": "app", "image": "registry.invalid/pause:1"}],
                        **spec,
                    },
                },
            },
        },
    )
    try:
        running = wait_for(f"the pinned pod running on {NODE}", lambda: running_pods(core, "app=node-reboot-test"))
        yield running[0].metadata.name
    finally:
        lab.kubectl_run("uncordon", NODE, check=False)
        # Gone before the next test creates it again.
        lab.kubectl_run("delete", "namespace", NAMESPACE, "--wait=true", "--timeout=90s", check=False)


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


FINALIZER = "kube-accel.test/see-the-deletion"


def test_drain_gives_each_pod_its_own_grace_period(lab, core, tmp_path):
    """The drain keeps each pod's own grace period. A drain that gives every pod 300 s, whatever the pod asked for,
    lets a CUDA tenant that ignores SIGTERM (PID 1) hold a pool switch for 5 minutes: the record
    tests/data/gpu-e2e/h200-2026-11-27-day2-drain-hold.tar.xz (docs/gpu-validation.md). Here a finalizer keeps the
    evicted pod visible, so the grace period the API
    server recorded for its deletion can be read (kwok's node would otherwise remove it at once); a thread removes the
    finalizer so the drain can finish."""
    import threading

    seen: dict[str, int | None] = {}
    gen = pinned(lab, core, {"terminationGracePeriodSeconds": 7}, {"finalizers": [FINALIZER]})
    name = next(gen)
    stop = threading.Event()

    def release() -> None:
        # A watch, not polling: kwok's node deletes the pod again with grace 0 within milliseconds (the recorded
        # period only ever shortens), so only the first event with a deletion timestamp shows the drain's.
        from kubernetes import watch

        for event in watch.Watch().stream(core.list_namespaced_pod, NAMESPACE, field_selector=f"metadata.name={name}",
                                          timeout_seconds=60):
            meta = event["object"].metadata
            if stop.is_set() or meta.deletion_timestamp is not None:
                seen["grace"] = meta.deletion_grace_period_seconds
                core.patch_namespaced_pod(name, NAMESPACE, {"metadata": {"finalizers": None}})
                return

    thread = threading.Thread(target=release, daemon=True)
    thread.start()
    try:
        proc = run_step(lab, "drain", tmp_path, node_reboot_grace_period=None)  # the role's default
        assert proc.returncode == 0, proc.stdout + proc.stderr
        thread.join(timeout=30)
        assert seen == {"grace": 7}, seen
    finally:
        stop.set()
        for pod in core.list_namespaced_pod(NAMESPACE).items:
            if pod.metadata.finalizers:
                core.patch_namespaced_pod(pod.metadata.name, NAMESPACE, {"metadata": {"finalizers": None}})
        next(gen, None)


def running_pods(core, selector: str) -> list:
    return [p for p in core.list_namespaced_pod(NAMESPACE, label_selector=selector).items
            if p.spec.node_name == NODE and p.status.phase == "Running" and p.metadata.deletion_timestamp is None]


def test_drain_leaves_daemonset_pods_with_emptydir_data(lab, core, tmp_path):
    """kubernetes.core.k8s_drain deletes a DaemonSet's pod when it has an emptyDir volume (kubernetes.core#622): in the
    record tests/data/gpu-e2e/h200-2026-11-27-day2-drain-hold.tar.xz its drain deleted kube-accel's own device plugin.
    accel_node_drain decides as kubectl drain does: the Deployment's pod is evicted, the DaemonSet's stays."""
    from kubernetes import client, config

    apps = client.AppsV1Api(config.new_client_from_config(str(lab.kubeconfig)))
    gen = pinned(lab, core, {"terminationGracePeriodSeconds": 0})
    evicted = next(gen)
    try:
        tolerations = [{"operator": "Exists"}]
        labels = {"app": "node-agent"}
        apps.create_namespaced_daemon_set(NAMESPACE, {
            "metadata": {"name": "node-agent"},
            "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": {
                "nodeSelector": {"kubernetes.io/hostname": NODE}, "tolerations": tolerations,
                "volumes": [{"name": "scratch", "emptyDir": {}}],
                "containers": [{"name": "agent", "image": "registry.invalid/agent:1",
                                "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}]}}}})
        agents = wait_for(f"the DaemonSet's pod running on {NODE}", lambda: running_pods(core, "app=node-agent"))
        proc = run_step(lab, "drain", tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert [p.metadata.uid for p in running_pods(core, "app=node-agent")] == [agents[0].metadata.uid]
        assert evicted not in [p.metadata.name for p in running_pods(core, "app=node-reboot-test")]
    finally:
        next(gen, None)


def test_drain_refused_by_a_disruption_budget_fails_naming_the_pod(lab, core, tmp_path):
    """A PodDisruptionBudget that allows no disruption: the eviction is refused (429) and asked again until the
    drain's time runs out; then the task fails, naming the pod, which still runs."""
    from kubernetes import client, config

    policy = client.PolicyV1Api(config.new_client_from_config(str(lab.kubeconfig)))
    gen = pinned(lab, core, {"terminationGracePeriodSeconds": 0})
    name = next(gen)
    try:
        policy.create_namespaced_pod_disruption_budget(NAMESPACE, {
            "metadata": {"name": "keep-one"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "node-reboot-test"}}}})
        def budget_counts_the_pod():  # the budget controller must see the pod before it refuses
            status = policy.read_namespaced_pod_disruption_budget("keep-one", NAMESPACE).status
            return status and status.observed_generation and status.current_healthy == 1

        wait_for("the disruption budget to count the pod", budget_counts_the_pod, timeout=30)
        proc = run_step(lab, "drain", tmp_path, node_reboot_drain_timeout=12, node_reboot_drain_retries=0)
        assert proc.returncode != 0
        assert "PodDisruptionBudget" in proc.stdout and f"{NAMESPACE}/{name}" in proc.stdout, proc.stdout[-3000:]
        assert [p.metadata.name for p in running_pods(core, "app=node-reboot-test")] == [name]
    finally:
        next(gen, None)


def test_drain_replaces_out_of_date_on_delete_daemon_pods(lab, core, tmp_path):
    """kube-accel's MPS control daemon updates OnDelete, so that no upgrade quits the MPS server under running
    clients. A drained node is when its pod can take the new template: the drain replaces the pod of an OnDelete
    DaemonSet whose template changed, and leaves one whose template did not."""
    from kubernetes import client, config

    apps = client.AppsV1Api(config.new_client_from_config(str(lab.kubeconfig)))
    gen = pinned(lab, core, {"terminationGracePeriodSeconds": 0})
    next(gen)
    try:
        for name in ("stale-daemon", "current-daemon"):
            apps.create_namespaced_daemon_set(NAMESPACE, {
                "metadata": {"name": name},
                "spec": {"selector": {"matchLabels": {"app": name}}, "updateStrategy": {"type": "OnDelete"},
                         "template": {"metadata": {"labels": {"app": name}}, "spec": {
                             "nodeSelector": {"kubernetes.io/hostname": NODE}, "tolerations": [{"operator": "Exists"}],
                             "terminationGracePeriodSeconds": 0,
                             "containers": [{"name": "d", "image": "registry.invalid/daemon:1"}]}}}})
        stale = wait_for("the stale daemon's pod", lambda: running_pods(core, "app=stale-daemon"))[0]
        current = wait_for("the current daemon's pod", lambda: running_pods(core, "app=current-daemon"))[0]
        # A new template for one of them: OnDelete leaves its pod as it was.
        apps.patch_namespaced_daemon_set("stale-daemon", NAMESPACE, {"spec": {"template": {"metadata": {
            "annotations": {"kube-accel.test/config": "2"}}}}})
        time.sleep(3)
        assert [p.metadata.uid for p in running_pods(core, "app=stale-daemon")] == [stale.metadata.uid]

        proc = run_step(lab, "drain", tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        (new,) = wait_for("the stale daemon's new pod", lambda: running_pods(core, "app=stale-daemon"))
        assert new.metadata.uid != stale.metadata.uid
        assert new.metadata.annotations.get("kube-accel.test/config") == "2"
        assert [p.metadata.uid for p in running_pods(core, "app=current-daemon")] == [current.metadata.uid]
    finally:
        next(gen, None)
