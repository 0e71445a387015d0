#!/usr/bin/python
# Copyright: kube-accel contributors
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
---
module: accel_plan
short_description: Check the whole inventory against kube-accel's model before anything changes
description:
  - >-
    Reads the inventory as Ansible does, on the controller, and checks it against kube-accel's inventory model
    (C(plugins/module_utils/plan/inventory.py)) - every C(accel_*) variable in every group's and host's own variables
    and in extra vars (unknown names, with and without the prefix, with "did you mean"), each GPU host's effective
    values (strict types as written, ranges, choices, the grammar of the file, URL or Kubernetes name each value
    reaches), the cluster settings where the cluster play reads them (C(kube_control_plane[0])), the pool membership
    of every GPU host, settings a pool's mode ignores, lab stand-ins outside the lab, the agreement of a pool's hosts,
    groups whose settings reach no GPU host, and C(group_vars)/C(host_vars) files that name no group or host.
  - >-
    Each value is templated on its own; a template error, an undefined reference or a wrong type in one value is
    reported for that host and variable, with the file and line it came from, and every other host still gets its
    report. Values are never coerced, and messages stay short however large a value is.
  - It only reads and never fails on a bad plan; the preflight role asserts on what it returns. Run it once
    (C(run_once)); it needs no connection to any host.
version_added: "0.2.0"
author: kube-accel contributors (@kube-accel)
options:
  hosts:
    description: The GPU hosts whose plan is checked (the hosts under C(gpu_pools)).
    type: list
    elements: str
    required: true
  cluster_host:
    description: The host the cluster play runs on (C(kube_control_plane[0])), where cluster settings are read.
    type: str
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    description: Only reads.
  diff_mode:
    support: none
  platform:
    platforms: all
    description: Runs on the controller.
"""

EXAMPLES = r"""
- name: Check the inventory against kube-accel's model
  kube_accel.gpu.accel_plan:
    hosts: "{{ groups['gpu_pools'] | default([]) }}"
    cluster_host: "{{ (groups['kube_control_plane'] | default([None]))[0] }}"
  run_once: true
  register: preflight_plan
"""

RETURN = r"""
hosts:
  description: Per GPU host, its problems, the settings that passed (typed as written, to the plan rules), the names
    that failed, and where each setting came from (C(file:line)).
  returned: always
  type: dict
  sample:
    gpu-01:
      problems:
        - "gpu-01: accel_mps_replicas = 4.0 (inventories/x/group_vars/pool_mps.yml:3): the number 4.0, not an integer
          (a decimal point makes it a float); allowed: an integer 2..48"
      settings: {accel_pool: mps, accel_mode: mps}
      invalid: [accel_mps_replicas]
      origins: {accel_pool: "inventories/x/group_vars/pool_mps.yml:1"}
cluster:
  description: Problems of the cluster settings, checked once where the cluster play reads them.
  returned: always
  type: list
  elements: str
inventory:
  description: Problems of the inventory's structure that belong to no GPU host (groups, files).
  returned: always
  type: list
  elements: str
unreached:
  description: The problems of GPU hosts that are not in this play (unreachable, or left out by C(--limit)).
  returned: always
  type: list
  elements: str
"""
