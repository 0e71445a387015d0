"""Where the conformance tests find the upstream code: sources unpacked and binaries built by scripts/upstream.sh.

Evidence in this folder comes from upstream code at the versions the charts pin (../shared/upstream/README.md):
its own binaries (flag parsers, config loaders), its own Go packages called by the harnesses in
tests/conformance/go, its own chart and CRDs. A missing build is a failure that says how to make it, never a skip:
`make test` builds everything before them (scripts/toolchain.sh all -> scripts/upstream.sh all, scripts/test.sh).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("KA_CACHE", Path.home() / ".cache" / "kube-accel")) / "upstream"
SCRIPT = REPO / "scripts" / "upstream.sh"

DEVICE_PLUGIN = "k8s-device-plugin-v0.20.0"
MIG_PARTED = "mig-parted-v0.15.0"
HAMI = "hami-v2.10.0"
GPU_OPERATOR = "gpu-operator-v26.7.0"
GPU_ADMISSION = "gpu-admission-47d56ae"
GPU_MANAGER = "gpu-manager-v1.1.5"
DCGM_EXPORTER = "dcgm-exporter-4.5.3-4.8.2"
HAMI_CORE = "hami-core-8f3a89c"
DRA_DRIVER = "dra-driver-nvidia-gpu-v0.4.1"


def src(archive: str) -> Path:
    """The unpacked source tree of one archive (unpacked on first use; a missing archive fails with the reason)."""
    path = CACHE / "src" / archive
    if not (path / ".ka-stamp").exists():
        proc = subprocess.run([str(SCRIPT), "path", archive], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            pytest.fail(f"upstream source {archive} unavailable:\n{proc.stderr.strip()}")
    return path


def binary(name: str) -> Path:
    """An upstream binary or a ka-conform-* harness built by scripts/upstream.sh."""
    path = CACHE / "bin" / name
    if not path.exists():
        pytest.fail(f"{path} not built: run `scripts/upstream.sh all` (make test does it through the toolchain)")
    return path


def run(name: str, *args: str, env: dict[str, str] | None = None, timeout: int = 60,
        cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run an upstream binary with exactly the given environment (plus PATH), capturing its output."""
    full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **(env or {})}
    return subprocess.run([str(binary(name)), *args], capture_output=True, text=True, check=False,
                          env=full_env, timeout=timeout, cwd=cwd)


def free_ports(count: int) -> list[int]:
    """Distinct free loopback ports (all held open until every one is chosen). Ask after starting any other local
    server of the test: a port released here could otherwise be handed to that server."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def http_status(proc: subprocess.Popen, url: str, context=None, tries: int = 100) -> int | None:
    """The status of ``url`` once the upstream process ``proc`` serves it (None if it exits or never answers)."""
    for _ in range(tries):
        if proc.poll() is not None:
            return None
        try:
            with urllib.request.urlopen(url, context=context, timeout=2) as response:
                return response.status
        except OSError:
            time.sleep(0.2)
    return None


def stop(proc: subprocess.Popen) -> str:
    """SIGTERM (SIGKILL after 10 s) and the process's combined output."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.communicate(timeout=10)[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()[0]
