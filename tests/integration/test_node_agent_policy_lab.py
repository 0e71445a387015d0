"""Node agents limited to their own node, on the lab's real kube-apiserver (v1.36).

The vgpu chart's node agent (HAMi device plugin, or gpu-manager) holds cluster-wide node and pod writes in RBAC;
the chart's ValidatingAdmissionPolicies (templates/node-agent-policy.yaml) let its token write only the node
named in the token (userInfo.extra authentication.kubernetes.io/node-name, set by the API server for a token bound
to a pod on a node) and the pods bound to that node. Here, for each backend, the chart's own rendered
ServiceAccount, ClusterRole(Binding) and policies are applied under a test release in a test namespace; a
TokenRequest bound to a pod on node A (what the kubelet asks for the agent's pod) is the agent's token:

* the API server puts node A's name into that token's user (SelfSubjectReview);
* without the policies RBAC lets that token write node B (the finding); with them node B and B's pods are
  refused naming the policy, while node A and A's pods stay writable through exactly the verbs RBAC grants, with the
  fields the agent's upstream code writes (HAMi's plugin annotations, gpu-manager's GPU model label and
  pod annotations; what else they may not touch: tests/integration/test_tenant_attacks_lab.py);
* a token bound to no pod (no node name) may write nothing.

The workload pods live in kube-system, which the cluster play's HAMi tenant policy leaves out: there a hami.io/
annotation by this test release's agent (not the play's) is judged by the node-agent policies alone.
Every object is removed at the end, and the node labels and annotations the test wrote; the shared lab is otherwise
untouched.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid

import pytest

pytestmark = [pytest.mark.lab, pytest.mark.cluster_only]

NS = "node-agent-policy-test"
NODE_NAME_KEY = "authentication.kubernetes.io/node-name"
LABEL = "kube-accel.test/node-agent-policy"
WORK_NS = "kube-system"
# A write each agent's upstream code makes (tests/conformance: test_hami.py, test_gpu_manager.py).
HAMI_NODE_ANNOTATION = "hami.io/node-nvidia-score"
HAMI_POD_ANNOTATION = "hami.io/vgpu-mig-allocations"
GM_NODE_LABEL = "gaia.tencent.com/gpu-model"
GM_POD_ANNOTATION = "tencent.com/gpu-assigned"
# The node agent of each backend (charts/vgpu: hami/device-plugin.yaml, gpu-manager/daemonset.yaml).
AGENTS = {"hami": "device-plugin", "gpu-manager": "gpu-manager"}
POLICY_OBJECTS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")


def kubectl(lab, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(lab.kubectl), "--kubeconfig", str(lab.kubeconfig), *args], input=stdin,
                          capture_output=True, text=True, check=False, timeout=60)
    assert not check or proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}"
    return proc


def apply(lab, objs: list[dict]) -> None:
    kubectl(lab, "apply", "--server-side", "-f", "-",
            stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))


def token_api(lab, token: str):
    """A CoreV1Api that authenticates with ``token`` only (the lab kubeconfig's server and CA, no client cert)."""
    from kubernetes import client, config  # noqa: PLC0415

    cfg = client.Configuration()
    config.load_kube_config(str(lab.kubeconfig), client_configuration=cfg, persist_config=False)
    cfg.cert_file = cfg.key_file = None
    cfg.api_key = {"authorization": f"Bearer {token}"}
    return client.ApiClient(cfg)


def attempt(call) -> tuple[int, str]:
    """(HTTP status, message) of one API call: 200 when it succeeded."""
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    try:
        call()
    except ApiException as exc:
        return exc.status, json.loads(exc.body).get("message", exc.body)
    return 200, ""


def pod(name: str, node: str, service_account: str = "default", namespace: str = NS) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"nodeName": node, "serviceAccountName": service_account, "automountServiceAccountToken": False,
                     "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}


@pytest.fixture(params=sorted(AGENTS))
def agent(lab, request, tmp_path):
    """The chart's node agent RBAC for one backend under a test release, pods on two nodes, tokens; removed after."""
    from kalab.site import versions
    from kalab.upstream import render

    backend = request.param
    release = f"kube-accel-vgpu-policytest-{backend}"
    rendered = render({"name": release, "chart": "vgpu",
                       "values": {"backend": backend, "pools": ["policy-test"]}},
                      NS, versions()["K8S_VERSION"].lstrip("v"), tmp_path)
    sa = f"{release}-{AGENTS[backend]}"
    rbac = [o for o in rendered if o["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")
            and o["metadata"]["name"] == sa]
    policies = [o for o in rendered if o["kind"] in POLICY_OBJECTS and "-own-" in o["metadata"]["name"]]
    assert len(rbac) == 3 and len(policies) == 4, [o["metadata"]["name"] for o in rbac + policies]
    node_a, node_b = sorted(lab.nodes_by_pool["vgpu-hami"])[:2]
    work = {"a": f"ka-node-agent-test-{backend}-a", "b": f"ka-node-agent-test-{backend}-b"}
    kubectl(lab, "delete", "namespace", NS, "--ignore-not-found", "--wait=true")
    kubectl(lab, "delete", "pod", "-n", WORK_NS, "--ignore-not-found", "--grace-period=0", "--force", *work.values(),
            check=False)
    kubectl(lab, "create", "namespace", NS)
    try:
        apply(lab, rbac)
        apply(lab, [pod("agent-a", node_a, sa), pod(work["a"], node_a, namespace=WORK_NS),
                    pod(work["b"], node_b, namespace=WORK_NS)])
        bound = kubectl(lab, "create", "token", sa, "-n", NS, "--bound-object-kind", "Pod",
                        "--bound-object-name", "agent-a", "--duration", "10m").stdout.strip()
        unbound = kubectl(lab, "create", "token", sa, "-n", NS, "--duration", "10m").stdout.strip()
        yield {"backend": backend, "sa": sa, "policies": policies, "a": node_a, "b": node_b, "work": work,
               "bound": token_api(lab, bound), "unbound": token_api(lab, unbound)}
    finally:
        for obj in reversed(rbac + policies):
            kubectl(lab, "delete", obj["kind"], obj["metadata"]["name"], "--ignore-not-found", check=False)
        kubectl(lab, "delete", "namespace", NS, "--ignore-not-found", "--wait=false", check=False)
        kubectl(lab, "delete", "pod", "-n", WORK_NS, "--ignore-not-found", "--grace-period=0", "--force",
                *work.values(), check=False)
        kubectl(lab, "label", "node", node_a, node_b, f"{LABEL}-", f"{GM_NODE_LABEL}-", check=False)
        kubectl(lab, "annotate", "node", node_a, node_b, f"{HAMI_NODE_ANNOTATION}-", check=False)


def writes(client, agent: dict, node: str, work_pod: str) -> dict[str, tuple[int, str]]:
    """Every write the agent's ClusterRole grants, on ``node`` and on ``work_pod`` (a pod bound to that node), each
    with a field the agent's upstream code writes: HAMi's device plugin patches node and pod annotations;
    gpu-manager updates its node's GPU model label, patches pod annotations, fails a pod through pods/status and
    deletes pods (tests/conformance keep those tables against the upstream code)."""
    from kubernetes import client as k8s  # noqa: PLC0415

    core = k8s.CoreV1Api(client)
    value = uuid.uuid4().hex[:8]
    out = {}
    if agent["backend"] == "hami":
        out["patch node"] = attempt(lambda: core.patch_node(
            node, {"metadata": {"annotations": {HAMI_NODE_ANNOTATION: value}}}))
        out["patch pod"] = attempt(lambda: core.patch_namespaced_pod(
            work_pod, WORK_NS, {"metadata": {"annotations": {HAMI_POD_ANNOTATION: value}}}))
        return out

    def update_node():
        body = core.read_node(node)
        body.metadata.labels[GM_NODE_LABEL] = value
        core.replace_node(node, body)

    def update_status():
        # What gpu-manager sends when an allocation fails (allocator.go:945-951).
        body = core.read_namespaced_pod(work_pod, WORK_NS)
        body.status = k8s.V1PodStatus(phase="Failed", reason="UnexpectedAdmissionError", message=value)
        body.metadata.annotations = None
        core.replace_namespaced_pod_status(work_pod, WORK_NS, body)

    out["update node"] = attempt(update_node)
    out["patch pod"] = attempt(lambda: core.patch_namespaced_pod(
        work_pod, WORK_NS, {"metadata": {"annotations": {GM_POD_ANNOTATION: value}}}))
    out["update pod status"] = attempt(update_status)
    # dry run: the admission chain runs (the policy included) and the pod stays for the other checks.
    out["delete pod"] = attempt(lambda: core.delete_namespaced_pod(work_pod, WORK_NS, dry_run="All"))
    return out


def test_api_server_names_the_node_in_a_pod_bound_token(lab, agent):
    """kube-apiserver v1.36 (the lab's) puts the bound pod's node into the token's user: the policies' evidence."""
    from kubernetes import client  # noqa: PLC0415

    review = client.AuthenticationV1Api(agent["bound"]).create_self_subject_review({})
    user = review.status.user_info
    assert user.username == f"system:serviceaccount:{NS}:{agent['sa']}"
    assert user.extra[NODE_NAME_KEY] == [agent["a"]]
    unbound = client.AuthenticationV1Api(agent["unbound"]).create_self_subject_review({})
    assert NODE_NAME_KEY not in (unbound.status.user_info.extra or {})


def test_token_writes_only_its_own_node_and_its_pods(lab, agent):
    """Without the policies RBAC lets node A's agent write node B and B's pods; with them every write on B is
    refused by the policy while every write on A still succeeds; a token bound to no pod may write nothing."""
    before = writes(agent["bound"], agent, agent["b"], agent["work"]["b"])
    assert all(status == 200 for status, _ in before.values()), f"RBAC alone should allow these: {before}"

    apply(lab, agent["policies"])
    deadline = time.time() + 30
    # The API server loads each policy asynchronously: wait until neither lets a write through.
    while True:
        status = writes(agent["bound"], agent, agent["b"], agent["work"]["b"])
        if all(code != 200 for code, _ in status.values()):
            break
        assert time.time() < deadline, f"the policies never took effect: {status}"
        time.sleep(0.5)
    for what, (code, message) in status.items():
        assert code == 403 and "ValidatingAdmissionPolicy" in message, (what, code, message)
        assert "may write only" in message and agent["a"] in message, (what, message)

    # The API server type-checked every expression against the Node and Pod schemas without a warning.
    for policy in (p for p in agent["policies"] if p["kind"] == "ValidatingAdmissionPolicy"):
        for _ in range(60):
            got = json.loads(kubectl(lab, "get", "validatingadmissionpolicy", policy["metadata"]["name"], "-o",
                                     "json").stdout).get("status", {})
            if got.get("observedGeneration") == 1:
                break
            time.sleep(0.5)
        assert "typeChecking" in got and not got["typeChecking"].get("expressionWarnings"), got

    own = writes(agent["bound"], agent, agent["a"], agent["work"]["a"])
    assert all(code == 200 for code, _ in own.values()), own

    for what, (code, message) in writes(agent["unbound"], agent, agent["a"], agent["work"]["a"]).items():
        assert code == 403 and "only with a token bound to a pod on a node" in message, (what, code, message)
