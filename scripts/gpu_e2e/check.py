#!/usr/bin/env python3
"""The verdicts of one scripts/gpu-e2e.sh run, from what it recorded in OUTDIR (Python standard library only: it
runs on the GPU host). One line per check: PASS or FAIL, what was compared, and where the evidence comes from.

Per pool (expect.json is what kube-accel promised, from its own code at bundle time):
- advertised: the real kubelet's node status shows the pool's resource at per-GPU count x the host's GPUs;
- share: every pod the pool promises ran at once and cuda-probe saw the host's GPU: pgpu one whole GPU (all its
  SMs), timeslice N pods on one GPU, mps N clients each limited to 100/N % of the SMs (sm_count_attr and SMs its
  kernel ran on) and to 1/N of the memory (an allocation above it refused);
- one-more: a pod beyond the promise stays Pending, unschedulable for lack of the resource (the real scheduler);
- tenant (pgpu): a pod that requests no GPU but sets NVIDIA_VISIBLE_DEVICES=all on the nvidia RuntimeClass gets none
  (kube-accel's runtime setting).
Without a GPU (E2E_NO_GPU=1): the agents' DaemonSets rolled out on the real kubelet (every pod current, its
containers started: the MPS pool's agents stop at NVML and restart) and the node advertises none.
- site (where the bundle's Ansible ran): ``ansible-playbook site.yml`` (preflight, cluster and, with a GPU, verify
  with its CUDA Jobs) ended with rc 0 and no failed task; its verify table is quoted.
Day 2 (where the bundle's Ansible ran), from the tenants' pods and logs/timeline.log (the node's pool label, its
cordon and the tenants' pods, polled every half second by the real API server):
- switch: the previous pool's tenant (a running Deployment's pod holding its share) was seen on the node, the node was
  cordoned and the pod gone before the node's pool label changed (never both at once), site.yml ran the drain
  before the relabelling and the uncordon after it, and the Deployment's next pod was not placed in the new pool;
- rerun: site.yml once more with nothing to change while a tenant holds a share of the last pool (an MPS client):
  changed=0, the node never cordoned, every agent (the MPS control daemon too) the same pod with no restart, the
  tenant's pod the same and running.

Usage: check.py OUTDIR (gpu-e2e.sh's waits: check.py --agents-loaded POOLDIR; check.py --ds-started DS.json PODS.json)
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
from pathlib import Path

REAL = "real kubelet, real GPU"


def load(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def read(path: Path, errors: str = "strict") -> str:
    """A recorded file's text; empty when the run did not write it."""
    return path.read_text(errors=errors) if path.exists() else ""


def step_rc(out: Path, name: str) -> int | None:
    text = read(out / "logs" / f"{name}.txt")
    m = re.search(r"^rc=(\d+)$", text, re.M)
    return int(m.group(1)) if m else None


def host_gpus(out: Path) -> list[dict]:
    gpus = []
    path = out / "host-gpus.csv"
    for line in read(path).splitlines():
        f = [x.strip() for x in line.split(",")]
        if len(f) >= 4:
            gpus.append({"index": f[0], "uuid": f[1], "name": f[2], "memory_mib": int(f[3])})
    return gpus


class Verdicts:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.failed = False

    def add(self, ok: bool, pool: str, check: str, detail: str, evidence: str) -> None:
        self.failed |= not ok
        self.lines.append(f"{'PASS' if ok else 'FAIL'} {pool} {check}: {detail} [evidence: {evidence}]")


def probes(pool_dir: Path, pool: str) -> list[tuple[str, dict | None, dict | None]]:
    found = []
    for pod in sorted(pool_dir.glob(f"{pool}-[0-9]*.pod.json")):
        name = pod.name[: -len(".pod.json")]
        found.append((name, load(pool_dir / f"{name}.json"), load(pod)))
    return found


def check_pool(v: Verdicts, out: Path, pool: str, gpus: list[dict], no_gpu: bool) -> None:
    d = out / "pools" / pool
    expect = load(d / "expect.json") or {}
    rc = step_rc(out, f"pool-{pool}")
    if not expect:
        v.add(False, pool, "ran", f"no record (step rc {rc})", "gpu-e2e.sh")
        return
    resource, per_gpu = next(iter(expect["per_gpu"].items()))
    alloc = ((load(d / "node-status.json") or {}).get("status") or {}).get("allocatable") or {}
    rollout = read(d / "rollout.txt")
    rolled = rollout.count("successfully rolled out")
    # A DaemonSet that did not roll out ends the pool's step there: its last word says which, and why.
    stuck = [line.strip() for line in rollout.splitlines() if line.strip() and "successfully rolled out" not in line]
    configs = agent_configs(d)
    replicas = sorted({r.get("replicas") for c in configs.values() for r in sharing_resources(c)})
    want_replicas = [expect["replicas"]] if expect["replicas"] else []
    pods = (load(d / "agents.json") or {}).get("items", [])
    unready = [f"{p['metadata']['name']}/{c['name']}" for p in pods
               for c in (p.get("status") or {}).get("containerStatuses") or [] if not c.get("ready")]
    v.add(rolled > 0 and "error" not in rollout.lower() and bool(configs) and None not in configs.values()
          and replicas == want_replicas and (no_gpu or (bool(pods) and not unready)), pool, "agents",
          f"{rolled} DaemonSet(s) of {', '.join(expect['releases'])} rolled out; "
          + ", ".join(f"{k} {'loaded its config' if c is not None else 'did NOT load its config'}"
                      for k, c in sorted(configs.items()))
          + f"; sharing replicas {replicas} (promised {want_replicas})"
          + (f"; not ready: {unready}" if unready and not no_gpu else "")
          + (f"; the pool's step ended rc={rc}" + (f" after: {stuck[-1]}" if stuck else "") if rc else ""),
          "real kubelet, containerd, runc; the agents' own logs")
    if no_gpu:
        v.add(resource not in alloc or alloc[resource] == "0", pool, "advertised",
              f"{resource}={alloc.get(resource, 'absent')} (no GPU on this machine)", "real kubelet, no GPU")
        if expect["mode"] == "pgpu":
            check_tenant(v, d, pool, "real kubelet, stand-in CDI spec (no GPU)")
        return
    want = per_gpu * len(gpus)
    v.add(alloc.get(resource) == str(want), pool, "advertised",
          f"{resource}={alloc.get(resource, 'absent')}, promised {per_gpu} per GPU x {len(gpus)} = {want}",
          "real kubelet node status, NVIDIA device plugin v0.20.0")
    uuids = {g["uuid"] for g in gpus}
    results = probes(d, pool)
    n = 1 if expect["mode"] == "pgpu" else int(expect["replicas"])
    ok_runs = [(name, p) for name, p, _ in results if p and p.get("ok")]
    detail = [f"{name}: " + (f"{dev['uuid']} sm={dev['sm_count_attr']} ran-on={dev['sms_used']} "
                             f"free={dev['free_mib']}MiB" if p and p.get("ok") and (dev := p["devices"][0])
                             else f"FAILED {p.get('error') if p else 'no output'}") for name, p, _ in results]
    seen = {dev["uuid"] for _, p in ok_runs for dev in p["devices"]}
    v.add(len(ok_runs) == n and seen <= uuids and all(p["device_count"] == 1 for _, p in ok_runs), pool,
          "share", f"{len(ok_runs)}/{n} CUDA pods ran on {sorted(seen)} (host: {sorted(uuids)}); " + "; ".join(detail),
          f"{REAL}, cuda-probe (PTX kernel)")
    if expect["mode"] == "mps" and ok_runs:
        pct = 100 // n
        mem_limit = gpus[0]["memory_mib"] // n
        # A whole GPU's SM count: the pgpu pool's probe of this run when it ran, else the largest SM id + 1 seen.
        full = whole_gpu_sms(out)
        for name, p in ok_runs:
            dev = p["devices"][0]
            sm_ok = full is not None and dev["sm_count_attr"] <= -(-full * pct // 100) and dev["sms_used"] <= dev[
                "sm_count_attr"] and dev["sm_count_attr"] < full
            allocs = p.get("allocs") or []
            small = next((a for a in allocs if a["mib"] <= 1024), None)
            big = next((a for a in allocs if a["mib"] > mem_limit), None)
            mem_ok = bool(small and small["ok"] and big and not big["ok"] and dev["free_mib"] <= mem_limit)
            v.add(sm_ok, pool, f"mps-threads {name}",
                  f"{dev['sm_count_attr']} SMs visible, kernel on {dev['sms_used']}, of {full} ({pct} % promised)",
                  f"{REAL}, MPS control daemon of the device plugin")
            v.add(mem_ok, pool, f"mps-memory {name}",
                  f"free {dev['free_mib']} MiB <= {mem_limit}; "
                  + ", ".join(f"{a['mib']} MiB {'ok' if a['ok'] else a.get('error')}" for a in allocs),
                  f"{REAL}, MPS pinned-memory limit")
    if expect["mode"] == "mps":
        nonroot = load(d / "mps-nonroot.json")
        v.add(bool(nonroot and nonroot.get("ok")), pool, "mps-nonroot",
              "a client running as uid 65532 (after the root clients): "
              + (f"{nonroot['devices'][0]['sm_count_attr']} SMs, free {nonroot['devices'][0]['free_mib']} MiB"
                 if nonroot and nonroot.get("ok") else f"FAILED {(nonroot or {}).get('error', 'no output')}"),
              f"{REAL}, MPS control daemon of the device plugin")
    extra = load(d / "extra.pod.json") or {}
    conds = {c["type"]: c for c in (extra.get("status") or {}).get("conditions") or []}
    sched = conds.get("PodScheduled", {})
    events = " ".join(e.get("message", "") for e in (load(d / "extra.events.json") or {}).get("items", []))
    why = sched.get("message", "") + " " + events
    # Meaningful only where the node advertised its promise: with nothing advertised every pod is refused.
    v.add(alloc.get(resource) == str(want) and extra.get("status", {}).get("phase") == "Pending"
          and sched.get("reason") == "Unschedulable" and f"Insufficient {resource}" in why, pool, "one-more",
          f"pod {n + 1} with {resource}={alloc.get(resource, 'absent')}: {extra.get('status', {}).get('phase')} "
          f"{sched.get('reason')}: {why.strip()[:160]}", "real kube-scheduler")
    if expect["mode"] == "pgpu":
        check_tenant(v, d, pool, f"{REAL}, NVIDIA runtime with kube-accel's config")


RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def verify_row(text: str, pool: str) -> re.Match | None:
    """The verify summary's row of this pool: pool, mode, nodes, labels, daemonset, allocatable, job..., result."""
    return re.search(rf"^\s*-\s+'?({re.escape(pool)}\s+\S+\s+\d+\s+.*?\s(PASS|FAIL))'?\s*$", text, re.M)


def check_site(v: Verdicts, out: Path, pool: str, no_gpu: bool) -> None:
    log = out / "logs" / f"site-{pool}.txt"
    if not log.exists():
        return  # this run applied the rendered releases (E2E_SITE=0 or a bundle without Ansible)
    text = log.read_text()
    rc = step_rc(out, f"site-{pool}")
    recap = RECAP.findall(text)
    bad = [h for h, _, _, unreachable, failed in recap if int(unreachable) or int(failed)]
    row = verify_row(text, pool)
    verified = no_gpu or bool(row and row.group(2) == "PASS")
    plays = "preflight, cluster" + ("" if no_gpu else ", verify (a CUDA Job in the pool)")
    v.add(rc == 0 and bool(recap) and not bad and verified, pool, "site",
          f"ansible-playbook site.yml ({plays}): rc={rc}; "
          + "; ".join(f"{h} ok={ok} changed={ch} failed={f}" for h, ok, ch, _, f in recap)
          + ("" if no_gpu else "; verify: " + (" ".join(row.group(1).split()) if row else "no row for the pool")),
          "kube-accel's play, real kubelet" + ("" if no_gpu else ", real GPU"))


POOL_LABEL = "kube-accel.io/pool"
# The cluster play's tasks that move a node, in the order they must run (names from roles/pool_labels and
# roles/release_cleanup, ansible/site.yml).
SWITCH_TASKS = ("Drain the node", "Reconcile the labels and taints", "Uncordon the node")


def timeline(out: Path) -> list[tuple[float, str, bool, dict[str, str]]]:
    """logs/timeline.log as (epoch, the node's pool label, cordoned, {tenant pod uid: phase[ deleting]})."""
    rows = []
    path = out / "logs" / "timeline.log"
    for line in read(path, errors="replace").splitlines():
        parts = line.split("|")
        if len(parts) != 4:
            continue
        with contextlib.suppress(ValueError):
            pods = {}
            for item in parts[3].split():
                uid, _, rest = item.partition(":")
                phase, _, deleting = rest.partition(":")
                pods[uid] = phase + (" deleting" if deleting else "")
            rows.append((float(parts[0]), parts[1], parts[2] == "true", pods))
    return rows


def pods_of(path: Path) -> list[dict]:
    return (load(path) or {}).get("items") or []


def check_switch(v: Verdicts, out: Path, pool: str, rows: list) -> None:
    """The previous pool's running tenant left the node before the node joined POOL."""
    d = out / "pools" / pool
    before = pods_of(d / "hold-before.json")
    if not (d / "hold-before.json").exists():
        return  # the first pool, or a run without site.yml: no switch
    pod = before[0] if before else {}
    uid = (pod.get("metadata") or {}).get("uid")
    prev = ((pod.get("spec") or {}).get("nodeSelector") or {}).get(POOL_LABEL)
    seen = [t for t, label, _, pods in rows if uid in pods and label == prev]
    # From the tenant's first sample on (the node may still be cordoned from the switch into the previous pool).
    rows = [row for row in rows if seen and row[0] >= seen[0]]
    joined = [t for t, label, _, _ in rows if label == pool]
    overlap = [t for t, label, _, pods in rows if uid in pods and label == pool]
    cordoned = [t for t, label, cordon, _ in rows if cordon and label == prev]
    emptied = [t for t, label, cordon, pods in rows if cordon and label == prev and uid not in pods]
    after = pods_of(d / "hold-after.json")
    still = [p for p in after if p["metadata"]["uid"] == uid]
    placed = [p["metadata"]["name"] for p in after
              if p["metadata"]["uid"] != uid and (p.get("spec") or {}).get("nodeName")]
    text = read(out / "logs" / f"site-{pool}.txt")
    at = [text.find(task) for task in SWITCH_TASKS]
    ordered = -1 not in at and at == sorted(at)
    back = [t for t, label, cordon, _ in rows if label == pool and not cordon and joined and t > joined[0]]
    t0 = seen[0] if seen else None

    def rel(ts: list[float]) -> str:  # seconds after the tenant was first seen
        return f"{ts[0] - t0:+.1f}s" if ts and t0 else "never"

    ok = (bool(uid) and bool(seen) and bool(joined) and not overlap and bool(cordoned) and cordoned[0] < joined[0]
          and not still and not placed and ordered and bool(back))
    v.add(ok, pool, "switch",
          f"{prev} tenant {pod.get('metadata', {}).get('name', 'absent')} running; node cordoned {rel(cordoned)}, "
          f"emptied {rel(emptied)}, labelled {pool} {rel(joined)}; tenant on a node labelled {pool}: "
          f"{len(overlap)} sample(s); site.yml {' < '.join(SWITCH_TASKS)}: {'yes' if ordered else 'NO'}; "
          f"its next pod placed: {placed or 'no (Pending)'}; uncordoned {rel(back)}",
          "real kubelet and API server, kube-accel's play; timeline polled every 0.5 s")


def check_rerun(v: Verdicts, out: Path, rows: list, no_gpu: bool) -> None:
    """site.yml again with nothing to change: no change, no cordon, no agent or tenant restarted."""
    r = out / "rerun"
    if not (r / "pool").exists():
        return
    pool = (r / "pool").read_text().strip()
    name = f"site-again-{pool}"
    text = read(out / "logs" / f"{name}.txt")
    rc = step_rc(out, name)
    recap = RECAP.findall(text)
    changed = {h: int(c) for h, _, c, _, _ in recap}
    failed = [h for h, _, _, u, f in recap if int(u) or int(f)]

    def pods(path: Path) -> dict[str, tuple[str, int]]:
        """{pod: (uid, restarts)}; without a GPU the agents exit at NVML and restart on their own: uid only."""
        return {p["metadata"]["name"]: (p["metadata"]["uid"], 0 if no_gpu else sum(c.get("restartCount", 0) for c in
                (p.get("status") or {}).get("containerStatuses") or [])) for p in pods_of(path)}

    agents_before, agents_after = pods(r / "agents-before.json"), pods(r / "agents-after.json")
    hold_before, hold_after = pods(r / "hold-before.json"), pods(r / "hold-after.json")
    phases = {p["metadata"]["name"]: (p.get("status") or {}).get("phase") for p in pods_of(r / "hold-after.json")}
    window = [0.0, 0.0]
    for i, f in enumerate(("t0", "t1")):
        with contextlib.suppress(OSError, ValueError):
            window[i] = float((r / f).read_text())
    during = [row for row in rows if window[0] <= row[0] <= window[1]]
    cordoned = [row[0] for row in during if row[2]]
    row = verify_row(text, pool)
    verified = no_gpu or bool(row and row.group(2) == "PASS")
    daemons = sorted(n for n in agents_before if "mps-control-daemon" in n)
    ok = (rc == 0 and bool(recap) and not any(changed.values()) and not failed and bool(agents_before)
          and agents_after == agents_before and bool(hold_before) and hold_after == hold_before
          and set(phases.values()) == {"Running"} and bool(during) and not cordoned and verified)
    v.add(ok, pool, "rerun",
          f"site.yml again, a tenant holding a share: rc={rc}; "
          + "; ".join(f"{h} changed={c}" for h, c in changed.items())
          + f"; cordoned in {len(during)} samples: {len(cordoned)}; agents unchanged (same pods"
          + (")" if no_gpu else ", no restart)") + ": "
          + f"{agents_after == agents_before} ({len(agents_before)}, MPS control daemon {daemons or 'none'}); "
          + f"tenant unchanged and running: {hold_after == hold_before and set(phases.values()) == {'Running'}}"
          + ("" if no_gpu else "; verify: " + (" ".join(row.group(1).split()) if row else "no row for the pool")),
          "real kubelet and API server, kube-accel's play" + ("" if no_gpu else ", real GPU"))


def check_tenant(v: Verdicts, d: Path, pool: str, evidence: str) -> None:
    """The pod ran (the runtime's CDI path worked) and its probe found no GPU."""
    attack = load(d / "attack-envvar.json")
    phase = ((load(d / "attack-envvar.pod.json") or {}).get("status") or {}).get("phase")
    v.add(bool(attack) and not attack.get("ok") and phase == "Failed", pool, "tenant",
          f"no GPU request + NVIDIA_VISIBLE_DEVICES=all: {phase}, {(attack or {}).get('error', 'no probe output')}",
          evidence)


AGENTS = ("nvidia-device-plugin", "mps-control-daemon-ctr")


def agent_configs(pool_dir: Path) -> dict[str, dict | None]:
    """{pod/container: the config it printed after "Running with config:" (None: it never loaded one)} for the
    device plugin and MPS daemon containers, from their logs (kubectl logs --prefix)."""
    found: dict[str, dict | None] = {}
    for path in sorted(pool_dir.glob("agent-*.log")):
        lines: dict[str, list[str]] = {}
        for line in path.read_text(errors="replace").splitlines():
            m = re.match(r"^\[pod/([^/]+)/([^\]]+)\] ?(.*)$", line)
            if m and m.group(2) in AGENTS:
                lines.setdefault(f"{m.group(1)}/{m.group(2)}", []).append(m.group(3))
        for key, text in lines.items():
            found[key] = None
            for i, line in enumerate(text):
                if line.startswith("Running with config:"):
                    end = next((j for j in range(i + 1, len(text)) if text[j] == "}"), None)
                    if end is not None:
                        with contextlib.suppress(ValueError):
                            found[key] = json.loads("\n".join(text[i + 1:end + 1]))
    return found


def sharing_resources(config: dict | None) -> list[dict]:
    sharing = (config or {}).get("sharing") or {}
    return [r for kind in ("timeSlicing", "mps") for r in (sharing.get(kind) or {}).get("resources") or []]


def whole_gpu_sms(out: Path) -> int | None:
    for _, p, _ in probes(out / "pools" / "pgpu", "pgpu"):
        if p and p.get("ok"):
            return p["devices"][0]["sm_count_attr"]
    return None


def agents_loaded(pool_dir: Path) -> bool:
    """Every agent container that logged has printed the config it loaded, and one has (gpu-e2e.sh waits for this
    before it keeps the logs: on a loaded machine a container runs a while before its first line)."""
    configs = agent_configs(pool_dir)
    return bool(configs) and None not in configs.values()


def ds_started(ds: dict, pods: list[dict]) -> bool:
    """Every pod the DaemonSet schedules is of its current template, ran its init containers to success and started
    each of its containers at least once (running now, or terminated since). Without a GPU the MPS pool's agents
    stop at NVML (no MPS daemons, no resource managers) and restart in a loop, Ready only for moments: their image,
    RuntimeClass, mounts, init containers and config are what this machine can show (the agents check reads the
    config from their logs)."""
    desired = ((ds.get("status") or {}).get("desiredNumberScheduled")) or 0
    if ((ds.get("status") or {}).get("updatedNumberScheduled") or 0) < desired:
        return False
    uid = (ds.get("metadata") or {}).get("uid")
    started = 0
    for pod in pods:
        if not any(o.get("uid") == uid for o in (pod.get("metadata") or {}).get("ownerReferences") or []):
            continue
        status = pod.get("status") or {}
        inits = status.get("initContainerStatuses") or []
        mains = status.get("containerStatuses") or []
        if (all(((c.get("state") or {}).get("terminated") or {}).get("exitCode") == 0 for c in inits) and mains
                and all("running" in (c.get("state") or {}) or "terminated" in (c.get("state") or {})
                        or "terminated" in (c.get("lastState") or {}) for c in mains)):
            started += 1
    return desired > 0 and started >= desired


def main() -> None:
    if sys.argv[1] == "--agents-loaded":
        sys.exit(0 if agents_loaded(Path(sys.argv[2])) else 1)
    if sys.argv[1] == "--ds-started":  # --ds-started DS.json PODS.json
        sys.exit(0 if ds_started(load(Path(sys.argv[2])) or {}, (load(Path(sys.argv[3])) or {}).get("items", []))
                 else 1)
    out = Path(sys.argv[1])
    no_gpu = not (out / "host-gpus.csv").exists()
    gpus = host_gpus(out)
    v = Verdicts()
    if not no_gpu and not gpus:
        v.add(False, "host", "gpus", "nvidia-smi listed no GPU", "host nvidia-smi")
    ready = read(out / "summary.txt")
    v.add("node " in ready and "Ready after" in ready, "cluster", "node", "the kubelet registered and is Ready",
          "real kubelet, kube-apiserver, etcd")
    skipped = re.search(r"^site\s+(SKIPPED: .*)$", ready, re.M)
    if skipped:  # the bundle's Ansible did not fit this host's Python: the pools ran without site.yml
        v.add(False, "cluster", "site", skipped.group(1), "gpu-e2e.sh")
    pools = [p.name for p in sorted((out / "pools").iterdir())] if (out / "pools").exists() else []
    if not pools:
        v.add(False, "cluster", "pools", "no pool ran", "gpu-e2e.sh")
    rows = timeline(out)
    for pool in pools:
        check_site(v, out, pool, no_gpu)
        check_switch(v, out, pool, rows)
        check_pool(v, out, pool, gpus, no_gpu)
    check_rerun(v, out, rows, no_gpu)
    print("\n".join(v.lines))
    print(f"RESULT {'FAIL' if v.failed else 'PASS'} ({'no GPU: ' if no_gpu else ''}{len(v.lines)} checks)")


if __name__ == "__main__":
    main()
