"""Plan rules, each positive and negative, on GPU facts gathered from the recorded snapshots in tests/data/nvml
(composed from published device data, not recorded on a GPU here). The whole-inventory checks (sources, strict types,
pool membership and agreement) are tests/unit/test_inventory_model.py's."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from ansible_collections.kube_accel.gpu.plugins.filter.accel_plan_filters import FilterModule
from ansible_collections.kube_accel.gpu.plugins.module_utils.host import gpu_facts as accel_gpu_facts
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import inventory as accel_inventory
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import rules as plan

REPO = Path(__file__).resolve().parents[2]
SNAPSHOTS = REPO / "tests" / "data" / "nvml"
HOST = "gpu-01"


def gpus(name):
    return accel_gpu_facts.gather(accel_gpu_facts.RecordedSource.from_file(str(SNAPSHOTS / f"{name}.json")))


def check(settings, facts=None):
    return plan.host_problems(HOST, settings, facts or {})


POOL_DEFAULTS = {"accel_kubernetes_version": "1.36", "accel_iommu": False, "accel_sriov_numvfs": 0,
                 "accel_vfio_passthrough": False, "accel_numa_policy": "none"}


def pool(**settings):
    return {**POOL_DEFAULTS, **{f"accel_{k}": v for k, v in settings.items()}}


GOOD = [
    ("vgpu hami on H100", pool(pool="hami", mode="vgpu", vgpu_backend="hami", vgpu_split_count=10), "h100-80gb"),
    ("vgpu gpu-manager on T4 CUDA 11.4", pool(pool="v", mode="vgpu", vgpu_backend="gpu-manager",
                                              driver_branch="470"), "t4"),
    ("mps on A30", pool(pool="m", mode="mps", mps_replicas=4), "a30"),
    ("timeslice one GPU per pod on T4", pool(pool="t", mode="timeslice", timeslice_replicas=4), "t4"),
    ("timeslice oversubscription on A100", pool(pool="t", mode="timeslice", timeslice_replicas=64,
                                                timeslice_rename_by_default=False,
                                                timeslice_fail_requests_greater_than_one=False), "a100-80gb"),
    ("mps on T4 (Turing, 7.5)", pool(pool="m", mode="mps", mps_replicas=48), "t4"),
    ("pgpu NUMA on two sockets", pool(pool="p", mode="pgpu", numa_policy="single-numa-node"), "dual-socket-a100x8"),
    ("pgpu MIG mixed", pool(pool="mig", mode="pgpu", mig_strategy="mixed", mig_owner="operator",
                            mig_geometry={"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}), "a100-80gb-mig"),
    ("pgpu MIG single", pool(pool="mig", mode="pgpu", mig_strategy="single", mig_geometry={"1g.10gb": 7}),
     "a100-80gb"),
    ("vfio with IOMMU planned", pool(pool="vm", mode="pgpu", iommu=True, vfio_passthrough=True,
                                     vfio_pci_ids=["10DE:1EB8"]), "t4"),
    ("vfio with IOMMU already on", pool(pool="vm", mode="pgpu", vfio_passthrough=True), "h100-80gb"),
    ("SR-IOV within totalvfs", pool(pool="s", mode="pgpu", sriov_numvfs=16), "a30"),
    ("vgpu hami at the chart's limits", pool(pool="hami", mode="vgpu", vgpu_backend="hami", vgpu_split_count=100,
                                             vgpu_memory_scaling=10, vgpu_core_scaling=0.5), "h100-80gb"),
]


@pytest.mark.parametrize(("title", "settings", "snapshot"), GOOD, ids=[g[0] for g in GOOD])
def test_good_plans_have_no_problems(title, settings, snapshot):
    assert check(settings, gpus(snapshot)) == []


def test_rule_mode():
    assert check(pool(mode="pgpu")) == []
    assert check(pool(mode="mig")) == [
        "gpu-01: accel_mode = 'mig': not a kube-accel mode; allowed: vgpu, pgpu, mps, timeslice, dra (MIG slices "
        "are mode pgpu or dra with accel_mig_geometry)"]
    missing = {k: v for k, v in pool().items() if k != "accel_mode"}
    assert check(missing) == [
        "gpu-01: accel_mode = (not set): not set for this GPU host; allowed: vgpu, pgpu, mps, timeslice, dra (MIG "
        "slices are mode pgpu or dra with accel_mig_geometry)"]




def test_rule_gpu_manager_refused_on_cuda_12():
    settings = pool(mode="vgpu", vgpu_backend="gpu-manager", driver_branch="470")
    assert check(settings, gpus("t4")) == []
    problems = check(settings, gpus("h100-80gb"))
    assert problems == [
        "gpu-01: accel_vgpu_backend = 'gpu-manager': GPU-Manager does not support the CUDA 12.4 driver (driver "
        "550.54.15) on this host; allowed: hami for CUDA 12 and newer drivers; gpu-manager only with a CUDA 11.x "
        "driver (branch 520 or older)",
        # No branch GPU-Manager accepts knows an H100: the plan cannot work on this host at all.
        "gpu-01: accel_driver_branch = '470': older than GPU 0 (NVIDIA H100 80GB HBM3) supports: H100-80GB needs "
        "driver 525.85.12; allowed: accel_driver_branch 525 or newer"]
    # Before the driver is installed the planned branch decides.
    planned = check(pool(mode="vgpu", vgpu_backend="gpu-manager", driver_branch="550"), {"count": 0})
    assert len(planned) == 1 and planned[0].startswith("gpu-01: accel_driver_branch = '550': with accel_vgpu_backend")
    assert "hami" in planned[0]
    assert check(pool(mode="vgpu", vgpu_backend="hami", driver_branch="550"), gpus("h100-80gb")) == []


def test_rule_gpu_manager_refused_on_cgroup_v2_and_containerd_2():
    # gpu-manager v1.1.5 speaks CRI v1alpha2 only and reads the cgroup v1 memory hierarchy.
    settings = pool(mode="vgpu", vgpu_backend="gpu-manager", driver_branch="470")
    t4 = gpus("t4")
    v1_host = {**t4, "host_runtime": {"cgroup_version": 1, "containerd_version": "1.7.24"}}
    assert check(settings, v1_host) == []
    unknown = {**t4, "host_runtime": {"cgroup_version": None, "containerd_version": None}}
    assert check(settings, unknown) == []  # nothing read (no containerd yet): nothing refused
    modern = {**t4, "host_runtime": {"cgroup_version": 2, "containerd_version": "2.1.4"}}
    assert check(settings, modern) == [
        "gpu-01: accel_vgpu_backend = 'gpu-manager': the host runs cgroup v2; GPU-Manager v1.1.5 reads cgroup v1 "
        "paths only; allowed: hami on cgroup v2 hosts; gpu-manager only on cgroup v1 hosts",
        "gpu-01: accel_vgpu_backend = 'gpu-manager': the host runs containerd 2.1.4, which no longer serves CRI "
        "v1alpha2, the only CRI GPU-Manager v1.1.5 speaks; allowed: hami with containerd 2; gpu-manager only with "
        "containerd 1.x"]
    # The same host is fine for HAMi.
    assert check(pool(mode="vgpu", vgpu_backend="hami", driver_branch="550"),
                 {**gpus("h100-80gb"), "host_runtime": modern["host_runtime"]}) == []


def test_rule_vgpu_backend_required():
    assert check(pool(mode="vgpu")) == [
        "gpu-01: accel_vgpu_backend = (not set): required with accel_mode vgpu; allowed: hami, gpu-manager"]


@pytest.mark.parametrize("mode", ["vgpu", "mps", "timeslice"])
def test_rule_vgpu_mps_and_timeslice_refused_on_mig(mode):
    extra = {"vgpu": {"vgpu_backend": "hami"}, "mps": {"mps_replicas": 4}, "timeslice": {"timeslice_replicas": 4}}[mode]
    assert check(pool(mode=mode, **extra), gpus("a100-80gb")) == []
    on_mig = check(pool(mode=mode, **extra), gpus("a100-80gb-mig"))
    assert on_mig == [
        f"gpu-01: accel_mode = '{mode}': GPU 0 (NVIDIA A100-SXM4-80GB) has MIG enabled (current=True, "
        "pending=True); allowed: accel_mode pgpu or dra for MIG; vgpu, mps and timeslice need GPUs with MIG "
        "disabled (no accel_mig_geometry, accel_mig_strategy none)"]
    pending = gpus("a100-80gb")
    pending["gpus"][0]["mig_mode_pending"] = True  # MIG switched on, waiting for a GPU reset
    assert "has MIG enabled (current=False, pending=True)" in check(pool(mode=mode, **extra), pending)[0]
    planned = check(pool(mode=mode, mig_geometry={"1g.10gb": 7}, **extra), gpus("a100-80gb"))
    assert planned == [
        f"gpu-01: accel_mig_geometry = {{'1g.10gb': 7}}: a MIG plan on a pool with accel_mode {mode}; allowed: "
        "accel_mode pgpu or dra for MIG; vgpu, mps and timeslice need GPUs with MIG disabled (no accel_mig_geometry, "
        "accel_mig_strategy none)"]
    strategy = check(pool(mode=mode, mig_strategy="single", **extra), gpus("a100-80gb"))
    assert len(strategy) == 1 and strategy[0].startswith("gpu-01: accel_mig_strategy = 'single': a MIG plan")
    assert check(pool(mode=mode, mig_strategy="none", **extra), gpus("a100-80gb")) == []


@pytest.mark.parametrize("replicas", [2, 4, 48])
def test_rule_mps_replicas_in_range(replicas):
    assert check(pool(mode="mps", mps_replicas=replicas), gpus("a30")) == []


@pytest.mark.parametrize("replicas", [1, 0, 49, 64, -2])
def test_rule_mps_replicas_out_of_range(replicas):
    assert check(pool(mode="mps", mps_replicas=replicas), gpus("a30")) == [
        f"gpu-01: accel_mps_replicas = {replicas!r}: out of range; allowed: an integer 2..48"]


@pytest.mark.parametrize(("replicas", "what"), [
    ("many", "the string 'many', not an integer"), ("4", "the string '4', not an integer: write 4 without quotes"),
    (2.5, "the number 2.5, not an integer"), (4.0, "the number 4.0, not an integer"),
    (True, "the boolean true, not an integer"), (None, "null (an empty YAML value), not an integer")])
def test_rule_mps_replicas_not_an_integer(replicas, what):
    # Whatever is not an integer as written is named for what it is, not coerced and not "out of range".
    problems = check(pool(mode="mps", mps_replicas=replicas), gpus("a30"))
    assert len(problems) == 1 and problems[0].startswith("gpu-01: accel_mps_replicas = ") and what in problems[0]
    assert problems[0].endswith("; allowed: an integer 2..48")


def test_rule_mps_replicas_required():
    assert check(pool(mode="mps"), gpus("a30"))[0].startswith(
        "gpu-01: accel_mps_replicas = (not set): required with accel_mode mps")


def test_rule_mps_refused_before_volta():
    # No Pascal snapshot: the T4 facts with a P100's name and compute capability 6.0 stand in for one.
    pascal = copy.deepcopy(gpus("t4"))
    pascal["gpus"][0].update(name="Tesla P100-PCIE-16GB", compute_capability="6.0")
    assert check(pool(mode="mps", mps_replicas=4), pascal) == [
        "gpu-01: accel_mode = 'mps': GPU 0 (Tesla P100-PCIE-16GB) has compute capability 6.0 (pre-Volta); "
        "allowed: mps on compute capability 7.0 (Volta) or newer; use pgpu or vgpu on older GPUs"]
    assert check(pool(mode="pgpu"), pascal) == []


def test_every_pre_volta_gpu_is_named_for_mps_and_dra_mps():
    # Two P100 stand-ins (the T4 facts, renamed): the device plugin's MPS and the DRA driver's name each GPU it refuses.
    pascal = copy.deepcopy(gpus("t4"))
    pascal["gpus"][0].update(name="Tesla P100-PCIE-16GB", compute_capability="6.0")
    pascal["gpus"].append({**pascal["gpus"][0], "index": 1})
    pascal["count"] = 2
    for settings in (pool(mode="mps", mps_replicas=4),
                     pool(mode="dra", dra_sharing="mps", dra_feature_gates={"MPSSupport": True})):
        named = [p for p in check(settings, pascal) if "pre-Volta" in p]
        assert [p.split(": ")[2].split(" (")[0] for p in named] == ["GPU 0", "GPU 1"], named


def test_rule_mps_clients_limited_by_compute_capability():
    # nvidia-cuda-mps-control(1): 16 clients per GPU on SM 3.5-6.0, 48 on SM 7.0 (Volta); one table in accel_plan.
    volta = copy.deepcopy(gpus("t4"))
    volta["gpus"][0].update(name="Tesla V100-PCIE-16GB", compute_capability="7.0")
    assert check(pool(mode="mps", mps_replicas=48), volta) == []
    assert check(pool(mode="mps", mps_replicas=48), gpus("t4")) == []  # Turing, 7.5
    assert plan.mps_max_clients((7, 0)) == plan.mps_max_clients((9, 0)) == accel_inventory.MPS_MAX_REPLICAS == 48
    assert plan.mps_max_clients((6, 1)) is None
    assert check(pool(mode="mps", mps_replicas=49), volta) == [
        "gpu-01: accel_mps_replicas = 49: out of range; allowed: an integer 2..48"]


@pytest.mark.parametrize("replicas", [2, 8, 64])
def test_rule_timeslice_replicas_in_range(replicas):
    assert check(pool(mode="timeslice", timeslice_replicas=replicas), gpus("t4")) == []


@pytest.mark.parametrize(("replicas", "what"), [(1, "out of range"), (0, "out of range"), (65, "out of range"),
                                               (-4, "out of range"), ("many", "the string 'many', not an integer"),
                                               (2.5, "the number 2.5, not an integer"),
                                               (True, "the boolean true, not an integer"),
                                               (None, "null (an empty YAML value), not an integer")])
def test_rule_timeslice_replicas_out_of_range(replicas, what):
    problems = check(pool(mode="timeslice", timeslice_replicas=replicas), gpus("t4"))
    assert len(problems) == 1 and what in problems[0] and problems[0].endswith("; allowed: an integer 2..64")


def test_rule_timeslice_replicas_required():
    assert check(pool(mode="timeslice"), gpus("t4")) == [
        "gpu-01: accel_timeslice_replicas = (not set): required with accel_mode timeslice; allowed: an integer 2..64 "
        "(pods sharing one GPU in turns)"]


def test_rule_timeslice_switches_are_booleans():
    assert check(pool(mode="timeslice", timeslice_replicas=4, timeslice_rename_by_default=False), gpus("t4")) == []
    # "yes" is a string, not YAML's boolean yes: refused (one check took it for true, the next for false).
    assert check(pool(mode="timeslice", timeslice_replicas=4, timeslice_rename_by_default="yes"), gpus("t4")) == [
        "gpu-01: accel_timeslice_rename_by_default = 'yes': the string 'yes', not a boolean: write true without "
        "quotes; allowed: true or false"]
    assert check(pool(mode="timeslice", timeslice_replicas=4, timeslice_fail_requests_greater_than_one="maybe"),
                 gpus("t4")) == [
        "gpu-01: accel_timeslice_fail_requests_greater_than_one = 'maybe': the string 'maybe', not a boolean; "
        "allowed: true or false"]




def test_rule_mig_geometry_legal_for_the_gpu_model():
    layout = {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}
    assert check(pool(mode="pgpu", mig_strategy="mixed", mig_geometry=layout), gpus("a100-80gb")) == []
    # Same names, another model: the A100-40GB has no 3g.40gb.
    wrong_model = check(pool(mode="pgpu", mig_strategy="mixed", mig_geometry=layout), gpus("dual-socket-a100x8"))
    assert wrong_model[0] == (
        "gpu-01: accel_mig_geometry: profile '3g.40gb' does not exist on A100-40GB on GPU 0 (NVIDIA A100-SXM4-40GB); "
        "allowed: 1g.5gb, 1g.10gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb, 1g.5gb+me")
    overfull = check(pool(mode="pgpu", mig_strategy="mixed", mig_geometry={"4g.40gb": 1, "3g.40gb": 1, "1g.10gb": 1}),
                     gpus("a100-80gb"))
    assert len(overfull) == 1 and "no legal placement on A100-80GB on GPU 0 (NVIDIA A100-SXM4-80GB)" in overfull[0]
    not_mig = check(pool(mode="pgpu", mig_strategy="mixed", mig_geometry={"1g.10gb": 1}), gpus("t4"))
    assert len(not_mig) == 1 and "(PCI device 0x1EB810DE) does not support MIG" in not_mig[0]


def test_rule_mig_geometry_without_gpus_checks_all_models():
    assert check(pool(mode="pgpu", mig_strategy="mixed", mig_geometry={"2g.12gb": 2}), {"count": 0}) == []
    problems = check(pool(mode="pgpu", mig_strategy="mixed", mig_geometry={"2g.12gb": 3}), {"count": 0})
    assert len(problems) == 1 and "legal on no MIG-capable GPU model (e.g. A30-24GB" in problems[0]


def test_rule_mig_strategy_matches_geometry():
    missing = check(pool(mode="pgpu", mig_geometry={"1g.10gb": 7}), gpus("a100-80gb"))
    assert missing == ["gpu-01: accel_mig_strategy = (not set): a MIG geometry needs a MIG strategy; allowed: single "
                       "(one profile, counted as nvidia.com/gpu) or mixed"]
    single = check(pool(mode="pgpu", mig_strategy="single", mig_geometry={"3g.40gb": 1, "1g.10gb": 4}),
                   gpus("a100-80gb"))
    assert len(single) == 1 and "all must have the same profile" in single[0]


def test_rule_sriov_numvfs():
    assert check(pool(mode="pgpu", sriov_numvfs=16), gpus("a30")) == []
    assert check(pool(mode="pgpu", sriov_numvfs=17), gpus("a30")) == [
        "gpu-01: accel_sriov_numvfs = 17: above GPU 0 (NVIDIA A30)'s sriov_totalvfs 16; allowed: 0..16"]
    assert check(pool(mode="pgpu", sriov_numvfs=4, iommu=True), gpus("t4")) == [
        "gpu-01: accel_sriov_numvfs = 4: GPU 0 (Tesla T4) is not SR-IOV capable (sriov_totalvfs 0); allowed: 0..0"]
    assert check(pool(mode="pgpu", sriov_numvfs=-1)) == [
        "gpu-01: accel_sriov_numvfs = -1: out of range; allowed: an integer >= 0"]
    assert check(pool(mode="pgpu", sriov_numvfs="four")) == [
        "gpu-01: accel_sriov_numvfs = 'four': the string 'four', not an integer; allowed: an integer >= 0"]
    # Virtual functions need the IOMMU, on already or planned.
    assert check(pool(mode="pgpu", sriov_numvfs=8), {**gpus("a30"), "iommu_enabled": False}) == [
        "gpu-01: accel_sriov_numvfs = 8: SR-IOV virtual functions need the IOMMU, which is neither enabled on this "
        "host (no /sys/kernel/iommu_groups) nor planned (accel_iommu is false); allowed: accel_iommu: true with "
        "accel_sriov_numvfs, or accel_sriov_numvfs: 0"]
    assert check(pool(mode="pgpu", sriov_numvfs=8, iommu=True), {**gpus("a30"), "iommu_enabled": False}) == []


def test_rule_vfio_needs_iommu():
    no_iommu = gpus("t4")
    assert check(pool(mode="pgpu", vfio_passthrough=True, iommu=True), no_iommu) == []
    assert check(pool(mode="pgpu", vfio_passthrough=True), gpus("h100-80gb")) == []  # IOMMU already on
    assert check(pool(mode="pgpu", vfio_passthrough=True), no_iommu) == [
        "gpu-01: accel_vfio_passthrough = true: vfio-pci passthrough needs the IOMMU, which is neither enabled on "
        "this host (no /sys/kernel/iommu_groups) nor planned (accel_iommu is false); allowed: accel_iommu: true "
        "with accel_vfio_passthrough, or accel_vfio_passthrough: false"]
    bad_ids = check(pool(mode="pgpu", vfio_passthrough=True, iommu=True, vfio_pci_ids=["10de:20b5", "10de20b5"]))
    assert bad_ids == ["gpu-01: accel_vfio_pci_ids = ['10de:20b5', '10de20b5']: element '10de20b5': not a PCI "
                       "vendor:device ID; allowed: 4 hex digits, a colon, 4 hex digits, e.g. \"10de:20b5\""]


def test_rule_vfio_ids_match_the_hosts_gpus():
    t4 = gpus("t4")  # PCI device 0x1EB810DE: 10de:1eb8
    assert check(pool(mode="pgpu", vfio_passthrough=True, iommu=True, vfio_pci_ids=["10de:1eb8"]), t4) == []
    assert check(pool(mode="pgpu", vfio_passthrough=True, iommu=True, vfio_pci_ids=["10de:20b5", "10de:1eb8"]),
                 t4) == [
        "gpu-01: accel_vfio_pci_ids = ['10de:20b5', '10de:1eb8']: ['10de:20b5'] match none of this host's GPUs "
        "(10de:1eb8): vfio-pci would bind nothing, or another device; allowed: the vendor:device IDs of the host's "
        "GPUs"]
    # No GPU visible yet (no driver): nothing to compare with.
    assert check(pool(mode="pgpu", vfio_passthrough=True, iommu=True, vfio_pci_ids=["10de:20b5"]), {"count": 0}) == []


@pytest.mark.parametrize("mode", ["mps", "timeslice", "vgpu"])
def test_rule_vfio_passthrough_is_a_whole_gpu_pool(mode):
    extra = {"mps": {"mps_replicas": 4}, "timeslice": {"timeslice_replicas": 4}, "vgpu": {"vgpu_backend": "hami"}}
    problems = check(pool(mode=mode, vfio_passthrough=True, iommu=True, **extra[mode]), gpus("h100-80gb"))
    assert problems == [
        f"gpu-01: accel_vfio_passthrough = true: VM passthrough on a pool with accel_mode {mode}: GPUs bound to "
        f"vfio-pci leave the host's driver, so nothing on the host can share them ({mode}); allowed: "
        "accel_vfio_passthrough with accel_mode pgpu (whole GPUs for VMs), or accel_vfio_passthrough: false"]


def test_rule_mig_left_on_for_a_whole_gpu_pool():
    assert check(pool(mode="pgpu"), gpus("a100-80gb")) == []
    problems = check(pool(mode="pgpu"), gpus("a100-80gb-mig"))
    assert len(problems) == 1 and "kube-accel turns off only MIG it turned on (no record of that here: " \
        "/etc/kube-accel/mig-geometry), so nothing would turn it off" in problems[0]
    planned = pool(mode="pgpu", mig_strategy="mixed", mig_geometry={"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2})
    assert check(planned, gpus("a100-80gb-mig")) == []


@pytest.mark.parametrize("mode", ["pgpu", "mps", "timeslice", "vgpu"])
def test_mig_kube_accel_turned_on_may_be_found_on_by_a_plan_without_mig(mode):
    """A geometry removed from the plan (or the pool switched away from MIG) finds MIG on; roles/mig's record
    says kube-accel turned it on, so the hosts play turns it off (roles/mig) and the plan is accepted. Without the
    record the same GPUs are refused: that MIG is someone else's."""
    extra = {"vgpu": {"vgpu_backend": "hami"}, "mps": {"mps_replicas": 4}, "timeslice": {"timeslice_replicas": 4},
             "pgpu": {}}[mode]
    facts = gpus("a100-80gb-mig")
    assert check(pool(mode=mode, **extra), facts) != []
    recorded = {**facts, "mig_record": "/etc/kube-accel/mig-geometry"}
    assert check(pool(mode=mode, **extra), recorded) == []


@pytest.mark.parametrize("version", ["1.30", "1.36", "v1.30.2"])
def test_rule_kubernetes_version_for_numa_ok(version):
    settings = pool(mode="pgpu", numa_policy="single-numa-node", kubernetes_version=version)
    assert check(settings, gpus("dual-socket-a100x8")) == []


def test_rule_kubernetes_version_for_numa_too_old():
    # kubelet_gpu passes --config-dir, which kubelet accepts by default only from 1.30 (1.28-1.29: alpha behind
    # the KubeletConfigDropInDir gate; older: unknown flag, kubelet does not start).
    for old in ("1.25", "1.29", "v1.29.9"):
        settings = pool(mode="pgpu", numa_policy="single-numa-node", kubernetes_version=old)
        assert check(settings) == [
            f"gpu-01: accel_kubernetes_version = {old!r}: accel_numa_policy 'single-numa-node' (NUMA-aligned GPUs "
            "through the kubelet Topology Manager) needs Kubernetes 1.30 or newer: kube-accel sets it in a "
            "kubelet --config-dir drop-in, a flag kubelet accepts by default only from 1.30; allowed: >= 1.30, "
            "or accel_numa_policy none"]
    assert check(pool(mode="pgpu", numa_policy="none", kubernetes_version="1.25")) == []
    # Older than the charts' floor (common.constants.MIN_KUBERNETES): refused whatever the NUMA policy.
    assert check(pool(mode="pgpu", numa_policy="none", kubernetes_version="1.24")) == [
        "gpu-01: accel_kubernetes_version = '1.24': older than every kube-accel chart accepts (kubeVersion >= 1.25): "
        "the run would fail at the first helm install, after the hosts changed; allowed: a version such as \"1.36\" "
        "or \"v1.36.3\", quoted, 1.25 or newer"]
    assert "not a Kubernetes version" in check(pool(mode="pgpu", numa_policy="restricted",
                                                    kubernetes_version="latest"))[0]




def test_every_problem_is_listed_at_once():
    settings = pool(mode="mps", mps_replicas=64, mig_strategy="mixed", numa_policy="restricted",
                    kubernetes_version="1.20", sriov_numvfs=4, vfio_passthrough=True)
    problems = check(settings, gpus("a100-80gb-mig"))
    fields = [p.split(" = ")[0].split(": ")[1] for p in problems]
    # Values first (each refused once, and left out of the rules: the NUMA rule says nothing about the version
    # already refused), then every rule's findings.
    assert fields == ["accel_kubernetes_version", "accel_mps_replicas", "accel_mode", "accel_mig_strategy",
                      "accel_sriov_numvfs", "accel_sriov_numvfs", "accel_vfio_passthrough", "accel_vfio_passthrough"]


@pytest.mark.parametrize("value", [1, 50, 100, 200, 300, 1000, "100", "25"])
def test_vcuda_core_valid(value):
    assert plan.vcuda_core_problems(value) == []






def test_filter_accel_plan_problems():
    """The filter takes the accel_plan action's entry for the host: its problems, the settings that passed, the names
    that failed (no rule repeats them) and their origins (named in the rules' messages)."""
    filters = FilterModule().filters()
    entry = {"problems": ["gpu-01: accel_iommu = 'y' (g.yml:2): the string 'y', not a boolean; allowed: true or false"],
             "settings": pool(mode="mps", mps_replicas=64), "invalid": ["accel_iommu"],
             "origins": {"accel_mps_replicas": "group_vars/pool_m.yml:3"}}
    assert filters["accel_plan_problems"](entry, HOST, gpus("a30")) == [
        entry["problems"][0],
        "gpu-01: accel_mps_replicas = 64 (group_vars/pool_m.yml:3): out of range; allowed: an integer 2..48"]
    # A rule about an invalid field says nothing more: the model's message is the one.
    entry = {"problems": ["gpu-01: accel_mode = 'x': ..."], "settings": {}, "invalid": ["accel_mode"]}
    assert filters["accel_plan_problems"](entry, HOST, gpus("a30")) == entry["problems"]
    assert filters["accel_vcuda_core_problems"](150)


def test_role_argument_spec_matches_the_variable_list():
    specs = yaml.safe_load((REPO / "roles/preflight/meta/argument_specs.yml").read_text())["argument_specs"]
    assert specs["inventory"]["options"] == accel_inventory.argument_spec()


def test_variable_list_covers_the_inventories():
    """Every accel_* name used in the example and lab inventories is a known variable."""
    used = set()
    for path in (REPO / "inventories").glob("*/group_vars/*.yml"):
        if path.parts[-3] in ("example", "lab"):
            used |= {k for k in (yaml.safe_load(path.read_text()) or {}) if k.startswith("accel_")}
    assert used and used <= set(accel_inventory.VARIABLES)
    for name, entry in accel_inventory.VARIABLES.items():
        assert entry["scope"] in ("cluster", "pool", "lab") and entry["description"], name


def test_role_readme_points_at_the_one_variable_table():
    readme = (REPO / "roles/preflight/README.md").read_text()
    assert "(../../docs/inventory.md#variables)" in readme
    assert "<!-- variables-table -->" not in readme  # one table, in docs/inventory.md (tests/unit/test_readme.py)


def test_rule_hami_settings():
    good = pool(mode="vgpu", vgpu_backend="hami", vgpu_split_count=10, vgpu_memory_scaling=1.5, vgpu_core_scaling=1)
    assert check(good, gpus("h100-80gb")) == []
    bad = pool(mode="vgpu", vgpu_backend="hami", vgpu_split_count=0, vgpu_memory_scaling=-1, vgpu_core_scaling="x")
    assert check(bad, gpus("h100-80gb")) == [
        "gpu-01: accel_vgpu_split_count = 0: out of range; allowed: an integer 1..100",
        "gpu-01: accel_vgpu_memory_scaling = -1: out of range; allowed: a number above 0 and at most 10",
        "gpu-01: accel_vgpu_core_scaling = 'x': the string 'x', not a number; allowed: a number above 0 and at most "
        "10"]


def test_rule_mig_owner_operator_needs_the_operator():
    settings = pool(mode="pgpu", mig_strategy="mixed", mig_geometry={"1g.10gb": 7}, gpu_operator_enabled=False)
    assert check({**settings, "accel_mig_owner": "host"}, gpus("a100-80gb")) == []
    assert check({**settings, "accel_gpu_operator_enabled": True}, gpus("a100-80gb")) == []
    assert check(settings, gpus("a100-80gb")) == [
        "gpu-01: accel_mig_owner = 'operator': the GPU Operator's mig-manager applies the geometry, but "
        "accel_gpu_operator_enabled is false; allowed: accel_mig_owner: host, or accel_gpu_operator_enabled: true"]


@pytest.mark.parametrize(("branch", "refused"), [("550-server", True), ("525", True), ("520", False),
                                                 ("470-open", True), (470, False), ("latest", True)])
def test_rule_gpu_manager_planned_branch_forms(branch, refused):
    problems = check(pool(mode="vgpu", vgpu_backend="gpu-manager", driver_branch=branch), {"count": 0})
    assert bool(problems) is refused, problems


def test_rule_mig_driver_minimum():
    old_driver = copy.deepcopy(gpus("h100-80gb"))
    old_driver["driver_version"] = "520.61.05"  # stand-in for a host still on a pre-H100-MIG driver
    settings = pool(mode="pgpu", mig_strategy="single", mig_geometry={"7g.80gb": 1})
    assert check(settings, old_driver) == [
        "gpu-01: accel_mig_geometry: MIG on H100-80GB needs driver 525.85.12 or newer, but the installed driver "
        "520.61.05 is older; allowed: accel_driver_branch 525 or newer"]
    assert check({**settings, "accel_driver_branch": "550"}, old_driver) == []
    assert "the planned driver branch 470 is older" in check({**settings, "accel_driver_branch": "470"}, old_driver)[0]




# --- plan validation gaps: names, cluster settings, driver branch per GPU, pools across groups ------


@pytest.mark.parametrize(("value", "what"), [
    ("Pool A", "not an RFC 1123 label"), ("-train", "not an RFC 1123 label"), ("train_", "not an RFC 1123 label"),
    ("Train", "not an RFC 1123 label"), ("p" * 64, "64 characters, longer than 63"), ("", "empty"),
    (7, "the number 7, not a string"),
    ("p" * 46, "the verify Job name 'kube-accel-verify-" + "p" * 46 + "' it derives is 64 characters, longer than 63")])
def test_pool_names_usable_in_every_derived_name(value, what):
    problems = check(pool(pool=value, mode="pgpu"), gpus("t4"))
    assert len(problems) == 1 and problems[0].startswith("gpu-01: accel_pool = ") and f": {what}" in problems[0]
    assert problems[0].endswith("(it is part of the names kube-accel-verify-<pool>)")
    assert check(pool(pool="p" * 45, mode="pgpu"), gpus("t4")) == []


def test_names_namespaces_secrets_and_label_maps():
    settings = pool(pool="p", mode="pgpu", namespace="Kube_Accel", monitoring_dashboards_namespace="",
                    monitoring_hpa_adapter_namespace="monitoring.", image_pull_secrets=["regcred", "Reg Cred"],
                    gpu_operator_service_monitor_labels={"release": "kube-prometheus-stack", "bad key/x/y": "ok"},
                    monitoring_rule_labels={"team": "gpu ops"})
    problems = check(settings, gpus("t4"))
    assert sorted(p.split(";")[0] for p in problems) == sorted([
        "gpu-01: accel_namespace = 'Kube_Accel': not an RFC 1123 label: not a namespace name",
        "gpu-01: accel_monitoring_hpa_adapter_namespace = 'monitoring.': not an RFC 1123 label: not a namespace name",
        "gpu-01: accel_image_pull_secrets = ['regcred', 'Reg Cred']: element 'Reg Cred': not an RFC 1123 label: not a "
        "Secret name the charts accept",
        "gpu-01: accel_gpu_operator_service_monitor_labels = {'bad key/x/y': 'ok', 'release': "
        "'kube-prometheus-stack'}: key 'bad key/x/y': prefix 'bad key/x': not an RFC 1123 subdomain",
        "gpu-01: accel_monitoring_rule_labels = {'team': 'gpu ops'}: value 'gpu ops' of 'team': not a valid label "
        "value"])
    assert all("; allowed: " in p for p in problems)


@pytest.mark.parametrize(("name", "value", "what"), [
    ("accel_image_registry", "https://mirror.example.com", "not a registry prefix"),
    ("accel_image_registry", "mirror.example.com/", "not a registry prefix"),
    ("accel_image_registry", "mirror.example.com/nvidia:v1", "not a registry prefix"),
    ("accel_reboot_serial", 0, "0 is not a host count >= 1"),
    ("accel_reboot_serial", "150%", "'150%' is not a percentage 1..100"),
    ("accel_reboot_serial", "a few", "the string 'a few', neither a host count nor a percentage"),
    ("accel_reboot_serial", [1, "ten"], "the string 'ten', neither a host count nor a percentage"),
    ("accel_reboot_serial", "3", "the string '3': write 3 without quotes for a host count"),
    ("accel_reboot_serial", [], "an empty list"),
    ("accel_reboot_serial", [[1, 2]], "neither a host count nor a percentage"),  # Ansible's serial is one list deep
    ("accel_rollout_max_unavailable", 0, "0 is not a node count >= 1"),
    ("accel_rollout_max_unavailable", "5", "the string '5': write 5 without quotes for a node count"),
    ("accel_rollout_max_unavailable", ["10%"], "one node count or percentage"),
    ("accel_reboot_max_fail_percentage", "half", "the string 'half', not an integer"),
    ("accel_reboot_max_fail_percentage", 101, "out of range"),
    ("accel_run_lock_wait", -1, "out of range"),
    ("accel_run_lock_wait", "1m", "the string '1m', not an integer"),
    ("accel_run_lock_wait", "30", "the string '30', not an integer: write 30 without quotes"),
    ("accel_gpu_operator_chart_version", "latest", "not a chart version"),
    ("accel_gpu_operator_chart_version", "26.7", "not a chart version"),
    ("accel_gpu_operator_chart", "http://helm.ngc.nvidia.com/nvidia", "plain http"),
    ("accel_kubernetes_version", "136", "not a Kubernetes version"),
    ("accel_kubernetes_version", 1.3, "the number 1.3, not a string"),
    ("accel_control_plane_cidrs", ["10.0.0.10/24"], "element '10.0.0.10/24': not a network in CIDR notation"),
    ("accel_control_plane_cidrs", ["cp-01"], "element 'cp-01': not a network in CIDR notation"),
    ("accel_control_plane_cidrs", ["10.0.0.10"], "element '10.0.0.10': no prefix length"),
    ("accel_control_plane_cidrs", "10.0.0.0/24", "not a list")])
def test_cluster_settings_refused(name, value, what):
    problems = check({**pool(pool="p", mode="pgpu"), name: value}, gpus("t4"))
    assert len(problems) == 1 and problems[0].startswith(f"gpu-01: {name} = ") and what in problems[0], problems
    assert "; allowed: " in problems[0]


@pytest.mark.parametrize(("name", "value"), [
    ("accel_image_registry", ""), ("accel_image_registry", "registry.example.com:5000/mirror/nvidia"),
    ("accel_image_registry", "localhost:5000"), ("accel_reboot_serial", 1), ("accel_reboot_serial", "20%"),
    ("accel_reboot_serial", [1, "25%", "100%"]), ("accel_reboot_max_fail_percentage", 0),
    ("accel_run_lock_wait", 30), ("accel_gpu_operator_chart_version", "v26.7.0"),
    ("accel_gpu_operator_chart_version", "1.2.3-rc.1+build.5"), ("accel_kubernetes_version", "v1.36.3"),
    ("accel_gpu_operator_chart", "oci://registry.example.com/charts"), ("accel_gpu_operator_chart", "/srv/charts/op"),
    ("accel_control_plane_cidrs", ["10.0.0.10/32", "fd00::/64"])])
def test_cluster_settings_accepted(name, value):
    assert check({**pool(pool="p", mode="pgpu"), name: value}, gpus("t4")) == []


def test_rule_driver_branch_older_than_the_gpu():
    # H100: the published minimum (MIG User Guide table) decides; T4 (no such entry): its compute capability 7.5.
    assert check(pool(pool="p", mode="pgpu", driver_branch="515"), gpus("h100-80gb")) == [
        "gpu-01: accel_driver_branch = '515': older than GPU 0 (NVIDIA H100 80GB HBM3) supports: H100-80GB needs "
        "driver 525.85.12; allowed: accel_driver_branch 525 or newer"]
    assert check(pool(pool="p", mode="pgpu", driver_branch="525"), gpus("h100-80gb")) == []
    turing = check(pool(pool="p", mode="pgpu", driver_branch="390"), gpus("t4"))
    assert turing == ["gpu-01: accel_driver_branch = '390': older than GPU 0 (Tesla T4) supports: compute capability "
                      "7.5 needs a CUDA that knows it, driver branch 410 or newer; allowed: accel_driver_branch 410 or "
                      "newer"]
    # Eight GPUs of one model are reported once; a passthrough host runs no host driver.
    assert len(check(pool(pool="p", mode="pgpu", driver_branch="418"), gpus("dual-socket-a100x8"))) == 1
    assert check(pool(pool="vm", mode="pgpu", driver_branch="390", vfio_passthrough=True), gpus("h100-80gb")) == []
    # A MIG pool's minimum is reported once, by the MIG rule.
    mig = check(pool(pool="m", mode="pgpu", driver_branch="440", mig_strategy="mixed", mig_geometry={"1g.10gb": 7}),
                gpus("a100-80gb"))
    assert len(mig) == 1 and "MIG on A100-80GB needs driver 450.80.02" in mig[0]




def test_rule_fabric_manager_on_an_nvswitch_system():
    """The recorded HGX H100 shape (tests/data/nvml/hgx-h100x8.json) needs a branch NVIDIA publishes Fabric Manager
    for; the same branch on a PCIe host without NVSwitch is fine."""
    hgx = gpus("hgx-h100x8")
    assert check(pool(mode="pgpu", driver_branch="550"), hgx) == []
    assert check(pool(mode="pgpu", driver_branch="580"), hgx) == []
    assert check(pool(mode="pgpu", driver_branch="540"), hgx) == [
        "gpu-01: accel_driver_branch = '540': the GPUs sit on an NVSwitch fabric (GPU 0: 18 NVLinks to an NVSwitch, "
        "and 7 more) and need NVIDIA Fabric Manager of the driver's version, which NVIDIA publishes for no 540 branch; "
        "allowed: a branch with a Fabric Manager: 450, 455, 460, 465, 470, 495, 510, 515, 520, 525, 530, "
        "535, 545, 550, 555, 560, 565, 570, 575, 580, 590, 595"]
    assert check(pool(mode="pgpu", driver_branch="540"), gpus("h100-80gb")) == []
    # Passthrough hosts run no host driver: Fabric Manager is the VM's (or the hypervisor's) business.
    assert check(pool(mode="pgpu", driver_branch="540", iommu=True, vfio_passthrough=True), hgx) == []


def test_rule_driver_flavor():
    b200 = {"count": 1, "gpus": [{"index": 0, "name": "NVIDIA B200", "compute_capability": "10.0"}]}
    v100 = {"count": 1, "gpus": [{"index": 0, "name": "Tesla V100-SXM2-32GB", "compute_capability": "7.0"}]}
    assert check(pool(mode="pgpu", driver_branch="570", driver_flavor="open"), b200) == []
    assert check(pool(mode="pgpu", driver_branch="570"), b200) == []  # unset: the role picks open
    assert check(pool(mode="pgpu", driver_branch="570", driver_flavor="proprietary"), b200) == [
        "gpu-01: accel_driver_flavor = 'proprietary': GPU 0 (NVIDIA B200): NVIDIA B200 (compute capability 10.0, "
        "Blackwell or newer) runs only with NVIDIA's open kernel modules; allowed: open, or leave it unset"]
    assert check(pool(mode="pgpu", driver_flavor="open"), gpus("t4")) == []  # Turing
    assert check(pool(mode="pgpu", driver_flavor="open"), v100) == [
        "gpu-01: accel_driver_flavor = 'open': GPU 0 (Tesla V100-SXM2-32GB) (compute capability 7.0) is older than "
        "Turing; NVIDIA's open kernel modules do not drive it; allowed: proprietary, or leave it unset"]


@pytest.mark.parametrize(("branch", "extra", "what"), [
    ("525", {}, None), ("580", {}, None), (580, {}, None),
    ("470", {}, "HAMi pools run on CUDA 12 and newer drivers (branch 525+)"),
    ("590", {}, "newer than the newest branch HAMi-core's limits were written and verified for (580, CUDA 13.0)"),
    ("590", {"accel_vgpu_hami_unverified_driver": True}, None)])
def test_rule_hami_driver_range(branch, extra, what):
    """A HAMi pool promises its limits on CUDA 12+ drivers up to the newest branch HAMi-core was verified on
    (docs/modes/vgpu.md "What a HAMi pool promises"); beyond, only with an explicit acknowledgement."""
    problems = check({**pool(mode="vgpu", vgpu_backend="hami", driver_branch=branch), **extra}, {"count": 0})
    if what is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problems[0].startswith("gpu-01: accel_driver_branch = ") and what in problems[0]
    # gpu-manager pools are not HAMi's: their own rule decides.
    assert not [p for p in check(pool(mode="vgpu", vgpu_backend="gpu-manager", driver_branch="470"), {"count": 0})
                if "HAMi" in p]


@pytest.mark.parametrize("dist", ["k3s", "rke2"])
def test_what_k3s_and_rke2_do_not_support_is_refused(dist):
    """GPU-Manager cannot talk to their containerd 2.x (docs/modes/vgpu.md); NUMA pools are served there (kubelet_gpu
    writes into the --config-dir their service passes the kubelet), above the same Kubernetes floor as on kubeadm."""
    assert check(pool(mode="pgpu", kubernetes_distribution=dist), gpus("a100-80gb")) == []
    numa = check(pool(mode="pgpu", numa_policy="single-numa-node", kubernetes_distribution=dist),
                 gpus("dual-socket-a100x8"))
    assert numa == []
    old = check(pool(mode="pgpu", numa_policy="single-numa-node", kubernetes_distribution=dist,
                     kubernetes_version="1.29"), gpus("dual-socket-a100x8"))
    assert len(old) == 1 and "accel_numa_policy" in old[0] and "1.30" in old[0], old
    gm = check(pool(mode="vgpu", vgpu_backend="gpu-manager", kubernetes_distribution=dist, driver_branch="470"),
               gpus("t4"))
    assert any(p.startswith(f"gpu-01: accel_vgpu_backend = 'gpu-manager': {dist} runs containerd 2.x") for p in gm), gm

