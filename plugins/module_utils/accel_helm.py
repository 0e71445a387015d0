# Copyright: kube-accel contributors
# Apache License 2.0
"""Helm releases for the ``accel_release`` and ``accel_releases`` modules: finding helm, the helm client (argv for helm
v3 and v4), and the operations (install or upgrade when something differs, roll back a failed release, recover a
pending one, uninstall). Unit-tested without Ansible; the modules only wire Ansible's parameters and
``run_command`` to it.

One concern per file beside it: ``accel_helm_values`` (merging, templates, schema errors), ``accel_helm_chart`` (a
chart read from disk), ``accel_helm_diff`` (the change decision and the diff), ``accel_helm_errors`` (helm's stderr
in words a user can act on), ``accel_helm_recovery`` (pending and failed releases).

Idempotence without the helm-diff plugin: the desired release is rendered with
``helm upgrade --install --dry-run=server -o json`` (the same code path, capabilities and
``.Release.IsUpgrade`` as the real upgrade, but nothing is written) and compared with the deployed release
read back with ``helm list``, ``helm get values`` and ``helm get manifest``. Only when something differs is
the real upgrade run.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import tempfile
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ansible_collections.kube_accel.gpu.plugins.module_utils.accel_helm_chart import (
    is_local_chart,
    load_yaml_text,
    read_local_chart,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.accel_helm_diff import (
    Deployed,
    Desired,
    build_diff,
    clean_manifest,
    decide,
    manifest_objects,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.accel_helm_errors import (
    UNREACHABLE,
    HelmError,
    explain_failure,
    explain_rollout_failure,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.accel_helm_recovery import (
    GO_DURATION,
    PENDING_STATES,
    Pending,
    age_text,
    duration_seconds,
    last_good,
    pending_of,
    recovery_text,
    still_alive,
    utcnow,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.accel_helm_values import (
    coalesce,
    deep_merge,
    normalize,
    render_values_template,
    schema_errors,
    values_yaml,
)

# (rc, stdout, stderr) for an argv; Ansible's module.run_command in production, a fake in unit tests.
Runner = Callable[[Sequence[str]], tuple[int, str, str]]

# Who holds kube-accel's run lock, when it is another live run (None: nobody, or this run); may raise when the
# lock cannot be read. accel_lease.other_holder over the cluster's Lease in production.
LockCheck = Callable[[], "str | None"]


# Where scripts/toolchain.sh links the pinned helm; tried after PATH so the lab works without a system helm.
TOOLCHAIN_BIN = os.path.join(os.path.expanduser("~"), ".cache", "kube-accel", "bin")


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

    def template_argv(self, spec: ReleaseSpec, values_file: str) -> list[str]:
        argv = [self.binary, "template", spec.name, spec.chart, "--namespace", spec.namespace, "--values", values_file]
        return argv + (["--version", spec.chart_version] if spec.chart_version else [])

    def render_offline(self, spec: ReleaseSpec, values_file: str) -> dict:
        """The release as ``helm template`` renders it, without the cluster, in ``render``'s shape (manifest, chart
        metadata): for a first install whose chart's CRDs the cluster does not have yet (MISSING_CRDS)."""
        argv = self.template_argv(spec, values_file)
        manifest = self.call(argv, f"rendering release {spec.name} (client side)")
        return {"manifest": manifest, "chart": {"metadata": self.show_chart(spec.chart, spec.chart_version)}}

    def show_chart(self, chart: str, version: str | None) -> dict:
        argv = [self.binary, "show", "chart", chart, *(["--version", version] if version else [])]
        return load_yaml_text(self.call(argv, f"reading chart {chart}"), f"Chart.yaml of {chart}")

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


# What helm's server dry run says of a chart's custom resource whose CRD (in the chart's crds/) is not installed yet.
MISSING_CRDS = ("ensure crds are installed first", "no matches for kind")


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
        deployed, recovery = recover_pending(helm, spec, deployed, result, check_mode, run_lock, clock or utcnow)
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
            try:
                rendered = helm.render(spec, values_file) or {}
            except HelmError as exc:
                if deployed is not None or not any(m in (exc.stderr or "").lower() for m in MISSING_CRDS):
                    raise
                # A first install on a cluster without the chart's CRDs: helm's server dry run applies no crds/, so
                # the chart's own custom resources cannot be rendered there; the install applies crds/ first.
                rendered = helm.render_offline(spec, values_file)
                result["rendered"] = "client side: the cluster lacks the chart's CRDs (its install applies them first)"
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
            if any(fragment in (err or "").lower() for fragment in UNREACHABLE):
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
    """ReleaseSpecs from dicts with ``name``, ``chart`` and optionally ``values``, ``chart_version``, ``namespace``,
    ``timeout`` (other keys are ignored); ``shared`` gives the rest (namespace, wait, timeout, atomic,
    create_namespace): a release's own namespace or timeout wins over the shared one."""
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
                                    "timeout": str(item.get("timeout") or shared.get("timeout", "5m")),
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


def recovery_argv(helm: Helm, spec: ReleaseSpec, pending: Pending) -> list[str]:
    """What an operator runs to unlock the release: uninstall a pending first install, else roll back."""
    if pending.good_revision is None:
        return helm.uninstall_argv(spec.name, spec.namespace, True, spec.timeout)
    return helm.rollback_argv(spec.name, spec.namespace, pending.good_revision, spec.wait or spec.atomic,
                              spec.timeout)


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
    age = age_text(pending.age) if pending.age is not None else "unknown"
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
                "before": clean_manifest(deployed.manifest),
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
