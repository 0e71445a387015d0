"""What a vGPU node advertises, as the upstream device plugins compute it, against kube-accel's promise.

accel_pools.advertised_resources is what verify expects in a real node's allocatable and what the lab writes into its
fake nodes, so a lab test cannot check it (it would compare the lab with its own settings). The MPS, time-slicing
and MIG promises are checked against the k8s-device-plugin's config loader (test_device_plugin.py); here the two
vGPU backends, against their source at the pinned versions:

- HAMi v2.10.0: every GPU is advertised deviceSplitCount times (GetPluginDevices), the count from the device config,
  overridden per node by the node config's entry of that node's name. Both ConfigMaps are rendered from the release
  values the cluster play builds and loaded with HAMi's own types (ka-conform-hami-config).
- gpu-manager v1.1.5: vcuda-core is 100 per GPU, vcuda-memory the node's total memory (NVML bytes, summed over its
  GPUs) in 256 MiB blocks, rounded down once (NvidiaTopoAllocator.capacity). GPU memory comes from the recorded NVML
  snapshots (tests/data/nvml: no GPU here).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import upstream
import yaml
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm import pool_charts as accel_chart_values
from ansible_collections.kube_accel.gpu.plugins.module_utils.host import gpu_facts as accel_gpu_facts
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import pools as accel_pools
from chartlib import one
from vgpu_cases import render_case

REPO = Path(__file__).resolve().parents[2]
NVML = REPO / "tests" / "data" / "nvml"
CLUSTER = {"image_registry": "", "image_pull_secrets": []}

# (archive, file:line, text the line holds): the upstream code the models below follow.
HAMI_CITED = [
    ("pkg/device-plugin/nvidiadevice/nvinternal/plugin/server.go:1137",
     "GetPluginDevices(*plugin.schedulerConfig.DeviceSplitCount"),
    ("pkg/device-plugin/nvidiadevice/nvinternal/rm/devices.go:202", 'if !strings.Contains(ds.GetIDs()[0], "MIG")'),
    ("pkg/device-plugin/nvidiadevice/nvinternal/rm/devices.go:208", "for i := uint(0); i < count; i++ {"),
    ("pkg/device-plugin/nvidiadevice/nvinternal/plugin/server.go:141",
     "if os.Getenv(util.NodeNameEnvName) == val.Name {"),
    ("pkg/device-plugin/nvidiadevice/nvinternal/plugin/server.go:143",
     "mergo.Merge(&sConfig.NodeDefaultConfig, val.NodeDefaultConfig, mergo.WithOverride)"),
]
GPU_MANAGER_CITED = [
    ("pkg/device/nvidia/tree.go:44", "HundredCore = 100"),
    ("pkg/types/types.go:33", "MemoryBlockSize = 268435456"),
    ("pkg/types/types.go:22", 'VCoreAnnotation         = "tencent.com/vcuda-core"'),
    ("pkg/types/types.go:24", 'VMemoryAnnotation       = "tencent.com/vcuda-memory"'),
    ("pkg/device/nvidia/tree.go:189", "_, _, totalMem, _ := dev.DeviceGetMemoryInfo()"),
    ("pkg/services/allocator/nvidia/allocator.go:309", "totalMemory += int64(nodes[i].Meta.TotalMemory)"),
    ("pkg/services/allocator/nvidia/allocator.go:312", "totalCores := len(nodes) * nvtree.HundredCore"),
    ("pkg/services/allocator/nvidia/allocator.go:321", "totalMemoryBlocks := totalMemory / types.MemoryBlockSize"),
]


def _cited(archive: str, ref: str) -> str:
    path, line = ref.rsplit(":", 1)
    return (upstream.src(archive) / path).read_text().splitlines()[int(line) - 1]


@pytest.mark.parametrize(("archive", "ref", "text"), [(upstream.HAMI, *c) for c in HAMI_CITED] +
                         [(upstream.GPU_MANAGER, *c) for c in GPU_MANAGER_CITED], ids=str)
def test_models_cite_the_upstream_code(archive, ref, text):
    assert text in _cited(archive, ref), f"{archive} {ref} no longer holds {text!r}: update the model"


# --- HAMi ---------------------------------------------------------------------------------------------------


def _hami_pool(name: str, split: int | None, hosts: list[str]) -> dict:
    settings = {"accel_pool": name, "accel_mode": "vgpu", "accel_vgpu_backend": "hami"}
    if split is not None:
        settings["accel_vgpu_split_count"] = split
    return {"pool": name, "settings": accel_pools.pool_settings(settings), "hosts": hosts}


def _inventory_hami_pools(inventory: str) -> list[dict]:
    from test_release_values import inventory_hosts  # noqa: PLC0415  (the chart suite's inventory reader)

    return [p for p in accel_pools.collect_pools(inventory_hosts(inventory))
            if accel_pools.release_key(p["settings"]) == "vgpu-hami"]


HAMI_CASES = [
    pytest.param(_inventory_hami_pools("lab"), id="lab-inventory"),
    pytest.param(_inventory_hami_pools("example"), id="example-inventory"),
    pytest.param([_hami_pool("a", None, ["a-1"])], id="split-count-unset"),
    pytest.param([_hami_pool("a", 4, ["a-1", "a-2"])], id="split-count-4"),
    # The release's settings are the first pool's; pool b's nodes get their own split count from HAMi's nodeconfig.
    pytest.param([_hami_pool("a", 10, ["a-1"]), _hami_pool("b", 4, ["b-1", "b-2"])], id="two-pools-two-split-counts"),
]


@pytest.mark.parametrize("pools", HAMI_CASES)
def test_hami_advertises_what_kube_accel_promises(tmp_path, pools):
    values = accel_chart_values.release_values("vgpu-hami", pools, CLUSTER)
    objs = render_case(tmp_path, "kube-accel-vgpu-hami", values)
    device = tmp_path / "device-config.yaml"
    device.write_text(one(objs, "ConfigMap", "-device-config")["data"]["device-config.yaml"])
    loaded = upstream.run("ka-conform-hami-config", "device-config", str(device))
    assert loaded.returncode == 0, loaded.stderr
    nvidia = json.loads(loaded.stdout)
    node_file = tmp_path / "config.json"
    node_file.write_text(one(objs, "ConfigMap", "-node-config")["data"]["config.json"])
    loaded = upstream.run("ka-conform-hami-config", "node-config", str(node_file))
    assert loaded.returncode == 0, loaded.stderr
    per_node = {n["name"]: n for n in json.loads(loaded.stdout)["nodeconfig"] or []}
    for pool in pools:
        for host in pool["hosts"]:
            split = (per_node.get(host) or {}).get("devicesplitcount") or nvidia["devicesplitcount"]
            for gpus in (1, 8):
                advertised = {nvidia["ResourceCountName"]: gpus * split}
                promise = accel_pools.advertised_resources(pool["settings"], gpus, 81920)
                assert promise == advertised, f"pool {pool['pool']} node {host} with {gpus} GPUs"


# --- gpu-manager --------------------------------------------------------------------------------------------

SNAPSHOTS = sorted(p.stem for p in NVML.glob("*.json"))
# Recorded GPUs whose memory is not a whole number of 256 MiB blocks: there per-GPU and per-node rounding differ.
UNEVEN = {"h100-80gb", "hgx-h100x8"}


def _gpu_manager_capacity(snapshot: dict) -> dict[str, int]:
    """NvidiaTopoAllocator.capacity() of gpu-manager v1.1.5 for the GPUs NVML reports (cited above)."""
    devices = snapshot["nvml"]["devices"]
    total = sum(int(d["memory_total_bytes"]) for d in devices)
    return {"tencent.com/vcuda-core": len(devices) * 100, "tencent.com/vcuda-memory": total // 268435456}


@pytest.mark.parametrize("name", SNAPSHOTS)
def test_gpu_manager_advertises_what_kube_accel_promises(name):
    snapshot = json.loads((NVML / f"{name}.json").read_text())
    # mig_mode is NVML's [current, pending]; null where the GPU has no MIG.
    if any(any(d.get("mig_mode") or ()) for d in snapshot["nvml"]["devices"]):
        pytest.skip("MIG-enabled GPUs: kube-accel plans no vGPU pool there (preflight rule_mig_exclusive)")
    facts = accel_gpu_facts.gather(accel_gpu_facts.RecordedSource.from_file(str(NVML / f"{name}.json")))
    settings = accel_pools.pool_settings({"accel_pool": "v", "accel_mode": "vgpu", "accel_vgpu_backend": "gpu-manager"})
    # The arguments the lab (scripts/kalab/nodes.py node_manifest) and verify (filter accel_verify_pools) pass: the GPU
    # count and the first GPU's memory from the nvidia_gpu_facts code.
    promise = accel_pools.advertised_resources(settings, facts["count"], int(facts["gpus"][0]["memory_total_mib"]))
    assert promise == _gpu_manager_capacity(snapshot)


def test_snapshots_cover_even_and_uneven_memory():
    """The test above must keep telling per-GPU from per-node rounding: the recorded set holds both kinds of GPU
    memory size (rounding per GPU would promise 636 blocks where gpu-manager advertises 637)."""
    sizes = {n: {int(d["memory_total_bytes"]) % 268435456 == 0
                 for d in yaml.safe_load((NVML / f"{n}.json").read_text())["nvml"]["devices"]} for n in SNAPSHOTS}
    uneven = {n for n, even in sizes.items() if even == {False}}
    assert uneven == UNEVEN & set(SNAPSHOTS), "a recorded GPU with uneven memory: name it in UNEVEN"
    assert uneven and any(even == {True} for even in sizes.values())
