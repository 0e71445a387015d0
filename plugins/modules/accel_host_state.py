#!/usr/bin/python
# Copyright: kube-accel contributors
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
---
module: accel_host_state
short_description: Record a GPU host's state after a full run of the host roles, and compare with it later
description:
  - O(action=check) reads the record a full run left and tells whether the host still matches it, that is the
    same inputs digest (variables, facts, computed by the caller), the same O(code) digest and the same digest of
    every watched path (content, mode, owner, link target) and of the entry names of O(watch_names), read now. It
    changes nothing. RV(probe) tells a record that cannot decide alone, one that differs in O(code) alone (a
    kube-accel upgrade, nothing else) or that an earlier kube-accel version wrote (record version 1, whose digests
    mean something else); the caller then asks the roles in check mode.
  - O(action=record) writes that record. It changes the record file only when the record differs.
  - The host play uses both for its fast path; see roles/host_state.
version_added: "0.1.0"
author: kube-accel contributors (@kube-accel)
options:
  action:
    description: C(check) compares; C(record) writes the record.
    type: str
    choices: [check, record]
    required: true
  path:
    description: The record file.
    type: path
    default: /var/lib/kube-accel/host-state.json
  inputs:
    description: Digest of the host's variables and facts that decide what the roles do.
    type: str
    required: true
  code:
    description: Digest of kube-accel's code (host roles, modules, host play); kept apart from O(inputs).
    type: str
    default: ""
  watch:
    description: Files and directories (walked whole) whose content, mode, owner and link targets are digested.
    type: list
    elements: path
    default: []
  watch_names:
    description: Directories of which only the entry names are digested (their files change by themselves).
    type: list
    elements: path
    default: []
  reboot_required:
    description: O(action=record) only. Reboot reasons still pending; O(action=check) returns them again.
    type: list
    elements: str
    default: []
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
"""

EXAMPLES = r"""
- name: Compare the host with its last full run
  kube_accel.gpu.accel_host_state:
    action: check
    inputs: "{{ host_state_inputs }}"
    code: "{{ host_state_code_digest }}"
    watch: [/etc/modprobe.d, /var/lib/dpkg/status, /proc/cmdline]
    watch_names: [/sys/module]
  register: host_state_check

- name: Record the host after a full run
  kube_accel.gpu.accel_host_state:
    action: record
    inputs: "{{ host_state_inputs }}"
    code: "{{ host_state_code_digest }}"
    watch: [/etc/modprobe.d, /var/lib/dpkg/status, /proc/cmdline]
    watch_names: [/sys/module]
    reboot_required: "{{ accel_reboot_required }}"
"""

RETURN = r"""
current:
  description: O(action=check) - whether inputs and host state match the record.
  returned: always
  type: bool
reason:
  description: Why the host is or is not current (the first differing path, when one differs).
  returned: always
  type: str
probe:
  description: >-
    O(action=check) - the record differs from now in the O(code) digest alone, or is an earlier version's record:
    whether the host changes is for the roles in check mode to say.
  returned: always
  type: bool
reboot_required:
  description: O(action=check) - the reboot reasons the record keeps (empty unless current or RV(probe)).
  returned: always
  type: list
  elements: str
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kube_accel.gpu.plugins.module_utils.host.state import check, record, state


def read(path):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (FileNotFoundError, ValueError):
        return None  # no record, or a damaged one: both mean a full run


def main():
    module = AnsibleModule(
        argument_spec={
            "action": {"type": "str", "choices": ["check", "record"], "required": True},
            "path": {"type": "path", "default": "/var/lib/kube-accel/host-state.json"},
            "inputs": {"type": "str", "required": True},
            "code": {"type": "str", "default": ""},
            "watch": {"type": "list", "elements": "path", "default": []},
            "watch_names": {"type": "list", "elements": "path", "default": []},
            "reboot_required": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    saved = read(p["path"])
    now = state(p["watch"], p["watch_names"])
    if p["action"] == "check":
        current, reason, probe = check(saved, p["inputs"], now, p["code"])
        # probe: the last full run's reboot reasons are still pending (a probed host starts from them).
        module.exit_json(changed=False, current=current, reason=reason, probe=probe,
                         reboot_required=(saved or {}).get("reboot_required", []) if current or probe else [])
    new = record(p["inputs"], now, p["reboot_required"], p["code"])
    changed = new != saved
    result = {"changed": changed, "current": True, "probe": False,
              "reason": "recorded" if changed else "record up to date", "reboot_required": p["reboot_required"]}
    if module._diff and changed:
        # The digests, not the whole state: enough to see what moved.
        result["diff"] = {
            "before": {k: (saved or {}).get(k) for k in ("inputs", "code", "state_digest", "reboot_required")},
            "after": {k: new[k] for k in ("inputs", "code", "state_digest", "reboot_required")},
        }
    if changed and not module.check_mode:
        os.makedirs(os.path.dirname(p["path"]), mode=0o755, exist_ok=True)
        tmp = f"{p['path']}.tmp"
        with open(tmp, "w") as fh:
            json.dump(new, fh, sort_keys=True)
        os.chmod(tmp, 0o600)
        module.atomic_move(tmp, p["path"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
