# Copyright: kube-accel contributors
# Apache License 2.0
"""Reconcile node labels and taints kube-accel owns, as one merge patch per node that differs."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

from ansible_collections.kube_accel.gpu.plugins.module_utils.common.constants import MIG_PAUSED_VALUE

# Node patches in flight at once: enough to hide the round trip at 1,000 nodes, few enough not to crowd the API
# server's priority-and-fairness queue for one client.
PATCH_WORKERS = 16


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
        # mig-manager owns a deploy label while it reconfigures MIG; it sets "true" back itself.
        if value == "true" and current_labels.get(key) == MIG_PAUSED_VALUE:
            continue
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
        desired_taints = [{k: v for k, v in t.items() if v is not None} for t in normalized_desired]
        patch["spec"] = {"taints": kept + desired_taints}
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


def switching(
    nodes: dict[str, dict[str, Any]],
    patches: dict[str, dict[str, Any]],
    sharing_keys: set[str],
) -> dict[str, dict[str, list[str | None]]]:
    """Nodes whose way of sharing their GPUs the patches change: name -> {label: [before, after]}.

    A node switches when it already carries one of ``sharing_keys`` (pool, mode, backend, device-plugin or MIG
    config: it serves a pool) and a patch sets, changes or removes one of them (a MIG geometry added to its pool
    included): its running GPU pods hold allocations of the old configuration. A node given those labels for the
    first time does not switch.
    """
    out: dict[str, dict[str, list[str | None]]] = {}
    for name, patch in patches.items():
        labels = patch.get("metadata", {}).get("labels", {})
        before = nodes[name]["labels"]
        if not sharing_keys & set(before):
            continue
        changed = {key: [before.get(key), labels[key]] for key in sorted(sharing_keys & set(labels))}
        if changed:
            out[name] = changed
    return out


def describe_switch(changes: dict[str, list[str | None]]) -> str:
    """One node's entry of ``switching`` as the cordon reason says it: "key before -> after; ..." ."""
    return "; ".join(f"{key} {'(none)' if before is None else before} -> {'(removed)' if after is None else after}"
                     for key, (before, after) in sorted(changes.items()))


def nodes_from_list(listing: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """name -> {"labels", "taints"} from a NodeList read as raw JSON.

    Taints keep the API's own field names (``timeAdded``), so the foreign ones go back unchanged in a patch.
    """
    return {
        item["metadata"]["name"]: {
            "labels": dict(item["metadata"].get("labels") or {}),
            "taints": [dict(t) for t in (item.get("spec") or {}).get("taints") or []],
        }
        for item in listing.get("items") or []
    }


def send_patches(
    send: Callable[[str, dict[str, Any]], object],
    patches: dict[str, dict[str, Any]],
    workers: int = PATCH_WORKERS,
) -> dict[str, BaseException]:
    """Call ``send(name, patch)`` for every node, at most ``workers`` at a time; name -> error of those that failed.

    Each patch touches one node, so order does not matter and one failure does not stop the others.
    """
    if not patches:
        return {}
    failed: dict[str, BaseException] = {}
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(patches)))) as pool:
        futures = {pool.submit(send, name, patch): name for name, patch in patches.items()}
        for future in as_completed(futures):
            error = future.exception()
            if error is not None:
                failed[futures[future]] = error
    return dict(sorted(failed.items()))


def diff_of(current: dict[str, dict[str, Any]], patches: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """before/after of the nodes that change: the patched label keys and the taints."""
    def patched_labels(patch: dict[str, Any]) -> dict[str, Any]:
        return patch.get("metadata", {}).get("labels", {})

    return {
        "before": {
            name: {
                "labels": {k: current[name]["labels"].get(k) for k in sorted(patched_labels(patch))},
                "taints": current[name]["taints"],
            }
            for name, patch in patches.items()
        },
        "after": {
            name: {
                "labels": patched_labels(patch),
                "taints": patch.get("spec", {}).get("taints", current[name]["taints"]),
            }
            for name, patch in patches.items()
        },
    }
