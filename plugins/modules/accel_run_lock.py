#!/usr/bin/python
# Copyright: kube-accel contributors
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
---
module: accel_run_lock
short_description: One kube-accel run at a time, with a coordination.k8s.io/v1 Lease in the cluster
description:
  - O(state=present) takes the Lease O(namespace)/O(name) for this run, or fails at once naming the run that holds
    it (C(user@host pid N started TIME)); with O(wait) it waits up to that many seconds for the lease to be
    released or to expire.
  - The holder identity is that of the ansible-playbook process the module runs under (found among its ancestors,
    so the module must run on the controller or, as in the lab, on a cluster host that is the controller).
  - After taking the lease it starts a detached renewer that writes C(renewTime) every O(renew_interval) seconds
    while that ansible-playbook process lives, and releases the lease when the process ends however it ends
    (success, failed play, Ctrl-C, kill). If the renewer itself dies (or the controller or its network), the lease
    is no longer renewed and expires O(lease_duration) seconds (C(leaseDurationSeconds)) after its last renewal;
    the next run then takes it over and says so (RV(previous_holder)).
  - When no ansible-playbook process is an ancestor (the module reached a host over ssh), the renewer renews until
    the lease is released or for at most O(max_hold) seconds.
  - A renewer that cannot reach the API server for longer than O(lease_duration) stops, since the lease has lapsed by
    then and may be another run's.
  - O(state=absent) releases the lease if this run holds it (the Lease object stays, without a holder).
  - An expired lease is taken over with an optimistic write (resourceVersion), so two runs racing for it cannot
    both win.
version_added: "0.1.0"
author: kube-accel contributors (@kube-accel)
options:
  name:
    description: Name of the Lease.
    type: str
    default: kube-accel-run
  namespace:
    description: Namespace of the Lease (kube-accel's, C(accel_namespace)); created when missing.
    type: str
    default: kube-accel
  state:
    description: V(present) takes the lock, V(absent) releases it.
    type: str
    choices: [present, absent]
    default: present
  holder:
    description:
      - Holder identity to take or release the lock as. Default C(user@host pid N started TIME) of the
        ansible-playbook process (of the module when there is none).
    type: str
  wait:
    description: Seconds to wait for a lock held by another run before failing; 0 fails at once.
    type: int
    default: 0
  lease_duration:
    description: C(leaseDurationSeconds) written in the Lease; how long a holder that stopped renewing keeps it.
    type: int
    default: 60
  renew_interval:
    description: Seconds between renewals; default a third of O(lease_duration).
    type: int
  renew:
    description: Start the background renewer after taking the lock.
    type: bool
    default: true
  max_hold:
    description: Seconds the renewer renews at most when it has no ansible-playbook process to watch.
    type: int
    default: 14400
extends_documentation_fragment:
  - kube_accel.gpu.kube_client
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    description: Reads the Lease and fails the same way when another run holds it; writes nothing, starts no renewer.
  diff_mode:
    support: none
  platform:
    support: full
    platforms: posix
requirements:
  - kubernetes (Python client)
notes:
  - Holder liveness is judged from the Lease's C(renewTime) against this host's clock.
seealso:
  - module: kube_accel.gpu.accel_release"""

EXAMPLES = r"""
- name: One kube-accel run at a time
  kube_accel.gpu.accel_run_lock:
    namespace: "{{ accel_namespace | default('kube-accel') }}"
    kubeconfig: "{{ accel_kubeconfig }}"
    wait: "{{ accel_run_lock_wait | default(0) }}"
  register: run_lock

- name: Release the run lock
  kube_accel.gpu.accel_run_lock:
    state: absent
    holder: "{{ run_lock.holder }}"
    kubeconfig: "{{ accel_kubeconfig }}"
"""

RETURN = r"""
holder:
  description: The holder identity this run took (or released) the lock as.
  returned: always
  type: str
  sample: ops@ctl-1 pid 41237 started 2026-11-23T17:26:05Z
found:
  description: What the Lease was before (C(absent), C(free), C(ours), C(expired)).
  returned: state=present
  type: str
  sample: free
previous_holder:
  description: Holder of an expired lease that was taken over (its renewer died).
  returned: when an expired lease was taken over
  type: str
lease:
  description: Namespace and name of the Lease, and its duration.
  returned: always
  type: dict
  sample: {"namespace": "kube-accel", "name": "kube-accel-run", "lease_duration": 60}
owner_pid:
  description: The ansible-playbook process the renewer watches (null when none was found).
  returned: state=present
  type: int
renewer_pid:
  description: PID of the detached renewer started on this host.
  returned: when a renewer was started
  type: int
"""

import sys
import traceback

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kube_accel.gpu.plugins.module_utils.cluster.client import KUBE_ARGUMENT_SPEC, api_client
from ansible_collections.kube_accel.gpu.plugins.module_utils.cluster.lease import (
    LEASE_NAME,
    LeaseClient,
    LeaseError,
    acquire,
    default_holder,
    find_playbook_pid,
    owner_start_ticks,
    release,
    spawn_renewer,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "default": LEASE_NAME},
            "namespace": {"type": "str", "default": "kube-accel"},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "holder": {"type": "str"},
            "wait": {"type": "int", "default": 0},
            "lease_duration": {"type": "int", "default": 60},
            "renew_interval": {"type": "int"},
            "renew": {"type": "bool", "default": True},
            "max_hold": {"type": "int", "default": 14400},
            **KUBE_ARGUMENT_SPEC,
        },
        supports_check_mode=True,
    )
    p = module.params
    if p["lease_duration"] < 2:
        module.fail_json(msg=f"lease_duration must be at least 2 seconds, not {p['lease_duration']}")
    interval = p["renew_interval"] or max(1, p["lease_duration"] // 3)
    if not 0 < interval < p["lease_duration"]:
        module.fail_json(msg=f"renew_interval {interval} must be between 1 and lease_duration - 1")
    owner = find_playbook_pid()
    holder = p["holder"] or default_holder(owner)
    out = {
        "holder": holder,
        "lease": {"namespace": p["namespace"], "name": p["name"], "lease_duration": p["lease_duration"]},
    }
    try:
        client = LeaseClient(api_client(module), p["namespace"], p["name"])
        if p["state"] == "absent":
            out.update(changed=release(client, holder, check_mode=module.check_mode)["changed"])
            module.exit_json(**out)
        if not module.check_mode:
            client.ensure_namespace()
        taken = acquire(client, holder, p["lease_duration"], max(0, p["wait"]), check_mode=module.check_mode)
    except LeaseError as exc:
        module.fail_json(msg=str(exc), **out)
    except Exception as exc:  # noqa: BLE001 - API and connection errors read as one message
        module.fail_json(msg=f"run lock {p['namespace']}/{p['name']}: cannot reach the cluster or write the "
                             f"Lease: {exc}", exception=traceback.format_exc(), **out)
    out.update(changed=taken["changed"], found=taken["state"], owner_pid=owner)
    if "previous_holder" in taken:
        out["previous_holder"] = taken["previous_holder"]
        module.warn(f"took over the expired run lock of {taken['previous_holder']} (it stopped renewing)")
    if p["renew"] and not module.check_mode and taken["state"] != "ours":
        out["renewer_pid"] = spawn_renewer(sys.executable, {
            "kubeconfig": p["kubeconfig"],  # type path: already expanded
            "context": p["context"],
            "namespace": p["namespace"],
            "name": p["name"],
            "holder": holder,
            "interval": interval,
            "duration": p["lease_duration"],
            "owner_pid": owner,
            "owner_start_ticks": owner_start_ticks(owner) if owner else None,
            "max_hold": p["max_hold"],
        })
    module.exit_json(**out)


if __name__ == "__main__":
    main()
