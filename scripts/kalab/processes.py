"""Lab processes: what the lab runs as local processes (upstream controllers, stand-ins, the monitoring chain),
started, waited for, found and stopped by PID; free ports and readiness probes on 127.0.0.1; the lab's own Python
code run as a process (python_module).

Every process writes .lab/procs/NAME.log and NAME.pid; `lab.py down` stops them by PID. A component that does
not come up stops `lab.py up` with its own last log lines.
"""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from kalab.site import REPO, log

START_TIMEOUT = 60


# -- processes ------------------------------------------------------------------------------------------------


def procs_dir(root: Path) -> Path:
    path = root / "procs"
    path.mkdir(parents=True, exist_ok=True)
    return path


def last_lines(path: Path, n: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def pid_alive(pid: int, exe: str) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return bool(cmdline) and exe.encode() in b" ".join(cmdline[:2])


def start(root: Path, name: str, argv: list[str], env: dict[str, str], ready: Callable[[], bool],
          timeout: int = START_TIMEOUT, exe: str | None = None) -> int:
    """Start ``argv`` as lab process NAME (log and PID under .lab/procs) and wait until ``ready()``; on failure
    stop it and exit with its last log lines. ``exe``: the component a wrapper in ``argv`` execs (default argv[0])."""
    exe = exe or argv[0]
    if not Path(exe).exists():
        sys.exit(f"[lab] {name}: {exe} is not built: run `scripts/upstream.sh all` (make toolchain does)")
    d = procs_dir(root)
    logfile = d / f"{name}.log"
    started = time.time()
    with logfile.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env}, cwd=root,
                                start_new_session=True)
    (d / f"{name}.pid").write_text(f"{proc.pid} {exe}\n")
    while time.time() - started < timeout:
        if proc.poll() is not None:
            break
        try:
            # pid_alive: the child has exec'd the component (stop_one and running() look for it by name).
            if pid_alive(proc.pid, exe) and ready():
                log(f"{name} up in {time.time() - started:.1f} s (pid {proc.pid}, log {logfile})")
                return proc.pid
        except Exception:  # noqa: BLE001, S110 - not answering yet is what we wait for
            pass
        time.sleep(0.2)
    stop_one(d, name)
    reason = f"exited with {proc.returncode}" if proc.returncode is not None else f"not ready after {timeout} s"
    sys.exit(f"[lab] {name} {reason}; its last log lines ({logfile}):\n{last_lines(logfile)}")


def stop_one(d: Path, name: str) -> None:
    pidfile = d / f"{name}.pid"
    if not pidfile.exists():
        return
    pid_s, _, exe = pidfile.read_text().strip().partition(" ")
    pid = int(pid_s)
    # Only the process this lab started: same PID and still the same executable.
    if pid_alive(pid, exe):
        os.kill(pid, signal.SIGTERM)
        for _ in range(50):
            if not pid_alive(pid, exe):
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)
    pidfile.unlink()


def stop_all(root: Path) -> None:
    d = root / "procs"
    if not d.exists():
        return
    # Stand-ins first: the device-plugin stand-in starts config-manager processes.
    for pidfile in sorted(d.glob("*.pid"), key=lambda p: ("standin" not in p.stem, p.stem)):
        stop_one(d, pidfile.stem)
        log(f"{pidfile.stem} stopped")


def running(root: Path) -> dict[str, int]:
    d = root / "procs"
    out = {}
    for pidfile in sorted(d.glob("*.pid")) if d.exists() else []:
        pid_s, _, exe = pidfile.read_text().strip().partition(" ")
        if pid_alive(int(pid_s), exe):
            out[pidfile.stem] = int(pid_s)
    return out


def python_module(module: str, *args: str) -> tuple[list[str], dict[str, str]]:
    """argv and env that run ``module`` of the kalab package as a lab process (``start(root, NAME, argv, env, ...)``):
    this Python with ``-m``, the package's directory on PYTHONPATH (start gives a process PATH and ``env`` only, and
    -P keeps its working directory, the lab's, off sys.path), output unbuffered, so that its log is current."""
    return [sys.executable, "-P", "-m", module, *args], {"PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO / "scripts")}


# -- ports and readiness on 127.0.0.1 ----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as r:  # noqa: S310 - http on 127.0.0.1
        return r.status == 200


def https_ok(url: str) -> bool:
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    with urllib.request.urlopen(url, context=ctx, timeout=2) as r:  # noqa: S310 - https on 127.0.0.1
        return r.status == 200
