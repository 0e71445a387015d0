#!/usr/bin/python
# Copyright: kube-accel contributors
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
---
module: accel_namespaces
short_description: Create and label kube-accel's namespaces for the Pod Security level their pods need
description:
  - Reads each namespace. One that does not exist is created with the C(pod-security.kubernetes.io/enforce),
    C(audit) and C(warn) labels set to the level its pods need; one without an enforce label gets those labels.
  - When a namespace enforces a stricter level than its pods need, the module fails naming every such namespace
    and changes nothing, so the play stops before any chart is installed.
version_added: "0.1.0"
author: kube-accel contributors (@kube-accel)
options:
  namespaces:
    description: Namespace name -> Pod Security level its pods need (C(privileged), C(baseline), C(restricted)).
    type: dict
    required: true
  check_only:
    description: Namespaces of O(namespaces) that are only checked, never created or labelled.
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
    details: The namespaces' labels before and after (an absent namespace shows as none).
  platform:
    support: full
    platforms: posix
requirements:
  - kubernetes (Python client)
"""

EXAMPLES = r"""
- name: Check and label the namespaces before any install
  kube_accel.gpu.accel_namespaces:
    kubeconfig: /etc/kubernetes/admin.conf
    namespaces: {kube-accel: privileged, gpu-operator: privileged}
    check_only: [gpu-operator]
"""

RETURN = r"""
created:
  description: Namespace -> labels of the namespaces created (or that would be in check mode).
  returned: always
  type: dict
labelled:
  description: Namespace -> labels added to existing namespaces.
  returned: always
  type: dict
refused:
  description: Why a namespace's enforced level would refuse kube-accel's pods.
  returned: failure
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kube_accel.gpu.plugins.module_utils.cluster.client import KUBE_ARGUMENT_SPEC, api_client
from ansible_collections.kube_accel.gpu.plugins.module_utils.cluster.pod_security import namespace_manifest, plan

try:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
except ImportError:
    pass  # api_client() reports the missing library


def main():
    module = AnsibleModule(
        argument_spec={
            "namespaces": {"type": "dict", "required": True},
            "check_only": {"type": "list", "elements": "str", "default": []},
            **KUBE_ARGUMENT_SPEC,
        },
        supports_check_mode=True,
    )
    p = module.params
    api = client.CoreV1Api(api_client(module))
    current = {}
    for name in p["namespaces"]:
        try:
            current[name] = dict(api.read_namespace(name).metadata.labels or {})
        except ApiException as exc:
            if exc.status != 404:
                module.fail_json(msg=f"cannot read namespace {name}: {exc.status} {exc.reason}")
            current[name] = None
        except Exception as exc:  # noqa: BLE001 - every failure to reach the API is reported the same way
            module.fail_json(msg=f"cannot reach the cluster ({p['kubeconfig']}): {exc}")
    try:
        create, patch, refused = plan(current, dict(p["namespaces"]), set(p["check_only"]))
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    if refused:
        module.fail_json(msg="Pod Security would refuse kube-accel's pods; nothing was installed: " + "; ".join(refused),
                         refused=refused)
    if not module.check_mode:
        try:
            for name, labels in create.items():
                api.create_namespace(namespace_manifest(name, labels))
            for name, labels in patch.items():
                api.patch_namespace(name, {"metadata": {"labels": labels}})
        except ApiException as exc:
            module.fail_json(msg=f"cannot create or label a namespace: {exc.status} {exc.reason}: {exc.body}")
    result = {"changed": bool(create or patch), "created": create, "labelled": patch}
    if module._diff:
        after = {name: ({**(labels or {}), **patch.get(name, {})} if labels is not None else create.get(name))
                 for name, labels in current.items()}
        result["diff"] = {"before": {n: current[n] for n in sorted(current)},
                          "after": {n: after[n] for n in sorted(after)}}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
