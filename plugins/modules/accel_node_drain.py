#!/usr/bin/python
# Copyright: kube-accel contributors
# Apache License 2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: accel_node_drain
short_description: Evict a cordoned node's pods as kubectl drain does, leaving DaemonSet pods alone
description:
  - Lists the pods bound to O(name) and decides, in C(kubectl drain)'s order, which to evict. DaemonSet-managed pods
    and mirror (static) pods stay; pods with emptyDir data are evicted only with O(delete_emptydir_data), pods that
    declare no controller only with O(force); finished pods always go. Any refused pod fails the task before
    anything is evicted.
  - Each pod is evicted through the policy/v1 Eviction API, so PodDisruptionBudgets are honoured. An eviction a budget
    refuses (HTTP 429) is asked again every 5 seconds until O(timeout). With O(disable_eviction) the pods are deleted
    instead.
  - Each pod keeps its own terminationGracePeriodSeconds unless O(grace_period) is set.
  - The task then waits until every evicted pod is gone and fails, naming them, if some are still there after
    O(timeout) seconds.
  - Unlike kubernetes.core.k8s_drain, a DaemonSet pod with an emptyDir volume is not deleted
    (ansible-collections/kubernetes.core#622).
  - With O(replace_outdated_on_delete), once the node is drained, the pods of DaemonSets that update C(OnDelete)
    and run an older template than their DaemonSet's newest are deleted, and the task waits until they are gone (their
    DaemonSet starts the current template at once). kube-accel's MPS control daemon is one; its clients were just
    evicted, so no MPS server quits under them.
  - Cordoning is not part of it. kube_accel.gpu.accel_node_cordon cordons the node first, and owns that cordon.
version_added: "0.2.0"
author: kube-accel contributors (@kube-accel)
options:
  name:
    description: The node to drain.
    type: str
    required: true
  force:
    description: Also evict pods that declare no controller (they are not recreated anywhere).
    type: bool
    default: false
  delete_emptydir_data:
    description: Also evict pods with emptyDir volumes (their data is lost).
    type: bool
    default: true
  ignore_daemonsets:
    description: Leave DaemonSet-managed pods in place. With V(false), a node running one fails the task.
    type: bool
    default: true
  disable_eviction:
    description: Delete the pods instead of evicting them, bypassing PodDisruptionBudgets.
    type: bool
    default: false
  grace_period:
    description:
      - Seconds each pod gets to stop, in place of its own terminationGracePeriodSeconds.
      - Unset, each pod's own.
    type: int
  timeout:
    description: Seconds for the evictions and the wait together.
    type: int
    default: 360
  replace_outdated_on_delete:
    description: Once drained, replace the node's out-of-date pods of DaemonSets that update C(OnDelete).
    type: bool
    default: true
extends_documentation_fragment:
  - kube_accel.gpu.kube_client
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    description: Lists the pods and reports which it would evict, and what it would refuse; evicts nothing.
  diff_mode:
    support: full
    description: The node's pods that a drain moves, before and after.
  platform:
    support: full
    platforms: posix
requirements:
  - kubernetes (Python client)
seealso:
  - module: kube_accel.gpu.accel_node_cordon
  - module: kubernetes.core.k8s_drain
"""

EXAMPLES = r"""
- name: Cordon the node for kube-accel
  kube_accel.gpu.accel_node_cordon:
    name: gpu-a30-01
    reason: "pool mps -> timeslice"
- name: Drain it (each pod with its own grace period)
  kube_accel.gpu.accel_node_drain:
    name: gpu-a30-01
    timeout: 600
"""

RETURN = r"""
found:
  description: Whether the node exists. A missing node is not an error (nothing to drain).
  returned: always
  type: bool
evicted:
  description: The pods evicted (C(namespace/name)); in check mode, those a drain would evict.
  returned: always
  type: list
  elements: str
skipped:
  description: Pods left on the node, by why (C(DaemonSet-managed), C(mirror (static) pod)).
  returned: always
  type: dict
replaced:
  description: Out-of-date C(OnDelete) DaemonSet pods deleted once the node was drained (C(namespace/name)).
  returned: always
  type: list
  elements: str
"""

import json
import traceback

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kube_accel.gpu.plugins.module_utils.cluster.client import (
    KUBE_ARGUMENT_SPEC,
    api_client,
    api_error,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.cluster.drain import (
    Blocked,
    daemonset_namespaces,
    drain,
    newest_revisions,
    outdated_on_delete,
    select_pods,
)


def outdated_pods(apps, pods: list[dict]) -> list[dict]:
    """The node's pods of OnDelete DaemonSets that run an older template than their DaemonSet's newest revision."""
    daemonsets, revisions = {}, []
    for namespace in daemonset_namespaces(pods):
        for ds in json.loads(apps.list_namespaced_daemon_set(namespace, _preload_content=False).data)["items"]:
            daemonsets[ds["metadata"]["uid"]] = ds
        revisions += json.loads(apps.list_namespaced_controller_revision(namespace, _preload_content=False).data)["items"]
    return outdated_on_delete(pods, daemonsets, newest_revisions(revisions))


def main():
    module = AnsibleModule(
        argument_spec={
            **KUBE_ARGUMENT_SPEC,
            "name": {"type": "str", "required": True},
            "force": {"type": "bool", "default": False},
            "delete_emptydir_data": {"type": "bool", "default": True},
            "ignore_daemonsets": {"type": "bool", "default": True},
            "disable_eviction": {"type": "bool", "default": False},
            "grace_period": {"type": "int"},
            "timeout": {"type": "int", "default": 360},
            "replace_outdated_on_delete": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    name = p["name"]
    if p["grace_period"] is not None and p["grace_period"] < 0:
        module.fail_json(msg=f"grace_period: {p['grace_period']} is negative; give seconds (0 or more) or leave it unset")
    api = api_client(module)
    from kubernetes import client  # noqa: PLC0415 - optional dependency, checked by api_client
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    core = client.CoreV1Api(api)
    try:
        try:
            core.read_node(name)
        except ApiException as exc:
            if exc.status == 404:
                module.exit_json(changed=False, found=False, evicted=[], skipped={}, replaced=[])
            raise
        pods = json.loads(core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}",
                                                           _preload_content=False).data)["items"]
        sel = select_pods(pods, force=p["force"], delete_emptydir_data=p["delete_emptydir_data"],
                          ignore_daemonsets=p["ignore_daemonsets"])
        if sel.errors:
            module.fail_json(msg=f"node {name}: not drained, nothing evicted: " + "; ".join(sel.errors),
                             found=True, evicted=[], skipped=sel.skipped, replaced=[])
        evicted = [f"{pod['namespace']}/{pod['name']}" for pod in sel.evict]
        stale = outdated_pods(client.AppsV1Api(api), pods) if p["replace_outdated_on_delete"] else []
        replaced = [f"{pod['namespace']}/{pod['name']}" for pod in stale]
        result = {"changed": bool(evicted or replaced), "found": True, "evicted": evicted, "skipped": sel.skipped,
                  "replaced": replaced}
        if module._diff:
            moved = set(evicted) | set(replaced)
            before = sorted(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}" for pod in pods)
            result["diff"] = {"before": {"pods": before}, "after": {"pods": [r for r in before if r not in moved]}}
        if module.check_mode or not result["changed"]:
            module.exit_json(**result)
        left = drain(core, sel.evict, grace_period=p["grace_period"], timeout=p["timeout"],
                     disable_eviction=p["disable_eviction"])
        if left:
            module.fail_json(msg=f"node {name}: timeout reached after {p['timeout']} s while pods were still there: "
                             + ", ".join(left), **{**result, "changed": True, "replaced": []})
        # Only now, with the clients gone: a DaemonSet pod is deleted, never evicted (its budget is not the tenants').
        left = drain(core, stale, grace_period=p["grace_period"], timeout=p["timeout"], disable_eviction=True)
        if left:
            module.fail_json(msg=f"node {name}: drained, but the out-of-date pods {', '.join(left)} were still there "
                             f"after {p['timeout']} s", **{**result, "changed": True})
        module.exit_json(**result)
    except Blocked as exc:
        module.fail_json(msg=f"node {name}: {exc}", changed=True)
    except ApiException as exc:
        module.fail_json(msg=api_error(f"node {name}", exc))
    except Exception as exc:  # noqa: BLE001 - an unreachable API server is reported, never a traceback
        module.fail_json(msg=f"node {name}: cannot reach the API server: {exc}", exception=traceback.format_exc())


if __name__ == "__main__":
    main()
