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

INV = "inventories/tests/bad_plan/"
EXPECTED = {
    'bad-mig-0': [
        f"accel_vgpu_scheduler_policy = 'fastest' ({INV}group_vars/pool_mig_overfull.yml:9): not one of the "
        "choices; allowed: binpack, spread",
        f"accel_mig_geometry = 4g.40gbx1 + 3g.40gbx1 + 1g.10gbx1 ({INV}group_vars/pool_mig_overfull.yml:6): no"
        " legal placement on A100-80GB on GPU 0 (NVIDIA A100-SXM4-80GB) (needs 8/7 SM slices and 9/8 memory "
        "slices, and each profile may only start at its allowed positions); allowed: a combination that fits,"
        " e.g. one of 7g.80gbx1; 3g.40gbx1 + 4g.40gbx1; 3g.40gbx2; 2g.20gbx2 + 3g.40gbx1",
    ],
    'bad-mode-0': [
        f"accel_mode = 'mig' ({INV}group_vars/pool_mode_mig.yml:3): not a kube-accel mode; allowed: vgpu, "
        "pgpu, mps, timeslice, dra (MIG slices are mode pgpu or dra with accel_mig_geometry)",
    ],
    'bad-mps-0': [
        f"accel_mps_replicas = 64 ({INV}group_vars/pool_mps_on_mig.yml:4): out of range; allowed: an integer "
        "2..48",
        f"accel_mig_strategy = 'mixed' ({INV}group_vars/pool_mps_on_mig.yml:5): set for this pool, whose "
        "settings make it ignored (it applies with accel_mode pgpu or dra); allowed: remove it, or set it for pools "
        "it applies to",
        f"accel_mode = 'mps' ({INV}group_vars/pool_mps_on_mig.yml:3): GPU 0 (NVIDIA A100-SXM4-80GB) has MIG "
        "enabled (current=True, pending=True); allowed: accel_mode pgpu or dra for MIG; vgpu, mps and timeslice need"
        " GPUs with MIG disabled (no accel_mig_geometry, accel_mig_strategy none)",
    ],
    'bad-names-0': [
        f"accel_pool = 'GPU pool' ({INV}group_vars/pool_bad_names.yml:2): not an RFC 1123 label; allowed: an "
        "RFC 1123 label of at most 45 lower-case letters, digits and '-', starting and ending with a letter "
        "or digit (it is part of the names kube-accel-verify-<pool>)",
        f"accel_driver_branch = '470' ({INV}group_vars/pool_bad_names.yml:4): older than GPU 0 (NVIDIA H100 "
        "80GB HBM3) supports: H100-80GB needs driver 525.85.12; allowed: accel_driver_branch 525 or newer",
    ],
    'bad-split-a-0': [
        "accel_pool = 'split': the hosts of pool 'split' (groups pool_split_a, pool_split_b) disagree on "
        f"accel_mode: 'pgpu' on bad-split-a-0 ({INV}group_vars/pool_split_a.yml:3); 'timeslice' on bad-"
        f"split-b-0 ({INV}group_vars/pool_split_b.yml:3); allowed: the same pool settings on every host of a "
        "pool: set them in its pool group, or give the hosts different accel_pool names",
        "accel_pool = 'split': the hosts of pool 'split' (groups pool_split_a, pool_split_b) disagree on "
        "accel_timeslice_replicas: (not set) on bad-split-a-0; 4 on bad-split-b-0 "
        f"({INV}group_vars/pool_split_b.yml:4); allowed: the same pool settings on every host of a pool: set "
        "them in its pool group, or give the hosts different accel_pool names",
    ],
    'bad-split-b-0': [
        "accel_pool = 'split': the hosts of pool 'split' (groups pool_split_a, pool_split_b) disagree on "
        f"accel_mode: 'pgpu' on bad-split-a-0 ({INV}group_vars/pool_split_a.yml:3); 'timeslice' on bad-"
        f"split-b-0 ({INV}group_vars/pool_split_b.yml:3); allowed: the same pool settings on every host of a "
        "pool: set them in its pool group, or give the hosts different accel_pool names",
        "accel_pool = 'split': the hosts of pool 'split' (groups pool_split_a, pool_split_b) disagree on "
        "accel_timeslice_replicas: (not set) on bad-split-a-0; 4 on bad-split-b-0 "
        f"({INV}group_vars/pool_split_b.yml:4); allowed: the same pool settings on every host of a pool: set "
        "them in its pool group, or give the hosts different accel_pool names",
    ],
    'bad-twin-0': [
        "group_names = ['pool_ok_pgpu', 'pool_twin_vgpu']: different modes on one host: pool_ok_pgpu "
        "(accel_mode=pgpu), pool_twin_vgpu (accel_mode=vgpu); allowed: exactly one pool group under "
        "gpu_pools, so one mode per host",
    ],
    'bad-vcuda-0': [
        # The host is this machine (local connection): its real cgroup hierarchy and containerd are read.
        *([f"accel_vgpu_backend = 'gpu-manager' ({INV}group_vars/pool_vcuda_on_cuda12.yml:4): the host runs cgroup "
           "v2; GPU-Manager v1.1.5 reads cgroup v1 paths only; allowed: hami on cgroup v2 hosts; gpu-manager only "
           "on cgroup v1 hosts"] if Path("/sys/fs/cgroup/cgroup.controllers").exists() else []),
        f"accel_vgpu_backend = 'gpu-manager' ({INV}group_vars/pool_vcuda_on_cuda12.yml:4): GPU-Manager does "
        "not support the CUDA 12.4 driver (driver 550.54.15) on this host; allowed: hami for CUDA 12 and "
        "newer drivers; gpu-manager only with a CUDA 11.x driver (branch 520 or older)",
        f"accel_driver_branch = '550' ({INV}group_vars/pool_vcuda_on_cuda12.yml:5): with accel_vgpu_backend "
        "'gpu-manager' the planned driver branch ships a CUDA 12+ driver, which GPU-Manager does not support;"
        " allowed: hami for CUDA 12 and newer drivers; gpu-manager only with a CUDA 11.x driver (branch 520 "
        "or older)",
    ],
    'bad-vfio-0': [
        f"accel_numa_polcy = 'restricted' ({INV}group_vars/pool_vfio_no_iommu.yml:8): unknown variable (did "
        "you mean accel_numa_policy?); allowed: the variables of kube-accel's inventory model "
        "(docs/inventory.md, docs/plan-checks.md)",
        f"mps_replicas = 4 ({INV}group_vars/pool_vfio_no_iommu.yml:9): unknown variable (did you mean "
        "accel_mps_replicas?); allowed: the variables of kube-accel's inventory model (docs/inventory.md, "
        "docs/plan-checks.md), and the variables of kube-accel's roles",
        f"accel_vfio_pci_ids = ['10de:1eb8', '10de-1aef'] ({INV}group_vars/pool_vfio_no_iommu.yml:5): element "
        "'10de-1aef': not a PCI vendor:device ID; allowed: 4 hex digits, a colon, 4 hex digits, e.g. "
        "\"10de:20b5\"",
        f"accel_sriov_numvfs = 4 ({INV}group_vars/pool_vfio_no_iommu.yml:6): GPU 0 (Tesla T4) is not SR-IOV "
        "capable (sriov_totalvfs 0); allowed: 0..0",
        f"accel_sriov_numvfs = 4 ({INV}group_vars/pool_vfio_no_iommu.yml:6): SR-IOV virtual functions need the"
        " IOMMU, which is neither enabled on this host (no /sys/kernel/iommu_groups) nor planned (accel_iommu"
        " is false); allowed: accel_iommu: true with accel_sriov_numvfs, or accel_sriov_numvfs: 0",
        f"accel_vfio_passthrough = true ({INV}group_vars/pool_vfio_no_iommu.yml): vfio-pci passthrough needs "
        "the IOMMU, which is neither enabled on this host (no /sys/kernel/iommu_groups) nor planned "
        "(accel_iommu is false); allowed: accel_iommu: true with accel_vfio_passthrough, or "
        "accel_vfio_passthrough: false",
        f"accel_kubernetes_version = '1.29' ({INV}group_vars/all.yml:2): accel_numa_policy 'single-numa-node' "
        "(NUMA-aligned GPUs through the kubelet Topology Manager) needs Kubernetes 1.30 or newer: kube-accel "
        "sets it in a kubelet --config-dir drop-in, a flag kubelet accepts by default only from 1.30; "
        "allowed: >= 1.30, or accel_numa_policy none",
    ],
}
RECAP = re.compile(r"^(\S+)\s*: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


# No kube_control_plane in this inventory: the cluster settings are read as the first GPU host sees them, and the
# reporter (localhost) lists their problems.
REPORTER = "bad-vcuda-0 (first GPU host, the inventory has no kube_control_plane)"
HAMI_ON_129 = (f"{REPORTER}: accel_kubernetes_version = '1.29': pool(s) twin-vgpu use vGPU backend hami, whose limits "
               "a pod author could switch off and whose node agents could write any node or pod without the vgpu "
               "chart's ValidatingAdmissionPolicies, which need Kubernetes 1.30")


def reporter_lines(stdout):
    """The '- ...' lines of the reporter's (localhost's) failed assertion, from its indented result block."""
    block = stdout.split("fatal: [localhost]: FAILED! =>", 1)[1] if "fatal: [localhost]" in stdout else ""
    return [line.strip()[2:] for line in block.splitlines()
            if line.startswith("        - ") and line.strip().startswith(f"- {REPORTER}: ")]


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
    assert set(stats) == {*EXPECTED, "ok-pgpu-0", "localhost"}, proc.stdout
    assert all(s["changed"] == 0 and s["unreachable"] == 0 for s in stats.values()), stats
    assert {h for h, s in stats.items() if s["failed"]} == {*EXPECTED, "localhost"}
    # The good host passed its own checks, yet nothing ran on it after the preflight play.
    assert "ok-pgpu-0: plan OK (8 GPU(s); source snapshot:dual-socket-a100x8)" in proc.stdout
    # The reporter (no kube_control_plane: localhost) found the one cluster-wide problem: the HAMi pool on 1.29.
    assert [line.split(";")[0] for line in reporter_lines(proc.stdout)] == [HAMI_ON_129], proc.stdout
    plays = re.findall(r"^PLAY \[(.+?)\]", proc.stdout, re.M)
    assert plays == ["Find the GPU hosts that can be reached", "Preflight checks on every reachable GPU host"], plays


def test_cluster_settings_are_checked_once_by_the_reporter():
    """Cluster-wide variables are checked once, where the cluster play reads them (no kube_control_plane here: as
    the first GPU host sees them), every problem at once, listed by the reporter (localhost), nothing changed."""
    proc, _ = playbook("ansible/site.yml", "--tags", "preflight", "-i", "inventories/tests/bad_plan", "-e",
                       '{"accel_reboot_serial": "150%", "accel_image_registry": "https://mirror/", '
                       '"accel_run_lock_wait": "1m", "accel_gpu_operator_chart_version": "latest", '
                       '"accel_image_pull_secrets": ["Reg Cred"]}')
    assert proc.returncode != 0, proc.stdout
    lines = [line.split(";")[0] for line in reporter_lines(proc.stdout)]
    assert sorted(lines) == sorted([HAMI_ON_129] + [f"{REPORTER}: {text}" for text in [
        "accel_image_pull_secrets = ['Reg Cred'] (extra vars (-e)): element 'Reg Cred': not an RFC 1123 label: not a "
        "Secret name the charts accept",
        "accel_image_registry = 'https://mirror/' (extra vars (-e)): not a registry prefix (it replaces the registry "
        "of every image reference)",
        "accel_reboot_serial = '150%' (extra vars (-e)): '150%' is not a percentage 1..100",
        "accel_run_lock_wait = '1m' (extra vars (-e)): the string '1m', not an integer",
        "accel_gpu_operator_chart_version = 'latest' (extra vars (-e)): not a chart version",
    ]]), proc.stdout
    # Listed once, by the reporter, not by every GPU host.
    assert proc.stdout.count("accel_reboot_serial = '150%'") == 2  # the [ERROR] line and the failed result
    assert all(s["changed"] == 0 for s in recap(proc.stdout).values())


def test_lab_inventory_passes_preflight():
    """The lab's pools on their snapshots, run locally instead of in the lab's podman containers."""
    proc, _ = playbook("ansible/preflight.yml", "-i", "inventories/lab", *LOCAL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    stats = recap(proc.stdout)
    assert set(stats) == {"lab-control-plane", "lab-hami-0", "lab-hami-1", "lab-vcuda-0", "lab-pgpu-0", "lab-mps-0",
                          "lab-mig-0", "lab-timeslice-0", "lab-dra-0"}
    assert all(s["changed"] == 0 and s["failed"] == 0 for s in stats.values()), stats
    assert "lab-mig-0: plan OK (1 GPU(s); source snapshot:a100-80gb-mig)" in proc.stdout
    assert "lab-dra-0: plan OK (2 GPU(s); source snapshot:h100-80gb)" in proc.stdout


def test_example_inventory_passes_preflight_before_drivers_exist():
    """No GPU and no driver here: real NVML answers count 0 with a reason and the plan still checks out."""
    proc, _ = playbook("ansible/preflight.yml", "-i", "inventories/example", *LOCAL, "-e", "ansible_become=false",
                       "--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    stats = recap(proc.stdout)
    assert len(stats) == 25 and all(s["changed"] == 0 and s["failed"] == 0 for s in stats.values()), stats
    assert "plan OK (0 GPU(s), " in proc.stdout
