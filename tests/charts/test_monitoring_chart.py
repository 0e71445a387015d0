"""charts/monitoring: Grafana and Prometheus Operator conventions, and the HPA example (docs/examples).

The PromQL and the metric names are checked against Prometheus's parser and the DCGM exporter in
tests/conformance/test_dcgm_queries.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from chartlib import CHARTS_DIR, KUBE_VERSIONS, NAMESPACE, REPO, render, values_files

CHART = "monitoring"
RULE_API = "monitoring.coreos.com/v1/PrometheusRule"
EXAMPLE = REPO / "docs" / "examples" / "hpa-gpu-utilization.yaml"
VALUES = [None, *values_files(CHART)]


def objs_of(values: Path | None, *api_versions: str, kube_version: str = KUBE_VERSIONS[1]) -> list[dict]:
    extra = [a for v in api_versions for a in ("--api-versions", v)]
    return render(CHART, [values] if values else [], kube_version, release="kube-accel-monitoring", extra=extra)


@pytest.mark.parametrize("which", ["helm", "helm4"])
@pytest.mark.parametrize("values", VALUES, ids=lambda v: v.stem if v else "default")
def test_lint_strict(request, which, values):
    binary = request.getfixturevalue(which)
    cmd = [binary, "lint", "--strict", str(CHARTS_DIR / CHART), "--namespace", NAMESPACE]
    proc = subprocess.run(cmd + (["--values", str(values)] if values else []), capture_output=True, text=True,
                          check=False, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[WARNING]" not in proc.stdout


def test_prometheus_rule_only_where_its_crd_is_served():
    without = objs_of(None)
    assert [o["kind"] for o in without] == ["ConfigMap"]
    with_crd = objs_of(None, RULE_API)
    assert sorted(o["kind"] for o in with_crd) == ["ConfigMap", "PrometheusRule"]
    rule = next(o for o in with_crd if o["kind"] == "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert all(r.get("labels", {}).get("severity") in ("warning", "critical")
               for g in rule["spec"]["groups"] for r in g["rules"])
    # Annotations keep Prometheus's own templates (Helm must not have eaten them).
    summaries = [r["annotations"]["summary"] for g in rule["spec"]["groups"] for r in g["rules"]]
    assert all("{{ $labels." in s for s in summaries), summaries


@pytest.mark.parametrize("values", VALUES, ids=lambda v: v.stem if v else "default")
@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_objects_follow_the_conventions(values, kube_version):
    objs = objs_of(values, RULE_API, kube_version=kube_version)
    chosen = yaml.safe_load(values.read_text()) if values else {}
    for obj in objs:
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/part-of"] == "kube-accel"
        assert {"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component",
                "app.kubernetes.io/version", "app.kubernetes.io/managed-by", "helm.sh/chart"} <= set(labels)
        if obj["kind"] != "PrometheusRule":  # a CRD kubernetes-validate has no schema for
            kubernetes_validate.validate(obj, kube_version, strict=True)
    (dashboard,) = [o for o in objs if o["metadata"]["labels"]["app.kubernetes.io/component"] == "dashboard"]
    # Grafana's sidecar (grafana chart sidecar.dashboards.label/labelValue defaults) picks up ConfigMaps so labelled.
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["metadata"]["namespace"] == chosen.get("dashboards", {}).get("namespace", NAMESPACE)
    (text,) = dashboard["data"].values()
    assert json.loads(text)["uid"] == "kube-accel-gpus"
    rule = next(o for o in objs if o["kind"] == "PrometheusRule")
    for key, value in chosen.get("alerts", {}).get("labels", {}).items():
        assert rule["metadata"]["labels"][key] == value
    adapter = [o for o in objs if o["metadata"]["labels"]["app.kubernetes.io/component"] == "hpa-adapter"]
    assert bool(adapter) == chosen.get("hpaAdapter", {}).get("enabled", False)
    for cm in adapter:
        assert cm["metadata"]["namespace"] == chosen["hpaAdapter"]["namespace"]
        assert set(cm["data"]) == {"config.yaml"}  # the key the adapter chart's rules.existing mounts


def adapter_metric_names() -> set[str]:
    objs = objs_of(values_files(CHART)[0])
    (cm,) = [o for o in objs if o["metadata"]["name"].endswith("-adapter-rules")]
    return {r["name"]["as"] for r in yaml.safe_load(cm["data"]["config.yaml"])["rules"]}


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_hpa_example_is_valid_and_reads_an_adapter_metric(kube_version):
    docs = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    assert [d["kind"] for d in docs] == ["Deployment", "HorizontalPodAutoscaler"]
    for doc in docs:
        kubernetes_validate.validate(doc, kube_version, strict=True)
    deployment, hpa = docs
    assert hpa["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    names = {m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods"}
    assert names and names <= adapter_metric_names()
    # The pool it lands on exists in the example inventory and is a pgpu pool (per-pod DCGM attribution is exact).
    spec = deployment["spec"]["template"]["spec"]
    pool = spec["nodeSelector"]["kube-accel.io/pool"]
    pools = {yaml.safe_load(p.read_text()).get("accel_pool"): yaml.safe_load(p.read_text())
             for p in (REPO / "inventories" / "example" / "group_vars").glob("pool_*.yml")}
    assert pools[pool]["accel_mode"] == "pgpu"
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
