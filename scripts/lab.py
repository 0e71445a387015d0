#!/usr/bin/env python3
"""The local lab: a real Kubernetes control plane (kwokctl --runtime binary, locally built binaries, bound to
127.0.0.1) with fake GPU nodes named after the lab inventory's GPU hosts, plus one podman container per host.

  lab.py up       start (or adopt) the cluster, apply the fake nodes, start the host containers
  lab.py down     delete the cluster (kwokctl stops its own processes by PID) and the host containers
  lab.py status   print what runs
Everything lives under the repo's ignored .lab/ directory.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "plugins"))
import accel_import  # noqa: E402

accel_import.install()
from ansible.module_utils import accel_constants, accel_pools  # noqa: E402

LAB = REPO / ".lab"
KUBECONFIG = LAB / "kubeconfig"
CLUSTER = "kube-accel-lab"
CACHE = Path(os.environ.get("KA_CACHE", Path.home() / ".cache" / "kube-accel"))
BIN = CACHE / "bin"
INVENTORY = REPO / "inventories" / "lab" / "hosts.yml"
NVML_DATA = REPO / "tests" / "data" / "nvml"


def versions() -> dict[str, str]:
    out = {}
    for line in (REPO / "scripts" / "versions.env").read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out


def log(msg: str) -> None:
    print(f"[lab] {msg}", file=sys.stderr, flush=True)


def run(*argv: str, check: bool = True, env: dict | None = None, capture: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, capture_output=capture, text=True, env={**os.environ, **(env or {})}, check=False)
    if check and proc.returncode != 0:
        sys.exit(f"[lab] {' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def kwok_env() -> dict[str, str]:
    # KWOK_WORKDIR keeps the cluster's PKI, logs and PID files inside .lab/ rather than ~/.kwok.
    return {"KWOK_WORKDIR": str(LAB / "kwok"), "PATH": f"{BIN}:{os.environ['PATH']}"}


def kwok_config() -> Path:
    v = versions()
    cfg = LAB / "kwokctl.yaml"
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
    )
    return cfg


def inventory() -> dict:
    """The lab inventory with group vars merged per host (ansible-inventory does the merging)."""
    exe = Path(sys.executable).parent / "ansible-inventory"
    out = run(str(exe), "-i", str(INVENTORY), "--list", env={"ANSIBLE_CONFIG": str(REPO / "ansible.cfg")})
    return json.loads(out.stdout)


def gpu_hosts(inv: dict) -> dict[str, dict]:
    hostvars = inv["_meta"]["hostvars"]
    hosts: list[str] = []
    stack = ["gpu_pools"]
    while stack:
        group = inv.get(stack.pop(), {})
        hosts.extend(group.get("hosts", []))
        stack.extend(group.get("children", []))
    return {h: hostvars[h] for h in sorted(set(hosts))}


def gpu_summary(snapshot: Path) -> tuple[int, str, int]:
    """(count, product name, memory MiB of the first GPU) from a recorded NVML snapshot, through the same
    facts code the nvidia_gpu_facts module runs."""
    from ansible.module_utils import accel_gpu_facts  # noqa: PLC0415

    facts = accel_gpu_facts.gather(accel_gpu_facts.RecordedSource.from_file(str(snapshot)))
    gpus = facts["gpus"]
    if not gpus:
        return 0, "none", 0
    return facts["count"], gpus[0]["name"], int(gpus[0]["memory_total_mib"])


def node_manifest(name: str, hostvars: dict) -> dict:
    settings = accel_pools.pool_settings(hostvars)
    count, product, memory = gpu_summary(NVML_DATA / f"{settings['lab_gpu']}.json")
    resources = {k: str(v) for k, v in accel_pools.advertised_resources(settings, count, memory).items()}
    base = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    labels = {
        "type": "kwok",
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        # What gpu-feature-discovery would publish for this host's GPUs.
        "nvidia.com/gpu.product": product.replace(" ", "-"),
        "nvidia.com/gpu.memory": str(memory),
        "nvidia.com/gpu.count": str(count),
        **accel_pools.node_labels(settings),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": {"kwok.x-k8s.io/node": "fake"}},
        "spec": {},
        "status": {"capacity": {**base, **resources}, "allocatable": {**base, **resources}},
    }


def apply_nodes(hosts: dict[str, dict]) -> None:
    from kubernetes import client, config  # noqa: PLC0415

    api = client.CoreV1Api(config.new_client_from_config(str(KUBECONFIG)))
    existing = {n.metadata.name for n in api.list_node().items}
    for name, hv in hosts.items():
        body = node_manifest(name, hv)
        if name in existing:
            api.patch_node(name, {"metadata": {"labels": body["metadata"]["labels"]}})
        else:
            api.create_node(body)
        # Capacity lives in the status subresource; set it explicitly so it survives kwok's initialisation.
        api.patch_node_status(name, {"status": body["status"]})
    deadline = time.time() + 120
    while time.time() < deadline:
        ready = {
            n.metadata.name
            for n in api.list_node().items
            if any(c.type == "Ready" and c.status == "True" for c in (n.status.conditions or []))
        }
        if set(hosts) <= ready:
            log(f"{len(hosts)} fake GPU nodes Ready")
            return
        time.sleep(1)
    sys.exit(f"[lab] nodes not Ready after 120 s: {sorted(set(hosts) - ready)}")


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return run("podman", *args, check=check)


def start_hosts(hosts: dict[str, dict]) -> None:
    image = versions()["HOST_IMAGE"]
    if shutil.which("podman") is None or podman("image", "exists", image, check=False).returncode != 0:
        sys.exit(f"[lab] podman image {image} missing: run scripts/toolchain.sh first")
    for name in hosts:
        state = podman("inspect", "--format", "{{.State.Running}}", name, check=False)
        if state.returncode == 0 and state.stdout.strip() == "true":
            continue
        if state.returncode == 0:
            podman("start", name)
        else:
            podman(
                "run", "-d", "--name", name, "--hostname", name, "--network", "host",
                "--label", "kube-accel.lab=true", image, "sleep", "infinity",
            )
    (LAB / "hosts").write_text("\n".join(hosts) + "\n")
    log(f"{len(hosts)} host containers running")


def stop_hosts() -> None:
    listed = LAB / "hosts"
    if not listed.exists() or shutil.which("podman") is None:
        return
    # Only the containers this lab started, by exact name.
    names = [n for n in listed.read_text().split() if n]
    if names:
        podman("rm", "-f", "-t", "0", *names, check=False)
    listed.unlink()


def cluster_running() -> bool:
    if not KUBECONFIG.exists():
        return False
    proc = run(str(BIN / "kubectl"), "--kubeconfig", str(KUBECONFIG), "get", "--raw", "/readyz",
               check=False)
    return proc.returncode == 0


def up(args: argparse.Namespace) -> None:
    LAB.mkdir(exist_ok=True)
    if not args.skip_toolchain:
        run(str(REPO / "scripts" / "toolchain.sh"), "all", capture=False)
    if cluster_running():
        log("cluster already running")
    else:
        started = time.time()
        run(str(BIN / "kwokctl"), "--name", CLUSTER, "delete", "cluster", check=False, env=kwok_env())
        run(
            str(BIN / "kwokctl"), "--name", CLUSTER, "create", "cluster", "-c", str(kwok_config()),
            "--wait", "3m", "--kubeconfig", str(KUBECONFIG), env=kwok_env(), capture=False,
        )
        log(f"control plane up in {time.time() - started:.1f} s")
    hosts = gpu_hosts(inventory())
    apply_nodes(hosts)
    if not args.no_hosts:
        start_hosts(hosts)


def down(_: argparse.Namespace) -> None:
    stop_hosts()
    if (LAB / "kwok").exists():
        run(str(BIN / "kwokctl"), "--name", CLUSTER, "delete", "cluster", check=False, env=kwok_env(),
            capture=False)
    if KUBECONFIG.exists():
        KUBECONFIG.unlink()
    log("lab removed")


def status(_: argparse.Namespace) -> None:
    if not cluster_running():
        print("cluster: down")
        sys.exit(1)
    print("cluster: up")
    run(str(BIN / "kubectl"), "--kubeconfig", str(KUBECONFIG), "get", "nodes", "-L",
        accel_constants.LABELS["pool"], capture=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up")
    p_up.add_argument("--skip-toolchain", action="store_true", help="do not (re)check the toolchain")
    p_up.add_argument("--no-hosts", action="store_true", help="cluster and fake nodes only, no podman hosts")
    p_up.set_defaults(func=up)
    sub.add_parser("down").set_defaults(func=down)
    sub.add_parser("status").set_defaults(func=status)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
