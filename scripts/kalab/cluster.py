"""The lab's control plane: a real Kubernetes control plane (kwokctl --runtime binary, locally built binaries, bound to
127.0.0.1) whose PKI, logs and PID files live in the lab directory. `lab.py up` starts it or adopts the one running,
`lab.py down` deletes it (kwokctl stops its own processes by PID)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path

from kalab.site import BIN, Site, log, run, versions


def kwok_env(site: Site) -> dict[str, str]:
    # KWOK_WORKDIR keeps the cluster's PKI, logs and PID files inside the lab directory rather than ~/.kwok.
    return {"KWOK_WORKDIR": str(site.root / "kwok"), "PATH": f"{BIN}:{os.environ['PATH']}"}


# Audit policy for --audit-nodes: who reads and writes nodes (benchmarks count the cluster play's own requests).
NODE_AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    resources: [{group: "", resources: [nodes]}]
    verbs: [get, list, watch, patch, update, create]
  - level: None
"""


def audit_log(site: Site) -> Path:
    return site.root / "kwok" / "clusters" / site.name / "logs" / "audit.log"


def kwok_config(site: Site, audit_nodes: bool = False) -> Path:
    v = versions()
    cfg = site.root / "kwokctl.yaml"
    audit = ""
    if audit_nodes:
        policy = site.root / "audit-policy.yaml"
        policy.write_text(NODE_AUDIT_POLICY)
        audit = f"  kubeAuditPolicy: {policy}\n"
    cfg.write_text(
        "apiVersion: config.kwok.x-k8s.io/v1alpha1\n"
        "kind: KwokctlConfiguration\n"
        "options:\n"
        "  runtime: binary\n"
        f"  kubeVersion: {v['K8S_VERSION']}\n"
        f"  etcdVersion: {v['ETCD_VERSION'].lstrip('v')}\n"
        "  bindAddress: 127.0.0.1\n"
        f"  kubeApiserverBinary: {BIN / 'kube-apiserver'}\n"
        f"  kubeControllerManagerBinary: {BIN / 'kube-controller-manager'}\n"
        f"  kubeSchedulerBinary: {BIN / 'kube-scheduler'}\n"
        f"  kubectlBinary: {BIN / 'kubectl'}\n"
        f"  kwokControllerBinary: {BIN / 'kwok'}\n"
        f"  etcdBinary: {BIN / 'etcd'}\n"
        + audit
        + components_patches()
    )
    return cfg


# Client rate limits of the lab's controllers. At the defaults (controller-manager 20 QPS per controller, scheduler
# 50) the DaemonSet controller needs minutes to create 1,000 nodes' device-plugin pods and their events.
CLIENT_QPS = {"kube-controller-manager": (300, 600), "kube-scheduler": (300, 600)}


def components_patches() -> str:
    lines = ["componentsPatches:"]
    for component, (qps, burst) in CLIENT_QPS.items():
        lines += [f"- name: {component}", "  extraArgs:",
                  "  - key: kube-api-qps", f'    value: "{qps}"',
                  "  - key: kube-api-burst", f'    value: "{burst}"']
    return "\n".join(lines) + "\n"


def cluster_running(site: Site) -> bool:
    if not site.kubeconfig.exists():
        return False
    proc = run(str(BIN / "kubectl"), "--kubeconfig", str(site.kubeconfig), "get", "--raw", "/readyz",
               check=False)
    return proc.returncode == 0


# kwokctl picks its components' ports itself: the first free ones counting down from 32767 (kwok's
# pkg/utils/net.GetUnusedPort), bound only as each component starts. Two labs created at once (make test's two lab
# lanes, a benchmark's lab) took the same ports, and one lab's clients reached the other's API server ("certificate
# signed by unknown authority"). So one creation at a time on this machine, held until the cluster answers.
CREATE_LOCK = BIN.parent / "locks" / "kwokctl-create.lock"


@contextlib.contextmanager
def one_creation_at_a_time():
    CREATE_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with CREATE_LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        yield


def start_cluster(site: Site, audit_nodes: bool = False) -> None:
    """Start the lab's cluster, or adopt the one already running (`lab.py up`)."""
    if cluster_running(site):
        log("cluster already running")
        return
    started = time.time()
    with one_creation_at_a_time():
        run(str(BIN / "kwokctl"), "--name", site.name, "delete", "cluster", check=False, env=kwok_env(site))
        config = kwok_config(site, audit_nodes=audit_nodes)
        run(
            str(BIN / "kwokctl"), "--name", site.name, "create", "cluster", "-c", str(config),
            "--wait", "3m", "--kubeconfig", str(site.kubeconfig), env=kwok_env(site), capture=False,
        )
    log(f"control plane up in {time.time() - started:.1f} s")


def delete_cluster(site: Site) -> None:
    """Delete the lab's cluster, if it has one, and its kubeconfig (`lab.py down`)."""
    if (site.root / "kwok").exists():
        run(str(BIN / "kwokctl"), "--name", site.name, "delete", "cluster", check=False, env=kwok_env(site),
            capture=False)
    if site.kubeconfig.exists():
        site.kubeconfig.unlink()
