# Copyright: kube-accel contributors
# Apache License 2.0
"""Cordon ownership for rolling maintenance (the hosts play and node_reboot), and the checks a node passes before
kube-accel returns it to service.

kube-accel cordons a node only together with an annotation (``kube-accel.io/cordoned-by``) that says which run
cordoned it and why, and it uncordons only nodes that carry that annotation: a node an operator cordoned (no
annotation) is never returned to service by kube-accel, and a node a dead run left cordoned is recognised by the
next run. Writes carry the resourceVersion they were decided on, so an operator's cordon that lands between the
read and the write is never taken over.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any

from ansible_collections.kube_accel.gpu.plugins.module_utils.common.constants import ANNOTATIONS, UPSTREAM_LABELS

CORDONED_BY = ANNOTATIONS["cordoned_by"]
LAST_MAINTENANCE = ANNOTATIONS["last_maintenance"]

# Owner of a node's cordon.
KUBE_ACCEL = "kube-accel"
OTHER = "other"

# A write refused for a stale resourceVersion is decided again on a fresh read, this many times at most.
WRITE_ATTEMPTS = 5
# Node reads in flight at once for a lookup of many nodes.
READ_WORKERS = 16


class ConflictError(Exception):
    """The node changed between the read and the write (HTTP 409)."""


def utcnow() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_record(value: str | None) -> dict[str, Any] | None:
    """The cordon record of an annotation value; a value that is not kube-accel's JSON is kept as ``raw``."""
    if value is None:
        return None
    try:
        record = json.loads(value)
    except ValueError:
        return {"raw": value}
    return record if isinstance(record, dict) else {"raw": value}


def ownership(node: dict[str, Any] | None) -> dict[str, Any]:
    """Who holds the node's cordon: ``kube-accel`` (its annotation is there), ``other`` (cordoned without it) or
    None (schedulable). A schedulable node with a leftover annotation is schedulable: someone uncordoned it.

    ``mig_config``: the node's ``nvidia.com/mig.config`` (None without): the MIG layout the GPU Operator's mig-manager
    has been told to apply, so whether the host's checks may expect MIG mode on (roles/node_reboot)."""
    if node is None:
        return {"found": False, "unschedulable": False, "owner": None, "record": None, "mig_config": None}
    metadata = node.get("metadata") or {}
    unschedulable = bool((node.get("spec") or {}).get("unschedulable"))
    record = parse_record((metadata.get("annotations") or {}).get(CORDONED_BY))
    owner = None if not unschedulable else KUBE_ACCEL if record is not None else OTHER
    return {"found": True, "unschedulable": unschedulable, "owner": owner, "record": record,
            "mig_config": (metadata.get("labels") or {}).get(UPSTREAM_LABELS["mig_config"])}


def _view(node: dict[str, Any] | None) -> dict[str, Any]:
    """The part of a node a cordon decision reads and writes, for --diff."""
    if node is None:
        return {}
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    view: dict[str, Any] = {"unschedulable": bool((node.get("spec") or {}).get("unschedulable"))}
    for key in (CORDONED_BY, LAST_MAINTENANCE):
        if key in annotations:
            view[key] = annotations[key]
    return view


def _apply_patch(node: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """The node as it will be after ``patch`` (for --diff, and to plan in check mode)."""
    after = json.loads(json.dumps(node))
    if "spec" in patch:
        after.setdefault("spec", {}).update(patch["spec"])
    annotations = after.setdefault("metadata", {}).setdefault("annotations", {}) or {}
    for key, value in ((patch.get("metadata") or {}).get("annotations") or {}).items():
        if value is None:
            annotations.pop(key, None)
        else:
            annotations[key] = value
    after["metadata"]["annotations"] = annotations
    return after


def plan_cordon(node: dict[str, Any] | None, holder: str, reason: str, now: str) -> tuple[dict | None, dict]:
    """The patch that cordons ``node`` for kube-accel, or None, and what was found.

    - schedulable: cordon it, with the annotation (this run, the reason, the time);
    - cordoned by kube-accel (this run, or a run that died): leave it as it is (``earlier`` when it was another run);
    - cordoned by someone else: leave it; the caller still drains it, and never uncordons it.
    """
    found = ownership(node)
    result: dict[str, Any] = {"found": found["found"], "owner": found["owner"], "cordoned": False}
    if not found["found"]:
        return None, result
    if found["owner"] == KUBE_ACCEL:
        record = found["record"] or {}
        result["record"] = record
        if record.get("holder") != holder:
            result["earlier"] = record
        return None, result
    if found["owner"] == OTHER:
        return None, result
    record = {"holder": holder, "reason": reason, "cordoned_at": now}
    patch = {
        "metadata": {
            "annotations": {CORDONED_BY: json.dumps(record, sort_keys=True)},
            "resourceVersion": (node.get("metadata") or {}).get("resourceVersion"),
        },
        "spec": {"unschedulable": True},
    }
    result.update(owner=KUBE_ACCEL, cordoned=True, record=record)
    return patch, result


def plan_uncordon(node: dict[str, Any] | None, checks: dict[str, Any] | None, now: str) -> tuple[dict | None, dict]:
    """The patch that returns ``node`` to service, or None, and what was found.

    Only a cordon kube-accel holds (its annotation) is lifted, whichever run took it; the annotation goes with it
    and the maintenance is summarised in ``kube-accel.io/last-maintenance`` (who, why, when, what was checked).
    """
    found = ownership(node)
    result: dict[str, Any] = {"found": found["found"], "owner": found["owner"], "uncordoned": False}
    if found["owner"] != KUBE_ACCEL:
        return None, result
    record = dict(found["record"] or {})
    record["uncordoned_at"] = now
    if checks:
        record["checks"] = checks
    patch = {
        "metadata": {
            "annotations": {CORDONED_BY: None, LAST_MAINTENANCE: json.dumps(record, sort_keys=True)},
            "resourceVersion": (node.get("metadata") or {}).get("resourceVersion"),
        },
        "spec": {"unschedulable": False},
    }
    result.update(uncordoned=True, record=record)
    return patch, result


def planned_cordon(node: dict[str, Any] | None, cordon: dict[str, Any] | None) -> dict[str, Any] | None:
    """In check mode the cordon was only planned: the node as that cordon would have left it, so that the uncordon
    reports truthfully what a real run would do."""
    if node is None or not cordon or not cordon.get("cordoned") or ownership(node)["owner"] is not None:
        return node
    record = cordon.get("record") or {}
    return _apply_patch(
        node,
        {
            "metadata": {"annotations": {CORDONED_BY: json.dumps(record, sort_keys=True)}},
            "spec": {"unschedulable": True},
        },
    )


def converge(
    read: Callable[[], dict | None],
    write: Callable[[dict], dict],
    decide: Callable[[dict | None], tuple[dict | None, dict]],
    check_mode: bool = False,
) -> dict:
    """Read, decide, write; decided again on a fresh read when the node changed in between (HTTP 409).

    Returns the decision's result with ``changed`` and ``diff`` (before/after of the cordon fields).
    """
    for _unused in range(WRITE_ATTEMPTS):
        node = read()
        patch, result = decide(node)
        after = _apply_patch(node, patch) if (node is not None and patch) else node
        result["changed"] = patch is not None
        result["diff"] = {"before": _view(node), "after": _view(after)}
        if patch is None or check_mode:
            return result
        try:
            write(patch)
        except ConflictError:
            continue
        return result
    raise ConflictError(f"the node changed under every one of {WRITE_ATTEMPTS} attempts to write it")


def lookup(read: Callable[[str], dict | None], names: list[str]) -> dict[str, dict[str, Any]]:
    """Ownership of many nodes at once (which hosts are cluster nodes, and who holds their cordon)."""
    unique = sorted(set(names))
    with ThreadPoolExecutor(max_workers=max(1, min(READ_WORKERS, len(unique)))) as pool:
        nodes = dict(zip(unique, pool.map(read, unique)))  # noqa: B905 - strict= is Python 3.10+
    return {name: ownership(node) for name, node in nodes.items()}


def gpu_problems(gpus: dict[str, Any] | None, expect: dict[str, Any]) -> list[str]:
    """What keeps a node out of service after a change: the GPUs NVML reports (the nvidia_gpu_facts fact) against
    what the plan expects. ``expect`` keys, each skipped when empty or None:

    - ``count``: GPUs NVML saw before the change (no GPU may go missing through a maintenance);
    - ``driver_branch``: the loaded driver's major version (``accel_driver_branch``), ``driver_version``: exact;
    - ``mig``: true when the pool's MIG geometry needs MIG mode on (every MIG-capable GPU must have it on, with no
      change pending);
    - ``mig_off``: true when the pool uses no MIG (no GPU may have MIG mode on, or still on until a reset: a
      geometry an earlier plan applied is turned off by roles/mig).
    """
    gpus = gpus or {}
    problems: list[str] = []
    count = gpus.get("count") or 0
    listed = gpus.get("gpus") or []
    if expect.get("count") not in (None, ""):
        if count != int(expect["count"]):
            cause = f" ({gpus['reason']})" if gpus.get("reason") else ""
            problems.append(f"NVML sees {count} GPU(s){cause}, {int(expect['count'])} before the change")
    elif count == 0 and gpus.get("reason"):
        # Nothing known from before the change: a host whose NVML cannot answer is not a GPU node in service.
        problems.append(f"NVML sees no GPU: {gpus['reason']}")
    loaded = str(gpus.get("driver_version") or "")
    if count and expect.get("driver_version") and loaded != str(expect["driver_version"]):
        problems.append(f"driver {loaded or '(none)'} loaded, {expect['driver_version']} expected")
    elif count and expect.get("driver_branch") and loaded.split(".", maxsplit=1)[0] != str(expect["driver_branch"]):
        problems.append(f"driver {loaded or '(none)'} loaded, branch {expect['driver_branch']} expected")
    if expect.get("mig"):
        for gpu in listed:
            current, pending = gpu.get("mig_mode_current"), gpu.get("mig_mode_pending")
            if current is None:  # not MIG-capable
                continue
            if not current:
                problems.append(
                    f"GPU {gpu.get('index')} ({gpu.get('name')}): MIG mode off, the pool's geometry needs it on"
                )
            elif pending is not None and pending != current:
                problems.append(
                    f"GPU {gpu.get('index')} ({gpu.get('name')}): MIG mode change pending (GPU reset or reboot needed)"
                )
    if expect.get("mig_off"):
        for gpu in listed:
            current, pending = gpu.get("mig_mode_current"), gpu.get("mig_mode_pending")
            if current:
                why = "MIG mode still on until a GPU reset or reboot" if pending is False else "MIG mode on"
                problems.append(f"GPU {gpu.get('index')} ({gpu.get('name')}): {why}, the pool uses no MIG")
    return problems


def gpu_summary(gpus: dict[str, Any] | None) -> str:
    """One line for the last-maintenance annotation: what the checks saw."""
    gpus = gpus or {}
    listed = gpus.get("gpus") or []
    mig = sum(1 for g in listed if g.get("mig_mode_current"))
    return (
        f"{gpus.get('count') or 0} GPU(s), driver {gpus.get('driver_version') or 'none'}, "
        f"MIG on {mig} of {len(listed)}, source {gpus.get('source') or 'unknown'}"
    )
