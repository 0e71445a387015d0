"""A private MPS control daemon: start, send commands, quit, and prove nothing is left behind.

The daemon gets its own pipe and log directories in a fresh temporary directory, so it never touches a node's
MPS daemon (default /tmp/nvidia-mps) and every process it spawns can be found through that unique path.
Compute mode is left as it is: MPS works in DEFAULT compute mode, EXCLUSIVE_PROCESS is only a recommendation.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from . import procs

PID_FILE = "nvidia-cuda-mps-control.pid"
PIPE_ENV = "CUDA_MPS_PIPE_DIRECTORY"
LOG_ENV = "CUDA_MPS_LOG_DIRECTORY"
# Seconds to wait for the pid file before looking for the daemon through its environment instead.
PID_FILE_GRACE = 2.0

# Daemons started by this process and not yet stopped; stopped at interpreter exit as a last resort.
_ACTIVE: set[MpsDaemon] = set()


class MpsError(RuntimeError):
    pass


def command_set_thread_percentage(pct: int) -> str:
    if not 1 <= pct <= 100:
        raise ValueError(f"active thread percentage must be 1..100, got {pct}")
    return f"set_default_active_thread_percentage {pct}"


def command_set_pinned_mem_limit(device: int | str, limit_mib: int) -> str:
    if limit_mib < 1:
        raise ValueError(f"pinned memory limit must be at least 1 MiB, got {limit_mib}")
    # The control daemon takes an integer with an M or G suffix; MiB avoids rounding.
    return f"set_default_device_pinned_mem_limit {device} {int(limit_mib)}M"


def parse_percentage(text: str) -> float:
    match = re.search(r"(\d+(?:\.\d+)?)", text)
    if not match:
        raise MpsError(f"no percentage in control output {text!r}")
    return float(match.group(1))


def parse_mem_limit_mib(text: str) -> tuple[int, int]:
    """Parse a limit as printed by the control daemon into an inclusive MiB range.

    "2048M" is exact. A recent driver prints limits of 1 GiB and more as whole GiB rounded down
    (gpu-sharing-facts.md 2.2, secondary), so "2G" means anything in 2048..3071 MiB.
    """
    match = re.search(r"(\d+(?:\.\d+)?)\s*([MG])", text.strip(), re.IGNORECASE)
    if not match:
        raise MpsError(f"no memory limit in control output {text!r}")
    value, unit = float(match.group(1)), match.group(2).upper()
    if unit == "M":
        return int(value), int(value)
    low = int(value * 1024)
    return low, (low + 1023 if value.is_integer() else low)


def parse_pid_list(text: str) -> list[int]:
    return [int(tok) for tok in text.split() if tok.isdigit()]


class MpsDaemon:
    """``with MpsDaemon() as d: d.command(...)`` — the daemon is quit on exit, also on exceptions."""

    def __init__(
        self,
        control: str = "nvidia-cuda-mps-control",
        base_dir: str | os.PathLike | None = None,
        start_timeout: float = 15.0,
        quit_timeout: float = 20.0,
        kill_grace: float = 5.0,
        extra_env: dict[str, str] | None = None,
        keep_logs_in: str | os.PathLike | None = None,
    ):
        self.control = control
        self.base_dir = base_dir
        self.start_timeout = start_timeout
        self.quit_timeout = quit_timeout
        self.kill_grace = kill_grace
        self.extra_env = dict(extra_env or {})
        self.keep_logs_in = Path(keep_logs_in) if keep_logs_in else None
        self.root: Path | None = None
        self.pid: int | None = None
        # Every PID that belongs to this daemon, with its start time (identity check before any signal).
        self.known: dict[int, int | None] = {}
        self.stop_report: dict | None = None

    # -- paths and environment -------------------------------------------------------------------------------

    @property
    def pipe_dir(self) -> Path:
        if self.root is None:
            raise MpsError("daemon not started")
        return self.root / "pipe"

    @property
    def log_dir(self) -> Path:
        if self.root is None:
            raise MpsError("daemon not started")
        return self.root / "log"

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """Environment for the daemon, control commands and clients (all must use the same pipe directory)."""
        env = dict(os.environ if base is None else base)
        env.update(self.extra_env)
        env[PIPE_ENV] = str(self.pipe_dir)
        env[LOG_ENV] = str(self.log_dir)
        return env

    # -- lifecycle ------------------------------------------------------------------------------------------

    def start(self) -> MpsDaemon:
        # Short prefix: the pipe path ends up in a Unix socket name, limited to 107 bytes.
        self.root = Path(tempfile.mkdtemp(prefix="kagc-mps-", dir=self.base_dir))
        self.pipe_dir.mkdir(mode=0o700)
        self.log_dir.mkdir(mode=0o700)
        _ACTIVE.add(self)
        try:
            result = subprocess.run(
                [self.control, "-d"],
                env=self.env(),
                capture_output=True,
                text=True,
                timeout=self.start_timeout,
                check=False,
            )
            if result.returncode != 0:
                raise MpsError(f"{self.control} -d exited {result.returncode}: {result.stderr.strip()}")
            self.pid = self._wait_for_pid()
            self._remember(self.pid)
            self._wait_until_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_for_pid(self) -> int:
        pid_file = self.pipe_dir / PID_FILE
        started = time.monotonic()
        deadline = started + self.start_timeout
        while time.monotonic() < deadline:
            if pid_file.is_file():
                text = pid_file.read_text().strip()
                if text.isdigit() and procs.is_running(int(text)):
                    return int(text)
            # Fallback for a daemon that writes no pid file: after a grace period, the process carrying our
            # unique pipe directory under the control executable's name.
            if time.monotonic() - started > PID_FILE_GRACE:
                found = [p for p in procs.pids_with_env(PIPE_ENV, str(self.pipe_dir)) if self._looks_like_control(p)]
                if found:
                    return min(found)
            time.sleep(0.05)
        raise MpsError(f"MPS control daemon did not come up within {self.start_timeout}s (no {pid_file})")

    def _wait_until_ready(self) -> None:
        """The daemon may exist before it accepts commands; a harmless query tells when it does."""
        deadline = time.monotonic() + self.start_timeout
        while True:
            try:
                self.command("get_default_active_thread_percentage", timeout=self.start_timeout)
                return
            except MpsError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.1)

    def _looks_like_control(self, pid: int) -> bool:
        try:
            cmdline = (procs.PROC / str(pid) / "cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        return any(Path(arg.decode(errors="replace")).name == Path(self.control).name for arg in cmdline[:2])

    def _remember(self, pid: int) -> None:
        if pid not in self.known:
            started = procs.start_time(pid)
            if started is not None:
                self.known[pid] = started

    def command(self, line: str, timeout: float = 30.0) -> str:
        """Send one command on the control client's stdin and return its stdout."""
        result = subprocess.run(
            [self.control],
            input=line + "\n",
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if result.returncode != 0:
            raise MpsError(f"MPS command {line!r} exited {result.returncode}: {result.stderr.strip()}")
        return result.stdout.strip()

    def server_pids(self) -> list[int]:
        pids = parse_pid_list(self.command("get_server_list"))
        for pid in pids:
            self._remember(pid)
        return pids

    def discover(self) -> None:
        """Record the daemon's servers (listed, children, or carrying our pipe directory) before quitting."""
        if self.pid is not None and procs.is_running(self.pid, self.known.get(self.pid)):
            # A wedged daemon must not prevent the cleanup below.
            with contextlib.suppress(MpsError, subprocess.TimeoutExpired, OSError):
                self.server_pids()
            for child in procs.children_of(self.pid):
                self._remember(child)
        if self.root is not None:
            for pid in procs.pids_with_env(PIPE_ENV, str(self.pipe_dir)):
                self._remember(pid)

    def stop(self) -> dict:
        """Quit the daemon, escalate to signals by PID if needed, and verify nothing of it still runs."""
        if self.stop_report is not None:
            return self.stop_report
        report = {"quit_sent": False, "quit_error": None, "signalled": [], "leftover": [], "pids": []}
        try:
            self.discover()
            report["pids"] = sorted(self.known)
            if self.pid is not None and procs.is_running(self.pid, self.known.get(self.pid)):
                try:
                    self.command("quit", timeout=self.quit_timeout)
                    report["quit_sent"] = True
                except (MpsError, subprocess.TimeoutExpired, OSError) as exc:
                    report["quit_error"] = str(exc)
            alive = procs.wait_gone(self.known, self.quit_timeout)
            if alive:
                report["signalled"] = procs.terminate(alive, self.kill_grace)
            # Anything still carrying our private pipe directory was spawned by this run and is a leftover.
            if self.root is not None:
                for pid in procs.pids_with_env(PIPE_ENV, str(self.pipe_dir)):
                    self._remember(pid)
            report["leftover"] = sorted(p for p, s in self.known.items() if procs.is_running(p, s))
        finally:
            self._save_logs()
            if self.root is not None and not report["leftover"]:
                shutil.rmtree(self.root, ignore_errors=True)
            _ACTIVE.discard(self)
            self.stop_report = report
        return report

    def _save_logs(self) -> None:
        if self.keep_logs_in is None or self.root is None or not self.log_dir.is_dir():
            return
        self.keep_logs_in.mkdir(parents=True, exist_ok=True)
        for log in self.log_dir.iterdir():
            if log.is_file():
                shutil.copy2(log, self.keep_logs_in / log.name)

    def __enter__(self) -> MpsDaemon:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _stop_all_active() -> None:
    for daemon in list(_ACTIVE):
        daemon.stop()


atexit.register(_stop_all_active)


class Terminated(SystemExit):
    """Raised from a signal handler so that ``finally`` blocks (daemon quit, client kill) run."""


def install_signal_handlers() -> dict:
    """Turn SIGTERM/SIGHUP into an exception (SIGINT already raises KeyboardInterrupt); returns the previous
    handlers for ``restore_signal_handlers``."""

    def handler(signum, _frame):
        raise Terminated(128 + signum)

    return {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}


def restore_signal_handlers(previous: dict) -> None:
    for sig, old in previous.items():
        signal.signal(sig, old)
