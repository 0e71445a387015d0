# Copyright: kube-accel contributors
# Apache License 2.0
"""GPU facts from NVML plus sysfs/procfs, with an injectable NVML source so tests run without a GPU.

Public API (stable; used by the ``nvidia_gpu_facts`` module, the lab scripts and the tests):

- ``gather(source, sysfs=None) -> dict``: the ``nvidia_gpus`` fact. Never raises for a missing driver, library or
  GPU: it returns ``count: 0`` and a ``reason``.
- ``gather_facts() -> dict``: ``gather(PynvmlSource())``, this host's real GPUs (used by kube-accel-gpucheck).
- ``PynvmlSource()``: real NVML through pynvml (package nvidia-ml-py), imported lazily.
- ``RecordedSource.from_file(path)`` / ``RecordedSource(data, name=...)``: a snapshot JSON (``tests/data/nvml``).
  A snapshot carries the sysfs/procfs files it needs, so ``gather`` reads those unless a ``sysfs`` is given.
- ``HostSysfs(sysfs_root="/sys", procfs_root="/proc")`` and ``RecordedSysfs(mapping)``: file access for
  ``/sys/...`` and ``/proc/...`` paths.

Fact layout (``nvidia_gpus``): count, reason, source, driver_version, cuda_driver_version ("12.4"),
cuda_driver_version_major, iommu_enabled, iommu_groups, sriov_capable, kernel_modules, nvswitch (the GPUs sit on an
NVSwitch fabric: Fabric Manager needed), nvswitch_evidence (what said so), gpus[] with index, uuid, name, pci_bus_id,
pci_device_id ("0x20B210DE"), numa_node (-1 unknown), memory_total_mib, compute_capability ("8.0"), mig_mode_current,
mig_mode_pending, mig_devices[{gi_id, ci_id, profile, uuid}], compute_mode, persistence_mode, sriov_totalvfs,
nvlinks_active, nvlinks_to_nvswitch, fabric_state (null, "not-supported", "not-started", "in-progress",
"completed").

Snapshot format (one JSON object): ``name``, ``source`` (where the values come from), ``nvml`` with raw NVML-shaped
values (``driver_version``, ``cuda_driver_version`` as NVML's integer, e.g. 12040, and ``devices[]`` with ``uuid``,
``name``, ``pci_bus_id``, ``pci_device_id``, ``memory_total_bytes``, ``cuda_compute_capability`` [major, minor],
``mig_mode`` [current, pending] or null when unsupported, ``mig_devices[]`` {gi_id, ci_id, name, uuid},
``compute_mode`` (NVML enum), ``persistence_mode`` (0/1), optional ``nvlink_remote_device_types`` (NVML's
nvmlNvLinkDeviceType_t of each active NVLink: 0 GPU, 1 IBM NPU, 2 NVSwitch) and ``gpu_fabric_state`` (NVML's
nvmlGpuFabricState_t, null when unsupported)), and ``sysfs``: absolute path -> file text, or -> list of entry names for
a directory.

NVSwitch systems (HGX/DGX A100, H100, H200, B200) are recognised three ways, any one enough: a GPU whose NVML fabric
state is anything but "not supported" (Hopper and newer report it before Fabric Manager has run), an active NVLink
whose far end NVML reports as an NVSwitch, or an NVIDIA PCI bridge of class 0x0680 (the NVSwitches of HGX A100
boards, visible without any driver).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from typing import Protocol

COMPUTE_MODES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}
# nvml.h nvmlGpuFabricState_t and NVML_NVLINK_DEVICE_TYPE_SWITCH.
FABRIC_STATES = {0: "not-supported", 1: "not-started", 2: "in-progress", 3: "completed"}
NVLINK_DEVICE_TYPE_SWITCH = 2
NVLINK_MAX_LINKS = 18  # NVML_NVLINK_MAX_LINKS of the NVML versions before Blackwell; pynvml's own value wins
# NVSwitch PCI functions: vendor NVIDIA, class "bridge, other" (0x0680xx), as HGX A100 baseboards expose them.
NVSWITCH_PCI_CLASS_PREFIX = "0x0680"
NVIDIA_PCI_VENDOR = "0x10de"
_PROFILE_RE = re.compile(r"MIG\s+(\S+)\s*$")


class NvmlUnavailable(Exception):
    """NVML cannot be used on this host; the message is the fact's ``reason``."""


class NvmlSource(Protocol):
    """What ``gather`` needs from NVML. Methods return ``None`` for a value the device does not support."""

    name: str

    def init(self) -> None: ...  # raises NvmlUnavailable

    def shutdown(self) -> None: ...

    def driver_version(self) -> str: ...

    def cuda_driver_version(self) -> int: ...  # NVML's integer form: 12040 = 12.4

    def device_count(self) -> int: ...

    def device(self, index: int) -> dict: ...  # raw, snapshot-shaped device values (see module docstring)


class Sysfs(Protocol):
    def read(self, path: str) -> str | None: ...

    def listdir(self, path: str) -> list[str] | None: ...


class HostSysfs:
    """Reads ``/sys`` and ``/proc`` paths below injectable roots (tests point them at a fake tree)."""

    def __init__(self, sysfs_root: str = "/sys", procfs_root: str = "/proc"):
        self.roots = {"/sys": sysfs_root, "/proc": procfs_root}

    def _real(self, path: str) -> str:
        for prefix, root in self.roots.items():
            if path == prefix or path.startswith(prefix + "/"):
                return root + path[len(prefix):]
        return path

    def read(self, path: str) -> str | None:
        try:
            with open(self._real(path), encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except OSError:
            return None

    def listdir(self, path: str) -> list[str] | None:
        try:
            return sorted(os.listdir(self._real(path)))
        except OSError:
            return None


class RecordedSysfs:
    """sysfs/procfs values carried by a snapshot: path -> text, or path -> list of names for a directory."""

    def __init__(self, mapping: dict | None):
        self.mapping = dict(mapping or {})

    def read(self, path: str) -> str | None:
        value = self.mapping.get(path)
        return value if isinstance(value, str) else None

    def listdir(self, path: str) -> list[str] | None:
        value = self.mapping.get(path)
        return list(value) if isinstance(value, list) else None


class RecordedSource:
    """NVML values from a snapshot JSON of a real device model (see ``tests/data/nvml``)."""

    def __init__(self, data: dict, name: str | None = None):
        if not isinstance(data, dict) or not isinstance(data.get("nvml"), dict):
            raise ValueError("NVML snapshot must be a JSON object with an 'nvml' object")
        self.data = data
        self.name = f"snapshot:{name or data.get('name') or 'unnamed'}"
        self.sysfs = RecordedSysfs(data.get("sysfs"))

    @classmethod
    def from_file(cls, path: str) -> RecordedSource:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
        default = os.path.splitext(os.path.basename(path))[0]
        return cls(data, name=data.get("name") or default)

    def init(self) -> None:
        reason = self.data["nvml"].get("unavailable")
        if reason:  # a snapshot of a host without a driver
            raise NvmlUnavailable(reason)

    def shutdown(self) -> None:
        return None

    def driver_version(self) -> str:
        return self.data["nvml"]["driver_version"]

    def cuda_driver_version(self) -> int:
        return int(self.data["nvml"]["cuda_driver_version"])

    def device_count(self) -> int:
        return len(self.data["nvml"].get("devices", []))

    def device(self, index: int) -> dict:
        raw = dict(self.data["nvml"]["devices"][index])
        if isinstance(raw.get("pci_device_id"), str):
            raw["pci_device_id"] = int(raw["pci_device_id"], 16)
        return raw


class PynvmlSource:
    """Real NVML. pynvml is imported on ``init`` so a host without it still gets facts (count 0 and a reason)."""

    name = "nvml"

    def __init__(self):
        self.nvml = None

    def init(self) -> None:
        try:
            import pynvml
        except ImportError as exc:
            raise NvmlUnavailable(f"pynvml (Python package nvidia-ml-py) is not installed on this host: {exc}") \
                from exc
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise NvmlUnavailable(_nvml_init_reason(pynvml, exc)) from exc
        self.nvml = pynvml

    def shutdown(self) -> None:
        if self.nvml is not None:
            with contextlib.suppress(self.nvml.NVMLError):
                self.nvml.nvmlShutdown()

    def driver_version(self) -> str:
        return _text(self.nvml.nvmlSystemGetDriverVersion())

    def cuda_driver_version(self) -> int:
        return int(self.nvml.nvmlSystemGetCudaDriverVersion())

    def device_count(self) -> int:
        return int(self.nvml.nvmlDeviceGetCount())

    def _opt(self, func, *args):
        """A value the device may not support (e.g. MIG mode on a T4): ``None`` instead of an error."""
        try:
            return func(*args)
        except self.nvml.NVMLError:
            return None

    def device(self, index: int) -> dict:
        nv = self.nvml
        handle = nv.nvmlDeviceGetHandleByIndex(index)
        pci = nv.nvmlDeviceGetPciInfo(handle)
        raw = {
            "uuid": _text(nv.nvmlDeviceGetUUID(handle)),
            "name": _text(nv.nvmlDeviceGetName(handle)),
            "pci_bus_id": _text(pci.busId),
            "pci_device_id": int(pci.pciDeviceId),
            "memory_total_bytes": int(nv.nvmlDeviceGetMemoryInfo(handle).total),
            "cuda_compute_capability": list(nv.nvmlDeviceGetCudaComputeCapability(handle)),
            "mig_mode": self._opt(nv.nvmlDeviceGetMigMode, handle),
            "compute_mode": self._opt(nv.nvmlDeviceGetComputeMode, handle),
            "persistence_mode": self._opt(nv.nvmlDeviceGetPersistenceMode, handle),
            "mig_devices": [],
            "nvlink_remote_device_types": self._nvlinks(handle),
            "gpu_fabric_state": self._fabric_state(handle),
        }
        if raw["mig_mode"] and raw["mig_mode"][0]:
            for mig_index in range(self._opt(nv.nvmlDeviceGetMaxMigDeviceCount, handle) or 0):
                mig = self._opt(nv.nvmlDeviceGetMigDeviceHandleByIndex, handle, mig_index)
                if mig is None:  # unused slot
                    continue
                raw["mig_devices"].append({
                    "gi_id": self._opt(nv.nvmlDeviceGetGpuInstanceId, mig),
                    "ci_id": self._opt(nv.nvmlDeviceGetComputeInstanceId, mig),
                    "name": _text(nv.nvmlDeviceGetName(mig)),
                    "uuid": _text(nv.nvmlDeviceGetUUID(mig)),
                })
        return raw

    def _nvlinks(self, handle) -> list:
        """NVML's remote device type of each active NVLink; an error past the last link ends the list."""
        nv = self.nvml
        get_state = getattr(nv, "nvmlDeviceGetNvLinkState", None)
        get_type = getattr(nv, "nvmlDeviceGetNvLinkRemoteDeviceType", None)
        if get_state is None or get_type is None:  # a pynvml older than NVLink device types
            return []
        types = []
        for link in range(int(getattr(nv, "NVML_NVLINK_MAX_LINKS", NVLINK_MAX_LINKS))):
            try:
                active = get_state(handle, link)
            except nv.NVMLError:  # no NVLink at all (PCIe cards), or past the device's last link
                break
            if active:
                kind = self._opt(get_type, handle, link)
                types.append(0xFF if kind is None else int(kind))
        return types

    def _fabric_state(self, handle):
        """nvmlGpuFabricState_t of the GPU (Hopper and newer), ``None`` where NVML or the GPU has no such query."""
        nv = self.nvml
        struct = getattr(nv, "c_nvmlGpuFabricInfo_t", None)
        query = getattr(nv, "nvmlDeviceGetGpuFabricInfo", None)
        if struct is None or query is None:
            return None
        import ctypes  # noqa: PLC0415 - only real NVML needs it

        info = struct()
        try:
            query(handle, ctypes.byref(info))
        except nv.NVMLError:
            return None
        return int(info.state)


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _nvml_init_reason(pynvml, exc) -> str:
    checks = (
        ("NVMLError_LibraryNotFound", "NVIDIA driver not installed: libnvidia-ml.so not found"),
        ("NVMLError_DriverNotLoaded", "NVIDIA kernel driver not loaded (is the nvidia module loaded?)"),
        ("NVMLError_NoPermission", "no permission to use NVML (run as root)"),
    )
    for attr, reason in checks:
        cls = getattr(pynvml, attr, None)
        if cls is not None and isinstance(exc, cls):
            return f"{reason}: {exc}"
    return f"NVML initialisation failed: {exc}"


def sysfs_pci_address(nvml_bus_id: str) -> str:
    """NVML's ``00000000:07:00.0`` -> sysfs's ``0000:07:00.0``."""
    domain, _unused, rest = nvml_bus_id.strip().partition(":")
    try:
        return f"{int(domain, 16):04x}:{rest.lower()}"
    except ValueError:
        return nvml_bus_id.strip().lower()


def _int_file(sysfs: Sysfs, path: str, default: int) -> int:
    text = sysfs.read(path)
    try:
        return int(text.strip()) if text is not None else default
    except ValueError:
        return default


def _nvswitch_bridges(sysfs: Sysfs) -> list[str]:
    """PCI functions that are NVIDIA NVSwitches (A100-generation baseboards enumerate them on PCI)."""
    found = []
    for address in sysfs.listdir("/sys/bus/pci/devices") or []:
        base = f"/sys/bus/pci/devices/{address}"
        vendor = (sysfs.read(f"{base}/vendor") or "").strip().lower()
        pci_class = (sysfs.read(f"{base}/class") or "").strip().lower()
        if vendor == NVIDIA_PCI_VENDOR and pci_class.startswith(NVSWITCH_PCI_CLASS_PREFIX):
            found.append(address)
    return found


def _nvswitch(gpus: list, sysfs: Sysfs) -> dict:
    evidence = []
    for gpu in gpus:
        if gpu["nvlinks_to_nvswitch"]:
            evidence.append(f"GPU {gpu['index']}: {gpu['nvlinks_to_nvswitch']} NVLinks to an NVSwitch")
        elif gpu["fabric_state"] not in (None, "not-supported"):
            evidence.append(f"GPU {gpu['index']}: NVLink fabric state {gpu['fabric_state']}")
    bridges = _nvswitch_bridges(sysfs)
    if bridges:
        evidence.append(f"NVSwitch PCI functions {', '.join(bridges)}")
    return {"nvswitch": bool(evidence), "nvswitch_evidence": evidence}


def _host_level(sysfs: Sysfs) -> dict:
    groups = sysfs.listdir("/sys/kernel/iommu_groups") or []
    modules_text = sysfs.read("/proc/modules") or ""
    names = [line.split()[0] for line in modules_text.splitlines() if line.strip()]
    return {
        "iommu_groups": len(groups),
        "iommu_enabled": bool(groups),
        "kernel_modules": sorted(n for n in names if n.startswith("nvidia") or n in ("nouveau", "vfio_pci")),
    }


def _empty(source_name: str, reason: str, sysfs: Sysfs) -> dict:
    facts = {
        "count": 0,
        "reason": reason,
        "source": source_name,
        "driver_version": None,
        "cuda_driver_version": None,
        "cuda_driver_version_major": None,
        "sriov_capable": False,
        "gpus": [],
    }
    facts.update(_host_level(sysfs))
    # Without a driver NVML says nothing, but an HGX A100 board's NVSwitches are on PCI all the same.
    facts.update(_nvswitch([], sysfs))
    return facts


def _gpu(index: int, raw: dict, sysfs: Sysfs) -> dict:
    address = sysfs_pci_address(raw["pci_bus_id"])
    base = f"/sys/bus/pci/devices/{address}"
    mig_mode = raw.get("mig_mode") or None
    major, minor = raw["cuda_compute_capability"]
    compute_mode = raw.get("compute_mode")
    persistence = raw.get("persistence_mode")
    links = raw.get("nvlink_remote_device_types") or []
    fabric = raw.get("gpu_fabric_state")
    mig_devices = []
    for mig in raw.get("mig_devices") or []:
        match = _PROFILE_RE.search(mig.get("name", ""))
        mig_devices.append({
            "gi_id": mig.get("gi_id"),
            "ci_id": mig.get("ci_id"),
            "profile": match.group(1) if match else mig.get("name"),
            "uuid": mig.get("uuid"),
        })
    return {
        "index": index,
        "uuid": raw["uuid"],
        "name": raw["name"],
        "pci_bus_id": address,
        "pci_device_id": f"0x{int(raw['pci_device_id']) & 0xFFFFFFFF:08X}",
        "numa_node": _int_file(sysfs, f"{base}/numa_node", -1),
        "memory_total_mib": int(raw["memory_total_bytes"]) // (1024 * 1024),
        "compute_capability": f"{major}.{minor}",
        "mig_mode_current": bool(mig_mode and mig_mode[0]),
        "mig_mode_pending": bool(mig_mode and mig_mode[1]),
        "mig_devices": mig_devices,
        "compute_mode": COMPUTE_MODES.get(compute_mode, None if compute_mode is None else str(compute_mode)),
        "persistence_mode": bool(persistence) if persistence is not None else None,
        "sriov_totalvfs": _int_file(sysfs, f"{base}/sriov_totalvfs", 0),
        "nvlinks_active": len(links),
        "nvlinks_to_nvswitch": sum(1 for kind in links if kind == NVLINK_DEVICE_TYPE_SWITCH),
        "fabric_state": None if fabric is None else FABRIC_STATES.get(int(fabric), str(fabric)),
    }


def cuda_version_text(value: int) -> str:
    """NVML's 12040 -> ``"12.4"``."""
    return f"{value // 1000}.{(value % 1000) // 10}"


def gather(source: NvmlSource, sysfs: Sysfs | None = None) -> dict:
    """The ``nvidia_gpus`` fact from an NVML source; sysfs defaults to the source's recorded one, else the host."""
    if sysfs is None:
        sysfs = getattr(source, "sysfs", None) or HostSysfs()
    try:
        source.init()
    except NvmlUnavailable as exc:
        return _empty(source.name, str(exc), sysfs)
    try:
        count = source.device_count()
        if count == 0:
            return _empty(source.name, "NVML found no NVIDIA GPU on this host", sysfs)
        cuda = source.cuda_driver_version()
        facts = {
            "count": count,
            "reason": None,
            "source": source.name,
            "driver_version": source.driver_version(),
            "cuda_driver_version": cuda_version_text(cuda),
            "cuda_driver_version_major": cuda // 1000,
            "gpus": [_gpu(i, source.device(i), sysfs) for i in range(count)],
        }
    except Exception as exc:  # a broken driver must give a reason, never a traceback
        return _empty(source.name, f"reading NVML failed: {type(exc).__name__}: {exc}", sysfs)
    finally:
        source.shutdown()
    facts.update(_host_level(sysfs))
    facts["sriov_capable"] = any(gpu["sriov_totalvfs"] > 0 for gpu in facts["gpus"])
    facts.update(_nvswitch(facts["gpus"], sysfs))
    return facts


# The module options that choose the NVML source and the sysfs (nvidia_gpu_facts, accel_host_facts).
SOURCE_OPTIONS = {
    "snapshot": {"type": "path"},
    "snapshot_data": {"type": "dict"},
    "sysfs_root": {"type": "path"},
    "procfs_root": {"type": "path", "default": "/proc"},
}


class SnapshotError(Exception):
    """A recorded snapshot that cannot be read: a configuration error, not a GPU-less host."""


def gather_for_module(params: dict) -> dict:
    """The ``nvidia_gpus`` fact for a module's SOURCE_OPTIONS: real NVML, or a recorded snapshot; with a snapshot,
    ``host_driver_loaded`` says whether this host has an NVIDIA driver loaded after all (the preflight refuses a
    snapshot there). Raises SnapshotError for a snapshot that cannot be read."""
    try:
        if params.get("snapshot"):
            source = RecordedSource.from_file(params["snapshot"])
        elif params.get("snapshot_data"):
            source = RecordedSource(params["snapshot_data"])
        else:
            source = PynvmlSource()
    except (OSError, ValueError, KeyError) as exc:
        raise SnapshotError(f"cannot read NVML snapshot {params.get('snapshot') or '(snapshot_data)'}: {exc}") from exc
    procfs = params.get("procfs_root") or "/proc"
    sysfs = HostSysfs(params["sysfs_root"], procfs) if params.get("sysfs_root") else None
    gpus = gather(source, sysfs)
    if not isinstance(source, PynvmlSource):
        gpus["host_driver_loaded"] = os.path.exists(os.path.join(procfs, "driver/nvidia/version"))
    return gpus


def gather_facts() -> dict:
    """The ``nvidia_gpus`` fact of this host from real NVML and sysfs."""
    return gather(PynvmlSource())
