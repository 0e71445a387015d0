#!/usr/bin/python
# Copyright: kube-accel contributors
# Apache License 2.0
"""Ansible module: NVIDIA GPU facts from NVML and sysfs."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nvidia_gpu_facts
short_description: Gather NVIDIA GPU facts from NVML and sysfs
description:
  - Reads the host's NVIDIA GPUs through NVML (Python package C(nvidia-ml-py), module C(pynvml)) and the PCI,
    IOMMU and module state from sysfs and procfs, and returns them as the C(nvidia_gpus) fact.
  - Only reads; never changes the host.
  - A host without the NVIDIA driver, without C(pynvml) or without a GPU still succeeds, with
    C(nvidia_gpus.count=0) and the cause in C(nvidia_gpus.reason).
  - With O(snapshot) or O(snapshot_data) the NVML values come from a recorded snapshot (the lab's GPU-less hosts,
    tests); the same gathering code runs on both.
version_added: "0.1.0"
author: kube-accel contributors (@kube-accel)
options:
  as_facts:
    description:
      - V(false) returns the facts as RV(nvidia_gpus) in the task result only, without setting (or caching) the
        host's C(nvidia_gpus) fact, for a check that must not change what later plays and the host play's fast
        path read as the host's facts.
    type: bool
    default: true
extends_documentation_fragment:
  - kube_accel.gpu.nvml_source
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.facts
attributes:
  check_mode:
    support: full
    description: The module only reads, so check mode returns the same facts.
  diff_mode:
    support: none
  facts:
    support: full
  platform:
    support: full
    platforms: posix
notes:
  - PCI device IDs are in mig-parted C(device-filter) form (C(0x20B210DE)); the MIG geometry checks key on them.
requirements:
  - nvidia-ml-py (pynvml) on the managed host for real GPUs
"""

EXAMPLES = r"""
- name: Gather GPU facts
  kube_accel.gpu.nvidia_gpu_facts:

- name: Gather GPU facts of a lab host from a snapshot kept on the controller
  kube_accel.gpu.nvidia_gpu_facts:
    snapshot_data: "{{ lookup('ansible.builtin.file', accel_nvml_snapshot) | from_json }}"

- name: Show the GPU models
  ansible.builtin.debug:
    msg: "{{ nvidia_gpus.gpus | map(attribute='name') | list }}"
"""

RETURN = r"""
nvidia_gpus:
  description: The same dict as the C(nvidia_gpus) fact, in the result only.
  returned: O(as_facts=false)
  type: dict
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    nvidia_gpus:
      description: The host's NVIDIA GPUs.
      returned: always
      type: dict
      contains:
        count:
          description: Number of GPUs NVML sees; 0 without driver, library or GPU.
          type: int
          sample: 1
        reason:
          description: Why C(count) is 0; null when NVML answered.
          type: str
          sample: "NVIDIA driver not installed: libnvidia-ml.so not found"
        source:
          description: C(nvml), or C(snapshot:<name>) for recorded data.
          type: str
          sample: nvml
        host_driver_loaded:
          description: With a snapshot only, whether the host itself has an NVIDIA driver loaded
            (C(/proc/driver/nvidia/version)).
          type: bool
          returned: with O(snapshot) or O(snapshot_data)
          sample: false
        driver_version:
          description: NVIDIA driver version.
          type: str
          sample: "550.54.15"
        cuda_driver_version:
          description: CUDA version the driver supports.
          type: str
          sample: "12.4"
        cuda_driver_version_major:
          description: Major part of C(cuda_driver_version).
          type: int
          sample: 12
        iommu_enabled:
          description: Whether the kernel has IOMMU groups (C(/sys/kernel/iommu_groups) not empty).
          type: bool
        iommu_groups:
          description: Number of IOMMU groups.
          type: int
        sriov_capable:
          description: Whether any GPU reports C(sriov_totalvfs) above 0.
          type: bool
        kernel_modules:
          description: Loaded NVIDIA-related kernel modules (C(nvidia*), C(nouveau), C(vfio_pci)).
          type: list
          elements: str
          sample: [nvidia, nvidia_modeset, nvidia_uvm]
        nvswitch:
          description:
            - Whether the GPUs sit on an NVSwitch fabric (HGX/DGX baseboards), which needs NVIDIA Fabric Manager of
              the driver's version. True when a GPU's NVML fabric state is other than not supported, an active
              NVLink ends at an NVSwitch, or an NVIDIA PCI bridge of class 0x0680 (NVSwitch) is present.
          type: bool
        nvswitch_evidence:
          description: What made C(nvswitch) true, one line per finding.
          type: list
          elements: str
          sample: ["GPU 0: 18 NVLinks to an NVSwitch"]
        gpus:
          description: One entry per GPU.
          type: list
          elements: dict
          sample:
            - index: 0
              uuid: GPU-6a9d1f4e-0c1b-5b2e-9c43-2f8d5a1e7b10
              name: NVIDIA A100-SXM4-80GB
              pci_bus_id: "0000:07:00.0"
              pci_device_id: "0x20B210DE"
              numa_node: 0
              memory_total_mib: 81920
              compute_capability: "8.0"
              mig_mode_current: true
              mig_mode_pending: true
              mig_devices:
                - {gi_id: 1, ci_id: 0, profile: 3g.40gb, uuid: MIG-77bc55da-04d2-542c-9734-b3993941f6f0}
              compute_mode: Default
              persistence_mode: true
              sriov_totalvfs: 0
              nvlinks_active: 12
              nvlinks_to_nvswitch: 12
              fabric_state: null
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kube_accel.gpu.plugins.module_utils.host.gpu_facts import (
    SOURCE_OPTIONS,
    SnapshotError,
    gather_for_module,
)


def run_module():
    module = AnsibleModule(
        argument_spec={**SOURCE_OPTIONS, "as_facts": {"type": "bool", "default": True}},
        mutually_exclusive=[("snapshot", "snapshot_data")],
        supports_check_mode=True,
    )
    try:
        gpus = gather_for_module(module.params)
    except SnapshotError as exc:
        module.fail_json(msg=str(exc))
    if not module.params["as_facts"]:
        module.exit_json(changed=False, nvidia_gpus=gpus)
    module.exit_json(changed=False, ansible_facts={"nvidia_gpus": gpus})


def main():
    run_module()


if __name__ == "__main__":
    main()
