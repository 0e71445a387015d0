"""The monitoring chart's alerts evaluated by Prometheus's own rule engine: `promtool test rules`.

promtool (github.com/prometheus/prometheus v0.316.0, the version ka-conform-promql parses with, built from the Go
module proxy by scripts/upstream.sh) loads the PrometheusRule's groups as Prometheus would and evaluates them over
series given minute by minute, on a simulated clock: a raised XID count fires the XID alert, a temperature or a
memory use above the threshold fires only after its `for:`, and a kube-accel GPU node without exporter series fires
while a VM passthrough node does not. The series carry the labels the DCGM exporter and kube-state-metrics emit
(checked in test_dcgm_queries.py).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import upstream
import yaml
from chartlib import render

# Built at the Prometheus version the PromQL harness parses with (scripts/upstream.sh PROXY_BINS).
PROMETHEUS = next(line.split()[2] for line in (Path(__file__).parent / "go" / "promql" / "go.mod").read_text()
                  .splitlines() if line.startswith("require github.com/prometheus/prometheus "))
PROMTOOL = f"promtool-{PROMETHEUS.lstrip('v')}"
RULE_API = "monitoring.coreos.com/v1/PrometheusRule"
GPU = {"Hostname": "lab-pgpu-0", "gpu": "0", "UUID": "GPU-5fd2a1c4", "modelName": "NVIDIA H100 80GB HBM3"}


def series(name: str, labels: dict[str, str], values: str) -> dict:
    inner = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return {"series": f"{name}{{{inner}}}", "values": values}


@pytest.fixture(scope="module")
def rules(tmp_path_factory) -> tuple[Path, dict]:
    objs = render("monitoring", [], release="kube-accel-monitoring", extra=["--api-versions", RULE_API])
    (rule,) = [o for o in objs if o["kind"] == "PrometheusRule"]
    path = tmp_path_factory.mktemp("rules") / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    return path, {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}


def promtool_test(rules_file: Path, tests: list[dict], tmp_path: Path) -> subprocess.CompletedProcess:
    spec = tmp_path / "test.yaml"
    spec.write_text(yaml.safe_dump({"rule_files": [str(rules_file)], "evaluation_interval": "1m", "tests": tests}))
    return upstream.run(PROMTOOL, "test", "rules", str(spec), timeout=120)


def gpu_alert(alerts: dict, name: str, summary: str) -> dict:
    return {"exp_labels": {**GPU, "severity": alerts[name]["labels"]["severity"]},
            "exp_annotations": {"summary": summary,
                                "description": alerts[name]["annotations"]["description"]
                                .replace("{{ $labels.modelName }}", GPU["modelName"])
                                .replace("{{ $labels.UUID }}", GPU["UUID"])}}


def test_a_raised_xid_fires_at_once(rules, tmp_path):
    path, alerts = rules
    proc = promtool_test(path, [{
        "interval": "1m",
        "input_series": [series("DCGM_FI_DEV_XID_ERRORS", GPU, "0 0 43 43")],
        "alert_rule_test": [
            {"eval_time": "1m", "alertname": "KubeAccelGpuXidError", "exp_alerts": []},
            {"eval_time": "2m", "alertname": "KubeAccelGpuXidError",
             "exp_alerts": [gpu_alert(alerts, "KubeAccelGpuXidError", "GPU 0 on lab-pgpu-0 reported XID 43")]},
        ]}], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_temperature_fires_only_after_its_for(rules, tmp_path):
    path, alerts = rules
    assert alerts["KubeAccelGpuTemperatureHigh"]["for"] == "10m"
    proc = promtool_test(path, [{
        "interval": "1m",
        # 70 C for two minutes, then 91 C: pending from minute 2, firing from minute 12.
        "input_series": [series("DCGM_FI_DEV_GPU_TEMP", GPU, "70 70 91x20")],
        "alert_rule_test": [
            {"eval_time": "11m", "alertname": "KubeAccelGpuTemperatureHigh", "exp_alerts": []},
            {"eval_time": "12m", "alertname": "KubeAccelGpuTemperatureHigh",
             "exp_alerts": [gpu_alert(alerts, "KubeAccelGpuTemperatureHigh",
                                      "GPU 0 on lab-pgpu-0 is at 91 C (above 85 C)")]},
        ]}], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_memory_nearly_full_fires_after_its_for(rules, tmp_path):
    path, alerts = rules
    assert alerts["KubeAccelGpuMemoryNearlyFull"]["for"] == "15m"
    proc = promtool_test(path, [{
        "interval": "1m",
        # 79,000 of 81,000 MiB used (97.5 %) for 20 minutes; 50 % before.
        "input_series": [series("DCGM_FI_DEV_FB_USED", GPU, "40500 79000x20"),
                         series("DCGM_FI_DEV_FB_FREE", GPU, "40500 2000x20")],
        "alert_rule_test": [
            {"eval_time": "15m", "alertname": "KubeAccelGpuMemoryNearlyFull", "exp_alerts": []},
            {"eval_time": "16m", "alertname": "KubeAccelGpuMemoryNearlyFull",
             "exp_alerts": [gpu_alert(alerts, "KubeAccelGpuMemoryNearlyFull",
                                      "GPU 0 on lab-pgpu-0 has 97.53% of its memory in use")]},
        ]}], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_gpu_node_without_exporter_fires_a_passthrough_node_does_not(rules, tmp_path):
    path, alerts = rules
    node = {"label_kube_accel_io_managed": "true", "job": "kube-state-metrics"}
    proc = promtool_test(path, [{
        "interval": "1m",
        "input_series": [
            series("kube_node_labels", {**node, "node": "lab-pgpu-0", "label_kube_accel_io_pool": "pgpu"}, "1x30"),
            series("kube_node_labels", {**node, "node": "lab-mps-0", "label_kube_accel_io_pool": "mps"}, "1x30"),
            series("kube_node_labels", {**node, "node": "lab-vfio-0", "label_kube_accel_io_pool": "vfio",
                                        "label_nvidia_com_gpu_deploy_operands": "false"}, "1x30"),
            series("DCGM_FI_DEV_GPU_TEMP", GPU, "60x30"),  # lab-pgpu-0 has its exporter
        ],
        "alert_rule_test": [
            {"eval_time": "14m", "alertname": "KubeAccelGpuNodeWithoutExporter", "exp_alerts": []},
            {"eval_time": "15m", "alertname": "KubeAccelGpuNodeWithoutExporter", "exp_alerts": [{
                "exp_labels": {"node": "lab-mps-0", "label_kube_accel_io_pool": "mps",
                               "severity": alerts["KubeAccelGpuNodeWithoutExporter"]["labels"]["severity"]},
                "exp_annotations": {
                    "summary": "GPU node lab-mps-0 (pool mps) sends no DCGM metrics",
                    "description": alerts["KubeAccelGpuNodeWithoutExporter"]["annotations"]["description"]}}]},
        ]}], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_promtool_fails_a_wrong_expectation(rules, tmp_path):
    """The harness can fail: expecting the XID alert where the series stays 0 is reported by promtool."""
    path, _alerts = rules
    proc = promtool_test(path, [{
        "interval": "1m",
        "input_series": [series("DCGM_FI_DEV_XID_ERRORS", GPU, "0x5")],
        "alert_rule_test": [{"eval_time": "3m", "alertname": "KubeAccelGpuXidError",
                             "exp_alerts": [{"exp_labels": {**GPU, "severity": "critical"}}]}]}], tmp_path)
    assert proc.returncode != 0 and "KubeAccelGpuXidError" in proc.stdout + proc.stderr
