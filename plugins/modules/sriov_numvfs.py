#!/usr/bin/python
# Copyright: kube-accel contributors
# Apache License 2.0
"""Ansible module: set the SR-IOV VF count of a PCI physical function through sysfs."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sriov_numvfs
short_description: Set the number of SR-IOV virtual functions of a PCI device
description:
  - Reads C(sriov_numvfs) and C(sriov_totalvfs) of a physical function and writes the wanted count.
  - A change between two non-zero counts goes through C(0) first, because the kernel answers EBUSY otherwise.
  - Writing the current value is skipped, so a second run changes nothing.
  - The count does not survive a reboot; the C(sriov) role installs a systemd unit for that.
options:
  device:
    description: PCI address of the physical function (C(0000:3b:00.0); C(3b:00.0) and nvidia-smi's 8-digit domain are accepted).
    type: str
    required: true
  numvfs:
    description: Wanted number of VFs, 0 to C(sriov_totalvfs).
    type: int
    required: true
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
- name: Create 4 VFs on the first GPU
  kube_accel.gpu.sriov_numvfs:
    device: "0000:3b:00.0"
    numvfs: 4
"""

RETURN = r"""
before:
  description: VF count found.
  returned: always
  type: int
after:
  description: VF count after the run (the planned one in check mode).
  returned: always
  type: int
totalvfs:
  description: Maximum VF count of the device.
  returned: always
  type: int
writes:
  description: Values written to sriov_numvfs in order (planned ones in check mode).
  returned: always
  type: list
  elements: int
  sample: [0, 4]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kube_accel.gpu.plugins.module_utils.host.sysfs import SysfsError, apply_numvfs, normalize_bdf


def main():
    module = AnsibleModule(
        argument_spec={
            "device": {"type": "str", "required": True},
            "numvfs": {"type": "int", "required": True},
            "sysfs_root": {"type": "path", "default": "/sys"},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        device = normalize_bdf(params["device"])
        result = apply_numvfs(params["sysfs_root"], device, params["numvfs"], check=module.check_mode)
    except SysfsError as err:
        module.fail_json(msg=str(err))
    changed = bool(result["writes"])
    output = dict(result, changed=changed, device=device)
    if changed and module._diff:
        output["diff"] = {
            "before_header": f"{device}/sriov_numvfs",
            "after_header": f"{device}/sriov_numvfs",
            "before": f"{result['before']}\n",
            "after": f"{result['after']}\n",
        }
    module.exit_json(**output)


if __name__ == "__main__":
    main()
