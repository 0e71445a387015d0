"""The lab's stand-ins for what needs a GPU or a kubelet: lab code, named "stand-in" in logs,
processes and the verify table. Each runs as a lab process, this module run by the lab's Python
(`python -m kalab.standins standin|dp-standin|exporter`, standin_process):
  hami-device-plugin-standin   for HAMi's device plugin: on nodes that run the vgpu chart's device-plugin pod it
                   writes HAMi's node registration (hami.io/node-nvidia-register, HAMi's JSON encoding) for the
                   host's recorded GPUs and the deployed device config, and completes allocations as the
                   plugin's Allocate does (hami.io/bind-phase=success, hami.io/mutex.lock released); the node's
                   capacity is what that plugin registers with the kubelet: deviceSplitCount (or the node's
                   nodeconfig entry) devices per GPU. It also keeps the lab's copy of the chart's webhook
                   configuration (kalab.upstream.start_hami: HAMi's webhook served by a lab process) in step with
                   the chart's own: present while the release's MutatingWebhookConfiguration is, deleted when helm
                   deletes that, so a removed HAMi pool stops sending GPU pods to HAMi's scheduler as it does in a
                   cluster (tests/integration/test_pools_leave_lab.py)
  device-plugin-standin        for NVIDIA's device plugin (pgpu, mps and timeslice pools): on nodes that run a
                   k8s-device-plugin pod it runs that pod's config-manager sidecar (the upstream binary, its
                   rendered env, the ConfigMap files the kubelet would mount) in a PID namespace of its own, loads
                   the config file config-manager selected with the plugin's own loader (ka-conform-deviceplugin)
                   and writes the capacity the plugin would register: nvidia.com/gpu, or a replicated resource's
                   (re)name times its replicas. Under a MIG strategy (MIG devices need a GPU) it writes what a MIG
                   pool's node starts with, the inventory's promise marked as such (kalab.nodes), or nothing on a
                   node that started without MIG.
  dra-kubelet-plugin-standin   for NVIDIA's DRA driver's kubelet plugin (dra pools): while the driver's
                   kubelet-plugin pod is Running on a node it runs, per node, the driver's own device enumeration and
                   ResourceSlice publishing code over the host's recorded NVML snapshot (kalab.dra.publisher; process
                   dra-slices-NODE; the snapshot's own UUIDs, which the host's NVML facts report too, as a real
                   plugin and the facts read one NVML: the pools' DeviceClasses select them by those facts; the MIG
                   devices of the pool's accel_mig_geometry from the lab inventory), writing as that pod (a token
                   of its ServiceAccount bound to it); once the pod is gone it stops and deletes the node's slices
                   of the driver, as the kubelet does for a plugin that left.
                   Claims are not prepared (no kubelet): the lab's kube-scheduler allocates them, nothing runs them.
  dcgm-exporter-standin  one HTTP endpoint per node that runs the GPU Operator's DCGM exporter pod, serving the
                       exporter's text format (its render template's labels, HELP/TYPE from the collectors file the
                       operator configures, dcp-metrics-included.csv) for the node's recorded GPUs; GPUs are
                       attributed to the Running pods that requested nvidia.com/gpu on that node, as the exporter
                       does from the kubelet's pod-resources API. Values follow .lab/monitoring/load.json
                       (utilisation per namespace, XID per GPU; `lab.py load`), idle GPUs a slow wave.

Identity, so that the chart's admission policies judge the lab's HAMi writes as they judge the real ones: the HAMi
device-plugin stand-in writes each node's registration and its pods' allocation with a token of the chart's
device-plugin ServiceAccount bound to that node's device-plugin pod, as the kubelet mounts it (the API server puts the
node's name into it); only what the kubelet would write (capacity) is written as admin. (HAMi's scheduler:
kalab.upstream.)

A slow node agent, on demand (`lab.py delay-registration SECONDS`, the file DIR/register-delay): the HAMi,
device-plugin and DRA stand-ins register a node only SECONDS after they first saw its agent pod Running, as a real
agent registers some time after its pod is Ready; each reads the file on every loop (RegistrationDelay).

kalab.upstream starts the HAMi stand-in with HAMi, start_upstream the device-plugin and DRA stand-ins;
kalab.monitoring starts the DCGM exporter stand-in with its chain.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml
from ansible_collections.kube_accel.gpu.plugins.module_utils.common.constants import DRA_DRIVER_NAME
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm.pool_charts import DRA_DRIVER_IMAGE
from ansible_collections.kube_accel.gpu.plugins.module_utils.verify.pool_checks import (
    DRA_SLICES_STANDIN,
    LAB_CAPACITY_ANNOTATION,
    LAB_CAPACITY_FROM_INVENTORY,
)

from kalab import dra
from kalab.informer import Informer
from kalab.processes import last_lines, procs_dir, python_module, start, stop_one
from kalab.site import UPSTREAM_BIN

STANDIN = "hami-device-plugin-standin"
# HAMi v2.10.0 names (pkg/device/nvidia/device.go:41-42, pkg/util/types.go:21-27, pkg/util/nodelock/nodelock.go:40).
HAMI_REGISTER = "hami.io/node-nvidia-register"
HAMI_BIND_PHASE = "hami.io/bind-phase"
HAMI_NODE_LOCK = "hami.io/mutex.lock"
HAMI_ASSIGNED_NODE = "hami.io/vgpu-node"
HAMI_DEVICES_ALLOCATED = "hami.io/vgpu-devices-allocated"
HAMI_DEVICES_TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"

DP_STANDIN = "device-plugin-standin"
RESTART_AFTER = 10  # seconds, the kubelet's first CrashLoopBackOff delay

# The name verify gives the publisher of a kwok node's ResourceSlices (verify.pool_checks.DRA_SLICES_STANDIN).
DRA_STANDIN = DRA_SLICES_STANDIN.split()[0]

EXPORTER = "dcgm-exporter-standin"
DCGM_ARCHIVE = "dcgm-exporter-4.5.3-4.8.2"
# The collectors file the GPU Operator v26.7.0 gives its exporter (DCGM_EXPORTER_COLLECTORS in
# assets/state-dcgm-exporter/0800_daemonset.yaml; tests/conformance/test_dcgm_queries.py checks it).
COLLECTORS = "dcp-metrics-included.csv"
# What the stand-in serves: the metrics kube-accel's dashboard, alerts and adapter rules read.
SERVED = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_SM_CLOCK",
          "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_XID_ERRORS")
# The exporter maps these resources to pods (dcgm-exporter: nvidia.com/gpu and nvidia.com/mig-*, unless
# NVIDIA_RESOURCE_NAMES adds others; docs/monitoring.md says what that means per mode).
MAPPED_RESOURCE = "nvidia.com/gpu"


def standin_process(cmd: str, *args: str) -> tuple[list[str], dict[str, str]]:
    """argv and env of stand-in ``cmd`` (main) as a lab process: ``start(root, NAME, *standin_process(...), ready)``."""
    return python_module("kalab.standins", cmd, *args)


REGISTER_DELAY_FILE = "register-delay"


class RegistrationDelay:
    """The delay `lab.py delay-registration` asks of the stand-ins (DIR/register-delay, seconds; none when absent):
    an agent pod's node is registered only that long after the stand-in first saw the pod Running."""

    def __init__(self, root: Path):
        self.file = root / REGISTER_DELAY_FILE
        self.first_seen: dict[str, float] = {}

    def due(self, pod: dict) -> bool:
        first = self.first_seen.setdefault(pod["metadata"]["uid"], time.time())
        try:
            delay = float(self.file.read_text())
        except (OSError, ValueError):
            delay = 0.0
        return time.time() - first >= delay


# -- the HAMi device-plugin stand-in ---------------------------------------------------------------------------


def registration(gpus: list[dict], device_config: dict, node_config: dict | None = None) -> list[dict]:
    """HAMi's DeviceInfo list for the recorded GPUs, as the plugin builds it (plugin/register.go:118-189) and
    device.MarshalNodeDevices encodes it (field order and omitempty of pkg/device/devices.go:127). ``node_config``:
    the node's entry of the chart's nodeconfig, whose set values override the device config (plugin/server.go
    readFromConfigFile)."""
    nv = device_config.get("nvidia", {})
    node = node_config or {}
    split = int(node.get("devicesplitcount") or nv.get("deviceSplitCount", 10))
    mem_scaling = float(node.get("devicememoryscaling") or nv.get("deviceMemoryScaling", 1))
    core_scaling = float(node.get("devicecorescaling") or nv.get("deviceCoreScaling", 1))
    out = []
    for idx, gpu in enumerate(gpus):
        model = gpu["name"] if gpu["name"].startswith("NVIDIA") else f"NVIDIA-{gpu['name']}"
        mem = int(gpu["memory_total_mib"])
        if mem_scaling != 1:
            mem = int(mem * mem_scaling)
        info = {"id": gpu["uuid"], "index": idx, "count": split, "devmem": mem, "devcore": int(core_scaling * 100),
                "type": model, "numa": int(gpu.get("numa_node") or 0), "mode": "hami-core", "health": True}
        out.append({k: v for k, v in info.items() if v not in (0, "", None, False)})
    return out


AGENT_TOKEN_SECONDS = 3600


def token_client(kubeconfig: Path, token: str):
    """A CoreV1Api on the lab cluster that authenticates with ``token`` only (no client certificate)."""
    from kubernetes import client, config  # noqa: PLC0415

    cfg = client.Configuration()
    config.load_kube_config(str(kubeconfig), client_configuration=cfg, persist_config=False)
    cfg.cert_file = cfg.key_file = None
    cfg.api_key = {"authorization": f"Bearer {token}"}
    return client.CoreV1Api(client.ApiClient(cfg))


def agent_client(api, kubeconfig: Path, pod: dict, cache: dict):
    """The device-plugin pod's own identity: a token of its ServiceAccount bound to the pod (what the kubelet mounts
    into it; the API server names the pod's node in it), renewed before it expires or when the pod changes."""
    meta = pod["metadata"]
    key = meta["uid"]
    held = cache.get(key)
    if held is None or time.time() - held[0] > AGENT_TOKEN_SECONDS / 2:
        body = {"spec": {"audiences": [], "expirationSeconds": AGENT_TOKEN_SECONDS,
                         "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": key}}}
        token = api.create_namespaced_service_account_token(
            pod["spec"].get("serviceAccountName") or "default", meta["namespace"], body).status.token
        cache[key] = held = (time.time(), token_client(kubeconfig, token))
    return held[1]


def follow_chart_webhook(admission, webhooks: Informer, copy: dict) -> str | None:
    """Create or delete the lab's copy of a chart's MutatingWebhookConfiguration (its annotation
    kube-accel.lab/copy-of names the chart's) so that it exists exactly while the chart's does; what it did, or None."""
    chart = copy["metadata"]["annotations"]["kube-accel.lab/copy-of"]
    names = {h["metadata"]["name"] for h in webhooks.items()}
    if chart in names and copy["metadata"]["name"] not in names:
        admission.create_mutating_webhook_configuration(copy)
        return f"{chart} is back: lab webhook {copy['metadata']['name']} created"
    if chart not in names and copy["metadata"]["name"] in names:
        admission.delete_mutating_webhook_configuration(copy["metadata"]["name"])
        return f"{chart} is gone: lab webhook {copy['metadata']['name']} deleted"
    return None


def standin(root: Path, hosts_json: Path) -> None:
    """Loop of the HAMi device-plugin stand-in (see the module docstring)."""
    from kubernetes import client, config  # noqa: PLC0415

    gpus_of: dict[str, list[dict]] = json.loads(hosts_json.read_text())
    kubeconfig = root / "kubeconfig"
    api_client = config.new_client_from_config(str(kubeconfig))
    api = client.CoreV1Api(api_client)
    admission = client.AdmissionregistrationV1Api(api_client)
    # Written by kalab.upstream.start_hami next to hosts_json, before it starts this process.
    webhook_copy = yaml.safe_load((hosts_json.parent / "webhook.yaml").read_text())
    ready = procs_dir(root) / f"{STANDIN}.ready"
    print(f"{STANDIN}: lab stand-in for HAMi's device plugin on {sorted(gpus_of)}", flush=True)
    written: dict[str, tuple[str, str]] = {}
    tokens: dict[str, tuple] = {}
    delay = RegistrationDelay(root)
    webhooks = Informer("webhooks", admission.list_mutating_webhook_configuration)
    pod_cache = Informer("pods", api.list_pod_for_all_namespaces)
    configmaps = Informer("configmaps", api.list_config_map_for_all_namespaces)
    while True:
        try:
            if followed := follow_chart_webhook(admission, webhooks, webhook_copy):
                print(followed, flush=True)
            pods = pod_cache.items()
            plugin_nodes, agents = {}, {}
            for pod in pods:
                spec, meta = pod["spec"], pod["metadata"]
                if (meta.get("labels", {}).get("app.kubernetes.io/component") == "device-plugin"
                        and any("projecthami/hami" in c["image"] for c in spec["containers"])
                        and spec.get("nodeName") in gpus_of and pod["status"].get("phase") == "Running"):
                    plugin_nodes[spec["nodeName"]] = (meta["namespace"], meta["labels"]["app.kubernetes.io/instance"])
                    agents[spec["nodeName"]] = pod
            for node, (ns, instance) in sorted(plugin_nodes.items()):
                cms = [cm.get("data") or {} for cm in configmaps.items() if cm["metadata"]["namespace"] == ns
                       and (cm["metadata"].get("labels") or {}).get("app.kubernetes.io/instance") == instance]
                dc = next((yaml.safe_load(data["device-config.yaml"]) for data in cms
                           if "device-config.yaml" in data), None)
                if dc is None:
                    continue
                nodeconfig = next((json.loads(data["config.json"]).get("nodeconfig") or [] for data in cms
                                   if "config.json" in data), [])
                entry = next((e for e in nodeconfig if e.get("name") == node), None)
                devices = registration(gpus_of[node], dc, entry)
                value = json.dumps(devices, separators=(",", ":"))
                uid = agents[node]["metadata"]["uid"]
                # The plugin registers once its pod starts (a new pod registers again) and when its devices change.
                if written.get(node) != (uid, value) and delay.due(agents[node]):
                    # HAMi's registration (plugin/register.go:298-304), by the node's plugin pod's own token.
                    agent_client(api, kubeconfig, agents[node], tokens).patch_node(
                        node, {"metadata": {"annotations": {HAMI_REGISTER: value}}})
                    # The plugin registers deviceSplitCount devices per GPU under resourceCountName (plugin/server.go).
                    name = dc.get("nvidia", {}).get("resourceCountName", "nvidia.com/gpu")
                    set_capacity(api, node, {name: sum(d["count"] for d in devices)}, STANDIN)
                    written[node] = (uid, value)
                    print(f"registered {len(gpus_of[node])} GPUs of {node} ({instance})", flush=True)
            for pod in pods:
                meta, node = pod["metadata"], pod["spec"].get("nodeName")
                if node not in plugin_nodes or meta.get("annotations", {}).get(HAMI_BIND_PHASE) != "allocating":
                    continue
                # What the plugin's Allocate does once the kubelet asks, with the plugin pod's token: erase the
                # devices it handed out (plugin/util.go:134-139: one ";" per container left), mark the pod allocated
                # (util.go:397-400) and release the node lock the scheduler took (nodelock.go:222).
                agent = agent_client(api, kubeconfig, agents[node], tokens)
                to_allocate = meta.get("annotations", {}).get(HAMI_DEVICES_TO_ALLOCATE, "")
                agent.patch_namespaced_pod(meta["name"], meta["namespace"], {"metadata": {"annotations": {
                    HAMI_DEVICES_TO_ALLOCATE: ";" * to_allocate.count(";")}}})
                agent.patch_namespaced_pod(meta["name"], meta["namespace"],
                                           {"metadata": {"annotations": {HAMI_BIND_PHASE: "success"}}})
                n = agent.read_node(node)
                lock = (n.metadata.annotations or {}).get(HAMI_NODE_LOCK, "")
                if lock.endswith(f",{meta['namespace']},{meta['name']}"):
                    agent.patch_node(node, {"metadata": {"annotations": {HAMI_NODE_LOCK: None},
                                                         "resourceVersion": n.metadata.resource_version}})
                print(f"allocated {meta['namespace']}/{meta['name']} on {node}", flush=True)
            ready.touch()
        except Exception as exc:  # noqa: BLE001 - keep serving; the log says what went wrong
            print(f"error: {exc}", flush=True)
        time.sleep(1)


# -- the NVIDIA device-plugin stand-in, with each plugin pod's config-manager ------------------------------------


def config_manager_env(c: dict, node: str, kubeconfig: Path, srcdir: Path, dst: Path) -> dict[str, str]:
    """A config-manager container's rendered env as its pod gets it on ``node``, with what the kubelet provides moved
    to the lab: KUBECONFIG (in-cluster -> the lab's), NODE_NAME (fieldRef spec.nodeName), the ConfigMap mount
    (CONFIG_FILE_SRCDIR) and the plugin's config file (CONFIG_FILE_DST)."""
    env = {}
    for e in c.get("env", []):
        if "valueFrom" in e:
            field = e["valueFrom"].get("fieldRef", {}).get("fieldPath")
            if field != "spec.nodeName":
                raise ValueError(f"config-manager env {e['name']}: fieldRef {field!r}, the lab provides spec.nodeName")
            env[e["name"]] = node
        else:
            env[e["name"]] = e.get("value", "")
    return {**env, "KUBECONFIG": str(kubeconfig), "CONFIG_FILE_SRCDIR": str(srcdir), "CONFIG_FILE_DST": str(dst)}


def config_manager_argv(env: dict[str, str], hups: Path) -> list[str]:
    """config-manager in a PID namespace of its own (the pod's shared process namespace, which it searches for the
    process to signal) beside a process named PROCESS_TO_SIGNAL: a shell that appends a line to ``hups`` per
    SIGHUP. Killing the returned process (unshare --kill-child) ends both."""
    # The trap is set before config-manager starts (an untrapped SIGHUP would end the counter), and the counter waits
    # in the `wait` builtin, which a trapped signal interrupts at once: waiting on a foreground sleep deferred the trap
    # until the sleep ended, and on a loaded machine two signals then arrived as one.
    ready = f"{hups}.ready"
    counter = f"trap 'echo HUP >> {hups}' HUP; : > {ready}; while :; do sleep 1 & wait \\$!; done"
    script = (f"(exec -a {env.get('PROCESS_TO_SIGNAL') or 'nvidia-device-plugin'} bash -c \"{counter}\") & "
              f"until [ -e {ready} ]; do sleep 0.05; done; exec {UPSTREAM_BIN / 'config-manager'}")
    return ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "bash", "-c", script]


def plugin_resources(loaded: dict, gpu_count: int) -> dict[str, int] | None:
    """What k8s-device-plugin v0.20.0 registers with the kubelet for ``gpu_count`` whole GPUs under ``loaded``, the
    config as the plugin's loader returns it (ka-conform-deviceplugin config): nvidia.com/gpu, or for a resource
    that sharing.timeSlicing or sharing.mps replicates, its rename (or name) times its replicas
    (internal/rm/device_map.go updateDeviceMapWithReplicas). None under a MIG strategy: MIG devices need a GPU."""
    if ((loaded.get("flags") or {}).get("migStrategy") or "none") != "none":
        return None
    gpu = "nvidia.com/gpu"  # the plugin's only resource for whole GPUs (resource naming is off in v0.20.0 configs)
    for kind in ("timeSlicing", "mps"):
        for r in ((loaded.get("sharing") or {}).get(kind) or {}).get("resources") or []:
            if r["name"] == gpu:
                return {r.get("rename") or gpu: gpu_count * int(r["replicas"])}
    return {gpu: gpu_count}


def load_plugin_config(path: Path) -> dict:
    """``path`` through k8s-device-plugin's own config loader (the ka-conform-deviceplugin harness)."""
    proc = subprocess.run([str(UPSTREAM_BIN / "ka-conform-deviceplugin"), "config", str(path)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ValueError(f"the device plugin's loader refuses {path}: {proc.stderr.strip()}")
    return json.loads(proc.stdout)["config"]


def set_capacity(api, node: str, resources: dict[str, int | None], source: str) -> None:
    """Capacity and allocatable as the kubelet reports them once a device plugin registers; None removes one."""
    quantities = {k: (None if v is None else str(v)) for k, v in resources.items()}
    api.patch_node_status(node, {"status": {"capacity": quantities, "allocatable": quantities}})
    api.patch_node(node, {"metadata": {"annotations": {LAB_CAPACITY_ANNOTATION: source}}})


def gpu_resources(api, node: str) -> dict[str, str]:
    """The node's extended resources of NVIDIA's (nvidia.com/...) as its status holds them."""
    capacity = api.read_node_status(node).status.capacity or {}
    return {k: v for k, v in capacity.items() if k.startswith("nvidia.com/")}


def plugin_pods(pods: list[dict], nodes: set[str], image: str, prefer: str | None = None) -> dict[str, dict]:
    """Running device-plugin pods (app.kubernetes.io/component=device-plugin) with a container of ``image`` on
    ``nodes``, one per node: where two releases run one (the cluster play's and a chart test's), the pod of namespace
    ``prefer``, else the first by namespace and name, so the choice does not flap."""
    out = {}
    for pod in sorted(pods, key=lambda p: (p["metadata"]["namespace"] != prefer, p["metadata"]["namespace"],
                                           p["metadata"]["name"])):
        spec, meta = pod["spec"], pod["metadata"]
        if (meta.get("labels", {}).get("app.kubernetes.io/component") == "device-plugin"
                and any(image in c["image"] for c in spec["containers"])
                and spec.get("nodeName") in nodes and pod["status"].get("phase") == "Running"):
            out.setdefault(spec["nodeName"], pod)
    return out


class LabChild:
    """A process the stand-in runs for one node (``proc``, ``name``, ``log``, ``exited``), restarted by its owner once
    it has been gone a while."""

    proc: subprocess.Popen
    name: str
    log: Path
    exited: float | None

    def exited_for(self) -> float:
        """Seconds since the process exited (0 while it runs); its exit and last log lines are printed once."""
        if self.proc.poll() is None:
            return 0
        if self.exited is None:
            self.exited = time.time()
            print(f"{self.name} exited with {self.proc.returncode}:\n{last_lines(self.log, 10)}", flush=True)
        return time.time() - self.exited


class ConfigManager(LabChild):
    """One node's config-manager sidecar, run as its pod runs it (lab process config-manager-NODE)."""

    def __init__(self, root: Path, configmaps: Informer, node: str, pod: dict):
        self.node, self.uid = node, pod["metadata"]["uid"]
        spec = pod["spec"]
        (c,) = [c for c in spec["containers"] if c.get("command", [""])[0] == "config-manager"]
        (vol,) = [v for m in c.get("volumeMounts", []) if m["mountPath"] == "/available-configs"
                  for v in spec["volumes"] if v["name"] == m["name"]]
        self.configmap = (pod["metadata"]["namespace"], vol["configMap"]["name"])
        work = root / "device-plugin" / node
        shutil.rmtree(work, ignore_errors=True)
        self.srcdir, self.dst = work / "available-configs", work / "config" / "config.yaml"
        self.srcdir.mkdir(parents=True)
        self.dst.parent.mkdir()
        self.sync(configmaps)
        env = config_manager_env(c, node, root / "kubeconfig", self.srcdir, self.dst)
        self.name = f"config-manager-{node}"
        d = procs_dir(root)
        with (d / f"{self.name}.log").open("w") as out:
            self.proc = subprocess.Popen(config_manager_argv(env, work / "hups"), stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                         env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env})
        (d / f"{self.name}.pid").write_text(f"{self.proc.pid} unshare\n")
        self.log = d / f"{self.name}.log"
        self.exited: float | None = None
        print(f"{self.name} started for pod {pod['metadata']['namespace']}/{pod['metadata']['name']}", flush=True)

    def sync(self, configmaps: Informer) -> None:
        """What the kubelet does for the ConfigMap volume: one file per key, kept current."""
        ns, name = self.configmap
        found = [cm for cm in configmaps.items() if (cm["metadata"]["namespace"], cm["metadata"]["name"]) == (ns, name)]
        if not found:
            raise LookupError(f"ConfigMap {ns}/{name} of {self.node}'s plugin pod not found")
        data = found[0].get("data") or {}
        for path in self.srcdir.iterdir():
            if path.name not in data:
                path.unlink()
        for key, text in data.items():
            path = self.srcdir / key
            if not path.exists() or path.read_text() != text:
                path.write_text(text)

    def config(self) -> str | None:
        return self.dst.read_text() if self.dst.exists() else None

    def stop(self, root: Path) -> None:
        stop_one(procs_dir(root), self.name)


def start_dp_standin(root: Path, gpu_counts: dict[str, int], namespace: str,
                     mig_capacity: dict[str, dict[str, int]] | None = None) -> None:
    """The device-plugin stand-in for the fake nodes in ``gpu_counts`` (node: GPUs in its recorded snapshot); where two
    device-plugin pods share a node, it serves the one in ``namespace`` (the inventory's releases). ``mig_capacity``:
    what a node of a MIG pool started with (kalab.nodes: the inventory's promise), put back under a MIG config."""
    work = root / "device-plugin"
    work.mkdir(parents=True, exist_ok=True)
    (work / "hosts.json").write_text(json.dumps({"namespace": namespace, "gpus": gpu_counts,
                                                 "mig_capacity": mig_capacity or {}}))
    ready = procs_dir(root) / f"{DP_STANDIN}.ready"
    ready.unlink(missing_ok=True)
    start(root, DP_STANDIN, *standin_process("dp-standin", "--dir", str(root), "--inventory-json",
                                             str(work / "hosts.json")), ready.exists)


def dp_standin(root: Path, hosts_json: Path) -> None:
    """Loop of the device-plugin stand-in (see the module docstring)."""
    from kubernetes import client, config  # noqa: PLC0415

    served = json.loads(hosts_json.read_text())
    gpus_of: dict[str, int] = served["gpus"]
    mig_capacity: dict[str, dict[str, int]] = served.get("mig_capacity", {})
    api = client.CoreV1Api(config.new_client_from_config(str(root / "kubeconfig")))
    ready = procs_dir(root) / f"{DP_STANDIN}.ready"
    print(f"{DP_STANDIN}: lab stand-in for k8s-device-plugin's registration on {sorted(gpus_of)} "
          f"(preferring pods of namespace {served['namespace']})", flush=True)
    managers: dict[str, ConfigManager] = {}
    applied: dict[str, tuple[str, str, dict]] = {}
    delay = RegistrationDelay(root)
    pod_cache = Informer("pods", api.list_pod_for_all_namespaces)
    configmaps = Informer("configmaps", api.list_config_map_for_all_namespaces)
    while True:
        try:
            pods = pod_cache.items()
            running = plugin_pods(pods, set(gpus_of), "k8s-device-plugin", served["namespace"])
            for node in sorted(set(managers) - set(running)):
                managers.pop(node).stop(root)
            for node, pod in sorted(running.items()):
                manager = managers.get(node)
                # A new pod, or the sidecar exited a while ago: the kubelet restarts a failed container (with a
                # back-off); the plugin keeps the config it has meanwhile.
                if manager is None or manager.uid != pod["metadata"]["uid"] or manager.exited_for() > RESTART_AFTER:
                    if manager:
                        manager.stop(root)
                        managers.pop(node)
                    if not delay.due(pod):
                        continue
                    manager = managers[node] = ConfigManager(root, configmaps, node, pod)
                manager.sync(configmaps)
                text = manager.config()
                # A new pod registers again; the same pod again only when its config changed.
                if text is None or applied.get(node, ("", "", {}))[:2] == (manager.uid, text):
                    continue
                resources = plugin_resources(load_plugin_config(manager.dst), gpus_of[node])
                source = DP_STANDIN
                if resources is None and node in mig_capacity:
                    resources, source = mig_capacity[node], LAB_CAPACITY_FROM_INVENTORY
                # The first registration replaces whatever GPU capacity the node had (a MIG node's copy).
                before = applied[node][2] if node in applied else gpu_resources(api, node)
                if resources is not None:
                    set_capacity(api, node, {**dict.fromkeys(before), **resources}, source)
                    named = Path(os.readlink(manager.dst)).name if manager.dst.is_symlink() else "?"
                    print(f"{node}: {resources} from config {named} ({source})", flush=True)
                applied[node] = (manager.uid, text, resources or {})
            ready.touch()
        except Exception as exc:  # noqa: BLE001 - keep serving; the log says what went wrong
            print(f"error: {exc}", flush=True)
        time.sleep(1)


# -- the DRA kubelet-plugin stand-in: ResourceSlices while the driver's kubelet-plugin pod runs -------


def dra_plugin_pods(pods: list[dict], nodes: set[str]) -> dict[str, dict]:
    """Running pods of NVIDIA's DRA kubelet plugin (the chart's selector label ``<chart>-component: kubelet-plugin``
    on a pod with the driver's image; its controller Deployment shares the image) on ``nodes``, one per node."""
    out = {}
    for pod in sorted(pods, key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"])):
        spec, meta = pod["spec"], pod["metadata"]
        labels = meta.get("labels") or {}
        if (any(k.endswith("-component") and v == "kubelet-plugin" for k, v in labels.items())
                and any(DRA_DRIVER_IMAGE in c["image"] for c in spec["containers"])
                and spec.get("nodeName") in nodes and pod["status"].get("phase") == "Running"
                and not meta.get("deletionTimestamp")):
            out.setdefault(spec["nodeName"], pod)
    return out


class DraPublisher(LabChild):
    """One node's publisher (lab process dra-slices-NODE): kalab.dra.publisher, the DRA driver's own enumeration and
    ResourceSlice controller over the host's recorded NVML snapshot, writing as the node's kubelet-plugin pod (a token
    of the pod's ServiceAccount bound to the pod, renewed in the file the kubeconfig names: client-go rereads it)."""

    def __init__(self, root: Path, api, node: str, pod: dict, host: dict):
        self.node, self.uid, self.pod = node, pod["metadata"]["uid"], pod
        self.name = f"dra-slices-{node}"
        work = root / "dra" / node
        work.mkdir(parents=True, exist_ok=True)
        self.token_file = work / "token"
        self.renewed = 0.0
        self.renew(api)
        cfg = yaml.safe_load((root / "kubeconfig").read_text())
        for entry in cfg["users"]:
            entry["user"] = {"tokenFile": str(self.token_file)}
        kubeconfig = work / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(cfg, sort_keys=False))
        kubeconfig.chmod(0o600)
        d = procs_dir(root)
        self.log = d / f"{self.name}.log"
        self.log.write_text("")
        self.proc = dra.publisher(kubeconfig, node, Path(host["snapshot"]), self.log,
                                  mig_geometry=host.get("mig_geometry"))
        (d / f"{self.name}.pid").write_text(f"{self.proc.pid} {dra.HARNESS}\n")
        self.exited: float | None = None
        self.reported = False
        mig = f", MIG {host['mig_geometry']}" if host.get("mig_geometry") else ""
        print(f"{self.name} started for pod {pod['metadata']['namespace']}/{pod['metadata']['name']} "
              f"({Path(host['snapshot']).name}{mig})", flush=True)

    def renew(self, api) -> None:
        if time.time() - self.renewed < AGENT_TOKEN_SECONDS / 2:
            return
        meta = self.pod["metadata"]
        body = {"spec": {"audiences": [], "expirationSeconds": AGENT_TOKEN_SECONDS,
                         "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": self.uid}}}
        token = api.create_namespaced_service_account_token(
            self.pod["spec"].get("serviceAccountName") or "default", meta["namespace"], body).status.token
        tmp = self.token_file.with_suffix(".new")
        tmp.write_text(token)
        tmp.chmod(0o600)
        tmp.replace(self.token_file)
        self.renewed = time.time()

    def poll(self) -> float:
        """Seconds since the publisher exited (0 while it runs); its first publication and its exit are printed."""
        if not self.reported and '"published"' in self.log.read_text(errors="replace"):
            self.reported = True
            print(f"{self.node}: {last_lines(self.log, 1)}", flush=True)
        return self.exited_for()

    def stop(self, root: Path, resource_api) -> None:
        """Stop publishing and remove the node's slices of the driver: what the kubelet does once a plugin is gone
        (it wipes the ResourceSlices of a driver that unregistered)."""
        stop_one(procs_dir(root), self.name)
        resource_api.delete_collection_resource_slice(
            field_selector=f"spec.nodeName={self.node},spec.driver={DRA_DRIVER_NAME}")
        print(f"{self.name} stopped; ResourceSlices of {DRA_DRIVER_NAME} on {self.node} deleted", flush=True)


def start_dra_standin(root: Path, hosts: dict[str, dict]) -> None:
    """The DRA kubelet-plugin stand-in for the fake nodes in ``hosts`` (node: {"snapshot": recorded NVML file,
    "mig_geometry": {profile: count} or None})."""
    work = root / "dra"
    work.mkdir(parents=True, exist_ok=True)
    (work / "hosts.json").write_text(json.dumps(hosts))
    ready = procs_dir(root) / f"{DRA_STANDIN}.ready"
    ready.unlink(missing_ok=True)
    start(root, DRA_STANDIN, *standin_process("dra-standin", "--dir", str(root), "--inventory-json",
                                              str(work / "hosts.json")), ready.exists)


def dra_standin(root: Path, hosts_json: Path) -> None:
    """Loop of the DRA kubelet-plugin stand-in (see the module docstring)."""
    from kubernetes import client, config  # noqa: PLC0415

    hosts: dict[str, dict] = json.loads(hosts_json.read_text())
    api_client = config.new_client_from_config(str(root / "kubeconfig"))
    api, resource_api = client.CoreV1Api(api_client), client.ResourceV1Api(api_client)
    ready = procs_dir(root) / f"{DRA_STANDIN}.ready"
    print(f"{DRA_STANDIN}: lab stand-in for the ResourceSlices of NVIDIA's DRA kubelet plugin on {sorted(hosts)} "
          f"(the driver's own enumeration and publishing code over recorded NVML, kalab.dra)", flush=True)
    publishers: dict[str, DraPublisher] = {}
    pod_cache = Informer("pods", api.list_pod_for_all_namespaces)
    delay = RegistrationDelay(root)
    while True:
        try:
            pods = pod_cache.items()
            running = dra_plugin_pods(pods, set(hosts))
            for node in sorted(set(publishers) - set(running)):
                publishers.pop(node).stop(root, resource_api)
            for node, pod in sorted(running.items()):
                pub = publishers.get(node)
                # A new pod, or the plugin exited a while ago: the kubelet restarts a failed container.
                if pub is None or pub.uid != pod["metadata"]["uid"] or pub.poll() > RESTART_AFTER:
                    if pub:
                        pub.stop(root, resource_api)
                        publishers.pop(node)
                    if not delay.due(pod):
                        continue
                    pub = publishers[node] = DraPublisher(root, api, node, pod, hosts[node])
                pub.renew(api)
                pub.poll()
            ready.touch()
        except Exception as exc:  # noqa: BLE001 - keep serving; the log says what went wrong
            print(f"error: {exc}", flush=True)
        time.sleep(1)


# -- the exporter stand-in ---------------------------------------------------------------------------------------


def collectors(src: Path) -> tuple[dict[str, tuple[str, str]], list[str]]:
    """Counters of the collectors file: metric -> (type, help), and the label-type fields."""
    counters, labels = {}, []
    for raw in (src / "etc" / COLLECTORS).read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, kind, help_text = (f.strip() for f in line.split(",", 2))
        if kind == "label":
            labels.append(name)
        else:
            counters[name] = (kind, help_text)
    return counters, labels


def gpu_values(gpu: dict, util: float, xid: int) -> dict[str, float]:
    """Plausible readings for a utilisation: memory, clock, power and temperature follow it."""
    total = gpu["memory_total_mib"]
    used = round(min(total, 900 + util / 100 * 0.7 * total))
    return {"DCGM_FI_DEV_GPU_UTIL": round(util), "DCGM_FI_DEV_FB_USED": used, "DCGM_FI_DEV_FB_FREE": total - used,
            "DCGM_FI_DEV_SM_CLOCK": 210 if util < 1 else round(1095 + 3.15 * util),
            "DCGM_FI_DEV_POWER_USAGE": round(55 + 3.4 * util, 3), "DCGM_FI_DEV_GPU_TEMP": round(31 + 0.42 * util),
            "DCGM_FI_DEV_XID_ERRORS": xid}


def idle_wave(node: str, index: int, now: float) -> float:
    phase = (sum(map(ord, node)) + 7 * index) % 60
    return max(0.0, 18 + 14 * math.sin(2 * math.pi * (now + phase) / 90))


class Exporter:
    """State of the stand-in: pods per GPU (the kubelet's device assignment) and the text format per node."""

    def __init__(self, spec: dict, counters: dict, label_fields: list[str]):
        self.spec, self.counters, self.label_fields = spec, counters, label_fields
        self.assigned: dict[str, dict[str, list[int]]] = {n: {} for n in spec["nodes"]}  # node -> pod uid -> GPUs
        self.pods: dict[str, dict[str, tuple[str, str, str]]] = {n: {} for n in spec["nodes"]}
        self.lock = threading.Lock()

    def sync(self, pods: list[dict]) -> None:
        """Assign GPUs to Running pods that request nvidia.com/gpu, least-used GPU first, kept while they run."""
        with self.lock:
            for node, conf in self.spec["nodes"].items():
                here = {}
                for pod in pods:
                    if pod["spec"].get("nodeName") != node or pod.get("status", {}).get("phase") != "Running":
                        continue
                    for c in pod["spec"]["containers"]:
                        want = int(c.get("resources", {}).get("limits", {}).get(MAPPED_RESOURCE, 0) or 0)
                        if want:
                            here[pod["metadata"]["uid"]] = (want, (pod["metadata"]["namespace"],
                                                                   pod["metadata"]["name"], c["name"]))
                            break
                assigned = {uid: gpus for uid, gpus in self.assigned[node].items() if uid in here}
                for uid, (want, _who) in sorted(here.items(), key=lambda kv: kv[1][1]):
                    if uid in assigned:
                        continue
                    use = [sum(i in g for g in assigned.values()) for i in range(len(conf["gpus"]))]
                    assigned[uid] = sorted(sorted(range(len(use)), key=lambda i: (use[i], i))[:want])
                self.assigned[node] = assigned
                self.pods[node] = {uid: who for uid, (_w, who) in here.items()}

    def render(self, node: str, load: dict, now: float) -> str:
        conf = self.spec["nodes"][node]
        with self.lock:
            by_gpu: dict[int, list[tuple[str, str, str]]] = {}
            for uid, gpus in self.assigned[node].items():
                for i in gpus:
                    by_gpu.setdefault(i, []).append(self.pods[node][uid])
        series: dict[str, list[str]] = {m: [] for m in SERVED}
        extra = "".join(f',{f}="{self.spec["driver_version"]}"' for f in self.label_fields
                        if f == "DCGM_FI_DRIVER_VERSION")
        for gpu in conf["gpus"]:
            i = gpu["index"]
            users = sorted(by_gpu.get(i, []))
            loads = [load.get("utilization", {})[ns] for ns, _p, _c in users if ns in load.get("utilization", {})]
            util = max(loads) if loads else (idle_wave(node, i, now) if not users else 5.0)
            values = gpu_values(gpu, util, int(load.get("xid", {}).get(f"{node}/{i}", 0)))
            base = (f'gpu="{i}",UUID="{gpu["uuid"]}",pci_bus_id="{gpu["pci_bus_id"]}",device="nvidia{i}",'
                    f'modelName="{gpu["name"]}",Hostname="{node}"{extra}')
            attrs = [f',container="{c}",namespace="{ns}",pod="{p}"' for ns, p, c in users] or [""]
            for metric in SERVED:
                series[metric] += [f"{metric}{{{base}{a}}} {values[metric]}" for a in attrs]
        out = []
        for metric in SERVED:
            kind, help_text = self.counters[metric]
            out += [f"# HELP {metric} {help_text}", f"# TYPE {metric} {kind}", *series[metric]]
        return "\n".join(out) + "\n"


def exporter(spec_file: Path) -> None:
    """Loop of the DCGM exporter stand-in (see the module docstring)."""
    from kubernetes import client, config  # noqa: PLC0415

    spec = json.loads(spec_file.read_text())
    state = Exporter(spec, spec["counters"], spec["label_fields"])
    load_file = Path(spec["load"])
    api = client.CoreV1Api(config.new_client_from_config(spec["kubeconfig"]))

    def handler_for(node: str):
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                if self.path != "/metrics":
                    self.send_error(404)
                    return
                load = json.loads(load_file.read_text()) if load_file.exists() else {}
                body = state.render(node, load, time.time()).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):  # quiet: Prometheus scrapes every second
                pass
        return Handler

    for node, conf in spec["nodes"].items():
        server = ThreadingHTTPServer(("127.0.0.1", conf["port"]), handler_for(node))
        threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"{EXPORTER}: lab stand-in for the DCGM exporter on {sorted(spec['nodes'])}", flush=True)
    ready = spec_file.parent / "exporter.ready"
    pod_cache = Informer("pods", api.list_pod_for_all_namespaces)
    while True:
        try:
            pods = pod_cache.items()
            state.sync(pods)
            ready.touch()
        except Exception as exc:  # noqa: BLE001 - keep serving; the log says what went wrong
            print(f"error: {exc}", flush=True)
        time.sleep(1)


def main() -> None:
    parser = argparse.ArgumentParser(description="a lab stand-in as a lab process (see the module docstring)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    for cmd in ("standin", "dp-standin", "dra-standin"):
        p = sub.add_parser(cmd)
        p.add_argument("--dir", required=True)
        p.add_argument("--inventory-json", required=True)
    sub.add_parser("exporter").add_argument("spec")
    args = parser.parse_args()
    if args.cmd == "exporter":
        exporter(Path(args.spec))
    else:
        loop = {"standin": standin, "dp-standin": dp_standin, "dra-standin": dra_standin}[args.cmd]
        loop(Path(args.dir), Path(args.inventory_json))


if __name__ == "__main__":
    main()
