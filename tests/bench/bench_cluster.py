#!/usr/bin/env python3
"""Benchmarks 3 and 4 of kube-accel: the cluster play at scale, and scheduling onto the pools.

3. Cluster scale: a lab with N fake GPU nodes (10, 100, 1,000 by default) dealt evenly over the lab inventory's
   five pools (vGPU/HAMi, vGPU/GPU-Manager, pGPU, MPS, MIG). Each size starts from a fresh cluster whose nodes
   carry none of kube-accel's labels and no release, once it is idle (API requests back to their rest rate), then:
   - first: ansible/cluster.yml, then wait until every DaemonSet in the charts' namespace covers every node of its
     release's pools with ready pods (the row's seconds cover both);
   - noop:  cluster.yml again; it must report changed=0 and leave every helm release at its revision.
   Also read: the labelling task's time (profile_tasks) and the node requests the labelling module sent (the lab's
   audit log, by the module's User-Agent).
   Ratios: noop at the largest size against the 15 s target, labelling cost largest / smallest size.
4. Scheduling, on the largest lab after the cluster play: bare pods (--pods, 1,000 by default) requesting the
   pools' resources (each pool's verify-Job request, pinned to the pool by its label), spread evenly over the
   pools; then the same pods requesting only CPU (same selector and toleration). Time from the first create to
   every pod bound (mean of two runs per case, run gpu, cpu, cpu, gpu). Ratio gpu / cpu.

The bench lab lives in .lab/bench as kwokctl cluster "kube-accel-bench" (the normal lab in .lab is left alone,
running or not) and is removed at the end. Inventories are written to inventories/.tmp-bench-cluster-<N>/.
Usage: tests/bench/bench_cluster.py [--sizes 10,100,1000] [--pods 1000] [--keep-logs]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

import yaml
from ansible_collections.kube_accel.gpu.plugins.module_utils.common import constants as accel_constants  # noqa: E402
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm import pool_charts as accel_chart_values  # noqa: E402
from ansible_collections.kube_accel.gpu.plugins.module_utils.host import gpu_facts as accel_gpu_facts  # noqa: E402
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import pools as accel_pools  # noqa: E402
from benchlib import BIN, REPO, Row, ansible_env, log, ratio_line, run_playbook, stopwatch, write_rows  # noqa: E402
from kalab.cluster import audit_log, cluster_running  # scripts/kalab: the lab's cluster, nodes and paths
from kalab.nodes import node_api, node_manifest
from kalab.site import NVML_DATA, Site

BENCH_LAB = ["--dir", str(REPO / ".lab" / "bench"), "--name", "kube-accel-bench"]
BENCH_SITE = Site(root=REPO / ".lab" / "bench", name="kube-accel-bench")
LAB_INVENTORY = REPO / "inventories" / "lab"
NAMESPACE = "kube-accel"  # accel_namespace of inventories/lab
POD_NAMESPACE = "kube-accel-bench-scheduling"
NOOP_TARGET_S = 15.0
DS_TIMEOUT_S = 900
SCHEDULE_TIMEOUT_S = 600
CREATE_WORKERS = 16
# Seconds one API request of the scheduling bench may take: a request lost under load fails the bench, not hangs it.
REQUEST_TIMEOUT_S = 60
LABEL_TASK = "Reconcile the labels and taints of every pool's nodes"
PROFILE_LINE = re.compile(r"^(?P<task>.+?) -{3,} (?P<secs>\d+\.\d+)s$")
# The module names itself by its FQCN (cluster.client.api_client: kube-accel/<module._name>).
LABEL_AGENT = "kube-accel/kube_accel.gpu.accel_node_labels"
# A fresh lab is idle once the API server serves fewer requests than this per second (about 1/s at rest).
IDLE_REQUESTS_PER_S = 20
SETTLE_TIMEOUT_S = 300


# -- the bench lab


def lab(*args: str) -> None:
    argv = [sys.executable, str(REPO / "scripts" / "lab.py"), *BENCH_LAB, *args]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"[bench] {' '.join(argv)} failed:\n{proc.stdout}\n{proc.stderr[-4000:]}")
    for line in proc.stderr.splitlines():
        if line.startswith("[lab]"):
            log(line[len("[lab] "):])


def pool_groups() -> dict[str, dict]:
    """Pool group name -> its group vars, from the lab inventory (same order as its hosts.yml)."""
    hosts = yaml.safe_load((LAB_INVENTORY / "hosts.yml").read_text())
    groups = hosts["all"]["children"]["gpu_pools"]["children"]
    shared = yaml.safe_load((LAB_INVENTORY / "group_vars" / "gpu_pools.yml").read_text())
    return {g: {**shared, **yaml.safe_load((LAB_INVENTORY / "group_vars" / f"{g}.yml").read_text())} for g in groups}


def node_names(size: int) -> dict[str, list[str]]:
    """``size`` host names dealt round-robin over the pool groups."""
    groups = list(pool_groups())
    dealt: dict[str, list[str]] = {g: [] for g in groups}
    for i in range(size):
        group = groups[i % len(groups)]
        dealt[group].append(f"kab-{group.removeprefix('pool_').replace('_', '-')}-{i:04d}")
    return dealt


def write_inventory(directory: Path, size: int) -> Path:
    """The lab inventory's pools with ``size`` hosts, pointed at the bench lab, with the GPU facts preflight would
    have gathered (so the releases get the same values as in a site.yml run)."""
    if directory.exists():
        shutil.rmtree(directory)
    shutil.copytree(LAB_INVENTORY / "group_vars", directory / "group_vars")
    cluster = yaml.safe_load((directory / "group_vars" / "all.yml").read_text())
    cluster["accel_kubeconfig"] = str(BENCH_SITE.kubeconfig)
    (directory / "group_vars" / "all.yml").write_text("---\n" + yaml.safe_dump(cluster, sort_keys=False))
    for group, settings in pool_groups().items():
        snapshot = NVML_DATA / f"{settings['accel_lab_gpu']}.json"
        facts = accel_gpu_facts.gather(accel_gpu_facts.RecordedSource.from_file(str(snapshot)))
        with (directory / "group_vars" / f"{group}.yml").open("a") as fh:
            fh.write("# Facts as preflight's nvidia_gpu_facts reports them for this snapshot.\n")
            fh.write(yaml.safe_dump({"nvidia_gpus": facts}, sort_keys=False))
    inventory = {"all": {"children": {
        "kube_control_plane": {"hosts": {"bench-control-plane": {
            "ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}}},
        "gpu_pools": {"vars": {"ansible_connection": "containers.podman.podman",
                               "ansible_python_interpreter": "/usr/bin/python3"},
                      "children": {g: {"hosts": dict.fromkeys(hosts)} for g, hosts in node_names(size).items()}},
    }}}
    path = directory / "hosts.yml"
    path.write_text("---\n" + yaml.safe_dump(inventory, sort_keys=False))
    return path


# -- reading the cluster


def kubectl(*args: str) -> str:
    proc = subprocess.run([str(BIN / "kubectl"), "--kubeconfig", str(BENCH_SITE.kubeconfig), *args],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"[bench] kubectl {' '.join(args)} failed: {proc.stderr}")
    return proc.stdout


def helm_revisions() -> dict[str, int]:
    out = subprocess.run([str(BIN / "helm"), "list", "-A", "-o", "json", "--kubeconfig", str(BENCH_SITE.kubeconfig)],
                         capture_output=True, text=True, check=True).stdout
    return {f"{r['namespace']}/{r['name']}": int(r["revision"]) for r in json.loads(out or "[]")}


def label_requests(since: int) -> tuple[Counter, int]:
    """(node requests by verb the labelling module sent after byte ``since`` of the audit log, the log's end).

    The module names itself in its User-Agent; other clients (kube-controller-manager's node controller sends a no-op
    patch per node every 25 s) are left out.
    """
    path = audit_log(BENCH_SITE)
    counts: Counter = Counter()
    with path.open("rb") as fh:
        fh.seek(since)
        data = fh.read()
    for line in data.splitlines():
        event = json.loads(line)
        if event.get("userAgent", "").startswith(LABEL_AGENT):
            counts[event["verb"]] += 1
    return counts, since + len(data)


def api_requests() -> int:
    """Requests the API server has served so far, all clients."""
    return sum(int(float(line.rsplit(" ", 1)[1])) for line in kubectl("get", "--raw", "/metrics").splitlines()
               if line.startswith("apiserver_request_total{"))


def wait_idle() -> float:
    """Wait until the fresh lab is idle: kwok and the controller-manager go on initialising new nodes (leases,
    heartbeats, taints) for a while after they report Ready, and a first run started then would pay for it."""
    window = 5.0
    with stopwatch() as t:
        deadline = time.time() + SETTLE_TIMEOUT_S
        before = api_requests()
        while time.time() < deadline:
            time.sleep(window)
            now = api_requests()
            if (now - before) / window < IDLE_REQUESTS_PER_S:
                break
            before = now
    return t[0]


def release_nodes(size: int) -> dict[str, int]:
    """Release name -> how many bench nodes its pools have (what each of its DaemonSets must cover)."""
    counts: Counter = Counter()
    for group, hosts in node_names(size).items():
        key = accel_pools.release_key(accel_pools.pool_settings(pool_groups()[group]))
        counts[f"kube-accel-{key}"] += len(hosts)
        if key == "dra":
            # kube-accel-dra (classes, templates) runs no DaemonSet; NVIDIA's driver release runs its kubelet plugin
            # on every dra node.
            counts[accel_chart_values.dra_driver_release()] += len(hosts)
    return dict(counts)


def daemonsets_pending(expected: dict[str, int]) -> list[str]:
    """DaemonSets of the charts' namespace not fully rolled out, as "name ready/desired of nodes".

    desiredNumberScheduled alone is no proof: on 1,000 nodes the controller raises it while it creates the pods, so
    each DaemonSet must also cover every node of its release's pools (the bench pools have no narrower selector).
    """
    items = json.loads(kubectl("get", "daemonsets", "-n", NAMESPACE, "-o", "json"))["items"]
    if not items:
        return ["no DaemonSet yet"]
    pending = []
    for ds in items:
        st, meta = ds.get("status", {}), ds["metadata"]
        nodes = expected.get(meta.get("labels", {}).get("app.kubernetes.io/instance", ""), 0)
        desired = st.get("desiredNumberScheduled", 0)
        counts = (desired, st.get("numberReady", 0), st.get("updatedNumberScheduled", 0))
        if counts != (nodes, nodes, nodes) or not nodes or st.get("observedGeneration") != meta["generation"]:
            pending.append(f"{meta['name']} {counts[1]}/{desired} of {nodes}")
    return pending


def wait_daemonsets(size: int) -> tuple[float, float]:
    """(wall seconds, machine CPU seconds) until every DaemonSet is rolled out."""
    expected = release_nodes(size)
    with stopwatch() as t:
        deadline = time.time() + DS_TIMEOUT_S
        while pending := daemonsets_pending(expected):
            if time.time() > deadline:
                sys.exit(f"[bench] DaemonSets not ready after {DS_TIMEOUT_S} s: {pending}")
            time.sleep(1)
    return t[0], t[1]


def task_seconds(output: str) -> dict[str, float]:
    """profile_tasks' summary: task name (without role prefix) -> seconds."""
    out = {}
    for line in output.splitlines():
        m = PROFILE_LINE.match(line.strip())
        if m:
            out[m["task"].split(" : ", 1)[-1]] = float(m["secs"])
    return out


# -- benchmark 3


def cluster_size(size: int, work: Path) -> tuple[list[Row], dict]:
    inventory = write_inventory(REPO / "inventories" / f".tmp-bench-cluster-{size}", size)
    env = ansible_env(PROFILE_TASKS_TASK_OUTPUT_LIMIT="100")  # every task in profile_tasks' summary
    lab("down")
    log(f"cluster: fresh lab with {size} fake GPU nodes")
    with stopwatch() as t:
        lab("up", "--skip-toolchain", "--no-hosts", "--no-upstream", "--audit-nodes", "--inventory", str(inventory))
    log(f"  lab up in {t[0]:.1f} s, idle {wait_idle():.0f} s later")
    rows, facts = [], {}
    _, audited = label_requests(0)
    for case in ("first", "noop"):
        before = helm_revisions()
        log(f"cluster: cluster.yml on {size} nodes, {case}")
        run = run_playbook("cluster.yml", inventory, env=env, log_to=work / f"cluster-{size}-{case}.log")
        ds_wait, ds_cpu = wait_daemonsets(size) if case == "first" else (0.0, 0.0)
        after, (requests, audited) = helm_revisions(), label_requests(audited)
        upgrades = sum(1 for name, rev in after.items() if rev != before.get(name))
        label_s = task_seconds(run.output).get(LABEL_TASK, float("nan"))
        if case == "noop" and (run.total_changed or upgrades):
            sys.exit(f"[bench] the no-op run on {size} nodes changed {run.changed}, helm upgrades {upgrades}")
        note = (f"helm {'installs' if case == 'first' else 'upgrades'}: {upgrades}; labelling {label_s:.2f} s; "
                f"labelling API requests: {requests['list']} list, {requests['patch']} patch"
                + (f"; DaemonSets ready {ds_wait:.1f} s after the play" if case == "first" else ""))
        seconds = run.seconds + ds_wait
        rows.append(Row("cluster", case, size, round(seconds, 2), run.total_changed, note,
                        round(run.cpu_seconds + ds_cpu, 1)))
        facts[case] = {"seconds": seconds, "labelling": label_s}
        log(f"  {seconds:.1f} s (play {run.seconds:.1f} s), changed={run.total_changed}; {note}")
    return rows, facts


# -- benchmark 4


def pool_pod_specs(size: int) -> list[tuple[str, dict, int]]:
    """(pool, pod spec, how many pods of it fit on the pool's nodes) per pool of the bench lab."""
    specs = []
    daemon_pods = 4  # at most this many DaemonSet pods per node (pGPU: device plugin + GFD)
    for group, hosts in node_names(size).items():
        settings = accel_pools.pool_settings(pool_groups()[group])
        request = accel_pools.request_for(settings)
        allocatable = node_manifest("capacity", pool_groups()[group], standins=False)["status"]["allocatable"]
        per_node = min([int(allocatable["pods"]) - daemon_pods]
                       + [int(allocatable.get(r, 0)) // int(q) for r, q in request.items()])
        spec = {
            "nodeSelector": {accel_constants.LABELS["pool"]: str(settings["accel_pool"])},
            "containers": [{"name": "work", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"limits": dict(request), "requests": dict(request)}}],
        }
        if accel_pools.setting_on(settings, "accel_node_taint"):
            spec["tolerations"] = [{"key": accel_constants.LABELS["pool"], "operator": "Equal",
                                    "value": str(settings["accel_pool"]), "effect": "NoSchedule"}]
        specs.append((str(settings["accel_pool"]), spec, per_node * len(hosts)))
    return specs


def pod_bodies(case: str, count: int, size: int) -> list[dict]:
    """The pool pods, or the same pods (pool selector and toleration too) requesting only CPU: the two cases
    differ by the resource request alone."""
    specs = pool_pod_specs(size)
    if case == "cpu-pods":
        specs = [(pool, {**spec, "containers": [{**c, "resources": {"requests": {"cpu": "100m"}}}
                                                for c in spec["containers"]]}, fits)
                 for pool, spec, fits in specs]
    bodies = []
    for i in range(count):
        pool, spec, fits = specs[i % len(specs)]
        wanted = len(range(i % len(specs), count, len(specs)))
        if wanted > fits:
            sys.exit(f"[bench] {wanted} pods for pool {pool} but only {fits} fit on its nodes")
        bodies.append({"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": f"{case}-{i:05d}", "labels": {"bench": case, "pool": pool}},
                       "spec": {**spec, "automountServiceAccountToken": False, "terminationGracePeriodSeconds": 0}})
    return bodies


def pods(api) -> list[dict]:
    reply = api.list_namespaced_pod(POD_NAMESPACE, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S)
    return json.loads(reply.data)["items"]


def unschedulable(items: list[dict]) -> list[str]:
    return [c.get("message", "") for p in items for c in p.get("status", {}).get("conditions", [])
            if c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"]


def queue_seconds(items: list[dict]) -> list[int]:
    """Per pod, seconds from its creation to its PodScheduled condition (the API's 1 s resolution), sorted."""
    def stamp(text: str) -> float:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()

    out = []
    for p in items:
        scheduled = next(c for c in p["status"]["conditions"] if c["type"] == "PodScheduled")
        out.append(round(stamp(scheduled["lastTransitionTime"]) - stamp(p["metadata"]["creationTimestamp"])))
    return sorted(out)


class Scheduled(NamedTuple):
    seconds: float  # first create to every pod bound
    cpu_seconds: float  # the machine's, over the same span
    creating: float  # of which creating the pods
    queued: list[int]  # per pod, creation to PodScheduled (s), sorted


def schedule(api, case: str, count: int, size: int) -> Scheduled:
    """Create the pods and wait until all are bound.

    The pods are created by this script (bare pods), so the total includes the creating; the per-pod seconds from
    creation to PodScheduled are the scheduler's own share.
    """
    bodies = pod_bodies(case, count, size)
    with stopwatch() as t:
        start = time.perf_counter()
        with ThreadPoolExecutor(CREATE_WORKERS) as pool:
            list(pool.map(lambda b: api.create_namespaced_pod(POD_NAMESPACE, b, _preload_content=False,
                                                              _request_timeout=REQUEST_TIMEOUT_S), bodies))
        creating = time.perf_counter() - start
        deadline = time.time() + SCHEDULE_TIMEOUT_S
        while True:
            items = pods(api)
            if sum(1 for p in items if p["spec"].get("nodeName")) == count:
                break
            if time.time() > deadline:
                sys.exit(f"[bench] {case}: pods not all bound after {SCHEDULE_TIMEOUT_S} s: "
                         f"{unschedulable(items)[:3]}")
            time.sleep(0.2)
    return Scheduled(t[0], t[1], creating, queue_seconds(items))


def clear_pods(api) -> None:
    api.delete_collection_namespaced_pod(POD_NAMESPACE, grace_period_seconds=0, _preload_content=False,
                                         _request_timeout=REQUEST_TIMEOUT_S)
    deadline = time.time() + 300
    while pods(api):
        if time.time() > deadline:
            sys.exit("[bench] bench pods not deleted after 300 s")
        time.sleep(1)


def scheduling(size: int, count: int) -> list[Row]:
    """Each case twice, in the order gpu, cpu, cpu, gpu, so a cluster that speeds up or slows down during the bench
    favours neither; a case's row is the mean of its two runs."""
    from kubernetes import client  # noqa: PLC0415

    api = node_api(BENCH_SITE)
    api.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=POD_NAMESPACE)))
    runs: dict[str, list[Scheduled]] = {"gpu-pods": [], "cpu-pods": []}
    try:
        for case in ("gpu-pods", "cpu-pods", "cpu-pods", "gpu-pods"):
            log(f"scheduling: {count} {case} on {size} nodes")
            run = schedule(api, case, count, size)
            log(f"  all bound after {run.seconds:.1f} s (creating took {run.creating:.1f} s; creation to "
                f"PodScheduled p50 {run.queued[len(run.queued) // 2]} s, max {run.queued[-1]} s)")
            runs[case].append(run)
            clear_pods(api)
    finally:
        api.delete_namespace(POD_NAMESPACE, grace_period_seconds=0, _preload_content=False)
    rows = []
    for case, done in runs.items():
        queued = sorted(q for run in done for q in run.queued)
        note = (f"{size} nodes; bare pods created by {CREATE_WORKERS} clients; runs "
                + ", ".join(f"{r.seconds:.1f} s (creating {r.creating:.1f} s)" for r in done)
                + f"; creation to PodScheduled p50 {queued[len(queued) // 2]} s, max {queued[-1]} s")
        rows.append(Row("scheduling", case, count, round(sum(r.seconds for r in done) / len(done), 2), None, note,
                        round(sum(r.cpu_seconds for r in done) / len(done), 1)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10,100,1000", help="fake GPU node counts")
    parser.add_argument("--pods", type=int, default=1000, help="pods per scheduling case (0: skip)")
    parser.add_argument("--keep-logs", action="store_true", help="keep the playbook logs")
    args = parser.parse_args()
    sizes = sorted({int(s) for s in args.sizes.split(",")})
    # A stopped bench (timeout, kill) still removes its lab and inventories in the finally below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("[bench] terminated"))
    if cluster_running(Site()):
        log("the normal lab (.lab) is running: it is left alone (and shares the CPU with the bench lab)")
    work = Path(tempfile.mkdtemp(prefix="ka-bench-cluster-"))
    cluster_rows: list[Row] = []
    sched_rows: list[Row] = []
    facts: dict[int, dict] = {}
    try:
        for size in sizes:
            rows, facts[size] = cluster_size(size, work)
            cluster_rows += rows
            if size == sizes[-1] and args.pods:
                sched_rows = scheduling(size, args.pods)
            lab("down")
            shutil.rmtree(REPO / "inventories" / f".tmp-bench-cluster-{size}", ignore_errors=True)
    finally:
        lab("down")
        for size in sizes:
            shutil.rmtree(REPO / "inventories" / f".tmp-bench-cluster-{size}", ignore_errors=True)
        if args.keep_logs:
            log(f"playbook logs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    write_rows("cluster", cluster_rows)
    if sched_rows:
        write_rows("scheduling", sched_rows)
    big, small = sizes[-1], sizes[0]
    print(ratio_line(f"no-op cluster.yml at {big} nodes / {NOOP_TARGET_S:.0f} s target", facts[big]["noop"]["seconds"],
                     NOOP_TARGET_S, "<= 1x"))
    for size in sizes:
        print(ratio_line(f"no-op / first run, {size} nodes", facts[size]["noop"]["seconds"],
                         facts[size]["first"]["seconds"]))
    if big != small:
        print(ratio_line(f"labelling (first run) {big} / {small} nodes", facts[big]["first"]["labelling"],
                         facts[small]["first"]["labelling"], f"well under {big // small}x"))
    if sched_rows:
        print(ratio_line(f"scheduling {args.pods} pods on {big} nodes, gpu / cpu", sched_rows[0].seconds,
                         sched_rows[1].seconds, "about 1x"))


if __name__ == "__main__":
    main()
