"""accel_driver_source: preinstalled: the role checks the driver the host's image brings against the plan
and installs nothing, and the preflight refuses a mismatch before anything changes.

No GPU here: the role's task file runs against a simulated host (tests/unit/tasksim.py) whose
/proc/driver/nvidia/version is the line recorded on an H200 (../shared/gpu-records/h200-2026-11-26/runtime/env.txt,
driver 580.159.04, 2026-11-26); the preflight rule runs on facts from the recorded NVML snapshots (tests/data/nvml).
"""

from __future__ import annotations

import base64
import copy
from pathlib import Path

import pytest
import yaml
from ansible_collections.kube_accel.gpu.plugins.module_utils.host import gpu_facts as accel_gpu_facts
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import driver as accel_driver
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import rules as plan
from tasksim import AssertionFailed, RoleVars, run_tasks

ROLE = Path(__file__).resolve().parents[2] / "roles" / "nvidia_driver"
SNAPSHOTS = Path(__file__).resolve().parents[2] / "tests" / "data" / "nvml"
# Recorded on an H200, driver 580.159.04, 2026-11-26 (gpu-records .../runtime/env.txt).
H200_PROC_VERSION = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)  "
                     "Thu Jan  1 00:00:00 UTC 1980\nGCC version:  gcc version 14.3.0 (GCC)\n")
MODULES = ("ansible.builtin.slurp", "ansible.builtin.assert", "ansible.builtin.set_fact")


class Host:
    def __init__(self, proc_version: str | None):
        self.proc_version = proc_version
        self.modules: list[str] = []

    def run(self, module: str, args: dict, check: bool) -> dict:
        self.modules.append(module)
        assert module == "ansible.builtin.slurp" and args["src"] == "/proc/driver/nvidia/version", (module, args)
        if self.proc_version is None:
            return {"failed": True, "msg": "file not found: /proc/driver/nvidia/version"}
        return {"content": base64.b64encode(self.proc_version.encode()).decode()}


def converge(host: Host, branch: str, version: str = "") -> dict:
    variables = RoleVars({}, {"ansible_check_mode": False, "nvidia_driver_source": "preinstalled",
                              "nvidia_driver_branch": branch, "nvidia_driver_version": version})
    run_tasks(yaml.safe_load((ROLE / "tasks" / "preinstalled.yml").read_text()), host, variables, MODULES,
              ROLE / "tasks")
    return variables


def test_the_loaded_driver_is_read_from_the_kernel_module():
    assert accel_driver.loaded_driver(H200_PROC_VERSION) == {"version": "580.159.04", "branch": "580",
                                                              "flavor": "open"}
    assert accel_driver.loaded_driver("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.230.02  Wed Jan 1\n") == {
        "version": "535.230.02", "branch": "535", "flavor": "proprietary"}
    assert accel_driver.loaded_driver("") == {}


def test_the_planned_branch_passes_and_nothing_is_installed():
    host = Host(H200_PROC_VERSION)
    variables = converge(host, "580", "580.159.04")
    assert variables["nvidia_driver_changed"] is False
    # Only the kernel module's own file was read: no repository, package, pin or unit.
    assert host.modules == ["ansible.builtin.slurp"]


@pytest.mark.parametrize(("proc_version", "branch", "version", "said"), [
    (H200_PROC_VERSION, "550", "", "the loaded driver is 580.159.04 (branch 580)"),
    (H200_PROC_VERSION, "580", "580.105.08", "the loaded driver is 580.159.04 (branch 580)"),
    (None, "580", "", "no NVIDIA kernel module is loaded (/proc/driver/nvidia/version: file not found"),
])
def test_a_different_or_missing_driver_stops_the_role(proc_version, branch, version, said):
    with pytest.raises(AssertionFailed) as failed:
        converge(Host(proc_version), branch, version)
    assert said in str(failed.value) and "accel_driver_source distro or cuda-repo" in str(failed.value)


def gpus(name):
    return accel_gpu_facts.gather(accel_gpu_facts.RecordedSource.from_file(str(SNAPSHOTS / f"{name}.json")))


def check(settings, facts):
    base = {"accel_pool": "p", "accel_mode": "pgpu", "accel_driver_source": "preinstalled"}
    return plan.host_problems("gpu-01", {**base, **settings}, facts)


def test_preflight_accepts_the_planned_preinstalled_driver():
    assert check({"accel_driver_branch": "550"}, gpus("h100-80gb")) == []  # the snapshot's driver is 550.54.15


def test_preflight_refuses_another_branch_no_driver_and_no_fabric():
    assert check({"accel_driver_branch": "535"}, gpus("h100-80gb")) == [
        "gpu-01: accel_driver_branch = '535': the host's preinstalled driver is 550.54.15 (branch 550); allowed: "
        "accel_driver_branch \"550\" for this image, or accel_driver_source distro or cuda-repo to install the "
        "planned branch"]
    none = {"count": 0, "reason": "NVIDIA driver not installed: libnvidia-ml.so not found", "gpus": []}
    assert check({"accel_driver_branch": "550"}, none) == [
        "gpu-01: accel_driver_source = 'preinstalled': no NVIDIA driver answers on this host (NVML: NVIDIA driver not "
        "installed: libnvidia-ml.so not found); allowed: a host whose image has the driver loaded, or "
        "accel_driver_source distro or cuda-repo"]
    unloaded = {**gpus("h100-80gb"), "kernel_modules": ["nouveau"]}
    assert "the nvidia kernel module is not loaded (loaded: nouveau)" in check({"accel_driver_branch": "550"},
                                                                               unloaded)[0]
    hgx = copy.deepcopy(gpus("hgx-h100x8"))
    assert check({"accel_driver_branch": "550"}, hgx) == []  # the recorded fabric is completed
    hgx["gpus"][3]["fabric_state"] = "not-started"
    (problem,) = check({"accel_driver_branch": "550"}, hgx)
    assert "whose state is not-started: NVIDIA Fabric Manager of the driver's version is not running" in problem
