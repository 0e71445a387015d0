#!/usr/bin/python
# Copyright: kube-accel contributors
# Apache License 2.0
"""Ansible module: everything the preflight reads from a GPU host, in one module run."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: accel_host_facts
short_description: Read what kube-accel's plan checks need of a GPU host, in one module run
description:
  - Gathers the host's NVIDIA GPUs exactly as M(kube_accel.gpu.nvidia_gpu_facts) does (the C(nvidia_gpus) fact), and
    in the same run what the plan rules read of the host itself, RV(host) - its OS from C(/etc/os-release), the
    record of a MIG geometry kube-accel put there (O(mig_records)), and with O(runtime=true) its cgroup hierarchy and
    containerd version.
  - The preflight runs on every host of every play; one module run per host, instead of one per file, keeps that
    cheap on large fleets.
  - Only reads; never changes the host.
version_added: "0.2.0"
author: kube-accel contributors (@kube-accel)
options:
  mig_records:
    description:
      - Files whose presence says kube-accel put a MIG geometry on the host (roles/mig's record and mig-parted
        config); RV(host.mig_record) is the first that exists.
    type: list
    elements: path
    default: []
  runtime:
    description:
      - Also read the host runtime (cgroup v1 or v2, C(containerd --version)); the plan checks it for gpu-manager and
        dra pools only.
    type: bool
    default: false
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
  - A snapshot that cannot be read fails the module with its cause; RV(host) is still returned.
requirements:
  - nvidia-ml-py (pynvml) on the managed host for real GPUs
"""

EXAMPLES = r"""
- name: Read the host for the plan checks (a lab host, NVML from a snapshot kept on the controller)
  kube_accel.gpu.accel_host_facts:
    snapshot_data: "{{ lookup('ansible.builtin.file', accel_nvml_snapshot) | from_json }}"
    mig_records: [/etc/kube-accel/mig-geometry, /etc/kube-accel/mig-parted.yaml]
    runtime: true
  register: host_facts

- name: Show the OS and the containerd version
  ansible.builtin.debug:
    msg: "{{ host_facts.host.os_release }} {{ host_facts.host.runtime.containerd_version }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: success
  type: dict
  contains:
    nvidia_gpus:
      description: The host's NVIDIA GPUs, the same dict as M(kube_accel.gpu.nvidia_gpu_facts) sets.
      returned: success
      type: dict
host:
  description: What the plan rules read of the host itself.
  returned: always
  type: dict
  contains:
    os_release:
      description: C(ID) and C(VERSION_ID) of C(/etc/os-release); empty when it cannot be read.
      type: dict
      sample: {id: debian, version_id: "12"}
    mig_record:
      description: The first of O(mig_records) that exists; null when none does.
      type: str
      sample: /etc/kube-accel/mig-geometry
    runtime:
      description: With O(runtime=true), the host runtime; null otherwise.
      type: dict
      sample: {cgroup_version: 2, containerd_version: "2.1.4"}
      contains:
        cgroup_version:
          description: 2 when C(/sys/fs/cgroup/cgroup.controllers) exists, else 1.
          type: int
        containerd_version:
          description: The version C(containerd --version) prints; null when containerd is absent or fails.
          type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kube_accel.gpu.plugins.module_utils.host.gpu_facts import (
    SOURCE_OPTIONS,
    SnapshotError,
    gather_for_module,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.host.system_facts import gather_host


def run_module():
    module = AnsibleModule(
        argument_spec={**SOURCE_OPTIONS,
                       "mig_records": {"type": "list", "elements": "path", "default": []},
                       "runtime": {"type": "bool", "default": False}},
        mutually_exclusive=[("snapshot", "snapshot_data")],
        supports_check_mode=True,
    )

    def containerd():
        binary = module.get_bin_path("containerd")
        if not binary:
            return None
        rc, out, dummy = module.run_command([binary, "--version"])
        return out if rc == 0 else None

    host = gather_host(module.params["mig_records"], containerd if module.params["runtime"] else None)
    try:
        gpus = gather_for_module(module.params)
    except SnapshotError as exc:
        module.fail_json(msg=str(exc), host=host)
    module.exit_json(changed=False, host=host, ansible_facts={"nvidia_gpus": gpus})


def main():
    run_module()


if __name__ == "__main__":
    main()
