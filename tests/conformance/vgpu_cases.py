"""Every vgpu release the conformance tests check: each values file of the chart suite, and the vgpu releases the
cluster play builds for inventories/example and inventories/lab (helm.pool_charts.pool_releases, the play's own
code)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from chartlib import VALUES_DIR, release_name, render
from test_release_values import releases


def _cases() -> list[tuple[str, str, dict]]:
    out = []
    for path in sorted((VALUES_DIR / "vgpu").glob("*.yaml")):
        out.append((f"values-{path.stem}", release_name("vgpu", path), yaml.safe_load(path.read_text()) or {}))
    for inventory in ("example", "lab"):
        # The values the cluster play passes for the inventory, its cluster settings included (control-plane CIDRs).
        for release, _pools in releases(inventory):
            if release["chart"] == "vgpu":
                out.append((f"{inventory}-{release['key']}", release["name"], release["values"]))
    return out


CASES = _cases()


def params(backend: str) -> list:
    return [pytest.param(name, release, values, id=name) for name, release, values in CASES
            if values.get("backend", "hami") == backend]


def render_case(tmp_path: Path, release: str, values: dict, kube_version: str = "1.36.0") -> list[dict]:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return render("vgpu", [path], kube_version, release=release)


def label_selector_matches(selector: dict | None, labels: dict) -> bool:
    """A Kubernetes LabelSelector (matchLabels + matchExpressions) against a label set."""
    selector = selector or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        ok = {"In": key in labels and labels[key] in values,
              "NotIn": key not in labels or labels[key] not in values,
              "Exists": key in labels,
              "DoesNotExist": key not in labels}[op]
        if not ok:
            return False
    return True


BUILTIN_ROLES = {"system:kube-scheduler", "system:volume-scheduler", "extension-apiserver-authentication-reader"}


def grants(objs: list[dict], service_account: str) -> set[tuple[str, str, str, str]]:
    """(verb, apiGroup, resource, namespace or "*") the chart's own (Cluster)Roles bound to a ServiceAccount grant.

    Built-in roles bound for kube-scheduler (BUILTIN_ROLES) are not counted: they are kube-scheduler's, not the
    upstream component's. Rules limited by resourceNames are left out (they never grant list or watch)."""
    roles = {(o["kind"], o["metadata"]["name"], o["metadata"].get("namespace", "")): o
             for o in objs if o["kind"] in ("Role", "ClusterRole")}
    out: set[tuple[str, str, str, str]] = set()
    for binding in (o for o in objs if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        if not any(s.get("kind") == "ServiceAccount" and s["name"] == service_account
                   for s in binding.get("subjects", [])):
            continue
        ref = binding["roleRef"]
        ns = binding["metadata"].get("namespace", "")
        role = roles.get((ref["kind"], ref["name"], ns if ref["kind"] == "Role" else ""))
        if role is None:
            assert ref["name"] in BUILTIN_ROLES, f"{binding['metadata']['name']} binds undefined {ref['name']}"
            continue
        scope = ns if binding["kind"] == "RoleBinding" else "*"
        for rule in role["rules"]:
            if rule.get("resourceNames"):
                continue
            for verb in rule["verbs"]:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        out.add((verb, group, resource, scope))
    return out


def granted(have: set[tuple[str, str, str, str]], verb: str, group: str, resource: str, namespace: str) -> bool:
    return (verb, group, resource, "*") in have or (bool(namespace) and (verb, group, resource, namespace) in have)
