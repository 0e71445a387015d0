"""charts/vgpu (backend hami) against HAMi v2.10.0, the code it deploys.

- The scheduler extender's rendered command runs through the real hami-scheduler (cobra/pflag, HAMi's device
  config loader) against a recording fake API server: it must start, sync its informers and serve /healthz, and
  every API call it makes must be granted by the chart.
- The rendered device config and node config go through HAMi's own types and loaders, strictly
  (ka-conform-hami-config, tests/conformance/go/hami-config).
- RBAC: the table below lists every API call of the upstream code, with the file:line that makes it; the chart
  grants exactly those (no update, no wildcards), and each cited line must still hold the call.
- Webhook selectors, NetworkPolicy, host paths and the privileged shell command, against HAMi's behaviour.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
from pathlib import Path

import pytest
import upstream
import yaml
from chartlib import container, env, helm_template, mounts, one, pod_spec, rules
from fake_apiserver import FakeAPIServer, closed_port_kubeconfig
from vgpu_cases import granted, grants, label_selector_matches, params, render_case

HAMI_CASES = params("hami")

# Every Kubernetes API call HAMi v2.10.0 makes from the binaries this chart runs: (component, verb, apiGroup,
# resource, file, line, text that line holds). "scheduler" = cmd/scheduler (extender + webhook); "node" = the
# device plugin (cmd/device-plugin/nvidia) and the vGPU monitor (cmd/vGPUmonitor), one pod, one ServiceAccount.
HAMI_CALLS = [
    ("scheduler", "list", "", "pods", "pkg/scheduler/scheduler.go", 363, "Pods().Informer()"),
    ("scheduler", "watch", "", "pods", "pkg/scheduler/scheduler.go", 363, "Pods().Informer()"),
    ("scheduler", "list", "", "nodes", "pkg/scheduler/scheduler.go", 371, "Nodes().Informer()"),
    ("scheduler", "watch", "", "nodes", "pkg/scheduler/scheduler.go", 371, "Nodes().Informer()"),
    # Start() waits for this informer too (line 389) before the HTTP server starts (cmd/scheduler/main.go:135).
    ("scheduler", "list", "", "resourcequotas", "pkg/scheduler/scheduler.go", 378, "ResourceQuotas().Informer()"),
    ("scheduler", "watch", "", "resourcequotas", "pkg/scheduler/scheduler.go", 378, "ResourceQuotas().Informer()"),
    ("scheduler", "get", "", "pods", "pkg/util/nodelock/nodelock.go", 271, "Pods(ns).Get("),
    ("scheduler", "patch", "", "pods", "pkg/util/util.go", 200, "Patch(context.Background(), pod.Name"),
    ("scheduler", "patch", "", "pods", "pkg/util/util.go", 227, "Patch(context.Background(), name"),
    ("scheduler", "create", "", "pods/binding", "pkg/scheduler/scheduler.go", 1057, ".Bind(context.Background()"),
    ("scheduler", "get", "", "nodes", "pkg/util/nodelock/nodelock.go", 136, "Nodes().Get("),
    ("scheduler", "patch", "", "nodes", "pkg/util/nodelock/nodelock.go", 160, "Nodes().Patch("),
    ("scheduler", "patch", "", "nodes", "pkg/util/util.go", 270, "Patch(context.Background(), node.Name"),
    # client-go's event recorder writes through its sink with Create and Patch (never Update).
    ("scheduler", "create", "", "events", "pkg/scheduler/event.go", 49, "StartRecordingToSink"),
    ("scheduler", "patch", "", "events", "pkg/scheduler/event.go", 49, "StartRecordingToSink"),
    ("node", "get", "", "nodes", "pkg/util/util.go", 57, "Nodes().Get("),
    ("node", "patch", "", "nodes", "pkg/util/util.go", 155, "Patch(context.Background(), node.Name"),
    ("node", "patch", "", "nodes", "pkg/util/nodelock/nodelock.go", 223, "Nodes().Patch("),
    ("node", "list", "", "pods", "pkg/util/util.go", 89, 'Pods("").List('),
    ("node", "list", "", "pods", "pkg/device-plugin/nvidiadevice/nvinternal/plugin/server.go", 438, 'Pods("").List('),
    ("node", "get", "", "pods", "pkg/util/util.go", 134, "Pods(ns).Get("),
    ("node", "get", "", "pods", "pkg/device-plugin/nvidiadevice/nvinternal/plugin/util.go", 372, ".Get(context"),
    ("node", "patch", "", "pods", "pkg/device-plugin/nvidiadevice/nvinternal/plugin/server.go", 418, ".Patch("),
    ("node", "list", "", "pods", "pkg/monitor/nvidia/cudevshr.go", 312, "Core().V1().Pods()"),
    ("node", "watch", "", "pods", "pkg/monitor/nvidia/cudevshr.go", 312, "Core().V1().Pods()"),
    ("node", "list", "", "pods", "cmd/vGPUmonitor/metrics.go", 610, "Pods().Lister()"),
    ("node", "watch", "", "pods", "cmd/vGPUmonitor/metrics.go", 610, "Pods().Lister()"),
]
# With --leader-elect the extender watches its namespace's Leases (a Role, not cluster-wide).
HAMI_LEASE_CALLS = [
    ("scheduler", "list", "coordination.k8s.io", "leases", "pkg/scheduler/scheduler.go", 395, "Leases().Informer()"),
    ("scheduler", "watch", "coordination.k8s.io", "leases", "pkg/scheduler/scheduler.go", 395, "Leases().Informer()"),
]
# Deliberately not granted: the device plugin's deduplicated Node warning event for asymmetric NVLink pairs
# (ENABLE_TOPOLOGY_SCORE only) is written into namespace "default"; HAMi logs the refusal and carries on
# (pkg/util/util.go:388 "failed to create node event").
HAMI_NOT_GRANTED = [
    ("node", "list", "", "events", "pkg/util/util.go", 335, "Events(corev1.NamespaceDefault).List("),
    ("node", "update", "", "events", "pkg/util/util.go", 361, "Events(corev1.NamespaceDefault).Update("),
    ("node", "create", "", "events", "pkg/util/util.go", 387, "Events(corev1.NamespaceDefault).Create("),
]


def _line(archive: str, file: str, line: int) -> str:
    return (upstream.src(archive) / file).read_text().splitlines()[line - 1]


@pytest.mark.parametrize("row", HAMI_CALLS + HAMI_LEASE_CALLS + HAMI_NOT_GRANTED, ids=lambda r: f"{r[4]}:{r[5]}")
def test_rbac_table_cites_upstream(row):
    _, _, _, _, file, line, needle = row
    assert needle in _line(upstream.HAMI, file, line), f"{file}:{line} no longer holds {needle!r}: update the table"


def _table(component: str, leader_elect: bool) -> set[tuple[str, str, str]]:
    rows = HAMI_CALLS + (HAMI_LEASE_CALLS if leader_elect else [])
    return {(verb, group, resource) for comp, verb, group, resource, *_ in rows if comp == component}


def _as_table(role: dict) -> set[tuple[str, str, str]]:
    return {(verb, group, resource) for (group, resource), verbs in rules(role).items() for verb in verbs}


@pytest.mark.parametrize(("name", "release", "values"), HAMI_CASES)
def test_rbac_is_exactly_what_hami_calls(tmp_path, name, release, values):
    objs = render_case(tmp_path, release, values)
    leader = (values.get("hami", {}).get("scheduler", {}) or {}).get("leaderElect", True)
    extender = _as_table(one(objs, "ClusterRole", f"{release}-scheduler-extender"))
    roles = [o for o in objs if o["kind"] == "Role" and o["metadata"]["name"] == f"{release}-scheduler-extender"]
    lease = set().union(*(_as_table(r) for r in roles))
    assert extender | lease == _table("scheduler", leader)
    assert lease == {c for c in _table("scheduler", leader) if c[1] == "coordination.k8s.io"}
    assert _as_table(one(objs, "ClusterRole", f"{release}-device-plugin")) == _table("node", leader)
    for obj in objs:
        if obj["kind"] in ("Role", "ClusterRole"):
            for rule in obj["rules"]:
                assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], obj["metadata"]["name"]


def _scheduler_args(objs: list[dict], release: str, tmp_path: Path) -> tuple[list[str], dict]:
    """The extender container's command (program dropped) and env, its file paths moved under tmp_path."""
    dep = one(objs, "Deployment", f"{release}-scheduler")
    ctr = container(dep, "vgpu-scheduler-extender")
    assert ctr["command"][0] == "scheduler"  # HAMi image: /usr/local/bin/scheduler (cmd/scheduler)
    device = one(objs, "ConfigMap", f"{release}-device-config")["data"]["device-config.yaml"]
    (tmp_path / "device-config.yaml").write_text(device)
    assert mounts(ctr)["/device-config.yaml"] == "device-config" and mounts(ctr)["/tls"] == "tls"
    tls = tmp_path / "tls"
    tls.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=hami",
                    "-keyout", str(tls / "tls.key"), "-out", str(tls / "tls.crt")], check=True, capture_output=True)
    args = [a.replace("=/device-config.yaml", f"={tmp_path}/device-config.yaml").replace("=/tls/", f"={tls}/")
            for a in ctr["command"][1:]]
    field_env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in ctr.get("env", []) if "valueFrom" in e}
    fake = {"metadata.name": "hami-scheduler-0", "metadata.namespace": "kube-accel"}
    return args, {k: fake[v] for k, v in field_env.items()} | {k: v for k, v in env(ctr).items() if v is not None}


@pytest.mark.parametrize(("name", "release", "values"), HAMI_CASES)
def test_scheduler_starts_with_chart_flags(tmp_path, name, release, values):
    """hami-scheduler parses the chart's flags, loads its device config, syncs pods/nodes/resourcequotas(/leases)
    against a fake API server and serves TLS /healthz; every call it made is granted to its ServiceAccount."""
    objs = render_case(tmp_path, release, values)
    args, env_vars = _scheduler_args(objs, release, tmp_path)
    with FakeAPIServer() as api:
        port, metrics_port = upstream.free_ports(2)
        # Only the listen addresses are moved (pflag: the last value wins): the chart's ports may be taken here.
        args += [f"--http_bind=127.0.0.1:{port}", f"--metrics-bind-address=127.0.0.1:{metrics_port}"]
        env_vars["KUBECONFIG"] = str(api.kubeconfig(tmp_path / "kubeconfig"))
        binary = upstream.binary("hami-scheduler")
        proc = subprocess.Popen([str(binary), *args], env={"PATH": os.environ["PATH"], **env_vars},
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            startup = {(v, g, r) for v, g, r in _table("scheduler", "--leader-elect=true" in args)
                       if v in ("list", "watch")}
            seen = api.wait_for(startup)
            ctx = ssl.create_default_context()
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
            status = upstream.http_status(proc, f"https://127.0.0.1:{port}/healthz", context=ctx)
        finally:
            out = upstream.stop(proc)
        requests = list(api.requests)
    assert startup <= seen, f"hami-scheduler never made {startup - seen}; output:\n{out[-3000:]}"
    assert status == 200, f"hami-scheduler did not serve /healthz with the chart's flags:\n{out[-3000:]}"
    have = grants(objs, f"{release}-scheduler")
    missing = sorted({(v, g, r, ns) for v, g, r, ns in requests if not granted(have, v, g, r, ns)})
    assert not missing, f"calls hami-scheduler made that the chart does not grant: {missing}"


def test_scheduler_refuses_unknown_flag(tmp_path):
    """The check above would notice a flag hami-scheduler does not know: it fails at flag parsing."""
    proc = upstream.run("hami-scheduler", "--device-config-file=/nonexistent", "--no-such-flag=1",
                        env={"KUBECONFIG": str(closed_port_kubeconfig(tmp_path / "kubeconfig"))}, timeout=30)
    assert proc.returncode != 0
    assert "unknown flag: --no-such-flag" in proc.stdout + proc.stderr


@pytest.mark.parametrize(("name", "release", "values"), HAMI_CASES)
def test_device_and_node_config_load_in_hami(tmp_path, name, release, values):
    objs = render_case(tmp_path, release, values)
    device = tmp_path / "device-config.yaml"
    device.write_text(one(objs, "ConfigMap", f"{release}-device-config")["data"]["device-config.yaml"])
    proc = upstream.run("ka-conform-hami-config", "device-config", str(device))
    assert proc.returncode == 0, proc.stderr
    nvidia = json.loads(proc.stdout)
    hami = values.get("hami", {})
    # NodeDefaultConfig fields marshal under their json tags (pkg/device/nvidia/device.go).
    assert nvidia["devicesplitcount"] == hami.get("deviceSplitCount", 10)
    assert nvidia["devicememoryscaling"] == hami.get("deviceMemoryScaling", 1)
    assert nvidia["GPUCorePolicy"] == hami.get("gpuCorePolicy", "default")
    assert nvidia["ResourceCountName"] == "nvidia.com/gpu"
    node = tmp_path / "config.json"
    node.write_text(one(objs, "ConfigMap", f"{release}-node-config")["data"]["config.json"])
    proc = upstream.run("ka-conform-hami-config", "node-config", str(node))
    assert proc.returncode == 0, proc.stderr
    assert [n["name"] for n in json.loads(proc.stdout)["nodeconfig"] or []] == [
        n["name"] for n in hami.get("nodeConfig", [])]


def test_config_loader_is_strict(tmp_path):
    """A misspelt key that HAMi's own loader would ignore is refused by the harness."""
    bad = tmp_path / "device-config.yaml"
    bad.write_text("nvidia:\n  resourceCountName: nvidia.com/gpu\n  deviceSplitCont: 4\n")
    proc = upstream.run("ka-conform-hami-config", "device-config", str(bad))
    assert proc.returncode != 0 and "deviceSplitCont" in proc.stderr
    bad.write_text('{"nodeconfig": [{"name": "n1", "devicesplitcont": 7}]}')
    proc = upstream.run("ka-conform-hami-config", "node-config", str(bad))
    assert proc.returncode != 0 and "devicesplitcont" in proc.stderr


@pytest.mark.parametrize(("name", "release", "values"), HAMI_CASES)
def test_host_paths_match_what_hami_reads(tmp_path, name, release, values):
    """14.6: the monitor reads HOOK_PATH/containers (pkg/monitor/nvidia/cudevshr.go:133); the plugin hands
    containers HOOK_PATH/vgpu/... (plugin/server.go:848-881): both must be where the chart mounts them."""
    assert 'filepath.Join(hookPath, "containers")' in _line(upstream.HAMI, "pkg/monitor/nvidia/cudevshr.go", 133)
    assert '"%s/vgpu/containers/%s_%s", hostHookPath' in _line(
        upstream.HAMI, "pkg/device-plugin/nvidiadevice/nvinternal/plugin/server.go", 848)
    objs = render_case(tmp_path, release, values)
    ds = one(objs, "DaemonSet", f"{release}-device-plugin")
    plugin, monitor = container(ds, "device-plugin"), container(ds, "vgpu-monitor")
    lib = mounts(plugin)
    monitor_hook = env(monitor)["HOOK_PATH"]
    assert mounts(monitor).get(f"{monitor_hook}/containers") == "containers"
    plugin_hook = env(plugin)["HOOK_PATH"]
    assert lib.get(f"{plugin_hook}/vgpu") == "lib"
    volumes = {v["name"]: v for v in pod_spec(ds)["volumes"]}
    # Host and container paths coincide: the plugin's mounts name host paths (HOOK_PATH/vgpu/...).
    assert volumes["lib"]["hostPath"]["path"] == f"{plugin_hook}/vgpu"
    assert volumes["containers"]["hostPath"]["path"] == f"{plugin_hook}/vgpu/containers"


@pytest.mark.parametrize(("name", "release", "values"), HAMI_CASES)
def test_topology_aware_publishes_gpu_scores(tmp_path, name, release, values):
    """14.10: only ENABLE_TOPOLOGY_SCORE=true makes the plugin publish the pair scores the topology-aware
    policy ranks GPUs by (plugin/register.go:279), as upstream's chart sets it for that policy."""
    assert 'os.Getenv("ENABLE_TOPOLOGY_SCORE") == "true"' in _line(
        upstream.HAMI, "pkg/device-plugin/nvidiadevice/nvinternal/plugin/register.go", 279)
    objs = render_case(tmp_path, release, values)
    policy = container(one(objs, "Deployment", f"{release}-scheduler"), "vgpu-scheduler-extender")["command"]
    topology = "--gpu-scheduler-policy=topology-aware" in policy
    plugin = container(one(objs, "DaemonSet", f"{release}-device-plugin"), "device-plugin")
    assert (env(plugin).get("ENABLE_TOPOLOGY_SCORE") == "true") == topology


def test_topology_aware_values_case(tmp_path):
    """The topology-aware case above is exercised by at least one values file."""
    assert any((v.get("hami", {}).get("scheduler") or {}).get("gpuSchedulerPolicy") == "topology-aware"
               for _, _, v in (p.values for p in HAMI_CASES))


@pytest.mark.parametrize(("name", "release", "values"), HAMI_CASES)
def test_webhook_skips_its_own_pods_and_ignored_namespaces(tmp_path, name, release, values):
    """Issue 20 (1, 2): pods serving the webhook and the certgen Jobs are skipped by the objectSelector, and a
    namespace labelled hami.io/webhook=ignore by the namespaceSelector (as upstream's chart and NOTES say)."""
    objs = render_case(tmp_path, release, values)
    (hook,) = one(objs, "MutatingWebhookConfiguration", f"{release}-webhook")["webhooks"]
    own = [o for o in objs if o["kind"] in ("Deployment", "DaemonSet", "Job")
           and not o["metadata"]["name"].endswith("-test")]
    assert own
    for obj in own:
        labels = obj["spec"]["template"]["metadata"]["labels"]
        assert not label_selector_matches(hook["objectSelector"], labels), obj["metadata"]["name"]
    test_pod = one(objs, "Job", "-test")["spec"]["template"]["metadata"]["labels"]
    assert label_selector_matches(hook["objectSelector"], test_pod)
    ns = hook["namespaceSelector"]
    assert not label_selector_matches(ns, {"kubernetes.io/metadata.name": "team-a", "hami.io/webhook": "ignore"})
    assert not label_selector_matches(ns, {"kubernetes.io/metadata.name": "kube-system"})
    assert label_selector_matches(ns, {"kubernetes.io/metadata.name": "team-a"})


# Why a pod naming no extended resource may skip HAMi's webhook (matchConditions): the handler gives a pod HAMi's
# scheduler only when a device found its resource in a container; each device looks up its own resource names,
# which are extended names; the one change to other pods, NVIDIA_VISIBLE_DEVICES=none, needs overwriteEnv (off in
# the chart's device config). The devices' MutateAdmission list is pinned: a new device means re-reading it.
WEBHOOK_GATE = [
    ("pkg/scheduler/webhook.go", 107, "} else if len(config.SchedulerName) > 0 {"),
    ("pkg/device/nvidia/device.go", 380, "if !hasResource && dev.config.OverwriteEnv {"),
]
MUTATE_ADMISSION = {f"pkg/device/{f}.go" for f in (
    "amd/device", "ascend/device", "awsneuron/device", "biren/device", "cambricon/device", "enflame/device",
    "enflame/gcu", "hygon/device", "iluvatar/device", "kunlun/device", "kunlun/vdevice", "metax/device",
    "metax/sdevice", "mthreads/device", "nvidia/device", "vastai/device")}
EXTENDED_ONLY = (
    "object.spec.containers.exists(c, has(c.resources) && "
    "((has(c.resources.limits) && c.resources.limits.exists(r, r.contains('/'))) || "
    "(has(c.resources.requests) && c.resources.requests.exists(r, r.contains('/'))))) || "
    "(has(object.spec.initContainers) && object.spec.initContainers.exists(c, has(c.resources) && "
    "((has(c.resources.limits) && c.resources.limits.exists(r, r.contains('/'))) || "
    "(has(c.resources.requests) && c.resources.requests.exists(r, r.contains('/'))))))")


def test_webhook_gate_still_matches_hami():
    for file, line, needle in WEBHOOK_GATE:
        assert needle in _line(upstream.HAMI, file, line), f"{file}:{line} no longer holds {needle!r}"
    root = upstream.src(upstream.HAMI)
    found = {str(p.relative_to(root)) for p in (root / "pkg" / "device").rglob("*.go")
             if not p.name.endswith("_test.go") and ") MutateAdmission(" in p.read_text()}
    assert found == MUTATE_ADMISSION, "HAMi's devices changed: re-read their MutateAdmission and the matchConditions"


@pytest.mark.parametrize(("name", "release", "values"), HAMI_CASES)
def test_webhook_sends_only_pods_naming_an_extended_resource(tmp_path, name, release, values):
    """Issue 20 (1): with failurePolicy Fail and the scheduler down, a pod asking for no GPU is still admitted
    (the lab proves it on the API server: test_hami_lab.py); matchConditions exist from Kubernetes 1.28."""
    objs = render_case(tmp_path, release, values)
    device = yaml.safe_load(one(objs, "ConfigMap", f"{release}-device-config")["data"]["device-config.yaml"])
    assert device["nvidia"]["overwriteEnv"] is False
    for kube, present in (("1.25.0", False), ("1.27.0", False), ("1.28.0", True), ("1.36.0", True)):
        (hook,) = one(render_case(tmp_path, release, values, kube), "MutatingWebhookConfiguration",
                      f"{release}-webhook")["webhooks"]
        want = [{"name": "requests-extended-resource", "expression": EXTENDED_ONLY}] if present else None
        assert hook.get("matchConditions") == want, kube

def _ingress(objs: list[dict], name: str) -> dict[int, list | None]:
    """port -> peers allowed (None = any source)."""
    out: dict[int, list | None] = {}
    for rule in one(objs, "NetworkPolicy", name)["spec"].get("ingress") or []:
        for port in rule["ports"]:
            out[port["port"]] = rule.get("from")
    return out


@pytest.mark.parametrize(("name", "release", "values"), HAMI_CASES)
def test_network_policy(tmp_path, name, release, values):
    """Issue 20 (3): HAMi serves /webhook, /filter and /bind on one port without client certificates
    (cmd/scheduler/main.go:146-148): only controlPlaneFrom may reach it; metrics follow metricsFrom, and no
    metricsFrom means no scraper at all (issue 31: the metrics ports were open to every pod)."""
    assert 'router.POST("/bind", routes.Bind(sher))' in _line(upstream.HAMI, "cmd/scheduler/main.go", 147)
    objs = render_case(tmp_path, release, values)
    control_plane = values.get("controlPlaneFrom") or []
    metrics = values.get("metricsFrom") or []
    sched = _ingress(objs, f"{release}-scheduler")
    assert set(sched) <= {8443, 9395}
    if control_plane:
        assert sched[8443] == control_plane
    else:
        assert 8443 not in sched  # no pod-network source at all
    assert sched.get(9395) == (metrics or None) and None not in sched.values()
    assert _ingress(objs, f"{release}-device-plugin") == ({9394: metrics} if metrics else {})


@pytest.mark.parametrize(("name", "release", "values"), HAMI_CASES)
def test_certgen_image_and_privileged_shell(tmp_path, name, release, values):
    """Issue 20 (8, 9): certgen is the Kubernetes project's image pinned by digest; the privileged postStart
    shell gets the lib path as an argument, never inside its script."""
    objs = render_case(tmp_path, release, values)
    jobs = [o for o in objs if o["kind"] == "Job" and "-certgen-" in o["metadata"]["name"]]
    for job in jobs:
        image = pod_spec(job)["containers"][0]["image"]
        assert image.split("@")[0].endswith("ingress-nginx/kube-webhook-certgen") and "@sha256:" in image
    plugin = container(one(objs, "DaemonSet", f"{release}-device-plugin"), "device-plugin")
    cmd = plugin["lifecycle"]["postStart"]["exec"]["command"]
    lib = values.get("hami", {}).get("devicePlugin", {}).get("libPath", "/usr/local/vgpu")
    assert cmd[:2] == ["/bin/sh", "-c"] and lib not in cmd[2] and cmd[4] == f"{lib}/"


def test_schema_refuses_unsafe_lib_path(tmp_path):
    """Issue 20 (9), 14.6: libPath must be a plain absolute path ending in /vgpu."""
    for bad in ("/usr/local/vgpu;reboot", "/opt/hami", "/usr/local/vgpu/../x/vgpu", "/a b/vgpu", "usr/vgpu"):
        path = tmp_path / "v.yaml"
        path.write_text(yaml.safe_dump({"backend": "hami", "pools": ["p"], "hami": {"devicePlugin": {"libPath": bad}}}))
        proc = helm_template("vgpu", [path])
        assert proc.returncode != 0 and "libPath" in proc.stderr, bad
    path.write_text(yaml.safe_dump({"backend": "hami", "pools": ["p"],
                                    "hami": {"devicePlugin": {"libPath": "/opt/hami-1.0/vgpu"}}}))
    assert helm_template("vgpu", [path]).returncode == 0
