"""Upstream components the lab runs as local processes, and what `lab.py up` starts of them for an
inventory (start_upstream). The stand-ins for what needs a GPU are kalab.standins.

Upstream code (binaries built by scripts/upstream.sh, configured exactly as the charts configure them):
  hami-scheduler   HAMi v2.10.0 scheduler extender and mutating webhook (cmd/scheduler) with the vgpu chart's
                   command and env; only its listen addresses move to 127.0.0.1 and its files under .lab/
  kube-scheduler   a second kube-scheduler of the lab's version with the vgpu chart's KubeSchedulerConfiguration;
                   only clientConnection.kubeconfig is added and the extender's urlPrefix points at the local port
                   (one for HAMi, one for the gpu-manager pool)
  gpu-admission    tkestack gpu-admission (47d56ae), the gpu-manager pool's scheduler extender, with the vgpu
                   chart's command; only its listen addresses move to 127.0.0.1
  gpu-operator     NVIDIA GPU Operator v26.7.0's controller (cmd/gpu-operator) with the chart's args and env, after
                   the chart's CRDs; its image's /opt/gpu-operator assets bound over /opt in its own mount namespace

The API server reaches the webhook through a lab MutatingWebhookConfiguration: a copy of the chart's rendered
webhook (rules, selectors, failurePolicy) whose clientConfig is a URL on 127.0.0.1 with the lab's own CA. The
chart's copy names a Service, which a kwok cluster cannot route to (no pod network, no kube-proxy).

Identities, so that the chart's admission policies judge the lab's HAMi writes as they judge the real ones: HAMi's
scheduler and its kube-scheduler authenticate as the user name of the chart's scheduler ServiceAccount (a client
certificate of the lab's CA), holding exactly the chart's grants for it (its ClusterRole's rules and the built-in
scheduler roles, bound by the lab under kube-accel-lab-* names, since the chart is installed only later by the
cluster play); the HAMi device-plugin stand-in writes as its node's device-plugin pod (kalab.standins).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm import operator_values as accel_operator_values
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm import pool_charts as accel_chart_values
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import pools as accel_pools
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.cluster_settings import cluster_settings

from kalab import processes
from kalab.nodes import capacity_by_standin, inventory_capacity
from kalab.processes import free_port, http_ok, https_ok, procs_dir, start
from kalab.site import (
    BIN,
    CACHE,
    NVML_DATA,
    REPO,
    UPSTREAM_BIN,
    Site,
    gpu_summary,
    kubectl_apply,
    log,
    recorded_gpus,
    run,
    truthy,
    versions,
)
from kalab.standins import DP_STANDIN, DRA_STANDIN, STANDIN, standin_process, start_dp_standin, start_dra_standin

LAB_WEBHOOK = "kube-accel-lab-hami-webhook"
GPU_OPERATOR = "gpu-operator"
GPU_ADMISSION = "gpu-admission"
GPU_OPERATOR_ARCHIVE = "gpu-operator-v26.7.0"
# The namespace cluster.yml installs the GPU Operator into (cluster_operator_namespace).
GPU_OPERATOR_NAMESPACE = "gpu-operator"


# -- the vgpu chart rendered with the lab's release values ---------------------------------------------------


def hami_release(hosts: dict[str, dict], cluster: dict) -> dict | None:
    """The lab's vgpu-hami release exactly as the cluster play computes it, or None."""
    return next((r for r in releases(hosts, cluster) if r["key"] == "vgpu-hami"), None)


def releases(hosts: dict[str, dict], cluster: dict) -> list[dict]:
    """The releases the cluster play installs for these hosts (accel_chart_values.pool_releases: name, key, chart,
    values, pools), by the code the play's accel_pool_releases filter calls."""
    return accel_chart_values.pool_releases(accel_pools.collect_pools(hosts), cluster)


def render(release: dict, namespace: str, kube_version: str, workdir: Path) -> list[dict]:
    return helm_template(release["name"], REPO / "charts" / release["chart"], release["values"], namespace,
                         kube_version, workdir)


def helm_template(name: str, chart: Path, values: dict, namespace: str, kube_version: str, workdir: Path,
                  *extra: str) -> list[dict]:
    path = workdir / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    proc = subprocess.run([str(BIN / "helm"), "template", name, str(chart), "--namespace", namespace,
                           "--kube-version", kube_version, "--values", str(path), *extra],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"[lab] helm template {name} failed:\n{proc.stderr}")
    return [o for o in yaml.safe_load_all(proc.stdout) if o]


def one(objs: list[dict], kind: str, name: str) -> dict:
    found = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    if len(found) != 1:
        sys.exit(f"[lab] rendered chart has {len(found)} {kind} {name}")
    return found[0]


def container(obj: dict, name: str) -> dict:
    return next(c for c in obj["spec"]["template"]["spec"]["containers"] if c["name"] == name)


# -- HAMi's scheduler extender, webhook and kube-scheduler -------------------------------------------------------


def certificate(workdir: Path) -> tuple[Path, Path]:
    """A self-signed serving certificate for 127.0.0.1 (also the webhook's caBundle)."""
    crt, key = workdir / "tls.crt", workdir / "tls.key"
    if not crt.exists():
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30",
                        "-subj", "/CN=kube-accel-lab-hami", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", str(key), "-out", str(crt)], check=True, capture_output=True)
    return crt, key


def identity_kubeconfig(kubeconfig: Path, workdir: Path, name: str, user: str, groups: list[str]) -> Path:
    """A kubeconfig of the lab cluster that authenticates as ``user`` in ``groups`` with a client certificate of the
    lab's CA (the API server's x509 authenticator takes CN as the user name, O as groups)."""
    cfg = yaml.safe_load(kubeconfig.read_text())
    ca = Path(cfg["clusters"][0]["cluster"]["certificate-authority"])
    key, csr, crt = workdir / f"{name}.key", workdir / f"{name}.csr", workdir / f"{name}.crt"
    subject = f"/CN={user}" + "".join(f"/O={g}" for g in groups)
    subprocess.run(["openssl", "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
                    "-subj", subject], check=True, capture_output=True)
    subprocess.run(["openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca.with_suffix(".key")),
                    "-set_serial", str(int(time.time() * 1000)), "-days", "30", "-out", str(crt)],
                   check=True, capture_output=True)
    for entry in cfg["users"]:
        entry["user"] = {"client-certificate": str(crt), "client-key": str(key)}
    out = workdir / f"{name}.kubeconfig"
    out.write_text(yaml.safe_dump(cfg, sort_keys=False))
    out.chmod(0o600)
    return out


def scheduler_grants(objs: list[dict], name: str, namespace: str, user: str) -> list[dict]:
    """The chart's grants to its scheduler ServiceAccount, given to ``user`` under lab names: the extender's
    ClusterRole rules and its Leases Role rules (one lab ClusterRole), the built-in kube-scheduler roles and the
    authentication reader the chart binds."""
    rules = one(objs, "ClusterRole", f"{name}-scheduler-extender")["rules"]
    rules = rules + [r for o in objs if o["kind"] == "Role" and o["metadata"]["name"] in (
        f"{name}-scheduler", f"{name}-scheduler-extender") for r in o["rules"]]
    subject = [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}]
    meta = {"labels": {"kube-accel.lab": "true"}}
    lab = "kube-accel-lab-hami-scheduler"
    out = [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": lab, **meta}, "rules": rules}]
    for role in (lab, "system:kube-scheduler", "system:volume-scheduler"):
        binding = lab if role == lab else f"{lab}-{role.removeprefix('system:')}"
        out.append({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                    "metadata": {"name": binding, **meta},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                    "subjects": subject})
    out.append({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": lab, "namespace": "kube-system", **meta},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                            "name": "extension-apiserver-authentication-reader"},
                "subjects": subject})
    return out


def start_hami(root: Path, kubeconfig: Path, release: dict, namespace: str, kube_version: str) -> dict:
    """hami-scheduler and its kube-scheduler as the chart runs them, the lab webhook, the device-plugin stand-in."""
    workdir = root / "hami"
    workdir.mkdir(parents=True, exist_ok=True)
    objs = render(release, namespace, kube_version, workdir)
    name = release["name"]
    dep = one(objs, "Deployment", f"{name}-scheduler")
    ext = container(dep, "vgpu-scheduler-extender")
    ks = container(dep, "kube-scheduler")
    device_config = workdir / "device-config.yaml"
    device_config.write_text(one(objs, "ConfigMap", f"{name}-device-config")["data"]["device-config.yaml"])
    crt, key = certificate(workdir)
    port, metrics = free_port(), free_port()
    # The chart's command, with the files it mounts moved under .lab/hami and its listen addresses on 127.0.0.1
    # (pflag: the last value of a flag wins, so the chart's own values stay visible in the log).
    args = [a.replace("=/device-config.yaml", f"={device_config}").replace("=/tls/tls.crt", f"={crt}")
            .replace("=/tls/tls.key", f"={key}") for a in ext["command"][1:]]
    args += [f"--http_bind=127.0.0.1:{port}", f"--metrics-bind-address=127.0.0.1:{metrics}"]
    field = {"metadata.name": "lab-hami-scheduler", "metadata.namespace": namespace}
    env = {e["name"]: field[e["valueFrom"]["fieldRef"]["fieldPath"]] if "valueFrom" in e else e["value"]
           for e in ext.get("env", [])}
    # The chart's scheduler ServiceAccount's user name and groups, with the chart's grants (module docstring).
    user = f"system:serviceaccount:{namespace}:{name}-scheduler"
    kubectl_apply(kubeconfig, scheduler_grants(objs, name, namespace, user), workdir / "grants.yaml",
                  "lab grants of HAMi's scheduler")
    identity = identity_kubeconfig(kubeconfig, workdir, "scheduler", user,
                                   ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"])
    env["KUBECONFIG"] = str(identity)
    start(root, "hami-scheduler", [str(UPSTREAM_BIN / "hami-scheduler"), *args], env,
          lambda: https_ok(f"https://127.0.0.1:{port}/healthz"))

    ks_port = start_kube_scheduler(root, "hami-kube-scheduler", workdir, identity, ks,
                                   one(objs, "ConfigMap", f"{name}-scheduler-config")["data"]["config.yaml"],
                                   {"https://127.0.0.1:8443": f"https://127.0.0.1:{port}"})

    hook = one(objs, "MutatingWebhookConfiguration", f"{name}-webhook")
    webhooks = []
    for rendered in hook["webhooks"]:
        path = rendered["clientConfig"]["service"]["path"]
        webhooks.append({**rendered, "clientConfig": {"url": f"https://127.0.0.1:{port}{path}",
                                                      "caBundle": base64.b64encode(crt.read_bytes()).decode()}})
    lab_hook = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": LAB_WEBHOOK, "labels": {"kube-accel.lab": "true"},
                             "annotations": {"kube-accel.lab/copy-of": hook["metadata"]["name"]}},
                "webhooks": webhooks}
    (workdir / "webhook.yaml").write_text(yaml.safe_dump(lab_hook, sort_keys=False))
    kubectl = [str(BIN / "kubectl"), "--kubeconfig", str(kubeconfig)]
    proc = subprocess.run([*kubectl, "apply", "--server-side", "--force-conflicts", "-f",
                           str(workdir / "webhook.yaml")], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"[lab] lab webhook {LAB_WEBHOOK}: {proc.stderr}")
    ready = procs_dir(root) / f"{STANDIN}.ready"
    ready.unlink(missing_ok=True)
    start(root, STANDIN, *standin_process("standin", "--dir", str(root), "--inventory-json",
                                          str(workdir / "hosts.json")), ready.exists)
    info = {"release": name, "namespace": namespace, "port": port, "metrics_port": metrics,
            "kube_scheduler_port": ks_port, "scheduler_name": release["values"].get("hami", {}).get(
                "schedulerName", "hami-scheduler"), "webhook": LAB_WEBHOOK, "scheduler_user": user}
    (workdir / "info.json").write_text(json.dumps(info, indent=1))
    return info


def start_kube_scheduler(root: Path, proc_name: str, workdir: Path, kubeconfig: Path, ks: dict, config_text: str,
                         urls: dict[str, str]) -> int:
    """A second kube-scheduler of the lab's version with a chart's container ``ks`` and KubeSchedulerConfiguration:
    only clientConnection.kubeconfig is added, extender urlPrefixes move per ``urls`` (chart's -> the local
    process's), files move under ``workdir`` and it serves on 127.0.0.1. Returns its secure port."""
    config = yaml.safe_load(config_text)
    config["clientConnection"] = {"kubeconfig": str(kubeconfig)}
    for extender in config.get("extenders", []):
        extender["urlPrefix"] = urls.get(extender["urlPrefix"], extender["urlPrefix"])
    (workdir / "scheduler-config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    ks_port = free_port()
    ks_args = [a.replace("=/etc/kube-accel/scheduler/config.yaml", f"={workdir / 'scheduler-config.yaml'}")
               .replace("=/var/run/kube-scheduler", f"={workdir / 'kube-scheduler-certs'}") for a in ks["command"][1:]]
    ks_args += ["--bind-address=127.0.0.1", f"--secure-port={ks_port}"]
    start(root, proc_name, [str(BIN / "kube-scheduler"), *ks_args], {},
          lambda: https_ok(f"https://127.0.0.1:{ks_port}/healthz"))
    return ks_port


# -- gpu-admission, the gpu-manager pool's scheduler extender -----------------------------------------------


def gpu_manager_release(hosts: dict[str, dict], cluster: dict) -> dict | None:
    """The lab's vgpu-gpu-manager release exactly as the cluster play computes it (accel_releases), or None."""
    return next((r for r in releases(hosts, cluster) if r["key"] == "vgpu-gpu-manager"), None)


def start_gpu_admission(root: Path, kubeconfig: Path, release: dict, namespace: str, kube_version: str) -> dict:
    """gpu-admission (tkestack, built by scripts/upstream.sh) with the vgpu chart's command, and the chart's second
    kube-scheduler whose KubeSchedulerConfiguration names it as the extender, for the gpu-manager pool. Only listen
    addresses move to 127.0.0.1, the kubeconfig stands in for the in-cluster config, and the extender's urlPrefix
    (the chart's Service) points at the local port. No stand-in: gpu-admission reads the vcuda capacity the lab's
    fake node carries (the lab's stand-in for gpu-manager's device plugin) and writes its choice on the pod."""
    workdir = root / "gpu-admission"
    workdir.mkdir(parents=True, exist_ok=True)
    objs = render(release, namespace, kube_version, workdir)
    name = release["name"]
    c = container(one(objs, "Deployment", f"{name}-gpu-admission"), "gpu-admission")
    if c["command"] != ["/usr/bin/gpu-admission"]:
        sys.exit(f"[lab] the chart's gpu-admission container runs {c['command']}, not /usr/bin/gpu-admission")
    port, pprof = free_port(), free_port()
    # pflag: the last value of a flag wins, so the chart's own --address stays visible in the log.
    args = [*c.get("args", []), f"--address=127.0.0.1:{port}", f"--pprofAddress=127.0.0.1:{pprof}",
            f"--kubeconfig={kubeconfig}"]
    start(root, GPU_ADMISSION, [str(UPSTREAM_BIN / "gpu-admission"), *args], {},
          lambda: http_ok(f"http://127.0.0.1:{port}/version"))
    config_text = one(objs, "ConfigMap", f"{name}-scheduler-config")["data"]["config.yaml"]
    chart_url = yaml.safe_load(config_text)["extenders"][0]["urlPrefix"]
    ks = container(one(objs, "Deployment", f"{name}-scheduler"), "kube-scheduler")
    ks_port = start_kube_scheduler(root, "gpu-manager-kube-scheduler", workdir, kubeconfig, ks, config_text,
                                   {chart_url: f"http://127.0.0.1:{port}/scheduler"})
    info = {"release": name, "namespace": namespace, "port": port, "kube_scheduler_port": ks_port,
            "scheduler_name": yaml.safe_load(config_text)["profiles"][0]["schedulerName"], "chart_url": chart_url,
            "log": str(procs_dir(root) / f"{GPU_ADMISSION}.log")}
    (workdir / "info.json").write_text(json.dumps(info, indent=1))
    return info


# -- the GPU Operator controller -----------------------------------------------------------------------------


def upstream_src(archive: str) -> Path:
    """The unpacked source tree of an upstream archive (scripts/upstream.sh unpacks it once per archive digest)."""
    proc = subprocess.run([str(REPO / "scripts" / "upstream.sh"), "path", archive], capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        sys.exit(f"[lab] scripts/upstream.sh path {archive} failed:\n{proc.stderr}")
    return Path(proc.stdout.strip())


def monitoring_crd(plural: str = "servicemonitors") -> dict:
    """A Prometheus Operator CRD (servicemonitors, prometheusrules) at the version the GPU Operator compiles against
    (fetched by scripts/upstream.sh from the Go module proxy: prometheus-operator's own
    example/prometheus-operator-crd)."""
    path = CACHE / "upstream" / "crds" / f"monitoring.coreos.com_{plural}.yaml"
    if not path.exists():
        sys.exit(f"[lab] {path} missing: run `scripts/upstream.sh all` (make toolchain does)")
    return yaml.safe_load(path.read_text())


def start_gpu_operator(root: Path, kubeconfig: Path, values: dict, namespace: str, kube_version: str) -> dict:
    """GPU Operator v26.7.0's controller (cmd/gpu-operator) as the chart runs it, reconciling the ClusterPolicy the
    cluster play installs. The chart's CRDs (and the ServiceMonitor CRD when the values ask for a ServiceMonitor)
    are applied first: the controller's watches need them. What the pod would get from its image and the kubelet
    moves: the image's /opt/gpu-operator (the archive's assets/ and manifests/, Dockerfile COPY lines) is bound
    over /opt in a mount namespace of the process's own (the controller reads that absolute path), the namespace
    fieldRef and the in-cluster namespace of leader election become flags and env, listen addresses 127.0.0.1."""
    src = upstream_src(GPU_OPERATOR_ARCHIVE)
    workdir = root / "gpu-operator"
    workdir.mkdir(parents=True, exist_ok=True)
    objs = helm_template("gpu-operator", src / "deployments" / "gpu-operator", values, namespace, kube_version,
                         workdir, "--include-crds")
    crds = [o for o in objs if o["kind"] == "CustomResourceDefinition"]
    monitor = values.get("dcgmExporter", {}).get("serviceMonitor", {}).get("enabled", False)
    if monitor:
        crds.append(monitoring_crd())
    kubectl_apply(kubeconfig, crds, workdir / "crds.yaml", "GPU Operator CRDs")
    names = [f"crd/{crd['metadata']['name']}" for crd in crds]
    proc = subprocess.run([str(BIN / "kubectl"), "--kubeconfig", str(kubeconfig), "wait", "--for",
                           "condition=Established", "--timeout=60s", *names], capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        sys.exit(f"[lab] GPU Operator CRDs not established: {proc.stderr}")

    c = container(one(objs, "Deployment", "gpu-operator"), "gpu-operator")
    info = run_gpu_operator(root, kubeconfig, c, src, namespace)
    info.update(crds=sorted(crd["metadata"]["name"] for crd in crds), service_monitor_crd=monitor,
                chart=str(src / "deployments" / "gpu-operator"))
    (workdir / "info.json").write_text(json.dumps(info, indent=1))
    return info


def run_gpu_operator(root: Path, kubeconfig: Path, c: dict, src: Path, namespace: str) -> dict:
    """The chart's gpu-operator container ``c`` as lab process "gpu-operator" (see start_gpu_operator)."""
    if c["command"] != ["gpu-operator"]:
        sys.exit(f"[lab] the chart's gpu-operator container runs {c['command']}, not the gpu-operator command")
    workdir = root / "gpu-operator"
    workdir.mkdir(parents=True, exist_ok=True)
    field = {"metadata.namespace": namespace}
    env = {e["name"]: field[e["valueFrom"]["fieldRef"]["fieldPath"]] if "valueFrom" in e else e["value"]
           for e in c.get("env", [])}
    env["KUBECONFIG"] = str(kubeconfig)
    metrics, probe = free_port(), free_port()
    args = [*c.get("args", []), f"--leader-elect-namespace={namespace}",
            f"--metrics-bind-address=127.0.0.1:{metrics}", f"--health-probe-bind-address=127.0.0.1:{probe}"]
    opt = workdir / "opt"
    shutil.rmtree(opt, ignore_errors=True)
    shutil.copytree(src / "assets", opt / "gpu-operator")
    shutil.copytree(src / "manifests", opt / "gpu-operator" / "manifests")
    if not Path("/opt").is_dir():
        sys.exit("[lab] gpu-operator: /opt must exist (the controller's assets are bound over it in its own mount "
                 "namespace)")
    binary = str(UPSTREAM_BIN / "gpu-operator")
    # A user namespace only where it is needed: root can mount in a mount namespace of its own.
    userns = ["--user", "--map-root-user"] if os.geteuid() != 0 else []
    wrapper = ["unshare", "--mount", "--propagation", "private", *userns, "sh", "-c",
               'mount --bind "$0" /opt && exec "$@"', str(opt), binary, *args]
    pid = start(root, GPU_OPERATOR, wrapper, env, lambda: http_ok(f"http://127.0.0.1:{probe}/readyz"), exe=binary)
    return {"namespace": namespace, "pid": pid, "metrics_port": metrics, "probe_port": probe,
            "log": str(procs_dir(root) / f"{GPU_OPERATOR}.log")}


def apply_prometheus_rule_crd(site: Site) -> None:
    """The Prometheus Operator's PrometheusRule CRD, which a cluster with kube-prometheus-stack serves: the monitoring
    chart renders its alerts only where the API is (.Capabilities.APIVersions)."""
    crd = monitoring_crd("prometheusrules")
    kubectl_apply(site.kubeconfig, [crd], site.root / "prometheusrules-crd.yaml", "PrometheusRule CRD")
    run(str(BIN / "kubectl"), "--kubeconfig", str(site.kubeconfig), "wait", "--for", "condition=Established",
        "--timeout=60s", f"crd/{crd['metadata']['name']}")


# -- what `lab.py up` starts for the inventory -------------------------------------------------------------------


def start_upstream(site: Site, hosts: dict[str, dict]) -> None:
    """Upstream controllers as lab processes (this module): HAMi's extender, webhook and kube-scheduler
    for a vgpu-hami pool, with the HAMi device-plugin stand-in; gpu-admission and its kube-scheduler for a
    vgpu/gpu-manager pool; the GPU Operator's controller when the inventory enables the operator; the device-plugin
    stand-in, which runs each NVIDIA device-plugin pod's config-manager; the DRA kubelet-plugin stand-in when a pool
    is dra. A component already running is left alone."""
    running = processes.running(site.root)
    if running:
        log(f"upstream processes already running: {sorted(running)}")
    first = hosts[sorted(hosts)[0]] if hosts else {}
    if not {"hami-scheduler", "hami-kube-scheduler", STANDIN} & set(running):
        start_hami_for_inventory(site, hosts, first)
    if not {GPU_ADMISSION, "gpu-manager-kube-scheduler"} & set(running):
        start_gpu_admission_for_inventory(site, hosts, first)
    if GPU_OPERATOR not in running and truthy(first.get("accel_gpu_operator_enabled", False)):
        start_gpu_operator_for_inventory(site, hosts, first)
    if DP_STANDIN not in running:
        # NVIDIA's plugin (HAMi's stand-in registers the vgpu-hami nodes), on every other GPU host: a play may take a
        # MIG pool's geometry away. Under a MIG config the stand-in puts back the capacity a MIG node starts with (the
        # inventory's promise, not evidence: kalab.nodes).
        counts, mig_capacity = {}, {}
        for name, hv in hosts.items():
            if (st := accel_pools.pool_settings(hv))["accel_mode"] == "vgpu":
                continue
            counts[name] = gpu_summary(NVML_DATA / f"{hv['accel_lab_gpu']}.json")[0]
            if not capacity_by_standin(st):
                mig_capacity[name] = inventory_capacity(st)
        started = time.time()
        start_dp_standin(site.root, counts, first.get("accel_namespace") or "kube-accel", mig_capacity)
        log(f"device-plugin stand-in (config-manager per node) up in {time.time() - started:.1f} s")
    if DRA_STANDIN not in running and any(accel_pools.pool_settings(hv)["accel_mode"] == "dra"
                                          for hv in hosts.values()):
        # Every GPU host: a play may switch any pool to dra; the stand-in serves the nodes the driver's kubelet
        # plugin runs on.
        dra_hosts = {name: {"snapshot": str(NVML_DATA / f"{hv['accel_lab_gpu']}.json"),
                            "mig_geometry": accel_pools.pool_settings(hv).get("accel_mig_geometry") or None}
                     for name, hv in hosts.items()}
        started = time.time()
        start_dra_standin(site.root, dra_hosts)
        log(f"DRA kubelet-plugin stand-in (ResourceSlices per node) up in {time.time() - started:.1f} s")


def start_hami_for_inventory(site: Site, hosts: dict[str, dict], first: dict) -> None:
    # The cluster settings the play's pool_charts role passes (accel_control_plane_cidrs included).
    cluster = cluster_settings(first)
    release = hami_release(hosts, cluster)
    if release is None:
        return
    started = time.time()
    gpus = {name: recorded_gpus(name, hv) for name, hv in hosts.items() if hv.get("accel_pool") in release["pools"]}
    (site.root / "hami").mkdir(exist_ok=True)
    (site.root / "hami" / "hosts.json").write_text(json.dumps(gpus))
    namespace = first.get("accel_namespace") or "kube-accel"
    start_hami(site.root, site.kubeconfig, release, namespace, versions()["K8S_VERSION"].lstrip("v"))
    log(f"HAMi scheduler, kube-scheduler and device-plugin stand-in up in {time.time() - started:.1f} s")


def start_gpu_admission_for_inventory(site: Site, hosts: dict[str, dict], first: dict) -> None:
    cluster = cluster_settings(first)
    release = gpu_manager_release(hosts, cluster)
    if release is None:
        return
    started = time.time()
    start_gpu_admission(site.root, site.kubeconfig, release, first.get("accel_namespace") or "kube-accel",
                        versions()["K8S_VERSION"].lstrip("v"))
    log(f"gpu-admission and its kube-scheduler up in {time.time() - started:.1f} s")


def start_gpu_operator_for_inventory(site: Site, hosts: dict[str, dict], first: dict) -> None:
    """The GPU Operator's controller, configured by the chart rendered with the values the gpu_operator role
    builds for this inventory (accel_gpu_operator_values with the role's gpu_operator_cluster inputs)."""
    started = time.time()
    cluster = {"image_registry": first.get("accel_image_registry") or "",
               "image_pull_secrets": first.get("accel_image_pull_secrets") or [],
               "service_monitor": first.get("accel_gpu_operator_service_monitor", False),
               "service_monitor_labels": first.get("accel_gpu_operator_service_monitor_labels") or {}}
    values = accel_operator_values.gpu_operator_values(accel_pools.collect_pools(hosts), cluster)
    start_gpu_operator(site.root, site.kubeconfig, values, GPU_OPERATOR_NAMESPACE,
                       versions()["K8S_VERSION"].lstrip("v"))
    log(f"GPU Operator controller up in {time.time() - started:.1f} s")
