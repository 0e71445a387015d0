"""charts/monitoring against the NVIDIA DCGM exporter and Prometheus's own PromQL parser.

Every PromQL expression kube-accel ships (dashboard panels and variables, PrometheusRule alerts, prometheus-adapter
rules as the adapter expands them) is parsed by Prometheus's promql/parser (ka-conform-promql,
tests/conformance/go/promql) and must select only metrics the DCGM exporter emits with the GPU Operator's default
collectors file, or kube-state-metrics' kube_node_labels; and rely only on labels those series carry.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import upstream
import yaml
from ansible_collections.kube_accel.gpu.plugins.module_utils.common import constants as accel_constants
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm import operator_values as accel_operator_values
from chartlib import REPO, render

CHART = "monitoring"
DASHBOARD = REPO / "charts" / CHART / "dashboards" / "kube-accel-gpus.json"
PROMETHEUS_RULE_API = "monitoring.coreos.com/v1/PrometheusRule"
# The operator's exporter DaemonSet: which collectors file it reads unless dcgmExporter.config names another.
OPERATOR_EXPORTER = ("assets/state-dcgm-exporter/0800_daemonset.yaml", "DCGM_EXPORTER_COLLECTORS")
# Non-DCGM series the queries may use, each with where it comes from.
OTHER_METRICS = {"kube_node_labels": "kube-state-metrics, with --metric-labels-allowlist=nodes=[kube-accel.io/...]"}
# Labels kube-state-metrics puts on kube_node_labels for the allowlisted node labels ("label_" + the key with every
# character outside [a-zA-Z0-9_] written "_", as its SanitizeLabelName does), plus its node label.
KSM_LABELS = {"node"} | {
    "label_" + re.sub(r"[^a-zA-Z0-9_]", "_", key)
    for key in (accel_constants.LABELS["pool"], accel_constants.LABELS["mode"], accel_constants.LABELS["managed"],
                accel_constants.UPSTREAM_LABELS["deploy_operands"])}
# Labels the queries make themselves (label_replace targets) and prometheus-adapter's GroupBy (pod, namespace).
DERIVED_LABELS = {"pool", "mode"}


def dcgm_src() -> Path:
    return upstream.src(upstream.DCGM_EXPORTER)


def operator_collectors() -> str:
    path, name = OPERATOR_EXPORTER
    doc = yaml.safe_load((upstream.src(upstream.GPU_OPERATOR) / path).read_text())
    (container,) = doc["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value") for e in container["env"]}[name]


def exporter_metrics() -> dict[str, str]:
    """Metric name -> type from the collectors file the GPU Operator's exporter reads (label-type fields are
    labels on other series, not metrics)."""
    csv = dcgm_src() / "etc" / Path(operator_collectors()).name
    out = {}
    for raw in csv.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, kind = (f.strip() for f in line.split(",")[:2])
        if kind != "label":
            out[name] = kind
    return out


def exporter_labels() -> set[str]:
    """Labels of the exporter's GPU series: the render template's (internal/pkg/rendermetrics/render_metrics.go:47,
    UUID being the default uuid label name) and the pod attributes its Kubernetes mapping adds
    (internal/pkg/transformation/const.go:21-23)."""
    template = (dcgm_src() / "internal/pkg/rendermetrics/render_metrics.go").read_text().splitlines()[46]
    assert template.startswith("{{ $counter.FieldName }}{gpu="), template
    labels = set(re.findall(r'[,{]([A-Za-z_]+)="', template)) | {"UUID"}
    const = (dcgm_src() / "internal/pkg/transformation/const.go").read_text()
    for attr in ("podAttribute", "namespaceAttribute", "containerAttribute"):
        labels.add(re.search(rf'\b{attr}\s*=\s*"([a-z_]+)"', const).group(1))
    return labels


# --- the expressions kube-accel ships -----------------------------------------------------------------------

GRAFANA_RANGES = {"$__rate_interval": "5m", "$__range": "6h", "$__interval": "1m"}


def promql_of_grafana(expr: str) -> str:
    """A panel query as Grafana sends it: range variables become durations; $var inside strings stays (a valid
    regex string for =~)."""
    for var, value in GRAFANA_RANGES.items():
        expr = expr.replace(var, value)
    return expr


def dashboard_exprs() -> dict[str, str]:
    dash = json.loads(DASHBOARD.read_text())
    out = {}
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            out[f"dashboard panel {panel['title']!r} {target['refId']}"] = promql_of_grafana(target["expr"])
    for var in dash["templating"]["list"]:
        if var["type"] != "query":
            continue
        match = re.fullmatch(r"label_values\((.+), *([A-Za-z_][A-Za-z0-9_]*)\)", var["query"]["query"])
        assert match, f"variable {var['name']}: only label_values(selector, label) queries are checked"
        out[f"dashboard variable {var['name']}"] = match.group(1)
        out[f"dashboard variable {var['name']} label"] = f"count by ({match.group(2)}) ({match.group(1)})"
    return out


def rendered(tmp_path: Path, api_versions=(PROMETHEUS_RULE_API,), **values) -> list[dict]:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump({"hpaAdapter": {"enabled": True}, **values}))
    extra = [a for v in api_versions for a in ("--api-versions", v)]
    return render(CHART, [path], release="kube-accel-monitoring", extra=extra)


def alert_exprs(objs) -> dict[str, str]:
    (rule,) = [o for o in objs if o["kind"] == "PrometheusRule"]
    return {f"alert {r['alert']}": r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]}


def adapter_rules(objs) -> list[dict]:
    (cm,) = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-adapter-rules")]
    return yaml.safe_load(cm["data"]["config.yaml"])["rules"]


def adapter_exprs(objs) -> dict[str, str]:
    """seriesQuery as is; metricsQuery expanded as prometheus-adapter does for a request about pods of one
    namespace (<<.Series>> the series name, <<.LabelMatchers>> namespace/pod matchers, <<.GroupBy>> pod)."""
    out = {}
    for rule in adapter_rules(objs):
        name = rule["name"]["as"]
        out[f"adapter {name} seriesQuery"] = rule["seriesQuery"]
        series = re.fullmatch(r"\^(\w+)\$", rule["name"]["matches"]).group(1)
        query = (rule["metricsQuery"].replace("<<.Series>>", series)
                 .replace("<<.LabelMatchers>>", 'namespace="inference",pod=~"gpu-inference-a|gpu-inference-b"')
                 .replace("<<.GroupBy>>", "pod"))
        assert "<<" not in query, query
        out[f"adapter {name} metricsQuery"] = query
    return out


def all_exprs(tmp_path: Path) -> dict[str, str]:
    objs = rendered(tmp_path)
    return {**dashboard_exprs(), **alert_exprs(objs), **adapter_exprs(objs)}


def inspect(exprs: dict[str, str], tmp_path: Path) -> dict[str, dict]:
    path = tmp_path / "exprs.json"
    path.write_text(json.dumps(exprs))
    proc = upstream.run("ka-conform-promql", str(path))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def problems(report: dict[str, dict]) -> list[str]:
    metrics, labels = exporter_metrics(), exporter_labels() | KSM_LABELS | DERIVED_LABELS
    out = []
    for where, r in sorted(report.items()):
        if r["error"]:
            out.append(f"{where}: Prometheus's parser refuses it: {r['error']}")
            continue
        for m in r["metrics"]:
            if m not in metrics and m not in OTHER_METRICS:
                out.append(f"{where}: selects {m!r}, which the DCGM exporter does not emit with "
                           f"{operator_collectors()} (nor is it in {sorted(OTHER_METRICS)})")
        if not r["metrics"]:
            out.append(f"{where}: selects no metric")
        unknown = set(r["labels"]) - labels
        if unknown:
            out.append(f"{where}: relies on labels no series carries: {sorted(unknown)}")
    return out


# --- tests ----------------------------------------------------------------------------------------------------


def test_operator_exporter_reads_dcp_metrics_included():
    # gpu-operator v26.7.0 runs the exporter with DCGM_EXPORTER_COLLECTORS=dcp-metrics-included.csv unless
    # ClusterPolicy dcgmExporter.config names a ConfigMap (controllers/object_controls.go), which kube-accel never sets.
    assert operator_collectors() == "/etc/dcgm-exporter/dcp-metrics-included.csv"
    assert "config.DCGMExporter.MetricsConfig.Name" in (upstream.src(upstream.GPU_OPERATOR) /
                                                         "controllers/object_controls.go").read_text()
    values = accel_operator_values.gpu_operator_values([], {})
    assert "config" not in values["dcgmExporter"], values["dcgmExporter"]
    assert "env" not in values["dcgmExporter"] or values["dcgmExporter"]["env"] == []


def test_exporter_labels_and_node_name():
    labels = exporter_labels()
    assert {"gpu", "UUID", "modelName", "Hostname", "namespace", "pod", "container"} <= labels
    # Hostname is the node name: NODE_NAME (from spec.nodeName in the operator's DaemonSet) wins in Kubernetes.
    hostname = (dcgm_src() / "internal/pkg/hostname/hostname.go").read_text()
    assert 'os.Getenv("NODE_NAME")' in hostname
    doc = yaml.safe_load((upstream.src(upstream.GPU_OPERATOR) / OPERATOR_EXPORTER[0]).read_text())
    (container,) = doc["spec"]["template"]["spec"]["containers"]
    node_name = next(e for e in container["env"] if e["name"] == "NODE_NAME")
    assert node_name["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"


def test_every_expression_parses_and_selects_what_the_exporter_emits(tmp_path):
    exprs = all_exprs(tmp_path)
    assert len([k for k in exprs if k.startswith("alert ")]) == 4
    assert len([k for k in exprs if k.startswith("adapter ")]) == 4
    report = inspect(exprs, tmp_path)
    assert set(report) == set(exprs)
    assert problems(report) == []


def test_dashboard_covers_what_issue_19_asks(tmp_path):
    report = inspect(dashboard_exprs(), tmp_path)
    used = {m for r in report.values() for m in r["metrics"]}
    assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_SM_CLOCK",
            "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_XID_ERRORS", "kube_node_labels"} <= used
    dash = json.loads(DASHBOARD.read_text())
    assert [v["name"] for v in dash["templating"]["list"]] == ["datasource", "pool", "node", "gpu", "namespace"]
    by_title = {p["title"]: p for p in dash["panels"]}
    # Per pool, per node/GPU and per namespace/pod views.
    assert any("by pool" in t for t in by_title) and any("by pod" in t for t in by_title)
    labels = {lab for r in report.values() for lab in r["labels"]}
    assert {"Hostname", "gpu", "namespace", "pod", "label_kube_accel_io_pool"} <= labels
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))


def test_alerts_cover_what_issue_19_asks(tmp_path):
    alerts = alert_exprs(rendered(tmp_path))
    report = inspect(alerts, tmp_path)
    want = {"alert KubeAccelGpuXidError": "DCGM_FI_DEV_XID_ERRORS",
            "alert KubeAccelGpuTemperatureHigh": "DCGM_FI_DEV_GPU_TEMP",
            "alert KubeAccelGpuMemoryNearlyFull": "DCGM_FI_DEV_FB_FREE",
            "alert KubeAccelGpuNodeWithoutExporter": "kube_node_labels"}
    for alert, metric in want.items():
        assert metric in report[alert]["metrics"], (alert, report[alert])
    # Thresholds come from values.
    changed = alert_exprs(rendered(tmp_path, alerts={"temperatureCelsius": 90, "memoryUsedRatio": 0.9}))
    assert changed["alert KubeAccelGpuTemperatureHigh"].endswith("> 90")
    assert changed["alert KubeAccelGpuMemoryNearlyFull"].endswith("> 0.9")
    assert problems(inspect(changed, tmp_path)) == []


def test_checks_catch_bad_expressions(tmp_path):
    """The checks above can fail: a syntax error, a metric the exporter does not emit with the operator's
    collectors file, and a label no series carries (pod_name is the exporter's old attribute name, off by default)."""
    metrics = exporter_metrics()
    missing = next(m for m in ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_NVLINK_BANDWIDTH_L0",
                               "DCGM_FI_PROF_SM_OCCUPANCY") if m not in metrics)
    report = inspect({"syntax": "max by (gpu) (DCGM_FI_DEV_GPU_UTIL",
                      "metric": f"max by (gpu) ({missing})",
                      "label": 'DCGM_FI_DEV_GPU_UTIL{pod_name="x"}'}, tmp_path)
    found = problems(report)
    assert len(found) == 3, found
    assert found[0].startswith("label: relies on labels no series carries: ['pod_name']"), found
    assert found[1].startswith(f"metric: selects {missing!r}, which the DCGM exporter does not emit"), found
    assert found[2].startswith("syntax: Prometheus's parser refuses it: "), found
