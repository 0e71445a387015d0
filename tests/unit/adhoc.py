"""One module of the collection run for real on this machine, as `ansible localhost -m MODULE` runs it, for the unit
tests of fact modules (test_gpu_facts, test_host_facts)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_module(module: str, *args: str) -> dict:
    """The host result of `ansible localhost -m kube_accel.gpu.MODULE ARGS...` (ansible.posix.json callback)."""
    env = dict(os.environ, ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
               ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible"), "localhost", "-m", f"kube_accel.gpu.{module}", *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    return json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
