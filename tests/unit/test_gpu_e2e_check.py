"""scripts/gpu_e2e/check.py: the verdicts of a gpu-e2e.sh run pass on what a good run records and fail on each way a
pool can break its promise. The records are written here in the shapes gpu-e2e.sh stores (cuda-probe's JSON, kubectl's
pod and node JSON); their numbers are those of the H100 run in docs/gpu-validation.md (132 SMs, 81559 MiB)."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("gpu_e2e_check", REPO / "scripts" / "gpu_e2e" / "check.py")
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)

UUID = "GPU-3f1c2a9e-0000-1111-2222-333344445555"
EXPECT = {
    "pgpu": {"pool": "pgpu", "mode": "pgpu", "releases": ["kube-accel-pgpu"], "per_gpu": {"nvidia.com/gpu": 1},
             "request": {"nvidia.com/gpu": "1"}, "replicas": None},
    "timeslice": {"pool": "timeslice", "mode": "timeslice", "releases": ["kube-accel-timeslice"],
                  "per_gpu": {"nvidia.com/gpu.shared": 4}, "request": {"nvidia.com/gpu.shared": "1"}, "replicas": 4},
    "mps": {"pool": "mps", "mode": "mps", "releases": ["kube-accel-mps"], "per_gpu": {"nvidia.com/gpu": 4},
            "request": {"nvidia.com/gpu": "1"}, "replicas": 4},
}


def probe(sms=132, free=80000, allocs=None, ok=True, error=None):
    dev = {"index": 0, "uuid": UUID, "sm_count_attr": sms, "sms_used": sms, "free_mib": free, "ok": True}
    return {"ok": ok, "error": error, "device_count": 1 if ok else 0, "devices": [dev] if ok else [],
            "allocs": allocs or [{"mib": 1024, "ok": True, "error": None}]}


def write(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)


def good_run(out: Path) -> dict[str, dict]:
    """{pool: {file: data}} of a run where every pool kept its promise."""
    write(out / "host-gpus.csv", f"0, {UUID}, NVIDIA H100 80GB HBM3, 81559, 580.159.04, Default, Disabled\n")
    write(out / "summary.txt", "node                         Ready after 20s: real kubelet v1.36.3\n")
    mps_allocs = [{"mib": 1024, "ok": True, "error": None},
                  {"mib": 22437, "ok": False, "error": "CUDA_ERROR_OUT_OF_MEMORY"}]
    files = {}
    for pool, expect in EXPECT.items():
        res, per = next(iter(expect["per_gpu"].items()))
        n = 1 if pool == "pgpu" else 4
        replicas = expect["replicas"]
        config = {"flags": {}, "sharing": {"timeSlicing": {"resources": [{"name": res, "replicas": replicas}]}}
                  if pool == "timeslice" else {"mps": {"resources": [{"name": res, "replicas": replicas}]}}
                  if pool == "mps" else {}}
        containers = ["nvidia-device-plugin"] + (["mps-control-daemon-ctr"] if pool == "mps" else [])
        f = {"expect.json": expect,
             "agent-a.log": "".join(f"[pod/agent-0/{c}] {line}\n" for c in containers
                                    for line in ["I1126 main.go:351] Loading configuration.", "Running with config:",
                                                 *json.dumps(config, indent=2).splitlines()]),
             "agents.json": {"items": [{"metadata": {"name": "agent-0"}, "status": {"containerStatuses": [
                 {"name": c, "ready": True} for c in containers]}}]},
             "node-status.json": {"status": {"allocatable": {res: str(per)}}},
             "rollout.txt": 'daemon set "x" successfully rolled out\n',
             "extra.pod.json": {"status": {"phase": "Pending", "conditions": [
                 {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                  "message": f"0/1 nodes are available: 1 Insufficient {res}."}]}},
             "extra.events.json": {"items": []}}
        for i in range(1, n + 1):
            f[f"{pool}-{i}.json"] = probe(32, 20300, mps_allocs) if pool == "mps" else probe()
            f[f"{pool}-{i}.pod.json"] = {"status": {"phase": "Succeeded"}}
        if pool == "pgpu":
            f["attack-envvar.json"] = probe(ok=False, error="dlopen libcuda.so.1: not found")
            f["attack-envvar.pod.json"] = {"status": {"phase": "Failed"}}
        if pool == "mps":
            f["mps-nonroot.json"] = probe(32, 20300, mps_allocs)
        files[pool] = f
    return files


def run_check(out: Path, capsys, monkeypatch) -> list[str]:
    monkeypatch.setattr(sys, "argv", ["check.py", str(out)])
    check.main()
    return capsys.readouterr().out.splitlines()


def verdicts(out: Path, files: dict[str, dict], capsys, monkeypatch) -> list[str]:
    for pool, f in files.items():
        for name, data in f.items():
            write(out / "pools" / pool / name, data)
    return run_check(out, capsys, monkeypatch)


def test_good_run_passes(tmp_path, capsys, monkeypatch):
    lines = verdicts(tmp_path, good_run(tmp_path), capsys, monkeypatch)
    assert lines[-1].startswith("RESULT PASS"), lines
    assert not [line for line in lines if line.startswith("FAIL")]
    names = {" ".join(line.split()[1:3]).rstrip(":") for line in lines if line.startswith("PASS")}
    assert {"pgpu share", "pgpu tenant", "timeslice one-more", "mps mps-nonroot"} <= names
    assert any(line.startswith("PASS mps mps-threads") and "real kubelet, real GPU" in line for line in lines)


BREAKS = {
    # the plugin never read its config (the dangling /config symlink a real kubelet showed)
    "agents": ("pgpu", lambda f: f.update({"agent-a.log": "[pod/agent-0/nvidia-device-plugin] error starting plugins: "
                                                          "unable to load config\n"})),
    # the plugin read a config with other sharing than promised
    "agents ": ("timeslice", lambda f: f.update({"agent-a.log": f["agent-a.log"].replace('"replicas": 4',
                                                                                         '"replicas": 8')})),
    # the plugin advertised something else than kube-accel promised
    "advertised": ("timeslice", lambda f: f["node-status.json"]["status"]["allocatable"].update(
        {"nvidia.com/gpu.shared": "8"})),
    # one of the promised time-slice replicas did not get the GPU
    "share": ("timeslice", lambda f: f.update({"timeslice-3.json": probe(ok=False, error="cuInit: NO_DEVICE")})),
    # an MPS client saw the whole GPU: the thread percentage did not hold
    "mps-threads": ("mps", lambda f: f.update({"mps-2.json": probe(132, 20300, f["mps-1.json"]["allocs"])})),
    # an allocation above the pinned-memory limit succeeded
    "mps-memory": ("mps", lambda f: f["mps-1.json"]["allocs"][1].update({"ok": True, "error": None})),
    # a pod beyond the promise was scheduled
    "one-more": ("pgpu", lambda f: f["extra.pod.json"]["status"].update({"phase": "Running", "conditions": []})),
    # the tenant without a GPU request got one
    "tenant": ("pgpu", lambda f: f.update({"attack-envvar.json": probe()})),
}


@pytest.mark.parametrize("check_name", sorted(BREAKS))
def test_each_broken_promise_fails(tmp_path, capsys, monkeypatch, check_name):
    pool, breaker = BREAKS[check_name]
    check_name = check_name.strip()
    files = copy.deepcopy(good_run(tmp_path))
    breaker(files[pool])
    lines = verdicts(tmp_path, files, capsys, monkeypatch)
    failed = [line for line in lines if line.startswith("FAIL")]
    # The broken check fails, in that pool only (one-more follows advertised: it means nothing without it).
    assert any(line.startswith(f"FAIL {pool} {check_name}") for line in failed), lines
    allowed = (check_name, "one-more") if check_name == "advertised" else (check_name,)
    assert all(line.startswith(tuple(f"FAIL {pool} {c}" for c in allowed)) for line in failed), failed
    assert lines[-1].startswith("RESULT FAIL")


def test_no_gpu_run_checks_agents_and_tenant(tmp_path, capsys, monkeypatch):
    files = good_run(tmp_path)
    (tmp_path / "host-gpus.csv").unlink()
    for f in files.values():
        res = next(iter(f["expect.json"]["per_gpu"]))
        f["node-status.json"] = {"status": {"allocatable": {"cpu": "2"}}}
        assert res not in f["node-status.json"]["status"]["allocatable"]
    lines = verdicts(tmp_path, files, capsys, monkeypatch)
    assert lines[-1].startswith("RESULT PASS (no GPU"), lines
    assert any(line.startswith("PASS pgpu tenant") for line in lines)


def test_recorded_h100_run_with_the_chart_bug(tmp_path, capsys, monkeypatch):
    """The first run on a real node (H100, driver 580.159.04, 2026-11-26; records in tests/data/gpu-e2e): the pgpu
    chart's plugin could not read its config (dangling /config symlink: the record's chart mounts no
    /available-configs), so nothing was advertised. The verdicts say so, and do not count the refused extra pod as a
    kept promise; the tenant's pod got no GPU."""
    import tarfile

    with tarfile.open(REPO / "tests" / "data" / "gpu-e2e" / "h100-2026-11-26-first-run.tar.xz") as tar:
        tar.extractall(tmp_path, filter="data")
    lines = run_check(tmp_path / "e2e-out", capsys, monkeypatch)
    assert any(line.startswith("FAIL pgpu agents") and "did NOT load its config" in line for line in lines), lines
    assert any(line.startswith("FAIL pgpu one-more") for line in lines)
    assert any(line.startswith("PASS pgpu tenant") and "real GPU" in line for line in lines)
    assert lines[-1].startswith("RESULT FAIL")


def test_recorded_h200_run_keeps_every_promise(tmp_path, capsys, monkeypatch):
    """The passing run (H200, driver 580.159.04, 2026-11-26; records in tests/data/gpu-e2e): check.py, run again
    on what the real node recorded, finds every pool's promise kept: what the plugin advertised, CUDA pods on the
    host's GPU, MPS's SM and pinned-memory limits, the extra pod refused by the real scheduler, no GPU for the
    tenant."""
    import tarfile

    with tarfile.open(REPO / "tests" / "data" / "gpu-e2e" / "h200-2026-11-26-pass.tar.xz") as tar:
        tar.extractall(tmp_path, filter="data")
    lines = run_check(tmp_path / "e2e-out", capsys, monkeypatch)
    assert lines[-1] == "RESULT PASS (23 checks)", lines
    assert not [line for line in lines if line.startswith("FAIL")]
    for pool, advertised in (("pgpu", "nvidia.com/gpu=1"), ("timeslice", "nvidia.com/gpu.shared=4"),
                             ("mps", "nvidia.com/gpu=4")):
        assert any(line.startswith(f"PASS {pool} advertised: {advertised},") for line in lines), (pool, lines)
        assert any(line.startswith(f"PASS {pool} one-more") and "Insufficient" in line for line in lines), pool
    threads = [line for line in lines if line.startswith("PASS mps mps-threads")]
    assert len(threads) == 4 and all("kernel on 32, of 132" in line for line in threads), threads
    memory = [line for line in lines if line.startswith("PASS mps mps-memory")]
    assert len(memory) == 4 and all("CUDA_ERROR_OUT_OF_MEMORY" in line for line in memory), memory


def test_recorded_h200_site_run(tmp_path, capsys, monkeypatch):
    """`ansible-playbook site.yml` on the real node (H200, 2026-11-26; records in tests/data/gpu-e2e): each pool's run
    passed its preflight on real NVML, switched the node from the previous pool and verified it with a CUDA Job. The
    site verdict reads the play's recap and the verify table's row; a failed task or a failed row is a FAIL."""
    import tarfile

    with tarfile.open(REPO / "tests" / "data" / "gpu-e2e" / "h200-2026-11-26-site.tar.xz") as tar:
        tar.extractall(tmp_path, filter="data")
    out = tmp_path / "e2e-out"
    lines = run_check(out, capsys, monkeypatch)
    assert lines[-1] == "RESULT PASS (26 checks)", lines
    for pool in ("pgpu", "timeslice", "mps"):
        site = next(line for line in lines if line.startswith(f"PASS {pool} site:"))
        assert f"verify: {pool} {pool} 1 ok ok ok completed on gpu-e2e-node PASS" in site, site
        assert "real GPU" in site
    assert "plan OK (1 GPU(s); source nvml)" in (out / "logs" / "site-pgpu.txt").read_text()

    log = out / "logs" / "site-mps.txt"
    log.write_text(log.read_text().replace("completed on gpu-e2e-node  PASS", "failed on gpu-e2e-node     FAIL"))
    lines = run_check(out, capsys, monkeypatch)
    assert any(line.startswith("FAIL mps site:") and "FAIL" in line.split("verify:")[1] for line in lines), lines
    log = out / "logs" / "site-pgpu.txt"
    recap = "gpu-e2e-node               : ok=10   changed=0    unreachable=0    failed="
    log.write_text(log.read_text().replace(recap + "0", recap + "1"))
    lines = run_check(out, capsys, monkeypatch)
    assert any(line.startswith("FAIL pgpu site:") and "failed=1" in line for line in lines), lines
    assert lines[-1].startswith("RESULT FAIL")


def test_site_skipped_for_another_python_is_a_failure(tmp_path, capsys, monkeypatch):
    """A bundle built for another Python than the host's runs the pools without site.yml: that is not a pass."""
    import tarfile

    with tarfile.open(REPO / "tests" / "data" / "gpu-e2e" / "h200-2026-11-26-pass.tar.xz") as tar:
        tar.extractall(tmp_path, filter="data")
    out = tmp_path / "e2e-out"
    with (out / "summary.txt").open("a") as f:
        f.write("site                         SKIPPED: the bundle's Ansible is for Python 3.11, this host runs 3.12\n")
    lines = run_check(out, capsys, monkeypatch)
    assert "FAIL cluster site: SKIPPED: the bundle's Ansible is for Python 3.11" in "\n".join(lines)
    assert lines[-1].startswith("RESULT FAIL")


def day2_run(out: Path, gpu: bool = True) -> None:
    """What gpu-e2e.sh records for day 2 (shapes of kubectl's JSON and its timeline.log): pgpu -> timeslice with a pgpu
    tenant running, then site.yml once more on the timeslice pool with a tenant holding a share (with a GPU, its
    verify row too)."""
    def pod(name, uid, pool, node=None, phase="Running", restarts=0):
        return {"metadata": {"name": name, "uid": uid}, "spec": {"nodeSelector": {check.POOL_LABEL: pool},
                                                                 **({"nodeName": node} if node else {})},
                "status": {"phase": phase, "containerStatuses": [{"name": "client", "restartCount": restarts}]}}

    sw = out / "pools" / "timeslice"
    write(sw / "hold-before.json", {"items": [pod("hold-pgpu-a", "u1", "pgpu", "gpu-e2e-node")]})
    write(sw / "hold-after.json", {"items": [pod("hold-pgpu-b", "u2", "pgpu", phase="Pending")]})
    recap = "gpu-e2e-node               : ok=30   changed={}    unreachable=0    failed=0\n"
    write(out / "logs" / "site-timeslice.txt", "TASK [kube_accel.gpu.node_reboot : Drain the node]\n"
          "TASK [kube_accel.gpu.pool_labels : Reconcile the labels and taints of every pool's nodes]\n"
          "TASK [kube_accel.gpu.node_reboot : Uncordon the node if kube-accel cordoned it]\n" + recap.format(8)
          + "rc=0\n")
    rows = ["100.0|pgpu||u1:Running: ", "101.0|pgpu|true|u1:Running: ", "102.0|pgpu|true|u1:Running:2026 ",
            "108.0|pgpu|true|", "110.0|timeslice|true|u2:Pending: ", "112.0|timeslice||u2:Pending: ",
            "200.0|timeslice||u3:Running: ", "230.0|timeslice||u3:Running: "]
    rr = out / "rerun"
    write(rr / "pool", "timeslice\n")
    write(rr / "t0", "199.5")
    write(rr / "t1", "240.0")
    agents = {"items": [pod("kube-accel-timeslice-device-plugin-x", "a1", "timeslice", "gpu-e2e-node")]}
    write(rr / "agents-before.json", agents)
    write(rr / "agents-after.json", agents)
    hold = {"items": [pod("again-timeslice-a", "u3", "timeslice", "gpu-e2e-node")]}
    write(rr / "hold-before.json", hold)
    write(rr / "hold-after.json", hold)
    row = "    - '{}  timeslice  1  ok  ok  ok  completed on gpu-e2e-node  PASS'\n".format("timeslice")
    write(out / "logs" / "site-again-timeslice.txt", (row if gpu else "") + recap.format(0) + "rc=0\n")
    if gpu:
        write(out / "host-gpus.csv", f"0, {UUID}, NVIDIA H100 80GB HBM3, 81559, 580.159.04, Default, Disabled\n")
    write(out / "logs" / "timeline.log", "\n".join(rows) + "\n")


def day2_lines(out: Path, capsys, monkeypatch) -> dict[str, str]:
    lines = run_check(out, capsys, monkeypatch)
    return {check_name: next(line for line in lines if f" timeslice {check_name}:" in line)
            for check_name in ("switch", "rerun")}


@pytest.mark.parametrize("gpu", [True, False])
def test_day2_switch_and_rerun_pass(tmp_path, capsys, monkeypatch, gpu):
    day2_run(tmp_path, gpu)
    got = day2_lines(tmp_path, capsys, monkeypatch)
    assert got["switch"].startswith("PASS") and "cordoned +1.0s, emptied +8.0s, labelled timeslice +10.0s" in \
        got["switch"], got
    assert got["rerun"].startswith("PASS") and "changed=0" in got["rerun"], got
    assert ("verify: timeslice timeslice 1 ok ok ok completed on gpu-e2e-node PASS" in got["rerun"]) is gpu, got


DAY2_BREAKS = {
    # the old pool's tenant still ran when the node was already labelled for the new pool
    "switch": lambda out: (out / "logs" / "timeline.log").write_text(
        (out / "logs" / "timeline.log").read_text().replace("108.0|pgpu|true|", "109.0|timeslice|true|u1:Running: ")),
    # the node was never cordoned: pods were placed while it switched
    "switch ": lambda out: (out / "logs" / "timeline.log").write_text(
        (out / "logs" / "timeline.log").read_text().replace("|pgpu|true|", "|pgpu||")),
    # the Deployment's next pod landed in the new pool
    "switch  ": lambda out: write(out / "pools" / "timeslice" / "hold-after.json", {"items": [
        {"metadata": {"name": "hold-pgpu-b", "uid": "u2"}, "spec": {"nodeName": "gpu-e2e-node"}}]}),
    # the relabelling ran before the drain
    "switch   ": lambda out: write(out / "logs" / "site-timeslice.txt", "TASK [x : Reconcile the labels and taints]\n"
                                   "TASK [x : Drain the node]\nTASK [x : Uncordon the node]\nrc=0\n"),
    # the second run changed something
    "rerun": lambda out: write(out / "logs" / "site-again-timeslice.txt",
                               "gpu-e2e-node : ok=30 changed=1 unreachable=0 failed=0\nrc=0\n"),
    # the device plugin's container was restarted during the second run (with a GPU it never exits on its own)
    "rerun ": lambda out: write(out / "rerun" / "agents-after.json", {"items": [
        {"metadata": {"name": "kube-accel-timeslice-device-plugin-x", "uid": "a1"},
         "status": {"containerStatuses": [{"restartCount": 1}]}}]}),
    # the verify Job failed beside the tenant
    "rerun    ": lambda out: (out / "logs" / "site-again-timeslice.txt").write_text(
        (out / "logs" / "site-again-timeslice.txt").read_text().replace("completed on gpu-e2e-node  PASS",
                                                                         "failed on gpu-e2e-node  FAIL")),
    # the tenant's pod was replaced
    "rerun  ": lambda out: write(out / "rerun" / "hold-after.json", {"items": [
        {"metadata": {"name": "again-timeslice-b", "uid": "u4"}, "status": {"phase": "Running"}}]}),
    # the node was cordoned during the second run
    "rerun   ": lambda out: (out / "logs" / "timeline.log").write_text(
        (out / "logs" / "timeline.log").read_text().replace("230.0|timeslice||", "230.0|timeslice|true|")),
}


@pytest.mark.parametrize("case", sorted(DAY2_BREAKS))
def test_day2_breaks_fail(tmp_path, capsys, monkeypatch, case):
    day2_run(tmp_path)
    DAY2_BREAKS[case](tmp_path)
    got = day2_lines(tmp_path, capsys, monkeypatch)
    name = case.strip()
    assert got[name].startswith("FAIL"), got
    other = "rerun" if name == "switch" else "switch"
    assert got[other].startswith("PASS"), got


def test_recorded_h200_drain_held_by_the_grace_period(tmp_path, capsys, monkeypatch):
    """The day-2 run on a real node (H200, driver 580.159.04, 2026-11-27; records in tests/data/gpu-e2e): a CUDA tenant
    of the pgpu pool (a Deployment, terminationGracePeriodSeconds 5, cuda-probe as PID 1, which ignores SIGTERM) was
    running when site.yml moved the node to the timeslice pool. The drain evicted it with a 300 s grace period (the
    kubelet log says so), so it never left within site.yml's time and the switch verdict fails: cordoned, never
    emptied, never relabelled. node_reboot now leaves each pod its own grace period
    (tests/integration/test_node_reboot_lab.py reads the one the API server records), and drains with
    accel_node_drain."""
    import tarfile

    with tarfile.open(REPO / "tests" / "data" / "gpu-e2e" / "h200-2026-11-27-day2-drain-hold.tar.xz") as tar:
        tar.extractall(tmp_path, filter="data")
    out = tmp_path / "e2e-out"
    lines = run_check(out, capsys, monkeypatch)
    switch = next(line for line in lines if " timeslice switch:" in line)
    assert switch.startswith("FAIL") and "emptied never, labelled timeslice never" in switch, switch
    assert any(line.startswith("PASS pgpu share:") and "real GPU" in line for line in lines)
    kubelet = (out / "logs" / "kubelet.log").read_text()
    tenant = [line for line in kubelet.splitlines() if "Killing container" in line and "hold-pgpu-" in line]
    assert tenant and all("gracePeriod=300" in line for line in tenant), tenant
    # The same drain deleted kube-accel's own device-plugin pod (a DaemonSet pod with an emptyDir volume: the 300 s
    # is the drain's, kubernetes.core#622); accel_node_drain leaves DaemonSet pods alone.
    plugin = [line for line in kubelet.splitlines() if "Killing container" in line
              and "kube-accel-pgpu-device-plugin-" in line and "gracePeriod=300" in line]
    assert plugin, "the drain's deletion of the device-plugin pod is in the kubelet log"
    assert "TIMED OUT" in (out / "logs" / "site-timeslice.txt").read_text()


def test_recorded_h200_day2_passes_with_the_fixed_drain(tmp_path, capsys, monkeypatch):
    """The same day 2 on the same kind of node (H200, driver 580.159.04, 2026-11-27, records in tests/data/gpu-e2e)
    with accel_node_drain and each pod's own grace period: both switches and the rerun pass. The kubelet killed each
    tenant with its own 5 s grace period. (The device-plugin pods it killed, with 30 s, are the old releases' pods,
    uninstalled by release_cleanup after the relabel; the drain leaves DaemonSet pods alone.)"""
    import tarfile

    with tarfile.open(REPO / "tests" / "data" / "gpu-e2e" / "h200-2026-11-27-day2-pass.tar.xz") as tar:
        tar.extractall(tmp_path, filter="data")
    out = tmp_path / "e2e-out"
    lines = run_check(out, capsys, monkeypatch)
    assert lines[-1] == "RESULT PASS (29 checks)", lines[-3:]
    for name in ("timeslice switch:", "mps switch:", "mps rerun:"):
        line = next(line for line in lines if f" {name}" in line)
        assert line.startswith("PASS"), line
    kubelet = (out / "logs" / "kubelet.log").read_text().splitlines()
    tenants = [line for line in kubelet if "Killing container" in line and '"kube-accel-e2e/hold-' in line]
    assert len(tenants) == 2 and all("gracePeriod=5" in line for line in tenants), tenants
    assert not any("gracePeriod=300" in line for line in kubelet)


def test_agents_loaded_waits_for_every_agent_to_print_its_config(tmp_path):
    """gpu-e2e.sh keeps the agents' logs once this holds: an empty log (a container that has not started printing),
    or an agent that logged without its config yet, is not loaded; a foreign container's lines do not count."""
    log = tmp_path / "agent-a.log"
    log.write_text("")
    assert not check.agents_loaded(tmp_path)
    log.write_text("[pod/a/other] Running with config:\n{\n}\n[pod/a/nvidia-device-plugin] Loading configuration.\n")
    assert not check.agents_loaded(tmp_path)
    log.write_text(log.read_text() + "[pod/a/nvidia-device-plugin] Running with config:\n"
                   "[pod/a/nvidia-device-plugin] {\n[pod/a/nvidia-device-plugin] }\n")
    assert check.agents_loaded(tmp_path)


def test_ds_started_counts_pods_whose_containers_started_even_if_they_stop_at_nvml():
    """Without a GPU the MPS pool's agents exit at NVML and restart in a loop (seen in the real-node test: the device
    plugin and the MPS control daemon at restart 2 after the pool's rollout; the pod status below has their shape): a
    pod counts once its init containers succeeded and its containers started, Ready or not; a pod still in its init
    containers, another DaemonSet's pod, or a DaemonSet that schedules none does not."""
    ds = {"metadata": {"uid": "ds-1"}, "status": {"desiredNumberScheduled": 1, "updatedNumberScheduled": 1}}
    owner = {"ownerReferences": [{"kind": "DaemonSet", "uid": "ds-1"}]}
    inits_done = [{"name": n, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
                  for n in ("config-manager-init", "mps-control-daemon-mounts")]
    crash_looping = {"metadata": owner, "status": {"initContainerStatuses": inits_done, "containerStatuses": [
        {"name": "mps-control-daemon-ctr", "ready": False, "restartCount": 3,
         "state": {"waiting": {"reason": "CrashLoopBackOff"}},
         "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}},
        {"name": "config-manager", "ready": True, "state": {"running": {"startedAt": "2026-11-28T10:00:00Z"}}}]}}
    assert check.ds_started(ds, [crash_looping])
    initializing = {"metadata": owner, "status": {
        "initContainerStatuses": [inits_done[0], {"name": "mps-control-daemon-mounts",
                                                   "state": {"running": {}}}],
        "containerStatuses": [{"name": "mps-control-daemon-ctr", "state": {"waiting": {"reason": "PodInitializing"}}}]}}
    assert not check.ds_started(ds, [initializing])
    foreign = {"metadata": {"ownerReferences": [{"uid": "other"}]}, "status": crash_looping["status"]}
    assert not check.ds_started(ds, [foreign])
    assert not check.ds_started({**ds, "status": {"desiredNumberScheduled": 0}}, [crash_looping])
    # A pod of the previous template (a rolling update not done yet) does not count either.
    assert not check.ds_started({**ds, "status": {"desiredNumberScheduled": 1, "updatedNumberScheduled": 0}},
                                [crash_looping])
