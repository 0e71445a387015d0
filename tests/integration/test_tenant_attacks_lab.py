"""The hostile tenant and the compromised node agent against the vgpu chart's admission.

Everything runs on the lab's real kube-apiserver v1.36 with the cluster play's vgpu releases installed (their
ValidatingAdmissionPolicies and HAMi's webhook as the chart renders them), HAMi's real scheduler extender and webhook
(lab processes authenticating as the chart's scheduler ServiceAccount) and the device-plugin stand-in (writing with
tokens bound to the chart's device-plugin pods). Nothing here stands in for admission: each refusal is the API
server's, and names the policy.

The tenant, in a namespace HAMi serves, tries every way the pod spec offers to switch HAMi off: HAMi's allocation
annotations (on create, on update, through pods/status), spec.nodeName with HAMi resources (with and without forged
annotations: the pod HAMi's device plugin would hand a GPU), the environment variables HAMi's device plugin and
HAMi-core read, envFrom without a prefix, volumes over what the plugin mounts, and the hami.io/webhook=ignore label.
The node agents (HAMi's device plugin, gpu-manager), with tokens bound to their own pods, try their node's taints,
unschedulable, spec and labels (NodeRestriction's and kube-accel's), annotations their code never writes, and the
labels, images and status of pods on their node. The legitimate paths still work: a vGPU pod is scheduled and
annotated by HAMi and allocated by the stand-in through the policies, the agents' own writes are admitted, an
administrator's namespace exemption works, and what HAMi's webhook itself writes is accepted.

Without these policies every attack here is admitted.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest
from lab_fixture import LAB_DIR, converge_cluster, wait_for

pytestmark = [pytest.mark.lab, pytest.mark.cluster_only]

REPO = Path(__file__).resolve().parents[2]
NS = "tenant-attack-test"
EXEMPT_NS = "tenant-attack-exempt"
POOL_KEY = "kube-accel.io/pool"
HAMI_RELEASE = "kube-accel-vgpu-hami"
GM_RELEASE = "kube-accel-vgpu-gpu-manager"
RELEASE_NS = "kube-accel"
POLICY = "ValidatingAdmissionPolicy"
# HAMi v2.10.0's allocation protocol (tests/conformance/test_hami.py HAMI_ALLOCATION_ANNOTATIONS).
ALLOCATION = ["hami.io/vgpu-node", "hami.io/vgpu-time", "hami.io/bind-time", "hami.io/bind-phase",
              "hami.io/vgpu-devices-to-allocate", "hami.io/vgpu-devices-allocated", "hami.io/vgpu-mig-allocations"]


def kubectl(lab, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(lab.kubectl), "--kubeconfig", str(lab.kubeconfig), *args], input=stdin,
                          capture_output=True, text=True, check=False, timeout=60)


def admit(lab, body: dict) -> tuple[bool, str]:
    """The API server's decision on creating ``body`` (server-side dry run: every webhook and policy runs)."""
    proc = kubectl(lab, "create", "--dry-run=server", "-o", "json", "-f", "-", stdin=json.dumps(body))
    return proc.returncode == 0, proc.stdout if proc.returncode == 0 else proc.stderr


def refused(ok_why: tuple[bool, str], *words: str) -> None:
    ok, why = ok_why
    assert not ok, f"admitted: {why[:300]}"
    assert POLICY in why and all(w in why for w in words), why


def gpu_pod(name: str, ns: str = NS, limits: dict | None = None, **container) -> dict:
    """A pod asking for a vGPU share of the lab's HAMi pool, with extra container fields."""
    c = {"name": "c", "image": "registry.k8s.io/pause:3.10",
         "resources": {"limits": limits or {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}}, **container}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
            "spec": {"containers": [c], "nodeSelector": {POOL_KEY: "vgpu-hami"}, "terminationGracePeriodSeconds": 0}}


def with_meta(body: dict, annotations: dict | None = None, labels: dict | None = None, **spec) -> dict:
    body["metadata"].update(annotations=annotations or {}, labels=labels or {})
    body["spec"].update(spec)
    return body


def get_pod(lab, name: str, ns: str = NS) -> dict:
    return json.loads(kubectl(lab, "get", "pod", name, "-n", ns, "-o", "json").stdout)


def patch(lab, kind: str, name: str, body: dict, *extra: str) -> tuple[bool, str]:
    proc = kubectl(lab, "patch", kind, name, "--type=merge", "-p", json.dumps(body), *extra)
    return proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def hami(lab):
    """The cluster play's releases (their policies), HAMi's lab processes, a served and an exempted namespace."""
    converge_cluster(lab, {HAMI_RELEASE, GM_RELEASE}, namespace=RELEASE_NS)
    info = json.loads((LAB_DIR / "hami" / "info.json").read_text())
    assert info["scheduler_user"] == f"system:serviceaccount:{RELEASE_NS}:{HAMI_RELEASE}-scheduler", info
    lab.namespace(NS)
    lab.namespace(EXEMPT_NS)
    # How an administrator exempts a namespace (docs/modes/vgpu.md "HAMi and whole-GPU pools in one cluster").
    kubectl(lab, "label", "namespace", EXEMPT_NS, "hami.io/webhook=ignore", "--overwrite")
    # The API server loads policies asynchronously: an attack must be refused before the tests start.
    probe = with_meta(gpu_pod("probe"), annotations={"hami.io/vgpu-node": "lab-hami-0"})
    wait_for("the tenant policy to refuse a forged annotation", lambda: not admit(lab, probe)[0], timeout=30)
    yield info
    for ns in (NS, EXEMPT_NS):
        kubectl(lab, "delete", "namespace", ns, "--wait=false")


def test_policies_are_installed_and_type_check(lab, hami):
    """The cluster play installed the tenant policy and both agents' own-node policies, each bound with Deny; the
    API server type-checked every expression against the Pod and Node schemas without a warning."""
    names = [f"{HAMI_RELEASE}-hami-tenant", f"{HAMI_RELEASE}-own-nodes", f"{HAMI_RELEASE}-own-pods",
             f"{GM_RELEASE}-own-nodes", f"{GM_RELEASE}-own-pods"]
    for name in names:
        got = json.loads(kubectl(lab, "get", "validatingadmissionpolicy", name, "-o", "json").stdout)
        assert got["spec"]["failurePolicy"] == "Fail"
        assert "typeChecking" in got["status"] and not got["status"]["typeChecking"].get("expressionWarnings"), got
        binding = json.loads(kubectl(lab, "get", "validatingadmissionpolicybinding", name, "-o", "json").stdout)
        assert binding["spec"]["validationActions"] == ["Deny"]


# -- the tenant ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ALLOCATION)
def test_forged_allocation_annotation_on_create(lab, hami, key):
    refused(admit(lab, with_meta(gpu_pod("forged"), annotations={key: "x"})), "hami-tenant", key)
    # On a pod that asks for no GPU too: HAMi's scheduler would count the forged devices as used.
    refused(admit(lab, with_meta(gpu_pod("forged-cpu", limits={"cpu": "100m"}), annotations={key: "x"})), key)


def test_users_scheduling_knobs_stay_free(lab, hami):
    ok, got = admit(lab, with_meta(gpu_pod("knobs"), annotations={
        "hami.io/node-scheduler-policy": "spread", "hami.io/gpu-scheduler-policy": "binpack",
        "nvidia.com/use-gputype": "A100"}))
    assert ok, got
    assert json.loads(got)["spec"]["schedulerName"] == hami["scheduler_name"]


def test_node_name_with_hami_resources(lab, hami):
    """spec.nodeName skips HAMi's scheduler; with forged annotations it is exactly the pod HAMi's device plugin would
    serve (GetPendingPod picks it by bind-time, bind-phase and vgpu-node). HAMi's webhook refuses a plain one itself
    while it answers ("pod has node assigned"), but passes any pod naming another scheduler untouched
    (pkg/scheduler/webhook.go:72-77): the policy refuses both, webhook or not."""
    node = lab.nodes_by_pool["vgpu-hami"][0]
    ok, why = admit(lab, with_meta(gpu_pod("pinned"), nodeName=node))
    assert not ok and ("pod has node assigned" in why or "spec.nodeName" in why), why
    other = {"schedulerName": "tenant-scheduler", "nodeName": node}
    refused(admit(lab, with_meta(gpu_pod("pinned-other"), **other)), "spec.nodeName=" + node, "HAMi's scheduler")
    forged = {"hami.io/vgpu-node": node, "hami.io/bind-phase": "allocating", "hami.io/bind-time": "9999999999",
              "hami.io/vgpu-devices-to-allocate": "GPU-0,NVIDIA,80000,100:;"}
    refused(admit(lab, with_meta(gpu_pod("pinned-forged"), annotations=forged, **other)))
    # With HAMi's scheduler named explicitly, in a namespace the administrator exempted: still refused.
    refused(admit(lab, with_meta(gpu_pod("pinned-exempt", ns=EXEMPT_NS), nodeName=node,
                                 schedulerName=hami["scheduler_name"])), "spec.nodeName")
    ok, why = admit(lab, with_meta(gpu_pod("pinned-cpu", limits={"cpu": "100m"}), nodeName=node))
    assert ok, why


@pytest.mark.parametrize(("name", "value"), [
    ("CUDA_DISABLE_CONTROL", "true"), ("CUDA_DEVICE_MEMORY_LIMIT", "80g"), ("CUDA_DEVICE_MEMORY_LIMIT_0", "80g"),
    ("CUDA_DEVICE_SM_LIMIT", "100"), ("CUDA_DEVICE_SM_LIMIT_1", "100"), ("CUDA_DEVICE_MEMORY_SHARED_CACHE", "/tmp/x"),
    ("GPU_CORE_UTILIZATION_POLICY", "disable"), ("CUDA_TASK_PRIORITY", "0"), ("CUDA_REDIRECT", "/lib/x.so"),
    ("NVIDIA_VISIBLE_DEVICES", "all")])
def test_env_switching_hami_off(lab, hami, name, value):
    refused(admit(lab, gpu_pod("env", env=[{"name": name, "value": value}])), "environment variable " + name)
    # In an init container and through valueFrom alike.
    init = gpu_pod("env-init", limits={"cpu": "100m"})
    from_field = {"fieldRef": {"fieldPath": "spec.nodeName"}}
    init["spec"]["initContainers"] = [{"name": "i", "image": "registry.k8s.io/pause:3.10",
                                       "resources": {"limits": {"nvidia.com/gpu": "1"}},
                                       "env": [{"name": name, "valueFrom": from_field}]}]
    refused(admit(lab, init), name)


def test_env_from_needs_a_safe_prefix(lab, hami):
    for prefix in (None, "", "CUDA_", "CUDA_DEVICE_MEMORY_LIMIT_", "NVIDIA"):
        ref = {"configMapRef": {"name": "cfg"}, **({} if prefix is None else {"prefix": prefix})}
        refused(admit(lab, gpu_pod("env-from", envFrom=[ref])), "envFrom")
    ok, why = admit(lab, gpu_pod("env-from-ok", envFrom=[{"configMapRef": {"name": "cfg"}, "prefix": "APP_"}]))
    assert ok, why


@pytest.mark.parametrize("path", ["/etc/ld.so.preload", "/etc//./ld.so.preload/", "/etc/x/../ld.so.preload",
                                  "/usr/local/vgpu", "/usr/local/vgpu/libvgpu.so", "/tmp/vgpulock"])
def test_mounts_over_what_hami_mounts(lab, hami, path):
    body = gpu_pod("mount", volumeMounts=[{"name": "v", "mountPath": path}])
    body["spec"]["volumes"] = [{"name": "v", "emptyDir": {}}]
    refused(admit(lab, body), "mounts a volume at " + path)


def test_what_hami_itself_writes_and_ordinary_pods_pass(lab, hami):
    """The webhook's own CUDA_TASK_PRIORITY (the priority limit's value), ordinary env, LD_PRELOAD (the image can set
    it anyway: docs/modes/vgpu.md), ordinary mounts, and a CPU pod with any env are admitted."""
    ok, got = admit(lab, gpu_pod("prio", limits={"nvidia.com/gpu": "1", "nvidia.com/priority": "1"},
                                 env=[{"name": "CUDA_TASK_PRIORITY", "value": "1"}, {"name": "LD_PRELOAD",
                                                                                  "value": "libjemalloc.so.2"}]))
    assert ok, got
    env = json.loads(got)["spec"]["containers"][0]["env"]
    assert {"name": "CUDA_TASK_PRIORITY", "value": "1"} in env
    body = gpu_pod("mounts-ok", volumeMounts=[{"name": "v", "mountPath": "/data"}])
    body["spec"]["volumes"] = [{"name": "v", "emptyDir": {}}]
    assert admit(lab, body)[0]
    ok, why = admit(lab, gpu_pod("cpu-env", limits={"cpu": "100m"},
                                 env=[{"name": "CUDA_DISABLE_CONTROL", "value": "true"}]))
    assert ok, why


def test_ignore_label_and_the_administrators_exemption(lab, hami):
    """The pod label (upstream's opt-out) does not opt out where HAMi's webhook serves; a namespace the
    administrator labels hami.io/webhook=ignore is skipped by the webhook (its pods keep the default scheduler, e.g.
    for whole-GPU pools) and may carry the label."""
    refused(admit(lab, with_meta(gpu_pod("ignored"), labels={"hami.io/webhook": "ignore"})), "hami.io/webhook=ignore")
    ok, got = admit(lab, with_meta(gpu_pod("exempt", ns=EXEMPT_NS), labels={"hami.io/webhook": "ignore"}))
    assert ok, got
    assert json.loads(got)["spec"]["schedulerName"] == "default-scheduler"


def test_forged_annotations_on_update_and_status(lab, hami):
    """A pod HAMi scheduled: the tenant may not change, add or remove HAMi's annotations afterwards (patch, or
    through pods/status), while HAMi's own writes reached it through the same policies (scheduler, then the
    stand-in's allocation with the device-plugin pod's token) and other annotations stay the tenant's."""
    name = f"victim-{uuid.uuid4().hex[:6]}"
    create = kubectl(lab, "create", "-f", "-", stdin=json.dumps(gpu_pod(name)))
    assert create.returncode == 0, create.stderr
    try:
        pod = wait_for(f"{name} scheduled by HAMi and allocated", lambda: (p := get_pod(lab, name))["metadata"].get(
            "annotations", {}).get("hami.io/bind-phase") == "success" and p, timeout=60)
        ann = pod["metadata"]["annotations"]
        assert ann["hami.io/vgpu-node"] == pod["spec"]["nodeName"] and ann["hami.io/vgpu-devices-allocated"]
        # The stand-in erased what it handed out, as the plugin's Allocate does (its own-pods policy admitted it).
        assert set(ann["hami.io/vgpu-devices-to-allocate"]) <= {";"}
        for body in ({"metadata": {"annotations": {"hami.io/vgpu-devices-to-allocate": "GPU-x,NVIDIA,80000,100:;"}}},
                     {"metadata": {"annotations": {"hami.io/vgpu-devices-allocated": None}}},
                     {"metadata": {"annotations": {"hami.io/bind-phase": "allocating"}}}):
            refused(patch(lab, "pod", name, body, "-n", NS), "hami-tenant")
        # The other HAMi node: a patch naming the node HAMi chose changes nothing, and the API server admits a no-op.
        other = "lab-hami-0" if ann["hami.io/vgpu-node"] == "lab-hami-1" else "lab-hami-1"
        refused(patch(lab, "pod", name, {"metadata": {"annotations": {"hami.io/vgpu-node": other}}},
                      "-n", NS, "--subresource=status"), "hami.io/vgpu-node")
        ok, why = patch(lab, "pod", name, {"metadata": {"annotations": {"team": "a"}}}, "-n", NS)
        assert ok, why
    finally:
        kubectl(lab, "delete", "pod", name, "-n", NS, "--grace-period=0", "--force")


# -- the node agents -------------------------------------------------------------------------------------------


def agent_api(lab, release: str, component: str):
    """(CoreV1Api, node) for a token of the release's node agent bound to its pod on a node: the token the kubelet
    mounts into that pod."""
    from kubernetes import client, config  # noqa: PLC0415

    pods = json.loads(kubectl(lab, "get", "pods", "-n", RELEASE_NS, "-l",
                              f"app.kubernetes.io/instance={release},app.kubernetes.io/component={component}",
                              "-o", "json").stdout)["items"]
    pod = next(p for p in sorted(pods, key=lambda p: p["spec"].get("nodeName", "")) if p["spec"].get("nodeName"))
    token = kubectl(lab, "create", "token", pod["spec"]["serviceAccountName"], "-n", RELEASE_NS,
                    "--bound-object-kind", "Pod", "--bound-object-name", pod["metadata"]["name"],
                    "--duration", "10m").stdout.strip()
    cfg = client.Configuration()
    config.load_kube_config(str(lab.kubeconfig), client_configuration=cfg, persist_config=False)
    cfg.cert_file = cfg.key_file = None
    cfg.api_key = {"authorization": f"Bearer {token}"}
    return client.CoreV1Api(client.ApiClient(cfg)), pod["spec"]["nodeName"]


def attempt(call) -> tuple[int, str]:
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    try:
        call()
    except ApiException as exc:
        return exc.status, json.loads(exc.body).get("message", exc.body)
    return 200, ""


def denied(result: tuple[int, str], *words: str, what: str = "") -> None:
    code, message = result
    assert code == 403 and POLICY in message and all(w in message for w in words), (what, code, message)


@pytest.fixture
def work_pod(lab, hami):
    """A tenant pod bound to a node (kwok runs it), created directly by the admin, removed after."""
    made = []

    def make(node: str) -> str:
        name = f"work-{uuid.uuid4().hex[:6]}"
        body = gpu_pod(name, limits={"cpu": "10m"})
        body["spec"]["nodeName"] = node
        body["spec"].pop("nodeSelector")
        proc = kubectl(lab, "create", "-f", "-", stdin=json.dumps(body))
        assert proc.returncode == 0, proc.stderr
        made.append(name)
        return name

    yield make
    if made:
        kubectl(lab, "delete", "pod", "-n", NS, "--grace-period=0", "--force", *made)


NODE_ATTACKS = {
    "taint": {"spec": {"taints": [{"key": "evil", "effect": "NoSchedule"}]}},
    "unschedulable": {"spec": {"unschedulable": True}},
    "pool label": {"metadata": {"labels": {POOL_KEY: "stolen"}}},
    "NodeRestriction label": {"metadata": {"labels": {"node-restriction.kubernetes.io/evil": "1"}}},
    "annotation": {"metadata": {"annotations": {"kube-accel.io/cordoned-by": "agent"}}},
}


@pytest.fixture
def restore_nodes(lab):
    """Puts back what an attack that got through (a regression) changed on a node, so later tests see the lab as it
    was: taints, unschedulable, and the labels and annotations these attacks name."""
    saved = {}

    def save(node: str) -> str:
        saved[node] = json.loads(kubectl(lab, "get", "node", node, "-o", "json").stdout)
        return node

    yield save
    for node, before in saved.items():
        meta = before["metadata"]
        keys = {k for body in NODE_ATTACKS.values() for k in body.get("metadata", {}).get("labels", {})}
        notes = {k for body in NODE_ATTACKS.values() for k in body.get("metadata", {}).get("annotations", {})}
        body = {"metadata": {"labels": {k: meta.get("labels", {}).get(k) for k in keys},
                             "annotations": {k: meta.get("annotations", {}).get(k) for k in notes}},
                "spec": {"taints": before["spec"].get("taints"), "unschedulable": before["spec"].get("unschedulable")}}
        kubectl(lab, "patch", "node", node, "--type=merge", "-p", json.dumps(body))


def test_hami_device_plugin_writes_only_its_fields(lab, hami, work_pod, restore_nodes):
    api, node = agent_api(lab, HAMI_RELEASE, "device-plugin")
    restore_nodes(node)
    for what, body in NODE_ATTACKS.items():
        denied(attempt(lambda b=body: api.patch_node(node, b)), f"{HAMI_RELEASE}-own-nodes", what=what)
    denied(attempt(lambda: api.patch_node(node, {"metadata": {"annotations": {"hami.io/mutex.lock": "x"}}})),
           "hami.io/mutex.lock")
    # Its own writes (plugin/register.go:298-304): the pair scores, set and removed.
    for value in ("{}", None):
        assert attempt(lambda v=value: api.patch_node(node, {"metadata": {"annotations": {
            "hami.io/node-nvidia-score": v}}})) == (200, "")
    pod = work_pod(node)
    for what, body in {"label": {"metadata": {"labels": {"app": "evil"}}},
                       "image": [{"op": "replace", "path": "/spec/containers/0/image", "value": "evil.example/x:1"}],
                       "annotation": {"metadata": {"annotations": {"team": "evil"}}},
                       "finalizer": {"metadata": {"finalizers": ["evil.example/keep"]}}}.items():
        denied(attempt(lambda b=body: api.patch_namespaced_pod(pod, NS, b)), f"{HAMI_RELEASE}-own-pods", what=what)
    for value in ("[]", None):
        assert attempt(lambda v=value: api.patch_namespaced_pod(pod, NS, {"metadata": {"annotations": {
            "hami.io/vgpu-mig-allocations": v}}})) == (200, "")


def test_gpu_manager_writes_only_its_fields(lab, hami, work_pod, restore_nodes):
    from kubernetes import client  # noqa: PLC0415

    api, node = agent_api(lab, GM_RELEASE, "gpu-manager")
    restore_nodes(node)

    def update_node(labels: dict, spec: dict | None = None):
        body = api.read_node(node)
        body.metadata.labels.update(labels)
        if spec:
            body.spec.unschedulable = spec.get("unschedulable")
        api.replace_node(node, body)

    denied(attempt(lambda: update_node({POOL_KEY: "stolen"})), f"{GM_RELEASE}-own-nodes", POOL_KEY)
    denied(attempt(lambda: update_node({}, {"unschedulable": True})), "spec")
    # Its labeler's own label (pkg/services/watchdog/label.go:135).
    model = api.read_node(node).metadata.labels.get("gaia.tencent.com/gpu-model") or "Tesla-T4"
    assert attempt(lambda: update_node({"gaia.tencent.com/gpu-model": model + "-x"})) == (200, "")
    assert attempt(lambda: update_node({"gaia.tencent.com/gpu-model": model})) == (200, "")
    pod = work_pod(node)
    denied(attempt(lambda: api.patch_namespaced_pod(pod, NS, {"metadata": {"labels": {"app": "evil"}}})), "label")
    assert attempt(lambda: api.patch_namespaced_pod(pod, NS, {"metadata": {"annotations": {
        "tencent.com/predicate-gpu-idx-0": "0", "tencent.com/gpu-assigned": "false"}}})) == (200, "")

    def status(phase: str):
        body = api.read_namespaced_pod(pod, NS)
        body.status = client.V1PodStatus(phase=phase, reason="UnexpectedAdmissionError", message="lab")
        api.replace_namespaced_pod_status(pod, NS, body)

    denied(attempt(lambda: status("Running")), "phase Failed")
    assert attempt(lambda: status("Failed")) == (200, "")
