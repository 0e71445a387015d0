"""Upstream components the lab runs as local processes (issue 15), and the lab's stand-ins for what needs a GPU.

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
Stand-ins (lab code, named "stand-in" in logs, processes and the verify table):
  hami-device-plugin-standin   for HAMi's device plugin: on nodes that run the vgpu chart's device-plugin pod it
                   writes HAMi's node registration (hami.io/node-nvidia-register, HAMi's JSON encoding) for the
                   host's recorded GPUs and the deployed device config, and completes allocations as the
                   plugin's Allocate does (hami.io/bind-phase=success, hami.io/mutex.lock released); the node's
                   capacity is what that plugin registers with the kubelet: deviceSplitCount (or the node's
                   nodeconfig entry) devices per GPU
  device-plugin-standin        for NVIDIA's device plugin (pgpu, mps and timeslice pools): on nodes that run a
                   k8s-device-plugin pod it runs that pod's config-manager sidecar (the upstream binary, its
                   rendered env, the ConfigMap files the kubelet would mount) in a PID namespace of its own, loads
                   the config file config-manager selected with the plugin's own loader (ka-conform-deviceplugin)
                   and writes the capacity the plugin would register: nvidia.com/gpu, or a replicated resource's
                   (re)name times its replicas. Under a MIG strategy it writes nothing (MIG devices need a GPU).

The API server reaches the webhook through a lab MutatingWebhookConfiguration: a copy of the chart's rendered
webhook (rules, selectors, failurePolicy) whose clientConfig is a URL on 127.0.0.1 with the lab's own CA. The
chart's copy names a Service, which a kwok cluster cannot route to (no pod network, no kube-proxy).

Identities, so that the chart's admission policies judge the lab's HAMi writes as they judge the real ones: HAMi's
scheduler and its kube-scheduler authenticate as the user name of the chart's scheduler ServiceAccount (a client
certificate of the lab's CA), holding exactly the chart's grants for it (its ClusterRole's rules and the built-in
scheduler roles, bound by the lab under kube-accel-lab-* names, since the chart is installed only later by the
cluster play); the HAMi device-plugin stand-in writes each node's registration and its pods' allocation with a
token of the chart's device-plugin ServiceAccount bound to that node's device-plugin pod, as the kubelet mounts it
(the API server puts the node's name into it); only what the kubelet would write (capacity) is written as admin.

Every process writes .lab/procs/NAME.log and NAME.pid; `lab.py down` stops them by PID. A component that does
not come up stops `lab.py up` with its own last log lines.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import yaml
from ansible_collections.kube_accel.gpu.plugins.module_utils.accel_verify import (
    LAB_CAPACITY_ANNOTATION,
)

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("KA_CACHE", Path.home() / ".cache" / "kube-accel"))
UPSTREAM_BIN = CACHE / "upstream" / "bin"
BIN = CACHE / "bin"
LAB_WEBHOOK = "kube-accel-lab-hami-webhook"
STANDIN = "hami-device-plugin-standin"
GPU_OPERATOR = "gpu-operator"
GPU_ADMISSION = "gpu-admission"
GPU_OPERATOR_ARCHIVE = "gpu-operator-v26.7.0"
# HAMi v2.10.0 names (pkg/device/nvidia/device.go:41-42, pkg/util/types.go:21-27, pkg/util/nodelock/nodelock.go:40).
HAMI_REGISTER = "hami.io/node-nvidia-register"
HAMI_BIND_PHASE = "hami.io/bind-phase"
HAMI_NODE_LOCK = "hami.io/mutex.lock"
HAMI_ASSIGNED_NODE = "hami.io/vgpu-node"
HAMI_DEVICES_ALLOCATED = "hami.io/vgpu-devices-allocated"
HAMI_DEVICES_TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"
START_TIMEOUT = 60
DP_STANDIN = "device-plugin-standin"
RESTART_AFTER = 10  # seconds, the kubelet's first CrashLoopBackOff delay


def log(msg: str) -> None:
    print(f"[lab] {msg}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# -- processes ------------------------------------------------------------------------------------------------


def procs_dir(root: Path) -> Path:
    path = root / "procs"
    path.mkdir(parents=True, exist_ok=True)
    return path


def last_lines(path: Path, n: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def pid_alive(pid: int, exe: str) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return bool(cmdline) and exe.encode() in b" ".join(cmdline[:2])


def start(root: Path, name: str, argv: list[str], env: dict[str, str], ready: Callable[[], bool],
          timeout: int = START_TIMEOUT, exe: str | None = None) -> int:
    """Start ``argv`` as lab process NAME (log and PID under .lab/procs) and wait until ``ready()``; on failure
    stop it and exit with its last log lines. ``exe``: the component a wrapper in ``argv`` execs (default argv[0])."""
    exe = exe or argv[0]
    if not Path(exe).exists():
        sys.exit(f"[lab] {name}: {exe} is not built: run `scripts/upstream.sh all` (make toolchain does)")
    d = procs_dir(root)
    logfile = d / f"{name}.log"
    started = time.time()
    with logfile.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env}, cwd=root,
                                start_new_session=True)
    (d / f"{name}.pid").write_text(f"{proc.pid} {exe}\n")
    while time.time() - started < timeout:
        if proc.poll() is not None:
            break
        try:
            # pid_alive: the child has exec'd the component (stop_one and running() look for it by name).
            if pid_alive(proc.pid, exe) and ready():
                log(f"{name} up in {time.time() - started:.1f} s (pid {proc.pid}, log {logfile})")
                return proc.pid
        except Exception:  # noqa: BLE001, S110 - not answering yet is what we wait for
            pass
        time.sleep(0.2)
    stop_one(d, name)
    reason = f"exited with {proc.returncode}" if proc.returncode is not None else f"not ready after {timeout} s"
    sys.exit(f"[lab] {name} {reason}; its last log lines ({logfile}):\n{last_lines(logfile)}")


def stop_one(d: Path, name: str) -> None:
    pidfile = d / f"{name}.pid"
    if not pidfile.exists():
        return
    pid_s, _, exe = pidfile.read_text().strip().partition(" ")
    pid = int(pid_s)
    # Only the process this lab started: same PID and still the same executable.
    if pid_alive(pid, exe):
        os.kill(pid, signal.SIGTERM)
        for _ in range(50):
            if not pid_alive(pid, exe):
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)
    pidfile.unlink()


def stop_all(root: Path) -> None:
    d = root / "procs"
    if not d.exists():
        return
    # Stand-ins first: the device-plugin stand-in starts config-manager processes.
    for pidfile in sorted(d.glob("*.pid"), key=lambda p: ("standin" not in p.stem, p.stem)):
        stop_one(d, pidfile.stem)
        log(f"{pidfile.stem} stopped")


def running(root: Path) -> dict[str, int]:
    d = root / "procs"
    out = {}
    for pidfile in sorted(d.glob("*.pid")) if d.exists() else []:
        pid_s, _, exe = pidfile.read_text().strip().partition(" ")
        if pid_alive(int(pid_s), exe):
            out[pidfile.stem] = int(pid_s)
    return out


# -- the vgpu chart rendered with the lab's release values ---------------------------------------------------


def hami_release(hosts: dict[str, dict], cluster: dict) -> dict | None:
    """The lab's vgpu-hami release exactly as the cluster play computes it, or None."""
    return next((r for r in releases(hosts, cluster) if r["key"] == "vgpu-hami"), None)


def releases(hosts: dict[str, dict], cluster: dict) -> list[dict]:
    """The releases the cluster play installs for these hosts (accel_chart_values.pool_releases: name, key, chart,
    values, pools), by the code the play's accel_pool_releases filter calls."""
    from ansible_collections.kube_accel.gpu.plugins.module_utils import accel_chart_values, accel_pools  # noqa: PLC0415

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


def certificate(workdir: Path) -> tuple[Path, Path]:
    """A self-signed serving certificate for 127.0.0.1 (also the webhook's caBundle)."""
    crt, key = workdir / "tls.crt", workdir / "tls.key"
    if not crt.exists():
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30",
                        "-subj", "/CN=kube-accel-lab-hami", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", str(key), "-out", str(crt)], check=True, capture_output=True)
    return crt, key


def https_ok(url: str) -> bool:
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    with urllib.request.urlopen(url, context=ctx, timeout=2) as r:  # noqa: S310 - https on 127.0.0.1
        return r.status == 200


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
    start(root, STANDIN, [sys.executable, str(Path(__file__).resolve()), "standin", "--dir", str(root),
                          "--inventory-json", str(workdir / "hosts.json")],
          {"PYTHONUNBUFFERED": "1"}, ready.exists)
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


def kubectl_apply(kubeconfig: Path, objs: list[dict], path: Path, what: str) -> None:
    path.write_text(yaml.safe_dump_all(objs, sort_keys=False))
    kubectl = [str(BIN / "kubectl"), "--kubeconfig", str(kubeconfig)]
    proc = subprocess.run([*kubectl, "apply", "--server-side", "--force-conflicts", "-f", str(path)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"[lab] {what}: {proc.stderr}")


def http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as r:  # noqa: S310 - http on 127.0.0.1
        return r.status == 200


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


# -- the HAMi device-plugin stand-in ---------------------------------------------------------------------------


def registration(gpus: list[dict], device_config: dict, node_config: dict | None = None) -> list[dict]:
    """HAMi's DeviceInfo list for the recorded GPUs, as the plugin builds it (plugin/register.go:118-189) and
    device.MarshalNodeDevices encodes it (field order and omitempty of pkg/device/devices.go:127). ``node_config``:
    the node's entry of the chart's nodeconfig, whose set values override the device config (plugin/server.go
    readFromConfigFile)."""
    nv = device_config.get("nvidia", {})
    node = node_config or {}
    split = int(node.get("devicesplitcount") or nv.get("deviceSplitCount", 10))
    mem_scaling = float(node.get("devicememoryscaling") or nv.get("deviceMemoryScaling", 1))
    core_scaling = float(node.get("devicecorescaling") or nv.get("deviceCoreScaling", 1))
    out = []
    for idx, gpu in enumerate(gpus):
        model = gpu["name"] if gpu["name"].startswith("NVIDIA") else f"NVIDIA-{gpu['name']}"
        mem = int(gpu["memory_total_mib"])
        if mem_scaling != 1:
            mem = int(mem * mem_scaling)
        info = {"id": gpu["uuid"], "index": idx, "count": split, "devmem": mem, "devcore": int(core_scaling * 100),
                "type": model, "numa": int(gpu.get("numa_node") or 0), "mode": "hami-core", "health": True}
        out.append({k: v for k, v in info.items() if v not in (0, "", None, False)})
    return out


AGENT_TOKEN_SECONDS = 3600


def token_client(kubeconfig: Path, token: str):
    """A CoreV1Api on the lab cluster that authenticates with ``token`` only (no client certificate)."""
    from kubernetes import client, config  # noqa: PLC0415

    cfg = client.Configuration()
    config.load_kube_config(str(kubeconfig), client_configuration=cfg, persist_config=False)
    cfg.cert_file = cfg.key_file = None
    cfg.api_key = {"authorization": f"Bearer {token}"}
    return client.CoreV1Api(client.ApiClient(cfg))


def agent_client(api, kubeconfig: Path, pod: dict, cache: dict):
    """The device-plugin pod's own identity: a token of its ServiceAccount bound to the pod (what the kubelet mounts
    into it; the API server names the pod's node in it), renewed before it expires or when the pod changes."""
    meta = pod["metadata"]
    key = meta["uid"]
    held = cache.get(key)
    if held is None or time.time() - held[0] > AGENT_TOKEN_SECONDS / 2:
        body = {"spec": {"audiences": [], "expirationSeconds": AGENT_TOKEN_SECONDS,
                         "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": key}}}
        token = api.create_namespaced_service_account_token(
            pod["spec"].get("serviceAccountName") or "default", meta["namespace"], body).status.token
        cache[key] = held = (time.time(), token_client(kubeconfig, token))
    return held[1]


def standin(root: Path, hosts_json: Path) -> None:
    """Loop of the HAMi device-plugin stand-in (see the module docstring)."""
    from kubernetes import client, config  # noqa: PLC0415

    gpus_of: dict[str, list[dict]] = json.loads(hosts_json.read_text())
    kubeconfig = root / "kubeconfig"
    api = client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))
    ready = procs_dir(root) / f"{STANDIN}.ready"
    print(f"{STANDIN}: lab stand-in for HAMi's device plugin on {sorted(gpus_of)}", flush=True)
    written: dict[str, str] = {}
    tokens: dict[str, tuple] = {}
    while True:
        try:
            pods = json.loads(api.list_pod_for_all_namespaces(_preload_content=False).data)["items"]
            plugin_nodes, agents = {}, {}
            for pod in pods:
                spec, meta = pod["spec"], pod["metadata"]
                if (meta.get("labels", {}).get("app.kubernetes.io/component") == "device-plugin"
                        and any("projecthami/hami" in c["image"] for c in spec["containers"])
                        and spec.get("nodeName") in gpus_of and pod["status"].get("phase") == "Running"):
                    plugin_nodes[spec["nodeName"]] = (meta["namespace"], meta["labels"]["app.kubernetes.io/instance"])
                    agents[spec["nodeName"]] = pod
            for node, (ns, instance) in sorted(plugin_nodes.items()):
                cms = api.list_namespaced_config_map(ns, label_selector=f"app.kubernetes.io/instance={instance}")
                dc = next((yaml.safe_load(cm.data["device-config.yaml"]) for cm in cms.items
                           if "device-config.yaml" in (cm.data or {})), None)
                if dc is None:
                    continue
                nodeconfig = next((json.loads(cm.data["config.json"]).get("nodeconfig") or [] for cm in cms.items
                                   if "config.json" in (cm.data or {})), [])
                entry = next((e for e in nodeconfig if e.get("name") == node), None)
                devices = registration(gpus_of[node], dc, entry)
                value = json.dumps(devices, separators=(",", ":"))
                if written.get(node) != value:
                    # HAMi's registration (plugin/register.go:298-304), by the node's plugin pod's own token.
                    agent_client(api, kubeconfig, agents[node], tokens).patch_node(
                        node, {"metadata": {"annotations": {HAMI_REGISTER: value}}})
                    # The plugin registers deviceSplitCount devices per GPU under resourceCountName (plugin/server.go).
                    name = dc.get("nvidia", {}).get("resourceCountName", "nvidia.com/gpu")
                    set_capacity(api, node, {name: sum(d["count"] for d in devices)}, STANDIN)
                    written[node] = value
                    print(f"registered {len(gpus_of[node])} GPUs of {node} ({instance})", flush=True)
            for pod in pods:
                meta, node = pod["metadata"], pod["spec"].get("nodeName")
                if node not in plugin_nodes or meta.get("annotations", {}).get(HAMI_BIND_PHASE) != "allocating":
                    continue
                # What the plugin's Allocate does once the kubelet asks, with the plugin pod's token: erase the
                # devices it handed out (plugin/util.go:134-139: one ";" per container left), mark the pod allocated
                # (util.go:397-400) and release the node lock the scheduler took (nodelock.go:222).
                agent = agent_client(api, kubeconfig, agents[node], tokens)
                to_allocate = meta.get("annotations", {}).get(HAMI_DEVICES_TO_ALLOCATE, "")
                agent.patch_namespaced_pod(meta["name"], meta["namespace"], {"metadata": {"annotations": {
                    HAMI_DEVICES_TO_ALLOCATE: ";" * to_allocate.count(";")}}})
                agent.patch_namespaced_pod(meta["name"], meta["namespace"],
                                           {"metadata": {"annotations": {HAMI_BIND_PHASE: "success"}}})
                n = agent.read_node(node)
                lock = (n.metadata.annotations or {}).get(HAMI_NODE_LOCK, "")
                if lock.endswith(f",{meta['namespace']},{meta['name']}"):
                    agent.patch_node(node, {"metadata": {"annotations": {HAMI_NODE_LOCK: None},
                                                         "resourceVersion": n.metadata.resource_version}})
                print(f"allocated {meta['namespace']}/{meta['name']} on {node}", flush=True)
            ready.touch()
        except Exception as exc:  # noqa: BLE001 - keep serving; the log says what went wrong
            print(f"error: {exc}", flush=True)
        time.sleep(1)


def config_manager_env(c: dict, node: str, kubeconfig: Path, srcdir: Path, dst: Path) -> dict[str, str]:
    """A config-manager container's rendered env as its pod gets it on ``node``, with what the kubelet provides moved
    to the lab: KUBECONFIG (in-cluster -> the lab's), NODE_NAME (fieldRef spec.nodeName), the ConfigMap mount
    (CONFIG_FILE_SRCDIR) and the plugin's config file (CONFIG_FILE_DST)."""
    env = {}
    for e in c.get("env", []):
        if "valueFrom" in e:
            field = e["valueFrom"].get("fieldRef", {}).get("fieldPath")
            if field != "spec.nodeName":
                raise ValueError(f"config-manager env {e['name']}: fieldRef {field!r}, the lab provides spec.nodeName")
            env[e["name"]] = node
        else:
            env[e["name"]] = e.get("value", "")
    return {**env, "KUBECONFIG": str(kubeconfig), "CONFIG_FILE_SRCDIR": str(srcdir), "CONFIG_FILE_DST": str(dst)}


def config_manager_argv(env: dict[str, str], hups: Path) -> list[str]:
    """config-manager in a PID namespace of its own (the pod's shared process namespace, which it searches for the
    process to signal) beside a process named PROCESS_TO_SIGNAL: a shell that appends a line to ``hups`` per
    SIGHUP. Killing the returned process (unshare --kill-child) ends both."""
    # The trap is set before config-manager starts (an untrapped SIGHUP would end the counter), and the counter waits
    # in the `wait` builtin, which a trapped signal interrupts at once: waiting on a foreground sleep deferred the trap
    # until the sleep ended, and on a loaded machine two signals then arrived as one.
    ready = f"{hups}.ready"
    counter = f"trap 'echo HUP >> {hups}' HUP; : > {ready}; while :; do sleep 1 & wait \\$!; done"
    script = (f"(exec -a {env.get('PROCESS_TO_SIGNAL') or 'nvidia-device-plugin'} bash -c \"{counter}\") & "
              f"until [ -e {ready} ]; do sleep 0.05; done; exec {UPSTREAM_BIN / 'config-manager'}")
    return ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "bash", "-c", script]


def plugin_resources(loaded: dict, gpu_count: int) -> dict[str, int] | None:
    """What k8s-device-plugin v0.20.0 registers with the kubelet for ``gpu_count`` whole GPUs under ``loaded``, the
    config as the plugin's loader returns it (ka-conform-deviceplugin config): nvidia.com/gpu, or for a resource
    that sharing.timeSlicing or sharing.mps replicates, its rename (or name) times its replicas
    (internal/rm/device_map.go updateDeviceMapWithReplicas). None under a MIG strategy: MIG devices need a GPU."""
    if ((loaded.get("flags") or {}).get("migStrategy") or "none") != "none":
        return None
    gpu = "nvidia.com/gpu"  # the plugin's only resource for whole GPUs (resource naming is off in v0.20.0 configs)
    for kind in ("timeSlicing", "mps"):
        for r in ((loaded.get("sharing") or {}).get(kind) or {}).get("resources") or []:
            if r["name"] == gpu:
                return {r.get("rename") or gpu: gpu_count * int(r["replicas"])}
    return {gpu: gpu_count}


def load_plugin_config(path: Path) -> dict:
    """``path`` through k8s-device-plugin's own config loader (the ka-conform-deviceplugin harness)."""
    proc = subprocess.run([str(UPSTREAM_BIN / "ka-conform-deviceplugin"), "config", str(path)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ValueError(f"the device plugin's loader refuses {path}: {proc.stderr.strip()}")
    return json.loads(proc.stdout)["config"]


def set_capacity(api, node: str, resources: dict[str, int | None], source: str) -> None:
    """Capacity and allocatable as the kubelet reports them once a device plugin registers; None removes one."""
    quantities = {k: (None if v is None else str(v)) for k, v in resources.items()}
    api.patch_node_status(node, {"status": {"capacity": quantities, "allocatable": quantities}})
    api.patch_node(node, {"metadata": {"annotations": {LAB_CAPACITY_ANNOTATION: source}}})


def plugin_pods(pods: list[dict], nodes: set[str], image: str, prefer: str | None = None) -> dict[str, dict]:
    """Running device-plugin pods (app.kubernetes.io/component=device-plugin) with a container of ``image`` on
    ``nodes``, one per node: where two releases run one (the cluster play's and a chart test's), the pod of namespace
    ``prefer``, else the first by namespace and name, so the choice does not flap."""
    out = {}
    for pod in sorted(pods, key=lambda p: (p["metadata"]["namespace"] != prefer, p["metadata"]["namespace"],
                                           p["metadata"]["name"])):
        spec, meta = pod["spec"], pod["metadata"]
        if (meta.get("labels", {}).get("app.kubernetes.io/component") == "device-plugin"
                and any(image in c["image"] for c in spec["containers"])
                and spec.get("nodeName") in nodes and pod["status"].get("phase") == "Running"):
            out.setdefault(spec["nodeName"], pod)
    return out


class ConfigManager:
    """One node's config-manager sidecar, run as its pod runs it (lab process config-manager-NODE)."""

    def __init__(self, root: Path, api, node: str, pod: dict):
        self.node, self.uid = node, pod["metadata"]["uid"]
        spec = pod["spec"]
        (c,) = [c for c in spec["containers"] if c.get("command", [""])[0] == "config-manager"]
        (vol,) = [v for m in c.get("volumeMounts", []) if m["mountPath"] == "/available-configs"
                  for v in spec["volumes"] if v["name"] == m["name"]]
        self.configmap = (pod["metadata"]["namespace"], vol["configMap"]["name"])
        work = root / "device-plugin" / node
        shutil.rmtree(work, ignore_errors=True)
        self.srcdir, self.dst = work / "available-configs", work / "config" / "config.yaml"
        self.srcdir.mkdir(parents=True)
        self.dst.parent.mkdir()
        self.sync(api)
        env = config_manager_env(c, node, root / "kubeconfig", self.srcdir, self.dst)
        self.name = f"config-manager-{node}"
        d = procs_dir(root)
        with (d / f"{self.name}.log").open("w") as out:
            self.proc = subprocess.Popen(config_manager_argv(env, work / "hups"), stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                         env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env})
        (d / f"{self.name}.pid").write_text(f"{self.proc.pid} unshare\n")
        self.log = d / f"{self.name}.log"
        self.exited: float | None = None
        print(f"{self.name} started for pod {pod['metadata']['namespace']}/{pod['metadata']['name']}", flush=True)

    def sync(self, api) -> None:
        """What the kubelet does for the ConfigMap volume: one file per key, kept current."""
        ns, name = self.configmap
        data = api.read_namespaced_config_map(name, ns).data or {}
        for path in self.srcdir.iterdir():
            if path.name not in data:
                path.unlink()
        for key, text in data.items():
            path = self.srcdir / key
            if not path.exists() or path.read_text() != text:
                path.write_text(text)

    def exited_for(self) -> float:
        """Seconds since config-manager exited (0 while it runs); its exit and last log lines are printed once."""
        if self.proc.poll() is None:
            return 0
        if self.exited is None:
            self.exited = time.time()
            print(f"{self.name} exited with {self.proc.returncode}:\n{last_lines(self.log, 10)}", flush=True)
        return time.time() - self.exited

    def config(self) -> str | None:
        return self.dst.read_text() if self.dst.exists() else None

    def stop(self, root: Path) -> None:
        stop_one(procs_dir(root), self.name)


def start_dp_standin(root: Path, gpu_counts: dict[str, int], namespace: str) -> None:
    """The device-plugin stand-in for the fake nodes in ``gpu_counts`` (node: GPUs in its recorded snapshot); where two
    device-plugin pods share a node, it serves the one in ``namespace`` (the inventory's releases)."""
    work = root / "device-plugin"
    work.mkdir(parents=True, exist_ok=True)
    (work / "hosts.json").write_text(json.dumps({"namespace": namespace, "gpus": gpu_counts}))
    ready = procs_dir(root) / f"{DP_STANDIN}.ready"
    ready.unlink(missing_ok=True)
    start(root, DP_STANDIN, [sys.executable, str(Path(__file__).resolve()), "dp-standin", "--dir", str(root),
                             "--inventory-json", str(work / "hosts.json")], {"PYTHONUNBUFFERED": "1"}, ready.exists)


def dp_standin(root: Path, hosts_json: Path) -> None:
    """Loop of the device-plugin stand-in (see the module docstring)."""
    from kubernetes import client, config  # noqa: PLC0415

    served = json.loads(hosts_json.read_text())
    gpus_of: dict[str, int] = served["gpus"]
    api = client.CoreV1Api(config.new_client_from_config(str(root / "kubeconfig")))
    ready = procs_dir(root) / f"{DP_STANDIN}.ready"
    print(f"{DP_STANDIN}: lab stand-in for k8s-device-plugin's registration on {sorted(gpus_of)} "
          f"(preferring pods of namespace {served['namespace']})", flush=True)
    managers: dict[str, ConfigManager] = {}
    applied: dict[str, tuple[str, dict]] = {}
    while True:
        try:
            pods = json.loads(api.list_pod_for_all_namespaces(_preload_content=False).data)["items"]
            running = plugin_pods(pods, set(gpus_of), "k8s-device-plugin", served["namespace"])
            for node in sorted(set(managers) - set(running)):
                managers.pop(node).stop(root)
            for node, pod in sorted(running.items()):
                manager = managers.get(node)
                # A new pod, or the sidecar exited a while ago: the kubelet restarts a failed container (with a
                # back-off); the plugin keeps the config it has meanwhile.
                if manager is None or manager.uid != pod["metadata"]["uid"] or manager.exited_for() > RESTART_AFTER:
                    if manager:
                        manager.stop(root)
                    manager = managers[node] = ConfigManager(root, api, node, pod)
                manager.sync(api)
                text = manager.config()
                if text is None or (node in applied and applied[node][0] == text):
                    continue
                resources = plugin_resources(load_plugin_config(manager.dst), gpus_of[node])
                before = applied.get(node, ("", {}))[1]
                if resources is not None:
                    set_capacity(api, node, {**dict.fromkeys(before), **resources}, DP_STANDIN)
                    named = Path(os.readlink(manager.dst)).name if manager.dst.is_symlink() else "?"
                    print(f"{node}: {resources} from config {named}", flush=True)
                applied[node] = (text, resources or {})
            ready.touch()
        except Exception as exc:  # noqa: BLE001 - keep serving; the log says what went wrong
            print(f"error: {exc}", flush=True)
        time.sleep(1)


def main() -> None:
    import argparse  # noqa: PLC0415

    parser = argparse.ArgumentParser()
    parser.add_argument("cmd", choices=["standin", "dp-standin"])
    parser.add_argument("--dir", required=True)
    parser.add_argument("--inventory-json", required=True)
    args = parser.parse_args()
    (standin if args.cmd == "standin" else dp_standin)(Path(args.dir), Path(args.inventory_json))


if __name__ == "__main__":
    main()
