"""Driver package decisions (module_utils/plan/driver.py): apt moves on real `apt-cache policy` output (captured
from apt 2.6 on Debian 12 against the Molecule scenario's stand-in CUDA mirror), dnf module streams, open kernel
modules on recorded GPU facts, Fabric Manager branches, SR-IOV method and IOMMU argument ownership."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.kube_accel.gpu.plugins.filter.accel_driver_filters import FilterModule
from ansible_collections.kube_accel.gpu.plugins.module_utils.host import gpu_facts as accel_gpu_facts
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import driver as drv

SNAPSHOTS = Path(__file__).resolve().parents[2] / "tests" / "data" / "nvml"

# apt-cache policy (LANG=C) with the driver at 550.163.01-1 pinned, on Debian 12 (apt 2.6.1).
POLICY = """\
nvidia-driver-cuda:
  Installed: 550.163.01-1
  Candidate: 550.163.01-1
  Version table:
 *** 550.163.01-1 1001
        500 file:/srv/mirror  Packages
        100 /var/lib/dpkg/status
     550.144.03-1 500
        500 file:/srv/mirror  Packages
     535.247.01-1 500
        500 file:/srv/mirror  Packages
libcuda1:
  Installed: 550.163.01-1
  Candidate: 550.163.01-1
  Version table:
 *** 550.163.01-1 1001
        500 file:/srv/mirror  Packages
        100 /var/lib/dpkg/status
     550.144.03-1 500
        500 file:/srv/mirror  Packages
     535.247.01-1 500
        500 file:/srv/mirror  Packages
nvidia-fabricmanager-550:
  Installed: 550.163.01-1
  Candidate: 550.163.01-1
  Version table:
 *** 550.163.01-1 1001
        500 file:/srv/mirror  Packages
        100 /var/lib/dpkg/status
     550.144.03-1 500
        500 file:/srv/mirror  Packages
cuda-drivers-535:
  Installed: (none)
  Candidate: 535.247.01-1
  Version table:
     535.247.01-1 500
        500 file:/srv/mirror  Packages
nvidia-persistenced:
  Installed: 535.171.04-1
  Candidate: 535.171.04-1
  Version table:
 *** 535.171.04-1 500
        500 http://deb.debian.org/debian bookworm/contrib amd64 Packages
        100 /var/lib/dpkg/status
"""


def facts(name):
    return accel_gpu_facts.gather(accel_gpu_facts.RecordedSource.from_file(str(SNAPSHOTS / f"{name}.json")))


def test_parse_apt_policy():
    policy = drv.parse_apt_policy(POLICY)
    assert policy["nvidia-driver-cuda"] == {"installed": "550.163.01-1", "candidate": "550.163.01-1",
                                            "versions": ["550.163.01-1", "550.144.03-1", "535.247.01-1"]}
    assert policy["cuda-drivers-535"]["installed"] is None
    assert drv.parse_apt_policy("") == {}


def test_unchanged_pin_moves_nothing():
    moves = drv.apt_moves(POLICY, ["nvidia-driver-cuda", "nvidia-fabricmanager-550"], "550.163.01-1", ["libcuda1"])
    assert moves["moves"] == [] and moves["installs"] == [] and moves["missing"] == []
    assert moves["names"] == ["nvidia-driver-cuda=550.163.01-1", "nvidia-fabricmanager-550=550.163.01-1",
                              "libcuda1=550.163.01-1"]


def test_changed_version_moves_installed_packages_down_too():
    """state: present would leave all of these at 550.163.01-1."""
    moves = drv.apt_moves(POLICY, ["nvidia-driver-cuda", "nvidia-fabricmanager-550"], "550.144.03-1", ["libcuda1"])
    assert moves["names"] == ["nvidia-driver-cuda=550.144.03-1", "nvidia-fabricmanager-550=550.144.03-1",
                              "libcuda1=550.144.03-1"]
    assert [m["name"] for m in moves["moves"]] == ["nvidia-driver-cuda", "nvidia-fabricmanager-550", "libcuda1"]
    assert moves["moves"][0] == {"name": "nvidia-driver-cuda", "installed": "550.163.01-1", "wanted": "550.144.03-1"}
    assert moves["summary"].startswith("nvidia-driver-cuda 550.163.01-1 -> 550.144.03-1; nvidia-fabricmanager-550")


def test_branch_glob_takes_the_newest_matching_version():
    moves = drv.apt_moves(POLICY, ["cuda-drivers-535", "nvidia-driver-cuda"], "535.*",
                          ["libcuda1", "nvidia-fabricmanager-550", "nvidia-persistenced"])
    assert moves["installs"] == ["cuda-drivers-535"]
    # The old branch's Fabric Manager has no 535 version: apt removes it, nothing pins it.
    assert moves["names"] == ["cuda-drivers-535=535.247.01-1", "nvidia-driver-cuda=535.247.01-1",
                              "libcuda1=535.247.01-1", "nvidia-persistenced=535.171.04-1"]


def test_listed_package_without_a_matching_version_keeps_apts_candidate_and_missing_ones_are_named():
    moves = drv.apt_moves(POLICY, ["nvidia-persistenced", "nvidia-smi"], "535.247.01-1")
    assert moves["names"] == ["nvidia-persistenced=535.171.04-1"] and moves["moves"] == []
    assert moves["missing"] == ["nvidia-smi"]


@pytest.mark.parametrize(("version", "pin", "match"), [
    ("550.163.01-1", "550.*", True), ("5500.1-1", "550.*", False), ("550.163.01-1", "550.163.01-1", True),
    ("550.163.01-1~deb12u1", "550.163.01-1", False), ("535.247.01-1~deb12u1", "535.*", True)])
def test_pin_matches(version, pin, match):
    assert drv.pin_matches(version, pin) is match


MODULE_550 = "[nvidia-driver]\nname=nvidia-driver\nstream=550-dkms\nprofiles=default\nstate=enabled\n"


def test_dnf_module_file():
    assert drv.parse_dnf_module(MODULE_550) == {"stream": "550-dkms", "profiles": ["default"], "state": "enabled"}
    assert drv.parse_dnf_module("") == {"stream": "", "profiles": [], "state": ""}
    assert drv.parse_dnf_module("not an ini")["stream"] == ""


@pytest.mark.parametrize(("module", "stream", "installed", "version", "plan"), [
    ("", "550-dkms", "", "", {"current": "", "switch": False, "move": False, "unlock": False}),  # fresh host
    (MODULE_550, "550-dkms", "550.163.01-1.el9", "", {"current": "550-dkms", "switch": False, "move": False,
                                                      "unlock": False}),
    # A branch change, or proprietary -> open: dnf module switch-to, under a lifted version lock.
    (MODULE_550, "570-dkms", "550.163.01-1.el9", "", {"current": "550-dkms", "switch": True, "move": False,
                                                      "unlock": True}),
    (MODULE_550, "550-open", "550.163.01-1.el9", "", {"current": "550-dkms", "switch": True, "move": False,
                                                      "unlock": True}),
    (MODULE_550, "550-dkms", "550.163.01-1.el9", "550.144.03", {"current": "550-dkms", "switch": False,
                                                                "move": True, "unlock": True}),
    (MODULE_550, "550-dkms", "550.144.03-1.el9", "550.144.03", {"current": "550-dkms", "switch": False,
                                                                "move": False, "unlock": False}),
])
def test_dnf_plan(module, stream, installed, version, plan):
    assert drv.dnf_plan(module, stream, installed, version) == plan


def test_dnf_stream():
    assert drv.dnf_stream("550", "proprietary") == "550-dkms" and drv.dnf_stream(570, "open") == "570-open"


def test_open_modules_required_on_blackwell_and_grace_hopper_only():
    b200 = {"name": "NVIDIA B200", "compute_capability": "10.0"}
    gh200 = {"name": "NVIDIA GH200 480GB", "compute_capability": "9.0"}
    h100 = facts("hgx-h100x8")["gpus"][0]
    assert "Blackwell" in drv.open_modules_required(b200) and "Grace Hopper" in drv.open_modules_required(gh200)
    assert drv.open_modules_required(h100) is None
    assert drv.driver_flavor({"gpus": [b200]}) == "open" and drv.driver_flavor(facts("hgx-h100x8")) == "proprietary"
    assert drv.driver_flavor(facts("t4"), "open") == "open" and drv.driver_flavor({}, "") == "proprietary"
    assert drv.open_modules_supported(facts("t4")["gpus"][0]) is True  # Turing, 7.5
    assert drv.open_modules_supported({"compute_capability": "7.0"}) is False  # Volta


@pytest.mark.parametrize(("branch", "available"), [("550", True), ("535-server", True), (580, True),
                                                   ("540", False), ("418", False), (None, False)])
def test_fabric_manager_branches(branch, available):
    assert drv.fabric_manager_available(branch) is available


def test_sriov_method_by_architecture():
    assert drv.sriov_method(facts("a30")) == "sriov-manage"  # Ampere vGPU: NVIDIA's tool only
    assert drv.sriov_method(facts("t4")) == "sysfs"
    assert drv.sriov_method({}) == "sysfs"  # no GPU facts: the kernel's generic way
    assert drv.sriov_method(facts("a30"), "sysfs") == "sysfs"


def test_kernel_args_owned_leaves_the_operators_arguments_alone():
    """The operator had iommu=pt on every entry; kube-accel adds only intel_iommu=on and owns only it."""
    entries = [["ro", "quiet", "iommu=pt"], ["ro", "iommu=pt"]]
    owned = drv.kernel_args_owned(["intel_iommu=on", "iommu=pt"], [], entries)
    assert owned == ["intel_iommu=on"]
    # Next run: both are on every entry now, and kube-accel still owns what it added.
    after = [e + ["intel_iommu=on"] for e in entries]
    assert drv.kernel_args_owned(["intel_iommu=on", "iommu=pt"], owned, after) == ["intel_iommu=on"]
    # An argument missing from one entry is added to all by grubby: kube-accel's.
    assert drv.kernel_args_owned(["iommu=pt"], [], [["iommu=pt"], ["ro"]]) == ["iommu=pt"]


def test_filters_are_registered():
    filters = FilterModule().filters()
    assert filters["accel_apt_moves"](POLICY, ["nvidia-driver-cuda"], "550.144.03-1", None)["moves"]
    assert filters["accel_open_modules_required"]({"gpus": [{"name": "NVIDIA B200", "compute_capability": "10.0"}]})
    assert filters["accel_sriov_method"](None) == "sysfs"
