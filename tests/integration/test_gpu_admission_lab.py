"""gpu-admission as the extender of the gpu-manager pool's scheduler in the lab.

`lab.py up` runs gpu-admission (tkestack 47d56ae, built by scripts/upstream.sh) with the vgpu chart's command, and a
second kube-scheduler of the lab's version with the KubeSchedulerConfiguration the chart renders for the lab's
vgpu-gpu-manager release, whose extender entry (filterVerb predicates, managedResources vcuda-core/-memory) points
at it (scripts/kalab/upstream.py start_gpu_admission; only the urlPrefix moves from the chart's Service to 127.0.0.1).
Evidence: gpu-admission's own choice on the pod (its predicate annotations, written by it per the API server's
managedFields) and the scheduler that bound the pod. Stand-ins: the kwok node's vcuda capacity (what gpu-manager's
device plugin would advertise for the recorded T4) and kwok running the pod.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from lab_fixture import wait_for

pytestmark = [pytest.mark.lab, pytest.mark.cluster_only]

REPO = Path(__file__).resolve().parents[2]
import upstream  # noqa: E402

NS = "gpu-admission-lab-test"
POOL_KEY = "kube-accel.io/pool"


wait = functools.partial(wait_for, timeout=90)


def admission_names() -> dict[str, str]:
    """gpu-admission's annotation names, from its source (pkg/util/util.go)."""
    text = (upstream.src(upstream.GPU_ADMISSION) / "pkg" / "util" / "util.go").read_text()
    found = dict(re.findall(r'^\s+(Predicate\w+|VCoreAnnotation|VMemoryAnnotation)\s*=\s*"([^"]+)"', text, re.M))
    assert {"PredicateGPUIndexPrefix", "PredicateNode", "PredicateTimeAnnotation"} <= set(found), found
    return found


@pytest.fixture(scope="module")
def admission(lab):
    path = lab.kubeconfig.parent / "gpu-admission" / "info.json"
    if not path.exists():
        pytest.fail(f"{path} missing: `scripts/lab.py up` runs gpu-admission for the lab inventory's gpu-manager pool")
    info = json.loads(path.read_text())
    from kalab import processes

    running = processes.running(lab.kubeconfig.parent)
    assert {"gpu-admission", "gpu-manager-kube-scheduler"} <= set(running), running
    info["nodes"] = lab.nodes_by_pool["vgpu-vcuda"]
    # The chart's scheduler elects a leader with a Lease in the release namespace, which the cluster play creates.
    lab.kubectl_run("create", "namespace", info["namespace"], check=False)
    lab.namespace(NS)
    yield info
    lab.kubectl_run("delete", "namespace", NS, "--wait=false", check=False)


def test_the_scheduler_is_configured_as_the_chart_renders_it(lab, admission):
    """The lab scheduler's configuration is the chart's, the extender's address aside."""
    config = yaml.safe_load((lab.kubeconfig.parent / "gpu-admission" / "scheduler-config.yaml").read_text())
    (extender,) = config["extenders"]
    assert admission["chart_url"] == f"http://{admission['release']}-gpu-admission.{admission['namespace']}.svc:3456" \
                                     "/scheduler"
    assert extender["urlPrefix"] == f"http://127.0.0.1:{admission['port']}/scheduler"
    assert extender["filterVerb"] == "predicates" and extender["nodeCacheCapable"] is False
    assert {r["name"] for r in extender["managedResources"]} == {"tencent.com/vcuda-core", "tencent.com/vcuda-memory"}
    assert config["profiles"] == [{"schedulerName": admission["scheduler_name"]}]


def pod(name: str, scheduler: str, cores: int, memory: int) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS},
            "spec": {"schedulerName": scheduler, "nodeSelector": {POOL_KEY: "vgpu-vcuda"},
                     "containers": [{"name": "cuda", "image": "nvcr.io/nvidia/cuda:11.4.3-base-ubuntu20.04",
                                     "resources": {"limits": {"tencent.com/vcuda-core": str(cores),
                                                              "tencent.com/vcuda-memory": str(memory)}}}]}}


def get_pod(lab, name: str) -> dict:
    return json.loads(lab.kubectl_run("get", "pod", name, "-n", NS, "-o", "json", "--show-managed-fields").stdout)


def test_a_vcuda_pod_is_filtered_by_gpu_admission_and_bound_by_the_pools_scheduler(lab, admission):
    names = admission_names()
    log = Path(admission["log"])
    lines_before = len(log.read_text().splitlines())
    proc = subprocess.run([str(lab.kubectl), "--kubeconfig", str(lab.kubeconfig), "apply", "-f", "-"],
                          input=json.dumps(pod("vcuda-half", admission["scheduler_name"], 50, 4)),
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    bound = wait("the pod to be bound", lambda: get_pod(lab, "vcuda-half")["spec"].get("nodeName"))
    assert [bound] == admission["nodes"]
    got = get_pod(lab, "vcuda-half")
    annotations = got["metadata"]["annotations"]
    # gpu-admission's choice: GPU 0 of the node it picked, and when.
    assert annotations[names["PredicateGPUIndexPrefix"] + "0"] == "0"
    assert annotations[names["PredicateNode"]] == bound
    assert annotations[names["PredicateTimeAnnotation"]]
    writers = {m["manager"] for m in got["metadata"]["managedFields"]
               if f"f:{names['PredicateNode']}" in m.get("fieldsV1", {}).get("f:metadata", {}).get("f:annotations",
                                                                                                    {})}
    assert writers == {"gpu-admission"}, writers
    events = json.loads(lab.kubectl_run("get", "events", "-n", NS, "--field-selector",
                                        "involvedObject.name=vcuda-half,reason=Scheduled", "-o", "json").stdout)
    assert {e.get("reportingComponent") or e["source"].get("component") for e in events["items"]} == {
        admission["scheduler_name"]}
    new = log.read_text().splitlines()[lines_before:]
    assert any("vcuda-half" in line or got["metadata"]["uid"] in line for line in new), "\n".join(new[-30:])


def test_a_pod_without_vcuda_resources_is_left_alone(lab, admission):
    """gpu-admission filters only pods asking for vcuda resources (util.IsGPURequiredPod): others pass untouched."""
    body = pod("no-vcuda", admission["scheduler_name"], 0, 0)
    body["spec"]["containers"][0]["resources"] = {}
    proc = subprocess.run([str(lab.kubectl), "--kubeconfig", str(lab.kubeconfig), "apply", "-f", "-"],
                          input=json.dumps(body), capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    wait("the pod to be bound", lambda: get_pod(lab, "no-vcuda")["spec"].get("nodeName"))
    assert not [k for k in get_pod(lab, "no-vcuda")["metadata"].get("annotations", {}) if k.startswith("tencent.com/")]
