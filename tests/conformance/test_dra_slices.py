"""What NVIDIA's DRA driver v0.4.1 publishes for each recorded node, computed by the driver's own kubelet
plugin code (cmd/gpu-kubelet-plugin: device enumeration, GetDevice, the pool publishResources hands to the
ResourceSlice controller) over go-nvml's mock filled from tests/data/nvml (kalab.dra, ka-conform-dra-slices); and
the driver's own opaque-config decoding and validation (ka-conform-dra-config) on configs with a known verdict.

Evidence: upstream code (the plugin's package, built unmodified with its vendor/), over the named stand-ins in
kalab.dra's docstring (NVML mock from the records, minor = NVML index, brand/architecture from name and compute
capability, MIG profile table PROFILE_INFO, no PCIe root). Object shape: the resource.k8s.io/v1 schema of
Kubernetes 1.36 (kubernetes-validate, strict) and the API's name rules for attributes and capacities.
"""

from __future__ import annotations

import json
import re
import subprocess

import kubernetes_validate
import pytest
import upstream
from kalab import dra
from kubernetes.utils import parse_quantity

RECORDS = sorted((upstream.REPO / "tests" / "data" / "nvml").glob("*.json"))
# resource.k8s.io/v1 QualifiedName: a C identifier of at most 32 characters, optionally behind a DNS subdomain and "/"
# (k8s.io/kubernetes pkg/apis/resource/validation validateQualifiedName).
C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,31}$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@pytest.fixture(scope="module", autouse=True)
def built():
    upstream.binary(dra.HARNESS)
    upstream.binary("ka-conform-dra-config")


def qualified_name_ok(name: str) -> bool:
    if "/" in name:
        domain, ident = name.split("/", 1)
        return len(domain) <= 63 and bool(DNS_SUBDOMAIN.match(domain)) and bool(C_IDENTIFIER.match(ident))
    return bool(C_IDENTIFIER.match(name))


def attr(device: dict, name: str):
    (value,) = device["attributes"][name].values()  # the API allows exactly one of string/int/bool/version
    return value


@pytest.mark.parametrize("record", RECORDS, ids=[r.stem for r in RECORDS])
def test_the_driver_publishes_each_recorded_gpu(record):
    nvml = json.loads(record.read_text())["nvml"]
    slices = dra.resource_slices("gpu-node-1", record)
    assert len(slices) == 1  # DynamicMIG off (v0.4.1's default): one pool, one slice, every device
    spec = slices[0]["spec"]
    assert spec["driver"] == "gpu.nvidia.com" and spec["nodeName"] == "gpu-node-1"
    assert spec["pool"] == {"name": "gpu-node-1", "generation": 1, "resourceSliceCount": 1}
    devices = {d["name"]: d for d in spec["devices"]}
    want = set()
    for index, gpu in enumerate(nvml["devices"]):
        migs = gpu.get("mig_devices") or []
        if gpu.get("mig_mode") and gpu["mig_mode"][0] == 1:
            # Static MIG: the MIG devices, not the GPU (nvlib.go GetPerGpuAllocatableDevices).
            assert f"gpu-{index}" not in devices
            published = {attr(d, "uuid"): d for d in devices.values()
                         if attr(d, "type") == "mig" and attr(d, "parentUUID") == gpu["uuid"]}
            assert set(published) == {m["uuid"] for m in migs}
            for mig in migs:
                dev = published[mig["uuid"]]
                profile = mig["name"].rsplit(" MIG ", 1)[1]
                assert attr(dev, "profile") == profile
                assert dev["name"].startswith(f"gpu-{index}-mig-{profile.replace('.', '')}-")
                assert attr(dev, "productName") == gpu["name"]
                memory_gb = int(re.search(r"\.(\d+)gb", profile).group(1))
                # The profile's memory in the name is the GI's memory rounded as nvidia-smi does (go-nvlib).
                assert abs(parse_quantity(dev["capacity"]["memory"]["value"]) / 2**30 - memory_gb) <= 1
                want.add(dev["name"])
            continue
        dev = devices[f"gpu-{index}"]
        want.add(dev["name"])
        assert attr(dev, "type") == "gpu"
        assert attr(dev, "uuid") == gpu["uuid"]
        assert attr(dev, "productName") == gpu["name"]
        assert parse_quantity(dev["capacity"]["memory"]["value"]) == gpu["memory_total_bytes"]
        cc = ".".join(str(x) for x in gpu["cuda_compute_capability"])
        assert attr(dev, "cudaComputeCapability") == f"{cc}.0"
        assert attr(dev, "resource.kubernetes.io/pciBusID") == gpu["pci_bus_id"][4:].lower()
        # The stand-in sysfs has no PCI topology: no PCIe root, never this machine's.
        assert "resource.kubernetes.io/pcieRoot" not in dev["attributes"]
    assert set(devices) == want
    for dev in devices.values():
        assert DNS_LABEL.match(dev["name"]) and len(dev["name"]) <= 63, dev["name"]
        assert all(qualified_name_ok(n) for n in dev["attributes"]), sorted(dev["attributes"])
        assert all(qualified_name_ok(n) for n in dev["capacity"]), sorted(dev["capacity"])
    for obj in slices:
        kubernetes_validate.validate(obj, "1.36.0", strict=True)


def test_a_mig_geometry_gives_the_devices_the_plan_asks_for():
    record = upstream.REPO / "tests" / "data" / "nvml" / "a100-80gb.json"
    geometry = {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}
    devices = dra.devices("gpu-node-2", record, mig_geometry=geometry)
    assert sorted(attr(d, "profile") for d in devices) == ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]
    assert all(attr(d, "type") == "mig" for d in devices)
    # Placements are distinct memory slices (plan.mig's placement; the plugin publishes them as capacities).
    used = [n for d in devices for n in d["capacity"] if n.startswith("memorySlice")]
    assert len(used) == len(set(used)) == 4 + 2 + 1 + 1


def test_a_geometry_that_does_not_fit_is_refused_with_the_reason():
    record = upstream.REPO / "tests" / "data" / "nvml" / "a100-80gb.json"
    with pytest.raises(dra.DraStandinError, match="no legal placement"):
        dra.devices("gpu-node-3", record, mig_geometry={"7g.80gb": 1, "1g.10gb": 1})
    with pytest.raises(dra.DraStandinError, match="'1g.5gb' is not one of A100-80GB"):
        dra.devices("gpu-node-3", record, mig_geometry={"1g.5gb": 1})


def test_node_uuids_can_be_the_labs_own():
    record = upstream.REPO / "tests" / "data" / "nvml" / "h100-80gb.json"
    a = {attr(d, "uuid") for d in dra.devices("node-a", record, derive_uuids=True)}
    b = {attr(d, "uuid") for d in dra.devices("node-b", record, derive_uuids=True)}
    assert len(a) == len(b) == 2 and not a & b


GATES = "--feature-gates=TimeSlicingSettings=true,MPSSupport=true"


def dra_config(configs: list[dict], *args: str) -> list[dict]:
    proc = subprocess.run([str(upstream.binary("ka-conform-dra-config")), *args], input=json.dumps(configs),
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert len(out) == len(configs)
    return out


def gpu_config(sharing: dict | None = None, **extra) -> dict:
    obj = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", **extra}
    if sharing is not None:
        obj["sharing"] = sharing
    return obj


def test_the_driver_decides_which_opaque_configs_it_accepts():
    configs = [
        gpu_config({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Short"}}),
        gpu_config({"strategy": "TimeSlicing"}),
        gpu_config({"strategy": "Spatial"}),
        gpu_config({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Shortest"}}),
        gpu_config({"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 150}}),
        gpu_config({"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 25,
                                                      "defaultPinnedDeviceMemoryLimit": "10Gi"}}),
        gpu_config({"strategy": "MPS"}, replicas=4),
        gpu_config(),
        {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "MigDeviceConfig", "sharing": {"strategy": "MPS"}},
        {"apiVersion": "resource.nvidia.com/v1", "kind": "GpuConfig"},
    ]
    with_gates = dra_config(configs, GATES)
    assert [r["ok"] for r in with_gates] == [True, True, False, False, False, True, False, True, True, False]
    assert with_gates[1]["normalized"]["sharing"]["timeSlicingConfig"] == {"interval": "Default"}  # Normalize()
    assert "unknown GPU sharing strategy: Spatial" in with_gates[2]["error"]
    assert "unknown time-slice interval: Shortest" in with_gates[3]["error"]
    assert "must not be greater than 100" in with_gates[4]["error"]
    assert with_gates[5]["normalized"]["sharing"]["mpsConfig"]["defaultPinnedDeviceMemoryLimit"] == "10Gi"
    assert 'unknown field "replicas"' in with_gates[6]["error"]  # strict decoding
    assert all(r["error"] is None for r in with_gates if r["ok"])
    # Without the alpha gates (v0.4.1 defaults) every sharing setting is refused, naming the gate.
    without = dra_config(configs[:2] + configs[5:6])
    assert [r["ok"] for r in without] == [False, False, False]
    assert '"TimeSlicingSettings" feature gate is not enabled' in without[0]["error"]
    assert '"MPSSupport" feature gate is not enabled' in without[2]["error"]
