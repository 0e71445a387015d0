"""accel_host_facts: what the preflight reads of a GPU host, in one module run (module_utils/host/system_facts.py).

The module runs for real on this machine through `ansible localhost -m` (its os-release, its /sys/fs/cgroup, its
containerd if any); only NVML is a recorded snapshot (tests/data/nvml: no GPU here)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from adhoc import run_module
from ansible_collections.kube_accel.gpu.plugins.module_utils.host import system_facts as hf

REPO = Path(__file__).resolve().parents[2]
SNAPSHOT = REPO / "tests" / "data" / "nvml" / "a30.json"


def test_gather_host_reads_os_first_mig_record_and_runtime(tmp_path):
    os_release = tmp_path / "os-release"
    os_release.write_text('NAME="Ubuntu"\nID=ubuntu\nVERSION_ID="24.04"\n')
    records = [tmp_path / "mig-geometry", tmp_path / "mig-parted.yaml"]
    records[1].write_text("version: v1\n")
    marker = tmp_path / "cgroup.controllers"
    out = "containerd github.com/containerd/containerd/v2 v2.1.4 75cb2b7193e4e490e9fbdc236c0e811ccaba3376\n"
    paths = [str(p) for p in records]
    host = hf.gather_host(paths, lambda: out, os_release=str(os_release), cgroup2_marker=str(marker))
    assert host == {"os_release": {"id": "ubuntu", "version_id": "24.04"}, "mig_record": str(records[1]),
                    "runtime": {"cgroup_version": 1, "containerd_version": "2.1.4"}}
    marker.write_text("cpu memory\n")
    records[0].write_text("all-1g.10gb\n")
    host = hf.gather_host(paths, lambda: None, os_release=str(os_release), cgroup2_marker=str(marker))
    assert host["mig_record"] == str(records[0])  # the first that exists
    assert host["runtime"] == {"cgroup_version": 2, "containerd_version": None}  # containerd absent or failing


def test_gather_host_without_runtime_or_os_release(tmp_path):
    host = hf.gather_host([str(tmp_path / "none")], os_release=str(tmp_path / "missing"))
    assert host == {"os_release": {}, "mig_record": None, "runtime": None}


def test_containerd_version_of_1x_and_2x_and_garbage():
    assert hf.containerd_version("containerd containerd.io 1.7.27 05044ec0a9a75232cad458027ca83437aae3f4da") == "1.7.27"
    assert hf.containerd_version("containerd github.com/containerd/containerd/v2 v2.0.5 fb4c30d") == "2.0.5"
    assert hf.containerd_version("command not found") is None


def _run_module(*args):
    return run_module("accel_host_facts", *args)


def test_module_reads_this_machine_in_check_mode(tmp_path):
    record = tmp_path / "mig-parted.yaml"
    record.write_text("version: v1\n")
    args = json.dumps({"snapshot": str(SNAPSHOT), "mig_records": [str(tmp_path / "mig-geometry"), str(record)],
                       "runtime": True})
    result = _run_module("--check", "-a", args)
    assert result["changed"] is False and not result.get("failed"), result
    assert result["ansible_facts"]["nvidia_gpus"]["source"] == "snapshot:a30"
    host = result["host"]
    assert host["mig_record"] == str(record)
    with open("/etc/os-release", encoding="utf-8") as fh:
        assert host["os_release"] == hf.parse_os_release(fh.read()) and host["os_release"]["id"]
    assert host["runtime"]["cgroup_version"] == (2 if os.path.exists("/sys/fs/cgroup/cgroup.controllers") else 1)
    containerd = shutil.which("containerd")
    want = None
    if containerd:
        proc = subprocess.run([containerd, "--version"], capture_output=True, text=True, check=False)
        want = hf.containerd_version(proc.stdout) if proc.returncode == 0 else None
    assert host["runtime"]["containerd_version"] == want


def test_module_reports_a_broken_snapshot_and_still_returns_the_host(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    result = _run_module("-a", json.dumps({"snapshot": str(broken)}))
    assert result["failed"] is True and f"cannot read NVML snapshot {broken}" in result["msg"]
    assert result["host"]["runtime"] is None and "os_release" in result["host"]
    assert "ansible_facts" not in result
