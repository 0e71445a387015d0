"""Start GPU client processes (workload.py, or a stand-in in tests) and collect their JSON results."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from . import workload


class ClientError(RuntimeError):
    pass


def client_command(python: str | None = None, lib: str = "auto", script: str | None = None) -> list[str]:
    """Base argv of a client; the subcommand and its options are appended by the caller."""
    return [python or sys.executable, script or str(Path(workload.__file__).resolve()), "--lib", lib]


def parse_events(text: str) -> list[dict]:
    """JSON lines from a client's stdout. Other lines (a library printing a warning) are kept as noise."""
    events = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            events.append({"event": "noise", "text": line})
            continue
        events.append(obj if isinstance(obj, dict) else {"event": "noise", "text": line})
    return events


def result_of(events: list[dict], stderr: str = "") -> dict:
    for event in reversed(events):
        if event.get("event") == "result":
            return event
        if event.get("event") == "error":
            raise ClientError(event.get("error", "client error"))
    tail = stderr.strip().splitlines()[-5:]
    raise ClientError("client printed no result" + (": " + " | ".join(tail) if tail else ""))


def run_once(cmd: list[str], env: dict[str, str], timeout: float = 120.0) -> dict:
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    return result_of(parse_events(proc.stdout), proc.stderr)


def _reader(index: int, proc: subprocess.Popen, events: queue.Queue) -> None:
    for line in proc.stdout:
        for event in parse_events(line):
            events.put((index, event))
    events.put((index, {"event": "eof"}))


def run_concurrent(
    cmd: list[str],
    n: int,
    env: dict[str, str],
    ready_timeout: float = 300.0,
    run_timeout: float = 300.0,
    stop_grace: float = 15.0,
) -> list[dict]:
    """Run n clients, release them together once all are warm, return their n result records.

    Clients are this process's children; they are stopped in ``finally`` on any error or interruption, so a
    failed run never leaves a GPU process behind.
    """
    procs: list[subprocess.Popen] = []
    errs: list = []
    events: queue.Queue = queue.Queue()
    try:
        for i in range(n):
            # stderr goes to a file: an unread pipe would block a chatty client mid-run.
            err = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed in finally, outlives this block
            errs.append(err)
            proc = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)
            procs.append(proc)
            threading.Thread(target=_reader, args=(i, proc, events), daemon=True).start()
        _wait_for(events, n, "ready", ready_timeout, procs, errs)
        for proc in procs:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        results = _wait_for(events, n, "result", run_timeout, procs, errs)
        for proc in procs:
            proc.wait(timeout=30)
        return [results[i] for i in range(n)]
    finally:
        _stop_clients(procs, stop_grace)
        for proc in procs:
            for stream in (proc.stdin, proc.stdout):
                if stream:
                    stream.close()
        for err in errs:
            err.close()


def _stop_clients(procs: list[subprocess.Popen], grace: float = 15.0) -> None:
    """SIGTERM first (workload.py then stops after a synchronised iteration: killing an MPS client mid-kernel
    can wedge the MPS server), SIGKILL only for clients still running after ``grace`` seconds."""
    running = [p for p in procs if p.poll() is None]
    for proc in running:
        proc.terminate()
    deadline = time.monotonic() + grace
    for proc in running:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
    for proc in procs:
        proc.wait()


def _stderr_tail(err) -> str:
    err.seek(0)
    tail = err.read().strip().splitlines()[-5:]
    return ": " + " | ".join(tail) if tail else ""


def _wait_for(events: queue.Queue, n: int, kind: str, timeout: float, procs, errs) -> dict[int, dict]:
    got: dict[int, dict] = {}
    deadline = time.monotonic() + timeout
    while len(got) < n:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ClientError(f"only {len(got)}/{n} clients reached '{kind}' within {timeout:.0f}s")
        try:
            index, event = events.get(timeout=remaining)
        except queue.Empty:
            continue
        if event.get("event") == kind:
            got[index] = event
        elif event.get("event") == "error":
            raise ClientError(f"client {index}: {event.get('error')}")
        elif event.get("event") == "eof" and index not in got:
            procs[index].wait()
            raise ClientError(
                f"client {index} exited {procs[index].returncode} before '{kind}'{_stderr_tail(errs[index])}"
            )
    return got
