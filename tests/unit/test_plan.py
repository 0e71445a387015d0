"""Plan rules, each positive and negative, on GPU facts gathered from the recorded snapshots in tests/data/nvml
(composed from published device data, not recorded on a GPU here)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from ansible_collections.kube_accel.gpu.plugins.filter.accel_plan_filters import FilterModule
from ansible_collections.kube_accel.gpu.plugins.module_utils import accel_gpu_facts, accel_inventory
from ansible_collections.kube_accel.gpu.plugins.module_utils import accel_plan as plan

REPO = Path(__file__).resolve().parents[2]
SNAPSHOTS = REPO / "tests" / "data" / "nvml"
HOST = "gpu-01"


def gpus(name):
    return accel_gpu_facts.gather(accel_gpu_facts.RecordedSource.from_file(str(SNAPSHOTS / f"{name}.json")))


def check(settings, facts=None, pools=None):
    return plan.host_problems(HOST, settings, facts or {}, pools)


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
                                     vfio_pci_ids=["10de:20b5", "10DE:1AEF"]), "t4"),
    ("vfio with IOMMU already on", pool(pool="vm", mode="pgpu", vfio_passthrough=True), "h100-80gb"),
    ("SR-IOV within totalvfs", pool(pool="s", mode="pgpu", sriov_numvfs=16), "a30"),
]


@pytest.mark.parametrize(("title", "settings", "snapshot"), GOOD, ids=[g[0] for g in GOOD])
def test_good_plans_have_no_problems(title, settings, snapshot):
    assert check(settings, gpus(snapshot), [{"group": "pool_x", "vars": {"accel_mode": settings["accel_mode"]}}]) == []


def test_rule_mode():
    assert check(pool(mode="pgpu")) == []
    assert check(pool(mode="mig")) == [
        "gpu-01: accel_mode = 'mig': not a kube-accel mode; allowed: vgpu, pgpu, mps, timeslice (MIG slices are "
        "mode pgpu with accel_mig_geometry)"]
    missing = {k: v for k, v in pool().items() if k != "accel_mode"}
    assert check(missing) == [
        "gpu-01: accel_mode = (not set): not set for this GPU host; allowed: vgpu, pgpu, mps, timeslice (MIG "
        "slices are mode pgpu with accel_mig_geometry)"]


def test_rule_one_pool_per_host():
    settings = pool(mode="pgpu")
    assert check(settings, pools=[{"group": "pool_a", "vars": {"accel_mode": "pgpu"}}]) == []
    assert check(settings, pools=None) == []  # membership unknown
    two_modes = [{"group": "pool_a", "vars": {"accel_mode": "vgpu"}},
                 {"group": "pool_b", "vars": {"accel_mode": "pgpu"}}]
    assert check(settings, pools=two_modes) == [
        "gpu-01: group_names = ['pool_a', 'pool_b']: different modes on one host: pool_a (accel_mode=vgpu), "
        "pool_b (accel_mode=pgpu); allowed: exactly one pool group under gpu_pools, so one mode per host"]
    same = [{"group": "pool_a", "vars": {"accel_mode": "pgpu"}}, {"group": "pool_b", "vars": {}}]
    assert "one host in two pools" in check(settings, pools=same)[0]
    assert check(settings, pools=[]) == [
        "gpu-01: group_names: the host is in gpu_pools but in none of its pool groups; allowed: exactly one pool "
        "group under gpu_pools"]


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
    # Issue 14.5: gpu-manager v1.1.5 speaks CRI v1alpha2 only and reads the cgroup v1 memory hierarchy.
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
        "pending=True); allowed: accel_mode pgpu for MIG; vgpu, mps and timeslice need GPUs with MIG disabled (no "
        "accel_mig_geometry, accel_mig_strategy none)"]
    pending = gpus("a100-80gb")
    pending["gpus"][0]["mig_mode_pending"] = True  # MIG switched on, waiting for a GPU reset
    assert "has MIG enabled (current=False, pending=True)" in check(pool(mode=mode, **extra), pending)[0]
    planned = check(pool(mode=mode, mig_geometry={"1g.10gb": 7}, **extra), gpus("a100-80gb"))
    assert planned == [
        f"gpu-01: accel_mig_geometry = {{'1g.10gb': 7}}: a MIG plan on a pool with accel_mode {mode}; allowed: "
        "accel_mode pgpu for MIG; vgpu, mps and timeslice need GPUs with MIG disabled (no accel_mig_geometry, "
        "accel_mig_strategy none)"]
    strategy = check(pool(mode=mode, mig_strategy="single", **extra), gpus("a100-80gb"))
    assert len(strategy) == 1 and strategy[0].startswith("gpu-01: accel_mig_strategy = 'single': a MIG plan")
    assert check(pool(mode=mode, mig_strategy="none", **extra), gpus("a100-80gb")) == []


@pytest.mark.parametrize("replicas", [2, 4, 48, "10"])
def test_rule_mps_replicas_in_range(replicas):
    assert check(pool(mode="mps", mps_replicas=replicas), gpus("a30")) == []


@pytest.mark.parametrize("replicas", [1, 0, 49, 64, -2, "1"])
def test_rule_mps_replicas_out_of_range(replicas):
    assert check(pool(mode="mps", mps_replicas=replicas), gpus("a30")) == [
        f"gpu-01: accel_mps_replicas = {replicas!r}: out of range; allowed: an integer 2..48 (MPS clients per GPU)"]


@pytest.mark.parametrize("replicas", ["many", 2.5, True, None, ""])
def test_rule_mps_replicas_not_an_integer(replicas):
    # A string or a float where an integer is due is named for what it is, not as "out of range".
    assert check(pool(mode="mps", mps_replicas=replicas), gpus("a30")) == [
        f"gpu-01: accel_mps_replicas = {replicas!r}: not an integer; allowed: an integer 2..48 (MPS clients per GPU)"]


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


def test_rule_mps_clients_limited_by_compute_capability():
    # nvidia-cuda-mps-control(1): 16 clients per GPU on SM 3.5-6.0, 48 on SM 7.0 (Volta); one table in accel_plan.
    volta = copy.deepcopy(gpus("t4"))
    volta["gpus"][0].update(name="Tesla V100-PCIE-16GB", compute_capability="7.0")
    assert check(pool(mode="mps", mps_replicas=48), volta) == []
    assert check(pool(mode="mps", mps_replicas=48), gpus("t4")) == []  # Turing, 7.5
    assert plan.mps_max_clients((7, 0)) == plan.mps_max_clients((9, 0)) == accel_inventory.MPS_MAX_REPLICAS == 48
    assert plan.mps_max_clients((6, 1)) is None
    assert check(pool(mode="mps", mps_replicas=49), volta) == [
        "gpu-01: accel_mps_replicas = 49: out of range; allowed: an integer 2..48 (MPS clients per GPU)"]


@pytest.mark.parametrize("replicas", [2, 8, 64, "16"])
def test_rule_timeslice_replicas_in_range(replicas):
    assert check(pool(mode="timeslice", timeslice_replicas=replicas), gpus("t4")) == []


@pytest.mark.parametrize(("replicas", "what"), [(1, "out of range"), (0, "out of range"), (65, "out of range"),
                                               (-4, "out of range"), ("many", "not an integer"),
                                               (2.5, "not an integer"), (True, "not an integer"),
                                               (None, "not an integer")])
def test_rule_timeslice_replicas_out_of_range(replicas, what):
    assert check(pool(mode="timeslice", timeslice_replicas=replicas), gpus("t4")) == [
        f"gpu-01: accel_timeslice_replicas = {replicas!r}: {what}; allowed: an integer 2..64 (pods sharing one "
        "GPU in turns)"]


def test_rule_timeslice_replicas_required():
    assert check(pool(mode="timeslice"), gpus("t4")) == [
        "gpu-01: accel_timeslice_replicas = (not set): required with accel_mode timeslice; allowed: an integer 2..64 "
        "(pods sharing one GPU in turns)"]


def test_rule_timeslice_switches_are_booleans():
    assert check(pool(mode="timeslice", timeslice_replicas=4, timeslice_rename_by_default="yes"), gpus("t4")) == []
    assert check(pool(mode="timeslice", timeslice_replicas=4, timeslice_fail_requests_greater_than_one="maybe"),
                 gpus("t4")) == [
        "gpu-01: accel_timeslice_fail_requests_greater_than_one = 'maybe': not a boolean; allowed: true or false"]


@pytest.mark.parametrize("mode", ["mps", "pgpu", "vgpu"])
def test_rule_timeslice_settings_only_on_timeslice_pools(mode):
    # Never together with MPS (its daemon owns the GPU) nor MIG (a pgpu pool): one sharing mechanism per GPU.
    extra = {"mps": {"mps_replicas": 4}, "pgpu": {}, "vgpu": {"vgpu_backend": "hami"}}[mode]
    problems = check(pool(mode=mode, timeslice_replicas=4, timeslice_rename_by_default=False, **extra),
                     gpus("a30"))
    assert problems == [
        f"gpu-01: {name} = {value!r}: a time-slicing setting on a pool with accel_mode {mode}; allowed: "
        "accel_timeslice_* only with accel_mode timeslice (one sharing mechanism per GPU: time-slicing is never "
        "combined with MPS or MIG)" for name, value in (("accel_timeslice_replicas", 4),
                                                        ("accel_timeslice_rename_by_default", False))]


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
    assert check(pool(mode="pgpu", sriov_numvfs=4), gpus("t4")) == [
        "gpu-01: accel_sriov_numvfs = 4: GPU 0 (Tesla T4) is not SR-IOV capable (sriov_totalvfs 0); allowed: 0..0"]
    assert check(pool(mode="pgpu", sriov_numvfs=-1)) == [
        "gpu-01: accel_sriov_numvfs = -1: out of range; allowed: an integer >= 0 (0 disables SR-IOV)"]
    assert check(pool(mode="pgpu", sriov_numvfs="four")) == [
        "gpu-01: accel_sriov_numvfs = 'four': not an integer; allowed: an integer >= 0 (0 disables SR-IOV)"]


def test_rule_vfio_needs_iommu():
    no_iommu = gpus("t4")
    assert check(pool(mode="pgpu", vfio_passthrough=True, iommu=True), no_iommu) == []
    assert check(pool(mode="pgpu", vfio_passthrough=True), gpus("h100-80gb")) == []  # IOMMU already on
    assert check(pool(mode="pgpu", vfio_passthrough=True), no_iommu) == [
        "gpu-01: accel_vfio_passthrough = True: vfio-pci passthrough needs the IOMMU, which is neither enabled on "
        "this host (no /sys/kernel/iommu_groups) nor planned (accel_iommu is false); allowed: accel_iommu: true "
        "with accel_vfio_passthrough, or accel_vfio_passthrough: false"]
    bad_ids = check(pool(mode="pgpu", vfio_passthrough=True, iommu=True, vfio_pci_ids=["10de:20b5", "10de20b5"]))
    assert bad_ids == ["gpu-01: accel_vfio_pci_ids = '10de20b5': not a PCI vendor:device ID; allowed: 4 hex digits, "
                       "a colon, 4 hex digits, e.g. \"10de:20b5\""]


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
    # Older than the charts' floor (accel_constants.MIN_KUBERNETES): refused whatever the NUMA policy.
    assert check(pool(mode="pgpu", numa_policy="none", kubernetes_version="1.24")) == [
        "gpu-01: accel_kubernetes_version = '1.24': older than every kube-accel chart accepts (kubeVersion >= 1.25): "
        "the run would fail at the first helm install, after the hosts changed; allowed: 1.25 or newer"]
    assert "not a version" in check(pool(mode="pgpu", numa_policy="restricted", kubernetes_version="latest"))[0]


def test_rule_unknown_variables_with_did_you_mean():
    settings = {**pool(mode="mps", mps_replicas=4), "accel_mps_replica": 4}
    assert check(settings, gpus("a30")) == [
        "gpu-01: accel_mps_replica = 4: unknown variable (did you mean accel_mps_replicas?); allowed: the variables "
        "of kube-accel's inventory model (README)"]
    unprefixed = [{"group": "pool_m", "vars": {"accel_mode": "mps", "mps_replicas": 4, "ntp_server": "x"}}]
    problems = check(pool(mode="mps", mps_replicas=4), gpus("a30"), unprefixed)
    assert problems == [
        "gpu-01: mps_replicas = 4: unknown variable in pool group pool_m (did you mean accel_mps_replicas?); "
        "allowed: the variables of kube-accel's inventory model (README)"]
    assert check({**pool(mode="pgpu"), "accel_zzz": 1})[0].startswith("gpu-01: accel_zzz = 1: unknown variable;")
    # A fact the host roles set on an earlier run is not a typo.
    assert check({**pool(mode="pgpu"), "accel_reboot_required": ["kernel args"]}) == []


def test_every_problem_is_listed_at_once():
    settings = {**pool(mode="mps", mps_replicas=64, mig_strategy="mixed", numa_policy="restricted",
                       kubernetes_version="1.20", sriov_numvfs=4, vfio_passthrough=True), "accel_modee": "x"}
    problems = check(settings, gpus("a100-80gb-mig"))
    fields = [p.split(" = ")[0].split(": ")[1] for p in problems]
    assert fields == ["accel_modee", "accel_mode", "accel_mig_strategy", "accel_mps_replicas", "accel_sriov_numvfs",
                      "accel_vfio_passthrough", "accel_kubernetes_version", "accel_kubernetes_version"]


@pytest.mark.parametrize("value", [1, 50, 100, 200, 300, 1000, "100", "25"])
def test_vcuda_core_valid(value):
    assert plan.vcuda_core_problems(value) == []


@pytest.mark.parametrize("value", [0, -100, 101, 150, 250, "abc", 1.5, None])
def test_vcuda_core_invalid(value):
    assert plan.vcuda_core_problems(value, "pod x: tencent.com/vcuda-core") == [
        f"pod x: tencent.com/vcuda-core = {value!r}: not a valid vcuda-core request; allowed: 1..100 (a share of "
        "one GPU) or a multiple of 100 (whole GPUs)"]


def test_pool_memberships_from_inventory_export():
    export = {
        "all": {"children": ["gpu_pools", "rack1"]},
        "gpu_pools": {"children": ["pool_a", "pool_b"], "vars": {"accel_iommu": False}},
        "pool_a": {"hosts": ["h1"], "vars": {"accel_mode": "vgpu"}},
        "pool_b": {"children": ["pool_b_big"], "vars": {"accel_mode": "pgpu"}},
        "pool_b_big": {"hosts": ["h1", "h2"]},
        "rack1": {"hosts": ["h1"], "vars": {"accel_mode": "mps"}},
    }
    assert plan.pool_memberships(export, "h2") == [{"group": "pool_b", "vars": {"accel_mode": "pgpu"}}]
    assert [p["group"] for p in plan.pool_memberships(export, "h1")] == ["pool_a", "pool_b"]
    assert plan.pool_memberships(export, "h3") == []


def test_merge_spec_errors_skips_fields_already_reported():
    problems = ["gpu-01: accel_mode = 'mig': not a kube-accel mode; allowed: vgpu, pgpu, mps"]
    errors = ["value of accel_mode must be one of: vgpu, pgpu, mps, got: mig",
              "value of accel_vgpu_scheduler_policy must be one of: binpack, spread, got: fastest",
              "accel_numa_polcy. Supported parameters include: accel_mode, accel_pool"]
    assert plan.merge_spec_errors("gpu-01", problems, errors) == problems + [
        "gpu-01: value of accel_vgpu_scheduler_policy must be one of: binpack, spread, got: fastest"]
    assert plan.merge_spec_errors("gpu-01", problems, errors[:1]) == problems


def test_filter_accel_plan_problems():
    filters = FilterModule().filters()
    export = {"gpu_pools": {"children": ["pool_m"]}, "pool_m": {"hosts": [HOST], "vars": {"accel_mode": "mps"}}}
    problems = filters["accel_plan_problems"](pool(mode="mps", mps_replicas=1), HOST, gpus("a30"), export,
                                               ["value of accel_iommu must be a bool"])
    assert problems == [
        "gpu-01: accel_mps_replicas = 1: out of range; allowed: an integer 2..48 (MPS clients per GPU)",
        "gpu-01: value of accel_iommu must be a bool"]
    assert filters["accel_vcuda_core_problems"](150)
    assert filters["accel_pool_memberships"](export, HOST)[0]["group"] == "pool_m"


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


def test_role_readme_lists_every_variable():
    readme = (REPO / "roles/preflight/README.md").read_text()
    assert accel_inventory.variables_markdown() in readme


def test_rule_hami_settings():
    good = pool(mode="vgpu", vgpu_backend="hami", vgpu_split_count=10, vgpu_memory_scaling=1.5, vgpu_core_scaling=1)
    assert check(good, gpus("h100-80gb")) == []
    bad = pool(mode="vgpu", vgpu_backend="hami", vgpu_split_count=0, vgpu_memory_scaling=-1, vgpu_core_scaling="x")
    assert check(bad, gpus("h100-80gb")) == [
        "gpu-01: accel_vgpu_split_count = 0: out of range; allowed: an integer >= 1 (tasks sharing one GPU)",
        "gpu-01: accel_vgpu_memory_scaling = -1: not a positive factor; allowed: a number > 0 (1.0 = no "
        "oversubscription)",
        "gpu-01: accel_vgpu_core_scaling = 'x': not a positive factor; allowed: a number > 0 (1.0 = no "
        "oversubscription)"]


def test_rule_mig_owner_operator_needs_the_operator():
    settings = pool(mode="pgpu", mig_strategy="mixed", mig_geometry={"1g.10gb": 7}, gpu_operator_enabled=False)
    assert check({**settings, "accel_mig_owner": "host"}, gpus("a100-80gb")) == []
    assert check({**settings, "accel_gpu_operator_enabled": True}, gpus("a100-80gb")) == []
    assert check(settings, gpus("a100-80gb")) == [
        "gpu-01: accel_mig_owner = 'operator': the GPU Operator's mig-manager applies the geometry, but "
        "accel_gpu_operator_enabled is false; allowed: accel_mig_owner: host, or accel_gpu_operator_enabled: true"]


@pytest.mark.parametrize(("branch", "refused"), [("550-server", True), ("525", True), ("520", False),
                                                 ("470-open", False), (470, False), ("latest", False)])
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


def test_rule_control_plane_cidrs():
    assert check(pool(mode="pgpu", control_plane_cidrs=["10.0.0.10/32", "fd00::/64"])) == []
    assert check(pool(mode="pgpu", control_plane_cidrs=["10.0.0.10/24", "cp-01"])) == [
        "gpu-01: accel_control_plane_cidrs = ['10.0.0.10/24', 'cp-01']: ['10.0.0.10/24', 'cp-01'] not network "
        "addresses in CIDR notation; allowed: CIDRs such as \"10.0.0.10/32\" or \"10.0.0.0/24\" (no host bits set)"]


# --- plan validation gaps (issue 16.6): names, cluster settings, driver branch per GPU, pools across groups ------


@pytest.mark.parametrize(("value", "what"), [
    ("Pool A", "not a valid label value"), ("-train", "not a valid label value"), ("train_", "not a valid label value"),
    ("p" * 64, "64 characters, longer than 63"), ("", "empty"), (7, "not a string")])
def test_rule_names_pool_is_a_label_value(value, what):
    assert check(pool(pool=value, mode="pgpu"), gpus("t4")) == [
        f"gpu-01: accel_pool = {value!r}: {what}: it becomes the kube-accel.io/pool label and taint value; allowed: "
        "at most 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit (Kubernetes label "
        "value)"]


def test_rule_names_namespaces_secrets_and_label_maps():
    settings = pool(pool="p", mode="pgpu", namespace="Kube_Accel", monitoring_dashboards_namespace="",
                    monitoring_hpa_adapter_namespace="monitoring.", image_pull_secrets=["regcred", "Reg Cred"],
                    gpu_operator_service_monitor_labels={"release": "kube-prometheus-stack", "bad key/x/y": "ok"},
                    monitoring_rule_labels={"team": "gpu ops"})
    problems = check(settings, gpus("t4"))
    assert [p.split(";")[0] for p in problems] == [
        "gpu-01: accel_namespace = 'Kube_Accel': not an RFC 1123 label: not a namespace name",
        "gpu-01: accel_monitoring_hpa_adapter_namespace = 'monitoring.': not an RFC 1123 label: not a namespace name",
        "gpu-01: accel_image_pull_secrets = 'Reg Cred': not an RFC 1123 subdomain: not a Secret name",
        "gpu-01: accel_gpu_operator_service_monitor_labels = {'release': 'kube-prometheus-stack', 'bad key/x/y': "
        "'ok'}: key 'bad key/x/y': prefix 'bad key/x': not an RFC 1123 subdomain",
        "gpu-01: accel_monitoring_rule_labels = {'team': 'gpu ops'}: value 'gpu ops' of 'team': not a valid label "
        "value"]
    assert all("; allowed: " in p for p in problems)


@pytest.mark.parametrize(("name", "value", "what"), [
    ("accel_image_registry", "https://mirror.example.com", "not a registry prefix"),
    ("accel_image_registry", "mirror.example.com/", "not a registry prefix"),
    ("accel_image_registry", "mirror.example.com/nvidia:v1", "not a registry prefix"),
    ("accel_reboot_serial", 0, "0 is not a host count >= 1"),
    ("accel_reboot_serial", "150%", "'150%' is not a percentage 1..100"),
    ("accel_reboot_serial", "a few", "'a few' is neither a host count nor a percentage"),
    ("accel_reboot_serial", [1, "ten"], "'ten' is neither a host count nor a percentage"),
    ("accel_reboot_max_fail_percentage", "half", "not an integer"),
    ("accel_reboot_max_fail_percentage", 101, "out of range"),
    ("accel_run_lock_wait", -1, "out of range"),
    ("accel_run_lock_wait", "1m", "not an integer"),
    ("accel_gpu_operator_chart_version", "latest", "not a chart version"),
    ("accel_gpu_operator_chart_version", "26.7", "not a chart version"),
    ("accel_kubernetes_version", "136", "not a Kubernetes version")])
def test_rule_cluster_settings_refused(name, value, what):
    problems = check({**pool(pool="p", mode="pgpu"), name: value}, gpus("t4"))
    assert len(problems) == 1 and problems[0].startswith(f"gpu-01: {name} = {value!r}: {what}"), problems
    assert "; allowed: " in problems[0]


@pytest.mark.parametrize(("name", "value"), [
    ("accel_image_registry", ""), ("accel_image_registry", "registry.example.com:5000/mirror/nvidia"),
    ("accel_image_registry", "localhost:5000"), ("accel_reboot_serial", 1), ("accel_reboot_serial", "20%"),
    ("accel_reboot_serial", [1, "25%", "100%"]), ("accel_reboot_serial", "3"),
    ("accel_reboot_max_fail_percentage", 0), ("accel_run_lock_wait", "30"),
    ("accel_gpu_operator_chart_version", "v26.7.0"), ("accel_gpu_operator_chart_version", "1.2.3-rc.1+build.5"),
    ("accel_kubernetes_version", "v1.36.3")])
def test_rule_cluster_settings_accepted(name, value):
    assert check({**pool(pool="p", mode="pgpu"), name: value}, gpus("t4")) == []


def test_rule_driver_branch_older_than_the_gpu():
    # H100: the published minimum (MIG User Guide table) decides; T4 (no such entry): its compute capability 7.5.
    assert check(pool(pool="p", mode="pgpu", driver_branch="515"), gpus("h100-80gb")) == [
        "gpu-01: accel_driver_branch = '515': older than GPU 0 (NVIDIA H100 80GB HBM3) supports: H100-80GB needs "
        "driver 525.85.12; allowed: accel_driver_branch 525 or newer"]
    assert check(pool(pool="p", mode="pgpu", driver_branch="525-server"), gpus("h100-80gb")) == []
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


def test_rule_pool_groups_naming_one_pool_agree():
    export = {
        "all": {"vars": {"accel_kubernetes_version": "1.36"}},
        "gpu_pools": {"children": ["train_a", "train_b", "other"], "vars": {"accel_driver_branch": "550"}},
        "train_a": {"hosts": ["gpu-01"], "vars": {"accel_pool": "train", "accel_mode": "pgpu"}},
        "train_b": {"hosts": ["gpu-02"], "vars": {"accel_pool": "train", "accel_mode": "mps", "accel_mps_replicas": 4}},
        "other": {"hosts": ["gpu-03"], "vars": {"accel_pool": "other", "accel_mode": "pgpu"}},
    }
    groups = plan.pool_groups(export)
    assert groups[1] == {"group": "train_b", "vars": {"accel_kubernetes_version": "1.36", "accel_driver_branch": "550",
                                                      "accel_pool": "train", "accel_mode": "mps",
                                                      "accel_mps_replicas": 4}}
    settings = pool(pool="train", mode="pgpu")
    problems = plan.host_problems(HOST, settings, gpus("a100-80gb"), plan.pool_memberships(export, HOST), groups)
    assert problems == [
        "gpu-01: accel_pool = 'train': pool groups ['train_a', 'train_b'] name this pool with different settings "
        "(accel_mode: train_a='pgpu', train_b='mps'; accel_mps_replicas: train_a='(unset)', train_b=4); allowed: one "
        "pool group per accel_pool, or the same pool settings in every group naming it"]
    # Same settings in both groups, or a host of another pool: nothing to report.
    export["train_b"]["vars"] = {"accel_pool": "train", "accel_mode": "pgpu"}
    assert plan.host_problems(HOST, settings, gpus("a100-80gb"), plan.pool_memberships(export, HOST),
                              plan.pool_groups(export)) == []
    other = pool(pool="other", mode="pgpu")
    assert plan.host_problems("gpu-03", other, gpus("a100-80gb"), plan.pool_memberships(export, "gpu-03"),
                              groups) == []


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
