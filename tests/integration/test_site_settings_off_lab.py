"""Day 2 on the hosts: a setting turned off in the inventory is removed from the host by site.yml.

Evidence: a lab podman host (lab-pgpu-0, with systemd; the hosts play through the lab's podman connection) and its
files after the run. This file sorts after test_site_lab.py on purpose: there the site run has converged the host
(its kubelet drop-in is on it), so the test needs no run of its own to put it there first (it makes one when run
alone).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from lab_fixture import LAB_INVENTORY, changed_lab_inventory, remove_changed_inventory, site_play

pytestmark = pytest.mark.lab

DROPIN = "/etc/kubernetes/kubelet.conf.d/50-kube-accel-gpu.conf"
# What roles/sriov writes for a physical function given VFs (defaults: sriov_config_dir, sriov_unit_dir).
SRIOV_DIR = "/etc/kube-accel/sriov"
WANTS = "/etc/systemd/system/multi-user.target.wants"
VF_PF = "0000:17:00.0"


def host_file_exists(host: str, path: str) -> bool:
    return subprocess.run(["podman", "exec", host, "test", "-e", path], check=False).returncode == 0


@pytest.fixture
def numa_off():
    """The lab inventory with the pgpu pool's NUMA policy turned off, removed afterwards."""
    yield changed_lab_inventory("pool_pgpu.yml", lambda pool: pool.update(accel_numa_policy="none"))
    remove_changed_inventory()


def hosts_run(lab, inventory: Path) -> subprocess.CompletedProcess:
    return site_play(lab, inventory, "--tags", "preflight,hosts", "--limit", "lab-pgpu-0")


def test_a_numa_policy_turned_off_in_the_inventory_is_removed_from_the_host(lab, numa_off):
    """The kubelet drop-in's removal path existed in kubelet_gpu but site.yml only ran the role for a policy other
    than none, so turning it off left the drop-in (and the static CPU Manager) in force. The same held for SR-IOV:
    the VF units an earlier plan enabled (planted here as the sriov role writes them: the lab's GPUs have no VFs)
    stayed enabled once the pool's accel_sriov_numvfs went back to 0."""
    if not host_file_exists("lab-pgpu-0", DROPIN):  # the lab's own plan (pool pgpu: single-numa-node) writes it
        on = hosts_run(lab, LAB_INVENTORY / "hosts.yml")
        assert on.returncode == 0, on.stdout[-4000:]
        assert host_file_exists("lab-pgpu-0", DROPIN)
    subprocess.run(["podman", "exec", "lab-pgpu-0", "sh", "-c",
                    f"mkdir -p {SRIOV_DIR} {WANTS} && echo SRIOV_NUMVFS=4 > {SRIOV_DIR}/{VF_PF}.env && "
                    f"ln -sf /etc/systemd/system/kube-accel-sriov@.service {WANTS}/kube-accel-sriov@{VF_PF}.service"],
                   check=True)
    off = hosts_run(lab, numa_off)
    assert off.returncode == 0, off.stdout[-4000:]
    assert not host_file_exists("lab-pgpu-0", DROPIN), off.stdout[-3000:]
    assert not host_file_exists("lab-pgpu-0", f"{SRIOV_DIR}/{VF_PF}.env"), off.stdout[-3000:]
    assert not host_file_exists("lab-pgpu-0", f"{WANTS}/kube-accel-sriov@{VF_PF}.service")
    back = hosts_run(lab, LAB_INVENTORY / "hosts.yml")
    assert back.returncode == 0 and host_file_exists("lab-pgpu-0", DROPIN), back.stdout[-3000:]
