# Copyright: kube-accel contributors
# Apache License 2.0
"""What a pool's scheduler must see before its verify Job can land, and when a Job's unschedulable pod is retried.

The API server showing a node's registration is not the scheduler having read it: HAMi v2.10.0's scheduler reads
node registrations on a 15 s ticker and on node additions only (pkg/scheduler/scheduler.go,
RegisterFromNodeAnnotations; its node informer has no update handler), and kube-scheduler does not retry a pod that
an extender refused when a node's annotations change. So verify waits until every node is registered the way the
pool's scheduler reads it, and a Job's pod left unschedulable once that holds is given a new attempt (a new Job)
instead of kube-scheduler's back-off (minutes).
"""

from __future__ import annotations

import json
from typing import Any

# HAMi v2.10.0 pkg/device/nvidia/device.go:41 (RegisterAnnos).
HAMI_REGISTER = "hami.io/node-nvidia-register"
# A Job's pod left unschedulable this long, with the pool's scheduler path ready, gets a new attempt: longer than
# kube-scheduler's first back-offs (1, 2, 4 s), shorter than HAMi's 15 s registration tick.
RETRY_AFTER_S = 10


def _positive(quantity: Any) -> bool:
    """A Kubernetes quantity of a countable resource (an integer string) above zero."""
    try:
        return int(str(quantity)) > 0
    except ValueError:
        return False


def hami_registration_problems(node: str, annotations: dict[str, str], allocatable: dict[str, Any],
                               count_resource: str) -> list[str]:
    """Whether HAMi's scheduler can add ``node``'s GPUs, judged by HAMi v2.10.0's own conditions: its registration
    annotation decodes as a non-empty JSON device list (pkg/device/nvidia/device.go GetNodeDevices,
    pkg/device/devices.go UnMarshalNodeDevices) and the node's allocatable ``count_resource`` (HAMi's
    resourceCountName) is positive (device.go CheckHealth: a node with none is unhealthy and cleaned up)."""
    raw = annotations.get(HAMI_REGISTER)
    if not raw:
        return [f"{node}: HAMi's device plugin has not registered the node (no {HAMI_REGISTER} annotation)"]
    try:
        devices = json.loads(raw)
    except ValueError:
        return [f"{node}: {HAMI_REGISTER} is not the JSON device list HAMi's scheduler decodes"]
    if not isinstance(devices, list) or not devices:
        return [f"{node}: {HAMI_REGISTER} registers no GPU, so HAMi's scheduler adds none"]
    if not _positive(allocatable.get(count_resource)):
        return [f"{node}: allocatable {count_resource}={allocatable.get(count_resource)!r}: HAMi's scheduler treats "
                "the node as unhealthy until its device plugin registers the resource with the kubelet"]
    return []


def unschedulable(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The PodScheduled=False condition of a pod that is still unbound ({reason, message, since}), or None. ``pod``:
    {node, phase, conditions: [{type, status, reason, message, since}]} with ``since`` in epoch seconds."""
    if pod.get("node") or pod.get("phase") not in (None, "Pending"):
        return None
    return next(({"reason": c.get("reason") or "", "message": c.get("message") or "", "since": c.get("since")}
                 for c in pod.get("conditions") or []
                 if c.get("type") == "PodScheduled" and c.get("status") == "False"), None)


def retry_due(pods: list[dict[str, Any]], now: float, started: float,
              retry_after: float = RETRY_AFTER_S) -> str | None:
    """Why a pool's verify Job may need a new attempt, or None: one of its pods is unschedulable and has been for
    ``retry_after`` seconds (counted from when the Job started, ``started``, where the condition is older or has no
    time). The caller starts the Job again only when the pool's scheduler path is ready by then, so that the reason
    the pod was refused (a registration the scheduler had not read) may have cleared on the scheduler's clock; a bound
    pod is never retried."""
    for pod in pods:
        state = unschedulable(pod)
        if state is None:
            continue
        since = state["since"] if state["since"] is not None else started
        if now - max(since, started) >= retry_after:
            return state["message"] or state["reason"] or "unschedulable"
    return None
