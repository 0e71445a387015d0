# Copyright: kube-accel contributors
# Apache License 2.0
"""Pod Security Admission levels of the namespaces kube-accel installs into.

Every kube-accel release runs node agents that need the ``privileged`` level (hostPath volumes, hostPID,
privileged containers: the device plugins, HAMi, GPU-Manager, the MPS control daemon and the GPU Operator's
operands). A namespace whose ``pod-security.kubernetes.io/enforce`` label names a stricter level makes the API
server refuse those pods after helm has created their DaemonSets; the cluster play checks this first.
"""

from __future__ import annotations

from typing import Any

LABEL_PREFIX = "pod-security.kubernetes.io/"
ENFORCE = f"{LABEL_PREFIX}enforce"
# The label modes kube-accel writes, as the GPU Operator does for its own namespace (psa.enabled).
MODES = ("enforce", "audit", "warn")
# From the most permissive to the strictest.
LEVELS = ("privileged", "baseline", "restricted")
REQUIRED_LEVEL = "privileged"


def level_labels(level: str) -> dict[str, str]:
    """The labels that set ``level`` for every mode."""
    return {f"{LABEL_PREFIX}{mode}": level for mode in MODES}


def refusal(name: str, enforced: str, needed: str) -> str | None:
    """Why pods needing ``needed`` cannot run in a namespace that enforces ``enforced``, or None when they can."""
    if enforced not in LEVELS:
        # An unknown level is no level the API server would let these pods through with: report it.
        return (f"namespace {name} has {ENFORCE}={enforced!r}, not one of {', '.join(LEVELS)}; kube-accel's pods "
                f"there need {needed!r}")
    if LEVELS.index(enforced) > LEVELS.index(needed):
        return (f"namespace {name} enforces Pod Security level {enforced!r} ({ENFORCE}); kube-accel's pods there "
                f"need {needed!r} (hostPath, hostPID, privileged node agents) and would be refused. Set "
                f"{ENFORCE}={needed} on it, or install into another namespace")
    return None


def plan(current: dict[str, dict[str, str] | None], required: dict[str, str],
         check_only: set[str] = frozenset()) -> tuple[dict[str, dict], dict[str, dict], list[str]]:
    """(namespaces to create -> labels, namespaces to label -> labels patch, refusals).

    ``current``: name -> its labels, or None when it does not exist. ``required``: name -> level its pods need.
    A namespace without an enforce label is labelled for the level it needs (the cluster's default level is not
    readable through the API); one that enforces a stricter level is refused; names in ``check_only`` are never
    written. Nothing is to be written when anything is refused.
    """
    create: dict[str, dict] = {}
    patch: dict[str, dict] = {}
    refused: list[str] = []
    for name in sorted(required):
        needed = required[name]
        if needed not in LEVELS:
            raise ValueError(f"unknown Pod Security level {needed!r} for namespace {name}")
        labels = current.get(name)
        if labels is not None and ENFORCE in labels:
            reason = refusal(name, labels[ENFORCE], needed)
            if reason:
                refused.append(reason)
            continue
        if name in check_only:
            continue
        wanted = level_labels(needed)
        if labels is None:
            create[name] = wanted
        else:
            missing = {k: v for k, v in wanted.items() if k not in labels}
            if missing:
                patch[name] = missing
    if refused:
        return {}, {}, refused
    return create, patch, refused


def namespace_manifest(name: str, labels: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": dict(labels)}}
