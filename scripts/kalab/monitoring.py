"""The lab's monitoring chain: what kube-accel deployed, evaluated by the real Prometheus stack.

Upstream code (binaries built from the Go module proxy by scripts/upstream.sh, versions in scripts/versions.env):
  prometheus           Prometheus (the PromQL harness's version), one scrape job per ServiceMonitor endpoint as the
                       Prometheus Operator generates it from the DCGM exporter's ServiceMonitor that the GPU
                       Operator's controller created in the lab (path, honorLabels, relabelings, metricRelabelings,
                       jobLabel; the target labels namespace/service/pod/container/endpoint the Operator's endpoint
                       relabelling sets), and the rules of the PrometheusRule the monitoring chart installed
  kube-state-metrics   kube_node_labels of the lab's nodes with the allowlist docs/monitoring.md gives (pool joins)
  prometheus-adapter   custom.metrics.k8s.io from the adapter rules ConfigMap the monitoring chart installed,
                       registered as the prometheus-adapter chart registers it (APIService
                       v1beta1.custom.metrics.k8s.io); the lab's kube-apiserver reaches it through an ExternalName
                       Service naming localhost (its aggregator resolves ExternalName services by name, and a kwok
                       cluster has no Service network), with a serving certificate for that Service's DNS name
Stand-in (no GPU, no kubelet):
  dcgm-exporter-standin  the DCGM exporter's endpoints for the nodes that run its pods (kalab.standins); its readings
                       follow .lab/monitoring/load.json (set_load; `lab.py load`)
Only the scrape and evaluation intervals are the lab's own (1 s), so that the whole proof takes seconds, not minutes.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import yaml
from ansible_collections.kube_accel.gpu.plugins.module_utils.common import constants as accel_constants

from kalab.processes import free_port, http_ok, https_ok, last_lines, procs_dir, running, start, stop_one
from kalab.site import BIN, REPO, UPSTREAM_BIN, kubectl_apply, log, versions
from kalab.standins import COLLECTORS, DCGM_ARCHIVE, EXPORTER, SERVED, collectors, standin_process
from kalab.upstream import upstream_src

PROMETHEUS = "prometheus"
KSM = "kube-state-metrics"
ADAPTER = "prometheus-adapter"
NAMES = (EXPORTER, KSM, PROMETHEUS, ADAPTER)
DCGM_MONITOR = ("gpu-operator", "nvidia-dcgm-exporter")  # namespace and name the GPU Operator gives them
ADAPTER_SERVICE = "prometheus-adapter"
CUSTOM_METRICS = "v1beta1.custom.metrics.k8s.io"
INTERVAL = "1s"
START_TIMEOUT = 90


def binary(name: str) -> Path:
    """The upstream command at its pinned version (scripts/upstream.sh names each build NAME-VERSION)."""
    pinned = versions()
    gomod = (REPO / "tests" / "conformance" / "go" / "promql" / "go.mod").read_text().split()
    version = {"prometheus": gomod[gomod.index("github.com/prometheus/prometheus") + 1],
               "prometheus-adapter": pinned["PROMETHEUS_ADAPTER_VERSION"],
               "kube-state-metrics": pinned["KUBE_STATE_METRICS_VERSION"]}[name]
    path = UPSTREAM_BIN / f"{name}-{version.lstrip('v')}"
    # Built on demand: `make test` starts the lab tests before the other lane has built these (scripts/test.sh); the
    # script's lock per output makes this wait for that build, or do it, and returns at once when it is current.
    proc = subprocess.run([str(REPO / "scripts" / "upstream.sh"), "proxy", path.name], capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        sys.exit(f"[lab] scripts/upstream.sh proxy {path.name} failed:\n{proc.stderr[-3000:]}")
    return path


def workdir(root: Path) -> Path:
    path = root / "monitoring"
    path.mkdir(parents=True, exist_ok=True)
    return path


def kubectl_json(kubeconfig: Path, *args: str) -> dict | None:
    proc = subprocess.run([str(BIN / "kubectl"), "--kubeconfig", str(kubeconfig), *args, "-o", "json"],
                          capture_output=True, text=True, check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def wait_json(kubeconfig: Path, what: str, *args: str, timeout: float = 60) -> dict:
    deadline = time.time() + timeout
    while (found := kubectl_json(kubeconfig, *args)) is None or found.get("items") == []:
        if time.time() > deadline:
            sys.exit(f"[lab] monitoring: {what} not found after {timeout:.0f} s (kubectl {' '.join(args)}); "
                     "the cluster play installs it: run `make demo` first")
        time.sleep(1)
    return found


# -- configuration from what the cluster play deployed -----------------------------------------------------------


def relabel(rule: dict) -> dict:
    """A Prometheus Operator RelabelConfig (camelCase) as Prometheus's relabel_config."""
    keys = {"sourceLabels": "source_labels", "targetLabel": "target_label"}
    out = {keys.get(k, k): v for k, v in rule.items()}
    if "action" in out:
        out["action"] = out["action"].lower()
    return out


def scrape_job(monitor: dict, service: dict, targets: dict[str, tuple[str, str]]) -> dict:
    """The scrape job the Prometheus Operator generates for the ServiceMonitor's first endpoint, with static
    targets: ``targets`` maps each exporter pod's node to (pod name, address of its stand-in endpoint). Target
    labels are those the Operator's endpoint relabelling sets (prometheus-operator pkg/prometheus/promcfg.go:
    namespace, service, pod, container, endpoint, and job from the Service's jobLabel label)."""
    spec = monitor["spec"]
    (endpoint,) = spec["endpoints"][:1]
    meta = monitor["metadata"]
    job = service["metadata"].get("labels", {}).get(spec.get("jobLabel", ""), service["metadata"]["name"])
    port_name = endpoint.get("port", "")
    container_name = "nvidia-dcgm-exporter"
    return {
        "job_name": f"serviceMonitor/{meta['namespace']}/{meta['name']}/0",
        # The lab's interval (the endpoint's own is 15 s); a timeout cannot exceed it.
        "scrape_interval": INTERVAL, "scrape_timeout": INTERVAL,
        "honor_labels": bool(endpoint.get("honorLabels", False)),
        "metrics_path": endpoint.get("path", "/metrics"),
        "scheme": endpoint.get("scheme", "http"),
        "static_configs": [
            {"targets": [address], "labels": {"namespace": service["metadata"]["namespace"],
                                              "service": service["metadata"]["name"], "pod": pod,
                                              "container": container_name, "endpoint": port_name, "job": job}}
            for _node, (pod, address) in sorted(targets.items())],
        "relabel_configs": [relabel(r) for r in endpoint.get("relabelings", [])],
        "metric_relabel_configs": [relabel(r) for r in endpoint.get("metricRelabelings", [])],
    }


def prometheus_config(jobs: list[dict], rules_file: Path) -> dict:
    return {"global": {"scrape_interval": INTERVAL, "evaluation_interval": INTERVAL},
            "rule_files": [str(rules_file)], "scrape_configs": jobs}


def rule_groups(rules: list[dict]) -> dict:
    """Every PrometheusRule's groups in one rule file, as the Prometheus Operator mounts them."""
    return {"groups": [g for r in rules for g in r["spec"]["groups"]]}


def ksm_allowlist() -> str:
    labels = [accel_constants.LABELS["pool"], accel_constants.LABELS["mode"], accel_constants.LABELS["managed"],
              accel_constants.UPSTREAM_LABELS["deploy_operands"]]
    return f"nodes=[{','.join(labels)}]"


def adapter_certificate(work: Path, namespace: str) -> tuple[Path, Path]:
    """A self-signed serving certificate for the adapter's Service DNS name (the aggregator checks it) and
    127.0.0.1; it is also the APIService's caBundle."""
    crt, key = work / "adapter.crt", work / "adapter.key"
    san = f"DNS:{ADAPTER_SERVICE}.{namespace}.svc,DNS:localhost,IP:127.0.0.1"
    san_file = work / "adapter.san"
    if not crt.exists() or not san_file.exists() or san_file.read_text() != san:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30",
                        "-subj", f"/CN={ADAPTER_SERVICE}.{namespace}.svc", "-addext", f"subjectAltName={san}",
                        "-keyout", str(key), "-out", str(crt)], check=True, capture_output=True)
        san_file.write_text(san)
    return crt, key


def apiservice(namespace: str, port: int, ca: bytes) -> list[dict]:
    """The prometheus-adapter chart's APIService, pointing at an ExternalName Service for localhost."""
    labels = {"app.kubernetes.io/name": ADAPTER_SERVICE, "app.kubernetes.io/part-of": "kube-accel-lab"}
    return [
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": ADAPTER_SERVICE, "namespace": namespace, "labels": labels},
         "spec": {"type": "ExternalName", "externalName": "localhost",
                  "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}},
        {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
         "metadata": {"name": CUSTOM_METRICS, "labels": labels},
         "spec": {"service": {"name": ADAPTER_SERVICE, "namespace": namespace, "port": port},
                  "group": "custom.metrics.k8s.io", "version": "v1beta1",
                  "caBundle": base64.b64encode(ca).decode(), "groupPriorityMinimum": 100,
                  "versionPriority": 100}},
    ]


def up(root: Path, kubeconfig: Path, gpus: dict[str, list[dict]], namespace: str, adapter_namespace: str,
       driver_version: str) -> dict:
    """Start the chain and return where each part listens. A chain already running on the same deployed inputs is
    left alone; one whose inputs changed (a new ServiceMonitor, rules, exporter pods) is restarted on them."""
    work = workdir(root)
    info_file = work / "info.json"
    started = time.time()
    monitor = wait_json(kubeconfig, "the DCGM exporter's ServiceMonitor (accel_gpu_operator_service_monitor)",
                        "get", "servicemonitor", DCGM_MONITOR[1], "-n", DCGM_MONITOR[0], timeout=120)
    service = wait_json(kubeconfig, "the DCGM exporter's Service", "get", "service", DCGM_MONITOR[1],
                        "-n", DCGM_MONITOR[0])
    pods = wait_json(kubeconfig, "the DCGM exporter's pods", "get", "pods", "-n", DCGM_MONITOR[0], "-l",
                     f"app={DCGM_MONITOR[1]}")["items"]
    rules = wait_json(kubeconfig, "the monitoring chart's PrometheusRule (accel_monitoring_enabled)", "get",
                      "prometheusrules", "-n", namespace)["items"]
    adapter_rules = wait_json(kubeconfig, "the monitoring chart's adapter rules (accel_monitoring_hpa_adapter_"
                              "namespace)", "get", "configmap", "kube-accel-monitoring-adapter-rules", "-n",
                              adapter_namespace)

    # The stand-in serves the nodes the GPU Operator runs its exporter on, one endpoint each.
    exporter_nodes = {p["spec"]["nodeName"]: p["metadata"]["name"] for p in pods
                      if p["spec"].get("nodeName") in gpus}
    digest = hashlib.sha256(json.dumps([monitor["spec"], service["metadata"].get("labels"), exporter_nodes,
                                        [r["spec"] for r in rules], adapter_rules["data"], gpus],
                                       sort_keys=True).encode()).hexdigest()[:16]
    previous = json.loads(info_file.read_text()) if info_file.exists() else {}
    if set(NAMES) <= set(running(root)) and previous.get("inputs") == digest:
        log(f"monitoring chain already running on the deployed configuration: {', '.join(NAMES)}")
        return previous
    stop(root)
    shutil.rmtree(work / "tsdb", ignore_errors=True)  # the series of another configuration would mix in
    ports = {node: free_port() for node in exporter_nodes}
    counters, label_fields = collectors(upstream_src(DCGM_ARCHIVE))
    missing = [m for m in SERVED if m not in counters]
    if missing:
        sys.exit(f"[lab] {EXPORTER}: {missing} are not in the exporter's {COLLECTORS}")
    spec = {"kubeconfig": str(kubeconfig), "driver_version": driver_version, "label_fields": label_fields,
            "counters": {m: counters[m] for m in SERVED},
            "nodes": {node: {"port": ports[node], "gpus": gpus[node]} for node in exporter_nodes},
            "load": str(work / "load.json")}
    (work / "exporter.json").write_text(json.dumps(spec))
    ready = work / "exporter.ready"
    ready.unlink(missing_ok=True)
    start(root, EXPORTER, *standin_process("exporter", str(work / "exporter.json")), ready.exists)

    ksm_port, ksm_telemetry = free_port(), free_port()
    start(root, KSM, [str(binary(KSM)), f"--kubeconfig={kubeconfig}", "--resources=nodes",
                      f"--metric-labels-allowlist={ksm_allowlist()}", "--host=127.0.0.1", f"--port={ksm_port}",
                      "--telemetry-host=127.0.0.1", f"--telemetry-port={ksm_telemetry}"],
          {}, lambda: http_ok(f"http://127.0.0.1:{ksm_port}/healthz"), timeout=START_TIMEOUT)

    rules_file = work / "rules.yml"
    rules_file.write_text(yaml.safe_dump(rule_groups(rules), sort_keys=False))
    jobs = [scrape_job(monitor, service, {n: (exporter_nodes[n], f"127.0.0.1:{ports[n]}") for n in exporter_nodes}),
            # kube-prometheus-stack scrapes kube-state-metrics with honorLabels (its own namespace/pod labels).
            {"job_name": "kube-state-metrics", "honor_labels": True,
             "static_configs": [{"targets": [f"127.0.0.1:{ksm_port}"]}]}]
    config_file = work / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(prometheus_config(jobs, rules_file), sort_keys=False))
    prom_port = free_port()
    prom = f"http://127.0.0.1:{prom_port}"
    start(root, PROMETHEUS, [str(binary(PROMETHEUS)), f"--config.file={config_file}",
                             f"--storage.tsdb.path={work / 'tsdb'}", "--storage.tsdb.retention.time=1d",
                             f"--web.listen-address=127.0.0.1:{prom_port}"],
          {}, lambda: http_ok(f"{prom}/-/ready"), timeout=START_TIMEOUT)

    (work / "adapter.yaml").write_text(adapter_rules["data"]["config.yaml"])
    crt, key = adapter_certificate(work, adapter_namespace)
    adapter_port = free_port()
    # kwokctl's one CA signs the API server's proxy client certificate (--proxy-client-cert-file, the admin's).
    ca = kube_ca(kubeconfig)
    start(root, ADAPTER, [str(binary(ADAPTER)), f"--secure-port={adapter_port}", "--bind-address=127.0.0.1",
                          f"--tls-cert-file={crt}", f"--tls-private-key-file={key}", f"--prometheus-url={prom}/",
                          f"--config={work / 'adapter.yaml'}", "--metrics-relist-interval=5s",
                          f"--lister-kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
                          f"--authorization-kubeconfig={kubeconfig}", f"--requestheader-client-ca-file={ca}",
                          "--v=2"],
          {}, lambda: https_ok(f"https://127.0.0.1:{adapter_port}/readyz"), timeout=START_TIMEOUT)
    kubectl_apply(kubeconfig, apiservice(adapter_namespace, adapter_port, crt.read_bytes()), work / "apiservice.yaml",
                  "custom metrics APIService")
    proc = subprocess.run([str(BIN / "kubectl"), "--kubeconfig", str(kubeconfig), "wait", "--for",
                           "condition=Available", "--timeout=60s", f"apiservice/{CUSTOM_METRICS}"],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"[lab] {CUSTOM_METRICS} not Available: {proc.stderr}\n"
                 f"{last_lines(procs_dir(root) / f'{ADAPTER}.log')}")
    info = {"prometheus": prom, "adapter": f"https://127.0.0.1:{adapter_port}", "ksm": f"127.0.0.1:{ksm_port}",
            "exporter": {n: f"127.0.0.1:{p}" for n, p in ports.items()}, "job": jobs[0]["job_name"],
            "started": started, "up_seconds": round(time.time() - started, 1), "inputs": digest}
    info_file.write_text(json.dumps(info, indent=1))
    log(f"monitoring chain up in {info['up_seconds']} s: Prometheus {prom}, {len(ports)} exporter stand-in "
        f"endpoints, {CUSTOM_METRICS} Available")
    return info


def kube_ca(kubeconfig: Path) -> str:
    doc = yaml.safe_load(kubeconfig.read_text())
    return doc["clusters"][0]["cluster"]["certificate-authority"]


def stop(root: Path) -> None:
    for name in reversed(NAMES):
        stop_one(procs_dir(root), name)
    (workdir(root) / "info.json").unlink(missing_ok=True)


# -- load control ------------------------------------------------------------------------------------------------


def set_load(root: Path, utilization: dict[str, float] | None = None, xid: dict[str, int] | None = None) -> dict:
    """Merge into load.json: utilisation (%) of GPUs used by pods of a namespace, XID code per "node/gpu"."""
    path = workdir(root) / "load.json"
    load = json.loads(path.read_text()) if path.exists() else {}
    for key, update in (("utilization", utilization), ("xid", xid)):
        if update is not None:
            load[key] = {**load.get(key, {}), **update}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(load))
    tmp.replace(path)
    return load


# -- the dashboard, rendered ---------------------------------------------------------------------------------------


def query_range(prom: str, expr: str, start: float, end: float, step: float) -> list[dict]:
    params = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{prom}/api/v1/query_range?{params}", timeout=30) as r:  # noqa: S310 - 127.0.0.1
        body = json.loads(r.read())
    return body["data"]["result"]


def panel_expr(expr: str, seconds: float) -> str:
    """A panel query as Grafana sends it with every variable on All (regex .*) over the report's range."""
    for var, value in (("$__rate_interval", "1m"), ("$__range", f"{max(int(seconds), 60)}s"), ("$__interval", "15s")):
        expr = expr.replace(var, value)
    for var in ("$pool", "$node", "$gpu", "$namespace"):
        expr = expr.replace(var, ".*")
    return expr


def legend(fmt: str, metric: dict) -> str:
    out = fmt
    for key, value in metric.items():
        out = out.replace("{{" + key + "}}", value)
    return out


PALETTE = ("#7eb26d", "#eab839", "#6ed0e0", "#ef843c", "#e24d42", "#1f78c1", "#ba43a9", "#705da0", "#508642",
           "#cca300", "#447ebc", "#c15c17")


def svg_panel(title: str, unit: str, series: list[tuple[str, list[tuple[float, float]]]], start: float,
              end: float) -> str:
    width, height, left, top = 560, 220, 56, 12
    plot_w, plot_h = width - left - 10, height - top - 28
    values = [v for _n, pts in series for _t, v in pts]
    vmax = max(values + [1.0]) * 1.1
    vmin = min(values + [0.0])
    span = (vmax - vmin) or 1.0

    def x(t: float) -> float:
        return left + (t - start) / max(end - start, 1) * plot_w

    def y(v: float) -> float:
        return top + plot_h - (v - vmin) / span * plot_h

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img">',
             f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="#181b1f" stroke="#333"/>']
    for k in range(5):
        v = vmin + span * k / 4
        parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#2a2d33"/>'
                     f'<text x="{left - 4}" y="{y(v) + 4:.1f}" fill="#aaa" font-size="10" text-anchor="end">'
                     f'{v:.4g}</text>')
    parts.append(f'<text x="{left}" y="{height - 8}" fill="#aaa" font-size="10">'
                 f'{time.strftime("%H:%M:%S", time.gmtime(start))} UTC</text>'
                 f'<text x="{left + plot_w}" y="{height - 8}" fill="#aaa" font-size="10" text-anchor="end">'
                 f'{time.strftime("%H:%M:%S", time.gmtime(end))} ({html.escape(unit)})</text>')
    for k, (_name, pts) in enumerate(series):
        path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in pts)
        parts.append(f'<polyline fill="none" stroke="{PALETTE[k % len(PALETTE)]}" stroke-width="1.5" '
                     f'points="{path}"/>')
    parts.append("</svg>")
    keys = "".join(f'<li><span style="color:{PALETTE[k % len(PALETTE)]}">&#9632;</span> {html.escape(name)}</li>'
                   for k, (name, _p) in enumerate(series[:24]))
    more = f"<li>... {len(series) - 24} more</li>" if len(series) > 24 else ""
    empty = "" if series else '<p class="empty">no data</p>'
    return (f'<div class="panel"><h3>{html.escape(title)}</h3>{"".join(parts)}{empty}'
            f'<ul class="legend">{keys}{more}</ul></div>')


def report(root: Path, kubeconfig: Path, namespace: str, out: Path, min_seconds: float = 30) -> dict:
    """Render the deployed dashboard's panels with the lab Prometheus's data to one HTML file; returns, per panel,
    how many series it drew."""
    info = json.loads((workdir(root) / "info.json").read_text())
    prom = info["prometheus"]
    wait_until = info["started"] + min_seconds
    if time.time() < wait_until:
        time.sleep(wait_until - time.time())
    cms = wait_json(kubeconfig, "the dashboard ConfigMap", "get", "configmaps", "-n", namespace,
                    "-l", "grafana_dashboard=1")["items"]
    dashboard = json.loads(next(iter(cms[0]["data"].values())))
    end = time.time()
    start_t = max(info["started"], end - 3600)
    step = max(1.0, (end - start_t) / 240)
    sections, counts = [], {}
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            sections.append(f"<h2>{html.escape(panel['title'])}</h2>")
            continue
        series = []
        for target in panel.get("targets", []):
            for result in query_range(prom, panel_expr(target["expr"], end - start_t), start_t, end, step):
                pts = [(float(t), float(v)) for t, v in result["values"]]
                series.append((legend(target.get("legendFormat", ""), result["metric"]), pts))
        series.sort(key=lambda s: s[0])
        counts[panel["title"]] = len(series)
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
        sections.append(svg_panel(panel["title"], unit, series, start_t, end))
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(dashboard['title'])} (lab)</title>"
            "<style>body{background:#111217;color:#ddd;font-family:sans-serif;margin:16px}"
            ".panel{display:inline-block;vertical-align:top;margin:6px;padding:6px;background:#181b1f}"
            "h3{font-size:13px;margin:2px 0 4px}.legend{font-size:11px;list-style:none;padding:0;margin:2px 0;"
            "max-width:560px;columns:2}.empty{color:#888}</style></head><body>"
            f"<h1>{html.escape(dashboard['title'])}</h1><p>The dashboard kube-accel installed (ConfigMap "
            f"{html.escape(cms[0]['metadata']['namespace'])}/{html.escape(cms[0]['metadata']['name'])}), every "
            f"variable on All, drawn from the lab's Prometheus ({html.escape(prom)}), {int(end - start_t)} s of data. "
            "GPU readings come from the lab's DCGM exporter stand-in (no GPU here); kube_node_labels from "
            "kube-state-metrics.</p>" + "".join(sections) + "</body></html>")
    out.write_text(page)
    return counts
