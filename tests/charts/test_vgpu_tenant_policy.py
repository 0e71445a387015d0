"""The vgpu chart's admission objects against pod authors and node agents, as rendered.

What the objects are (the lab shows on a real kube-apiserver v1.36 that they refuse every bypass and admit HAMi's own
writes: tests/integration/test_tenant_attacks_lab.py; the names they list are tied to HAMi's code in
tests/conformance/test_hami.py):
- the tenant policy exists for the HAMi backend on Kubernetes >= 1.30 only, cannot fail open, never covers
  kube-system, and exempts only HAMi's own two ServiceAccounts and kubelets;
- pods holding cluster-wide tokens are kept off every pool's nodes; the node agents are not;
- NOTES say what holds below 1.30 and when failurePolicy Fail is rendered as Ignore.
"""

from __future__ import annotations

import subprocess

import pytest
import yaml
from ansible_collections.kube_accel.gpu.plugins.module_utils.common import constants as accel_constants
from chartlib import CHARTS_DIR, NAMESPACE, pod_spec, release_name, render, values_files

POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
HAMI = [v for v in values_files("vgpu") if (yaml.safe_load(v.read_text()) or {}).get("backend", "hami") == "hami"]
GPU_MANAGER = [v for v in values_files("vgpu") if v not in HAMI]


def tenant(objs: list[dict]) -> list[dict]:
    return [o for o in objs if o["kind"] in POLICY_KINDS and o["metadata"]["name"].endswith("-hami-tenant")]


@pytest.mark.parametrize("values", HAMI, ids=lambda p: p.stem)
def test_tenant_policy_shape(helm, values):
    release = release_name("vgpu", values)
    objs = render("vgpu", [values], "1.36.0", helm=helm)
    policy, binding = sorted(tenant(objs), key=lambda o: o["kind"])
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert (rule["operations"], rule["resources"]) == (["CREATE", "UPDATE"], ["pods", "pods/status"])
    assert spec["matchConstraints"]["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}]
    conditions = [c["expression"] for c in spec["matchConditions"]]
    assert conditions == [
        f'!(request.userInfo.username in ["system:serviceaccount:{NAMESPACE}:{release}-scheduler",'
        f'"system:serviceaccount:{NAMESPACE}:{release}-device-plugin"])',
        "!(has(request.userInfo.groups) && 'system:nodes' in request.userInfo.groups)"]
    assert all(v["reason"] == "Forbidden" and v["messageExpression"] for v in spec["validations"])
    # Every rule but the annotations' judges the pod as created: an older pod is never blocked by a later update.
    variables = {v["name"]: v["expression"] for v in spec["variables"]}
    assert variables["hamiContainers"].startswith("request.operation != 'CREATE' ? [] :")
    for validation in spec["validations"]:
        expr = validation["expression"]
        assert (expr.startswith("request.operation != 'CREATE' ||") or expr == "size(variables.hamiAnnotations) == 0"
                or any(f"variables.{name}" in expr for name in ("badEnv", "badEnvFrom", "badMounts"))), expr
    for name in ("badEnv", "badEnvFrom", "badMounts"):
        assert "variables.hamiContainers" in variables[name]


@pytest.mark.parametrize("kube", ["1.25.0", "1.29.0"])
def test_no_tenant_policy_below_1_30(helm, kube):
    assert not tenant(render("vgpu", [HAMI[0]], kube, helm=helm))


def test_no_tenant_policy_for_gpu_manager_or_when_off(helm, tmp_path):
    for values in GPU_MANAGER:
        assert not tenant(render("vgpu", [values], "1.36.0", helm=helm))
    off = tmp_path / "off.yaml"
    off.write_text(yaml.safe_dump({"hami": {"tenantPolicy": False}}))
    assert not tenant(render("vgpu", [HAMI[0], off], "1.36.0", helm=helm))
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"hami": {"tenantPolicy": "yes"}}))
    proc = subprocess.run([helm, "template", "x-vgpu", str(CHARTS_DIR / "vgpu"), "-n", NAMESPACE, "-f", str(bad)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode != 0 and "tenantPolicy" in proc.stderr


def holds_cluster_token(obj: dict) -> bool:
    spec = pod_spec(obj)
    return (obj["kind"] in ("Deployment", "Job") and spec is not None
            and spec.get("automountServiceAccountToken", True) and bool(spec.get("serviceAccountName")))


@pytest.mark.parametrize("values", values_files("vgpu"), ids=lambda p: p.stem)
def test_pods_with_cluster_wide_tokens_stay_off_gpu_nodes(helm, values, tmp_path):
    """Schedulers, extenders, the webhook, gpu-admission and the certgen Jobs hold cluster-wide pod
    and node writes: required node affinity keeps them off every node with the pool label (where privileged agents
    and tenants' GPU pods run); they tolerate the control-plane taint. Node agents keep their pool affinity."""
    objs = render("vgpu", [values], "1.36.0", helm=helm)
    holders = [o for o in objs if holds_cluster_token(o)]
    assert holders
    off_pools = {"key": accel_constants.LABELS["pool"], "operator": "DoesNotExist"}
    for obj in holders:
        spec = pod_spec(obj)
        terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert terms == [{"matchExpressions": [off_pools]}], obj["metadata"]["name"]
        assert {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists",
                "effect": "NoSchedule"} in spec["tolerations"], obj["metadata"]["name"]
    for ds in (o for o in objs if o["kind"] == "DaemonSet"):
        exprs = pod_spec(ds)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"][0]["matchExpressions"]
        assert exprs[0]["key"] == accel_constants.LABELS["pool"] and exprs[0]["operator"] == "In"
    lifted = tmp_path / "lifted.yaml"
    lifted.write_text(yaml.safe_dump({"clusterComponents": {"avoidPoolNodes": False}}))
    for obj in (o for o in render("vgpu", [values, lifted], "1.36.0", helm=helm) if holds_cluster_token(o)):
        assert "affinity" not in pod_spec(obj), obj["metadata"]["name"]


def notes(helm4: str, values, *extra: str) -> str:
    proc = subprocess.run([helm4, "install", "--dry-run=client", release_name("vgpu", values),
                           str(CHARTS_DIR / "vgpu"), "--namespace", NAMESPACE, "--values", str(values), *extra],
                          capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split("NOTES:", 1)[1]


def test_notes_say_what_the_tenant_policy_does_and_how_to_exempt(helm4):
    text = notes(helm4, HAMI[0])
    assert "-hami-tenant refuses pods" in text
    assert "hami.io/webhook=ignore (kubectl label namespace" in text and "A pod label does not exempt a pod" in text
    assert "a workload's own code can still change its limits" in text
    off = notes(helm4, HAMI[0], "--set", "hami.tenantPolicy=false")
    assert "Tenant policy: NOT rendered (hami.tenantPolicy=false)" in off and "trusted workloads" in off
    assert "run only on nodes without the kube-accel.io/pool label" in text
