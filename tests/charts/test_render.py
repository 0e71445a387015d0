"""Render every chart over its values matrix and check what must hold for every object of every chart."""

from __future__ import annotations

import subprocess

import kubernetes_validate
import pytest
import yaml
from ansible_collections.kube_accel.gpu.plugins.module_utils.common import constants as accel_constants
from chartlib import (
    CHARTS,
    CHARTS_DIR,
    KUBE_VERSIONS,
    NAMESPACE,
    containers,
    pod_spec,
    pool_terms,
    release_name,
    render,
    selected_pools,
    values_files,
)

CASES = [pytest.param(c, v, id=f"{c}-{v.stem}") for c in CHARTS for v in values_files(c)]
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration", "PriorityClass",
                  "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
# Objects of CRDs kubernetes-validate has no schema for; each is validated by the test that renders it.
CRD_API_GROUPS = {"cert-manager.io"}
LABEL_KEYS = {
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/component",
    "app.kubernetes.io/part-of",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
}


def test_matrix_covers_every_chart():
    for chart in CHARTS:
        assert len(values_files(chart)) >= 2, f"tests/charts/values/{chart} needs a values matrix"


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize(("chart", "values"), CASES)
def test_objects_validate_strict(helm, chart, values, kube_version):
    objs = render(chart, [values], kube_version, helm=helm)
    assert objs, "chart rendered nothing"
    for obj in objs:
        group = obj["apiVersion"].split("/")[0]
        if group in CRD_API_GROUPS:
            continue
        try:
            kubernetes_validate.validate(obj, kube_version, strict=True)
        except kubernetes_validate.ValidationError as err:
            pytest.fail(f"{obj['kind']}/{obj['metadata']['name']} invalid for Kubernetes {kube_version}: {err.message}")


@pytest.mark.parametrize(("chart", "values"), CASES)
def test_common_facts(helm, chart, values):
    vals = yaml.safe_load(values.read_text()) or {}
    registry = (vals.get("global") or {}).get("imageRegistry")
    pull_secrets = (vals.get("global") or {}).get("imagePullSecrets")
    pools = set(vals.get("pools") or [])
    for obj in render(chart, [values], helm=helm):
        what = f"{obj['kind']}/{obj['metadata']['name']}"
        labels = obj["metadata"].get("labels", {})
        assert labels.keys() >= LABEL_KEYS, f"{what} lacks labels {LABEL_KEYS - labels.keys()}"
        assert labels["app.kubernetes.io/part-of"] == "kube-accel"
        if obj["kind"] not in CLUSTER_SCOPED:
            # The one exception: a second scheduler reads the API server's client CA from kube-system.
            expected = "kube-system" if what.endswith("-scheduler-auth-reader") else NAMESPACE
            assert obj["metadata"].get("namespace") == expected, f"{what} is not in the release namespace"
        spec = pod_spec(obj)
        if spec is None:
            continue
        if obj["kind"] != "Pod":
            # A pod template carries every label but the chart's version: a kube-accel release that changes nothing
            # the pods run must not roll every DaemonSet (device plugins, MPS control daemons under their clients).
            pod_labels = obj["spec"]["template"]["metadata"]["labels"]
            assert "helm.sh/chart" not in pod_labels and pod_labels.keys() >= LABEL_KEYS - {"helm.sh/chart"}, \
                f"{what}: pod template labels {pod_labels}"
        assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", what
        for c in containers(spec):
            res = c.get("resources", {})
            assert {"cpu", "memory"} <= res.get("requests", {}).keys(), f"{what}/{c['name']} lacks requests"
            assert "memory" in res.get("limits", {}), f"{what}/{c['name']} lacks a memory limit"
            if registry:
                assert c["image"].startswith(registry + "/"), f"{what}/{c['name']} bypasses the mirror: {c['image']}"
            assert ":" in c["image"].rsplit("/", 1)[-1] or "@sha256:" in c["image"], f"unpinned image {c['image']}"
            sc = c.get("securityContext", {})
            if not sc.get("privileged"):
                assert sc.get("allowPrivilegeEscalation") is False, f"{what}/{c['name']} may escalate privileges"
                assert "ALL" in sc.get("capabilities", {}).get("drop", []), f"{what}/{c['name']} keeps capabilities"
        if pull_secrets:
            assert [s["name"] for s in spec.get("imagePullSecrets", [])] == pull_secrets, what
        # Node-level and test pods of the release land only on the release's pools (or passthrough pools); pods
        # holding cluster-wide tokens (certgen Jobs) only off every pool (tests/charts/test_vgpu_tenant_policy.py).
        off_pools = {"key": accel_constants.LABELS["pool"], "operator": "DoesNotExist"}
        if (obj["kind"] in ("DaemonSet", "Job") and pools and "affinity" in spec
                and off_pools not in sum(pool_terms(spec), [])):
            got = selected_pools(spec, accel_constants.LABELS["pool"])
            passthrough = set(((vals.get("passthrough") or {}).get("pools")) or [])
            assert got in (pools, passthrough), f"{what} selects pools {got}, values say {pools}"
        if obj["kind"] == "DaemonSet":
            assert "affinity" in spec, f"{what} has no pool affinity"


# Every privileged container and hostPID pod, by (chart, component, container); each has a reason in its template.
PRIVILEGED = {
    ("pgpu", "device-plugin", "nvidia-device-plugin"),  # only with compatWithCPUManager
    ("pgpu", "gpu-feature-discovery", "gpu-feature-discovery"),
    ("pgpu", "sandbox-device-plugin", "sandbox-device-plugin"),
    ("mps", "mps-control-daemon", "mps-control-daemon-mounts"),
    ("mps", "mps-control-daemon", "mps-control-daemon-ctr"),
    ("vgpu", "device-plugin", "device-plugin"),
    ("vgpu", "gpu-manager", "gpu-manager"),
}
HOST_PID = {("mps", "mps-control-daemon"), ("vgpu", "device-plugin"), ("vgpu", "gpu-manager")}


@pytest.mark.parametrize(("chart", "values"), CASES)
def test_privilege_only_where_documented(helm, chart, values):
    for obj in render(chart, [values], helm=helm):
        spec = pod_spec(obj)
        if spec is None:
            continue
        component = obj["metadata"]["labels"]["app.kubernetes.io/component"]
        if spec.get("hostPID") or spec.get("hostNetwork") or spec.get("hostIPC"):
            assert (chart, component) in HOST_PID and not spec.get("hostNetwork") and not spec.get("hostIPC")
        for c in containers(spec):
            if (c.get("securityContext") or {}).get("privileged"):
                assert (chart, component, c["name"]) in PRIVILEGED, f"{chart}/{component}/{c['name']} is privileged"


def notes(helm4: str, chart: str, values) -> str:
    proc = subprocess.run(
        [helm4, "install", "--dry-run=client", release_name(chart, values), str(CHARTS_DIR / chart),
         "--namespace", NAMESPACE, "--values", str(values)],
        capture_output=True, text=True, check=False, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split("NOTES:", 1)[1]


@pytest.mark.parametrize(("chart", "values"), CASES)
def test_notes_tell_how_to_request(helm4, chart, values):
    vals = yaml.safe_load(values.read_text()) or {}
    text = notes(helm4, chart, values)
    if chart == "vgpu" and vals.get("backend") == "gpu-manager":
        wanted = ["tencent.com/vcuda-core:", "tencent.com/vcuda-memory:"]
    elif chart == "vgpu":
        wanted = ["nvidia.com/gpu: 1", "nvidia.com/gpumem:", "nvidia.com/gpucores:"]
    else:
        wanted = ["limits:", "nvidia.com/gpu"]
    for line in wanted:
        assert line in text, f"NOTES of {chart}/{values.name} lack {line!r}:\n{text}"
    assert f"helm test {release_name(chart, values)}" in text
    for pool in vals.get("pools", []):
        assert pool in text
