# Copyright: kube-accel contributors
# Apache License 2.0
"""Reconcile node labels and taints kube-accel owns, as one merge patch per node that differs."""

from __future__ import annotations

from typing import Any


def taint_key(taint: dict[str, Any]) -> tuple[str, str]:
    return taint["key"], taint.get("effect", "NoSchedule")


def node_patch(
    current_labels: dict[str, str],
    current_taints: list[dict[str, Any]],
    desired_labels: dict[str, str],
    managed_keys: set[str],
    desired_taints: list[dict[str, Any]],
    managed_taint_keys: set[str],
) -> dict[str, Any] | None:
    """The merge patch that brings one node to the desired state, or None when it is already there.

    Labels in ``managed_keys`` that the node carries but should not are removed (set to null); labels
    outside it are never touched. Taints whose key is in ``managed_taint_keys`` are replaced by
    ``desired_taints``; other taints are kept as they are.
    """
    labels: dict[str, str | None] = {}
    for key, value in desired_labels.items():
        if current_labels.get(key) != value:
            labels[key] = value
    for key in sorted(managed_keys):
        if key in current_labels and key not in desired_labels:
            labels[key] = None
    patch: dict[str, Any] = {}
    if labels:
        patch["metadata"] = {"labels": labels}
    kept = [t for t in current_taints if t["key"] not in managed_taint_keys]
    ours = [t for t in current_taints if t["key"] in managed_taint_keys]
    normalized_desired = [{"key": t["key"], "value": t.get("value"), "effect": t.get("effect", "NoSchedule")}
                          for t in desired_taints]
    normalized_ours = [{"key": t["key"], "value": t.get("value"), "effect": t.get("effect")} for t in ours]
    if sorted(normalized_ours, key=str) != sorted(normalized_desired, key=str):
        # Taints are a list: a merge patch replaces it whole, so send the full list.
        patch["spec"] = {"taints": kept + [{k: v for k, v in t.items() if v is not None}
                                            for t in normalized_desired]}
    return patch or None


def plan(
    nodes: dict[str, dict[str, Any]],
    desired: dict[str, dict[str, Any]],
    managed_keys: set[str],
    managed_taint_keys: set[str],
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Patches for every desired node that differs, and the desired nodes missing from the cluster.

    ``nodes``: name -> {"labels": {...}, "taints": [...]} as read from the API.
    ``desired``: name -> {"labels": {...}, "taints": [...]}.
    """
    patches: dict[str, dict[str, Any]] = {}
    missing = []
    for name in sorted(desired):
        if name not in nodes:
            missing.append(name)
            continue
        patch = node_patch(
            nodes[name]["labels"], nodes[name]["taints"], desired[name].get("labels", {}), managed_keys,
            desired[name].get("taints", []), managed_taint_keys,
        )
        if patch:
            patches[name] = patch
    return patches, missing
