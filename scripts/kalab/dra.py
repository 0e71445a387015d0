"""What NVIDIA's DRA driver (dra-driver-nvidia-gpu v0.4.1) publishes for a lab node whose GPUs are a recorded NVML
snapshot: its kubelet plugin's own device enumeration and ResourceSlice publishing, run by
ka-conform-dra-slices (tests/conformance/go/dra-slices, built by scripts/upstream.sh) over go-nvml's mock.

  resource_slices(node_name, snapshot, mig_geometry=None, derive_uuids=False) -> list of resource.k8s.io/v1
      ResourceSlice objects as the plugin's ResourceSlice controller writes them for the node (no API server needed)
  devices(node_name, snapshot, ...) -> the plugin's devices (name, attributes, capacity), sorted by name
  publish(kubeconfig, node_name, snapshot, ...) -> the ResourceSlices the plugin's own publishing code stored in
      that API server (the controller started as the plugin starts it; returns once they are there)
  publisher(kubeconfig, node_name, snapshot, ...) -> a running publisher process (subprocess.Popen) that keeps the
      slices published, as the kubelet plugin does, until it is sent SIGTERM

Stand-ins, each named where it is made (mock_spec): the mock answers NVML from the snapshot; the minor number is the
NVML index; brand and architecture follow from the product name and compute capability; NVML's MIG profile table
(GpuInstanceProfileInfo) comes from PROFILE_INFO below, placements from accel_mig's tables; the PCIe root is
unknown (the records hold no PCI topology: the harness runs with an empty directory bound over
/sys/bus/pci/devices, so upstream publishes without that attribute and never reads this machine's PCI devices).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import uuid
from pathlib import Path

from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import mig as accel_mig

from kalab.site import UPSTREAM_BIN

HARNESS = "ka-conform-dra-slices"
DRIVER = "gpu.nvidia.com"

# NVML enums (go-nvml v0.13.1-0 pkg/nvml/const.go).
BRAND_TESLA, BRAND_NVIDIA = 2, 14
ARCH_BY_CC_MAJOR = {7: 5, 8: 7, 9: 9, 10: 10, 12: 10}  # Volta, Ampere, Hopper, Blackwell (7.5 is Turing: 6)
ARCH_TURING, ARCH_ADA = 6, 8
# MIG profile class (accel_mig) -> (NVML GPU_INSTANCE_PROFILE_* index, GI profile ID as nvidia-smi mig -lgip shows it;
# reference gpu-sharing-facts.md 1.3: the same IDs on A100, H100 and H200).
GI_PROFILE = {"1g": (0, 19), "2g": (1, 14), "3g": (2, 9), "4g": (3, 5), "7g": (4, 0), "1g+me": (7, 20),
              "1g.2x": (9, 15)}
# SM slices of a GI -> NVML COMPUTE_INSTANCE_PROFILE_* index of the compute instance that fills it (what
# mig-parted and the GPU Operator create).
CI_PROFILE = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}

# Stand-in: NVML's GpuInstanceProfileInfo per model and profile class, (SMs, copy engines, decoders, encoders, JPEG,
# OFA, memory MiB). H200-141GB: recorded on an H200, driver 580.159.04, 2026-11-26 (gpu-records mig_profiles.json,
# nvmlDeviceGetGpuInstanceProfileInfoV). A100-80GB: SMs, copy engines and memory from nvidia-smi mig -lgip outputs
# (reference gpu-sharing-facts.md 1.3; 7g 79.00 GiB), decoders/JPEG/OFA from go-nvml's A100 mock (mock/dgxa100,
# the same GA100 die). Other models: not recorded here, so a MIG node of them is refused (add them when recorded).
PROFILE_INFO = {
    "H200-141GB": {"1g": (16, 1, 1, 0, 1, 0, 16384), "1g+me": (16, 1, 1, 0, 1, 1, 16384),
                   "1g.2x": (26, 1, 1, 0, 1, 0, 33280), "2g": (32, 2, 2, 0, 2, 0, 33280),
                   "3g": (60, 3, 3, 0, 3, 0, 71424), "4g": (64, 4, 4, 0, 4, 0, 71424),
                   "7g": (132, 8, 7, 0, 7, 1, 143360)},
    "A100-80GB": {"1g": (14, 1, 0, 0, 0, 0, 9728), "1g+me": (14, 1, 1, 0, 1, 1, 9728),
                  "1g.2x": (14, 1, 1, 0, 0, 0, 19968), "2g": (28, 2, 1, 0, 0, 0, 19968),
                  "3g": (42, 3, 2, 0, 0, 0, 40192), "4g": (56, 4, 2, 0, 0, 0, 40192),
                  "7g": (98, 7, 5, 0, 1, 1, 80896)},
}


class DraStandinError(RuntimeError):
    """The snapshot or geometry cannot be turned into what the driver would see, or the harness failed."""


def _brand(name: str) -> int:
    # Stand-in (not in the records): "Tesla" boards report NVML_BRAND_TESLA, data-center boards since Ampere
    # NVML_BRAND_NVIDIA (the H200 recording's product_brand is "NVIDIA").
    return BRAND_TESLA if name.startswith("Tesla ") else BRAND_NVIDIA


def _architecture(cc: list[int]) -> int:
    # Stand-in: NVML's architecture follows the compute capability (the H200 recording: 9.0 and arch 9, Hopper).
    major, minor = cc
    if (major, minor) == (7, 5):
        return ARCH_TURING
    if (major, minor) == (8, 9):
        return ARCH_ADA
    if major not in ARCH_BY_CC_MAJOR:
        raise DraStandinError(f"compute capability {major}.{minor}: no NVML architecture known to kalab.dra")
    return ARCH_BY_CC_MAJOR[major]


def _gi_profiles(model: accel_mig.MigModel, where: str) -> list[dict]:
    table = PROFILE_INFO.get(model.name)
    if table is None:
        raise DraStandinError(f"{where}: MIG on {model.name}: kalab.dra has no recorded NVML profile table for it "
                              f"(recorded: {', '.join(sorted(PROFILE_INFO))})")
    out = []
    for profile in model.profiles.values():
        cls = profile.cls
        index, gi_id = GI_PROFILE[cls.name]
        sms, ce, dec, enc, jpeg, ofa, mem = table[cls.name]
        info = {"id": gi_id, "isP2pSupported": 0, "sliceCount": cls.sm, "instanceCount": cls.max_count,
                "multiprocessorCount": sms, "copyEngineCount": ce, "decoderCount": dec, "encoderCount": enc,
                "jpegCount": jpeg, "ofaCount": ofa, "memorySizeMB": mem}
        ci = CI_PROFILE[cls.sm]
        out.append({"index": index, "info": info,
                    "placements": [{"start": s, "size": cls.size} for s in cls.starts],
                    "ciProfiles": [{"index": ci, "engIndex": 0, "info": {
                        "id": ci, "sliceCount": cls.sm, "instanceCount": 1, "multiprocessorCount": sms,
                        "sharedCopyEngineCount": ce, "sharedDecoderCount": dec, "sharedEncoderCount": enc,
                        "sharedJpegCount": jpeg, "sharedOfaCount": ofa}}]})
    return out


def _profile_name(mig_name: str) -> str:
    # NVML's MIG device name: "<product> MIG <profile>", e.g. "NVIDIA A100-SXM4-80GB MIG 3g.40gb".
    return mig_name.rsplit("MIG ", 1)[-1]


def _mig_devices(model: accel_mig.MigModel, parent_uuid: str, recorded: list[dict] | None, geometry: dict | None,
                 where: str) -> list[dict]:
    """The GPU's MIG devices with the placements accel_mig computes for them (stand-in: the records name each
    device's profile and GI/CI IDs, not its placement; a geometry gets GI IDs 1.. and UUIDs derived from the
    parent's)."""
    if geometry is not None:
        names = [p for p, n in geometry.items() for _ in range(int(n))]
        recorded = [{"name": f"MIG {p}", "gi_id": i + 1, "ci_id": 0,
                     "uuid": "MIG-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"{parent_uuid}/{i}/{p}"))}
                    for i, p in enumerate(names)]
    recorded = recorded or []
    counts: dict[str, int] = {}
    for dev in recorded:
        name = _profile_name(dev["name"])
        if name not in model.profiles:
            raise DraStandinError(f"{where}: MIG profile {name!r} is not one of {model.name}'s "
                                  f"({', '.join(model.profiles)})")
        counts[name] = counts.get(name, 0) + 1
    placement = accel_mig.find_placement(model, counts)
    if placement is None:
        raise DraStandinError(f"{where}: MIG devices {counts} have no legal placement on {model.name}")
    starts: dict[str, list[int]] = {}
    for name, start in placement:
        starts.setdefault(name, []).append(start)
    out = []
    for dev in recorded:
        name = _profile_name(dev["name"])
        cls = model.profiles[name].cls
        index = GI_PROFILE[cls.name][0]
        out.append({"uuid": dev["uuid"], "giId": dev["gi_id"], "ciId": dev["ci_id"], "giProfileIndex": index,
                    "ciProfileIndex": CI_PROFILE[cls.sm], "placement": {"start": starts[name].pop(0),
                                                                        "size": cls.size}})
    return out


def mock_spec(node_name: str, snapshot: Path, mig_geometry: dict | None = None, derive_uuids: bool = False) -> dict:
    """The NVML answers ka-conform-dra-slices fills go-nvml's mock with, from a tests/data/nvml record.

    ``mig_geometry`` ({profile: count}) puts those MIG devices on every MIG-capable GPU of the node, MIG mode on,
    instead of the recorded ones. ``derive_uuids`` gives each GPU the node's own UUID as kalab.site.recorded_gpus
    does (lab hosts share records; real UUIDs are unique)."""
    record = json.loads(Path(snapshot).read_text())
    nvml = record["nvml"]
    gpus = []
    for index, dev in enumerate(nvml["devices"]):
        where = f"{Path(snapshot).name} GPU {index}"
        gpu_uuid = dev["uuid"]
        if derive_uuids:
            gpu_uuid = "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, node_name + "/" + dev["uuid"]))
        mig_mode = dev.get("mig_mode")
        model = accel_mig.model_for_device(dev["pci_device_id"]) if mig_mode is not None else None
        gi_profiles, migs, max_migs = [], [], 0
        if mig_geometry and model is not None:
            mig_mode = [1, 1]
        if model is not None and mig_mode[0] == 1:
            gi_profiles = _gi_profiles(model, where)
            migs = _mig_devices(model, gpu_uuid, dev.get("mig_devices"), mig_geometry if mig_geometry else None, where)
            max_migs = model.sm_slices
        gpus.append({
            "uuid": gpu_uuid, "name": dev["name"],
            "minor": index,  # stand-in: the records hold no minor number; the driver numbers GPUs in NVML order
            "brand": _brand(dev["name"]), "architecture": _architecture(dev["cuda_compute_capability"]),
            "pciBusId": dev["pci_bus_id"], "memoryTotalBytes": dev["memory_total_bytes"],
            "cudaComputeCapability": dev["cuda_compute_capability"], "migMode": mig_mode,
            "maxMigDeviceCount": max_migs, "giProfiles": gi_profiles, "migDevices": migs,
        })
    return {"driverVersion": nvml["driver_version"], "cudaDriverVersion": nvml["cuda_driver_version"], "gpus": gpus}


def _command(node_name: str, empty_sysfs: str, *args: str) -> list[str]:
    binary = UPSTREAM_BIN / HARNESS
    if not binary.exists():
        raise DraStandinError(f"{binary} not built: run `scripts/upstream.sh harness` (make test builds it)")
    # An empty directory over /sys/bus/pci/devices in a mount namespace of its own: see the module docstring.
    userns = ["--user", "--map-root-user"] if os.geteuid() != 0 else []
    return ["unshare", "--mount", "--propagation", "private", *userns, "sh", "-c",
            'mount --bind "$0" /sys/bus/pci/devices && exec "$@"', empty_sysfs,
            str(binary), f"--node-name={node_name}", *args]


def _run(node_name: str, snapshot: Path, mig_geometry: dict | None, derive_uuids: bool, *args: str,
         timeout: int = 120) -> dict:
    spec = mock_spec(node_name, snapshot, mig_geometry, derive_uuids)
    with tempfile.TemporaryDirectory(prefix="ka-dra-sysfs-") as empty:
        proc = subprocess.run(_command(node_name, empty, *args), input=json.dumps(spec), capture_output=True,
                              text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise DraStandinError(f"{HARNESS} failed (rc {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout)


def devices(node_name: str, snapshot: Path, mig_geometry: dict | None = None, derive_uuids: bool = False) -> list:
    """The devices the kubelet plugin announces for the node (resource.k8s.io/v1 Device), sorted by name."""
    return _run(node_name, snapshot, mig_geometry, derive_uuids)["devices"]


def resource_slices(node_name: str, snapshot: Path, mig_geometry: dict | None = None,
                    derive_uuids: bool = False) -> list[dict]:
    """The node's ResourceSlices as the plugin's ResourceSlice controller writes them: the pool the plugin hands it
    (driver.go publishResources: one pool named after the node, one slice) in the object the controller creates
    (k8s.io/dynamic-resource-allocation/resourceslice syncPool: generateName "<node>-gpu.nvidia.com-", pool
    generation 1, resourceSliceCount; the Node as owner only where an API server gives its UID). publish() runs that
    controller itself against an API server; this offline form is for tests and for a lab that applies the objects
    itself."""
    out = _run(node_name, snapshot, mig_geometry, derive_uuids)
    # resourceslice.DriverResources has no JSON tags: Go's field names.
    pools = out["driverResources"]["Pools"]
    slices = []
    for pool_name, pool in sorted(pools.items()):
        for s in pool["Slices"]:
            slices.append({
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                # The controller adds the Node as owner with its UID, which only an API server knows.
                "metadata": {"generateName": f"{node_name}-{DRIVER}-"},
                "spec": {"driver": DRIVER, "nodeName": node_name,
                         "pool": {"name": pool_name, "generation": 1, "resourceSliceCount": len(pool["Slices"])},
                         "devices": s.get("Devices") or []},
            })
    return slices


def publish(kubeconfig: Path, node_name: str, snapshot: Path, mig_geometry: dict | None = None,
            derive_uuids: bool = False, wait: int = 60) -> list[dict]:
    """Publish the node's devices with the plugin's own publishing code (kubeletplugin.Start with NewDriver's
    options, driver.publishResources, the ResourceSlice controller) to the API server of ``kubeconfig``; returns
    the ResourceSlices it stored, read back. The Node must exist (the controller makes it the slices' owner).
    The slices stay after the harness exits, owned by the Node."""
    return _run(node_name, snapshot, mig_geometry, derive_uuids, f"--kubeconfig={kubeconfig}", f"--wait={wait}s",
                timeout=wait + 60)["resourceSlices"]


def publisher(kubeconfig: Path, node_name: str, snapshot: Path, log: Path, mig_geometry: dict | None = None,
              derive_uuids: bool = False) -> subprocess.Popen:
    """The publisher as a long-running process (the kubelet plugin's behaviour: its controller repairs slices
    that are deleted or changed) writing to ``log``; it prints {"published": N} once the slices are stored. Stop it
    with SIGTERM (the process group: it runs under unshare)."""
    spec = mock_spec(node_name, snapshot, mig_geometry, derive_uuids)
    # Beside the log, in the lab's process directory, so it goes with the lab (mkdtemp left one per start in /tmp).
    empty = log.with_name(f"{log.name}.sysfs")
    empty.mkdir(exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(_command(node_name, str(empty), f"--kubeconfig={kubeconfig}", "--serve"),
                                stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    proc.stdin.write(json.dumps(spec).encode())
    proc.stdin.close()
    return proc
