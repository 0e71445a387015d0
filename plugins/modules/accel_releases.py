#!/usr/bin/python
# Copyright: kube-accel contributors
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
---
module: accel_releases
short_description: Install or upgrade several Helm releases side by side, each as accel_release does
description:
  - Runs what M(kube_accel.gpu.accel_release) does with C(state=present) for every release in O(releases), up to O(parallel) at
    once. Values are checked against the chart's C(values.schema.json); C(helm upgrade --install) with wait and
    automatic rollback runs only when the release differs from the deployed one; a failed release is rolled back to
    its last good revision first; a pending release whose operation is provably dead is recovered first (as
    M(kube_accel.gpu.accel_release) does).
  - One module run for all releases, so helm is located and its version read once, and the releases' renders
    and rollouts overlap instead of adding up.
  - A release that fails does not stop the others; the module then fails naming every failed release, and returns
    the results of the ones that went through.
  - Runs helm on the host it executes on; local charts are read there.
version_added: "0.1.0"
author: kube-accel contributors (@kube-accel)
options:
  releases:
    description:
      - Each release is a mapping with C(name) and C(chart) (as for M(kube_accel.gpu.accel_release)), and optionally C(values)
        (a mapping), C(chart_version), C(namespace) (default O(namespace)) and C(timeout) (default O(timeout)).
      - Other keys are ignored, so the output of the C(accel_releases) filter can be passed as it is.
    type: list
    elements: dict
    required: true
  namespace:
    description: Namespace of the releases that do not name one.
    type: str
    default: kube-accel
  parallel:
    description: How many releases are installed or upgraded at once.
    type: int
    default: 4
  helm_binary:
    description:
      - The helm to run. A bare name is looked up on C(PATH), then in C(~/.cache/kube-accel/bin).
    type: str
    default: helm
  wait:
    description: Wait until each release's resources are ready (helm 3 C(--wait), helm 4 C(--wait=watcher)).
    type: bool
    default: true
  timeout:
    description: How long helm waits for each release that names no C(timeout), as a Go duration (C(90s), C(5m), C(1h30m)).
    type: str
    default: 5m
  atomic:
    description: Roll a release back automatically when its upgrade fails or times out; implies waiting.
    type: bool
    default: true
  create_namespace:
    description: Create a release namespace that does not exist.
    type: bool
    default: true
  validate_schema:
    description: Validate each release's values against its chart's C(values.schema.json) before calling helm.
    type: bool
    default: true
  run_lock_name:
    description:
      - Lease of kube-accel's run lock (M(kube_accel.gpu.accel_run_lock)), read when a release is found pending; a pending release
        is recovered only when no other live run holds it and the pending revision is older than O(timeout).
    type: str
    default: kube-accel-run
  run_lock_namespace:
    description: Namespace of that Lease; default O(namespace).
    type: str
  run_lock_holder:
    description:
      - Holder identity of this run when it holds the run lock (the C(holder) that M(kube_accel.gpu.accel_run_lock) returns), so
        its own lock does not count as another run's.
    type: str
extends_documentation_fragment:
  - kube_accel.gpu.kube_client
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    description: Nothing is changed; C(changed) and each release's C(changes) and C(command) say what would be done.
  diff_mode:
    support: full
    description: The values and manifest diffs of every release that changes, one after the other.
  platform:
    support: full
    platforms: posix
requirements:
  - helm 3 (>= 3.13 for C(--dry-run=server)) or helm 4
  - jsonschema (when O(validate_schema=true))
notes:
  - To remove a release, use M(kube_accel.gpu.accel_release) with C(state=absent).
seealso:
  - module: kube_accel.gpu.accel_release"""

EXAMPLES = r"""
- name: Install the pool charts, one release per mode, side by side
  kube_accel.gpu.accel_releases:
    releases:
      - name: kube-accel-pgpu
        chart: "{{ playbook_dir }}/../charts/pgpu"
        values: {pools: [train]}
      - name: kube-accel-mps
        chart: "{{ playbook_dir }}/../charts/mps"
        values: {pools: [batch-mps]}
    kubeconfig: /etc/kubernetes/admin.conf
    timeout: 5m
"""

RETURN = r"""
releases:
  description:
    - Release name -> what M(kube_accel.gpu.accel_release) returns for it (C(revision), C(status), C(chart), C(app_version),
      C(objects), C(changes), C(changed), and C(command), C(rollback_command), C(rolled_back_to), C(recovered),
      C(rendered) when they apply).
    - On failure, only the releases that went through.
  returned: always
  type: dict
  sample: {"kube-accel-mps": {"changed": false, "revision": 3, "status": "deployed", "chart": "mps-0.1.0"}}
failed_releases:
  description: Release name -> C(msg), C(stderr) and C(command) of its failure.
  returned: failure, when releases failed
  type: dict
helm_version:
  description: Version of the helm binary used.
  returned: always
  type: str
  sample: 3.21.4
diff:
  description: Values (YAML) and manifest diffs, deployed vs desired, of every release that changes.
  returned: diff mode, when changed
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.kube_accel.gpu.plugins.module_utils.cluster.client import KUBE_ARGUMENT_SPEC
from ansible_collections.kube_accel.gpu.plugins.module_utils.cluster.lease import (
    RUN_LOCK_ARGUMENT_SPEC,
    release_lock_check,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.common.pyyaml import YAML_IMPORT_ERROR
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm.client import module_helm
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm.errors import HelmError
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm.release import ensure_each_present, release_specs


def failure_details(error) -> dict:
    details = {"msg": error.msg, "stderr": error.stderr}
    if error.command:
        details["command"] = error.command
    details.update(error.extra)
    return details


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "releases": {"type": "list", "elements": "dict", "required": True},
            "namespace": {"type": "str", "default": "kube-accel"},
            "parallel": {"type": "int", "default": 4},
            **KUBE_ARGUMENT_SPEC,
            "helm_binary": {"type": "str", "default": "helm"},
            "wait": {"type": "bool", "default": True},
            "timeout": {"type": "str", "default": "5m"},
            "atomic": {"type": "bool", "default": True},
            "create_namespace": {"type": "bool", "default": True},
            "validate_schema": {"type": "bool", "default": True},
            **RUN_LOCK_ARGUMENT_SPEC,
        },
        supports_check_mode=True,
    )
    if YAML_IMPORT_ERROR:
        module.fail_json(msg=missing_required_lib("PyYAML"), exception=YAML_IMPORT_ERROR)
    p = module.params
    if p["parallel"] < 1:
        module.fail_json(msg=f"parallel must be at least 1, not {p['parallel']}")

    try:
        helm = module_helm(module, p["validate_schema"])
        specs = release_specs(p["releases"], namespace=p["namespace"], wait=p["wait"], timeout=p["timeout"],
                              atomic=p["atomic"], create_namespace=p["create_namespace"])
    except HelmError as exc:
        module.fail_json(**failure_details(exc))
    results, failures = ensure_each_present(helm, specs, check_mode=module.check_mode, diff_mode=module._diff,
                                            validate=p["validate_schema"], workers=p["parallel"],
                                            run_lock=release_lock_check(p))
    diffs = [entry for name in results for entry in results[name].pop("diff", [])]
    for result in results.values():
        result.setdefault("changes", [])
        result.setdefault("objects", [])
    out = {
        "changed": any(r.get("changed") for r in results.values()),
        "releases": results,
        "helm_version": ".".join(map(str, helm.version)),
    }
    if diffs:
        out["diff"] = diffs
    if failures:
        module.fail_json(
            msg="; ".join(f"release {name}: {error.msg}" for name, error in failures.items()),
            failed_releases={name: failure_details(error) for name, error in failures.items()},
            **out,
        )
    module.exit_json(**out)


if __name__ == "__main__":
    main()
