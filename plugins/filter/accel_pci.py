# Copyright: kube-accel contributors
# Apache License 2.0
"""Jinja filters for PCI addresses and ids, sharing the parsing of module_utils/host/sysfs.py."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.kube_accel.gpu.plugins.module_utils.host import sysfs as accel_sysfs


def accel_pci_bdf(value: str) -> str:
    """``00000000:3B:00.0`` (nvidia-smi) or ``3b:00.0`` -> ``0000:3b:00.0`` (sysfs, systemd instance names)."""
    try:
        return accel_sysfs.normalize_bdf(str(value))
    except accel_sysfs.SysfsError as err:
        raise AnsibleFilterError(str(err)) from err


def accel_pci_id(value: str) -> str:
    """``10DE:20B5`` -> ``10de:20b5``; fails on anything that is not ``vvvv:dddd``."""
    try:
        return accel_sysfs.normalize_id(str(value))
    except accel_sysfs.SysfsError as err:
        raise AnsibleFilterError(str(err)) from err


class FilterModule:
    def filters(self):
        return {"accel_pci_bdf": accel_pci_bdf, "accel_pci_id": accel_pci_id}
