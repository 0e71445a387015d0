# Copyright: kube-accel contributors
# Apache License 2.0
"""Whether a release must change: the desired release (helm's server-side dry run) against the deployed one, and the
diff that ``--diff`` shows. Idempotence without the helm-diff plugin."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.kube_accel.gpu.plugins.module_utils.common.pyyaml import SAFE_LOADER, yaml
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm.errors import HelmError
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm.values import normalize, values_yaml

# Kinds without a namespace, so the objects list does not invent one for them.
CLUSTER_SCOPED_KINDS = frozenset(
    {
        "APIService",
        "CSIDriver",
        "CSINode",
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "IngressClass",
        "MutatingWebhookConfiguration",
        "Namespace",
        "Node",
        "PersistentVolume",
        "PriorityClass",
        "RuntimeClass",
        "StorageClass",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ValidatingWebhookConfiguration",
        "VolumeAttachment",
    }
)


def manifest_docs(manifest: str) -> list[dict]:
    try:
        return [doc for doc in yaml.load_all(manifest or "", Loader=SAFE_LOADER) if isinstance(doc, dict)]
    except yaml.YAMLError as exc:
        raise HelmError(f"cannot parse the release manifest: {exc}") from None


def manifest_objects(manifest: str, namespace: str) -> list[dict]:
    """kind/name/namespace of each manifest object; namespaced objects default to the release namespace."""
    objects = []
    for doc in manifest_docs(manifest):
        kind = doc.get("kind", "")
        meta = doc.get("metadata") or {}
        ns = None if kind in CLUSTER_SCOPED_KINDS else meta.get("namespace") or namespace
        objects.append({"kind": kind, "name": meta.get("name", ""), "namespace": ns})
    return objects


def _object_key(doc: dict) -> str:
    meta = doc.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{doc.get('kind', '?')}/{ns + '/' if ns else ''}{meta.get('name', '?')}"


@dataclass
class Deployed:
    """The release as helm reports it; ``None`` fields when there is no release."""

    revision: int
    status: str
    chart: str  # helm list's "<name>-<version>"
    app_version: str
    values: dict
    manifest: str


@dataclass
class Desired:
    chart_name: str
    chart_version: str
    app_version: str
    values: dict
    manifest: str | None  # None when it could not be rendered (release busy): decided on the rest


@dataclass
class Decision:
    changed: bool
    reasons: list[str] = field(default_factory=list)


def decide(desired: Desired, deployed: Deployed | None) -> Decision:
    """Would ``helm upgrade`` change anything? Reasons say what, in words, for check mode and logs."""
    if deployed is None:
        return Decision(True, [f"release not installed: would install {desired.chart_name}-{desired.chart_version}"])
    reasons = []
    if deployed.status != "deployed":
        reasons.append(f"release status is {deployed.status!r}, not 'deployed'")
    want_chart = f"{desired.chart_name}-{desired.chart_version}"
    if deployed.chart != want_chart:
        reasons.append(f"chart {deployed.chart} -> {want_chart}")
    if desired.app_version and deployed.app_version != desired.app_version:
        reasons.append(f"app version {deployed.app_version or '(none)'} -> {desired.app_version}")
    before, after = normalize(deployed.values), normalize(desired.values)
    if before != after:
        reasons.append("values differ: " + ", ".join(_changed_keys(before, after)))
    if desired.manifest is not None:
        old = {_object_key(d): d for d in manifest_docs(deployed.manifest)}
        new = {_object_key(d): d for d in manifest_docs(desired.manifest)}
        changed_objects = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
        if changed_objects:
            reasons.append("manifest differs: " + ", ".join(changed_objects))
    return Decision(bool(reasons), reasons)


def _changed_keys(before: Any, after: Any, prefix: str = "") -> list[str]:
    if isinstance(before, dict) and isinstance(after, dict):
        keys = []
        for key in sorted(before.keys() | after.keys()):
            path = f"{prefix}.{key}" if prefix else str(key)
            if key not in before or key not in after:
                keys.append(path)
            elif before[key] != after[key]:
                keys.extend(_changed_keys(before[key], after[key], path))
        return keys
    return [prefix or "(root)"]


def build_diff(name: str, deployed: Deployed | None, desired: Desired) -> list[dict]:
    """Ansible diff entries (values as YAML, then the manifest) that the callback prints as unified diffs."""
    before_values = values_yaml(deployed.values) if deployed else ""
    rev = f"revision {deployed.revision}" if deployed else "not installed"
    entries = [
        {
            "before_header": f"{name} values ({rev})",
            "after_header": f"{name} values (desired)",
            "before": before_values,
            "after": values_yaml(desired.values),
        }
    ]
    if desired.manifest is not None:
        entries.append(
            {
                "before_header": f"{name} manifest ({rev})",
                "after_header": f"{name} manifest (desired)",
                "before": clean_manifest(deployed.manifest) if deployed else "",
                "after": clean_manifest(desired.manifest),
            }
        )
    return entries


def clean_manifest(text: str) -> str:
    return text.strip("\n") + "\n" if text and text.strip() else ""


def unified_diff(entries: list[dict]) -> str:
    """The same diff as one text, roughly as Ansible's callback prints it (for tests and logs)."""
    out = []
    for entry in entries:
        out.extend(
            difflib.unified_diff(
                entry["before"].splitlines(keepends=True),
                entry["after"].splitlines(keepends=True),
                fromfile=entry["before_header"],
                tofile=entry["after_header"],
            )
        )
    return "".join(out)
