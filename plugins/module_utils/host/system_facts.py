# Copyright: kube-accel contributors
# Apache License 2.0
"""What the preflight's plan rules read from a GPU host besides its GPUs, gathered in the same module run as the GPU
facts (accel_host_facts): the OS (os-release), the record of a MIG geometry kube-accel put there, and on request the
cgroup hierarchy and containerd version (gpu-manager and dra pools). One round trip per host instead of one per file:
the preflight runs on every host of every play."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable

OS_RELEASE = "/etc/os-release"
CGROUP2_MARKER = "/sys/fs/cgroup/cgroup.controllers"
_VERSION = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+")


def parse_os_release(text: str) -> dict[str, str]:
    """``ID`` and ``VERSION_ID`` of an os-release(5) file as {"id", "version_id"} (absent keys left out)."""
    out = {}
    for line in (text or "").splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key in ("ID", "VERSION_ID"):
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            out[key.lower()] = value
    return out


def containerd_version(output: str) -> str | None:
    """``containerd --version`` output -> "2.1.4" (None when it names no version)."""
    m = _VERSION.search(output or "")
    return m.group(0) if m else None


def gather_host(mig_records: Iterable[str], containerd: Callable[[], str | None] | None = None,
                os_release: str = OS_RELEASE, cgroup2_marker: str = CGROUP2_MARKER) -> dict:
    """{"os_release", "mig_record", "runtime"}: the OS as parse_os_release reads it ({} when the file cannot be read),
    the first of ``mig_records`` that exists (None: none), and with ``containerd`` (a callable giving its --version
    output, None when it cannot run) the host runtime the plan rules check ({"cgroup_version", "containerd_version"});
    without it "runtime" is None."""
    try:
        with open(os_release, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        text = ""
    runtime = None
    if containerd is not None:
        runtime = {"cgroup_version": 2 if os.path.exists(cgroup2_marker) else 1,
                   "containerd_version": containerd_version(containerd() or "")}
    return {"os_release": parse_os_release(text),
            "mig_record": next((p for p in mig_records if os.path.exists(p)), None),
            "runtime": runtime}
