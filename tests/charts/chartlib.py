"""Helpers of the chart test suite: locate helm, render charts, walk rendered objects."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path

import kubernetes_validate
import yaml
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.cluster_settings import cluster_settings

REPO = Path(__file__).resolve().parents[2]
CHARTS_DIR = REPO / "charts"
CHARTS = ("pgpu", "mps", "vgpu")
VALUES_DIR = Path(__file__).resolve().parent / "values"
BAD_DIR = Path(__file__).resolve().parent / "bad"
NAMESPACE = "kube-accel"

# The supported Kubernetes range (Chart.yaml kubeVersion >= 1.25; the lab and the product target 1.36).
# kubernetes-validate ships schemas 1.25 .. 1.37: both ends of the supported range are validated, and so is
# the newest schema it ships (charts have no upper bound), each rendered with that --kube-version.
SUPPORTED_KUBE_VERSIONS = ("1.25.0", "1.36.0")
_LATEST = kubernetes_validate.latest_version()
KUBE_VERSIONS = tuple(dict.fromkeys((*SUPPORTED_KUBE_VERSIONS, _LATEST if _LATEST.count(".") == 2 else f"{_LATEST}.0")))

_TOOL_DIR = Path.home() / ".cache" / "kube-accel" / "bin"


def tool(name: str) -> str | None:
    """Path of a pinned tool (scripts/toolchain.sh installs them under ~/.cache/kube-accel/bin), else PATH."""
    env = os.environ.get(f"KUBE_ACCEL_{name.upper()}")
    if env:
        return env
    pinned = _TOOL_DIR / name
    if pinned.exists():
        return str(pinned)
    return shutil.which(name)


def play_cluster(inventory: str) -> dict:
    """The cluster settings the cluster play's pool_charts role passes for ``inventories/<inventory>``: its
    group_vars/all.yml through cluster_settings, the code behind the role's accel_cluster_settings
    filter (control-plane CIDRs, metrics peers, image digests included)."""
    variables = yaml.safe_load((REPO / "inventories" / inventory / "group_vars" / "all.yml").read_text()) or {}
    return cluster_settings(variables)


def values_files(chart: str) -> list[Path]:
    return sorted((VALUES_DIR / chart).glob("*.yaml"))


def release_name(chart: str, values: Path | None = None) -> str:
    """The release names the cluster play uses (one per mode; one per vGPU backend)."""
    if chart == "vgpu":
        backend = "hami"
        if values is not None:
            backend = (yaml.safe_load(values.read_text()) or {}).get("backend", "hami")
        return f"kube-accel-vgpu-{backend}"
    return f"kube-accel-{chart}"


def helm_template(
    chart: str,
    values: Iterable[Path] = (),
    kube_version: str = SUPPORTED_KUBE_VERSIONS[-1],
    helm: str | None = None,
    extra: Iterable[str] = (),
    release: str | None = None,
) -> subprocess.CompletedProcess:
    cmd = [helm or tool("helm"), "template", release or release_name(chart, next(iter(values), None)),
           str(CHARTS_DIR / chart), "--namespace", NAMESPACE, "--kube-version", kube_version]
    for v in values:
        cmd += ["--values", str(v)]
    cmd += list(extra)
    return subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=120)


def render(
    chart: str, values: Iterable[Path] = (), kube_version: str = SUPPORTED_KUBE_VERSIONS[-1], **kw
) -> list[dict]:
    values = list(values)
    proc = helm_template(chart, values, kube_version, **kw)
    assert proc.returncode == 0, f"helm template {chart} {[v.name for v in values]} failed:\n{proc.stderr}"
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def by_kind(objs: list[dict], kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == kind}


def one(objs: list[dict], kind: str, name_suffix: str) -> dict:
    found = [o for n, o in by_kind(objs, kind).items() if n.endswith(name_suffix)]
    assert len(found) == 1, f"expected one {kind} *{name_suffix}, got {[o['metadata']['name'] for o in found]}"
    return found[0]


def pod_spec(obj: dict) -> dict | None:
    if obj["kind"] in ("DaemonSet", "Deployment", "StatefulSet", "Job"):
        return obj["spec"]["template"]["spec"]
    if obj["kind"] == "Pod":
        return obj["spec"]
    return None


def containers(spec: dict) -> Iterator[dict]:
    yield from spec.get("initContainers", []) or []
    yield from spec.get("containers", []) or []


def container(obj: dict, name: str) -> dict:
    for c in containers(pod_spec(obj)):
        if c["name"] == name:
            return c
    raise AssertionError(f"{obj['kind']}/{obj['metadata']['name']} has no container {name}")


def env(c: dict) -> dict[str, str | None]:
    return {e["name"]: e.get("value") for e in c.get("env", [])}


def mounts(c: dict) -> dict[str, str]:
    return {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}


def host_paths(spec: dict) -> dict[str, str]:
    return {v["name"]: v["hostPath"]["path"] for v in spec.get("volumes", []) if "hostPath" in v}


def pool_terms(spec: dict) -> list[list[dict]]:
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    return [t["matchExpressions"] for t in terms]


def selected_pools(spec: dict, key: str) -> set[str]:
    (exprs,) = pool_terms(spec)
    (expr,) = [e for e in exprs if e["key"] == key]
    assert expr["operator"] == "In"
    return set(expr["values"])


def rules(role: dict) -> dict[tuple[str, str], set[str]]:
    """(apiGroup, resource) -> verbs of a Role/ClusterRole."""
    out: dict[tuple[str, str], set[str]] = {}
    for r in role.get("rules", []):
        for g in r.get("apiGroups", []):
            for res in r.get("resources", []):
                out.setdefault((g, res), set()).update(r["verbs"])
    return out
