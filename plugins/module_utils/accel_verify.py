# Copyright: kube-accel contributors
# Apache License 2.0
"""Checks that a pool's nodes offer what the inventory promised, and the summary table of the verify play."""

from __future__ import annotations

from typing import Any

FAKE_NODE_ANNOTATION = "kwok.x-k8s.io/node"


def label_problems(node: str, labels: dict[str, str], expected: dict[str, str]) -> list[str]:
    return [
        f"{node}: label {key}={labels.get(key)!r}, expected {value!r}"
        for key, value in sorted(expected.items())
        if labels.get(key) != value
    ]


def allocatable_problems(node: str, allocatable: dict[str, str], expected: dict[str, int]) -> list[str]:
    problems = []
    for name, quantity in sorted(expected.items()):
        have = allocatable.get(name)
        if have is None:
            problems.append(f"{node}: allocatable has no {name} (expected {quantity})")
        elif quantity and str(have) != str(quantity):
            problems.append(f"{node}: allocatable {name}={have}, expected {quantity}")
        elif not quantity and str(have) in ("0", ""):
            problems.append(f"{node}: allocatable {name}={have}, expected more than 0")
    return problems


def daemon_problems(node: str, pods: list[dict[str, Any]]) -> list[str]:
    """``pods``: the release's DaemonSet pods on this node, as {name, ready}."""
    if not pods:
        return [f"{node}: no device-plugin DaemonSet pod of the pool's release"]
    if not any(p["ready"] for p in pods):
        return [f"{node}: DaemonSet pod(s) {', '.join(p['name'] for p in pods)} not Ready"]
    return []


def job_manifest(name: str, namespace: str, pool_label: str, pool: str, request: dict[str, str],
                 image: str, command: list[str], taint_key: str | None) -> dict[str, Any]:
    """A short Job that asks for the pool's resource and can only land on the pool's nodes."""
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "nodeSelector": {pool_label: pool},
        "automountServiceAccountToken": False,
        "containers": [{
            "name": "probe",
            "image": image,
            "command": command,
            "resources": {"limits": dict(request)},
            "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True, "runAsUser": 65534,
                                "capabilities": {"drop": ["ALL"]}},
        }],
    }
    if taint_key:
        spec["tolerations"] = [{"key": taint_key, "operator": "Equal", "value": pool, "effect": "NoSchedule"}]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"app.kubernetes.io/part-of": "kube-accel", "app.kubernetes.io/component": "verify"}},
        "spec": {"backoffLimit": 0, "ttlSecondsAfterFinished": 300, "activeDeadlineSeconds": 300,
                 "template": {"metadata": {"labels": {"app.kubernetes.io/component": "verify"}}, "spec": spec}},
    }


def render_table(rows: list[dict[str, Any]], fake_nodes: int, total_nodes: int) -> str:
    headers = ["pool", "mode", "nodes", "labels", "daemonset", "allocatable", "job", "result"]
    table = [headers] + [[str(r.get(h, "")) for h in headers] for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(headers))]
    # Indexed, not zip(strict=True): module_utils run on the hosts' Python, 3.9 on RHEL 9.
    lines = ["  ".join(row[i].ljust(widths[i]) for i in range(len(headers))).rstrip() for row in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if fake_nodes:
        lines.append(f"note: {fake_nodes} of {total_nodes} nodes are kwok fakes (lab): no GPU ran the Jobs; "
                     "scheduling, device-plugin rollout and advertised resources were checked for real.")
    return "\n".join(lines)
