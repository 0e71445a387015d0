"""charts/dra-pools (DRA pools) rendered over its values: every object is valid Kubernetes at the chart's
floor (1.34, resource.k8s.io/v1) and at the newest schema kubernetes-validate ships, carries the product's labels,
and the values schema refuses what the classes cannot mean. The classes' selection on the real scheduler is the lab's
(tests/integration/test_dra_lab.py); the values the cluster play passes, tests/unit/test_dra_cluster.py."""

from __future__ import annotations

import kubernetes_validate
import pytest
import yaml
from chartlib import KUBE_VERSIONS, by_kind, helm_template, render, values_files

CHART = "dra-pools"
VALUES = values_files(CHART)
FLOOR = "1.34.0"
VERSIONS = sorted({FLOOR, *(v for v in KUBE_VERSIONS if tuple(map(int, v.split("."))) >= (1, 34, 0))})


@pytest.mark.parametrize("kube_version", VERSIONS)
def test_every_object_is_valid_kubernetes(kube_version):
    for values in VALUES:
        objs = render(CHART, [values], kube_version=kube_version, release="kube-accel-dra")
        assert {o["kind"] for o in objs} >= {"DeviceClass", "ResourceClaimTemplate"}
        for obj in objs:
            kubernetes_validate.validate(obj, kube_version, strict=True)
            labels = obj["metadata"]["labels"]
            assert labels["app.kubernetes.io/part-of"] == "kube-accel" and labels["app.kubernetes.io/name"] == CHART


def test_one_class_per_pool_and_one_template_per_pool_and_namespace():
    (values,) = VALUES
    spec = yaml.safe_load(values.read_text())
    objs = render(CHART, [values], release="kube-accel-dra")
    classes = by_kind(objs, "DeviceClass")
    assert set(classes) == {p["deviceClassName"] for p in spec["devicePools"]}
    templates = [(o["metadata"]["namespace"], o["metadata"]["name"])
                 for o in objs if o["kind"] == "ResourceClaimTemplate"]
    assert sorted(templates) == sorted((ns, p["deviceClassName"]) for ns in spec["claimTemplates"]["namespaces"]
                                       for p in spec["devicePools"])
    for pool in spec["devicePools"]:
        cls = classes[pool["deviceClassName"]]["spec"]
        (selector,) = cls["selectors"]
        # Only the pool's GPUs (uuid) or their MIG devices (parentUUID), of NVIDIA's DRA driver.
        key = "parentUUID" if pool["deviceType"] == "mig" else "uuid"
        assert f".{key} in [" in selector["cel"]["expression"]
        assert all(u in selector["cel"]["expression"] for u in pool["gpuUUIDs"])
        if pool["config"]:
            assert cls["config"] == [{"opaque": {"driver": "gpu.nvidia.com", "parameters": pool["config"]}}]
        else:
            assert "config" not in cls


def test_nothing_renders_without_a_pool():
    proc = helm_template(CHART, [], release="kube-accel-dra")
    assert proc.returncode == 0, proc.stderr
    kinds = {d["kind"] for d in yaml.safe_load_all(proc.stdout) if d}
    assert not kinds & {"DeviceClass", "ResourceClaimTemplate"}, kinds


@pytest.mark.parametrize(("field", "bad"), [
    ("deviceType", "vgpu"),
    ("gpuUUIDs", ["not-a-uuid"]),
    ("deviceClassName", "Kube_Accel"),
    ("config", {"apiVersion": "resource.nvidia.com/v1", "kind": "GpuConfig"}),
])
def test_schema_refuses_what_a_class_cannot_mean(tmp_path, field, bad):
    (values,) = VALUES
    spec = yaml.safe_load(values.read_text())
    spec["devicePools"][0][field] = bad
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(spec))
    proc = helm_template(CHART, [path], release="kube-accel-dra")
    assert proc.returncode != 0 and "values don't meet the specifications of the schema" in proc.stderr, proc.stderr
    assert field in proc.stderr, proc.stderr


def test_helm_refuses_a_kubernetes_without_resource_v1():
    proc = helm_template(CHART, VALUES, kube_version="1.33.9", release="kube-accel-dra")
    assert proc.returncode != 0 and "chart requires kubeVersion" in proc.stderr, proc.stderr


def test_claim_policy_allows_only_the_pools_classes(tmp_path):
    """The guard (templates/claim-policy.yaml): one policy on the creation of ResourceClaims and their templates,
    bound with Deny, whose allowed classes are those named claimGuard.classPrefix* (every pool's) plus
    claimGuard.extraDeviceClasses; off with
    claimGuard.enabled false. Its refusals on the real API server and scheduler: tests/integration/test_dra_lab.py."""
    (values,) = VALUES
    spec = yaml.safe_load(values.read_text())
    extra = tmp_path / "extra.yaml"
    extra.write_text(yaml.safe_dump({"claimGuard": {"enabled": True, "extraDeviceClasses": ["nic.example.com"]}}))
    objs = render(CHART, [values, extra], release="kube-accel-dra")
    (policy,) = by_kind(objs, "ValidatingAdmissionPolicy").values()
    (binding,) = by_kind(objs, "ValidatingAdmissionPolicyBinding").values()
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    assert policy["spec"]["failurePolicy"] == "Fail"
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["operations"] == ["CREATE"] and set(rule["resources"]) == {"resourceclaims", "resourceclaimtemplates"}
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert yaml.safe_load(variables["prefix"]) == "kube-accel-"
    assert all(p["deviceClassName"].startswith("kube-accel-") for p in spec["devicePools"])
    assert yaml.safe_load(variables["allowed"]) == ["nic.example.com"]
    # A pool's class outside the prefix would be refused by the guard: rendering fails naming it.
    renamed = tmp_path / "renamed.yaml"
    spec["devicePools"][0]["deviceClassName"] = "gpus-infer"
    renamed.write_text(yaml.safe_dump(spec))
    proc = helm_template(CHART, [renamed], release="kube-accel-dra")
    assert proc.returncode != 0 and "deviceClassName = gpus-infer" in proc.stderr and "kube-accel-" in proc.stderr, \
        proc.stderr
    off = tmp_path / "off.yaml"
    off.write_text(yaml.safe_dump({"claimGuard": {"enabled": False}}))
    kinds = {o["kind"] for o in render(CHART, [values, off], release="kube-accel-dra")}
    assert "ValidatingAdmissionPolicy" not in kinds and "DeviceClass" in kinds
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"claimGuard": {"enabled": True, "extraDeviceClasses": ["Not_A_Class"]}}))
    proc = helm_template(CHART, [values, bad], release="kube-accel-dra")
    assert proc.returncode != 0 and "claimGuard/extraDeviceClasses/0" in proc.stderr and "Not_A_Class" in proc.stderr, \
        proc.stderr


MAP_API = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"


def test_driver_classes_lose_their_extended_resource_name_where_the_api_server_can_mutate(tmp_path):
    """templates/driver-class-policy.yaml: where the API server serves MutatingAdmissionPolicy v1, one policy removes
    spec.extendedResourceName from the driver's DeviceClasses (*.nvidia.com) on create and update; without that API,
    or switched off, nothing renders and NOTES warns. Its effect on the real API server and scheduler (nvidia.com/gpu
    off DRA, HAMi pods schedulable again): tests/integration/test_dra_lab.py."""
    (values,) = VALUES
    objs = render(CHART, [values], release="kube-accel-dra", extra=["--api-versions", MAP_API])
    (policy,) = by_kind(objs, "MutatingAdmissionPolicy").values()
    (binding,) = by_kind(objs, "MutatingAdmissionPolicyBinding").values()
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    for obj in (policy, binding):
        kubernetes_validate.validate(obj, VERSIONS[-1], strict=True)
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["deviceclasses"] and set(rule["operations"]) == {"CREATE", "UPDATE"}
    (condition,) = policy["spec"]["matchConditions"]
    assert "endsWith('nvidia.com')" in condition["expression"] and "extendedResourceName" in condition["expression"]
    (mutation,) = policy["spec"]["mutations"]
    assert "remove" in mutation["jsonPatch"]["expression"] and "/spec/extendedResourceName" in \
        mutation["jsonPatch"]["expression"]
    assert "MutatingAdmissionPolicy" not in {o["kind"] for o in render(CHART, [values], release="kube-accel-dra")}
    off = tmp_path / "off.yaml"
    off.write_text(yaml.safe_dump({"driverClasses": {"removeExtendedResourceName": False}}))
    objs = render(CHART, [values, off], release="kube-accel-dra", extra=["--api-versions", MAP_API])
    assert "MutatingAdmissionPolicy" not in {o["kind"] for o in objs}
