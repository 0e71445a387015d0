"""Process handling of gpucheck without a GPU: the private MPS daemon's lifecycle and cleanup, the MPS limit
check and the benchmark orchestration.

No GPU here, so two stand-ins are written into tmp_path and run as real processes:
- a fake ``nvidia-cuda-mps-control`` composed from the MPS docs' command list (``-d`` daemonises and writes
  the pid file into CUDA_MPS_PIPE_DIRECTORY; without arguments it sends stdin's commands to the daemon; the
  daemon spawns a "server" child on ``start_server`` and exits on ``quit``), and
- a fake GPU client with workload.py's command line, that asks the fake daemon for its limits the way
  libcuda's MPS client side would, and reports composed numbers (never used as results).
The real process handling (fork, pid files, signals, PID identity) is what these tests exercise.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kube_accel.gpucheck import checks, clients, mps, procs

FAKE_CONTROL = r"""
import os, signal, socket, subprocess, sys, time

PIPE = os.environ["CUDA_MPS_PIPE_DIRECTORY"]
LOG = os.environ.get("CUDA_MPS_LOG_DIRECTORY", PIPE)
SOCK = os.path.join(PIPE, "control")
PIDFILE = os.path.join(PIPE, "nvidia-cuda-mps-control.pid")
BEHAVIOUR = os.environ.get("FAKE_MPS", "").split(",")


def log(msg):
    with open(os.path.join(LOG, "control.log"), "a") as fh:
        fh.write(msg + "\n")


def daemonize():
    if "fail-start" in BEHAVIOUR:
        print("An instance of this daemon is already running", file=sys.stderr)
        sys.exit(1)
    subprocess.Popen([sys.executable, __file__, "--serve"], start_new_session=True,
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sys.exit(0)


def server():
    if "ignore-term" in BEHAVIOUR:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        time.sleep(0.2)


def show_limit(value):
    # The display quirk of a recent driver: limits of 1 GiB and more printed as whole GiB, rounded down.
    mib = int(value[:-1]) * (1024 if value.endswith("G") else 1)
    return f"{mib // 1024}G" if mib >= 1024 else f"{mib}M"


def serve():
    if "ignore-term" in BEHAVIOUR:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(SOCK)
    srv.listen(8)
    if "no-pidfile" not in BEHAVIOUR:
        with open(PIDFILE, "w") as fh:
            fh.write(f"{os.getpid()}\n")
    log("daemon started")
    pct, limits, servers = 100.0, {}, []
    while True:
        conn, _ = srv.accept()
        words = conn.makefile().readline().split()
        log("cmd: " + " ".join(words))
        reply, stop = "", False
        if words[:1] == ["set_default_active_thread_percentage"]:
            pct = float(words[1])
        elif words[:1] == ["get_default_active_thread_percentage"]:
            reply = f"{pct:.1f}"
        elif words[:1] == ["set_default_device_pinned_mem_limit"]:
            limits[words[1]] = words[2]
        elif words[:1] == ["get_default_device_pinned_mem_limit"]:
            reply = limits.get(words[1], "")
        elif words[:1] == ["start_server"]:
            if not servers:
                servers.append(subprocess.Popen([sys.executable, __file__, "--server"]))
        elif words[:1] == ["get_server_list"]:
            reply = "\n".join(str(s.pid) for s in servers)
        elif words[:1] == ["get_device_pinned_mem_limit"]:
            reply = show_limit(limits[words[2]]) if words[2] in limits else ""
        elif words[:1] == ["quit"]:
            stop = "ignore-quit" not in BEHAVIOUR
        else:
            reply = "unknown command"
        conn.sendall(reply.encode())
        conn.close()
        if stop:
            for s in servers:
                s.terminate()
                s.wait()
            os.unlink(SOCK)
            if os.path.exists(PIDFILE):
                os.unlink(PIDFILE)
            log("daemon quit")
            return


def client():
    for line in sys.stdin:
        if not line.strip():
            continue
        conn = socket.socket(socket.AF_UNIX)
        try:
            conn.connect(SOCK)
        except OSError:
            print("Cannot find MPS control daemon process", file=sys.stderr)
            sys.exit(1)
        conn.sendall(line.encode())
        data = b""
        while chunk := conn.recv(4096):
            data += chunk
        if data:
            print(data.decode())


if sys.argv[1:] == ["-d"]:
    daemonize()
elif sys.argv[1:] == ["--serve"]:
    serve()
elif sys.argv[1:] == ["--server"]:
    server()
else:
    client()
"""

FAKE_CLIENT = r"""
import argparse, json, os, socket, sys, time

FULL_SM = 132
BEHAVIOUR = os.environ.get("FAKE_CLIENT", "").split(",")


def ask(line):
    path = os.path.join(os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/nonexistent"), "control")
    if not os.path.exists(path):
        return None  # no daemon in this pipe directory: runs without MPS, like libcuda
    conn = socket.socket(socket.AF_UNIX)
    conn.connect(path)
    conn.sendall((line + "\n").encode())
    data = b""
    while chunk := conn.recv(4096):
        data += chunk
    return data.decode()


def mps_state():
    if ask(f"start_server -uid {os.getuid()}") is None:
        return None
    pct = float(ask("get_default_active_thread_percentage"))
    # The tool names the device by UUID when it has one (CUDA_VISIBLE_DEVICES), else ordinal 0.
    device = os.environ.get("CUDA_VISIBLE_DEVICES", "0")
    limit = ask(f"get_default_device_pinned_mem_limit {device}") or ask("get_default_device_pinned_mem_limit 0")
    return pct, (int(limit[:-1]) if limit else None)


def emit(obj):
    print(json.dumps(obj), flush=True)


p = argparse.ArgumentParser()
p.add_argument("--lib", default="auto")
sub = p.add_subparsers(dest="cmd")
sub.add_parser("probe")
m = sub.add_parser("mem")
m.add_argument("--under", type=int)
m.add_argument("--over", type=int)
b = sub.add_parser("bench")
for opt in ("--batch", "--size", "--warmup"):
    b.add_argument(opt, type=int, default=8)
b.add_argument("--dtype", default="float16")
b.add_argument("--duration", type=float, default=0.2)
args = p.parse_args()
if "crash" in BEHAVIOUR:
    print("simulated CUDA init failure", file=sys.stderr)
    sys.exit(3)
state = mps_state()
if args.cmd == "probe":
    pct = state[0] if state else 100.0
    env_pct = os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
    if state and env_pct:
        pct = min(pct, float(env_pct))
    sm = FULL_SM if pct >= 100 else int(FULL_SM * pct / 100) // 2 * 2
    emit({"event": "result", "lib": "fake", "lib_version": "0", "device": "Fake GPU", "sm_count": sm,
          "env_thread_percentage": env_pct})
elif args.cmd == "mem":
    limit = state[1] if state else None
    enforced = limit is not None and "no-enforce" not in BEHAVIOUR
    over_refused = enforced and args.over > limit
    emit({"event": "result", "lib": "fake", "under_ok": True, "over_refused": over_refused,
          "over_error": "OutOfMemoryError: out of memory" if over_refused else None})
else:
    emit({"event": "ready", "pid": os.getpid()})
    assert sys.stdin.readline().strip() == "go"
    lat, t_start = [], time.monotonic()
    while time.monotonic() < t_start + args.duration:
        t0 = time.perf_counter()
        time.sleep(0.002)
        lat.append((time.perf_counter() - t0) * 1000)
    emit({"event": "result", "lib": "fake", "pid": os.getpid(), "batch": args.batch, "iterations": len(lat),
          "latencies_ms": lat, "t_start": t_start, "t_end": time.monotonic(),
          "mps_pipe": os.environ.get("CUDA_MPS_PIPE_DIRECTORY"),
          "visible": os.environ.get("CUDA_VISIBLE_DEVICES")})
"""


def _script(path: Path, body: str) -> Path:
    path.write_text(f"#!{sys.executable}\n" + body)
    path.chmod(0o755)
    return path


@pytest.fixture
def control(tmp_path) -> str:
    # Named like the real executable: the no-pid-file fallback recognises the daemon by that name.
    return str(_script(tmp_path / "nvidia-cuda-mps-control", FAKE_CONTROL))


@pytest.fixture
def client_base(tmp_path) -> list[str]:
    return clients.client_command(sys.executable, "auto", str(_script(tmp_path / "fake_client.py", FAKE_CLIENT)))


def _daemon(control, **kw) -> mps.MpsDaemon:
    kw.setdefault("quit_timeout", 15.0)  # only waited for when a daemon hangs; generous for a loaded CI box
    return mps.MpsDaemon(control=control, **kw)


def _gone(pids) -> bool:
    return not any(procs.is_running(p) for p in pids)


# --- daemon lifecycle --------------------------------------------------------------------------------------


def test_daemon_runs_in_private_dirs_answers_commands_and_quits(control, tmp_path):
    daemon = _daemon(control, keep_logs_in=tmp_path / "logs").start()
    root = daemon.root
    try:
        assert daemon.pipe_dir.parent == root and daemon.log_dir.parent == root
        env = daemon.env()
        assert env["CUDA_MPS_PIPE_DIRECTORY"] == str(root / "pipe")
        assert env["CUDA_MPS_LOG_DIRECTORY"] == str(root / "log")
        assert procs.is_running(daemon.pid)
        daemon.command(mps.command_set_thread_percentage(30))
        assert mps.parse_percentage(daemon.command("get_default_active_thread_percentage")) == 30
    finally:
        report = daemon.stop()
    assert report["quit_sent"] and report["leftover"] == [] and report["signalled"] == []
    assert not procs.is_running(daemon.pid)
    assert not root.exists(), "private MPS directory left behind"
    assert "daemon quit" in (tmp_path / "logs" / "control.log").read_text()


def test_exception_inside_with_quits_daemon_and_its_server(control):
    with pytest.raises(RuntimeError, match="boom"), _daemon(control) as daemon:
        daemon.command(f"start_server -uid {os.getuid()}")
        servers = daemon.server_pids()
        assert len(servers) == 1
        pids = [daemon.pid, *servers]
        raise RuntimeError("boom")
    assert _gone(pids)
    assert daemon.stop_report["quit_sent"] and daemon.stop_report["leftover"] == []


def test_daemon_ignoring_quit_is_terminated_by_pid(control, monkeypatch):
    monkeypatch.setenv("FAKE_MPS", "ignore-quit")
    daemon = _daemon(control, quit_timeout=0.5).start()
    daemon.command(f"start_server -uid {os.getuid()}")
    server = daemon.server_pids()[0]
    report = daemon.stop()
    assert report["quit_sent"]
    assert set(report["signalled"]) == {daemon.pid, server}
    assert report["leftover"] == [] and _gone([daemon.pid, server])


def test_daemon_ignoring_sigterm_is_killed(control, monkeypatch):
    monkeypatch.setenv("FAKE_MPS", "ignore-quit,ignore-term")
    daemon = _daemon(control, quit_timeout=0.3, kill_grace=0.3).start()
    report = daemon.stop()
    assert report["signalled"] == [daemon.pid]
    assert report["leftover"] == [] and _gone([daemon.pid])


def test_recycled_pid_is_never_signalled(control, monkeypatch):
    daemon = _daemon(control).start()
    real_pid = daemon.pid
    try:
        # Pretend our own test process is a PID we recorded long ago: its start time differs, so it is no
        # longer "ours" and must be left alone.
        daemon.known[os.getpid()] = (procs.start_time(os.getpid()) or 0) + 12345
        assert not procs.is_running(os.getpid(), daemon.known[os.getpid()])
        assert procs.terminate({os.getpid(): daemon.known[os.getpid()]}, grace=0.1) == []
    finally:
        daemon.known.pop(os.getpid())
        daemon.stop()
    assert _gone([real_pid])


def test_daemon_without_pid_file_is_found_through_its_pipe_directory(control, monkeypatch):
    monkeypatch.setenv("FAKE_MPS", "no-pidfile")
    with _daemon(control) as daemon:
        assert not (daemon.pipe_dir / mps.PID_FILE).exists()
        assert daemon.pid and procs.is_running(daemon.pid)
        pid = daemon.pid
    assert _gone([pid]) and daemon.stop_report["leftover"] == []


def test_failed_start_raises_and_removes_private_dirs(control, monkeypatch):
    monkeypatch.setenv("FAKE_MPS", "fail-start")
    daemon = _daemon(control)
    with pytest.raises(mps.MpsError, match="already running"):
        daemon.start()
    assert daemon.root is not None and not daemon.root.exists()


def test_sigterm_to_the_tool_still_quits_the_daemon(control, tmp_path):
    code = textwrap.dedent(f"""
        import json, os, sys, time
        from kube_accel.gpucheck import mps
        mps.install_signal_handlers()
        with mps.MpsDaemon(control={control!r}, quit_timeout=5) as d:
            d.command("start_server -uid %d" % os.getuid())
            print(json.dumps([d.pid, *d.server_pids()]), flush=True)
            time.sleep(60)
    """)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        pids = json.loads(child.stdout.readline())
        assert len(pids) == 2 and all(procs.is_running(p) for p in pids)
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=20) == 128 + signal.SIGTERM
    finally:
        if child.poll() is None:
            child.kill()
        child.stdout.close()
    assert _gone(pids)


# --- MPS limit check ---------------------------------------------------------------------------------------


def test_mps_check_passes_when_limits_are_enforced(control, client_base, tmp_path):
    logs = tmp_path / "logs"
    result = checks.run_mps_check(
        client_base, lambda: _daemon(control, keep_logs_in=logs), device=0, thread_pct=25, mem_limit_mib=2048
    )
    by_name = {c["name"]: c for c in result["checks"]}
    assert result["ok"], result["checks"]
    assert by_name["allocation of 3072 MiB past the limit is refused"]["ok"]
    # The fake prints 2048M as "2G" (the driver's display quirk); the readback must still be accepted.
    assert "'2G'" in by_name["pinned memory limit read back from the server"]["detail"]
    assert result["full_sm_count"] == 132 and result["mps_sm_count"] == 32
    assert result["mps_sm_count_client_env"] <= result["mps_sm_count"]
    assert result["shutdown"]["leftover"] == [] and result["shutdown"]["quit_sent"]
    # The only settings the tool makes are inside its private daemon (the fake client adds start_server and
    # the get_default_* queries that libcuda would make).
    sent = [line[5:] for line in (logs / "control.log").read_text().splitlines() if line.startswith("cmd: ")]
    assert [c for c in sent if c.startswith("set")] == [
        "set_default_active_thread_percentage 25",
        "set_default_device_pinned_mem_limit 0 2048M",
    ]
    assert sent[-1] == "quit"


def test_mps_check_fails_when_the_memory_limit_is_not_enforced(control, client_base, monkeypatch):
    monkeypatch.setenv("FAKE_CLIENT", "no-enforce")
    result = checks.run_mps_check(client_base, lambda: _daemon(control), mem_limit_mib=1024)
    failed = [c["name"] for c in result["checks"] if not c["ok"]]
    assert not result["ok"]
    assert failed == ["allocation of 2048 MiB past the limit is refused"]
    assert result["shutdown"]["leftover"] == []


def test_mps_check_reports_a_dead_client_and_still_shuts_down(control, client_base, monkeypatch):
    monkeypatch.setenv("FAKE_CLIENT", "crash")
    result = checks.run_mps_check(client_base, lambda: _daemon(control))
    assert not result["ok"]
    assert result["checks"][0]["name"] == "client without MPS"
    assert "simulated CUDA init failure" in result["checks"][0]["detail"]


def test_mps_check_records_daemon_start_failure(control, client_base, monkeypatch):
    monkeypatch.setenv("FAKE_MPS", "fail-start")
    result = checks.run_mps_check(client_base, lambda: _daemon(control))
    names = {c["name"]: c["ok"] for c in result["checks"]}
    assert names == {"MPS check ran to completion": False, "daemon quit and no MPS process left": True}


# --- benchmark orchestration -------------------------------------------------------------------------------


def test_benchmark_runs_every_mode_and_separates_mps_from_time_slicing(control, client_base):
    result = checks.run_benchmark(
        client_base, lambda: _daemon(control), ns=(1, 2), workload_args=checks.workload_args(4, 8, "float16", 1, 0.2)
    )
    assert result["ok"], result["errors"]
    assert sorted((r["mode"], r["n"]) for r in result["rows"]) == [
        ("baseline", 1),
        ("mps", 1),
        ("mps", 2),
        ("timeslice", 1),
        ("timeslice", 2),
    ]
    mps_pipes = {c["mps_pipe"] for c in result["clients"]["mps/2"]}
    ts_pipes = {c["mps_pipe"] for c in result["clients"]["timeslice/2"]}
    assert len(mps_pipes) == 1 and mps_pipes.pop().endswith("/pipe")
    assert len(ts_pipes) == 1 and "kagc-nomps-" in ts_pipes.pop()
    assert [q["n"] for q in result["ratios"]] == [1, 2]
    assert all(q["throughput_mps_over_ts"] > 0 for q in result["ratios"])
    assert result["mps_shutdown"]["leftover"] == []
    # Two clients run at once (released by one "go"): their measured windows overlap. Iteration counts would
    # depend on how busy the machine's cores are, the windows do not.
    for key in ("timeslice/2", "mps/2"):
        windows = [(c["t_start"], c["t_end"]) for c in result["clients"][key]]
        assert len(windows) == 2 and max(s for s, _ in windows) < min(e for _, e in windows), (key, windows)
        assert all(c["iterations"] > 0 for c in result["clients"][key])


def test_benchmark_records_failed_runs_instead_of_numbers(control, client_base, monkeypatch):
    monkeypatch.setenv("FAKE_CLIENT", "crash")
    result = checks.run_benchmark(client_base, lambda: _daemon(control), ns=(2,))
    assert result["rows"] == [] and not result["ok"]
    assert [(e["mode"], e["n"]) for e in result["errors"]] == [("baseline", 1), ("timeslice", 2), ("mps", 2)]
    assert all("exited 3" in e["error"] and "simulated CUDA init failure" in e["error"] for e in result["errors"])


def test_concurrent_clients_are_killed_when_one_fails(tmp_path):
    # Three clients get ready; after "go" the first to claim the marker file reports an error, the others hang
    # and ignore SIGTERM, so they must be killed after the grace period.
    script = _script(
        tmp_path / "c.py",
        textwrap.dedent("""
        import json, os, signal, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a client that ignores the polite stop
        out = os.environ["OUT"]
        open(os.path.join(out, str(os.getpid())), "w").close()
        print(json.dumps({"event": "ready", "pid": os.getpid()}), flush=True)
        sys.stdin.readline()
        try:
            os.close(os.open(os.path.join(out, "..", "failed"), os.O_CREAT | os.O_EXCL))
            print(json.dumps({"event": "error", "error": "first client fails"}), flush=True)
        except FileExistsError:
            pass
        time.sleep(60)
    """),
    )
    out = tmp_path / "pids"
    out.mkdir()
    start = time.monotonic()
    with pytest.raises(clients.ClientError, match="first client fails"):
        clients.run_concurrent(
            [sys.executable, str(script)], 3, {**os.environ, "OUT": str(out)}, 20, 20, stop_grace=1.0
        )
    assert time.monotonic() - start < 15
    pids = [int(p.name) for p in out.iterdir()]
    assert len(pids) == 3 and _gone(pids)


def test_real_workload_reports_missing_gpu_library_as_error():
    # This machine has neither a GPU nor CuPy/PyTorch with CUDA: the real client must say so, not crash.
    base = clients.client_command(sys.executable, "auto")
    with pytest.raises(clients.ClientError, match="no usable GPU library"):
        clients.run_once([*base, "probe"], dict(os.environ))


# --- the whole command line, on the stand-ins ---------------------------------------------------------------


def test_cli_all_end_to_end_on_stand_ins(control, client_base, tmp_path, monkeypatch, capsys):
    from kube_accel.gpucheck import cli, smi

    xml = Path(__file__).resolve().parents[1] / "data" / "gpucheck" / "nvidia-smi-q-x.composed.xml"
    fake_smi = _script(
        tmp_path / "nvidia-smi", f"import sys\nassert sys.argv[1:] == ['-q', '-x']\nprint(open({str(xml)!r}).read())\n"
    )
    facts_json = tmp_path / "facts.json"
    parsed = smi.parse_smi_xml(xml.read_text())
    facts_json.write_text(json.dumps({"nvidia_gpus": parsed}))
    # The stand-ins replace the two things this machine lacks: a driver (NVML) and a GPU library.
    monkeypatch.setattr(smi, "gpu_presence", lambda *_a, **_k: (True, "1 GPU(s)"))
    monkeypatch.setattr(clients, "client_command", lambda *_a, **_k: client_base)
    out = tmp_path / "results"
    argv = [
        "all",
        "--nvidia-smi",
        str(fake_smi),
        "--mps-control",
        control,
        "--facts-json",
        str(facts_json),
        "--clients",
        "1,2",
        "--duration",
        "0.2",
        "--warmup",
        "1",
        "--device",
        "1",
        "--out",
        str(out),
    ]
    assert cli.main(argv) == cli.EXIT_OK, capsys.readouterr()
    md = (out / "results.md").read_text()
    assert "Facts vs nvidia-smi: **PASS**" in md
    assert "MPS limits (thread 25 %, pinned memory 2048 MiB on device 1): **PASS**" in md
    assert "| MPS | 2 |" in md and "| time-sliced | 2 |" in md and "| baseline (1 process alone) | 1 |" in md
    assert (out / "bench.png").stat().st_size > 5000
    assert (out / "mps-logs" / "check" / "control.log").is_file()
    saved = json.loads((out / "results.json").read_text())
    assert saved["mps"]["physical_device"] == 1 and saved["environment"]["lib"] == "fake"
    a100 = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
    assert saved["mps"]["device"] == a100  # the limit was set on the tested GPU, named by UUID
    sent = (out / "mps-logs" / "check" / "control.log").read_text()
    assert f"cmd: set_default_device_pinned_mem_limit {a100} 2048M" in sent
    # Device 1 of the XML is the A100: every client and the daemon saw only that GPU, by UUID.
    for run in ("baseline/1", "timeslice/2", "mps/2"):
        assert {c["visible"] for c in saved["bench"]["clients"][run]} == {a100}
