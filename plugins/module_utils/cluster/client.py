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


def api_client(module, connections: int | None = None):
    """A kubernetes ApiClient from the module's kubeconfig/context, or a clear failure (never a traceback).

    ``connections``: HTTP connections kept open to the API server, at least the number of threads sending requests
    (the client's default, 5 per CPU, would open and discard connections on a small host).
    """
    try:
        from kubernetes import client, config  # noqa: PLC0415 - optional dependency, reported below
    except ImportError:
        module.fail_json(msg=missing_required_lib("kubernetes"), exception=traceback.format_exc())
    p = module.params
    try:
        configuration = client.Configuration()
        config.load_kube_config(p["kubeconfig"], context=p["context"] or None, client_configuration=configuration)
    except Exception as exc:  # noqa: BLE001 - a bad kubeconfig is reported the same way whatever raised
        module.fail_json(msg=f"cannot load kubeconfig {p['kubeconfig']!r} (context {p['context']!r}): {exc}")
    if connections:
        configuration.connection_pool_maxsize = connections
    api = client.ApiClient(configuration)
    # Named in the API server's audit log and metrics, rather than as the generic Python client.
    api.user_agent = f"kube-accel/{module._name or 'module'}"
    return api


def api_error(subject: str, exc) -> str:
    """An ApiException as one line for the operator: what was asked about, the status and the start of the body."""
    return f"{subject}: the API server answered {exc.status} {exc.reason}: {(exc.body or '')[:500]}"
