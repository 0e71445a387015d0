# Copyright: kube-accel contributors
# Apache License 2.0
"""Helm release logic behind the ``accel_release`` module.

Everything that decides something lives here so it can be unit-tested without Ansible: helm version
detection, argv construction for helm v3 and v4, values rendering and schema validation, the change decision,
diffs and the mapping of helm's stderr to readable errors. The module only wires Ansible's parameters and
``run_command`` to it.

Idempotence without the helm-diff plugin: the desired release is rendered with
``helm upgrade --install --dry-run=server -o json`` (the same code path, capabilities and
``.Release.IsUpgrade`` as the real upgrade, but nothing is written) and compared with the deployed release
read back with ``helm list``, ``helm get values`` and ``helm get manifest``. Only when something differs is
the real upgrade run.
"""

from __future__ import annotations

import copy
import difflib
import json
import os
import re
import shlex
import shutil
import tarfile
import tempfile
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

try:
    import yaml
except ImportError:  # on the host that runs helm; the modules fail with missing_required_lib("PyYAML")
    yaml = None
    YAML_IMPORT_ERROR = traceback.format_exc()
else:
    YAML_IMPORT_ERROR = None

# (rc, stdout, stderr) for an argv; Ansible's module.run_command in production, a fake in unit tests.
Runner = Callable[[Sequence[str]], tuple[int, str, str]]

# Who holds kube-accel's run lock, when it is another live run (None: nobody, or this run); may raise when the
# lock cannot be read. accel_lease.other_holder over the cluster's Lease in production.
LockCheck = Callable[[], "str | None"]

# libyaml's parser when PyYAML has it (same safe subset): the pure-Python one spends about 0.3 s per release
# reading back and comparing the manifests.
SAFE_LOADER = getattr(yaml, "CSafeLoader", None) or getattr(yaml, "SafeLoader", None)

# Where scripts/toolchain.sh links the pinned helm; tried after PATH so the lab works without a system helm.
TOOLCHAIN_BIN = os.path.join(os.path.expanduser("~"), ".cache", "kube-accel", "bin")

# Release states helm writes while an operation is in flight; an upgrade on top of them is refused by helm.
PENDING_STATES = ("pending-install", "pending-upgrade", "pending-rollback")

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

# stderr fragments that mean "the API server could not be reached or refused us", not a chart problem.
_UNREACHABLE = (
    "kubernetes cluster unreachable",
    "connection refused",
    "no such host",
    "i/o timeout",
    "tls handshake timeout",
    "x509:",
    "unauthorized",
    "the server has asked for the client to provide credentials",
    "no configuration has been provided",
    "invalid configuration",
)


class HelmError(Exception):
    """A failure with a message meant for the user; ``stderr`` and ``command`` are returned alongside it."""

    def __init__(self, msg: str, stderr: str = "", command: Sequence[str] | None = None, **extra: Any):
        super().__init__(msg)
        self.msg = msg
        self.stderr = stderr
        self.command = list(command) if command else None
        self.extra = extra


# ----------------------------------------------------------------------------------------------------------
# helm binary and version


def find_helm(binary: str, which: Callable[[str], str | None] = shutil.which) -> str:
    """Absolute path of the helm to run: an explicit path, PATH, then the toolchain cache."""
    if os.sep in binary:
        path = os.path.expanduser(binary)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
        raise HelmError(f"helm binary {binary!r} does not exist or is not executable; set helm_binary to a helm 3 or 4")
    found = which(binary)
    if found:
        return found
    cached = os.path.join(TOOLCHAIN_BIN, binary)
    if os.path.isfile(cached) and os.access(cached, os.X_OK):
        return cached
    raise HelmError(
        f"helm binary {binary!r} not found on PATH nor in {TOOLCHAIN_BIN}; install helm 3 or 4 "
        "(make toolchain builds both) or set helm_binary to its path"
    )


def parse_helm_version(text: str) -> tuple[int, int, int]:
    """``v3.21.4+g1a2b3c`` / ``v4.2.4`` / ``v3.21`` -> (major, minor, patch)."""
    match = re.search(r"v?(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    if not match:
        raise HelmError(f"cannot read helm's version from {text.strip()!r}")
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


# ----------------------------------------------------------------------------------------------------------
# values


def deep_merge(base: dict, override: dict) -> dict:
    """``override`` laid over ``base``; nested dicts merge, everything else (lists included) is replaced."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def coalesce(defaults: dict, user: dict) -> dict:
    """What helm validates against the schema: chart defaults, user values on top; a null removes a key."""
    out = copy.deepcopy(defaults)
    for key, value in user.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = coalesce(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def normalize(values: Any) -> Any:
    """Values as helm stores them (JSON round trip), so 1 vs 1.0 or tuple vs list never count as a change."""
    if values is None:
        return {}
    return json.loads(json.dumps(values, sort_keys=True, default=str))


def render_values_template(path: str, variables: dict) -> dict:
    """Render a Jinja2 values template with ``variables`` and parse the result as a YAML mapping."""
    import jinja2  # only needed when values_template is used

    try:
        with open(path, encoding="utf-8") as handle:
            source = handle.read()
    except OSError as exc:
        raise HelmError(f"cannot read values_template {path}: {exc.strerror}") from None
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
    env.filters["to_yaml"] = lambda v: yaml.safe_dump(v, default_flow_style=True).rstrip("\n").removesuffix("...")
    env.filters["to_nice_yaml"] = lambda v, indent=2: yaml.safe_dump(v, default_flow_style=False, indent=indent)
    env.filters["to_json"] = lambda v: json.dumps(v, sort_keys=True)
    try:
        text = env.from_string(source).render(**variables)
    except jinja2.TemplateError as exc:
        where = f" line {exc.lineno}" if getattr(exc, "lineno", None) else ""
        raise HelmError(f"values_template {path}{where}: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise HelmError(f"values_template {path} did not render to valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise HelmError(f"values_template {path} must render to a YAML mapping, got {type(data).__name__}")
    return data


def values_yaml(values: dict) -> str:
    return yaml.safe_dump(normalize(values), default_flow_style=False, sort_keys=True) if values else "{}\n"


# ----------------------------------------------------------------------------------------------------------
# schema validation


def _json_path(parts: Sequence[Any]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(root)"


def _short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# How each common JSON Schema keyword reads after the offending value.
_CONSTRAINTS = {
    "enum": "is not one of the allowed values {}",
    "const": "is not the required value {}",
    "type": "is not of type {}",
    "minimum": "is below the minimum {}",
    "maximum": "is above the maximum {}",
    "exclusiveMinimum": "must be greater than {}",
    "exclusiveMaximum": "must be less than {}",
    "pattern": "does not match the pattern {}",
    "minLength": "is shorter than the minimum length {}",
    "maxLength": "is longer than the maximum length {}",
    "minItems": "has fewer items than the minimum {}",
    "maxItems": "has more items than the maximum {}",
    "uniqueItems": "has duplicate items",
    "multipleOf": "is not a multiple of {}",
    "format": "is not a valid {}",
}


def _constraint(err: Any) -> str:
    phrase = _CONSTRAINTS.get(err.validator)
    if phrase is None:
        return f"violates {err.validator}: {_short(err.validator_value)}"
    return phrase.format(_short(err.validator_value))


def schema_errors(schema: dict, values: dict) -> list[str]:
    """One readable line per violation: field path, bad value, the constraint and the schema's description."""
    import jsonschema

    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        return [f"the chart's values.schema.json is itself invalid: {exc.message}"]
    lines = []
    for err in sorted(cls(schema).iter_errors(values), key=lambda e: (list(map(str, e.absolute_path)), e.validator)):
        line = f"{_json_path(list(err.absolute_path))}: {_short(err.instance)} {_constraint(err)}"
        if err.validator in ("required", "additionalProperties", "dependentRequired", "propertyNames"):
            # The bad value is the whole parent object; jsonschema's own message names the key at fault.
            line = f"{_json_path(list(err.absolute_path))}: {err.message}"
        description = err.schema.get("description") if isinstance(err.schema, dict) else None
        if description:
            line += f" ({description})"
        for sub in err.context or ():  # anyOf/oneOf: say what each branch wanted
            line += f"\n    - {_json_path(list(sub.absolute_path))}: {sub.message}"
        lines.append(line)
    return lines


# ----------------------------------------------------------------------------------------------------------
# local chart files


@dataclass
class LocalChart:
    """A chart's metadata, default values and schema, when the chart can be read from disk."""

    metadata: dict
    defaults: dict
    schema: dict | None


def _load_yaml_text(text: str, what: str) -> dict:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise HelmError(f"{what} is not valid YAML: {exc}") from None
    return data if isinstance(data, dict) else {}


def _load_json_text(text: str, what: str) -> dict:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise HelmError(f"{what} is not valid JSON: {exc}") from None


def read_local_chart(path: str) -> LocalChart:
    """Read Chart.yaml, values.yaml and values.schema.json from a chart directory or packaged .tgz."""
    files: dict[str, str] = {}
    wanted = ("Chart.yaml", "values.yaml", "values.schema.json")
    if os.path.isdir(path):
        for name in wanted:
            full = os.path.join(path, name)
            if os.path.isfile(full):
                with open(full, encoding="utf-8") as handle:
                    files[name] = handle.read()
    else:
        try:
            with tarfile.open(path, "r:*") as tar:
                for member in tar.getmembers():
                    top, _unused, rest = member.name.partition("/")
                    if top and rest in wanted and member.isfile():
                        extracted = tar.extractfile(member)
                        if extracted is not None:
                            files[rest] = extracted.read().decode("utf-8")
        except (OSError, tarfile.TarError) as exc:
            raise HelmError(f"cannot read chart archive {path}: {exc}") from None
    if "Chart.yaml" not in files:
        raise HelmError(f"{path} is not a helm chart (no Chart.yaml)")
    schema = None
    if "values.schema.json" in files:
        schema = _load_json_text(files["values.schema.json"], f"{path}/values.schema.json")
    return LocalChart(
        metadata=_load_yaml_text(files["Chart.yaml"], f"{path}/Chart.yaml"),
        defaults=_load_yaml_text(files.get("values.yaml", ""), f"{path}/values.yaml"),
        schema=schema,
    )


def is_local_chart(chart: str) -> bool:
    return os.path.exists(chart) and not chart.startswith(("oci://", "http://", "https://"))


# ----------------------------------------------------------------------------------------------------------
# manifests and the change decision


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
                "before": _clean_manifest(deployed.manifest) if deployed else "",
                "after": _clean_manifest(desired.manifest),
            }
        )
    return entries


def _clean_manifest(text: str) -> str:
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


# ----------------------------------------------------------------------------------------------------------
# error mapping


def explain_failure(action: str, rc: int, stderr: str, kubeconfig: str | None, context: str | None) -> str:
    """A one-paragraph message for a failed helm call; helm's own last line is always kept."""
    text = (stderr or "").strip()
    low = text.lower()
    last = text.splitlines()[-1] if text else f"helm exited with rc {rc} and no message"
    where = f"kubeconfig {kubeconfig or os.environ.get('KUBECONFIG') or '~/.kube/config'}"
    if context:
        where += f", context {context}"
    match = re.search(r'context "([^"]+)" does not exist', text)
    if match:
        return f"{action}: kube context {match.group(1)!r} does not exist in {where.split(',', maxsplit=1)[0]}: {last}"
    if any(fragment in low for fragment in _UNREACHABLE):
        return f"{action}: cannot reach the Kubernetes cluster ({where}): {last}"
    if "another operation (install/upgrade/rollback) is in progress" in low:
        return (
            f"{action}: the release is locked by another helm operation (pending state); wait for it or "
            f"roll it back with `helm rollback`: {last}"
        )
    if "values don't meet the specifications of the schema" in low:
        return f"{action}: helm rejected the values against the chart's schema: {text}"
    return f"{action} failed: {last}"


def explain_rollout_failure(
    name: str, stderr: str, atomic: bool, timeout: str, before: Deployed | None, after: Deployed | None
) -> str:
    """Why an upgrade failed and, with atomic, where the release stands now (read back after the failure)."""
    text = (stderr or "").strip()
    low = text.lower()
    timed_out = any(s in low for s in ("timed out", "context deadline exceeded", "deadline exceeded"))
    cause = f"its resources did not become ready within {timeout}" if timed_out else "helm reported an error"
    verb = "upgrade" if before is not None else "install"
    msg = f"helm {verb} of release {name!r} failed: {cause}"
    if atomic:
        if before is None and after is None:
            msg += "; the failed install was removed automatically"
        elif before is not None and after is not None and after.status == "deployed":
            msg += f"; rolled back automatically, revision {after.revision} is deployed again"
        else:
            status = f"revision {after.revision} is {after.status}" if after else "state unknown"
            msg += f"; automatic rollback did not restore a deployed revision ({status}, see `helm history`)"
    lines = text.splitlines()
    return msg + (f". helm said: {lines[-1]}" if lines else "")


# ----------------------------------------------------------------------------------------------------------
# the helm client


@dataclass
class ReleaseSpec:
    name: str
    namespace: str
    chart: str
    chart_version: str | None = None
    values: dict = field(default_factory=dict)
    wait: bool = True
    timeout: str = "5m"
    atomic: bool = True
    create_namespace: bool = True


class Helm:
    """Thin argv builder and parser over one helm binary; ``run`` does the process work."""

    def __init__(self, binary: str, run: Runner, kubeconfig: str | None = None, context: str | None = None):
        self.binary = binary
        self._run = run
        self.kubeconfig = kubeconfig
        self.context = context
        self.version = self._detect_version()
        self.major = self.version[0]
        if self.major not in (3, 4):
            raise HelmError(f"helm {'.'.join(map(str, self.version))} at {binary} is not supported: use helm 3 or 4")

    # -- process plumbing
    def _detect_version(self) -> tuple[int, int, int]:
        argv = [self.binary, "version", "--short"]
        try:
            rc, out, err = self._run(argv)
        except OSError as exc:  # not executable, wrong arch...
            raise HelmError(f"cannot run helm at {self.binary}: {exc}", command=argv) from None
        if rc != 0:
            raise HelmError(f"`helm version` failed at {self.binary}: {(err or out).strip()}", stderr=err, command=argv)
        return parse_helm_version(out)

    def cluster_flags(self, namespace: str) -> list[str]:
        flags = ["--namespace", namespace]
        if self.kubeconfig:
            flags += ["--kubeconfig", self.kubeconfig]
        if self.context:
            flags += ["--kube-context", self.context]
        return flags

    def run(self, argv: list[str]) -> tuple[int, str, str]:
        return self._run(argv)

    def call(self, argv: list[str], action: str) -> str:
        rc, out, err = self._run(argv)
        if rc != 0:
            raise HelmError(explain_failure(action, rc, err, self.kubeconfig, self.context), stderr=err, command=argv)
        return out

    # -- argv builders (pure)
    def upgrade_argv(self, spec: ReleaseSpec, values_file: str, dry_run: bool = False) -> list[str]:
        argv = [
            self.binary,
            "upgrade",
            spec.name,
            spec.chart,
            "--install",
            *self.cluster_flags(spec.namespace),
        ]
        # Declarative values: without --reset-values helm 3 reuses the last values when -f is empty.
        argv += ["--values", values_file, "--reset-values"]
        if spec.chart_version:
            argv += ["--version", spec.chart_version]
        if spec.create_namespace:
            argv.append("--create-namespace")
        if dry_run:
            # Server dry run: the cluster's capabilities and lookup(), nothing written (helm 3 and 4).
            return [*argv, "--dry-run=server", "--output", "json"]
        if self.major >= 4:
            if spec.atomic:
                argv.append("--rollback-on-failure")
            if spec.wait or spec.atomic:
                argv.append("--wait=watcher")
        else:
            if spec.atomic:
                argv.append("--atomic")
            if spec.wait or spec.atomic:
                argv.append("--wait")
        return [*argv, "--timeout", spec.timeout, "--output", "json"]

    def uninstall_argv(self, name: str, namespace: str, wait: bool, timeout: str) -> list[str]:
        argv = [self.binary, "uninstall", name, *self.cluster_flags(namespace)]
        if wait:
            argv.append("--wait" if self.major < 4 else "--wait=watcher")
        return [*argv, "--timeout", timeout]

    def rollback_argv(self, name: str, namespace: str, revision: int, wait: bool, timeout: str) -> list[str]:
        argv = [self.binary, "rollback", name, str(revision), *self.cluster_flags(namespace)]
        if wait:
            argv.append("--wait" if self.major < 4 else "--wait=watcher")
        return [*argv, "--timeout", timeout]

    # -- reads
    def history(self, name: str, namespace: str) -> list[dict]:
        """``helm history -o json``: revision, updated, status, chart, app_version, description (helm 3 and 4)."""
        argv = [self.binary, "history", name, *self.cluster_flags(namespace), "--max", "256", "--output", "json"]
        return _parse_json(self.call(argv, f"reading the history of release {name}"), argv) or []

    def last_good_revision(self, name: str, namespace: str) -> int | None:
        """The revision to go back to: the deployed one (helm 3 keeps it so), else the newest superseded."""
        return last_good(self.history(name, namespace))

    def deployed(self, name: str, namespace: str) -> Deployed | None:
        argv = [
            self.binary,
            "list",
            *self.cluster_flags(namespace),
            # helm 3 lists only deployed and failed releases unless told --all; helm 4 lists every state.
            *(["--all"] if self.major < 4 else []),
            "--filter",
            f"^{re.escape(name)}$",
            "--output",
            "json",
        ]
        entries = _parse_json(self.call(argv, "reading the release list"), argv)
        entry = next((e for e in entries or [] if e.get("name") == name), None)
        if entry is None or entry.get("status") == "uninstalled":  # kept history of an uninstall: gone
            return None
        status = entry.get("status", "")
        argv = [self.binary, "get", "values", name, *self.cluster_flags(namespace), "--output", "json"]
        values = _parse_json(self.call(argv, f"reading values of release {name}"), argv) or {}
        argv = [self.binary, "get", "manifest", name, *self.cluster_flags(namespace)]
        manifest = self.call(argv, f"reading the manifest of release {name}")
        return Deployed(
            revision=int(entry.get("revision") or 0),
            status=status,
            chart=entry.get("chart", ""),
            app_version=entry.get("app_version", "") or "",
            values=values,
            manifest=manifest,
        )

    def render(self, spec: ReleaseSpec, values_file: str) -> dict:
        argv = self.upgrade_argv(spec, values_file, dry_run=True)
        return _parse_json(self.call(argv, f"rendering release {spec.name} (dry run)"), argv)

    def show_chart(self, chart: str, version: str | None) -> dict:
        argv = [self.binary, "show", "chart", chart, *(["--version", version] if version else [])]
        return _load_yaml_text(self.call(argv, f"reading chart {chart}"), f"Chart.yaml of {chart}")

    def pull(self, chart: str, version: str | None, dest: str) -> str:
        argv = [
            self.binary,
            "pull",
            chart,
            "--untar",
            "--destination",
            dest,
            *(["--version", version] if version else []),
        ]
        self.call(argv, f"fetching chart {chart} for schema validation")
        entries = [e for e in os.listdir(dest) if os.path.isdir(os.path.join(dest, e))]
        if len(entries) != 1:
            raise HelmError(f"`helm pull {chart}` did not unpack one chart directory in {dest}: {entries}")
        return os.path.join(dest, entries[0])


def _parse_json(text: str, argv: Sequence[str]) -> Any:
    try:
        return json.loads(text) if text.strip() else None
    except json.JSONDecodeError as exc:
        raise HelmError(f"unexpected output from `{' '.join(argv[1:3])}` (not JSON: {exc})", command=argv) from None


# ----------------------------------------------------------------------------------------------------------
# the whole operation


def desired_values(values: dict | None, template: str | None, template_vars: dict | None) -> dict:
    """The rendered template (if any) with ``values`` laid on top."""
    base = render_values_template(template, template_vars or {}) if template else {}
    return deep_merge(base, values or {})


def validate_values(helm: Helm, spec: ReleaseSpec) -> None:
    """Check the values against the chart's values.schema.json before helm sees them (raises HelmError)."""
    tmp = None
    try:
        source = spec.chart
        if not is_local_chart(source):
            tmp = tempfile.mkdtemp(prefix="accel-release-")
            source = helm.pull(spec.chart, spec.chart_version, tmp)
        local = read_local_chart(source)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    if not local.schema:
        return
    problems = schema_errors(local.schema, normalize(coalesce(local.defaults, spec.values)))
    if problems:
        chart = f"{local.metadata.get('name', spec.chart)}-{local.metadata.get('version', '?')}"
        raise HelmError(
            f"values for release {spec.name} do not match chart {chart}'s values.schema.json "
            f"({len(problems)} problem{'s' if len(problems) > 1 else ''}):\n  - " + "\n  - ".join(problems),
            schema_errors=problems,
        )


def ensure_present(helm: Helm, spec: ReleaseSpec, *, check_mode: bool, diff_mode: bool, validate: bool,
                   run_lock: LockCheck | None = None, clock: Callable[[], datetime] | None = None) -> dict:
    """Install or upgrade only when the desired release differs from the deployed one.

    A failed release is rolled back to its last good revision first; a pending one is recovered first when its
    operation is provably dead (``recover_pending``), else this fails saying what the operator can run.
    """
    if validate:
        validate_values(helm, spec)
    result: dict[str, Any] = {"changed": False}
    deployed = helm.deployed(spec.name, spec.namespace)
    recovery: list[str] = []
    if deployed is not None and deployed.status == "failed":
        deployed, recovery = _recover_failed(helm, spec, deployed, result, check_mode)
    elif deployed is not None and deployed.status in PENDING_STATES:
        deployed, recovery = recover_pending(helm, spec, deployed, result, check_mode, run_lock, clock or _utcnow)
    try:
        return _converge(helm, spec, deployed, recovery, result, check_mode=check_mode, diff_mode=diff_mode)
    finally:
        if diff_mode and result.get("recovered"):
            result["diff"] = [{"prepared": recovery_text(spec.name, result["recovered"])}, *result.get("diff", [])]


def _converge(helm: Helm, spec: ReleaseSpec, deployed: Deployed | None, recovery: list[str], result: dict, *,
              check_mode: bool, diff_mode: bool) -> dict:
    with tempfile.NamedTemporaryFile("w", prefix="accel-release-", suffix=".yaml", delete=False) as handle:
        handle.write(values_yaml(spec.values))
        values_file = handle.name
    try:
        if deployed is not None and deployed.status in PENDING_STATES:
            # helm refuses to render an upgrade of a locked release; it is a change either way.
            meta = helm.show_chart(spec.chart, spec.chart_version)
            rendered = None
        else:
            rendered = helm.render(spec, values_file) or {}
            meta = (rendered.get("chart") or {}).get("metadata") or {}
        desired = Desired(
            chart_name=meta.get("name", ""),
            chart_version=str(meta.get("version", "")),
            app_version=str(meta.get("appVersion", "") or ""),
            values=spec.values,
            manifest=rendered.get("manifest", "") if rendered is not None else None,
        )
        decision = decide(desired, deployed)
        result["changes"] = recovery + decision.reasons
        result["chart"] = f"{desired.chart_name}-{desired.chart_version}"
        result["app_version"] = desired.app_version
        if diff_mode and decision.changed:
            result["diff"] = build_diff(spec.name, deployed, desired)
        if not decision.changed:
            result.update(_release_facts(deployed, spec.namespace))
            return result
        argv = helm.upgrade_argv(spec, values_file)
        result.update(changed=True, command=argv)
        if check_mode:
            result.update(
                revision=deployed.revision if deployed else None,
                status=deployed.status if deployed else None,
                objects=manifest_objects(desired.manifest or "", spec.namespace),
            )
            return result
        rc, out, err = helm.run(argv)
        if rc != 0:
            after = _safe_deployed(helm, spec)
            if any(fragment in (err or "").lower() for fragment in _UNREACHABLE):
                msg = explain_failure(f"helm upgrade of release {spec.name!r}", rc, err, helm.kubeconfig, helm.context)
            else:
                msg = explain_rollout_failure(spec.name, err, spec.atomic, spec.timeout, deployed, after)
            raise HelmError(
                msg,
                stderr=err,
                command=argv,
                revision=after.revision if after else None,
                status=after.status if after else None,
            )
        released = _parse_json(out, argv) or {}
        info = released.get("info") or {}
        meta = (released.get("chart") or {}).get("metadata") or {}
        result.update(
            revision=released.get("version"),
            status=info.get("status"),
            chart=f"{meta.get('name', desired.chart_name)}-{meta.get('version', desired.chart_version)}",
            app_version=str(meta.get("appVersion", desired.app_version) or ""),
            objects=manifest_objects(released.get("manifest", ""), spec.namespace),
        )
        return result
    finally:
        os.unlink(values_file)


def release_specs(items: Sequence[dict], **shared: Any) -> list[ReleaseSpec]:
    """ReleaseSpecs from dicts with ``name``, ``chart`` and optionally ``values``, ``chart_version``, ``namespace``
    (other keys are ignored); ``shared`` gives the rest (namespace, wait, timeout, atomic, create_namespace)."""
    specs, problems, seen = [], [], set()
    for index, item in enumerate(items):
        name, chart = item.get("name"), item.get("chart")
        if not name or not chart:
            problems.append(f"releases[{index}] needs a name and a chart (got name={name!r}, chart={chart!r})")
            continue
        if name in seen:
            problems.append(f"release {name} is listed twice")
        if not isinstance(item.get("values") or {}, dict):
            problems.append(f"release {name}: values must be a mapping, not {type(item['values']).__name__}")
        seen.add(name)
        specs.append(ReleaseSpec(**{**shared, "name": str(name), "chart": str(chart),
                                    "namespace": str(item.get("namespace") or shared["namespace"]),
                                    "chart_version": item.get("chart_version"), "values": item.get("values") or {}}))
    if problems:
        raise HelmError("invalid releases: " + "; ".join(problems))
    return specs


def ensure_each_present(helm: Helm, specs: Sequence[ReleaseSpec], *, check_mode: bool, diff_mode: bool,
                        validate: bool, workers: int = 4,
                        run_lock: LockCheck | None = None) -> tuple[dict[str, dict], dict[str, HelmError]]:
    """``ensure_present`` for every release, ``workers`` at a time: (name -> result, name -> error).

    Releases are independent and each mostly waits (on helm, then on its rollout), so they run side by side;
    one failing does not stop the others.
    """

    def one(spec: ReleaseSpec) -> dict:
        try:
            return ensure_present(helm, spec, check_mode=check_mode, diff_mode=diff_mode, validate=validate,
                                  run_lock=run_lock)
        except HelmError:
            raise
        except Exception as exc:  # a bug must still read as a message per release; the traceback rides along
            raise HelmError(f"unexpected error: {exc}", exception=traceback.format_exc()) from exc

    results: dict[str, dict] = {}
    failures: dict[str, HelmError] = {}
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(specs) or 1))) as pool:
        futures = {spec.name: pool.submit(one, spec) for spec in specs}
        for name, future in futures.items():
            try:
                results[name] = future.result()
            except HelmError as exc:
                failures[name] = exc
    return results, failures


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


def last_good(entries: Sequence[dict]) -> int | None:
    """From ``helm history``: the deployed revision, else the newest superseded one."""
    for wanted in ("deployed", "superseded"):
        revisions = [int(e["revision"]) for e in entries if e.get("status") == wanted]
        if revisions:
            return max(revisions)
    return None


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_DURATION_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration_seconds(text: str) -> float:
    """A Go duration (``90s``, ``5m``, ``1h30m``) in seconds."""
    if not GO_DURATION.match(text or ""):
        raise HelmError(f"{text!r} is not a duration helm understands (e.g. 90s, 5m, 1h30m)")
    return sum(float(n) * _DURATION_UNIT[u] for n, u in _DURATION_PART.findall(text))


def parse_helm_time(text: str) -> datetime | None:
    """helm history's ``updated`` (RFC 3339 with nanoseconds) -> aware datetime; None when unreadable."""
    match = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$", (text or "").strip())
    if not match:
        return None
    base, frac, zone = match.groups()
    iso = f"{base}.{(frac or '0')[:6].ljust(6, '0')}{'+00:00' if zone == 'Z' else zone}"
    try:
        return datetime.fromisoformat(iso)
    except ValueError:
        return None


def _age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"


@dataclass
class Pending:
    """A release left in a pending state, as ``helm history`` shows it."""

    status: str
    revision: int
    age: float | None  # seconds since helm wrote the pending revision; None when its time is unreadable
    good_revision: int | None  # what a rollback goes back to; None for a first install

    @property
    def action(self) -> str:
        return "reinstall" if self.good_revision is None else "rollback"


def pending_of(entries: Sequence[dict], now: datetime) -> Pending | None:
    """The newest revision when it is pending (helm writes it before the operation and updates it after)."""
    if not entries:
        return None
    newest = max(entries, key=lambda e: int(e.get("revision") or 0))
    if newest.get("status") not in PENDING_STATES:
        return None
    updated = parse_helm_time(str(newest.get("updated") or ""))
    return Pending(
        status=newest["status"],
        revision=int(newest["revision"]),
        age=(now - updated).total_seconds() if updated else None,
        good_revision=last_good([e for e in entries if e is not newest]),
    )


def still_alive(pending: Pending, timeout_s: float, holder: str | None) -> list[str]:
    """Why the operation behind ``pending`` may still be running; empty when it is provably over.

    Provably over: no other kube-accel run holds the run lock, and the pending revision is older than the
    operation's timeout (helm stops waiting then, and an atomic one would have written a rollback revision).
    """
    reasons = []
    if holder:
        reasons.append(f"another kube-accel run holds the run lock: {holder}")
    if pending.age is None:
        reasons.append(f"the time of revision {pending.revision} cannot be read from `helm history`")
    elif pending.age <= timeout_s:
        reasons.append(f"revision {pending.revision} was written {_age(pending.age)} ago, within the operation's "
                       f"timeout ({_age(timeout_s)})")
    return reasons


def recovery_argv(helm: Helm, spec: ReleaseSpec, pending: Pending) -> list[str]:
    """What an operator runs to unlock the release: uninstall a pending first install, else roll back."""
    if pending.good_revision is None:
        return helm.uninstall_argv(spec.name, spec.namespace, True, spec.timeout)
    return helm.rollback_argv(spec.name, spec.namespace, pending.good_revision, spec.wait or spec.atomic,
                              spec.timeout)


def recovery_text(name: str, recovered: dict) -> str:
    """The recovery in words, for --diff and logs."""
    done = "would" if recovered.get("check_mode") else "did"
    if recovered["action"] == "reinstall":
        what = "uninstall it and install it again"
    else:
        what = f"roll back to revision {recovered['to_revision']}, then upgrade if it still differs"
    return (
        f"release {name}: found {recovered['status']} revision {recovered['revision']}, "
        f"{_age(recovered['age_s'])} old, older than the timeout ({recovered['timeout']}) and no other run holding "
        f"the run lock: the operation that wrote it is dead. Recovery ({done}): {what}.\n"
        f"  $ {shlex.join(recovered['command'])}\n"
    )


def recover_pending(
    helm: Helm, spec: ReleaseSpec, deployed: Deployed, result: dict, check_mode: bool,
    run_lock: LockCheck | None, clock: Callable[[], datetime],
) -> tuple[Deployed | None, list[str]]:
    """Recover a release a dead helm operation left pending, the way an operator would, or fail explaining.

    A pending first install is uninstalled (and then installed again by the caller); a pending upgrade or
    rollback is rolled back to the last deployed revision (and then upgraded when it still differs). Anything not
    proven dead is left alone: the error names the release, its status, the revision's age, the lock holder and
    the helm command an operator would run once sure no operation is alive.
    """
    entries = helm.history(spec.name, spec.namespace)
    pending = pending_of(entries, clock())
    if pending is None:  # the operation ended between `helm list` and `helm history`
        return helm.deployed(spec.name, spec.namespace), []
    timeout_s = duration_seconds(spec.timeout)
    try:
        holder = run_lock() if run_lock else None
    except Exception as exc:  # noqa: BLE001 - an unreadable lock proves nothing
        holder = f"unknown (the run lock could not be read: {exc})"
    argv = recovery_argv(helm, spec, pending)
    reasons = still_alive(pending, timeout_s, holder)
    age = _age(pending.age) if pending.age is not None else "unknown"
    if reasons:
        after = "install it again" if pending.action == "reinstall" else "upgrade it"
        raise HelmError(
            f"release {spec.name!r} (namespace {spec.namespace}) is {pending.status} at revision {pending.revision}, "
            f"{age} old; a helm operation may still be running on it ({'; '.join(reasons)}), so kube-accel leaves "
            f"it alone. Once sure no helm operation is alive, run: {shlex.join(argv)} "
            f"and run kube-accel again to {after}",
            command=argv,
            status=pending.status,
            revision=pending.revision,
            revision_age_s=None if pending.age is None else int(pending.age),
            lock_holder=holder,
        )
    recovered = {
        "status": pending.status,
        "revision": pending.revision,
        "age_s": int(pending.age or 0),
        "timeout": spec.timeout,
        "action": pending.action,
        "to_revision": pending.good_revision,
        "command": argv,
        "check_mode": check_mode,
    }
    result["recovered"] = recovered
    found = f"release status is {pending.status!r} (revision {pending.revision}, {age} old, operation dead)"
    if check_mode:
        verb = "uninstall and install again" if pending.action == "reinstall" else (
            f"roll back to revision {pending.good_revision} first")
        return deployed, [f"{found}: would {verb}"]
    if pending.action == "reinstall":
        helm.call(argv, f"uninstalling release {spec.name!r} left in {pending.status}")
        result["changed"] = True
        return None, [f"{found}: uninstalled, installing again"]
    helm.call(argv, f"rolling release {spec.name!r} left in {pending.status} back to revision {pending.good_revision}")
    result.update(changed=True, rolled_back_to=pending.good_revision)
    return helm.deployed(spec.name, spec.namespace), [f"{found}: rolled back to revision {pending.good_revision}"]


def _recover_failed(
    helm: Helm, spec: ReleaseSpec, deployed: Deployed, result: dict, check_mode: bool
) -> tuple[Deployed | None, list[str]]:
    """Roll a failed release back to its last good revision before upgrading it.

    helm 3 computes an upgrade's patch from the last *deployed* manifest, not from what the failed attempt left
    live, so a field the failed revision added (say a nodeSelector) would survive an upgrade that drops it. A
    rollback patches from the failed manifest and removes such fields; the upgrade then starts from known state.
    """
    good = helm.last_good_revision(spec.name, spec.namespace)
    if good is None:  # a failed first install: nothing to go back to, helm upgrades it in place
        return deployed, []
    argv = helm.rollback_argv(spec.name, spec.namespace, good, spec.wait or spec.atomic, spec.timeout)
    result["rollback_command"] = argv
    if check_mode:
        return deployed, [f"release status is 'failed': would first roll back to revision {good}"]
    helm.call(argv, f"rolling failed release {spec.name!r} back to revision {good}")
    result.update(changed=True, rolled_back_to=good)
    return helm.deployed(spec.name, spec.namespace), [f"release status was 'failed': rolled back to revision {good}"]


def _safe_deployed(helm: Helm, spec: ReleaseSpec) -> Deployed | None:
    try:
        return helm.deployed(spec.name, spec.namespace)
    except HelmError:
        return None


def _release_facts(deployed: Deployed, namespace: str) -> dict:
    return {
        "revision": deployed.revision,
        "status": deployed.status,
        "chart": deployed.chart,
        "app_version": deployed.app_version,
        "objects": manifest_objects(deployed.manifest, namespace),
    }


def ensure_absent(
    helm: Helm, name: str, namespace: str, *, check_mode: bool, diff_mode: bool, wait: bool, timeout: str
) -> dict:
    deployed = helm.deployed(name, namespace)
    if deployed is None:
        return {"changed": False, "status": "absent", "objects": []}
    argv = helm.uninstall_argv(name, namespace, wait, timeout)
    result: dict[str, Any] = {
        "changed": True,
        "command": argv,
        "revision": deployed.revision,
        "chart": deployed.chart,
        "app_version": deployed.app_version,
        "objects": manifest_objects(deployed.manifest, namespace),
        "changes": [f"release {name} ({deployed.chart}, revision {deployed.revision}) would be uninstalled"],
    }
    if diff_mode:
        result["diff"] = [
            {
                "before_header": f"{name} values (revision {deployed.revision})",
                "after_header": f"{name} (absent)",
                "before": values_yaml(deployed.values),
                "after": "",
            },
            {
                "before_header": f"{name} manifest (revision {deployed.revision})",
                "after_header": f"{name} (absent)",
                "before": _clean_manifest(deployed.manifest),
                "after": "",
            },
        ]
    if check_mode:
        result["status"] = deployed.status
        return result
    helm.call(argv, f"helm uninstall of release {name!r}")
    result["status"] = "uninstalled"
    return result


# Go's time.ParseDuration grammar, so a typo fails here rather than deep inside helm.
GO_DURATION = re.compile(r"^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$")


def module_helm(module: Any, validate_schema: bool) -> Helm:
    """What accel_release and accel_releases check before helm runs (a timeout helm understands, jsonschema where
    values are validated), and the Helm they run it with. A failed check fails the module; find_helm and Helm's
    version probe raise HelmError for the caller to report."""
    p = module.params
    if not GO_DURATION.match(p["timeout"]):
        module.fail_json(msg=f"timeout {p['timeout']!r} is not a duration helm understands (e.g. 90s, 5m, 1h30m)")
    if validate_schema:
        try:
            import jsonschema  # noqa: F401
        except ImportError:
            from ansible.module_utils.basic import missing_required_lib

            module.fail_json(msg=missing_required_lib("jsonschema"), exception=traceback.format_exc())

    def run(argv):
        # LANG=C: helm's messages are matched in English by the error mapping.
        return module.run_command(list(argv), environ_update={"LANG": "C", "LC_ALL": "C"})

    return Helm(find_helm(p["helm_binary"]), run, kubeconfig=p["kubeconfig"], context=p["context"])
