# Copyright: kube-accel contributors
# Apache License 2.0
"""The helm client for the ``accel_release`` and ``accel_releases`` modules: finding helm and its version, and
``Helm``, which builds helm's argv (v3 and v4) and reads releases back (history, the deployed release, a server dry
run). ``module_helm`` wires Ansible's parameters and ``run_command`` to it; unit-tested without Ansible.

One concern per file beside it: ``helm.release`` (the operations: install or upgrade when something differs, roll
back, recover, uninstall), ``helm.values`` (merging, templates, schema errors), ``helm.chart`` (a chart read from
disk), ``helm.diff`` (the change decision and the diff), ``helm.errors`` (helm's stderr in words a user can act on),
``helm.recovery`` (pending and failed releases).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.kube_accel.gpu.plugins.module_utils.helm.chart import (
    load_yaml_text,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm.diff import (
    Deployed,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm.errors import (
    HelmError,
    explain_failure,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm.recovery import (
    GO_DURATION,
    last_good,
)

# (rc, stdout, stderr) for an argv; Ansible's module.run_command in production, a fake in unit tests.
Runner = Callable[[Sequence[str]], tuple[int, str, str]]

# Who holds kube-accel's run lock, when it is another live run (None: nobody, or this run); may raise when the
# lock cannot be read. cluster.lease.other_holder over the cluster's Lease in production.
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
        return parse_json(self.call(argv, f"reading the history of release {name}"), argv) or []

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
        entries = parse_json(self.call(argv, "reading the release list"), argv)
        entry = next((e for e in entries or [] if e.get("name") == name), None)
        if entry is None or entry.get("status") == "uninstalled":  # kept history of an uninstall: gone
            return None
        status = entry.get("status", "")
        argv = [self.binary, "get", "values", name, *self.cluster_flags(namespace), "--output", "json"]
        values = parse_json(self.call(argv, f"reading values of release {name}"), argv) or {}
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
        return parse_json(self.call(argv, f"rendering release {spec.name} (dry run)"), argv)

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


def parse_json(text: str, argv: Sequence[str]) -> Any:
    try:
        return json.loads(text) if text.strip() else None
    except json.JSONDecodeError as exc:
        raise HelmError(f"unexpected output from `{' '.join(argv[1:3])}` (not JSON: {exc})", command=argv) from None


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
