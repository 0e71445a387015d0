#!/usr/bin/python
# Copyright: kube-accel contributors
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
---
module: accel_pool_verify
short_description: Prove that each GPU pool offers what the inventory promised
description:
  - Per pool, reads the nodes back and checks their labels, that the pool's release runs a Ready DaemonSet
    pod on each node, and that each node's allocatable shows the resource the mode promises.
  - Then runs one short Job per pool requesting that pool's resource, all pools' Jobs at once, and checks that each
    lands on its pool and completes. The Jobs are deleted afterwards, so the cluster is left as it was and the
    module reports no change.
  - On a pool with C(scheduler_name) (HAMi pools), the Job's pod must carry HAMi's marks, proving HAMi's webhook
    and scheduler extender handled it.
  - With O(operator_namespace), the GPU Operator's operand pods (its DCGM exporter and MIG manager DaemonSets) must
    run exactly on the nodes of the pools whose C(operands) say so; when the operator's chart is not installed
    there (no Deployment in that namespace) the column says so and nothing is checked.
  - Nodes, DaemonSet pods, allocatable and operands are read again until they pass or O(settle_timeout) runs out,
    since a device plugin registers its resources a moment after its pod is Ready.
  - Before the Jobs, each pool's scheduler path must be ready the way its scheduler reads it, within
    O(settle_timeout). On HAMi pools every node's registration as HAMi's scheduler decodes it (column C(registered)),
    on dra pools the driver's ResourceSlices of every node (column C(slices)).
  - On a HAMi pool, a Job whose pod stays unschedulable for 10 s while every node's registration holds is started
    again (HAMi's scheduler reads registrations on its own 15 s clock, and kube-scheduler does not retry a pod an
    extender refused when a node's annotations change; it does retry on allocatable and ResourceSlice changes, so
    other pools' Jobs are left to it); the C(job) column counts the attempts.
  - On kwok fake nodes (lab), capacity the lab copied from the inventory (annotation C(kube-accel.lab/capacity=inventory))
    is not checked; capacity the lab's device-plugin stand-ins wrote from what kube-accel deployed is.
  - The summary says where each check's evidence comes from (upstream component or lab stand-in).
  - Every check runs; the module fails at the end with all problems and the summary table.
version_added: "0.1.0"
author: kube-accel contributors (@kube-accel)
options:
  pools:
    description:
      - 'List of pools, each with C(pool), C(mode), C(release), C(nodes), C(labels), C(resources) and C(request).'
      - C(resources) maps a resource name to the expected allocatable quantity per node (0 means any positive quantity).
      - Optional C(scheduler_name) (HAMi pools), the scheduler HAMi's webhook must set on the Job's pod.
      - Optional C(hami_count) (HAMi pools), the resource HAMi's device plugin registers (its resourceCountName). A
        node's registration counts as HAMi's scheduler reads it only with this resource allocatable.
      - Optional C(pod_labels), extra labels of the Job's pod (other pools in a cluster with HAMi carry
        hami.io/webhook=ignore, which HAMi's webhook honours only in the release namespace the Jobs run in; workloads
        elsewhere run in namespaces an administrator labels so).
      - Optional C(runtime_class), the RuntimeClass the Job's pod names in C(runtimeClassName), the one the pool's
        release runs its agents with (pgpu, mps and timeslice pools, whose device plugins hand GPUs out by
        volume-mounts, which only the NVIDIA runtime reads). None when omitted.
      - Optional C(operands) maps a GPU Operator operand DaemonSet name to whether it must run on the pool's nodes
        (checked with O(operator_namespace)).
    type: list
    elements: dict
    required: true
  namespace:
    description: Namespace of the releases and of the verify Jobs.
    type: str
    default: kube-accel
  pool_label:
    description: Label key that selects a pool's nodes.
    type: str
    required: true
  taint_key:
    description: Taint key of pool taints, tolerated by the Jobs; none when empty.
    type: str
  run_jobs:
    description: Schedule the verify Jobs.
    type: bool
    default: true
  job_image:
    description: Image of the verify Jobs (pull from your mirror on air-gapped sites).
    type: str
    default: nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04
  job_command:
    description: Command of the verify Jobs.
    type: list
    elements: str
    default: [nvidia-smi, -L]
  job_timeout:
    description: Seconds to wait for the Jobs to complete. Every pool's Job is created before any is waited for, so
      they run side by side; each Job is read at least once, also after the time ran out while another pool's Job
      was waited for, so a pool's result is its own.
    type: int
    default: 120
  settle_timeout:
    description: Seconds to keep reading the nodes and pods back until labels, DaemonSet pods and allocatable pass.
    type: int
    default: 180
  operator_namespace:
    description: Namespace of the GPU Operator whose operands are checked; none when omitted.
    type: str
  releases:
    description:
      - The releases the cluster play keeps (C(namespace/name)). Given, every release kube-accel owns (its ownership
        record C(kube-accel-owned) in O(namespace), and the pool release names there) that is still deployed but not
        listed fails the verification as a leftover.
    type: list
    elements: str
extends_documentation_fragment:
  - kube_accel.gpu.kube_client
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: In check mode the read-only checks run and no Job is created.
  diff_mode:
    support: none
  platform:
    support: full
    platforms: posix
requirements:
  - kubernetes (Python client)
"""

EXAMPLES = r"""
- name: Verify the pools
  kube_accel.gpu.accel_pool_verify:
    kubeconfig: .lab/kubeconfig
    pool_label: kube-accel.io/pool
    pools:
      - pool: mps
        mode: mps
        release: kube-accel-mps
        nodes: [lab-mps-0]
        labels: {nvidia.com/mps.capable: "true"}
        resources: {nvidia.com/gpu: 4}
        request: {nvidia.com/gpu: "1"}
"""

RETURN = r"""
rows:
  description: One result row per pool.
  returned: always
  type: list
  elements: dict
table:
  description: The summary table as text.
  returned: always
  type: str
problems:
  description: Every failed check.
  returned: always
  type: list
  elements: str
fake_nodes:
  description: How many of the checked nodes are kwok fakes.
  returned: always
  type: int
"""

import contextlib
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kube_accel.gpu.plugins.module_utils.cluster.client import KUBE_ARGUMENT_SPEC, api_client
from ansible_collections.kube_accel.gpu.plugins.module_utils.common.constants import (
    OWNERSHIP_CONFIGMAP,
    POOL_DERIVED_NAMES,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm.ownership import stale
from ansible_collections.kube_accel.gpu.plugins.module_utils.verify.pool_checks import (
    FAKE_NODE_ANNOTATION,
    LAB_CAPACITY_ANNOTATION,
    LAB_CAPACITY_FROM_INVENTORY,
    NOT_INSTALLED,
    STAND_IN,
    allocatable_problems,
    daemon_problems,
    dra_claim_problems,
    dra_slice_problems,
    hami_problems,
    job_manifest,
    label_problems,
    operand_problems,
    render_table,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.verify.scheduling import (
    RETRY_AFTER_S,
    hami_registration_problems,
    retry_due,
)

try:
    from kubernetes import client, watch
    from kubernetes.client.exceptions import ApiException
except ImportError:
    pass  # api_client() reports the missing library


def pod_ready(pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))


def start_job(batch, core, p, pool) -> dict:
    """Create the pool's verify Job (after its predecessor of an earlier run is gone); what finish_job needs."""
    # The preflight refuses a pool name that would make this name invalid (plan.values "pool_name").
    name = POOL_DERIVED_NAMES["verify Job"].format(pool=pool["pool"])
    ns = p["namespace"]
    dra = pool.get("dra")
    body = job_manifest(name, ns, p["pool_label"], pool["pool"], pool["request"], p["job_image"],
                        p["job_command"], p["taint_key"], pool.get("pod_labels"), pool.get("runtime_class"),
                        dra["claim_template"] if dra else None)
    try:
        batch.delete_namespaced_job(name, ns, propagation_policy="Foreground")
        while True:
            batch.read_namespaced_job(name, ns)
            time.sleep(0.5)
    except ApiException as exc:
        if exc.status != 404:
            raise
    # A dra pool's claims: the claim controller deletes a pod's claims made from a template once the pod is done, so
    # after a short Job they are gone (measured in the lab: 404 on a completed Job's claim, too fast for polling);
    # every state they had is read back from a watch that starts where the namespace's claims stood before the Job.
    since = claims_version(core, ns) if dra else None
    batch.create_namespaced_job(ns, body)
    return {"name": name, "since": since, "started": time.time()}


def pod_view(pod) -> dict:
    """What scheduling.unschedulable reads of a pod."""
    return {"node": pod.spec.node_name, "phase": pod.status.phase,
            "conditions": [{"type": c.type, "status": c.status, "reason": c.reason, "message": c.message,
                            "since": c.last_transition_time.timestamp() if c.last_transition_time else None}
                           for c in pod.status.conditions or []]}


def finish_job(batch, core, p, pool, job: dict, deadline: float, path_ready=None) -> tuple[str, list[str], list]:
    """Wait until the pool's verify Job completes, fails or ``deadline`` passes; its summary, problems and pods. The
    Job is read at least once, even when the deadline (shared by every pool's Job, which run side by side) passed
    while an earlier pool was waited for: a pool's row is never decided by another pool's wait. With ``path_ready``
    (a function), a Job whose pod stays unschedulable while ``path_ready()`` (the pool's scheduler path) holds is
    started again (scheduling.retry_due), each attempt counted in the summary; without it, never. The Job is deleted
    whatever happens."""
    name, ns, dra = job["name"], p["namespace"], pool.get("dra")
    problems: list[str] = []
    status = "timeout"
    job.setdefault("retries", [])
    first = job["started"]
    try:
        while True:
            state = batch.read_namespaced_job(name, ns)
            if state.status.succeeded:
                status = "completed"
                break
            if state.status.failed:
                status = "failed"
                break
            now = time.time()
            if now >= deadline:
                break
            if path_ready is not None:
                pending = core.list_namespaced_pod(ns, label_selector=f"job-name={name}").items
                why = retry_due([pod_view(pd) for pd in pending], now, job["started"], RETRY_AFTER_S)
                if why and path_ready():
                    job["retries"].append(why)
                    job.update(start_job(batch, core, p, pool))
                    continue
            time.sleep(1)
        pods = core.list_namespaced_pod(ns, label_selector=f"job-name={name}").items
        nodes = sorted({pd.spec.node_name for pd in pods if pd.spec.node_name})
        stray = [n for n in nodes if n not in pool["nodes"]]
        if stray:
            problems.append(f"pool {pool['pool']}: verify Job ran on {stray}, outside the pool")
        attempts = (f" (attempt {len(job['retries']) + 1} after {time.time() - first:.0f} s; earlier attempts "
                    f"unschedulable: {job['retries'][0]})") if job["retries"] else ""
        if status != "completed":
            reasons = [c.message for pd in pods for c in (pd.status.conditions or []) if c.message]
            problems.append(f"pool {pool['pool']}: verify Job {status} after {p['job_timeout']} s "
                            f"{'; '.join(reasons)}".rstrip() + attempts)
        summary = f"{status} on {','.join(nodes)}" if nodes else status
        if job["retries"]:
            summary += f", attempt {len(job['retries']) + 1}"
        if dra:
            # Read before the Job goes: its pod's claims (made from the pool's template) go with it.
            claims = claims_of(core, ns, job["since"], {pd.metadata.name for pd in pods})
            dra_found, allocated = dra_claims(core.api_client, pods, claims, pool)
            problems += dra_found
            summary += f", claim allocated {', '.join(allocated)}" if allocated else ""
        return summary, problems, pods
    finally:
        job["finished"] = True
        batch.delete_namespaced_job(job["name"], ns, propagation_policy="Background")


def start_jobs(batch, core, p) -> dict[int, dict | ApiException]:
    """Every pool's verify Job at once (by the pool's index; an API error in its place): they run side by side, so a
    run with many pools waits about one Job's time, not one per pool."""
    started: dict[int, dict | ApiException] = {}
    for index, pool in enumerate(p["pools"]):
        try:
            started[index] = start_job(batch, core, p, pool)
        except ApiException as exc:
            started[index] = exc
    return started


def leftover_releases(core, namespace: str, wanted: list) -> list[str]:
    """Releases kube-accel owns (its ownership record, and the pool release names) that are deployed but not
    ``wanted``: Helm keeps each release's state in Secrets labelled owner=helm, name, status."""
    try:
        record = core.read_namespaced_config_map(OWNERSHIP_CONFIGMAP, namespace).data
    except ApiException as exc:
        if exc.status != 404:
            raise
        record = None
    found = []
    for ref in stale(list(wanted), record, namespace):
        release_ns, name = ref.split("/", 1)
        secrets = core.list_namespaced_secret(release_ns, label_selector=f"owner=helm,name={name},status=deployed")
        if secrets.items:
            found.append(ref)
    return found


def resource_slices(kube) -> list[dict]:
    """Every ResourceSlice (resource.k8s.io/v1), as plain objects."""
    return client.CustomObjectsApi(kube).list_cluster_custom_object("resource.k8s.io", "v1", "resourceslices")["items"]


def claims_version(core, namespace: str) -> str:
    """The resourceVersion of the namespace's ResourceClaims now (a watch from it misses none made later)."""
    return client.CustomObjectsApi(core.api_client).list_namespaced_custom_object(
        "resource.k8s.io", "v1", namespace, "resourceclaims", limit=1)["metadata"]["resourceVersion"]


def claims_of(core, namespace: str, since: str, pods: set[str], replay_s: int = 2) -> dict[str, dict]:
    """The ResourceClaims owned by ``pods`` in every state they had since ``since`` (the API server replays the
    changes), each as its allocated state where it had one, else its last."""
    seen: dict[str, dict] = {}
    custom = client.CustomObjectsApi(core.api_client)
    for event in watch.Watch().stream(custom.list_namespaced_custom_object, "resource.k8s.io", "v1", namespace,
                                      "resourceclaims", resource_version=since, timeout_seconds=replay_s):
        claim = event["object"]
        meta = claim.get("metadata") or {}
        if not any(o.get("kind") == "Pod" and o.get("name") in pods for o in meta.get("ownerReferences") or []):
            continue
        before = seen.get(meta["name"])
        if before is None or (claim.get("status") or {}).get("allocation") or not (
                (before.get("status") or {}).get("allocation")):
            seen[meta["name"]] = claim
    return seen


def dra_claims(kube, pods, claims: dict[str, dict], pool) -> tuple[list[str], list[str]]:
    """The verify Job pods' ResourceClaims (claims_of) checked against the pool's GPUs in the driver's
    ResourceSlices; a claim a pod names that was never seen is reported as missing."""
    names = {s.resource_claim_name for pd in pods for s in (pd.status.resource_claim_statuses or [])
             if s.resource_claim_name}
    missing = [f"pool {pool['pool']}: ResourceClaim {n} of the verify Job's pod was never seen"
               for n in sorted(names - set(claims))]
    found, allocated = dra_claim_problems(pool["pool"], [claims[n] for n in sorted(claims)], resource_slices(kube),
                                          pool["dra"])
    return missing + found, allocated


def daemonset_of(pod) -> str | None:
    return next((o.name for o in (pod.metadata.owner_references or []) if o.kind == "DaemonSet"), None)


def is_fake(node) -> bool:
    return ((node.metadata.annotations if node else None) or {}).get(FAKE_NODE_ANNOTATION) == "fake"


def path_problems(pool, nodes, slices) -> tuple[str, list[str], set[str]]:
    """The pool's scheduler path, as its scheduler reads it: HAMi pools' node registrations ("registered"), dra
    pools' ResourceSlices ("slices", with who published them); ("", [], set()) for pools whose scheduler reads only
    what the allocatable check covers."""
    if pool.get("dra"):
        found, publishers = [], set()
        for name in pool["nodes"]:
            node_problems, by = dra_slice_problems(name, slices, pool["dra"]["driver"], is_fake(nodes.get(name)))
            found += node_problems
            publishers |= {by} if by else set()
        return "slices", found, publishers
    if pool.get("hami_count"):
        found = []
        for name in pool["nodes"]:
            node = nodes.get(name)
            if node is not None:
                found += hami_registration_problems(name, node.metadata.annotations or {},
                                                    node.status.allocatable or {}, pool["hami_count"])
        return "registered", found, set()
    return "", [], set()


def check_nodes(pool, nodes, pods, operator_pods=None, slices=None) -> dict:
    """Labels, DaemonSet pods, allocatable and scheduler path (path_problems) of one pool's nodes, and with
    ``operator_pods`` (the GPU Operator's pods, None when it is not checked) its operands; counts the pool's fake
    nodes and those whose capacity the lab copied from the inventory (not checked: it would compare the lab with
    itself)."""
    found: dict[str, list[str]] = {"labels": [], "daemonset": [], "allocatable": []}
    if operator_pods is not None and "operands" in pool:
        found["operator"] = []
    fake = inventory = 0
    for name in pool["nodes"]:
        node = nodes.get(name)
        if node is None:
            found["labels"].append(f"{name}: node not in the cluster")
            continue
        annotations = node.metadata.annotations or {}
        found["labels"] += label_problems(name, node.metadata.labels or {}, pool.get("labels", {}))
        fake += is_fake(node)
        if is_fake(node) and annotations.get(LAB_CAPACITY_ANNOTATION) == LAB_CAPACITY_FROM_INVENTORY:
            inventory += 1
        else:
            found["allocatable"] += allocatable_problems(name, node.status.allocatable or {},
                                                         pool.get("resources", {}))
        mine = [
            {"name": pd.metadata.name, "ready": pod_ready(pd)}
            for pd in pods
            if pd.spec.node_name == name
            and (pd.metadata.labels or {}).get("app.kubernetes.io/instance") == pool["release"]
            and any(o.kind == "DaemonSet" for o in (pd.metadata.owner_references or []))
        ]
        found["daemonset"] += daemon_problems(name, mine)
        if "operator" in found:
            found["operator"] += operand_problems(name, [
                {"name": pd.metadata.name, "daemonset": daemonset_of(pd), "ready": pod_ready(pd)}
                for pd in operator_pods if pd.spec.node_name == name], pool["operands"])
    column, path, publishers = path_problems(pool, nodes, slices or [])
    if column:
        found[column] = path
    return {"found": found, "fake": fake, "inventory": inventory, "publishers": publishers}


def pool_path_ready(core, kube, p, pool):
    """A function telling whether ``pool``'s scheduler path (path_problems) and allocatable hold now, read afresh."""
    def ready() -> bool:
        selected = core.list_node(label_selector=f"{p['pool_label']}={pool['pool']}").items
        nodes = {n.metadata.name: n for n in selected}
        checked = check_nodes({**pool, "operands": {}}, nodes, [], None,
                              resource_slices(kube) if pool.get("dra") else [])
        return not any(checked["found"][k] for k in checked["found"] if k not in ("daemonset", "labels"))
    return ready


def main():
    module = AnsibleModule(
        argument_spec={
            "pools": {"type": "list", "elements": "dict", "required": True},
            "namespace": {"type": "str", "default": "kube-accel"},
            "pool_label": {"type": "str", "required": True},
            "taint_key": {"type": "str", "no_log": False},
            "run_jobs": {"type": "bool", "default": True},
            "job_image": {"type": "str", "default": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"},
            "job_command": {"type": "list", "elements": "str", "default": ["nvidia-smi", "-L"]},
            "job_timeout": {"type": "int", "default": 120},
            "settle_timeout": {"type": "int", "default": 180},
            "operator_namespace": {"type": "str"},
            "releases": {"type": "list", "elements": "str"},
            **KUBE_ARGUMENT_SPEC,
        },
        supports_check_mode=True,
    )
    p = module.params
    kube = api_client(module)
    core, batch = client.CoreV1Api(kube), client.BatchV1Api(kube)
    deadline = time.time() + p["settle_timeout"]
    operator_ns = p["operator_namespace"]
    while True:
        try:
            nodes = {n.metadata.name: n for n in core.list_node().items}
            pods = core.list_namespaced_pod(p["namespace"]).items
            operator_pods = None
            if operator_ns and client.AppsV1Api(kube).list_namespaced_deployment(operator_ns).items:
                operator_pods = core.list_namespaced_pod(operator_ns).items
            slices = resource_slices(kube) if any(pool.get("dra") for pool in p["pools"]) else []
        except Exception as exc:  # noqa: BLE001 - any failure to reach the API is reported the same way
            module.fail_json(msg=f"cannot read the cluster ({p['kubeconfig']}): {exc}")
        checked = [check_nodes(pool, nodes, pods, operator_pods, slices) for pool in p["pools"]]
        if time.time() >= deadline or not any(v for c in checked for v in c["found"].values()):
            break
        time.sleep(2)
    settled = time.time() - (deadline - p["settle_timeout"])

    rows, problems = [], []
    jobs = start_jobs(batch, core, p) if p["run_jobs"] and not module.check_mode else {}
    job_deadline = time.time() + p["job_timeout"]
    try:
        fake = sum(c["fake"] for c in checked)
        inventory = sum(c["inventory"] for c in checked)
        total = sum(len(pool["nodes"]) for pool in p["pools"])
        # Fake nodes of dra pools: no device plugin registers anything there (the stand-in publishes ResourceSlices).
        dra_fake = sum(c["fake"] for pool, c in zip(p["pools"], checked) if pool.get("dra"))  # noqa: B905 - Python 3.9
        for index, pool in enumerate(p["pools"]):
            c = checked[index]  # indexed, not zip(strict=True): modules run on Python 3.9 too
            row = {"pool": pool["pool"], "mode": pool["mode"], "nodes": len(pool["nodes"])}
            found = c["found"]
            pool_problems = [item for items in found.values() for item in items]
            for key, items in found.items():
                row[key] = "ok" if not items else f"{len(items)} problem(s)"
            if c["inventory"] == len(pool["nodes"]) and pool["nodes"]:
                row["allocatable"] = STAND_IN
            if operator_ns and "operands" in pool and "operator" not in found:
                row["operator"] = NOT_INSTALLED
            if pool.get("dra") and not found["slices"]:
                # The DRA driver publishes a dra node's GPUs as ResourceSlices (its kubelet plugin; in the lab its
                # stand-in, named here as the evidence).
                row["slices"] = f"published by {', '.join(sorted(c['publishers']))}"
            scheduler_name = pool.get("scheduler_name")
            if p["run_jobs"] and not module.check_mode:
                job = jobs[index]
                try:
                    if isinstance(job, ApiException):
                        raise job
                    # Only a pool scheduled through an extender (HAMi) is retried: kube-scheduler requeues a pod
                    # itself when a node's allocatable or a ResourceSlice changes, not when the node annotation an
                    # extender reads does.
                    retry = pool_path_ready(core, kube, p, pool) if scheduler_name else None
                    row["job"], job_problems, job_pods = finish_job(batch, core, p, pool, job, job_deadline, retry)
                except ApiException as exc:
                    row["job"], job_problems, job_pods = "error", [
                        f"pool {pool['pool']}: verify Job: {exc.status} {exc.reason}"], []
                if scheduler_name:
                    hami = [x for pd in job_pods for x in hami_problems(
                        pool["pool"], {"name": pd.metadata.name, "scheduler": pd.spec.scheduler_name,
                                       "node": pd.spec.node_name, "annotations": pd.metadata.annotations},
                        scheduler_name)]
                    if not job_pods:
                        hami.append(f"pool {pool['pool']}: the verify Job made no pod for HAMi to schedule")
                    row["hami"] = "ok" if not hami else f"{len(hami)} problem(s)"
                    job_problems += hami
                pool_problems += job_problems
            else:
                row["job"] = "skipped (check mode)" if module.check_mode else "skipped"
                if scheduler_name:
                    row["hami"] = "skipped"
            row["result"] = "FAIL" if pool_problems else "PASS"
            problems += pool_problems
            rows.append(row)
        table = render_table(rows, fake, total, inventory, dra_fake)
        still = any(v for c in checked for v in c["found"].values())
        table += (f"\nsettle: node checks {'still failing' if still else 'passed'} after {settled:.0f} s "
                  f"(settle_timeout {p['settle_timeout']} s)")
    finally:
        for job in jobs.values():  # those an error above left running (finish_job deletes its own)
            if isinstance(job, dict) and not job.get("finished"):
                with contextlib.suppress(ApiException):
                    batch.delete_namespaced_job(job["name"], p["namespace"], propagation_policy="Background")
    if p["releases"] is not None:
        leftovers = leftover_releases(core, p["namespace"], p["releases"])
        problems += [f"release {name} is still deployed but no pool or setting wants it (leftover)"
                     for name in leftovers]
        table += (f"\nreleases: {len(leftovers)} leftover(s): {', '.join(leftovers)}" if leftovers
                  else "\nreleases: no leftover (ownership record and pool release names read from the cluster)")
    result = {"changed": False, "rows": rows, "table": table, "problems": problems, "fake_nodes": fake}
    if problems:
        module.fail_json(msg="pool verification failed:\n" + "\n".join(problems) + "\n\n" + table, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
