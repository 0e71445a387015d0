"""GPU facts gathering on recorded device data.

There is no NVIDIA GPU on the machines these tests run on, so NVML is replaced at its edge only: by the snapshots
in tests/data/nvml (composed from published specs and `nvidia-smi -q` outputs, NOT recorded here; each file says
so in its "source" field) and, for the pynvml code path, by a stand-in pynvml module serving the same snapshot.
Everything above NVML (normalisation, sysfs, MIG parsing) is the real code.
"""

from __future__ import annotations

import ctypes
import json
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
from adhoc import run_module
from ansible_collections.kube_accel.gpu.plugins.module_utils.host import gpu_facts as facts

REPO = Path(__file__).resolve().parents[2]
SNAPSHOTS = REPO / "tests" / "data" / "nvml"
REQUIRED = ["h100-80gb", "a100-80gb", "a100-80gb-mig", "a30", "t4", "dual-socket-a100x8", "hgx-h100x8"]


def load(name):
    return facts.gather(facts.RecordedSource.from_file(str(SNAPSHOTS / f"{name}.json")))


@pytest.mark.parametrize("name", REQUIRED)
def test_snapshot_exists_and_says_where_it_comes_from(name):
    data = json.loads((SNAPSHOTS / f"{name}.json").read_text())
    assert data["name"] == name
    assert "NOT recorded" in data["source"]
    result = load(name)
    assert result["reason"] is None and result["count"] == len(data["nvml"]["devices"]) > 0
    assert result["source"] == f"snapshot:{name}"


@pytest.mark.parametrize(
    ("name", "model", "device_id", "mib", "cc", "driver", "cuda", "major"),
    [
        ("h100-80gb", "NVIDIA H100 80GB HBM3", "0x233010DE", 81559, "9.0", "550.54.15", "12.4", 12),
        ("a100-80gb", "NVIDIA A100-SXM4-80GB", "0x20B210DE", 81920, "8.0", "550.54.15", "12.4", 12),
        ("a100-80gb-mig", "NVIDIA A100-SXM4-80GB", "0x20B210DE", 81920, "8.0", "535.129.03", "12.2", 12),
        ("a30", "NVIDIA A30", "0x20B710DE", 24576, "8.0", "535.161.08", "12.2", 12),
        ("t4", "Tesla T4", "0x1EB810DE", 15360, "7.5", "470.182.03", "11.4", 11),
        ("dual-socket-a100x8", "NVIDIA A100-SXM4-40GB", "0x20B010DE", 40960, "8.0", "535.183.01", "12.2", 12),
        ("hgx-h100x8", "NVIDIA H100 80GB HBM3", "0x233010DE", 81559, "9.0", "550.54.15", "12.4", 12),
    ],
)
def test_device_facts(name, model, device_id, mib, cc, driver, cuda, major):
    result = load(name)
    gpu = result["gpus"][0]
    assert (gpu["name"], gpu["pci_device_id"], gpu["memory_total_mib"], gpu["compute_capability"]) == (
        model, device_id, mib, cc)
    assert (result["driver_version"], result["cuda_driver_version"], result["cuda_driver_version_major"]) == (
        driver, cuda, major)
    assert gpu["uuid"].startswith("GPU-") and gpu["index"] == 0
    assert gpu["persistence_mode"] is True and gpu["compute_mode"] == "Default"
    assert "nvidia" in result["kernel_modules"] and "ext4" not in result["kernel_modules"]


def test_two_socket_host_has_gpus_on_both_numa_nodes():
    result = load("dual-socket-a100x8")
    assert result["count"] == 8
    assert Counter(g["numa_node"] for g in result["gpus"]) == {0: 4, 1: 4}
    assert [g["index"] for g in result["gpus"]] == list(range(8))
    # NVML's 8-digit PCI domain becomes sysfs's 4-digit form.
    assert result["gpus"][4]["pci_bus_id"] == "0000:87:00.0"
    assert result["iommu_enabled"] is True and result["iommu_groups"] == 40


def test_mig_enabled_a100_lists_instances_with_profiles():
    gpu = load("a100-80gb-mig")["gpus"][0]
    assert gpu["mig_mode_current"] is True and gpu["mig_mode_pending"] is True
    assert [m["profile"] for m in gpu["mig_devices"]] == ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
    assert all(m["uuid"].startswith("MIG-") and m["ci_id"] == 0 for m in gpu["mig_devices"])
    plain = load("a100-80gb")["gpus"][0]
    assert plain["mig_mode_current"] is False and plain["mig_devices"] == []


def test_t4_without_mig_support_and_without_numa():
    result = load("t4")
    gpu = result["gpus"][0]
    assert gpu["mig_mode_current"] is False and gpu["mig_mode_pending"] is False
    assert gpu["numa_node"] == -1
    assert result["iommu_enabled"] is False and result["sriov_capable"] is False and gpu["sriov_totalvfs"] == 0


def test_sriov_capable_from_sriov_totalvfs():
    result = load("a30")
    assert result["sriov_capable"] is True and result["gpus"][0]["sriov_totalvfs"] == 16


def test_host_sysfs_root_is_injectable(tmp_path):
    sys_root, proc_root = tmp_path / "sys", tmp_path / "proc"
    dev = sys_root / "bus/pci/devices/0000:07:00.0"
    dev.mkdir(parents=True)
    (dev / "numa_node").write_text("1\n")
    (dev / "sriov_totalvfs").write_text("20\n")
    for group in ("0", "1", "2"):
        (sys_root / "kernel/iommu_groups" / group).mkdir(parents=True)
    proc_root.mkdir()
    (proc_root / "modules").write_text("vfio_pci 16384 0 - Live 0x0\nnvidia 5642 2 - Live 0x0\nxfs 1 0 - Live 0x0\n")
    source = facts.RecordedSource.from_file(str(SNAPSHOTS / "a100-80gb.json"))
    result = facts.gather(source, facts.HostSysfs(str(sys_root), str(proc_root)))
    gpu = result["gpus"][0]
    assert gpu["numa_node"] == 1 and gpu["sriov_totalvfs"] == 20
    assert result["iommu_groups"] == 3 and result["iommu_enabled"] is True and result["sriov_capable"] is True
    assert result["kernel_modules"] == ["nvidia", "vfio_pci"]
    # Missing files mean unknown NUMA node and no SR-IOV, not an error.
    bare = facts.gather(source, facts.HostSysfs(str(tmp_path / "empty"), str(tmp_path / "empty")))
    assert bare["gpus"][0]["numa_node"] == -1 and bare["iommu_enabled"] is False and bare["kernel_modules"] == []


def test_snapshot_of_a_host_without_driver():
    source = facts.RecordedSource({"name": "bare", "nvml": {"unavailable": "NVIDIA kernel driver not loaded"},
                                   "sysfs": {"/sys/kernel/iommu_groups": ["0"]}})
    result = facts.gather(source)
    assert result["count"] == 0 and result["gpus"] == []
    assert result["reason"] == "NVIDIA kernel driver not loaded"
    assert result["iommu_enabled"] is True  # host-level sysfs facts still come (vfio hosts have no NVML GPUs)


def test_zero_gpus_gives_reason():
    result = facts.gather(facts.RecordedSource({"nvml": {"driver_version": "550.54.15",
                                                          "cuda_driver_version": 12040, "devices": []}}))
    assert result["count"] == 0 and result["reason"] == "NVML found no NVIDIA GPU on this host"


class FakePynvml:
    """Stand-in for the pynvml module, answering from a snapshot (the NVML edge; no GPU here)."""

    class NVMLError(Exception):
        pass

    class NVMLError_LibraryNotFound(NVMLError):  # noqa: N801 - pynvml's own name
        pass

    class NVMLError_NotSupported(NVMLError):  # noqa: N801
        pass

    def __init__(self, snapshot, fail_init=None, fail_on=None):
        self.nvml = snapshot["nvml"]
        self.fail_init = fail_init
        self.fail_on = fail_on
        self.shutdowns = 0

    def nvmlInit(self):
        if self.fail_init:
            raise self.fail_init

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self):
        return self.nvml["driver_version"].encode()  # older pynvml returns bytes

    def nvmlSystemGetCudaDriverVersion(self):
        return self.nvml["cuda_driver_version"]

    def nvmlDeviceGetCount(self):
        return len(self.nvml["devices"])

    def nvmlDeviceGetHandleByIndex(self, index):
        if self.fail_on == index:
            raise self.NVMLError("GPU is lost")
        return ("gpu", index)

    def _dev(self, handle):
        return self.nvml["devices"][handle[1]]

    def _mig(self, handle):
        return self.nvml["devices"][handle[1]]["mig_devices"][handle[2]]

    def nvmlDeviceGetPciInfo(self, handle):
        dev = self._dev(handle)
        return SimpleNamespace(busId=dev["pci_bus_id"], pciDeviceId=int(dev["pci_device_id"], 16))

    def nvmlDeviceGetUUID(self, handle):
        return self._mig(handle)["uuid"] if handle[0] == "mig" else self._dev(handle)["uuid"]

    def nvmlDeviceGetName(self, handle):
        return self._mig(handle)["name"] if handle[0] == "mig" else self._dev(handle)["name"]

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(total=self._dev(handle)["memory_total_bytes"])

    def nvmlDeviceGetCudaComputeCapability(self, handle):
        return tuple(self._dev(handle)["cuda_compute_capability"])

    def nvmlDeviceGetMigMode(self, handle):
        mode = self._dev(handle)["mig_mode"]
        if mode is None:
            raise self.NVMLError_NotSupported("Not Supported")
        return mode

    def nvmlDeviceGetComputeMode(self, handle):
        return self._dev(handle)["compute_mode"]

    def nvmlDeviceGetPersistenceMode(self, handle):
        return self._dev(handle)["persistence_mode"]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle):
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle, index):
        if index >= len(self._dev(handle)["mig_devices"]):
            raise self.NVMLError("Not Found")
        return ("mig", handle[1], index)

    NVML_NVLINK_MAX_LINKS = 18

    class c_nvmlGpuFabricInfo_t(ctypes.Structure):  # noqa: N801 - pynvml's own name
        _fields_ = [("state", ctypes.c_uint)]

    def nvmlDeviceGetNvLinkState(self, handle, link):
        types = self._dev(handle).get("nvlink_remote_device_types")
        if not types or link >= len(types):  # PCIe cards answer Not Supported; past the last link too
            raise self.NVMLError_NotSupported("Not Supported")
        return 1

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle, link):
        return self._dev(handle)["nvlink_remote_device_types"][link]

    def nvmlDeviceGetGpuFabricInfo(self, handle, info_ref):
        state = self._dev(handle).get("gpu_fabric_state")
        if state is None:
            raise self.NVMLError_NotSupported("Not Supported")
        info_ref._obj.state = state

    def nvmlDeviceGetGpuInstanceId(self, handle):
        return self._mig(handle)["gi_id"]

    def nvmlDeviceGetComputeInstanceId(self, handle):
        return self._mig(handle)["ci_id"]


def _snapshot(name):
    return json.loads((SNAPSHOTS / f"{name}.json").read_text())


@pytest.mark.parametrize("name", REQUIRED)
def test_pynvml_path_gives_the_same_facts_as_the_snapshot(monkeypatch, name):
    data = _snapshot(name)
    fake = FakePynvml(data)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    recorded = facts.RecordedSysfs(data["sysfs"])
    live = facts.gather(facts.PynvmlSource(), recorded)
    expected = load(name)
    assert live.pop("source") == "nvml"
    expected.pop("source")
    assert live == expected
    assert fake.shutdowns == 1


def test_pynvml_not_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    result = facts.gather(facts.PynvmlSource(), facts.RecordedSysfs({}))
    assert result["count"] == 0 and "nvidia-ml-py" in result["reason"]


def test_pynvml_without_driver_library(monkeypatch):
    fake = FakePynvml(_snapshot("t4"), fail_init=FakePynvml.NVMLError_LibraryNotFound("NVML Shared Library Not Found"))
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    result = facts.gather(facts.PynvmlSource(), facts.RecordedSysfs({}))
    assert result["count"] == 0
    assert result["reason"] == "NVIDIA driver not installed: libnvidia-ml.so not found: NVML Shared Library Not Found"


def test_nvml_error_while_reading_gives_reason_not_traceback(monkeypatch):
    fake = FakePynvml(_snapshot("dual-socket-a100x8"), fail_on=3)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    result = facts.gather(facts.PynvmlSource(), facts.RecordedSysfs({}))
    assert result["count"] == 0 and result["reason"] == "reading NVML failed: NVMLError: GPU is lost"
    assert fake.shutdowns == 1


def test_real_nvml_on_this_machine_never_raises():
    """Real pynvml against whatever this machine has; without a GPU driver that is count 0 and a reason."""
    result = facts.gather(facts.PynvmlSource())
    if result["count"] == 0:
        assert result["reason"]
    else:  # pragma: no cover - only on a GPU machine
        assert result["reason"] is None and result["gpus"][0]["uuid"].startswith("GPU-")


@pytest.mark.parametrize(
    ("nvml", "sysfs"), [("00000000:07:00.0", "0000:07:00.0"), ("00000001:B7:00.0", "0001:b7:00.0")]
)
def test_pci_address_forms(nvml, sysfs):
    assert facts.sysfs_pci_address(nvml) == sysfs


def test_cuda_version_text():
    assert facts.cuda_version_text(12040) == "12.4"
    assert facts.cuda_version_text(11080) == "11.8"
    assert facts.cuda_version_text(13000) == "13.0"


def _run_module(*args):
    return run_module("nvidia_gpu_facts", *args)


def test_module_in_check_mode_with_snapshot_and_sysfs_root(tmp_path):
    (tmp_path / "sys/bus/pci/devices/0000:3b:00.0").mkdir(parents=True)
    (tmp_path / "sys/bus/pci/devices/0000:3b:00.0/numa_node").write_text("1\n")
    result = _run_module("--check", "-a", f"snapshot={SNAPSHOTS / 'a30.json'} sysfs_root={tmp_path / 'sys'} "
                         f"procfs_root={tmp_path / 'proc'}")
    gpus = result["ansible_facts"]["nvidia_gpus"]
    assert result["changed"] is False
    assert gpus["source"] == "snapshot:a30" and gpus["gpus"][0]["numa_node"] == 1
    assert gpus["gpus"][0]["sriov_totalvfs"] == 0  # read below sysfs_root, not from the snapshot


def test_module_without_snapshot_on_this_machine():
    result = _run_module()
    gpus = result["ansible_facts"]["nvidia_gpus"]
    assert result.get("failed") is not True
    assert gpus["source"] == "nvml"
    if gpus["count"] == 0:
        assert gpus["reason"]


def test_gather_facts_entry_point_uses_real_nvml(monkeypatch):
    data = _snapshot("a30")
    monkeypatch.setitem(sys.modules, "pynvml", FakePynvml(data))
    result = facts.gather_facts()
    assert result["source"] == "nvml" and result["gpus"][0]["name"] == "NVIDIA A30"


def test_hgx_h100_is_an_nvswitch_system_from_nvml():
    """The recorded HGX H100 shape: every GPU's 18 NVLinks end at an NVSwitch, the fabric trained by Fabric Manager."""
    result = load("hgx-h100x8")
    assert result["count"] == 8 and Counter(g["numa_node"] for g in result["gpus"]) == {0: 4, 1: 4}
    assert all(g["nvlinks_active"] == 18 and g["nvlinks_to_nvswitch"] == 18 for g in result["gpus"])
    assert {g["fabric_state"] for g in result["gpus"]} == {"completed"}
    assert result["nvswitch"] is True
    assert result["nvswitch_evidence"][0] == "GPU 0: 18 NVLinks to an NVSwitch"


@pytest.mark.parametrize("name", ["h100-80gb", "a100-80gb", "a30", "t4", "dual-socket-a100x8"])
def test_pcie_and_nvlink_bridge_hosts_are_not_nvswitch_systems(name):
    result = load(name)
    assert result["nvswitch"] is False and result["nvswitch_evidence"] == []
    assert all(g["nvlinks_to_nvswitch"] == 0 and g["fabric_state"] is None for g in result["gpus"])


def test_fabric_state_alone_marks_an_nvswitch_system_before_fabric_manager_runs():
    """Before Fabric Manager has run, NVLinks are not trained yet; Hopper's fabric state already says 'not started'."""
    data = _snapshot("hgx-h100x8")
    for device in data["nvml"]["devices"]:
        device["nvlink_remote_device_types"] = []
        device["gpu_fabric_state"] = 1
    result = facts.gather(facts.RecordedSource(data))
    assert result["nvswitch"] is True
    assert result["nvswitch_evidence"][0] == "GPU 0: NVLink fabric state not-started"
    # A PCIe H100 reports 'not supported': no fabric, no Fabric Manager.
    for device in data["nvml"]["devices"]:
        device["gpu_fabric_state"] = 0
    assert facts.gather(facts.RecordedSource(data))["nvswitch"] is False


def test_nvswitch_bridges_on_pci_without_any_driver():
    """HGX A100 boards enumerate their NVSwitches on PCI (10de:1af1, class 0x068000): seen even with no driver."""
    sysfs = {"/sys/bus/pci/devices": ["0000:07:00.0", "0000:c4:00.0", "0000:c5:00.0"],
             "/sys/bus/pci/devices/0000:07:00.0/vendor": "0x10de\n",
             "/sys/bus/pci/devices/0000:07:00.0/class": "0x030200\n",
             "/sys/bus/pci/devices/0000:c4:00.0/vendor": "0x10de\n",
             "/sys/bus/pci/devices/0000:c4:00.0/class": "0x068000\n",
             "/sys/bus/pci/devices/0000:c5:00.0/vendor": "0x8086\n",
             "/sys/bus/pci/devices/0000:c5:00.0/class": "0x068000\n"}
    result = facts.gather(facts.RecordedSource({"nvml": {"unavailable": "NVIDIA driver not installed"},
                                                "sysfs": sysfs}))
    assert result["count"] == 0 and result["nvswitch"] is True
    assert result["nvswitch_evidence"] == ["NVSwitch PCI functions 0000:c4:00.0"]
