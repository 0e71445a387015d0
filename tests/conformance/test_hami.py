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
from chartlib import NAMESPACE, container, env, helm_template, mounts, one, pod_spec, rules
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
    """A pod author cannot opt out of HAMi's webhook: in every namespace it serves
    (all but kube-system, the release's and those an administrator labels hami.io/webhook=ignore) it has no
    objectSelector. Only in the release namespace, where the administrator alone creates pods, do the chart's own
    pods (scheduler, device plugin, certgen Jobs) skip it by the pod label, while the chart's own test pod goes
    through it."""
    objs = render_case(tmp_path, release, values)
    tenants, own_ns = one(objs, "MutatingWebhookConfiguration", f"{release}-webhook")["webhooks"]
    assert (tenants["name"], own_ns["name"]) == ("vgpu.hami.io", "release-namespace.vgpu.hami.io")
    assert "objectSelector" not in tenants
    ns = tenants["namespaceSelector"]
    assert not label_selector_matches(ns, {"kubernetes.io/metadata.name": "team-a", "hami.io/webhook": "ignore"})
    assert not label_selector_matches(ns, {"kubernetes.io/metadata.name": "kube-system"})
    assert not label_selector_matches(ns, {"kubernetes.io/metadata.name": NAMESPACE})
    assert label_selector_matches(ns, {"kubernetes.io/metadata.name": "team-a"})
    own_sel = own_ns["namespaceSelector"]
    assert label_selector_matches(own_sel, {"kubernetes.io/metadata.name": NAMESPACE})
    assert not label_selector_matches(own_sel, {"kubernetes.io/metadata.name": "team-a"})
    own = [o for o in objs if o["kind"] in ("Deployment", "DaemonSet", "Job")
           and not o["metadata"]["name"].endswith("-test")]
    assert own
    for obj in own:
        assert obj["metadata"]["namespace"] == NAMESPACE
        labels = obj["spec"]["template"]["metadata"]["labels"]
        assert not label_selector_matches(own_ns["objectSelector"], labels), obj["metadata"]["name"]
    test_pod = one(objs, "Job", "-test")["spec"]["template"]["metadata"]["labels"]
    assert label_selector_matches(own_ns["objectSelector"], test_pod)
    # Both entries call the same handler the same way; kube-webhook-certgen's patch writes every webhook's caBundle
    # and failurePolicy (kubernetes/ingress-nginx images/kube-webhook-certgen/rootfs/pkg/k8s/k8s.go patchMutating).
    same = ("clientConfig", "rules", "failurePolicy", "sideEffects", "timeoutSeconds", "matchConditions")
    assert [tenants.get(k) for k in same] == [own_ns.get(k) for k in same]


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
    """With failurePolicy Fail and the scheduler down, a pod asking for no GPU is still admitted
    (the lab proves it on the API server: test_hami_lab.py); matchConditions exist from Kubernetes 1.28."""
    # overwriteEnv (on) would also write NVIDIA_VISIBLE_DEVICES=none into pods naming no extended
    # resource, which these skip: the NVIDIA runtime now ignores that variable in unprivileged containers
    # (container_toolkit), so nothing is lost (tests/conformance/test_hami_runtime.py).
    asked = ((values.get("hami") or {}).get("webhook") or {}).get("failurePolicy", "Ignore")
    for kube, present in (("1.25.0", False), ("1.27.0", False), ("1.28.0", True), ("1.36.0", True)):
        objs = render_case(tmp_path, release, values, kube)
        hooks = one(objs, "MutatingWebhookConfiguration", f"{release}-webhook")["webhooks"]
        want = [{"name": "requests-extended-resource", "expression": EXTENDED_ONLY}] if present else None
        # Without matchConditions, Fail would refuse every pod of every namespace the webhook serves
        # while the scheduler is down: it is rendered as Ignore there, and the certgen patch writes the same.
        policy = asked if present else "Ignore"
        for hook in hooks:
            assert hook.get("matchConditions") == want, kube
            assert hook["failurePolicy"] == policy, kube
        for job in (o for o in objs if o["kind"] == "Job" and o["metadata"]["name"].endswith("-certgen-patch")):
            assert f"--patch-failure-policy={policy}" in container(job, "patch")["args"], kube

def _ingress(objs: list[dict], name: str) -> dict[int, list | None]:
    """port -> peers allowed (None = any source)."""
    out: dict[int, list | None] = {}
    for rule in one(objs, "NetworkPolicy", name)["spec"].get("ingress") or []:
        for port in rule["ports"]:
            out[port["port"]] = rule.get("from")
    return out


@pytest.mark.parametrize(("name", "release", "values"), HAMI_CASES)
def test_network_policy(tmp_path, name, release, values):
    """HAMi serves /webhook, /filter and /bind on one port without client certificates
    (cmd/scheduler/main.go:146-148): only controlPlaneFrom may reach it; metrics follow metricsFrom, and no
    metricsFrom means no scraper at all."""
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
    """certgen is the Kubernetes project's image pinned by digest; the privileged postStart
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
    """libPath must be a plain absolute path ending in /vgpu."""
    for bad in ("/usr/local/vgpu;reboot", "/opt/hami", "/usr/local/vgpu/../x/vgpu", "/a b/vgpu", "usr/vgpu"):
        path = tmp_path / "v.yaml"
        path.write_text(yaml.safe_dump({"backend": "hami", "pools": ["p"], "hami": {"devicePlugin": {"libPath": bad}}}))
        proc = helm_template("vgpu", [path])
        assert proc.returncode != 0 and "libPath" in proc.stderr, bad
    path.write_text(yaml.safe_dump({"backend": "hami", "pools": ["p"],
                                    "hami": {"devicePlugin": {"libPath": "/opt/hami-1.0/vgpu"}}}))
    assert helm_template("vgpu", [path]).returncode == 0


# -- What a pod author and the node agent may not write, from HAMi v2.10.0 and HAMi-core 8f3a89c --

# HAMi-core (libvgpu: the in-container enforcement), unpacked by scripts/upstream.sh only at the sha256 that
# scripts/upstream.sha256 pins.
PLUGIN = "pkg/device-plugin/nvidiadevice/nvinternal/plugin"


def _core_line(file: str, line: int) -> str:
    return (upstream.src(upstream.HAMI_CORE) / file).read_text().splitlines()[line - 1]


# Pod annotations of HAMi's allocation protocol, where HAMi names them: its scheduler writes them (Filter:
# pkg/scheduler/scheduler.go:1139, Bind: 1052), its device plugin picks the pod and the devices Allocate hands out
# by them and its scheduler counts what is used from them (HAMI_ALLOCATION_READERS). Only those two may write them.
HAMI_ALLOCATION_ANNOTATIONS = [
    ("hami.io/vgpu-time", "pkg/util/types.go", 20, 'AssignedTimeAnnotations = "hami.io/vgpu-time"'),
    ("hami.io/vgpu-node", "pkg/util/types.go", 21, 'AssignedNodeAnnotations = "hami.io/vgpu-node"'),
    ("hami.io/bind-time", "pkg/util/types.go", 22, 'BindTimeAnnotations     = "hami.io/bind-time"'),
    ("hami.io/bind-phase", "pkg/util/types.go", 23, 'DeviceBindPhase         = "hami.io/bind-phase"'),
    ("hami.io/vgpu-devices-to-allocate", "pkg/device/nvidia/device.go", 167, '"hami.io/vgpu-devices-to-allocate"'),
    ("hami.io/vgpu-devices-allocated", "pkg/device/nvidia/device.go", 168, '"hami.io/vgpu-devices-allocated"'),
    ("hami.io/vgpu-mig-allocations", "pkg/device/nvidia/mig_allocations.go", 26, '"hami.io/vgpu-mig-allocations"'),
]
HAMI_ALLOCATION_READERS = [
    ("pkg/util/util.go", 97, "p.Annotations[BindTimeAnnotations]"),
    ("pkg/util/util.go", 100, "p.Annotations[DeviceBindPhase]"),
    ("pkg/util/util.go", 109, "p.Annotations[AssignedNodeAnnotations]"),
    (f"{PLUGIN}/server.go", 764, "decodePodSingleDevice(nvidia.NvidiaGPUDevice, current)"),
    (f"{PLUGIN}/server.go", 381, "DecodeMigAllocations(pod.Annotations[nvidia.MigAllocationsAnnotation])"),
    ("pkg/scheduler/scheduler.go", 144, "pod.Annotations[util.AssignedNodeAnnotations]"),
]
# Pod annotations HAMi reads as the user's own scheduling choice: left free.
HAMI_USER_KNOBS = [
    ("hami.io/node-scheduler-policy", "pkg/util/types.go", 87, '"hami.io/node-scheduler-policy"'),
    ("hami.io/gpu-scheduler-policy", "pkg/util/types.go", 89, '"hami.io/gpu-scheduler-policy"'),
    ("hami.io/device-scoring-weights", "pkg/util/types.go", 91, '"hami.io/device-scoring-weights"'),
]
# Every other hami.io/ name of the NVIDIA path is a node annotation or the scheduler's own pod label.
HAMI_OTHER_NAMES = {"hami.io/mutex.lock", "hami.io/node-handshake", "hami.io/node-nvidia-register",
                    "hami.io/node-nvidia-score", "hami.io/device-cordon", "hami.io/scheduler-role"}

# Environment variables a container with a HAMi allocation may not set: (name, "hami"|"core", file, line, text,
# why). The pod's env reaches the container after the device plugin's (kubelet GenerateRunContainerOptions,
# kubernetes v1.36.3 pkg/kubelet/kubelet_pods.go:632,656) and containerd keeps the last value of a name
# (containerd v2.4.2 pkg/oci/spec_opts.go:198-221), so the pod's value wins over what HAMi sets. A name ending in
# "_" is a prefix (HAMi-core appends the device index).
HAMI_ENV = [
    ("CUDA_DISABLE_CONTROL", "hami", f"{PLUGIN}/server.go", 868, '"CUDA_DISABLE_CONTROL"',
     "true: the plugin does not mount /etc/ld.so.preload (line 880), so HAMi-core is never loaded"),
    ("CUDA_DEVICE_MEMORY_LIMIT", "core", "src/multiprocess/multiprocess_memory_limit.c", 179,
     "get_limit_from_env(CUDA_DEVICE_MEMORY_LIMIT)", "memory limit of each device without its own"),
    ("CUDA_DEVICE_MEMORY_LIMIT_", "core", "src/multiprocess/multiprocess_memory_limit.c", 183,
     '"%s_%d", CUDA_DEVICE_MEMORY_LIMIT', "per-device memory limit, which the plugin sets (server.go:835)"),
    ("CUDA_DEVICE_SM_LIMIT", "core", "src/multiprocess/multiprocess_memory_limit.c", 196,
     "get_limit_from_env(CUDA_DEVICE_SM_LIMIT)", "SM limit, which the plugin sets (server.go:837)"),
    ("CUDA_DEVICE_SM_LIMIT_", "core", "src/multiprocess/multiprocess_memory_limit.c", 201,
     '"%s_%d", CUDA_DEVICE_SM_LIMIT', "per-device SM limit"),
    ("CUDA_DEVICE_MEMORY_SHARED_CACHE", "core", "src/multiprocess/multiprocess_memory_limit.c", 1077,
     "getenv(MULTIPROCESS_SHARED_REGION_CACHE_ENV)",
     "a shared region of its own: limits read afresh from env, usage unseen by the monitor (plugin: server.go:838)"),
    ("GPU_CORE_UTILIZATION_POLICY", "core", "src/multiprocess/multiprocess_memory_limit.c", 1047,
     'getenv("GPU_CORE_UTILIZATION_POLICY")', "disable turns the SM limit off"),
    ("CUDA_TASK_PRIORITY", "core", "src/multiprocess/multiprocess_memory_limit.c", 1140,
     "getenv(CUDA_TASK_PRIORITY_ENV)", "the priority HAMi's monitor suspends neighbours by"),
    ("CUDA_REDIRECT", "core", "src/libvgpu.c", 95, 'getenv("CUDA_REDIRECT")',
     "dlopens another library in place of libvgpu.so for the dlsym hook"),
    ("NVIDIA_VISIBLE_DEVICES", "hami", f"{PLUGIN}/server.go", 1058, "response.Envs[deviceListEnvVar]",
     "the plugin's device list (envvar strategy)"),
]
# HAMi's own webhook writes these two into a GPU container: the policy accepts exactly its values.
HAMI_WEBHOOK_ENV = [
    ("CUDA_TASK_PRIORITY", "pkg/device/nvidia/device.go", 355, "Name:  util.TaskPriority,"),
    ("GPU_CORE_UTILIZATION_POLICY", "pkg/device/nvidia/device.go", 363, "Name:  util.CoreLimitSwitch,"),
]
# What the plugin mounts into a container with an allocation (HOOK_PATH/vgpu = the chart's libPath); a pod's volume
# at the same depth is mounted after it (kubelet_pods.go:663; containerd sorts mounts by depth, stably:
# internal/cri/opts/spec_opts.go:97-108) and so hides it.
HAMI_PLUGIN_MOUNTS = [
    (f"{PLUGIN}/server.go", 856, 'ContainerPath: fmt.Sprintf("%s/vgpu/libvgpu.so", hostHookPath)'),
    (f"{PLUGIN}/server.go", 859, 'ContainerPath: fmt.Sprintf("%s/vgpu", hostHookPath)'),
    (f"{PLUGIN}/server.go", 862, 'ContainerPath: "/tmp/vgpulock"'),
    (f"{PLUGIN}/server.go", 880, 'ContainerPath: "/etc/ld.so.preload"'),
]
# The device plugin's writes on its node and on the pods it allocates: (kind, how, key, file, line, text).
HAMI_AGENT_WRITES = [
    ("nodes", "set", "hami.io/node-nvidia-register", f"{PLUGIN}/register.go", 298,
     "annos[nvidia.RegisterAnnos] = encodeddevices"),
    ("nodes", "set", "hami.io/node-nvidia-score", f"{PLUGIN}/register.go", 300,
     "annos[nvidia.RegisterGPUPairScore] = string(data)"),
    # The scheduler takes the node lock (nodelock.go:159); the plugin only releases it.
    ("nodes", "remove", "hami.io/mutex.lock", "pkg/util/nodelock/nodelock.go", 222, '{"%s":null}'),
    ("pods", "set", "hami.io/vgpu-devices-to-allocate", f"{PLUGIN}/util.go", 137,
     "annoKey := device.InRequestDevices[dtype]"),
    ("pods", "set", "hami.io/bind-phase", f"{PLUGIN}/util.go", 398,
     "newAnnos := map[string]string{util.DeviceBindPhase: deviceBindPhase}"),
    ("pods", "set", "hami.io/vgpu-mig-allocations", f"{PLUGIN}/server.go", 411,
     "nvidia.MigAllocationsAnnotation: string(raw)"),
]
# PatchPodAnnotations adds a pod label only with hami.io/vgpu-node (the scheduler's), never from the plugin's writes.
HAMI_AGENT_NO_LABEL = ("pkg/util/util.go", 189, "if v, ok := annotations[AssignedNodeAnnotations]; ok && v != \"\" {")

CITED = ([(f, n, t) for _, f, n, t in HAMI_ALLOCATION_ANNOTATIONS + HAMI_USER_KNOBS] + HAMI_ALLOCATION_READERS
         + [(f, n, t) for _, f, n, t in HAMI_WEBHOOK_ENV] + HAMI_PLUGIN_MOUNTS
         + [(f, n, t) for *_, f, n, t in HAMI_AGENT_WRITES] + [HAMI_AGENT_NO_LABEL]
         + [(f, n, t) for _, src, f, n, t, _ in HAMI_ENV if src == "hami"])


@pytest.mark.parametrize("row", CITED, ids=lambda r: f"{r[0]}:{r[1]}")
def test_tenant_and_agent_tables_cite_hami(row):
    file, line, needle = row
    assert needle in _line(upstream.HAMI, file, line), f"{file}:{line} no longer holds {needle!r}: update the table"


@pytest.mark.parametrize("row", [r for r in HAMI_ENV if r[1] == "core"], ids=lambda r: r[0])
def test_env_table_cites_hami_core(row):
    name, _, file, line, needle, _ = row
    assert needle in _core_line(file, line), f"HAMi-core {file}:{line} no longer holds {needle!r}"


def test_every_hami_name_is_classified():
    """Every hami.io/ name HAMi's NVIDIA path uses is an allocation annotation, a user knob or a node/scheduler
    name: a new one fails here until it is placed (and the tenant policy follows)."""
    import re  # noqa: PLC0415

    root = upstream.src(upstream.HAMI)
    found = set()
    for base in ("pkg/util", "pkg/device/nvidia", "pkg/device-plugin", "pkg/scheduler", "cmd"):
        for path in (root / base).rglob("*.go"):
            if not path.name.endswith("_test.go"):
                found |= set(re.findall(r'"(hami\.io/[^"%]+)"', path.read_text()))
    found |= set(re.findall(r'"(hami\.io/[^"%]+)"', (root / "pkg/device/devices.go").read_text()))
    known = {k for k, *_ in HAMI_ALLOCATION_ANNOTATIONS + HAMI_USER_KNOBS} | HAMI_OTHER_NAMES
    assert found == known


def _policy(objs: list[dict], name: str) -> dict:
    return one(objs, "ValidatingAdmissionPolicy", name)["spec"]


def _var(spec: dict, name: str) -> str:
    return next(v["expression"] for v in spec["variables"] if v["name"] == name)


def _lists(expression: str) -> list[list[str]]:
    """The JSON string lists a rendered CEL expression carries, in order (an empty [] result left out)."""
    import re  # noqa: PLC0415

    lists = [json.loads(m) for m in re.findall(r'\[(?:"[^"]*"(?:,"[^"]*")*)?\]', expression)]
    return [x for x in lists if x] or lists


@pytest.mark.parametrize(("name", "release", "values"), HAMI_CASES)
def test_tenant_policy_is_the_table(tmp_path, name, release, values):
    """The tenant policy (templates/hami/tenant-policy.yaml) names exactly the tables' annotations, knobs, env and
    mount paths; its regexes catch every spelling of the plugin's mount paths and nothing beside them (Python's re
    agrees with RE2 on these); HAMi's own identities are the ones exempted (the lab proves the refusals)."""
    import re  # noqa: PLC0415

    objs = render_case(tmp_path, release, values)
    spec = _policy(objs, f"{release}-hami-tenant")
    assert spec["failurePolicy"] == "Fail"
    hami = values.get("hami") or {}
    (exempt,) = _lists(spec["matchConditions"][0]["expression"])
    assert sorted(exempt) == sorted(f"system:serviceaccount:{NAMESPACE}:{release}-{c}"
                                    for c in ("scheduler", "device-plugin"))
    assert _lists(_var(spec, "hamiAnnotations"))[-1] == [k for k, *_ in HAMI_USER_KNOBS]
    assert "k.startsWith('hami.io/')" in _var(spec, "hamiAnnotations")
    names = {"count": "nvidia.com/gpu", "memory": "nvidia.com/gpumem",
             "memoryPercentage": "nvidia.com/gpumem-percentage", "cores": "nvidia.com/gpucores",
             "priority": "nvidia.com/priority", **(hami.get("resourceNames") or {})}
    assert set(_lists(_var(spec, "hamiContainers"))[0]) == set(names.values())
    exact, prefixes = _lists(_var(spec, "badEnv"))[:2]
    conditional = {n for n, *_ in HAMI_WEBHOOK_ENV}
    assert set(exact) | conditional == {n for n, *_ in HAMI_ENV if not n.endswith("_")}
    assert set(prefixes) == {n for n, *_ in HAMI_ENV if n.endswith("_")}
    env_from = _lists(_var(spec, "badEnvFrom"))
    assert set(env_from[0]) == {n for n, *_ in HAMI_ENV if not n.endswith("_")} and env_from[1] == prefixes
    (regexes,) = _lists(_var(spec, "badMounts"))
    lib = (hami.get("devicePlugin") or {}).get("libPath", "/usr/local/vgpu")
    hit = [f"{lib}/libvgpu.so", lib, f"{lib}/", f"/{lib}//./libvgpu.so", "/tmp/vgpulock", "/tmp//vgpulock/lock",
           "/etc/ld.so.preload", "/etc//./ld.so.preload/", "/x/ld.so.preload", "/etc/x/../ld.so.preload", "/a/.."]
    miss = ["/etc", "/usr/local", f"{lib}x", "/tmp", "/tmp/vgpulockx", "/etc/ld.so.preloadx", "/data", "/a/..b",
            "/etc/ld.so.conf.d"]
    for path in hit:
        assert any(re.search(r, path) for r in regexes), path
    for path in miss:
        assert not any(re.search(r, path) for r in regexes), path
    policy = (hami.get("gpuCorePolicy") or "default")
    assert f"e.value == {json.dumps('' if policy == 'default' else policy)}" in _var(spec, "badEnv")


def test_no_tenant_policy_below_1_30_or_when_off(tmp_path):
    _, release, values = next(p.values for p in HAMI_CASES)
    for kube in ("1.25.0", "1.29.0"):
        assert not [o for o in render_case(tmp_path, release, values, kube) if o["metadata"]["name"].endswith(
            "-hami-tenant")]
    off = {**values, "hami": {**(values.get("hami") or {}), "tenantPolicy": False}}
    assert not [o for o in render_case(tmp_path, release, off) if o["metadata"]["name"].endswith("-hami-tenant")]


@pytest.mark.parametrize(("name", "release", "values"), HAMI_CASES)
def test_node_agent_policy_allows_exactly_hamis_writes(tmp_path, name, release, values):
    """The own-node policies let the device plugin's token change only the annotations HAMi's
    device plugin writes (set, or for the node lock only remove), and no label."""
    objs = render_case(tmp_path, release, values)
    for kind in ("nodes", "pods"):
        spec = _policy(objs, f"{release}-own-{kind}")
        sets = [k for c, how, k, *_ in HAMI_AGENT_WRITES if c == kind and how == "set"]
        removes = [k for c, how, k, *_ in HAMI_AGENT_WRITES if c == kind and how == "remove"]
        assert json.loads(_var(spec, "mayRemove")) == sets + removes
        assert _lists(_var(spec, "badAnnotations"))[0] == sets
        assert _var(spec, "badLabels") == "variables.changedLabels.filter(k, !(k in []))"
