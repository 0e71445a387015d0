"""The preflight end to end: `site.yml --tags preflight` on a deliberately bad inventory fails fast, lists every
problem of every host and changes nothing; good inventories pass.

Hosts run with `ansible_connection: local`; their GPUs come from the NVML snapshots in tests/data/nvml (composed from
published device data, not recorded on a GPU here) through `accel_nvml_snapshot`, so no container or GPU is needed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
LOCAL = ["-e", "ansible_connection=local", "-e", f"ansible_python_interpreter={sys.executable}"]

EXPECTED = {
    "bad-vcuda-0": [
        "accel_vgpu_backend = 'gpu-manager': GPU-Manager does not support the CUDA 12.4 driver (driver 550.54.15) on "
        "this host; allowed: hami for CUDA 12 and newer drivers; gpu-manager only with a CUDA 11.x driver (branch 520 "
        "or older)",
        # The host is this machine (local connection): its real cgroup hierarchy and containerd are read.
        *(["accel_vgpu_backend = 'gpu-manager': the host runs cgroup v2; GPU-Manager v1.1.5 reads cgroup v1 paths "
           "only; allowed: hami on cgroup v2 hosts; gpu-manager only on cgroup v1 hosts"]
          if Path("/sys/fs/cgroup/cgroup.controllers").exists() else []),
        "accel_driver_branch = '550': with accel_vgpu_backend 'gpu-manager' the planned driver branch ships a CUDA 12+ "
        "driver, which GPU-Manager does not support; allowed: hami for CUDA 12 and newer drivers; gpu-manager only "
        "with a CUDA 11.x driver (branch 520 or older)",
    ],
    "bad-mps-0": [
        "accel_mode = 'mps': GPU 0 (NVIDIA A100-SXM4-80GB) has MIG enabled (current=True, pending=True); allowed: "
        "accel_mode pgpu for MIG; vgpu, mps and timeslice need GPUs with MIG disabled (no accel_mig_geometry, "
        "accel_mig_strategy none)",
        "accel_mig_strategy = 'mixed': a MIG plan on a pool with accel_mode mps; allowed: accel_mode pgpu for MIG; "
        "vgpu, mps and timeslice need GPUs with MIG disabled (no accel_mig_geometry, accel_mig_strategy none)",
        "accel_mps_replicas = 64: out of range; allowed: an integer 2..48 (MPS clients per GPU)",
    ],
    "bad-mig-0": [
        "accel_mig_geometry = 4g.40gbx1 + 3g.40gbx1 + 1g.10gbx1: no legal placement on A100-80GB on GPU 0 (NVIDIA "
        "A100-SXM4-80GB) (needs 8/7 SM slices and 9/8 memory slices, and each profile may only start at its allowed "
        "positions); allowed: a combination that fits, e.g. one of 7g.80gbx1; 3g.40gbx1 + 4g.40gbx1; 3g.40gbx2; "
        "2g.20gbx2 + 3g.40gbx1",
        # From the role's argument spec (types and choices), listed with the plan rules' problems.
        "value of accel_vgpu_scheduler_policy must be one of: binpack, spread, got: fastest",
    ],
    "bad-mode-0": [
        "accel_mode = 'mig': not a kube-accel mode; allowed: vgpu, pgpu, mps, timeslice (MIG slices are mode pgpu "
        "with accel_mig_geometry)",
    ],
    "bad-vfio-0": [
        "accel_numa_polcy = 'restricted': unknown variable (did you mean accel_numa_policy?); allowed: the variables "
        "of kube-accel's inventory model (README)",
        "mps_replicas = 4: unknown variable in pool group pool_vfio_no_iommu (did you mean accel_mps_replicas?); "
        "allowed: the variables of kube-accel's inventory model (README)",
        "accel_sriov_numvfs = 4: GPU 0 (Tesla T4) is not SR-IOV capable (sriov_totalvfs 0); allowed: 0..0",
        "accel_vfio_passthrough = True: vfio-pci passthrough needs the IOMMU, which is neither enabled on this host "
        "(no /sys/kernel/iommu_groups) nor planned (accel_iommu is false); allowed: accel_iommu: true with "
        "accel_vfio_passthrough, or accel_vfio_passthrough: false",
        "accel_vfio_pci_ids = '10de-1aef': not a PCI vendor:device ID; allowed: 4 hex digits, a colon, 4 hex digits, "
        "e.g. \"10de:20b5\"",
        "accel_kubernetes_version = '1.29': accel_numa_policy 'single-numa-node' (NUMA-aligned GPUs through the "
        "kubelet Topology Manager) needs Kubernetes 1.30 or newer: kube-accel sets it in a kubelet --config-dir "
        "drop-in, a flag kubelet accepts by default only from 1.30; allowed: >= 1.30, or accel_numa_policy none",
    ],
    "bad-names-0": [
        "accel_pool = 'GPU pool': not a valid label value: it becomes the kube-accel.io/pool label and taint value; "
        "allowed: at most 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit (Kubernetes "
        "label value)",
        "accel_driver_branch = '470': older than GPU 0 (NVIDIA H100 80GB HBM3) supports: H100-80GB needs driver "
        "525.85.12; allowed: accel_driver_branch 525 or newer",
    ],
    "bad-split-a-0": [
        "accel_pool = 'split': pool groups ['pool_split_a', 'pool_split_b'] name this pool with different settings "
        "(accel_mode: pool_split_a='pgpu', pool_split_b='timeslice'; accel_timeslice_replicas: pool_split_a='(unset)', "
        "pool_split_b=4); allowed: one pool group per accel_pool, or the same pool settings in every group naming it",
    ],
    "bad-split-b-0": [
        "accel_pool = 'split': pool groups ['pool_split_a', 'pool_split_b'] name this pool with different settings "
        "(accel_mode: pool_split_a='pgpu', pool_split_b='timeslice'; accel_timeslice_replicas: pool_split_a='(unset)', "
        "pool_split_b=4); allowed: one pool group per accel_pool, or the same pool settings in every group naming it",
    ],
    "bad-twin-0": [
        "group_names = ['pool_twin_vgpu', 'pool_ok_pgpu']: different modes on one host: pool_twin_vgpu "
        "(accel_mode=vgpu), pool_ok_pgpu (accel_mode=pgpu); allowed: exactly one pool group under gpu_pools, so one "
        "mode per host",
    ],
}
RECAP = re.compile(r"^(\S+)\s*: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def playbook(*args, timeout=240):
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    started = time.monotonic()
    proc = subprocess.run([str(BIN / "ansible-playbook"), *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)
    return proc, time.monotonic() - started


def recap(stdout):
    return {m.group(1): {"ok": int(m.group(2)), "changed": int(m.group(3)), "unreachable": int(m.group(4)),
                         "failed": int(m.group(5))} for m in RECAP.finditer(stdout)}


def problem_lines(stdout, host):
    """The '- <host>: ...' lines of the host's assertion message: the indented YAML block of the failed result
    (ansible-core also repeats the message unindented in its [ERROR] line)."""
    return [line.strip()[len(f"- {host}: "):] for line in stdout.splitlines()
            if line.startswith(" ") and line.strip().startswith(f"- {host}: ")]


@pytest.fixture(scope="module")
def bad_run():
    return playbook("ansible/site.yml", "--tags", "preflight", "-i", "inventories/tests/bad_plan")


def test_bad_plan_fails_fast(bad_run):
    proc, elapsed = bad_run
    assert proc.returncode != 0, proc.stdout
    # Seconds on a workstation; generous bound for a loaded 2-core CI machine.
    assert elapsed < 120, elapsed


@pytest.mark.parametrize("host", sorted(EXPECTED))
def test_bad_plan_lists_every_problem_of_every_host(bad_run, host):
    proc, _ = bad_run
    assert problem_lines(proc.stdout, host) == EXPECTED[host], proc.stdout
    assert f"{host}: {len(EXPECTED[host])} problem(s) in the plan:" in proc.stdout


def test_bad_plan_changes_nothing_and_stops_after_preflight(bad_run):
    proc, _ = bad_run
    stats = recap(proc.stdout)
    assert set(stats) == {*EXPECTED, "ok-pgpu-0"}, proc.stdout
    assert all(s["changed"] == 0 and s["unreachable"] == 0 for s in stats.values()), stats
    assert {h for h, s in stats.items() if s["failed"]} == set(EXPECTED)
    # The good host passed its own checks, yet nothing ran on it after the preflight play.
    assert "ok-pgpu-0: plan OK (8 GPU(s); source snapshot:dual-socket-a100x8)" in proc.stdout
    plays = re.findall(r"^PLAY \[(.+?)\]", proc.stdout, re.M)
    assert plays == ["Find the GPU hosts that can be reached", "Preflight checks on every reachable GPU host"], plays


def test_cluster_settings_are_validated_on_every_host():
    """Cluster-wide variables (group_vars/all) are checked too, every problem at once, nothing changed."""
    proc, _ = playbook("ansible/site.yml", "--tags", "preflight", "-i", "inventories/tests/bad_plan", "--limit",
                       "ok-pgpu-0", "-e", '{"accel_reboot_serial": "150%", "accel_image_registry": "https://mirror/", '
                       '"accel_run_lock_wait": "1m", "accel_gpu_operator_chart_version": "latest", '
                       '"accel_image_pull_secrets": ["Reg Cred"]}')
    assert proc.returncode != 0, proc.stdout
    assert [line.split(";")[0] for line in problem_lines(proc.stdout, "ok-pgpu-0")] == [
        "accel_image_pull_secrets = 'Reg Cred': not an RFC 1123 subdomain: not a Secret name",
        "accel_image_registry = 'https://mirror/': not a registry prefix (it replaces the registry of every image "
        "reference)",
        "accel_reboot_serial = '150%': '150%' is not a percentage 1..100",
        "accel_run_lock_wait = '1m': not an integer",
        "accel_gpu_operator_chart_version = 'latest': not a chart version",
    ], proc.stdout
    assert all(s["changed"] == 0 for s in recap(proc.stdout).values())


def test_lab_inventory_passes_preflight():
    """The lab's pools on their snapshots, run locally instead of in the lab's podman containers."""
    proc, _ = playbook("ansible/preflight.yml", "-i", "inventories/lab", *LOCAL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    stats = recap(proc.stdout)
    assert set(stats) == {"lab-hami-0", "lab-hami-1", "lab-vcuda-0", "lab-pgpu-0", "lab-mps-0", "lab-mig-0",
                          "lab-timeslice-0"}
    assert all(s["changed"] == 0 and s["failed"] == 0 for s in stats.values()), stats
    assert "lab-mig-0: plan OK (1 GPU(s); source snapshot:a100-80gb-mig)" in proc.stdout


def test_example_inventory_passes_preflight_before_drivers_exist():
    """No GPU and no driver here: real NVML answers count 0 with a reason and the plan still checks out."""
    proc, _ = playbook("ansible/preflight.yml", "-i", "inventories/example", *LOCAL, "-e", "ansible_become=false",
                       "--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    stats = recap(proc.stdout)
    assert len(stats) == 22 and all(s["changed"] == 0 and s["failed"] == 0 for s in stats.values()), stats
    assert "plan OK (0 GPU(s), " in proc.stdout
