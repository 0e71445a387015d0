# Copyright: kube-accel contributors
# Apache License 2.0
"""The pieces ``plan.inventory_check`` words and compares its findings with: a setting's record (the value and where
it was set: ``problem``, ``same_record``), the inventory's group tree (``descendant_groups``, ``hosts_of``,
``group_depths``), when a setting applies at all (``applies``), and what a misspelt name was meant to be."""

from __future__ import annotations

import difflib
import posixpath

from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.inventory import default_of, did_you_mean
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.value_text import shown

# Variables of Ansible itself that an inventory may set without being kube-accel's.
ANSIBLE_NAMES = ("ansible_", "inventory_", "group_names", "groups", "hostvars", "omit", "playbook_dir", "role_")
# How many hosts a message names before it counts the rest.
NAMED = 3


def origin_of(record: dict | None) -> str:
    return (record or {}).get("origin") or ""


def problem(who: str, name: str, record: dict | None, what: str, allowed: str) -> str:
    """``<who>: <name> = <value> (<origin>): <what>; allowed: <allowed>``."""
    shown_value = "(not set)" if record is None else shown(record.get("value"))
    where = f" ({origin_of(record)})" if origin_of(record) else ""
    return f"{who}: {name} = {shown_value}{where}: {what}; allowed: {allowed}"


def host_list(hosts) -> str:
    hosts = sorted(hosts)
    head = ", ".join(hosts[:NAMED])
    return head + (f" and {len(hosts) - NAMED} more" if len(hosts) > NAMED else "")


def descendant_groups(groups: dict, name: str) -> set:
    seen, stack = set(), [name]
    while stack:
        group = stack.pop()
        if group in seen or group not in groups:
            continue
        seen.add(group)
        stack.extend(groups[group].get("children") or [])
    return seen


def hosts_of(groups: dict, name: str) -> set:
    return {h for g in descendant_groups(groups, name) for h in groups[g].get("hosts") or []}


def near_miss(name: str, role_options) -> str | None:
    """The kube-accel variable or role option a name without the accel_ prefix was probably meant to be."""
    hint = did_you_mean(name.lower())
    if hint:
        return hint
    match = difflib.get_close_matches(name.lower(), list(role_options or ()), n=1, cutoff=0.88)
    return match[0] if match else None


def is_ansible_name(name: str) -> bool:
    return name.startswith(ANSIBLE_NAMES) or name in ANSIBLE_NAMES


def applies(entry: dict, settings: dict) -> bool:
    for other, wanted in (entry.get("applies") or {}).items():
        value = settings.get(other, default_of(other))
        if wanted == "nonzero":
            if not value:
                return False
        elif value not in wanted:
            return False
    return True


def applies_text(entry: dict) -> str:
    parts = []
    for other, wanted in (entry.get("applies") or {}).items():
        if wanted == "nonzero":
            parts.append(f"{other} above 0")
        else:
            parts.append(f"{other} " + " or ".join(str(w).lower() if isinstance(w, bool) else str(w) for w in wanted))
    return " and ".join(parts)


def minor_version(version: str) -> tuple[int, int] | None:
    parts = version.lstrip("v").split(".")
    return (int(parts[0]), int(parts[1])) if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit() else None


def group_depths(groups: dict) -> dict:
    """Each group's depth below ``all`` (the longest path), as Ansible orders group variables."""
    depth = {"all": 0}
    frontier = ["all"]
    for _round in range(len(groups) + 1):
        nxt = []
        for group in frontier:
            for child in groups.get(group, {}).get("children") or []:
                if depth.get(child, -1) < depth[group] + 1:
                    depth[child] = depth[group] + 1
                    nxt.append(child)
        if not nxt:
            break
        frontier = nxt
    return depth


def same_record(record: dict | None, reference: dict | None, path: bool = False) -> bool:
    if record is None or reference is None:
        return record is None and reference is None
    if record.get("error") or reference.get("error"):
        return record.get("error") == reference.get("error") and origin_of(record) == origin_of(reference)
    mine, theirs = record.get("value"), reference.get("value")
    if path and isinstance(mine, str) and isinstance(theirs, str):
        # "{{ inventory_dir }}/../x" from two inventory sources spells one file two ways.
        return posixpath.normpath(mine) == posixpath.normpath(theirs)
    return repr(mine) == repr(theirs)
