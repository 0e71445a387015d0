"""Process bookkeeping by PID (Linux /proc). Never matches processes by name: a PID is only signalled when its
start time still equals the one recorded when we learnt it, so a recycled PID is left alone."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

PROC = Path("/proc")


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = (PROC / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # comm (field 2) may contain spaces and parentheses; everything after the last ')' is well-formed.
    return raw[raw.rindex(")") + 2 :].split()


def start_time(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def parent_pid(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[1]) if fields else None


def is_running(pid: int, started: int | None = None) -> bool:
    """True if the PID exists, is not a zombie and (when given) still has the recorded start time."""
    fields = _stat_fields(pid)
    if not fields or fields[0] == "Z":
        return False
    return started is None or int(fields[19]) == started


def all_pids() -> list[int]:
    return [int(p.name) for p in PROC.iterdir() if p.name.isdigit()]


def children_of(pid: int) -> list[int]:
    return [p for p in all_pids() if parent_pid(p) == pid]


def pids_with_env(name: str, value: str) -> list[int]:
    """Processes whose environment has name=value. Used with a private, unique MPS pipe directory, so it only
    finds processes that belong to this run; environments of other users' processes are unreadable and skipped.
    """
    needle = f"{name}={value}".encode()
    found = []
    for pid in all_pids():
        if pid == os.getpid():
            continue
        try:
            env = (PROC / str(pid) / "environ").read_bytes()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if needle in env.split(b"\0"):
            found.append(pid)
    return found


def wait_gone(pids: dict[int, int | None], timeout: float, poll: float = 0.05) -> dict[int, int | None]:
    """Wait until none of {pid: start_time} runs; return those still running at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        alive = {p: s for p, s in pids.items() if is_running(p, s)}
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(poll)


def terminate(pids: dict[int, int | None], grace: float = 5.0) -> list[int]:
    """SIGTERM, then SIGKILL after ``grace``, each PID whose identity still matches. Returns the PIDs signalled."""
    signalled = []
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = {p: s for p, s in pids.items() if is_running(p, s)}
        if not alive:
            break
        for pid in alive:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                continue
            if pid not in signalled:
                signalled.append(pid)
        if wait_gone(alive, grace if sig == signal.SIGTERM else 2.0) == {}:
            break
    return signalled
