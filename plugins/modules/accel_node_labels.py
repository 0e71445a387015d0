#!/usr/bin/python
# Copyright: kube-accel contributors
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
---
module: accel_node_labels
short_description: Reconcile the labels and taints kube-accel owns on GPU nodes
description:
  - Reads every node in one list call, computes per node the merge patch that sets the desired labels and
    taints and removes managed labels that no longer apply, and sends one patch per node that differs.
  - Labels and taints outside the managed keys are never touched.
  - Cost grows with the number of nodes that change, not with the number of labels; the patches are sent
    16 at a time, and the node list is read as raw JSON, so a no-op run on 1,000 nodes is one list call.
  - When some patches fail, the others are still sent; the module fails listing every node that failed.
version_added: "0.1.0"
author: kube-accel contributors (@kube-accel)
options:
  nodes:
    description: 'Desired state per node name: C(labels) (a dict) and C(taints) (a list of C(key), C(value), C(effect)).'
    type: dict
    required: true
  managed_label_keys:
    description: Label keys kube-accel owns; those a node carries but should not are removed.
    type: list
    elements: str
    required: true
  managed_taint_keys:
    description: Taint keys kube-accel owns.
    type: list
    elements: str
    default: []
  prune_label:
    description:
      - A label key marking nodes kube-accel manages. Nodes that carry it but are not in O(nodes) (taken out
        of every pool) lose all managed labels and taints.
    type: str
  fail_on_missing:
    description: Fail when a node in O(nodes) does not exist in the cluster.
    type: bool
    default: true
  sharing_label_keys:
    description:
      - Label keys that decide how a node shares its GPUs (pool, mode, backend, device-plugin and MIG config). A node
        whose patch changes or removes one it already carries is returned in RV(switching), since its GPU pods hold
        allocations of the old configuration (roles/pool_labels drains it before the real run).
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - kube_accel.gpu.kube_client
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  platform:
    support: full
    platforms: posix
requirements:
  - kubernetes (Python client)
"""

EXAMPLES = r"""
- name: Label the MPS pool
  kube_accel.gpu.accel_node_labels:
    kubeconfig: /etc/kubernetes/admin.conf
    nodes:
      gpu-a30-01:
        labels: {kube-accel.io/pool: batch-mps, nvidia.com/mps.capable: "true"}
        taints: [{key: kube-accel.io/pool, value: batch-mps, effect: NoSchedule}]
    managed_label_keys: [kube-accel.io/pool, nvidia.com/mps.capable]
    managed_taint_keys: [kube-accel.io/pool]
    prune_label: kube-accel.io/managed
"""

RETURN = r"""
patched:
  description: Node name -> merge patch sent (or that would be sent in check mode); on failure, those that succeeded.
  returned: always
  type: dict
failed_nodes:
  description: Node name -> why its patch failed.
  returned: failure, when patches failed
  type: dict
missing:
  description: Nodes named in O(nodes) that the cluster does not have.
  returned: always
  type: list
  elements: str
switching:
  description: Node name -> {label key -> [before, after]} for the O(sharing_label_keys) a patch changes or removes.
  returned: always
  type: dict
  sample: {"gpu-a30-01": {"kube-accel.io/mode": ["mps", "timeslice"]}}
"""

import json

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kube_accel.gpu.plugins.module_utils.cluster.client import KUBE_ARGUMENT_SPEC, api_client
from ansible_collections.kube_accel.gpu.plugins.module_utils.cluster.labels import (
    PATCH_WORKERS,
    diff_of,
    nodes_from_list,
    plan,
    send_patches,
    switching,
)

try:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
except ImportError:
    pass  # api_client() reports the missing library


def describe(error: BaseException) -> str:
    if isinstance(error, ApiException):
        return f"{error.status} {error.reason}: {error.body}"
    return str(error)


def main():
    module = AnsibleModule(
        argument_spec={
            "nodes": {"type": "dict", "required": True},
            "managed_label_keys": {"type": "list", "elements": "str", "required": True, "no_log": False},
            "managed_taint_keys": {"type": "list", "elements": "str", "default": [], "no_log": False},
            "prune_label": {"type": "str"},
            "fail_on_missing": {"type": "bool", "default": True},
            "sharing_label_keys": {"type": "list", "elements": "str", "default": [], "no_log": False},
            **KUBE_ARGUMENT_SPEC,
        },
        supports_check_mode=True,
    )
    p = module.params
    kube = api_client(module, connections=PATCH_WORKERS)
    try:
        api = client.CoreV1Api(kube)
        # Raw JSON: building 1,000 V1Node objects costs more than the API call itself.
        current = nodes_from_list(json.loads(api.list_node(_preload_content=False).data))
    except Exception as exc:  # noqa: BLE001 - every failure to reach the API is reported the same way
        module.fail_json(msg=f"cannot read nodes from the cluster ({p['kubeconfig']}): {exc}")
    desired = dict(p["nodes"])
    if p["prune_label"]:
        for name, node in current.items():
            if p["prune_label"] in node["labels"] and name not in desired:
                desired[name] = {"labels": {}, "taints": []}
    patches, missing = plan(current, desired, set(p["managed_label_keys"]), set(p["managed_taint_keys"]))
    if missing and p["fail_on_missing"]:
        module.fail_json(msg=f"nodes not found in the cluster: {', '.join(missing)}", missing=missing)
    if not module.check_mode:
        failed = send_patches(lambda name, patch: api.patch_node(name, patch, _preload_content=False), patches)
        if failed:
            module.fail_json(
                msg=f"patching {len(failed)} of {len(patches)} nodes failed: "
                + "; ".join(f"{name}: {describe(error)}" for name, error in failed.items()),
                patched={k: v for k, v in patches.items() if k not in failed},
                failed_nodes={name: describe(error) for name, error in failed.items()},
                changed=len(failed) < len(patches),
            )
    result = {"changed": bool(patches), "patched": patches, "missing": missing,
              "switching": switching(current, patches, set(p["sharing_label_keys"]))}
    if module._diff and patches:
        result["diff"] = diff_of(current, patches)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
