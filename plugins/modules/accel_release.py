#!/usr/bin/python
# Copyright: kube-accel contributors
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
---
module: accel_release
short_description: Install, upgrade or remove a Helm release idempotently, without the helm-diff plugin
description:
  - Renders the release values (an optional Jinja2 template plus a dict), validates them against the chart's
    C(values.schema.json) before helm is called, and runs C(helm upgrade --install) with wait and automatic
    rollback only when the desired release differs from the deployed one.
  - The desired release is rendered with C(helm upgrade --install --dry-run=server --output json) and compared
    with C(helm list), C(helm get values) and C(helm get manifest) of the deployed release (chart name and
    version, app version, the user-supplied values and every object of the manifest). A release whose status is
    not C(deployed) (failed, pending) always counts as changed. The server dry run applies none of the chart's
    C(crds/), so on a first install into a cluster without them (the GPU Operator's ClusterPolicy on a fresh cluster)
    it cannot render the chart's custom resources, so the release is rendered with C(helm template) instead (RV(rendered))
    and installed, which applies C(crds/) first.
  - A C(failed) release (an earlier run with O(atomic=false), or a rollback that failed) is first rolled back to
    its last good revision, then upgraded if it still differs. helm 3 patches from the last deployed manifest,
    so without this a field that only the failed revision added would stay on the live objects.
  - A release left C(pending-install), C(pending-upgrade) or C(pending-rollback) by a helm that died is recovered
    when kube-accel can prove no operation is alive (no other run holds the run lock, see M(kube_accel.gpu.accel_run_lock), and
    the pending revision is older than O(timeout)). A pending first install is uninstalled and installed again, a
    pending upgrade or rollback is rolled back to the last deployed revision and then upgraded. RV(recovered) and
    C(--diff) say what was found and done. Otherwise the module fails naming the release, its status, the
    revision's age, the lock holder and the helm command an operator would run.
  - Works with helm 3 and helm 4; the flags for wait and rollback are chosen from C(helm version --short).
  - The module runs helm on the host it executes on (normally the controller, with C(delegate_to) or
    C(connection=local)); C(values_template) and a local C(chart) are read there too.
version_added: "0.1.0"
author: kube-accel contributors (@kube-accel)
options:
  name:
    description: Release name.
    type: str
    required: true
  namespace:
    description: Namespace of the release.
    type: str
    default: kube-accel
  chart:
    description:
      - A local chart directory or packaged C(.tgz), C(repo/chart) from a configured helm repository, or an
        C(oci://) / C(https://) chart reference.
      - Required when O(state=present).
    type: str
  chart_version:
    description: Chart version (or constraint) passed as C(--version); the chart's own version when omitted.
    type: str
  values:
    description: Release values; laid over the rendered O(values_template) (nested mappings merge, lists replace).
    type: dict
    default: {}
  values_template:
    description:
      - Path to a Jinja2 template that renders to a YAML mapping of values, rendered inside the module with
        O(template_vars) (StrictUndefined; filters C(to_yaml), C(to_nice_yaml), C(to_json)).
    type: path
  template_vars:
    description: Variables for O(values_template).
    type: dict
    default: {}
  helm_binary:
    description:
      - The helm to run. A bare name is looked up on C(PATH), then in C(~/.cache/kube-accel/bin) where
        C(make toolchain) puts helm 3 (C(helm)) and helm 4 (C(helm4)).
    type: str
    default: helm
  wait:
    description: Wait until the release's resources are ready (helm 3 C(--wait), helm 4 C(--wait=watcher)).
    type: bool
    default: true
  timeout:
    description: How long helm waits, as a Go duration (C(90s), C(5m), C(1h30m)).
    type: str
    default: 5m
  atomic:
    description:
      - Roll the release back automatically when the upgrade fails or times out (helm 3 C(--atomic), helm 4
        C(--rollback-on-failure)); implies waiting.
    type: bool
    default: true
  create_namespace:
    description: Create the release namespace if it does not exist.
    type: bool
    default: true
  state:
    description: V(present) installs or upgrades; V(absent) uninstalls (nothing to do when not installed).
    type: str
    choices: [present, absent]
    default: present
  validate_schema:
    description:
      - Validate the values (over the chart's defaults) against the chart's C(values.schema.json) with
        jsonschema before calling helm, reporting every failing field. Remote charts are fetched with
        C(helm pull) for this.
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
    description: Nothing is changed; C(changed), C(changes) and C(command) say what the upgrade would do.
  diff_mode:
    support: full
    description: Unified diffs of the values (as YAML) and of the rendered manifest, deployed vs desired.
  platform:
    support: full
    platforms: posix
requirements:
  - helm 3 (>= 3.13 for C(--dry-run=server)) or helm 4
  - jsonschema (when O(validate_schema=true))
  - jinja2 (when O(values_template) is set)
notes:
  - Values are applied declaratively (C(--reset-values)), so keys removed from O(values) are removed from the release.
  - A chart whose templates produce different output on every render (random passwords, timestamps) is reported
    as changed on every run.
seealso:
  - module: kubernetes.core.helm
"""

EXAMPLES = r"""
- name: Install the pGPU chart for the "train" pool
  kube_accel.gpu.accel_release:
    name: kube-accel-pgpu
    chart: "{{ playbook_dir }}/../charts/pgpu"
    values:
      pools:
        - name: train
          replicas: 4
    kubeconfig: "{{ kube_accel_kubeconfig }}"
    context: "{{ kube_accel_context | default(omit) }}"
  delegate_to: localhost

- name: Values rendered from inventory data with a template, with helm 4
  kube_accel.gpu.accel_release:
    name: kube-accel-mps
    chart: charts/mps
    values_template: templates/mps-values.yaml.j2
    template_vars:
      pools: "{{ kube_accel_pools }}"
    helm_binary: helm4
    timeout: 3m

- name: GPU Operator from a repository, pinned
  kube_accel.gpu.accel_release:
    name: gpu-operator
    namespace: gpu-operator
    chart: nvidia/gpu-operator
    chart_version: v26.3.3
    values: "{{ gpu_operator_values }}"

- name: Remove a release
  kube_accel.gpu.accel_release:
    name: kube-accel-vgpu
    state: absent
"""

RETURN = r"""
revision:
  description: Release revision after the run (the deployed one when nothing changed or in check mode).
  returned: when the release exists or was installed
  type: int
  sample: 3
status:
  description: Helm status of the release (C(deployed), C(failed), ...); C(uninstalled) or C(absent) for O(state=absent).
  returned: always
  type: str
  sample: deployed
chart:
  description: Chart as C(<name>-<version>) (the desired one when it changes).
  returned: when the release exists or is being installed
  type: str
  sample: tiny-0.1.0
app_version:
  description: The chart's appVersion.
  returned: when the release exists or is being installed
  type: str
  sample: 1.0.0
rendered:
  description: Set when the desired release was rendered client side (C(helm template)) because the cluster lacks the
    chart's CRDs on a first install.
  returned: when that happened
  type: str
  sample: "client side: the cluster lacks the chart's CRDs (its install applies them first)"
objects:
  description: Objects of the release manifest (hooks excluded); namespace is null for cluster-scoped kinds.
  returned: always
  type: list
  elements: dict
  sample: [{"kind": "Deployment", "name": "kube-accel-pgpu", "namespace": "kube-accel"}]
changes:
  description: Why the release is (or would be) changed, one line per difference; empty when nothing differs.
  returned: always
  type: list
  elements: str
  sample: ["chart tiny-0.1.0 -> tiny-0.2.0", "values differ: replicas"]
command:
  description:
    - The helm argv that was run (or would run in check mode) to change the release.
    - Its C(--values) file is a temporary copy of the values, removed after the run.
  returned: when changed
  type: list
  elements: str
rollback_command:
  description: The C(helm rollback) argv run (or, in check mode, that would run) to bring a failed release back to its last good revision before the upgrade.
  returned: when the release was in C(failed) state and had a good revision
  type: list
  elements: str
rolled_back_to:
  description: Revision a failed release was rolled back to before being upgraded.
  returned: when that rollback ran
  type: int
  sample: 1
recovered:
  description:
    - A pending release (C(pending-install), C(pending-upgrade), C(pending-rollback)) whose helm operation was proven
      dead and recovered (or, in check mode, would be), with C(status), C(revision), C(age_s), C(timeout), C(action)
      (C(reinstall) = uninstalled then installed again; C(rollback) = rolled back to C(to_revision), then upgraded if
      it still differs), C(command) (the helm argv run first) and C(check_mode).
  returned: when a pending release was recovered
  type: dict
  sample:
    status: pending-install
    revision: 1
    age_s: 412
    timeout: 5m
    action: reinstall
    to_revision: null
    command: [helm, uninstall, kube-accel-mps, --namespace, kube-accel, --wait, --timeout, 5m]
    check_mode: false
helm_version:
  description: Version of the helm binary used.
  returned: always
  type: str
  sample: 3.21.4
stderr:
  description: helm's stderr when a helm call failed.
  returned: failure
  type: str
schema_errors:
  description: One line per value that violates the chart's values.schema.json (field path, value, constraint).
  returned: failure, when validation failed
  type: list
  elements: str
diff:
  description: Values (YAML) and manifest diffs, deployed vs desired, as C(before)/C(after) pairs with headers.
  returned: diff mode, when changed
  type: list
  elements: dict
"""

import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.kube_accel.gpu.plugins.module_utils.cluster.client import KUBE_ARGUMENT_SPEC
from ansible_collections.kube_accel.gpu.plugins.module_utils.cluster.lease import (
    RUN_LOCK_ARGUMENT_SPEC,
    release_lock_check,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.common.pyyaml import YAML_IMPORT_ERROR
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm.client import ReleaseSpec, module_helm
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm.errors import HelmError
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm.release import (
    desired_values,
    ensure_absent,
    ensure_present,
)


def argument_spec() -> dict:
    return {
        "name": {"type": "str", "required": True},
        "namespace": {"type": "str", "default": "kube-accel"},
        "chart": {"type": "str"},
        "chart_version": {"type": "str"},
        "values": {"type": "dict", "default": {}},
        "values_template": {"type": "path"},
        "template_vars": {"type": "dict", "default": {}},
        **KUBE_ARGUMENT_SPEC,
        "helm_binary": {"type": "str", "default": "helm"},
        "wait": {"type": "bool", "default": True},
        "timeout": {"type": "str", "default": "5m"},
        "atomic": {"type": "bool", "default": True},
        "create_namespace": {"type": "bool", "default": True},
        "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
        "validate_schema": {"type": "bool", "default": True},
        **RUN_LOCK_ARGUMENT_SPEC,
    }


def main() -> None:
    module = AnsibleModule(
        argument_spec=argument_spec(),
        required_if=[("state", "present", ["chart"])],
        supports_check_mode=True,
    )
    if YAML_IMPORT_ERROR:
        module.fail_json(msg=missing_required_lib("PyYAML"), exception=YAML_IMPORT_ERROR)
    p = module.params

    try:
        helm = module_helm(module, p["state"] == "present" and p["validate_schema"])
        if p["state"] == "absent":
            result = ensure_absent(
                helm,
                p["name"],
                p["namespace"],
                check_mode=module.check_mode,
                diff_mode=module._diff,
                wait=p["wait"],
                timeout=p["timeout"],
            )
        else:
            spec = ReleaseSpec(
                name=p["name"],
                namespace=p["namespace"],
                chart=p["chart"],
                chart_version=p["chart_version"],
                values=desired_values(p["values"], p["values_template"], p["template_vars"]),
                wait=p["wait"],
                timeout=p["timeout"],
                atomic=p["atomic"],
                create_namespace=p["create_namespace"],
            )
            result = ensure_present(
                helm, spec, check_mode=module.check_mode, diff_mode=module._diff, validate=p["validate_schema"],
                run_lock=release_lock_check(p),
            )
    except HelmError as exc:
        failure = {"msg": exc.msg, "stderr": exc.stderr}
        if exc.command:
            failure["command"] = exc.command
        failure.update(exc.extra)
        module.fail_json(**failure)
    except Exception as exc:  # a bug here must still read as a message; the traceback goes to -vvv
        module.fail_json(msg=f"accel_release: unexpected error: {exc}", exception=traceback.format_exc())
    result.setdefault("changes", [])
    result.setdefault("objects", [])
    result["helm_version"] = ".".join(map(str, helm.version))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
