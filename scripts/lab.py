#!/usr/bin/env python3
"""The local lab: a real Kubernetes control plane (kwokctl --runtime binary, locally built binaries, bound to
127.0.0.1) with fake GPU nodes named after the lab inventory's GPU hosts, a fake control-plane node for its
kube_control_plane host (role label and NoSchedule taint as kubeadm sets them: where the charts' cluster components
run), plus one podman container per GPU host.

  lab.py up       start (or adopt) the cluster, apply the fake nodes, start the host containers
  lab.py down     delete the cluster (kwokctl stops its own processes by PID) and the host containers
  lab.py status   print what runs
  lab.py monitoring [--report FILE]   the monitoring chain on what the cluster play deployed (lab_monitoring.py)
  lab.py load --util NS=PCT --xid NODE/GPU=CODE   the DCGM exporter stand-in's readings
Everything lives under the repo's ignored .lab/ directory.

A second lab (benchmarks) lives beside it with its own directory, cluster name and inventory:
  lab.py --dir .lab/bench --name kube-accel-bench up --inventory INV/hosts.yml --no-hosts
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ansible_collections.kube_accel.gpu.plugins.module_utils import accel_chart_values, accel_constants, accel_pools
from ansible_collections.kube_accel.gpu.plugins.module_utils.accel_verify import (
    LAB_CAPACITY_ANNOTATION,
    LAB_CAPACITY_FROM_INVENTORY,
)

REPO = Path(__file__).resolve().parent.parent

LAB = REPO / ".lab"
KUBECONFIG = LAB / "kubeconfig"
CLUSTER = "kube-accel-lab"
CACHE = Path(os.environ.get("KA_CACHE", Path.home() / ".cache" / "kube-accel"))
BIN = CACHE / "bin"
INVENTORY = REPO / "inventories" / "lab" / "hosts.yml"
NVML_DATA = REPO / "tests" / "data" / "nvml"
# Node API calls in flight while applying fake nodes: 1,000 nodes in seconds, not minutes.
NODE_WORKERS = 16


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
    from ansible_collections.kube_accel.gpu.plugins.module_utils import accel_gpu_facts  # noqa: PLC0415

    facts = accel_gpu_facts.gather(accel_gpu_facts.RecordedSource.from_file(str(snapshot)))
    gpus = facts["gpus"]
    if not gpus:
        return 0, "none", 0
    return facts["count"], gpus[0]["name"], int(gpus[0]["memory_total_mib"])


def capacity_by_standin(settings: dict) -> bool:
    """Whether a device-plugin stand-in writes this pool's GPU capacity once its plugin pod runs
    (scripts/lab_upstream.py): NVIDIA's plugin without MIG (pgpu, mps, timeslice) and HAMi's."""
    if settings["accel_mode"] == "vgpu":
        return settings["accel_vgpu_backend"] == "hami"
    return not accel_pools.mig_enabled(settings)


def node_manifest(name: str, hostvars: dict, standins: bool = True) -> dict:
    """A fake node as a fresh cluster's node: no kube-accel labels (the cluster play sets them) and, where a lab
    stand-in will register its device plugin (``standins``, capacity_by_standin), no GPU capacity either. The
    gpu-feature-discovery labels stand in for GFD (recorded NVML snapshot). Other nodes get the capacity the
    inventory promises, marked so that verify does not count it as evidence."""
    settings = accel_pools.pool_settings(hostvars)
    count, product, memory = gpu_summary(NVML_DATA / f"{settings['accel_lab_gpu']}.json")
    from_inventory = not (standins and capacity_by_standin(settings))
    resources = {k: str(v) for k, v in accel_pools.advertised_resources(settings, count, memory).items()
                 if from_inventory}
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
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": {
            "kwok.x-k8s.io/node": "fake",
            **({LAB_CAPACITY_ANNOTATION: LAB_CAPACITY_FROM_INVENTORY} if from_inventory else {})}},
        "spec": {},
        "status": {"capacity": {**base, **resources}, "allocatable": {**base, **resources}},
    }


# The control-plane node's role label and taint, as kubeadm sets them.
CONTROL_PLANE_ROLE = "node-role.kubernetes.io/control-plane"


def control_plane_hosts(inv: dict) -> list[str]:
    """The inventory's kube_control_plane hosts: fake nodes too, with no GPU."""
    return sorted(inv.get("kube_control_plane", {}).get("hosts", []))


def control_plane_manifest(name: str) -> dict:
    """A control-plane node as kubeadm registers one: role label and NoSchedule taint, no GPU. Cluster components
    that must stay off GPU nodes run here (charts/vgpu clusterComponents: cluster-wide tokens)."""
    base = {"cpu": "16", "memory": "64Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                     "labels": {"type": "kwok", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                                "kubernetes.io/hostname": name, CONTROL_PLANE_ROLE: ""}},
        "spec": {"taints": [{"key": CONTROL_PLANE_ROLE, "effect": "NoSchedule"}]},
        "status": {"capacity": base, "allocatable": base},
    }


def node_api(site: Site):
    from kubernetes import client, config  # noqa: PLC0415

    cfg = client.Configuration()
    config.load_kube_config(str(site.kubeconfig), client_configuration=cfg, persist_config=False)
    cfg.connection_pool_maxsize = NODE_WORKERS  # one kept connection per worker (default: 5 per CPU)
    return client.CoreV1Api(client.ApiClient(cfg))


def node_names_ready(api) -> tuple[set[str], set[str]]:
    """(every node, the Ready ones), read as raw JSON: deserialising 1,000 Node objects costs seconds."""
    items = json.loads(api.list_node(_preload_content=False).data)["items"]
    ready = {
        n["metadata"]["name"]
        for n in items
        if any(c["type"] == "Ready" and c["status"] == "True" for c in n.get("status", {}).get("conditions", []))
    }
    return {n["metadata"]["name"] for n in items}, ready


def apply_nodes(site: Site, hosts: dict[str, dict], standins: bool, control_planes: list[str] = ()) -> None:
    api = node_api(site)
    existing, _ = node_names_ready(api)
    names = sorted(hosts) + [n for n in control_planes if n not in hosts]

    def apply(name: str) -> None:
        body = node_manifest(name, hosts[name], standins) if name in hosts else control_plane_manifest(name)
        if name in existing:
            api.patch_node(name, {"metadata": {"labels": body["metadata"]["labels"],
                                               "annotations": body["metadata"]["annotations"]}},
                           _preload_content=False)
        else:
            api.create_node(body, _preload_content=False)
        # Capacity lives in the status subresource; set it explicitly so it survives kwok's initialisation.
        api.patch_node_status(name, {"status": body["status"]}, _preload_content=False)

    started = time.time()
    with ThreadPoolExecutor(NODE_WORKERS) as pool:
        list(pool.map(apply, names))  # list(): re-raises the first failure
    cp = f" and {len(names) - len(hosts)} control-plane node(s)" if len(names) > len(hosts) else ""
    log(f"{len(hosts)} fake GPU nodes{cp} applied in {time.time() - started:.1f} s")
    # kwok marks nodes Ready at its own pace: allow a few seconds more per hundred nodes.
    timeout = 120 + len(hosts) // 10
    deadline = time.time() + timeout
    while time.time() < deadline:
        _, ready = node_names_ready(api)
        if set(names) <= ready:
            log(f"{len(hosts)} fake GPU nodes{cp} Ready after {time.time() - started:.1f} s")
            return
        time.sleep(1)
    missing = sorted(set(names) - ready)
    sys.exit(f"[lab] {len(missing)} nodes not Ready after {timeout} s: {missing[:20]}")


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return run("podman", *args, check=check)


def start_hosts(site: Site, hosts: dict[str, dict]) -> None:
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
    (site.root / "hosts").write_text("\n".join(hosts) + "\n")
    log(f"{len(hosts)} host containers running")


def stop_hosts(site: Site) -> None:
    listed = site.root / "hosts"
    if not listed.exists() or shutil.which("podman") is None:
        return
    # Only the containers this lab started, by exact name.
    names = [n for n in listed.read_text().split() if n]
    if names:
        podman("rm", "-f", "-t", "0", *names, check=False)
    listed.unlink()


def cluster_running(site: Site) -> bool:
    if not site.kubeconfig.exists():
        return False
    proc = run(str(BIN / "kubectl"), "--kubeconfig", str(site.kubeconfig), "get", "--raw", "/readyz",
               check=False)
    return proc.returncode == 0


def site_of(args: argparse.Namespace) -> Site:
    root = Path(args.dir).resolve() if args.dir else LAB
    return Site(root=root, name=args.name, inventory=Path(getattr(args, "inventory", None) or INVENTORY).resolve())


def up(args: argparse.Namespace) -> None:
    site = site_of(args)
    site.root.mkdir(parents=True, exist_ok=True)
    if not args.skip_toolchain:
        run(str(REPO / "scripts" / "toolchain.sh"), "all", capture=False)
    if cluster_running(site):
        log("cluster already running")
    else:
        started = time.time()
        run(str(BIN / "kwokctl"), "--name", site.name, "delete", "cluster", check=False, env=kwok_env(site))
        config = kwok_config(site, audit_nodes=args.audit_nodes)
        run(
            str(BIN / "kwokctl"), "--name", site.name, "create", "cluster", "-c", str(config),
            "--wait", "3m", "--kubeconfig", str(site.kubeconfig), env=kwok_env(site), capture=False,
        )
        log(f"control plane up in {time.time() - started:.1f} s")
    inv = inventory(site.inventory)
    hosts = gpu_hosts(inv)
    apply_nodes(site, hosts, standins=not args.no_upstream, control_planes=control_plane_hosts(inv))
    if any(truthy(hv.get("accel_monitoring_enabled", False)) for hv in hosts.values()):
        apply_prometheus_rule_crd(site)
    if not args.no_hosts:
        start_hosts(site, hosts)
    if not args.no_upstream:
        start_upstream(site, hosts)


def start_upstream(site: Site, hosts: dict[str, dict]) -> None:
    """Upstream controllers as lab processes (scripts/lab_upstream.py): HAMi's extender, webhook and kube-scheduler
    for a vgpu-hami pool, with the HAMi device-plugin stand-in; gpu-admission and its kube-scheduler for a
    vgpu/gpu-manager pool; the GPU Operator's controller when the inventory enables the operator; the device-plugin
    stand-in, which runs each NVIDIA device-plugin pod's config-manager. A component already running is left
    alone."""
    import lab_upstream  # noqa: PLC0415

    running = lab_upstream.running(site.root)
    if running:
        log(f"upstream processes already running: {sorted(running)}")
    first = hosts[sorted(hosts)[0]] if hosts else {}
    if not {"hami-scheduler", "hami-kube-scheduler", lab_upstream.STANDIN} & set(running):
        start_hami(site, hosts, first)
    if not {lab_upstream.GPU_ADMISSION, "gpu-manager-kube-scheduler"} & set(running):
        start_gpu_admission(site, hosts, first)
    if lab_upstream.GPU_OPERATOR not in running and truthy(first.get("accel_gpu_operator_enabled", False)):
        start_gpu_operator(site, hosts, first)
    if lab_upstream.DP_STANDIN not in running:
        # NVIDIA's plugin (HAMi's stand-in registers the vgpu-hami nodes).
        counts = {name: gpu_summary(NVML_DATA / f"{hv['accel_lab_gpu']}.json")[0] for name, hv in hosts.items()
                  if (st := accel_pools.pool_settings(hv))["accel_mode"] != "vgpu" and capacity_by_standin(st)}
        started = time.time()
        lab_upstream.start_dp_standin(site.root, counts, first.get("accel_namespace") or "kube-accel")
        log(f"device-plugin stand-in (config-manager per node) up in {time.time() - started:.1f} s")


def truthy(value) -> bool:
    return value is True or str(value).strip().lower() in ("true", "yes", "on", "1")


def start_hami(site: Site, hosts: dict[str, dict], first: dict) -> None:
    import lab_upstream  # noqa: PLC0415

    # The cluster settings the play's pool_charts role passes (accel_control_plane_cidrs included).
    cluster = accel_chart_values.cluster_settings(first)
    release = lab_upstream.hami_release(hosts, cluster)
    if release is None:
        return
    started = time.time()
    gpus = {name: recorded_gpus(name, hv) for name, hv in hosts.items() if hv.get("accel_pool") in release["pools"]}
    (site.root / "hami").mkdir(exist_ok=True)
    (site.root / "hami" / "hosts.json").write_text(json.dumps(gpus))
    namespace = first.get("accel_namespace") or "kube-accel"
    lab_upstream.start_hami(site.root, site.kubeconfig, release, namespace, versions()["K8S_VERSION"].lstrip("v"))
    log(f"HAMi scheduler, kube-scheduler and device-plugin stand-in up in {time.time() - started:.1f} s")


def recorded_gpus(name: str, hostvars: dict) -> list[dict]:
    """The host's GPUs from its recorded NVML snapshot (accel_gpu_facts), each with a UUID of its own."""
    from ansible_collections.kube_accel.gpu.plugins.module_utils import accel_gpu_facts  # noqa: PLC0415

    snapshot = NVML_DATA / f"{hostvars['accel_lab_gpu']}.json"
    recorded = accel_gpu_facts.gather(accel_gpu_facts.RecordedSource.from_file(str(snapshot)))["gpus"]
    # Lab hosts share snapshots; real GPUs' UUIDs are unique, so each host gets its own, derived.
    return [{**g, "uuid": "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, name + "/" + g["uuid"]))} for g in recorded]


def start_gpu_admission(site: Site, hosts: dict[str, dict], first: dict) -> None:
    import lab_upstream  # noqa: PLC0415

    cluster = accel_chart_values.cluster_settings(first)
    release = lab_upstream.gpu_manager_release(hosts, cluster)
    if release is None:
        return
    started = time.time()
    lab_upstream.start_gpu_admission(site.root, site.kubeconfig, release, first.get("accel_namespace") or "kube-accel",
                                     versions()["K8S_VERSION"].lstrip("v"))
    log(f"gpu-admission and its kube-scheduler up in {time.time() - started:.1f} s")


# The namespace cluster.yml installs the GPU Operator into (cluster_operator_namespace).
GPU_OPERATOR_NAMESPACE = "gpu-operator"


def start_gpu_operator(site: Site, hosts: dict[str, dict], first: dict) -> None:
    """The GPU Operator's controller, configured by the chart rendered with the values the gpu_operator role
    builds for this inventory (accel_gpu_operator_values with the role's gpu_operator_cluster inputs)."""
    import lab_upstream  # noqa: PLC0415
    from ansible_collections.kube_accel.gpu.plugins.module_utils import accel_operator_values  # noqa: PLC0415

    started = time.time()
    cluster = {"image_registry": first.get("accel_image_registry") or "",
               "image_pull_secrets": first.get("accel_image_pull_secrets") or [],
               "service_monitor": first.get("accel_gpu_operator_service_monitor", False),
               "service_monitor_labels": first.get("accel_gpu_operator_service_monitor_labels") or {}}
    values = accel_operator_values.gpu_operator_values(accel_pools.collect_pools(hosts), cluster)
    lab_upstream.start_gpu_operator(site.root, site.kubeconfig, values, GPU_OPERATOR_NAMESPACE,
                                    versions()["K8S_VERSION"].lstrip("v"))
    log(f"GPU Operator controller up in {time.time() - started:.1f} s")


def apply_prometheus_rule_crd(site: Site) -> None:
    """The Prometheus Operator's PrometheusRule CRD, which a cluster with kube-prometheus-stack serves: the monitoring
    chart renders its alerts only where the API is (.Capabilities.APIVersions)."""
    import lab_upstream  # noqa: PLC0415

    crd = lab_upstream.monitoring_crd("prometheusrules")
    lab_upstream.kubectl_apply(site.kubeconfig, [crd], site.root / "prometheusrules-crd.yaml", "PrometheusRule CRD")
    run(str(BIN / "kubectl"), "--kubeconfig", str(site.kubeconfig), "wait", "--for", "condition=Established",
        "--timeout=60s", f"crd/{crd['metadata']['name']}")


def monitoring(args: argparse.Namespace) -> None:
    """The monitoring chain on what the cluster play deployed (scripts/lab_monitoring.py), and its report."""
    import lab_monitoring  # noqa: PLC0415

    site = site_of(args)
    if not cluster_running(site):
        sys.exit("[lab] the lab is down: run `make demo` first")
    hosts = gpu_hosts(inventory(site.inventory))
    first = hosts[sorted(hosts)[0]]
    if not truthy(first.get("accel_monitoring_enabled", False)):
        sys.exit(f"[lab] {site.inventory} does not set accel_monitoring_enabled")
    namespace = first.get("accel_namespace") or "kube-accel"
    gpus = {name: recorded_gpus(name, hv) for name, hv in hosts.items()}
    driver = json.loads((NVML_DATA / f"{first['accel_lab_gpu']}.json").read_text()).get("driver_version", "")
    lab_monitoring.up(site.root, site.kubeconfig, gpus, namespace,
                      first.get("accel_monitoring_hpa_adapter_namespace") or namespace, driver)
    if args.report:
        out = Path(args.report).resolve()
        counts = lab_monitoring.report(site.root, site.kubeconfig,
                                       first.get("accel_monitoring_dashboards_namespace") or namespace, out)
        empty = sorted(title for title, n in counts.items() if n == 0)
        log(f"dashboard report: {out} ({len(counts)} panels, {sum(counts.values())} series"
            + (f"; no data: {', '.join(empty)})" if empty else ")"))


def load(args: argparse.Namespace) -> None:
    """Set the DCGM exporter stand-in's readings: utilisation of a namespace's GPUs, a GPU's last XID."""
    import lab_monitoring  # noqa: PLC0415

    def pairs(items: list[str], kind) -> dict:
        out = {}
        for item in items:
            key, sep, value = item.partition("=")
            try:
                if not sep or not key:
                    raise ValueError
                out[key] = kind(value)
            except ValueError:
                what = "a number" if kind is float else "an integer"
                sys.exit(f"[lab] {item!r}: expected KEY=VALUE where VALUE is {what}")
        return out

    print(json.dumps(lab_monitoring.set_load(site_of(args).root, pairs(args.util, float) or None,
                                             pairs(args.xid, int) or None)))


def down(args: argparse.Namespace) -> None:
    site = site_of(args)
    import lab_upstream  # noqa: PLC0415

    lab_upstream.stop_all(site.root)  # by PID, before the API server they talk to goes
    stop_hosts(site)
    if (site.root / "kwok").exists():
        run(str(BIN / "kwokctl"), "--name", site.name, "delete", "cluster", check=False, env=kwok_env(site),
            capture=False)
    if site.kubeconfig.exists():
        site.kubeconfig.unlink()
    log("lab removed")


def status(args: argparse.Namespace) -> None:
    site = site_of(args)
    if not cluster_running(site):
        print("cluster: down")
        sys.exit(1)
    print("cluster: up")
    import lab_upstream  # noqa: PLC0415

    for name, pid in lab_upstream.running(site.root).items():
        print(f"process: {name} (pid {pid})")
    run(str(BIN / "kubectl"), "--kubeconfig", str(site.kubeconfig), "get", "nodes", "-L",
        accel_constants.LABELS["pool"], capture=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", help="lab directory (default .lab); a second lab needs its own")
    parser.add_argument("--name", default=CLUSTER, help=f"kwokctl cluster name (default {CLUSTER})")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up")
    p_up.add_argument("--skip-toolchain", action="store_true", help="do not (re)check the toolchain")
    p_up.add_argument("--no-hosts", action="store_true", help="cluster and fake nodes only, no podman hosts")
    p_up.add_argument("--inventory", help="inventory whose GPU hosts become fake nodes (default inventories/lab)")
    p_up.add_argument("--no-upstream", action="store_true",
                      help="no upstream controllers as lab processes (HAMi scheduler and webhook, GPU Operator; "
                      "lab_upstream.py)")
    p_up.add_argument("--audit-nodes", action="store_true",
                      help="log every request on nodes to the cluster's audit.log (new clusters only)")
    p_up.set_defaults(func=up)
    p_mon = sub.add_parser("monitoring", help="Prometheus, kube-state-metrics and prometheus-adapter on what the "
                           "cluster play deployed, with the DCGM exporter stand-in (lab_monitoring.py)")
    p_mon.add_argument("--report", help="also render the deployed dashboard with the lab's data to this HTML file")
    p_mon.set_defaults(func=monitoring)
    p_load = sub.add_parser("load", help="set the DCGM exporter stand-in's readings")
    p_load.add_argument("--util", action="append", default=[], metavar="NAMESPACE=PERCENT",
                        help="utilisation of the GPUs the namespace's pods use")
    p_load.add_argument("--xid", action="append", default=[], metavar="NODE/GPU=CODE",
                        help="last XID of a GPU (0 clears)")
    p_load.set_defaults(func=load)
    sub.add_parser("down").set_defaults(func=down)
    sub.add_parser("status").set_defaults(func=status)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
