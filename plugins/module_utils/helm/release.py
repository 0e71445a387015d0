# Copyright: kube-accel contributors
# Apache License 2.0
"""The operations on a Helm release for the ``accel_release`` and ``accel_releases`` modules: install or upgrade
when something differs, roll back a failed release, recover a pending one, uninstall. They drive a ``helm.client.Helm``
and return the module's result; unit-tested without Ansible.

Idempotence without the helm-diff plugin: the desired release is rendered with
``helm upgrade --install --dry-run=server -o json`` (the same code path, capabilities and
``.Release.IsUpgrade`` as the real upgrade, but nothing is written) and compared with the deployed release
read back with ``helm list``, ``helm get values`` and ``helm get manifest``. Only when something differs is
the real upgrade run.
"""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from ansible_collections.kube_accel.gpu.plugins.module_utils.helm.chart import (
    is_local_chart,
    read_local_chart,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm.client import (
    MISSING_CRDS,
    Helm,
    LockCheck,
    ReleaseSpec,
    parse_json,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm.diff import (
    Deployed,
    Desired,
    build_diff,
    clean_manifest,
    decide,
    manifest_objects,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm.errors import (
    UNREACHABLE,
    HelmError,
    explain_failure,
    explain_rollout_failure,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm.recovery import (
    PENDING_STATES,
    Pending,
    age_text,
    duration_seconds,
    pending_of,
    recovery_text,
    still_alive,
    utcnow,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm.values import (
    coalesce,
    deep_merge,
    normalize,
    render_values_template,
    schema_errors,
    values_yaml,
)


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
        released = parse_json(out, argv) or {}
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
