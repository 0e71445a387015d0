"""scripts/kalab/nvidia_smi.py, the lab's nvidia-smi stand-in for MIG teardown, run as the lab host runs it (a
subprocess with its state directory) on the recorded A100-80GB MIG snapshot; what it leaves is read back through
kube-accel's own NVML gathering code (accel_gpu_facts over a recorded source), as the lab's facts read it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.kube_accel.gpu.plugins.module_utils.host import gpu_facts as accel_gpu_facts

REPO = Path(__file__).resolve().parents[2]
STANDIN = REPO / "scripts" / "kalab" / "nvidia_smi.py"
MIG_SNAPSHOT = REPO / "tests" / "data" / "nvml" / "a100-80gb-mig.json"


@pytest.fixture
def host(tmp_path):
    shutil.copy(MIG_SNAPSHOT, tmp_path / "nvml.json")

    def smi(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(STANDIN), *args], capture_output=True, text=True, check=False,
                              env={**os.environ, "KA_LAB_NVIDIA_SMI_DIR": str(tmp_path)})
    smi.dir = tmp_path
    return smi


def gpu(state_dir: Path) -> dict:
    return accel_gpu_facts.gather(accel_gpu_facts.RecordedSource.from_file(str(state_dir / "nvml.json")))["gpus"][0]


def test_the_roles_order_turns_mig_off_and_the_facts_see_it(host):
    assert gpu(host.dir)["mig_mode_current"] and len(gpu(host.dir)["mig_devices"]) == 4
    dci = host("mig", "-i", "0", "-dci")
    assert dci.returncode == 0 and dci.stdout.count("Successfully destroyed compute instance") == 4
    assert gpu(host.dir)["mig_devices"] == [] and gpu(host.dir)["mig_mode_current"]  # GPU instances remain
    dgi = host("mig", "-i", "0", "-dgi")
    assert dgi.returncode == 0 and dgi.stdout.count("Successfully destroyed GPU instance") == 4
    off = host("-i", "0", "-mig", "0")
    assert off.returncode == 0, off.stdout
    assert off.stdout == "Disabled MIG Mode for GPU 00000000:07:00.0\nAll done.\n"
    facts = gpu(host.dir)
    assert not facts["mig_mode_current"] and not facts["mig_mode_pending"] and facts["mig_devices"] == []
    log = (host.dir / "nvidia-smi.log").read_text().splitlines()
    assert [line.split(" ", 1)[1] for line in log] == ["mig -i 0 -dci", "mig -i 0 -dgi", "-i 0 -mig 0"]


def test_instances_in_use_keep_mig_on(host):
    """Out of order, as a real driver refuses it: GPU instances with compute instances are in use, and MIG mode does
    not go off while any GPU instance exists."""
    dgi = host("mig", "-i", "0", "-dgi")
    assert dgi.returncode == 255 and dgi.stdout.count("In use by another client") == 4
    off = host("-i", "0", "-mig", "0")
    assert off.returncode == 255 and "Unable to disable MIG Mode for GPU 00000000:07:00.0" in off.stdout
    assert gpu(host.dir)["mig_mode_current"] and len(gpu(host.dir)["mig_devices"]) == 4


def test_nothing_to_destroy_is_not_found_and_other_commands_are_not_modelled(host):
    for args in (("mig", "-dci"), ("mig", "-dgi"), ("-mig", "0")):
        assert host(*args).returncode in (0, 6)
    assert host("mig", "-dci").returncode == 6 and "No compute instances found" in host("mig", "-dci").stdout
    assert host("mig", "-dgi").returncode == 6
    other = host("-q")
    assert other.returncode == 2 and "not modelled by the lab's nvidia-smi stand-in" in other.stderr
    assert json.loads((host.dir / "nvml.json").read_text())["nvml"]["devices"][0]["mig_mode"] == [0, 0]
