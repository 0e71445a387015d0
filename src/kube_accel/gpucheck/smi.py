"""Read-only view of the GPUs through ``nvidia-smi -q -x`` and NVML, in the facts module's field names.

This is the one place that runs nvidia-smi, and only with the query arguments below: the tool must never
change GPU settings (tests/unit/test_gpucheck_safety.py enforces it).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import xml.etree.ElementTree as ET

from . import NO_GPU_REASON

# Query only: -q (query) -x (XML). Nothing else is ever passed to nvidia-smi by this package.
SMI_QUERY_ARGS = ("-q", "-x")

# NVML_COMPUTEMODE_* values, so an integer from NVML and a word from nvidia-smi compare equal.
COMPUTE_MODES = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}


def smi_command(nvidia_smi: str = "nvidia-smi") -> list[str]:
    return [nvidia_smi, *SMI_QUERY_ARGS]


def run_smi_xml(nvidia_smi: str = "nvidia-smi", timeout: float = 60) -> str:
    result = subprocess.run(smi_command(nvidia_smi), capture_output=True, text=True, timeout=timeout, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(smi_command(nvidia_smi))} exited {result.returncode}: {result.stderr.strip()}")
    return result.stdout


def gpu_presence(nvidia_smi: str = "nvidia-smi", nvml=None) -> tuple[bool, str]:
    """Whether a GPU is usable here, and why not. Uses nvmlInit/DeviceGetCount only (read-only)."""
    if shutil.which(nvidia_smi) is None:
        return False, f"{NO_GPU_REASON} ({nvidia_smi} not found)"
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError as exc:  # pragma: no cover - nvidia-ml-py is a project dependency
            return False, f"{NO_GPU_REASON} (pynvml not importable: {exc})"
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError subclasses vary with the driver; any failure means no usable GPU
        return False, f"{NO_GPU_REASON} (NVML init failed: {exc})"
    try:
        count = nvml.nvmlDeviceGetCount()
    finally:
        nvml.nvmlShutdown()
    if count < 1:
        return False, f"{NO_GPU_REASON} (NVML reports 0 devices)"
    return True, f"{count} GPU(s)"


# --- normalisation: facts and nvidia-smi spell the same value differently ---------------------------------


def _text(node: ET.Element | None, path: str) -> str | None:
    if node is None:
        return None
    found = node.find(path)
    if found is None or found.text is None:
        return None
    value = found.text.strip()
    return value or None


def norm_mode(value) -> str | None:
    """Enabled/disabled-style settings (persistence, MIG): bools, ints and words to enabled/disabled/n/a."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "enabled" if value else "disabled"
    if isinstance(value, int):
        return "enabled" if value else "disabled"
    word = str(value).strip().lower()
    if word in ("enabled", "enable", "on", "true", "yes", "1"):
        return "enabled"
    if word in ("disabled", "disable", "off", "false", "no", "0"):
        return "disabled"
    if word in ("n/a", "na", "none", "not supported", "[not supported]", "unsupported"):
        return "n/a"
    return word


def norm_compute_mode(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return COMPUTE_MODES.get(value, str(value))
    word = str(value).strip().lower().replace(" ", "_").replace("-", "_")
    for prefix in ("nvml_computemode_", "computemode_"):
        if word.startswith(prefix):
            word = word[len(prefix) :]
    return word


_BUS_ID = re.compile(r"^(?:([0-9a-fA-F]+):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])$")


def norm_bus_id(value) -> str | None:
    """PCI bus id with an 8-digit domain, lower case: NVML's busId and busIdLegacy (4-digit) compare equal."""
    if value is None:
        return None
    match = _BUS_ID.match(str(value).strip())
    if not match:
        return str(value).strip().lower()
    domain, bus, dev, fn = match.groups()
    return f"{int(domain or '0', 16):08x}:{int(bus, 16):02x}:{int(dev, 16):02x}.{int(fn)}"


def norm_cuda_version(value) -> str | None:
    """NVML gives 12040 (1000*major + 10*minor), nvidia-smi "12.4": both become "12.4"."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value // 1000}.{(value % 1000) // 10}"
    text = str(value).strip()
    if text.isdigit() and len(text) >= 4:
        return norm_cuda_version(int(text))
    parts = text.split(".")
    return ".".join(parts[:2]) if len(parts) >= 2 else text


def norm_compute_capability(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, dict):
        return f"{int(value['major'])}.{int(value['minor'])}"
    if isinstance(value, list | tuple):
        return f"{int(value[0])}.{int(value[1])}"
    return str(value).strip()


def norm_int(value) -> int | None:
    if value is None:
        return None
    if isinstance(value, int | float):
        return int(value)
    match = re.match(r"^\s*(\d+)", str(value))
    return int(match.group(1)) if match else None


def norm_str(value) -> str | None:
    return None if value is None else str(value).strip()


# Field -> normaliser, shared by the XML parser and the comparison.
GPU_FIELDS = {
    "index": norm_int,
    "uuid": norm_str,
    "name": norm_str,
    "pci_bus_id": norm_bus_id,
    "memory_total_mib": norm_int,
    "compute_capability": norm_compute_capability,
    "mig_mode_current": norm_mode,
    "compute_mode": norm_compute_mode,
    "persistence_mode": norm_mode,
}
HOST_FIELDS = {"count": norm_int, "driver_version": norm_str, "cuda_driver_version": norm_cuda_version}


def _compute_cap(gpu: ET.Element) -> str | None:
    # Not every driver's XML carries it; absent means "not reported", never a mismatch.
    cap = _text(gpu, "compute_cap")
    if cap:
        return cap
    major, minor = _text(gpu, "compute_cap_major"), _text(gpu, "compute_cap_minor")
    if major is not None and minor is not None:
        return f"{major}.{minor}"
    return None


def parse_smi_xml(text: str) -> dict:
    """Parse ``nvidia-smi -q -x`` output into the ``nvidia_gpus`` shape (normalised values, None if absent).

    nvidia-smi lists GPUs in NVML index order and the XML carries no index element, so the index is the
    position; ``minor_number`` is the /dev/nvidiaN number and differs from the index on some hosts.
    """
    root = ET.fromstring(text)
    if root.tag != "nvidia_smi_log":
        raise ValueError(f"not nvidia-smi XML: root element <{root.tag}>")
    gpus = []
    for position, gpu in enumerate(root.findall("gpu")):
        raw = {
            "index": position,
            "uuid": _text(gpu, "uuid"),
            "name": _text(gpu, "product_name"),
            "pci_bus_id": _text(gpu, "pci/pci_bus_id") or gpu.get("id"),
            "memory_total_mib": _text(gpu, "fb_memory_usage/total"),
            "compute_capability": _compute_cap(gpu),
            "mig_mode_current": _text(gpu, "mig_mode/current_mig"),
            "compute_mode": _text(gpu, "compute_mode"),
            "persistence_mode": _text(gpu, "persistence_mode"),
        }
        gpus.append({field: GPU_FIELDS[field](value) for field, value in raw.items()})
    attached = _text(root, "attached_gpus")
    return {
        "count": norm_int(attached) if attached is not None else len(gpus),
        "driver_version": _text(root, "driver_version"),
        "cuda_driver_version": norm_cuda_version(_text(root, "cuda_version")),
        "gpus": gpus,
    }
