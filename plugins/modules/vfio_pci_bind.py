#!/usr/bin/python
# Copyright: kube-accel contributors
# Apache License 2.0
"""Ansible module: find PCI devices by vendor:device id and bind them to vfio-pci now."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vfio_pci_bind
short_description: Bind PCI devices to vfio-pci by vendor:device id, or report their drivers
description:
  - Finds every PCI device whose vendor:device id is listed (a GPU and its HDMI audio function, for instance).
  - With I(state=bound), moves each device that is not on C(vfio-pci) there through C(driver_override), then
    re-reads the C(driver) link and fails if the kernel did not bind it (a write that is silently ignored is the
    failure mode seen with operator-managed binding).
  - With I(state=query), only reports the drivers; it never changes anything.
  - Boot-time binding is the C(vfio) role's modprobe.d configuration; this module is for binding without a reboot.
options:
  ids:
    description: PCI ids C(vvvv:dddd) to match.
    type: list
    elements: str
    required: true
  state:
    description: C(bound) binds, C(query) only reports.
    type: str
    choices: [bound, query]
    default: query
  sysfs_root:
    description: Root of the sysfs tree; tests point it at a fake tree.
    type: path
    default: /sys
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  platform:
    support: full
    platforms: posix
author:
  - kube-accel contributors (@kube-accel)"""

EXAMPLES = r"""
- name: Bind the A100 and its audio function to vfio-pci
  kube_accel.gpu.vfio_pci_bind:
    ids: ["10de:20b5", "10de:1aef"]
    state: bound
"""

RETURN = r"""
devices:
  description: One entry per matching device.
  returned: always
  type: list
  elements: dict
  sample: [{bdf: "0000:3b:00.0", id: "10de:20b5", driver_before: nvidia, driver: vfio-pci, steps: []}]
not_bound:
  description: Addresses of matching devices whose driver is not vfio-pci after the run.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kube_accel.gpu.plugins.module_utils.host.sysfs import (
    VFIO_DRIVER,
    SysfsError,
    bind_driver,
    current_driver,
    device_id,
    find_devices,
    normalize_id,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "ids": {"type": "list", "elements": "str", "required": True},
            "state": {"type": "str", "choices": ["bound", "query"], "default": "query"},
            "sysfs_root": {"type": "path", "default": "/sys"},
        },
        supports_check_mode=True,
    )
    root = module.params["sysfs_root"]
    try:
        ids = [normalize_id(i) for i in module.params["ids"]]
        devices = []
        for bdf in find_devices(root, ids):
            if module.params["state"] == "bound":
                devices.append(bind_driver(root, bdf, VFIO_DRIVER, check=module.check_mode))
            else:
                driver = current_driver(root, bdf)
                devices.append(
                    {
                        "bdf": bdf,
                        "id": device_id(root, bdf),
                        "driver_before": driver,
                        "driver": driver,
                        "steps": [],
                    }
                )
    except SysfsError as err:
        module.fail_json(msg=str(err))
    changed = any(d["steps"] for d in devices)
    result = {
        "changed": changed,
        "devices": devices,
        "not_bound": [d["bdf"] for d in devices if d["driver"] != VFIO_DRIVER],
    }
    if changed and module._diff:
        result["diff"] = {
            "before": "".join(f"{d['bdf']} {d['driver_before'] or '-'}\n" for d in devices),
            "after": "".join(f"{d['bdf']} {d['driver'] or '-'}\n" for d in devices),
        }
    module.exit_json(**result)


if __name__ == "__main__":
    main()
