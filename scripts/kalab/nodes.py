"""Node kinds of the lab, each as a fresh cluster's node: a fake GPU node (kwok) per GPU host of the inventory, with
the labels gpu-feature-discovery would publish for its recorded GPUs; a fake control-plane node per kube_control_plane
host (role label and NoSchedule taint as kubeadm sets them: where the charts' cluster components run). Which GPU
capacity a GPU node starts with is the lab's capacity policy (capacity_by_standin): none where a stand-in
(kalab.standins) registers its device plugin, else the inventory's promise, marked so that verify does not count it."""

from __future__ import annotations

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import pools as accel_pools
from ansible_collections.kube_accel.gpu.plugins.module_utils.verify.pool_checks import (
    LAB_CAPACITY_ANNOTATION,
    LAB_CAPACITY_FROM_INVENTORY,
)

from kalab.site import NVML_DATA, Site, gpu_summary, log

# Node API calls in flight while applying fake nodes: 1,000 nodes in seconds, not minutes.
NODE_WORKERS = 16


def capacity_by_standin(settings: dict) -> bool:
    """Whether a device-plugin stand-in writes this pool's GPU capacity once its plugin pod runs
    (kalab.standins): NVIDIA's plugin without MIG (pgpu, mps, timeslice) and HAMi's."""
    if settings["accel_mode"] == "vgpu":
        return settings["accel_vgpu_backend"] == "hami"
    return not accel_pools.mig_enabled(settings)


def inventory_capacity(settings: dict) -> dict[str, int]:
    """The capacity the inventory promises a node of this pool (``settings``: accel_pools.pool_settings) for its
    recorded GPUs: what a node starts with where no stand-in registers a device plugin (not evidence)."""
    count, _product, memory = gpu_summary(NVML_DATA / f"{settings['accel_lab_gpu']}.json")
    return accel_pools.advertised_resources(settings, count, memory)


def node_manifest(name: str, hostvars: dict, standins: bool = True) -> dict:
    """A fake node as a fresh cluster's node: no kube-accel labels (the cluster play sets them) and, where a lab
    stand-in will register its device plugin (``standins``, capacity_by_standin), no GPU capacity either. The
    gpu-feature-discovery labels stand in for GFD (recorded NVML snapshot). Other nodes get the capacity the
    inventory promises, marked so that verify does not count it as evidence."""
    settings = accel_pools.pool_settings(hostvars)
    count, product, memory = gpu_summary(NVML_DATA / f"{settings['accel_lab_gpu']}.json")
    from_inventory = not (standins and capacity_by_standin(settings))
    resources = {k: str(v) for k, v in inventory_capacity(settings).items() if from_inventory}
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
