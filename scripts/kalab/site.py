"""Where a lab lives and what it is made of: its paths and Site (directory, cluster name, inventory), the pinned
versions, the lab inventory's GPU hosts and their recorded GPUs, and the helpers every other module uses (log, run,
kubectl apply). It imports nothing of the lab's own: the rest of kalab builds on it."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import yaml
from ansible_collections.kube_accel.gpu.plugins.module_utils.host import gpu_facts as accel_gpu_facts

REPO = Path(__file__).resolve().parents[2]  # scripts/kalab/site.py

LAB = REPO / ".lab"
KUBECONFIG = LAB / "kubeconfig"
CLUSTER = "kube-accel-lab"
CACHE = Path(os.environ.get("KA_CACHE", Path.home() / ".cache" / "kube-accel"))
BIN = CACHE / "bin"
UPSTREAM_BIN = CACHE / "upstream" / "bin"
INVENTORY = REPO / "inventories" / "lab" / "hosts.yml"
NVML_DATA = REPO / "tests" / "data" / "nvml"


@dataclass(frozen=True)
class Site:
    """Where one lab lives: its directory (kubeconfig, kwok workdir, host list), cluster name and inventory."""

    root: Path = LAB
    name: str = CLUSTER
    inventory: Path = INVENTORY

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"


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


def truthy(value) -> bool:
    return value is True or str(value).strip().lower() in ("true", "yes", "on", "1")


def kubectl_apply(kubeconfig: Path, objs: list[dict], path: Path, what: str) -> None:
    path.write_text(yaml.safe_dump_all(objs, sort_keys=False))
    kubectl = [str(BIN / "kubectl"), "--kubeconfig", str(kubeconfig)]
    proc = subprocess.run([*kubectl, "apply", "--server-side", "--force-conflicts", "-f", str(path)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"[lab] {what}: {proc.stderr}")


# -- the lab inventory and its recorded GPUs ---------------------------------------------------------------------


def inventory(path: Path = INVENTORY) -> dict:
    """An inventory with group vars merged per host (ansible-inventory does the merging)."""
    exe = Path(sys.executable).parent / "ansible-inventory"
    out = run(str(exe), "-i", str(path), "--list", env={"ANSIBLE_CONFIG": str(REPO / "ansible.cfg")})
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


@functools.cache
def gpu_summary(snapshot: Path) -> tuple[int, str, int]:
    """(count, product name, memory MiB of the first GPU) from a recorded NVML snapshot, through the same
    facts code the nvidia_gpu_facts module runs."""
    facts = accel_gpu_facts.gather(accel_gpu_facts.RecordedSource.from_file(str(snapshot)))
    gpus = facts["gpus"]
    if not gpus:
        return 0, "none", 0
    return facts["count"], gpus[0]["name"], int(gpus[0]["memory_total_mib"])


def recorded_gpus(name: str, hostvars: dict) -> list[dict]:
    """The host's GPUs from its recorded NVML snapshot (accel_gpu_facts), each with a UUID of its own."""
    snapshot = NVML_DATA / f"{hostvars['accel_lab_gpu']}.json"
    recorded = accel_gpu_facts.gather(accel_gpu_facts.RecordedSource.from_file(str(snapshot)))["gpus"]
    # Lab hosts share snapshots; real GPUs' UUIDs are unique, so each host gets its own, derived.
    return [{**g, "uuid": "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, name + "/" + g["uuid"]))} for g in recorded]
