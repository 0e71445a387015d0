"""DRA pools in the lab: the real kube-scheduler v1.36 allocates kube-accel's claims on the dra pool's
GPUs, refuses what fits nowhere, and a hostile tenant cannot get a dra pool's GPU around the pool's class.

Evidence: the lab's real kube-apiserver (admission: charts/dra-pools' Validating- and MutatingAdmissionPolicy as the
cluster play installs them), its real kube-scheduler (DynamicResources plugin, DRAExtendedResource on by default in
1.36) and claim controller (kube-controller-manager), the cluster play's releases kube-accel-dra-driver (NVIDIA's
chart: DeviceClasses gpu.nvidia.com and mig.nvidia.com) and kube-accel-dra. The dra node's ResourceSlices come from
the lab's stand-in dra-kubelet-plugin-standin (kalab.standins): the DRA driver's own enumeration and publishing code
over the host's recorded NVML snapshot, published while the driver's kubelet-plugin pod runs on the node. Nothing
here prepares a claim (no kubelet): what a container would see on the GPU is for a GPU run (docs/modes/dra.md).

The attacks of test_driver_class_maps_nvidia_gpu_to_dra_without_the_policies are first shown to succeed on this
cluster with the chart's two policies unbound (what `claimGuard.enabled: false` and
`driverClasses.removeExtendedResourceName: false` leave) and the driver chart's class as it writes it, then refused
with the bindings back; test_claim_from_a_template_admitted_before_the_guard_is_refused likewise makes its template
while the guard is unbound.
"""

from __future__ import annotations

import json
import re
import time

import pytest
import yaml
from kalab import dra
from kalab.standins import DRA_STANDIN
from lab_fixture import (
    LAB_DIR,
    LAB_INVENTORY,
    REPO,
    changed_lab_inventory,
    converge_cluster,
    remove_changed_inventory,
    site_play,
    wait_for,
)

pytestmark = pytest.mark.lab

NS = "kube-accel"  # the release namespace: where the lab's pool templates are (accel_dra_claim_namespaces unset)
TENANT = "dra-tenant-test"
DRIVER = "gpu.nvidia.com"
POOL, NODE, OTHER_POOL_NODE = "dra", "lab-dra-0", "lab-pgpu-0"
CLASS = f"kube-accel-{POOL}"
POLICY = "kube-accel-dra-claim-classes"
MUTATION = "kube-accel-dra-driver-classes"
SNAPSHOT = REPO / "tests" / "data" / "nvml" / "h100-80gb.json"  # inventories/lab/group_vars/pool_dra.yml


def kubectl(lab, *args: str, stdin: str | None = None):
    return lab.kubectl_run(*args, check=False, stdin=stdin, timeout=60)


def get(lab, *args: str) -> dict:
    proc = kubectl(lab, "get", *args, "-o", "json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def create(lab, body: dict):
    return kubectl(lab, "create", "-f", "-", stdin=json.dumps(body))


def pod(name: str, ns: str, node_selector: dict, claims: list[dict] | None = None, limits: dict | None = None,
        names_claims: bool = True) -> dict:
    c = {"name": "c", "image": "registry.k8s.io/pause:3.10"}
    if limits:
        c["resources"] = {"limits": limits}
    if claims and names_claims:
        c.setdefault("resources", {})["claims"] = [{"name": x["name"]} for x in claims]
    spec = {"containers": [c], "nodeSelector": node_selector, "terminationGracePeriodSeconds": 0,
            "tolerations": [{"operator": "Exists"}]}  # whatever taint a pool carries: the claims decide
    if claims:
        spec["resourceClaims"] = claims
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}, "spec": spec}


def claim(name: str, ns: str, requests: list[dict]) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name, "namespace": ns},
            "spec": {"devices": {"requests": requests}}}


def exactly(cls: str, count: int = 1, name: str = "gpu") -> dict:
    return {"name": name, "exactly": {"deviceClassName": cls, "allocationMode": "ExactCount", "count": count}}


def pod_claims(lab, ns: str, pod_name: str) -> list[dict]:
    """The ResourceClaims the pod's status names (from a template, or the scheduler's extended-resource claim)."""
    p = get(lab, "pod", pod_name, "-n", ns)
    st = p.get("status") or {}
    names = [s["resourceClaimName"] for s in st.get("resourceClaimStatuses") or [] if s.get("resourceClaimName")]
    ext = (st.get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
    names += [ext] if ext else []
    return [get(lab, "resourceclaim", n, "-n", ns) for n in names]


def scheduling_failures(lab, ns: str, pod_name: str) -> list[str]:
    events = get(lab, "events", "-n", ns, "--field-selector", f"involvedObject.name={pod_name}")["items"]
    return [e["message"] for e in events if e["reason"] == "FailedScheduling"]


def stand_in_devices(lab, node: str) -> dict[str, dict]:
    slices = get(lab, "resourceslices", "--field-selector", f"spec.nodeName={node},spec.driver={DRIVER}")["items"]
    return {(s["spec"]["pool"]["name"], d["name"]): d for s in slices for d in s["spec"]["devices"]}


@pytest.fixture(scope="module")
def dra_lab(lab):
    """The cluster play's dra releases, the stand-in's slices of the dra node, the guard loaded, a tenant namespace
    that HAMi's webhook does not serve (as in a site without a HAMi pool: HAMi's webhook would otherwise hand every
    nvidia.com/gpu pod to HAMi's scheduler)."""
    started = time.time()
    converge_cluster(lab, {"kube-accel-dra-driver", "kube-accel-dra"}, namespace=NS)
    log = LAB_DIR / "procs" / f"{DRA_STANDIN}.log"
    assert log.exists(), f"{DRA_STANDIN} is not running: `scripts/lab.py up` starts it for an inventory with a dra pool"
    devices = wait_for(f"{DRA_STANDIN}'s ResourceSlices of {NODE}", lambda: stand_in_devices(lab, NODE), timeout=60)
    lab.namespace(TENANT)
    kubectl(lab, "label", "namespace", TENANT, "hami.io/webhook=ignore", "--overwrite")
    probe = claim("probe", TENANT, [exactly(DRIVER)])
    wait_for(f"policy {POLICY} to refuse a claim of {DRIVER}",
             lambda: kubectl(lab, "create", "--dry-run=server", "-f", "-", stdin=json.dumps(probe)).returncode != 0,
             timeout=30)
    yield devices
    kubectl(lab, "delete", "namespace", TENANT, "--wait=false")
    kubectl(lab, "delete", "pods,resourceclaims", "-n", NS, "-l", "kube-accel.test/dra=true", "--wait=false")
    print(f"test_dra_lab fixture+tests: {time.time() - started:.1f} s")


def test_stand_in_publishes_the_recorded_gpus_with_the_pools_uuids(lab, dra_lab):
    """The stand-in published what the driver's code enumerates for the recorded H100 snapshot (the offline
    enumeration of the same code agrees), with the UUIDs the pool's DeviceClass selects (the host's NVML facts, read
    from the same snapshot by the preflight)."""
    expected = {d["name"]: d for d in dra.devices(NODE, SNAPSHOT)}
    assert {name for _pool, name in dra_lab} == set(expected) == {"gpu-0", "gpu-1"}
    for (pool, name), dev in dra_lab.items():
        assert pool == NODE and dev["attributes"] == expected[name]["attributes"]
    selector = get(lab, "deviceclass", CLASS)["spec"]["selectors"][0]["cel"]["expression"]
    assert all(dev["attributes"]["uuid"]["string"] in selector for dev in dra_lab.values()), selector


def test_claim_from_the_pool_template_is_allocated_by_the_scheduler(lab, dra_lab):
    """(a) A pod with a claim from the pool's ResourceClaimTemplate: the claim controller makes the claim, the
    default kube-scheduler allocates one of the stand-in's devices of the dra node, with the class's opaque config
    (the pool's MPS settings, source FromClass) in the allocation."""
    body = pod("dra-template", NS, {}, [{"name": "gpu", "resourceClaimTemplateName": CLASS}])
    body["metadata"]["labels"] = {"kube-accel.test/dra": "true"}
    kubectl(lab, "delete", "pod", "dra-template", "-n", NS, "--wait=true")
    assert create(lab, body).returncode == 0
    p = wait_for("the pod to be scheduled", lambda: get(lab, "pod", "dra-template", "-n", NS)["spec"].get("nodeName"),
                 timeout=60)
    assert p == NODE
    (c,) = pod_claims(lab, NS, "dra-template")
    alloc = c["status"]["allocation"]
    (result,) = alloc["devices"]["results"]
    assert result["driver"] == DRIVER and (result["pool"], result["device"]) in dra_lab, result
    class_config = get(lab, "deviceclass", CLASS)["spec"]["config"][0]["opaque"]
    assert class_config["parameters"]["sharing"]["strategy"] == "MPS"
    (config,) = alloc["devices"]["config"]
    assert config["source"] == "FromClass" and config["opaque"] == class_config, config
    events = get(lab, "events", "-n", NS, "--field-selector", "involvedObject.name=dra-template,reason=Scheduled")
    assert any(e.get("reportingComponent") == "default-scheduler" or e["source"].get("component") == "default-scheduler"
               for e in events["items"]), events
    kubectl(lab, "delete", "pod", "dra-template", "-n", NS, "--wait=false")


def test_claim_that_fits_nowhere_stays_pending_with_the_schedulers_reason(lab, dra_lab):
    """(b) Three GPUs of the pool in one claim (the pool has two): admitted (the pool's class), never allocated, the
    pod Pending with the scheduler's reason."""
    assert create(lab, claim("three", TENANT, [exactly(CLASS, 3)])).returncode == 0
    assert create(lab, pod("three", TENANT, {}, [{"name": "gpu", "resourceClaimName": "three"}])).returncode == 0
    msgs = wait_for("the scheduler's reason", lambda: scheduling_failures(lab, TENANT, "three"), timeout=60)
    assert any("cannot allocate all claims" in m for m in msgs), msgs
    assert not get(lab, "resourceclaim", "three", "-n", TENANT).get("status", {}).get("allocation")
    assert get(lab, "pod", "three", "-n", TENANT)["status"]["phase"] == "Pending"


def test_pool_class_on_another_pools_node_stays_pending(lab, dra_lab):
    """(c2) The pool's class with a nodeSelector on another pool's node: Pending, both where that node publishes no
    device of the driver (a device-plugin pool) and where it does publish the driver's GPUs of the same model (a
    second fake node whose slices the driver's code publishes: not the pool's UUIDs, so the class selects none)."""
    other = "lab-dra-test-other"
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": other, "annotations": {
        "kwok.x-k8s.io/node": "fake"}, "labels": {"type": "kwok", "kubernetes.io/hostname": other}},
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"},
                   "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110"}}}
    kubectl(lab, "delete", "node", other, "--wait=true")
    assert create(lab, node).returncode == 0
    try:
        published = dra.publish(lab.kubeconfig, other, SNAPSHOT, derive_uuids=True)
        assert sum(len(s["spec"]["devices"]) for s in published) == 2
        for name, target in (("elsewhere-dp", OTHER_POOL_NODE), ("elsewhere-dra", other)):
            claims = [{"name": "gpu", "resourceClaimTemplateName": CLASS}]
            body = pod(name, NS, {"kubernetes.io/hostname": target}, claims)
            body["metadata"]["labels"] = {"kube-accel.test/dra": "true"}
            kubectl(lab, "delete", "pod", name, "-n", NS, "--wait=true")
            assert create(lab, body).returncode == 0
            msgs = wait_for(f"the scheduler's reason for {name}", lambda n=name: scheduling_failures(lab, NS, n),
                            timeout=60)
            assert any("cannot allocate all claims" in m for m in msgs), msgs
            assert get(lab, "pod", name, "-n", NS)["spec"].get("nodeName") is None
    finally:
        kubectl(lab, "delete", "pods", "elsewhere-dp", "elsewhere-dra", "-n", NS, "--wait=false")
        kubectl(lab, "delete", "node", other, "--wait=false")  # its slices are the Node's (owner): collected


def binding_removed(lab, kind: str = "validatingadmissionpolicybinding", name: str = POLICY) -> dict:
    """A policy's binding, taken away (what the chart's switch off leaves) and returned to put back exactly."""
    saved = get(lab, kind, name)
    for key in ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields"):
        saved["metadata"].pop(key, None)
    saved.pop("status", None)
    assert kubectl(lab, "delete", kind, name).returncode == 0
    return saved


def restore_bindings(lab, *saved: dict) -> None:
    for binding in saved:
        assert create(lab, binding).returncode == 0
    probe = claim("probe", TENANT, [exactly(DRIVER)])
    wait_for(f"policy {POLICY} to refuse again",
             lambda: kubectl(lab, "create", "--dry-run=server", "-f", "-", stdin=json.dumps(probe)).returncode != 0,
             timeout=30)


def extended_resource_name(lab) -> str | None:
    return get(lab, "deviceclass", DRIVER)["spec"].get("extendedResourceName")


def hami_pod(name: str, ns: str) -> dict:
    """A vGPU share of the lab's HAMi pool (its resources: HAMi's nodes advertise only the count)."""
    return pod(name, ns, {"kube-accel.io/pool": "vgpu-hami"},
               limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"})


def test_driver_class_maps_nvidia_gpu_to_dra_without_the_policies(lab, dra_lab):
    """(c1) NVIDIA's chart gives gpu.nvidia.com extendedResourceName nvidia.com/gpu. With that mapping (the policies'
    bindings removed, the class as the driver chart writes it): a tenant pod asking for nvidia.com/gpu: 1 with a
    nodeSelector on the dra node is bound there with a claim the scheduler made of gpu.nvidia.com, a whole GPU of the
    pool without the pool's config; and a HAMi pod fits no node ("cannot fit resource"). With the bindings back,
    the driver chart's write of the class is stored without the mapping (MutatingAdmissionPolicy), the same
    nvidia.com/gpu pod stays Pending with no claim, the HAMi pod is scheduled, and a pod asking for the class's
    implicit extended resource gets its claim refused by the API server (ValidatingAdmissionPolicy): Pending with the
    scheduler's error."""
    hami_ns = "dra-hami-test"
    lab.namespace(hami_ns)
    upstream = {"spec": {"extendedResourceName": "nvidia.com/gpu"}}  # v0.4.1 deviceclass-gpu.yaml
    saved = [binding_removed(lab), binding_removed(lab, "mutatingadmissionpolicybinding", MUTATION)]
    try:
        time.sleep(2)  # the API server drops bindings asynchronously
        assert kubectl(lab, "patch", "deviceclass", DRIVER, "--type=merge", "-p", json.dumps(upstream)).returncode == 0
        assert extended_resource_name(lab) == "nvidia.com/gpu"
        assert create(lab, pod("nvgpu-open", TENANT, {"kubernetes.io/hostname": NODE},
                               limits={"nvidia.com/gpu": "1"})).returncode == 0
        node = wait_for("the open attack to be scheduled",
                        lambda: get(lab, "pod", "nvgpu-open", "-n", TENANT)["spec"].get("nodeName"), timeout=60)
        assert node == NODE
        (c,) = pod_claims(lab, TENANT, "nvgpu-open")
        assert c["metadata"]["annotations"]["resource.kubernetes.io/extended-resource-claim"] == "true"
        assert c["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == DRIVER
        (result,) = c["status"]["allocation"]["devices"]["results"]
        assert (result["pool"], result["device"]) in dra_lab
        assert not c["status"]["allocation"]["devices"].get("config")  # no MPS limits: a whole GPU
        assert create(lab, hami_pod("hami-open", hami_ns)).returncode == 0
        msgs = wait_for("the HAMi pod's failure", lambda: scheduling_failures(lab, hami_ns, "hami-open"), timeout=60)
        assert any("cannot fit resource" in m for m in msgs), msgs
    finally:
        kubectl(lab, "delete", "pod", "nvgpu-open", "-n", TENANT, "--wait=true")
        kubectl(lab, "delete", "pod", "hami-open", "-n", hami_ns, "--wait=false")
        restore_bindings(lab, *saved)
        time.sleep(2)
        # The driver chart's next write of its class (helm upgrade), now through the mutating policy.
        kubectl(lab, "patch", "deviceclass", DRIVER, "--type=merge", "-p", json.dumps(upstream))
    assert extended_resource_name(lab) is None
    try:
        assert create(lab, hami_pod("hami", hami_ns)).returncode == 0
        wait_for("the HAMi pod to be scheduled", lambda: get(lab, "pod", "hami", "-n", hami_ns)["spec"].get("nodeName"),
                 timeout=60)
    finally:
        kubectl(lab, "delete", "namespace", hami_ns, "--wait=false")
    assert create(lab, pod("nvgpu", TENANT, {"kubernetes.io/hostname": NODE},
                           limits={"nvidia.com/gpu": "1"})).returncode == 0
    msgs = wait_for("the scheduler's reason", lambda: scheduling_failures(lab, TENANT, "nvgpu"), timeout=60)
    assert any("Insufficient nvidia.com/gpu" in m for m in msgs), msgs
    implicit = f"deviceclass.resource.kubernetes.io/{DRIVER}"
    assert create(lab, pod("implicit", TENANT, {"kubernetes.io/hostname": NODE},
                           limits={implicit: "1"})).returncode == 0
    msgs = wait_for("the scheduler's error", lambda: scheduling_failures(lab, TENANT, "implicit"), timeout=60)
    assert any(POLICY in m and "extended resources" in m and f"{DRIVER} is not a class" in m for m in msgs), msgs
    for name in ("nvgpu", "implicit"):
        assert get(lab, "pod", name, "-n", TENANT)["spec"].get("nodeName") is None
        assert not pod_claims(lab, TENANT, name)


def test_claims_and_templates_of_other_classes_are_refused(lab, dra_lab):
    """(c1) A tenant naming the driver chart's classes directly: a ResourceClaim of gpu.nvidia.com, of mig.nvidia.com
    in a firstAvailable list, a ResourceClaimTemplate of gpu.nvidia.com: each refused by the API server naming the
    field, the class and the allowed ones. The pool's own class is admitted."""
    cases = [
        claim("raw-gpu", TENANT, [exactly(DRIVER)]),
        claim("raw-mig", TENANT, [{"name": "any", "firstAvailable": [
            {"name": "pool", "deviceClassName": CLASS}, {"name": "mig", "deviceClassName": "mig.nvidia.com"}]}]),
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
         "metadata": {"name": "raw-template", "namespace": TENANT},
         "spec": {"spec": {"devices": {"requests": [exactly(DRIVER)]}}}},
    ]
    for body, field in zip(cases, ("spec.devices.requests[].exactly.deviceClassName",
                                   "spec.devices.requests[].firstAvailable[].deviceClassName",
                                   "spec.spec.devices.requests[].exactly.deviceClassName"), strict=True):
        proc = create(lab, body)
        assert proc.returncode != 0, f"admitted: {body['metadata']['name']}"
        assert POLICY in proc.stderr and field in proc.stderr and "allowed: kube-accel-*" in proc.stderr, proc.stderr
    proc = create(lab, claim("pool-class", TENANT, [exactly(CLASS)]))
    assert proc.returncode == 0, proc.stderr


def test_claim_from_a_template_admitted_before_the_guard_is_refused(lab, dra_lab):
    """(c1) A ResourceClaimTemplate of gpu.nvidia.com that exists already (made before the guard): the claim
    controller's claim from it is refused, so the pod never gets a claim or a node."""
    saved = binding_removed(lab)
    try:
        time.sleep(2)
        template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                    "metadata": {"name": "old-template", "namespace": TENANT},
                    "spec": {"spec": {"devices": {"requests": [exactly(DRIVER)]}}}}
        assert create(lab, template).returncode == 0
    finally:
        restore_bindings(lab, saved)
    assert create(lab, pod("from-old-template", TENANT, {"kubernetes.io/hostname": NODE},
                           [{"name": "gpu", "resourceClaimTemplateName": "old-template"}])).returncode == 0

    def refused() -> list[str]:
        events = get(lab, "events", "-n", TENANT, "--field-selector",
                     "involvedObject.name=from-old-template,reason=FailedResourceClaimCreation")
        return [e["message"] for e in events["items"] if POLICY in e["message"]]

    msgs = wait_for("the claim controller's refused claim", refused, timeout=60)
    assert any(f"{DRIVER} is not a class" in m for m in msgs), msgs
    assert get(lab, "pod", "from-old-template", "-n", TENANT)["spec"].get("nodeName") is None
    assert not pod_claims(lab, TENANT, "from-old-template")


def running_pod_uid(lab, ns: str, app: str) -> str | None:
    pods = get(lab, "pods", "-n", ns, "-l", f"app={app}")["items"]
    return next((p["metadata"]["uid"] for p in pods if p["status"].get("phase") == "Running"
                 and not p["metadata"].get("deletionTimestamp")), None)


def verify_row(stdout: str, pool: str) -> str:
    """The pool's row of the verify summary (the debug task's msg list, read as YAML: the callback folds lines)."""
    task = stdout.index("Print the verification summary")
    rows = yaml.safe_load(stdout[stdout.index("msg:", task):stdout.index("\n\n", task)])["msg"]
    (row,) = [r for r in rows if r.split()[:1] == [pool]]
    return row


def test_pool_switched_from_pgpu_to_dra_and_back_converges(lab, dra_lab):
    """(d) The pgpu pool switched to dra: its node drained before it is relabelled, the pgpu release's agents leave
    it, the DRA driver's kubelet plugin comes (so do the stand-in's slices) and verify passes it as a dra pool with its
    claim allocated on its own GPU; switched back, drained again, its slices deleted, verify passes it as pgpu."""
    ns = "dra-switch-test"
    lab.namespace(ns)
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "on-pgpu", "namespace": ns},
                  "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "on-pgpu"}}, "template": {
                      "metadata": {"labels": {"app": "on-pgpu"}},
                      "spec": {"nodeSelector": {"kubernetes.io/hostname": OTHER_POOL_NODE},
                               "terminationGracePeriodSeconds": 0, "tolerations": [{"operator": "Exists"}],
                               "containers": [{"name": "app", "image": "registry.invalid/pause:1"}]}}}}

    def to_dra(pool: dict) -> None:
        pool.clear()
        pool.update(accel_pool="pgpu", accel_mode="dra", accel_driver_branch="570",
                    accel_lab_gpu="dual-socket-a100x8")

    switched = changed_lab_inventory("pool_pgpu.yml", to_dra)
    try:
        assert create(lab, deployment).returncode == 0
        first = wait_for("the workload on the pgpu node", lambda: running_pod_uid(lab, ns, "on-pgpu"))
        proc = site_play(lab, switched, "--tags", "preflight,cluster,verify")
        assert proc.returncode == 0, proc.stdout[-5000:]
        out = proc.stdout
        drained = out.index("Cordon or drain a node whose sharing changes: drain")
        assert drained < out.index("pool_labels : Reconcile the labels and taints of every pool's nodes]")
        second = wait_for("the workload back", lambda: running_pod_uid(lab, ns, "on-pgpu"))
        assert second != first  # evicted by the drain, made again by its Deployment
        row = verify_row(out, "pgpu")
        assert re.search(rf"^pgpu\s+dra\s+1\s+ok\s+ok\s+ok\s+ok\s+published by {DRA_STANDIN} .*completed on "
                         rf"{OTHER_POOL_NODE}, claim allocated {OTHER_POOL_NODE}/gpu-\d+\s+PASS$", row), row
        pods = get(lab, "pods", "-n", NS, "--field-selector", f"spec.nodeName={OTHER_POOL_NODE}")["items"]
        instances = {p["metadata"].get("labels", {}).get("app.kubernetes.io/instance") for p in pods}
        assert "kube-accel-dra-driver" in instances and "kube-accel-pgpu" not in instances, instances
        assert stand_in_devices(lab, OTHER_POOL_NODE)

        back = site_play(lab, LAB_INVENTORY / "hosts.yml", "--tags", "preflight,cluster,verify")
        assert back.returncode == 0, back.stdout[-5000:]
        row = verify_row(back.stdout, "pgpu")
        assert re.search(r"^pgpu\s+pgpu\s+1\s+ok\s+ok\s+ok\s+ok\s+completed on lab-pgpu-0\s+PASS$", row), row
        assert wait_for("the workload back again", lambda: running_pod_uid(lab, ns, "on-pgpu")) != second
        wait_for(f"{DRA_STANDIN} to delete the slices of {OTHER_POOL_NODE}",
                 lambda: not stand_in_devices(lab, OTHER_POOL_NODE), timeout=30)
        labels = get(lab, "node", OTHER_POOL_NODE)["metadata"]["labels"]
        assert labels["kube-accel.io/mode"] == "pgpu" and "kube-accel.io/dra" not in labels, labels
    finally:
        remove_changed_inventory()
        kubectl(lab, "delete", "namespace", ns, "--wait=false")
