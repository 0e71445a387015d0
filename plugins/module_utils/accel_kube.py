# Copyright: kube-accel contributors
# Apache License 2.0
"""Connection options and API client shared by kube-accel's Kubernetes modules."""

from __future__ import annotations

import traceback

from ansible.module_utils.basic import missing_required_lib

KUBE_ARGUMENT_SPEC = {
    "kubeconfig": {"type": "path"},
    "context": {"type": "str"},
}


def api_client(module):
    """A kubernetes ApiClient from the module's kubeconfig/context, or a clear failure (never a traceback)."""
    try:
        from kubernetes import config  # noqa: PLC0415 - optional dependency, reported below
    except ImportError:
        module.fail_json(msg=missing_required_lib("kubernetes"), exception=traceback.format_exc())
    p = module.params
    try:
        return config.new_client_from_config(p["kubeconfig"], context=p["context"] or None)
    except Exception as exc:  # noqa: BLE001 - a bad kubeconfig is reported the same way whatever raised
        module.fail_json(msg=f"cannot load kubeconfig {p['kubeconfig']!r} (context {p['context']!r}): {exc}")
