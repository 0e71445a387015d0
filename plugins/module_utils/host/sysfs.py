# Copyright: kube-accel contributors
# Apache License 2.0
"""PCI sysfs logic for SR-IOV VF counts and vfio-pci binding.

Every path is taken relative to a sysfs root (``/sys`` on a host) so the same code runs against a fake
tree in unit tests and Molecule. Writes go through a :class:`SysfsWriter` so tests can stand in for the
kernel (EBUSY on an N->M VF resize, driver symlinks moving on bind).
"""

from __future__ import annotations

import os
import re

_BDF_RE = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{4,8}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<dev>[0-9a-fA-F]{2})\.(?P<fn>[0-7])$"
)
_ID_RE = re.compile(r"^(?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})$")

VFIO_DRIVER = "vfio-pci"


class SysfsError(Exception):
    """A device or attribute is missing, or the kernel refused a write."""


def normalize_bdf(bdf: str) -> str:
    """``3B:00.0`` or ``00000000:3b:00.0`` (nvidia-smi style) -> ``0000:3b:00.0`` (sysfs style)."""
    match = _BDF_RE.match(bdf.strip())
    if not match:
        raise SysfsError(f"not a PCI address: {bdf!r}")
    domain = int(match.group("domain") or "0", 16)
    return f"{domain:04x}:{match.group('bus').lower()}:{match.group('dev').lower()}.{match.group('fn')}"


def normalize_id(pci_id: str) -> str:
    """``10DE:20B5`` -> ``10de:20b5``; rejects anything that is not ``vvvv:dddd``."""
    match = _ID_RE.match(pci_id.strip())
    if not match:
        raise SysfsError(f"not a PCI vendor:device id: {pci_id!r}")
    return f"{match.group('vendor').lower()}:{match.group('device').lower()}"


def device_dir(root: str, bdf: str) -> str:
    return os.path.join(root, "bus", "pci", "devices", normalize_bdf(bdf))


def driver_dir(root: str, driver: str) -> str:
    return os.path.join(root, "bus", "pci", "drivers", driver)


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read().strip()
    except FileNotFoundError:
        raise SysfsError(f"missing sysfs attribute {path}") from None


def read_int(path: str) -> int:
    text = _read(path)
    try:
        return int(text, 0)
    except ValueError:
        raise SysfsError(f"{path} does not hold a number: {text!r}") from None


class SysfsWriter:
    """Writes one value to one sysfs attribute; the kernel acts on each write, so no temp-file dance."""

    def write(self, path: str, value: str) -> None:
        try:
            with open(path, "w", encoding="ascii") as handle:
                handle.write(value)
        except OSError as err:
            raise SysfsError(f"writing {value!r} to {path} failed: {err}") from err


# --- SR-IOV ------------------------------------------------------------------------------------------------


def sriov_state(root: str, bdf: str) -> dict:
    """Current and maximum VF count of a physical function, and the driver it is bound to."""
    path = device_dir(root, bdf)
    if not os.path.isdir(path):
        raise SysfsError(f"no PCI device {normalize_bdf(bdf)} under {root}")
    if not os.path.exists(os.path.join(path, "sriov_totalvfs")):
        raise SysfsError(f"{normalize_bdf(bdf)} has no SR-IOV capability (no sriov_totalvfs)")
    return {
        "numvfs": read_int(os.path.join(path, "sriov_numvfs")),
        "totalvfs": read_int(os.path.join(path, "sriov_totalvfs")),
        "driver": current_driver(root, bdf),
    }


def plan_numvfs(current: int, desired: int, total: int) -> list[int]:
    """Values to write to ``sriov_numvfs`` in order.

    The kernel rejects a change between two non-zero counts with EBUSY, so a resize goes through 0.
    """
    if desired < 0 or desired > total:
        raise SysfsError(f"wanted {desired} VFs but the device supports 0..{total}")
    if desired == current:
        return []
    if current == 0 or desired == 0:
        return [desired]
    return [0, desired]


def apply_numvfs(
    root: str, bdf: str, desired: int, writer: SysfsWriter | None = None, check: bool = False
) -> dict:
    """Bring a PF to ``desired`` VFs; returns before/after counts and the writes (planned in check mode)."""
    state = sriov_state(root, bdf)
    writes = plan_numvfs(state["numvfs"], desired, state["totalvfs"])
    if writes and not check:
        writer = writer or SysfsWriter()
        attr = os.path.join(device_dir(root, bdf), "sriov_numvfs")
        for value in writes:
            writer.write(attr, str(value))
        after = read_int(attr)
        if after != desired:
            raise SysfsError(f"{normalize_bdf(bdf)}: wrote {writes} to sriov_numvfs but it reads {after}")
    return {"before": state["numvfs"], "after": desired, "totalvfs": state["totalvfs"], "writes": writes}


# --- driver binding ----------------------------------------------------------------------------------------


def current_driver(root: str, bdf: str) -> str | None:
    link = os.path.join(device_dir(root, bdf), "driver")
    if not os.path.islink(link) and not os.path.isdir(link):
        return None
    return os.path.basename(os.path.realpath(link))


def device_id(root: str, bdf: str) -> str:
    path = device_dir(root, bdf)
    vendor = read_int(os.path.join(path, "vendor"))
    device = read_int(os.path.join(path, "device"))
    return f"{vendor:04x}:{device:04x}"


def find_devices(root: str, ids: list[str]) -> list[str]:
    """PCI addresses whose vendor:device id is in ``ids``, sorted."""
    wanted = {normalize_id(i) for i in ids}
    base = os.path.join(root, "bus", "pci", "devices")
    if not os.path.isdir(base):
        return []
    found = []
    for name in sorted(os.listdir(base)):
        try:
            if device_id(root, name) in wanted:
                found.append(normalize_bdf(name))
        except SysfsError:
            continue
    return found


def plan_bind(root: str, bdf: str, target: str = VFIO_DRIVER) -> list[tuple[str, str, str]]:
    """Writes (attribute path, value, purpose) moving ``bdf`` onto ``target``; empty when already there.

    Sequence: unbind from the current driver, pin the device with ``driver_override`` so no other driver can
    grab it, ask the target driver to bind it, then clear the override so a later rebind is not surprised.
    """
    bdf = normalize_bdf(bdf)
    driver = current_driver(root, bdf)
    if driver == target:
        return []
    dev = device_dir(root, bdf)
    steps = []
    if driver:
        steps.append((os.path.join(driver_dir(root, driver), "unbind"), bdf, f"unbind from {driver}"))
    steps.append((os.path.join(dev, "driver_override"), target, f"set driver_override={target}"))
    steps.append((os.path.join(driver_dir(root, target), "bind"), bdf, f"bind to {target}"))
    # An empty line clears driver_override (the kernel strips the newline).
    steps.append((os.path.join(dev, "driver_override"), "\n", "clear driver_override"))
    return steps


def bind_driver(
    root: str, bdf: str, target: str = VFIO_DRIVER, writer: SysfsWriter | None = None, check: bool = False
) -> dict:
    """Bind ``bdf`` to ``target`` and prove it by re-reading the ``driver`` link (never trust the write)."""
    bdf = normalize_bdf(bdf)
    if not os.path.isdir(device_dir(root, bdf)):
        raise SysfsError(f"no PCI device {bdf} under {root}")
    before = current_driver(root, bdf)
    steps = plan_bind(root, bdf, target)
    if steps and not check:
        if not os.path.isdir(driver_dir(root, target)):
            raise SysfsError(f"driver {target} is not loaded (no {driver_dir(root, target)}); load it first")
        writer = writer or SysfsWriter()
        for path, value, _purpose in steps:
            writer.write(path, value)
        after = current_driver(root, bdf)
        if after != target:
            raise SysfsError(f"{bdf}: bound to {target} but its driver is {after or 'none'}")
    else:
        after = target if steps else before
    return {
        "bdf": bdf,
        "id": device_id(root, bdf),
        "driver_before": before,
        "driver": after,
        "steps": [purpose for _path, _value, purpose in steps],
    }
