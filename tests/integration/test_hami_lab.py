"""HAMi's real scheduler extender and webhook in the lab.

`lab.py up` runs hami-scheduler (HAMi v2.10.0, the vgpu chart's command and device config) and a second
kube-scheduler with the chart's KubeSchedulerConfiguration, on 127.0.0.1 (scripts/kalab/upstream.py). The only lab
code involved is the stand-in for HAMi's device plugin (node registration, allocation completion). Here:
the registration decodes with HAMi's own code; HAMi's metrics report the registered GPUs; pods asking for GPU
memory and cores are filtered and bound by HAMi, which writes its device assignment on them; binpack and spread
place one pod set differently; a pod whose memory fits no GPU stays Pending with HAMi's reason; HAMi clamps cores
over 100 to a whole GPU; the webhook sets the scheduler on GPU pods only; with the chart's webhook at failurePolicy
Fail and nothing answering at its address, only pods asking for a device are refused.
"""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import urllib.request
from pathlib import Path

import pytest
import yaml
from lab_fixture import LAB_DIR, converge_cluster, wait_for

pytestmark = [pytest.mark.lab, pytest.mark.cluster_only]

REPO = Path(__file__).resolve().parents[2]
import upstream  # noqa: E402

INFO = LAB_DIR / "hami" / "info.json"
NS = "hami-lab-test"
POOL_KEY = "kube-accel.io/pool"


wait = wait_for


@pytest.fixture(scope="module")
def hami(lab):
    """The lab's HAMi processes, with the cluster play's vgpu-hami release installed and both nodes registered."""
    if not INFO.exists():
        pytest.fail(f"{INFO} missing: `scripts/lab.py up` starts HAMi for the lab inventory's vgpu-hami pool")
    info = json.loads(INFO.read_text())
    converge_cluster(lab, {info["release"]}, namespace=info["namespace"])
    nodes = lab.nodes_by_pool["vgpu-hami"]
    assert len(nodes) >= 2, "binpack vs spread needs a vgpu-hami pool of two nodes"

    def registered():
        text = urllib.request.urlopen(f"http://127.0.0.1:{info['metrics_port']}/metrics", timeout=5).read().decode()
        return text if all(f'node="{n}"' in text for n in nodes) else None

    info["metrics"] = wait("HAMi to register the vgpu-hami nodes (its metrics)", registered, timeout=120)
    info["nodes"] = nodes
    lab.namespace(NS)
    yield info
    lab.kubectl_run("delete", "namespace", NS, "--wait=false", check=False)



def device_config(lab, info) -> str:
    cm = json.loads(lab.kubectl_run("get", "configmap", f"{info['release']}-device-config", "-n", info["namespace"],
                                    "-o", "json").stdout)
    return cm["data"]["device-config.yaml"]


def snapshot_gpus(host: str) -> list[dict]:
    from ansible_collections.kube_accel.gpu.plugins.module_utils.host import gpu_facts as accel_gpu_facts  # noqa: PLC0415
    from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import pools as accel_pools  # noqa: PLC0415
    from kalab.site import gpu_hosts, inventory

    settings = accel_pools.pool_settings(gpu_hosts(inventory())[host])
    snap = REPO / "tests" / "data" / "nvml" / f"{settings['accel_lab_gpu']}.json"
    return accel_gpu_facts.gather(accel_gpu_facts.RecordedSource.from_file(str(snap)))["gpus"]


def test_registration_decodes_with_hamis_own_code(lab, hami, tmp_path):
    """The stand-in's hami.io/node-nvidia-register goes through HAMi's GetNodeDevices (ka-conform-hami-config
    decode): every recorded GPU, with the deployed config's split count and the recorded memory."""
    cfg = tmp_path / "device-config.yaml"
    cfg.write_text(device_config(lab, hami))
    split = yaml.safe_load(cfg.read_text())["nvidia"]["deviceSplitCount"]
    seen = set()
    for name in hami["nodes"]:
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(lab.node(name)))
        proc = upstream.run("ka-conform-hami-config", "decode", str(path), str(cfg))
        assert proc.returncode == 0, proc.stderr
        devices = json.loads(proc.stdout)
        recorded = snapshot_gpus(name)
        decoded = [(d["type"], d["devmem"], d["count"], d["devcore"], d.get("index", 0), d["health"]) for d in devices]
        assert decoded == [(g["name"], g["memory_total_mib"], split, 100, g["index"], True) for g in recorded]
        seen |= {d["id"] for d in devices}
        # HAMi's scheduler registered the same devices (its own metrics, one series per device and node).
        for d in devices:
            assert f'device_uuid="{d["id"]}",node="{name}"' in hami["metrics"]
    assert len(seen) == sum(len(snapshot_gpus(n)) for n in hami["nodes"]), "GPU UUIDs must be unique across nodes"


def test_decoder_refuses_a_broken_registration(lab, hami, tmp_path):
    """The decode check can fail: a registration missing a field is refused by HAMi's decoder."""
    cfg = tmp_path / "device-config.yaml"
    cfg.write_text(device_config(lab, hami))
    body = lab.node(hami["nodes"][0])
    body["metadata"]["annotations"]["hami.io/node-nvidia-register"] = "GPU-1,10,81559"
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(body))
    proc = upstream.run("ka-conform-hami-config", "decode", str(path), str(cfg))
    assert proc.returncode != 0 and "GetNodeDevices" in proc.stderr


def pod(name: str, limits: dict[str, str] | None, annotations: dict | None = None, labels: dict | None = None,
        pool: str | None = "vgpu-hami") -> dict:
    spec = {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"limits": limits} if limits else {}}],
            "terminationGracePeriodSeconds": 0}
    if pool:
        spec["nodeSelector"] = {POOL_KEY: pool}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "annotations": annotations or {}, "labels": labels or {}},
            "spec": spec}


def create(lab, *bodies: dict, dry_run: bool = False) -> list[dict]:
    args = ["create", "-o", "json", "-f", "-"] + (["--dry-run=server"] if dry_run else [])
    proc = subprocess.run([str(lab.kubectl), "--kubeconfig", str(lab.kubeconfig), *args],
                          input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(bodies)}),
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    # One JSON document per object, back to back.
    out, text, decoder = [], proc.stdout.strip(), json.JSONDecoder()
    while text:
        obj, end = decoder.raw_decode(text)
        out.append(obj)
        text = text[end:].lstrip()
    return out


def get_pod(lab, name: str) -> dict:
    return json.loads(lab.kubectl_run("get", "pod", name, "-n", NS, "-o", "json").stdout)


def bound(lab, name: str, timeout: float = 60) -> dict:
    return wait(f"pod {name} bound", lambda: (p := get_pod(lab, name))["spec"].get("nodeName") and p, timeout)


def delete_pods(lab, *names: str) -> None:
    if names:
        lab.kubectl_run("delete", "pod", "-n", NS, "--grace-period=0", "--force", "--wait=true", *names,
                        check=False)


def test_webhook_sets_the_scheduler_on_gpu_pods_only(lab, hami):
    """HAMi's webhook (through the lab's copy of the chart's MutatingWebhookConfiguration) gives GPU pods HAMi's
    scheduler; CPU pods keep the default one. (A pod cannot opt out by label, and an administrator's
    namespace exemption works: tests/integration/test_tenant_attacks_lab.py.)"""
    gpu, cpu = create(
        lab,
        pod("wh-gpu", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}),
        pod("wh-cpu", {"cpu": "100m"}),
        dry_run=True)
    assert gpu["spec"]["schedulerName"] == hami["scheduler_name"]
    assert cpu["spec"]["schedulerName"] == "default-scheduler"


def test_hami_filters_binds_and_annotates(lab, hami):
    """Pods asking for GPU memory and cores are bound by HAMi, which writes its device assignment on them."""
    names = ["fit-0", "fit-1"]
    create(lab, *(pod(n, {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20000", "nvidia.com/gpucores": "30"})
                  for n in names))
    try:
        for n in names:
            p = bound(lab, n)
            ann = p["metadata"]["annotations"]
            assert p["spec"]["schedulerName"] == hami["scheduler_name"]
            assert ann["hami.io/vgpu-node"] == p["spec"]["nodeName"] in hami["nodes"]
            uuids = {d["id"] for d in json.loads(lab.node(p["spec"]["nodeName"])["metadata"]["annotations"][
                "hami.io/node-nvidia-register"])}
            uuid, vendor, mem, cores = first_device(ann)
            assert (uuid in uuids, vendor, mem, cores) == (True, "NVIDIA", "20000", "30")
            assert ann["hami.io/bind-phase"] in ("allocating", "success")
            # The device-plugin stand-in completes the allocation, as the plugin's Allocate would.
            wait(f"{n} allocated", lambda n=n: get_pod(lab, n)["metadata"]["annotations"].get(
                "hami.io/bind-phase") == "success", timeout=15)
    finally:
        delete_pods(lab, *names)


def first_device(annotations: dict) -> list[str]:
    """The first device of HAMi's pod encoding: containers split by ';', devices by ':', fields
    UUID,vendor,memory,cores (EncodeContainerDevices, pkg/device/devices.go)."""
    return annotations["hami.io/vgpu-devices-allocated"].split(";")[0].split(":")[0].split(",")[:4]


def placements(lab, policy: str, count: int) -> dict[str, str]:
    names = [f"{policy}-{i}" for i in range(count)]
    out = {}
    try:
        for n in names:  # one at a time: each placement scores against the ones before it
            create(lab, pod(n, {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "10000"},
                            annotations={"hami.io/node-scheduler-policy": policy}))
            out[n] = bound(lab, n)["spec"]["nodeName"]
    finally:
        delete_pods(lab, *names)
    return out


def test_binpack_and_spread_place_the_same_pods_differently(lab, hami):
    """HAMi's node policy (the chart's --node-scheduler-policy, per pod through hami.io/node-scheduler-policy):
    binpack fills one node, spread uses both."""
    binpack = placements(lab, "binpack", 4)
    spread = placements(lab, "spread", 4)
    assert len(set(binpack.values())) == 1, binpack
    assert set(spread.values()) == set(hami["nodes"]), spread


def test_memory_that_fits_no_gpu_stays_pending_with_hamis_reason(lab, hami):
    too_big = max(g["memory_total_mib"] for n in hami["nodes"] for g in snapshot_gpus(n)) + 1
    create(lab, pod("too-big", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(too_big)}))
    try:
        def reason():
            conds = get_pod(lab, "too-big")["status"].get("conditions", [])
            return next((c.get("message", "") for c in conds if c["type"] == "PodScheduled"
                         and c["status"] == "False" and "CardInsufficientMemory" in c.get("message", "")), None)

        message = wait("HAMi's CardInsufficientMemory on the pod", reason)
        assert get_pod(lab, "too-big")["spec"].get("nodeName") is None, message
    finally:
        delete_pods(lab, "too-big")


def test_cores_over_100_are_clamped_to_a_whole_gpu(lab, hami):
    """HAMi v2.10.0 does not refuse nvidia.com/gpucores over 100: its Fit clamps them to 100, an exclusive GPU
    (pkg/device/nvidia/device.go:772-775, `//return false` left commented out). kube-accel refuses nothing here
    either (no admission policy of its own): this test keeps that behaviour visible."""
    create(lab, pod("cores-150", {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "150"}))
    try:
        ann = bound(lab, "cores-150")["metadata"]["annotations"]
        assert first_device(ann)[3] == "100"
    finally:
        delete_pods(lab, "cores-150")


LOCKOUT_WEBHOOK = "kube-accel-lab-webhook-lockout-test"


def admit(lab, body: dict) -> tuple[bool, dict | str]:
    """The API server's admission decision on creating ``body`` (server-side dry run: every admission webhook and
    policy runs, nothing is stored): (True, the admitted object) or (False, the refusal)."""
    proc = subprocess.run([str(lab.kubectl), "--kubeconfig", str(lab.kubeconfig), "create", "--dry-run=server",
                           "-o", "json", "-f", "-"], input=json.dumps(body), capture_output=True, text=True,
                          check=False)
    return (True, json.loads(proc.stdout)) if proc.returncode == 0 else (False, proc.stderr)


def as_pod(obj: dict, namespace: str) -> dict:
    """The pod a Deployment's or Job's controller would create from its template."""
    template = obj["spec"]["template"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{obj['metadata']['name']}-x", "namespace": namespace,
                         "labels": template["metadata"].get("labels", {})},
            "spec": template["spec"]}


def test_webhook_lockout_fail_policy_refuses_only_gpu_pods(lab, hami, tmp_path):
    """The chart's webhook at failurePolicy Fail while nothing answers at its address (the scheduler
    down) must not lock the cluster. A lab copy of the chart's MutatingWebhookConfiguration, rendered from the lab's
    vgpu-hami release values with failurePolicy Fail, keeps the chart's rules, selectors and matchConditions and
    only points at a closed 127.0.0.1 port; the lab's real API server decides (server-side dry run): a new HAMi
    scheduler pod, device-plugin pod and the certgen Job pods are admitted in the release namespace (the only one
    where they run: elsewhere the tenant policy refuses the label that lets them skip the webhook); a pod asking for
    no GPU is admitted; a pod asking for a GPU (in a container or an init container) is refused. The copy is removed
    at the end and the lab's own webhook serves GPU pods again."""
    from kalab.site import versions
    from kalab.upstream import render

    values = yaml.safe_load((LAB_DIR / "hami" / "values.yaml").read_text())  # what lab.py up rendered
    values.setdefault("hami", {}).setdefault("webhook", {})["failurePolicy"] = "Fail"
    objs = render({"name": hami["release"], "chart": "vgpu", "values": values}, hami["namespace"],
                  versions()["K8S_VERSION"].lstrip("v"), tmp_path)
    (hook,) = [o for o in objs if o["kind"] == "MutatingWebhookConfiguration"]
    assert {w["failurePolicy"] for w in hook["webhooks"]} == {"Fail"}
    ca = base64.b64encode((LAB_DIR / "hami" / "tls.crt").read_bytes()).decode()
    closed = socket.socket()  # bound, never listening: the API server's connection is refused
    closed.bind(("127.0.0.1", 0))
    url = f"https://127.0.0.1:{closed.getsockname()[1]}"
    copy = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": LOCKOUT_WEBHOOK, "labels": {"kube-accel.lab": "true"}},
            "webhooks": [{**w, "clientConfig": {"url": url + w["clientConfig"]["service"]["path"], "caBundle": ca}}
                         for w in hook["webhooks"]]}
    own = [o for o in objs if o["kind"] in ("Deployment", "DaemonSet", "Job")
           and not o["metadata"]["name"].endswith("-test")]
    assert {o["metadata"]["name"] for o in own} >= {f"{hami['release']}-scheduler"}
    ns_labels = json.loads(lab.kubectl_run("get", "namespace", NS, "-o", "json").stdout)["metadata"]["labels"]
    assert "hami.io/webhook" not in ns_labels, "the test namespace must be an ordinary one"
    # The certgen hook Jobs' ServiceAccount exists only while the hooks run: made for the dry runs, removed after.
    release_ns = hami["namespace"]
    made = []
    for sa in {pod_spec["spec"]["serviceAccountName"] for pod_spec in (as_pod(o, release_ns) for o in own)}:
        if lab.kubectl_run("create", "serviceaccount", sa, "-n", release_ns, check=False).returncode == 0:
            made.append(sa)
    gpu = pod("lockout-gpu", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"})
    init_gpu = pod("lockout-init-gpu", {"cpu": "100m"})
    init_gpu["spec"]["initContainers"] = [{"name": "i", "image": "registry.k8s.io/pause:3.10",
                                           "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
    try:
        lab.kubectl_run("delete", "mutatingwebhookconfiguration", LOCKOUT_WEBHOOK, "--ignore-not-found")
        create(lab, copy)

        def refused():  # the API server loads the new configuration asynchronously
            ok, why = admit(lab, gpu)
            return None if ok else why

        why = wait("the copy at failurePolicy Fail to refuse a GPU pod", refused, timeout=30)
        assert 'failed calling webhook "vgpu.hami.io"' in why and url in why, why
        ok, why = admit(lab, init_gpu)
        assert not ok and url in why, "a GPU asked for by an init container goes to the webhook too"
        for body in (pod("lockout-cpu", {"cpu": "100m"}), pod("lockout-none", None, pool=None)):
            ok, got = admit(lab, body)
            assert ok, f"{body['metadata']['name']} asks for no GPU but was refused: {got}"
            assert got["spec"]["schedulerName"] == "default-scheduler"
        for obj in own:
            ok, got = admit(lab, as_pod(obj, release_ns))
            assert ok, f"a new {obj['metadata']['name']} pod in {release_ns} was refused: {got}"
    finally:
        for sa in made:
            lab.kubectl_run("delete", "serviceaccount", sa, "-n", release_ns, check=False)
        closed.close()
        lab.kubectl_run("delete", "mutatingwebhookconfiguration", LOCKOUT_WEBHOOK, "--ignore-not-found",
                        check=False)
    # The lab is as before: its own webhook copy (HAMi up) gives GPU pods HAMi's scheduler again.
    wait("the lab's webhook to serve GPU pods again",
         lambda: (r := admit(lab, gpu))[0] and r[1]["spec"]["schedulerName"] == hami["scheduler_name"], timeout=30)
