"""GPU monitoring and autoscaling proven on the lab with the real components.

`lab.py monitoring` (scripts/kalab/monitoring.py) runs, on what the cluster play deployed:
- Prometheus (the PromQL harness's version, built from the module proxy) with the scrape job the Prometheus Operator
  generates from the DCGM exporter's ServiceMonitor, which the GPU Operator's controller created from kube-accel's
  values, and the rules of the PrometheusRule the monitoring chart installed;
- kube-state-metrics (kube_node_labels) and prometheus-adapter with the chart's adapter rules, registered with the
  lab's kube-apiserver as v1beta1.custom.metrics.k8s.io;
- the lab's kube-controller-manager, whose HPA controller scales docs/examples/hpa-gpu-utilization.yaml.
The one stand-in is the DCGM exporter (no GPU): the exporter's text format for each exporter pod's node, GPUs
attributed to the Running pods that asked for nvidia.com/gpu, readings set by `lab.py load`.

Evidence per test: Prometheus's own target health, series and alert state; the aggregated API as the HPA controller
reads it; the HPA's and Deployment's status written by the controller-manager. Each step is timed; the whole proof
(chain up, alert, HPA both ways) must stay under 3 min. In a full run test_site_lab.py (before this file) has
converged the lab; alone, this runs the cluster play first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from lab_fixture import converge_cluster, wait_for

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "docs" / "examples" / "hpa-gpu-utilization.yaml"
NAMESPACE = "ka-gpu-hpa"
PROOF_BUDGET = 180  # seconds: the whole proof under 3 min warm
STEPS: dict[str, float] = {}


def lab_py(lab, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "scripts" / "lab.py"), "--dir", str(lab.kubeconfig.parent),
                           *args], capture_output=True, text=True, check=False, timeout=300,
                          env={**os.environ, "PATH": f"{lab.helm.parent}:{os.environ['PATH']}"})


@pytest.fixture(scope="module")
def chain(lab):
    # The chain's three binaries, before the proof's clock starts: current on a warm machine (this returns at once); in
    # a cold `make test` the other lane may still be building them at background priority (scripts/upstream.sh
    # LAB_MONITORING), and this waits for that build, or does it.
    build = subprocess.run([str(REPO / "scripts" / "upstream.sh"), "monitoring"], capture_output=True, text=True,
                           check=False, timeout=1800)
    assert build.returncode == 0, build.stderr[-3000:]
    converge_cluster(lab, {"kube-accel-monitoring"})
    started = time.time()
    proc = lab_py(lab, "monitoring")
    assert proc.returncode == 0, proc.stderr[-3000:]
    STEPS["chain up (Prometheus, kube-state-metrics, adapter, APIService Available)"] = time.time() - started
    info = json.loads((lab.kubeconfig.parent / "monitoring" / "info.json").read_text())
    yield info
    lab_py(lab, "load", "--util", f"{NAMESPACE}=0", "--xid", "lab-pgpu-0/3=0")


def query(info: dict, expr: str) -> list[dict]:
    url = f"{info['prometheus']}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    with urllib.request.urlopen(url, timeout=10) as r:  # noqa: S310 - the lab's Prometheus on 127.0.0.1
        return json.loads(r.read())["data"]["result"]


def api(info: dict, path: str) -> dict:
    with urllib.request.urlopen(f"{info['prometheus']}{path}", timeout=10) as r:  # noqa: S310 - 127.0.0.1
        return json.loads(r.read())["data"]


def kubectl_json(lab, *args: str) -> dict:
    return json.loads(lab.kubectl_run(*args, "-o", "json").stdout)


def test_prometheus_scrapes_each_exporter_pod_as_the_service_monitor_says(chain, lab):
    from kalab import site as lab_site  # the inventory's hosts and their recorded GPUs

    pods = kubectl_json(lab, "get", "pods", "-n", "gpu-operator", "-l", "app=nvidia-dcgm-exporter")["items"]
    exporter_nodes = {p["spec"]["nodeName"]: p["metadata"]["name"] for p in pods}
    assert exporter_nodes, "the GPU Operator runs its DCGM exporter on the lab's GPU nodes"

    def scraped():
        targets = [t for t in api(chain, "/api/v1/targets")["activeTargets"] if t["scrapePool"] == chain["job"]]
        return targets if targets and all(t["health"] == "up" for t in targets) else None

    targets = wait_for("every exporter target up in Prometheus", scraped, timeout=30)
    # One target per exporter pod, labelled as the Prometheus Operator labels a ServiceMonitor endpoint.
    assert {t["discoveredLabels"]["pod"] for t in targets} == set(exporter_nodes.values())
    assert {t["labels"]["job"] for t in targets} == {"nvidia-dcgm-exporter"}  # the ServiceMonitor's jobLabel: app
    hosts = lab_site.gpu_hosts(lab_site.inventory())
    util = query(chain, "DCGM_FI_DEV_GPU_UTIL")
    per_node: dict[str, set[str]] = {}
    for series in util:
        per_node.setdefault(series["metric"]["Hostname"], set()).add(series["metric"]["UUID"])
    assert per_node == {n: {g["uuid"] for g in lab_site.recorded_gpus(n, hosts[n])} for n in exporter_nodes}
    # The ServiceMonitor's relabelings drop the target's namespace/pod/container: a GPU no pod uses carries none,
    # and nothing is renamed to exported_* (without them, every idle GPU would carry the exporter pod's labels).
    assert query(chain, 'DCGM_FI_DEV_GPU_UTIL{namespace="gpu-operator"}') == []
    assert query(chain, '{__name__=~"DCGM_.+", exported_pod!=""}') == []
    # kube-state-metrics' kube_node_labels joins the pools: every pool of the inventory is there.
    pools = {r["metric"]["label_kube_accel_io_pool"] for r in query(chain, "kube_node_labels")
             if "label_kube_accel_io_pool" in r["metric"]}
    assert pools == {hv["accel_pool"] for hv in hosts.values()}


def test_a_raised_xid_fires_the_alert_and_a_cleared_one_resolves(chain, lab):
    def alert():
        found = [a for a in api(chain, "/api/v1/alerts")["alerts"]
                 if a["labels"]["alertname"] == "KubeAccelGpuXidError" and a["state"] == "firing"]
        return found or None

    assert alert() is None
    started = time.time()
    assert lab_py(lab, "load", "--xid", "lab-pgpu-0/3=79").returncode == 0
    (firing,) = wait_for("KubeAccelGpuXidError firing", alert, timeout=30)
    STEPS["XID 79 raised -> alert firing"] = time.time() - started
    assert firing["labels"]["Hostname"] == "lab-pgpu-0" and firing["labels"]["gpu"] == "3"
    assert firing["labels"]["severity"] == "critical"
    assert firing["annotations"]["summary"] == "GPU 3 on lab-pgpu-0 reported XID 79"
    started = time.time()
    assert lab_py(lab, "load", "--xid", "lab-pgpu-0/3=0").returncode == 0
    wait_for("KubeAccelGpuXidError resolved", lambda: alert() is None, timeout=30)
    STEPS["XID cleared -> alert resolved"] = time.time() - started


def example(pool: str) -> list[dict]:
    """The documented example, placed on the lab's pgpu pool. Only what the lab needs changes: the namespace, the pool
    (name and toleration), maxReplicas 4 (the node's 8 GPUs) and no stabilization windows (the example waits 1 and 5
    min on purpose; the HPA controller still reconciles every 15 s)."""
    deployment, hpa = yaml.safe_load_all(EXAMPLE.read_text())
    for obj in (deployment, hpa):
        obj["metadata"]["namespace"] = NAMESPACE
    spec = deployment["spec"]["template"]["spec"]
    spec["nodeSelector"] = {"kube-accel.io/pool": pool}
    spec["tolerations"] = [{**spec["tolerations"][0], "value": pool}]
    hpa["spec"]["maxReplicas"] = 4
    hpa["spec"]["behavior"] = {"scaleUp": {"stabilizationWindowSeconds": 0},
                               "scaleDown": {"stabilizationWindowSeconds": 0}}
    return [deployment, hpa]


def test_hpa_scales_the_example_up_and_down_on_gpu_utilisation(chain, lab, tmp_path):
    (pool,) = [p for p, nodes in lab.nodes_by_pool.items() if nodes == ["lab-pgpu-0"]]
    lab.namespace(NAMESPACE)
    # HAMi's webhook takes every pod asking for nvidia.com/gpu unless told not to (docs/modes/vgpu.md).
    lab.kubectl_run("label", "namespace", NAMESPACE, "hami.io/webhook=ignore", "--overwrite")
    path = tmp_path / "example.yaml"
    path.write_text(yaml.safe_dump_all(example(pool)))
    lab_py(lab, "load", "--util", f"{NAMESPACE}=20")
    lab.kubectl_run("apply", "-f", str(path))
    try:
        metric_path = f"/apis/custom.metrics.k8s.io/v1beta1/namespaces/{NAMESPACE}/pods/*/gpu_utilization"

        def served():
            proc = lab.kubectl_run("get", "--raw", metric_path, check=False)
            items = json.loads(proc.stdout)["items"] if proc.returncode == 0 else []
            return items or None

        started = time.time()
        (item,) = wait_for("gpu_utilization of the example's pod on custom.metrics.k8s.io", served, timeout=60)
        STEPS["example pod Running -> adapter serves its gpu_utilization"] = time.time() - started
        assert item["describedObject"]["name"].startswith("gpu-inference-") and item["value"] == "20"

        def replicas():
            status = kubectl_json(lab, "get", "deployment", "gpu-inference", "-n", NAMESPACE)["status"]
            return status.get("readyReplicas", 0)

        started = time.time()
        lab_py(lab, "load", "--util", f"{NAMESPACE}=95")
        wait_for("the HPA to scale the example up", lambda: replicas() >= 2, timeout=60)
        STEPS["utilisation 95 % -> scaled up (>= 2 ready)"] = time.time() - started
        hpa = kubectl_json(lab, "get", "hpa", "gpu-inference", "-n", NAMESPACE)
        (current,) = hpa["status"]["currentMetrics"]
        assert current["pods"]["metric"]["name"] == "gpu_utilization"
        assert current["pods"]["current"]["averageValue"] == "95"

        started = time.time()
        lab_py(lab, "load", "--util", f"{NAMESPACE}=10")
        wait_for("the HPA to scale the example down to 1",
                 lambda: kubectl_json(lab, "get", "hpa", "gpu-inference", "-n", NAMESPACE)["status"].get(
                     "desiredReplicas") == 1 and replicas() == 1, timeout=60)
        STEPS["utilisation 10 % -> scaled down to 1"] = time.time() - started
    finally:
        lab.kubectl_run("delete", "namespace", NAMESPACE, "--wait=false", check=False)
    report = "\n".join(f"  {seconds:6.1f} s  {step}" for step, seconds in STEPS.items())
    print(f"monitoring proof, {sum(STEPS.values()):.1f} s in all:\n{report}")
    assert sum(STEPS.values()) < PROOF_BUDGET, report


def test_dashboard_report_draws_every_panel(chain, lab):
    """Part 5: the deployed dashboard rendered with the lab's data (what `make demo` leaves in .lab/monitoring)."""
    out = lab.kubeconfig.parent / "monitoring" / "dashboard.html"
    proc = lab_py(lab, "monitoring", "--report", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    page = out.read_text()
    dashboard = json.loads((REPO / "charts" / "monitoring" / "dashboards" / "kube-accel-gpus.json").read_text())
    for panel in dashboard["panels"]:
        assert panel["title"] in page
    assert "no data" not in proc.stderr, proc.stderr
    assert page.count("<polyline") >= len([p for p in dashboard["panels"] if p["type"] != "row"])
