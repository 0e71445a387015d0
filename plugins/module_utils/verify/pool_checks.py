# Copyright: kube-accel contributors
# Apache License 2.0
"""Checks that a pool's nodes offer what the inventory promised, and the summary table of the verify play."""

from __future__ import annotations

from typing import Any

from ansible_collections.kube_accel.gpu.plugins.module_utils.common.constants import (
    DRA_DRIVER_NAME,
    GPU_OPERATOR_VERSION,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm import pool_charts
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import pools as pool_model

FAKE_NODE_ANNOTATION = "kwok.x-k8s.io/node"
# On a fake node (lab): where its GPU capacity came from. The lab's device-plugin stand-ins write the capacity the
# upstream plugins would register from what kube-accel deployed (node label, ConfigMaps) and mark it with their
# name; "inventory" marks capacity the lab copied from the inventory (MIG and gpu-manager pools, or a lab without
# its stand-ins), which verify does not count as evidence.
LAB_CAPACITY_ANNOTATION = "kube-accel.lab/capacity"
LAB_CAPACITY_FROM_INVENTORY = "inventory"


# The GPU Operator's operand DaemonSets kube-accel leaves to it (gpu-operator v26.7.0 assets/state-*/ names).
OPERATOR_DCGM_EXPORTER = "nvidia-dcgm-exporter"
OPERATOR_MIG_MANAGER = "nvidia-mig-manager"


def operator_operands(settings: dict[str, Any]) -> dict[str, bool]:
    """Which of the GPU Operator's operands kube-accel means it to run on a pool's nodes: the MIG manager where it
    owns the MIG layout, the DCGM exporter on every pool but VM passthrough (whose GPUs have no driver)."""
    return {OPERATOR_MIG_MANAGER: pool_model.operator_mig(settings),
            OPERATOR_DCGM_EXPORTER: not pool_model.setting_on(settings, "accel_vfio_passthrough")}


def expected_pools(pools: list[dict[str, Any]], releases: list[dict[str, Any]],
                   gpu_operator: bool = False) -> list[dict[str, Any]]:
    """The verify module's pool list: per pool, its release, the labels and resources it promises, the Job request
    and, with ``gpu_operator``, the operator's operands meant to run there.

    ``pools``: plan.pools.collect_pools entries with gpu_count/gpu_memory_mib; ``releases``: their
    helm.pool_charts.pool_releases.
    """
    by_pool = {pool: r["name"] for r in releases for pool in r["pools"]}
    hami = {pool: (r["values"].get("hami") or {}).get("schedulerName", "hami-scheduler")
            for r in releases if r["key"] == "vgpu-hami" for pool in r["pools"]}
    # The resource HAMi's device plugin registers per node (resourceCountName), which HAMi's scheduler requires.
    hami_count = {pool: ((r["values"].get("hami") or {}).get("resourceNames") or {}).get("count", "nvidia.com/gpu")
                  for r in releases if r["key"] == "vgpu-hami" for pool in r["pools"]}
    # The release's RuntimeClass (pgpu, mps, timeslice): their device plugins hand GPUs out by volume-mounts, which
    # only the NVIDIA runtime reads, and runc is the default runtime there (roles/container_toolkit).
    runtime_class = {pool: r["values"]["runtimeClassName"]
                     for r in releases if r["values"].get("runtimeClassName") for pool in r["pools"]}
    out = []
    for pool in pools:
        settings = pool["settings"]
        # A dra pool's nodes advertise no extended resource (no nvidia.com/gpu: the DRA driver publishes its GPUs in
        # ResourceSlices), so nothing is expected in allocatable there; its evidence is allocated claims.
        expected = pool_model.advertised_resources(settings, pool.get("gpu_count", 0), pool.get("gpu_memory_mib", 0))
        if not expected and settings["accel_mode"] != "dra":
            # No GPU facts for this pool: the resource must still be there, in any positive quantity.
            expected = dict.fromkeys(pool_model.advertised_resources(settings, 1, 16384), 0)
        out.append({
            "pool": pool["pool"],
            "mode": settings["accel_mode"],
            "release": by_pool[pool["pool"]],
            "nodes": pool["hosts"],
            "labels": pool_model.node_labels(settings),
            "resources": expected,
            "request": pool_model.request_for(settings),
            **({"scheduler_name": hami[pool["pool"]], "hami_count": hami_count[pool["pool"]]}
               if pool["pool"] in hami else {}),
            **({"runtime_class": runtime_class[pool["pool"]]} if pool["pool"] in runtime_class else {}),
            # HAMi's webhook takes every nvidia.com/gpu pod (docs/modes/vgpu.md, "HAMi and whole-GPU pools").
            **({"pod_labels": {"hami.io/webhook": "ignore"}} if hami and pool["pool"] not in hami else {}),
            **({"operands": operator_operands(settings)} if gpu_operator else {}),
            **({"dra": dra_expected(pool)} if settings["accel_mode"] == "dra" else {}),
        })
        if settings["accel_mode"] == "dra":
            # The DaemonSet pods a dra node must run are NVIDIA's DRA kubelet plugin's (kube-accel's own dra release
            # holds only DeviceClasses and claim templates).
            out[-1]["release"] = pool_charts.dra_driver_release()
    return out


# Who publishes a node's ResourceSlices: on a real node the DRA driver's kubelet plugin; a kwok fake node (the lab) has
# no kubelet, and its slices come from the lab's stand-in, which runs the plugin's own enumeration and publishing code
# over the host's recorded NVML snapshot (tests/conformance/go/dra-slices, scripts/kalab/dra.py).
DRA_KUBELET_PLUGIN = "the DRA driver's kubelet plugin"
DRA_SLICES_STANDIN = "dra-kubelet-plugin-standin (the driver's enumeration and publishing over recorded NVML)"


def dra_expected(pool: dict[str, Any]) -> dict[str, Any]:
    """What a dra pool's verify checks: the DRA driver's ResourceSlices on its nodes and a claim from its
    ResourceClaimTemplate allocated on one of its GPUs (charts/dra-pools)."""
    name = pool_charts.dra_device_class(pool["pool"])
    return {"device_class": name, "claim_template": name, "driver": DRA_DRIVER_NAME,
            "gpu_uuids": sorted(pool.get("gpu_uuids") or [])}


def dra_slice_problems(node: str, slices: list[dict[str, Any]], driver: str, fake: bool = False
                       ) -> tuple[list[str], str]:
    """The driver's ResourceSlices of one node (resource.k8s.io/v1 objects): problems, and who published them
    (``fake``: a kwok node, whose slices only the lab's stand-in publishes)."""
    mine = [s for s in slices if s["spec"].get("driver") == driver and s["spec"].get("nodeName") == node]
    if not any(s["spec"].get("devices") for s in mine):
        return [f"{node}: no ResourceSlice with devices from {driver}"], ""
    return [], DRA_SLICES_STANDIN if fake else DRA_KUBELET_PLUGIN


def dra_claim_problems(pool: str, claims: list[dict[str, Any]], slices: list[dict[str, Any]],
                       expected: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The verify Job's ResourceClaims (resource.k8s.io/v1): each must be allocated by the driver, on devices that
    the ResourceSlices list with one of the pool's GPU UUIDs (uuid, or parentUUID for a MIG device). Returns the
    problems and the allocated devices as "node/device"."""
    driver = expected["driver"]
    devices = {(s["spec"]["pool"]["name"], d["name"]): d for s in slices if s["spec"].get("driver") == driver
               for d in s["spec"].get("devices") or []}
    problems, allocated = [], []
    if not claims:
        return [f"pool {pool}: the verify Job's pod has no ResourceClaim"], []
    for claim in claims:
        name = claim["metadata"]["name"]
        results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
        if not results:
            problems.append(f"pool {pool}: ResourceClaim {name} is not allocated")
        for r in results:
            device = devices.get((r.get("pool"), r.get("device")))
            attrs = (device or {}).get("attributes") or {}
            uuid = (attrs.get("parentUUID") or attrs.get("uuid") or {}).get("string")
            if r.get("driver") != driver or device is None:
                problems.append(f"pool {pool}: ResourceClaim {name} got {r.get('driver')} device "
                                f"{r.get('pool')}/{r.get('device')}, which no ResourceSlice of {driver} lists")
            elif uuid not in expected["gpu_uuids"]:
                problems.append(f"pool {pool}: ResourceClaim {name} got {r.get('pool')}/{r.get('device')} (GPU "
                                f"{uuid}), not a GPU of the pool")
            else:
                allocated.append(f"{r.get('pool')}/{r.get('device')}")
    return problems, allocated


def label_problems(node: str, labels: dict[str, str], expected: dict[str, str]) -> list[str]:
    return [
        f"{node}: label {key}={labels.get(key)!r}, expected {value!r}"
        for key, value in sorted(expected.items())
        if labels.get(key) != value
    ]


def allocatable_problems(node: str, allocatable: dict[str, str], expected: dict[str, int]) -> list[str]:
    problems = []
    for name, quantity in sorted(expected.items()):
        have = allocatable.get(name)
        if have is None:
            problems.append(f"{node}: allocatable has no {name} (expected {quantity})")
        elif quantity and str(have) != str(quantity):
            problems.append(f"{node}: allocatable {name}={have}, expected {quantity}")
        elif not quantity and str(have) in ("0", ""):
            problems.append(f"{node}: allocatable {name}={have}, expected more than 0")
    return problems


def daemon_problems(node: str, pods: list[dict[str, Any]]) -> list[str]:
    """``pods``: the release's DaemonSet pods on this node, as {name, ready}."""
    if not pods:
        return [f"{node}: no device-plugin DaemonSet pod of the pool's release"]
    if not any(p["ready"] for p in pods):
        return [f"{node}: DaemonSet pod(s) {', '.join(p['name'] for p in pods)} not Ready"]
    return []


def operand_problems(node: str, pods: list[dict[str, Any]], operands: dict[str, bool]) -> list[str]:
    """``pods``: the GPU Operator's operand pods on this node, as {name, daemonset, ready}; ``operands``: which
    DaemonSets are meant to run here."""
    problems = []
    for daemonset, wanted in sorted(operands.items()):
        mine = [p for p in pods if p["daemonset"] == daemonset]
        if wanted and not mine:
            problems.append(f"{node}: no {daemonset} pod (the GPU Operator should run it here)")
        elif wanted and not any(p["ready"] for p in mine):
            problems.append(f"{node}: {daemonset} pod(s) {', '.join(p['name'] for p in mine)} not Ready")
        elif not wanted and mine:
            problems.append(f"{node}: {daemonset} pod {mine[0]['name']} runs here; kube-accel keeps it off this pool")
    return problems


def job_manifest(name: str, namespace: str, pool_label: str, pool: str, request: dict[str, str],
                 image: str, command: list[str], taint_key: str | None,
                 pod_labels: dict[str, str] | None = None, runtime_class: str | None = None,
                 claim_template: str | None = None) -> dict[str, Any]:
    """A short Job that asks for the pool's resource (a dra pool: one device by its ResourceClaimTemplate) and can
    only land on the pool's nodes, run by the pool's RuntimeClass where it has one."""
    spec: dict[str, Any] = {
        **({"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": claim_template}]}
           if claim_template else {}),
        **({"runtimeClassName": runtime_class} if runtime_class else {}),
        "restartPolicy": "Never",
        "nodeSelector": {pool_label: pool},
        "automountServiceAccountToken": False,
        "containers": [{
            "name": "probe",
            "image": image,
            "command": command,
            "resources": {"limits": dict(request), **({"claims": [{"name": "gpu"}]} if claim_template else {})},
            "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True, "runAsUser": 65534,
                                "capabilities": {"drop": ["ALL"]}},
        }],
    }
    if taint_key:
        spec["tolerations"] = [{"key": taint_key, "operator": "Equal", "value": pool, "effect": "NoSchedule"}]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"app.kubernetes.io/part-of": "kube-accel", "app.kubernetes.io/component": "verify"}},
        "spec": {"backoffLimit": 0, "ttlSecondsAfterFinished": 300, "activeDeadlineSeconds": 300,
                 "template": {"metadata": {"labels": {"app.kubernetes.io/component": "verify", **(pod_labels or {})}},
                              "spec": spec}},
    }


# HAMi v2.10.0's marks on a pod it scheduled (pkg/util/types.go:21, pkg/device/nvidia/device.go:168).
HAMI_ASSIGNED_NODE = "hami.io/vgpu-node"
HAMI_DEVICES_ALLOCATED = "hami.io/vgpu-devices-allocated"
# What verify prints in the operator column when the GPU Operator's chart was not installed (its role said why).
NOT_INSTALLED = "not installed"
# What verify prints in the allocatable column of a pool whose fake nodes' capacity the lab copied from the
# inventory: never compared.
STAND_IN = "stand-in"


def hami_problems(pool: str, pod: dict[str, Any], scheduler_name: str) -> list[str]:
    """``pod``: {name, scheduler, node, annotations} of a verify Job's pod on a HAMi pool. HAMi's webhook must have
    set its scheduler, and HAMi's extender must have chosen the GPUs (its annotations) for the node it bound."""
    problems = []
    if pod["scheduler"] != scheduler_name:
        problems.append(f"pool {pool}: verify pod {pod['name']} has schedulerName {pod['scheduler']!r}, expected "
                        f"{scheduler_name!r} (HAMi's webhook did not mutate it)")
    annotations = pod.get("annotations") or {}
    if not pod["node"] or annotations.get(HAMI_ASSIGNED_NODE) != pod["node"] or not annotations.get(
            HAMI_DEVICES_ALLOCATED):
        problems.append(f"pool {pool}: verify pod {pod['name']} carries no HAMi device assignment for node "
                        f"{pod['node']} ({HAMI_ASSIGNED_NODE}={annotations.get(HAMI_ASSIGNED_NODE)!r})")
    return problems


def evidence(fake_nodes: int, total_nodes: int, hami: bool, inventory_nodes: int = 0,
             operator: bool = False, dra_nodes: int = 0) -> list[str]:
    """Where each check's evidence comes from: upstream code (which component) or a lab stand-in (which one).
    kube-accel's own output (labels, releases, Jobs) is what is checked; no check compares a lab setting with
    itself. ``inventory_nodes``: fake nodes whose capacity the lab copied from the inventory (not checked);
    ``dra_nodes``: fake nodes of dra pools (no device plugin: the slices column names their publisher)."""
    real = total_nodes - fake_nodes
    registered = fake_nodes - inventory_nodes - dra_nodes
    lines = ["evidence (upstream: code kube-accel runs but does not write"
             + ("; stand-in: the lab's replacement for what needs a GPU):" if fake_nodes else "):"),
             "  labels       upstream kube-apiserver: the labels the cluster play wrote, read back",
             "  daemonset    upstream kube-controller-manager DaemonSet controller placed the releases' pods; Ready "
             + ("from the kubelet" if not fake_nodes else
                "from kwok (stand-in for the kubelet)" + (" and the kubelet" if real else ""))]
    allocatable = []
    if real:
        allocatable.append("upstream device plugins (registered with the kubelet) on the real node(s)")
    if registered:
        allocatable.append(
            f"on {registered} fake node(s) the lab's device-plugin stand-ins (for the plugins' kubelet registration) "
            "wrote what upstream code chose from kube-accel's releases: config-manager (k8s-device-plugin v0.20.0) "
            "following the node's label, the config read by the plugin's own loader; HAMi's device config")
    if inventory_nodes:
        allocatable.append(f"not checked on the {inventory_nodes} fake node(s) whose capacity scripts/lab.py copied "
                           "from the inventory (MIG and gpu-manager pools: no stand-in registers them)")
    lines.append("  allocatable  " + "; ".join(allocatable))
    lines.append("  job          upstream kube-scheduler placed the Job's pod on the pool; "
                 + ("run by kwok (stand-in for the kubelet): no GPU ran the Jobs" if fake_nodes else
                    "run by the kubelet on the pool's GPUs"))
    if operator:
        lines.append(f"  operator     upstream GPU Operator {GPU_OPERATOR_VERSION} controller: from the ClusterPolicy "
                     "kube-accel installed and the node labels, it labelled the nodes gpu.deploy.* and created its "
                     "operand DaemonSets; kube-controller-manager placed their pods"
                     + ("; Ready from kwok (stand-in for the kubelet)" if fake_nodes else ""))
    if hami:
        lines.append("  hami         upstream HAMi v2.10.0: its webhook set schedulerName, its extender "
                     "(hami-scheduler) chose the GPUs and bound the pod"
                     + (" from the node registration of hami-device-plugin-standin (lab stand-in for HAMi's "
                        "device plugin)" if fake_nodes else ""))
    return lines


def render_table(rows: list[dict[str, Any]], fake_nodes: int, total_nodes: int, inventory_nodes: int = 0,
                 dra_nodes: int = 0) -> str:
    headers = ["pool", "mode", "nodes", "labels", "daemonset", "allocatable", "job", "result"]
    if any("operator" in r for r in rows):
        headers.insert(headers.index("job"), "operator")
    if any("hami" in r for r in rows):
        headers.insert(-1, "hami")
    if any("registered" in r for r in rows):
        # HAMi pools: every node's registration as HAMi's scheduler reads it, before the Job.
        headers.insert(headers.index("job"), "registered")
    if any("slices" in r for r in rows):
        # dra pools: who published the nodes' ResourceSlices (the driver's kubelet plugin, or the lab's stand-in).
        headers.insert(headers.index("job"), "slices")
    table = [headers] + [[str(r.get(h, "")) for h in headers] for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(headers))]
    # Indexed, not zip(strict=True): module_utils run on the hosts' Python, 3.9 on RHEL 9.
    lines = ["  ".join(row[i].ljust(widths[i]) for i in range(len(headers))).rstrip() for row in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if fake_nodes:
        lines.append(f"note: {fake_nodes} of {total_nodes} nodes are kwok fakes (lab): no GPU ran the Jobs.")
    lines += evidence(fake_nodes, total_nodes, any("hami" in r for r in rows), inventory_nodes,
                      any(r.get("operator") not in (None, NOT_INSTALLED) for r in rows), dra_nodes)
    if any("registered" in r for r in rows):
        lines.append("  registered   HAMi pools: each node's registration judged by HAMi v2.10.0's own conditions (its "
                     "annotation decodes to devices, its count resource allocatable) before the Job; a Job whose pod "
                     "stays unschedulable once they hold is started again")
    if any("slices" in r for r in rows):
        lines.append("  slices       the DRA driver's ResourceSlices of the pool's nodes, publisher named per row; the "
                     "Job's ResourceClaim (from the pool's template) allocated by upstream kube-scheduler on one of "
                     "the pool's GPUs in them")
    return "\n".join(lines)
