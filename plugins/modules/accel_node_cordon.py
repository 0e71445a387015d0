#!/usr/bin/python
# Copyright: kube-accel contributors
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
---
module: accel_node_cordon
short_description: Cordon and uncordon nodes for maintenance, owning only the cordons kube-accel took
description:
  - O(state=cordoned) cordons a schedulable node and annotates it C(kube-accel.io/cordoned-by) with this run's
    holder identity, the reason and the time. A node already cordoned by kube-accel (this run or one that died) is
    left as it is and reported (RV(earlier) when another run took it); a node cordoned by someone else (no
    annotation) is left alone and reported as RV(owner=other).
  - O(state=uncordoned) lifts only a cordon kube-accel holds (the annotation, whichever run wrote it), removes the
    annotation and writes C(kube-accel.io/last-maintenance) (who, why, when, O(checks)). A node cordoned by someone
    else stays cordoned.
  - O(state=query) reads O(names) and returns, per node, whether it exists and who holds its cordon; it never
    writes. When no kubeconfig can be found (O(kubeconfig) names a missing file, or none is configured) it returns
    RV(cluster=false) instead of failing, so that hosts which are not cluster nodes can be provisioned without one.
  - Writes carry the resourceVersion they were decided on; a node changed in between is read and decided again.
  - A missing node is not an error (a host not yet in the cluster); RV(found) says so.
version_added: "0.1.0"
author: kube-accel contributors (@kube-accel)
options:
  name:
    description: Node name (O(state=cordoned) or O(state=uncordoned)).
    type: str
  names:
    description: Node names to look up (O(state=query)).
    type: list
    elements: str
    default: []
  state:
    description: V(cordoned), V(uncordoned) or V(query).
    type: str
    choices: [cordoned, uncordoned, query]
    default: cordoned
  reason:
    description: Why the node is cordoned (recorded in the annotation).
    type: str
    default: kube-accel maintenance
  holder:
    description: Who cordons; default C(user@host pid N started TIME) of the ansible-playbook process.
    type: str
  checks:
    description: What the checks before the uncordon found (recorded in C(kube-accel.io/last-maintenance)).
    type: dict
  planned_cordon:
    description:
      - The registered result of this run's O(state=cordoned) task. Only read in check mode, where that cordon was
        not written, so that the uncordon reports what a real run would do.
    type: dict
extends_documentation_fragment:
  - kube_accel.gpu.kube_client
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    description: Reads the node and reports the change it would make; writes nothing.
  diff_mode:
    support: full
    description: C(spec.unschedulable) and kube-accel's two annotations, before and after.
  platform:
    support: full
    platforms: posix
requirements:
  - kubernetes (Python client)
seealso:
  - module: kubernetes.core.k8s_drain
"""

EXAMPLES = r"""
- name: Cordon the node for kube-accel
  kube_accel.gpu.accel_node_cordon:
    name: gpu-a30-01
    reason: "host roles: /etc/modprobe.d/kube-accel-blacklist-nouveau.conf changed"
    kubeconfig: "{{ accel_kubeconfig }}"
  register: cordon

- name: Return it to service (only if kube-accel cordoned it)
  kube_accel.gpu.accel_node_cordon:
    name: gpu-a30-01
    state: uncordoned
    checks: {gpus: "4 GPU(s), driver 550.54.15"}
    kubeconfig: "{{ accel_kubeconfig }}"
"""

RETURN = r"""
found:
  description: Whether the node exists (O(state=cordoned), O(state=uncordoned)).
  returned: state is cordoned or uncordoned
  type: bool
owner:
  description: Who holds the node's cordon after the task (C(kube-accel), C(other) or null when schedulable).
  returned: state is cordoned or uncordoned
  type: str
cordoned:
  description: Whether this task cordoned the node.
  returned: state=cordoned
  type: bool
uncordoned:
  description: Whether this task returned the node to service.
  returned: state=uncordoned
  type: bool
record:
  description: kube-accel's cordon record (holder, reason, cordoned_at; uncordoned_at and checks once lifted).
  returned: when kube-accel holds or held the cordon
  type: dict
earlier:
  description: The record of a cordon another kube-accel run took (a run that died before returning the node).
  returned: when found
  type: dict
nodes:
  description:
    - Per name, C(found), C(unschedulable), C(owner), C(record) and C(mig_config) (the node's C(nvidia.com/mig.config)
      label, null without).
  returned: state=query
  type: dict
cluster:
  description: Whether a kubeconfig was found (O(state=query)); false means no node was looked up.
  returned: state=query
  type: bool
"""

import json
import os
import traceback

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kube_accel.gpu.plugins.module_utils.cluster.client import (
    KUBE_ARGUMENT_SPEC,
    api_client,
    api_error,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.cluster.lease import default_holder, find_playbook_pid
from ansible_collections.kube_accel.gpu.plugins.module_utils.cluster.maintenance import (
    ConflictError,
    converge,
    lookup,
    plan_cordon,
    plan_uncordon,
    planned_cordon,
    utcnow,
)


def kubeconfig_missing(module) -> str | None:
    """Why no cluster can be reached for a query, or None when a kubeconfig is there."""
    path = module.params["kubeconfig"]
    if path:
        return None if os.path.exists(path) else f"kubeconfig {path} not found"
    # The client's own default: the first file of $KUBECONFIG, else ~/.kube/config.
    home_config = os.path.join(os.environ.get("HOME", "/"), ".kube", "config")
    default = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or home_config
    if os.path.exists(default) or os.environ.get("KUBERNETES_SERVICE_HOST"):
        return None
    return f"no kubeconfig given and none at {default}"


def main():
    module = AnsibleModule(
        argument_spec={
            **KUBE_ARGUMENT_SPEC,
            "name": {"type": "str"},
            "names": {"type": "list", "elements": "str", "default": []},
            "state": {"type": "str", "choices": ["cordoned", "uncordoned", "query"], "default": "cordoned"},
            "reason": {"type": "str", "default": "kube-accel maintenance"},
            "holder": {"type": "str"},
            "checks": {"type": "dict"},
            "planned_cordon": {"type": "dict"},
        },
        required_if=[("state", "cordoned", ["name"]), ("state", "uncordoned", ["name"])],
        supports_check_mode=True,
    )
    p = module.params
    if p["state"] == "query":
        missing = kubeconfig_missing(module)
        if missing:
            module.exit_json(changed=False, cluster=False, nodes={}, msg=missing)
        if not p["names"]:
            module.exit_json(changed=False, cluster=True, nodes={})
    api = api_client(module)  # fails with a clear message when the kubernetes client is missing
    from kubernetes import client  # noqa: PLC0415 - optional dependency, checked by api_client
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    core = client.CoreV1Api(api)

    def read(name: str) -> dict | None:
        try:
            return json.loads(core.read_node(name, _preload_content=False).data)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def write(name: str, patch: dict) -> dict:
        try:
            return json.loads(core.patch_node(name, patch, _preload_content=False).data)
        except ApiException as exc:
            if exc.status == 409:
                raise ConflictError(str(exc.reason)) from exc
            raise

    try:
        if p["state"] == "query":
            module.exit_json(changed=False, cluster=True, nodes=lookup(read, p["names"]))
        name, now = p["name"], utcnow()
        if p["state"] == "cordoned":
            holder = p["holder"] or default_holder(find_playbook_pid())
            result = converge(
                lambda: read(name),
                lambda patch: write(name, patch),
                lambda node: plan_cordon(node, holder, p["reason"], now),
                module.check_mode,
            )
        else:

            def reader():
                node = read(name)
                return planned_cordon(node, p["planned_cordon"]) if module.check_mode else node

            result = converge(
                reader,
                lambda patch: write(name, patch),
                lambda node: plan_uncordon(node, p["checks"], now),
                module.check_mode,
            )
    except ApiException as exc:
        module.fail_json(msg=api_error(f"node {p['name'] or p['names']}", exc))
    except ConflictError as exc:
        module.fail_json(msg=f"node {p['name']}: {exc}")
    except Exception as exc:  # noqa: BLE001 - an unreachable API server is reported, never a traceback
        module.fail_json(
            msg=f"node {p['name'] or p['names']}: cannot reach the API server: {exc}", exception=traceback.format_exc()
        )
    diff = result.pop("diff")
    if module._diff:
        result["diff"] = diff
    module.exit_json(**result)


if __name__ == "__main__":
    main()
