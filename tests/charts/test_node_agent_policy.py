"""The node agents' writes are limited to their own node by the vgpu chart's ValidatingAdmissionPolicies.

Rendered-manifest facts (the lab proves the behaviour on a real API server: tests/integration/
test_node_agent_policy_lab.py): every write that a DaemonSet's ServiceAccount holds in RBAC is matched by a policy
for that ServiceAccount, on Kubernetes >= 1.30 only, unless turned off; the pgpu and mps agents hold no write.
"""

from __future__ import annotations

import subprocess

import pytest
import yaml
from chartlib import CHARTS_DIR, NAMESPACE, pod_spec, release_name, render, rules, values_files

NODE_NAME_KEY = "authentication.kubernetes.io/node-name"
WRITE_OPERATIONS = {"update": "UPDATE", "patch": "UPDATE", "delete": "DELETE", "create": "CREATE",
                    "deletecollection": "DELETE"}
POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")


def agent_writes(objs: list[dict]) -> dict[str, set[tuple[str, str]]]:
    """ServiceAccount of each DaemonSet -> the (resource, verb) writes its bound roles grant."""
    roles = {(o["kind"], o["metadata"]["name"]): o for o in objs if o["kind"] in ("Role", "ClusterRole")}
    out: dict[str, set[tuple[str, str]]] = {}
    for ds in (o for o in objs if o["kind"] == "DaemonSet"):
        sa = pod_spec(ds).get("serviceAccountName")
        out.setdefault(sa, set())
        for binding in (o for o in objs if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
            if not any(s["name"] == sa for s in binding.get("subjects", [])):
                continue
            role = roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
            for (_group, resource), verbs in rules(role).items():
                out[sa] |= {(resource, verb) for verb in verbs if verb in WRITE_OPERATIONS}
    return out


def matched(policy: dict, resource: str, operation: str) -> bool:
    return any(resource in r["resources"] and operation in r["operations"]
               for r in policy["spec"]["matchConstraints"]["resourceRules"])


@pytest.mark.parametrize("values", values_files("vgpu"), ids=lambda p: p.stem)
def test_every_node_agent_write_is_limited_to_its_node(helm, values):
    objs = render("vgpu", [values], "1.36.0", helm=helm)
    policies = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ValidatingAdmissionPolicy"}
    bindings = [o for o in objs if o["kind"] == "ValidatingAdmissionPolicyBinding"]
    writers = {sa: w for sa, w in agent_writes(objs).items() if w}
    assert len(writers) == 1, f"one node agent with writes per backend: {writers}"
    for sa, writes in writers.items():
        user = f'request.userInfo.username == "system:serviceaccount:{NAMESPACE}:{sa}"'
        mine = [p for p in policies.values() if [c["expression"] for c in p["spec"]["matchConditions"]] == [user]]
        assert mine, f"no policy for {sa}"
        for resource, verb in sorted(writes):
            assert verb != "create", f"{sa} may create {resource}: no object of its node to compare"
            assert any(matched(p, resource, WRITE_OPERATIONS[verb]) for p in mine), (sa, resource, verb)
        for p in mine:
            spec = p["spec"]
            assert spec["failurePolicy"] == "Fail"
            assert spec["variables"][0] == {"name": "node", "expression": (
                f"has(request.userInfo.extra) && '{NODE_NAME_KEY}' in request.userInfo.extra ? "
                f"request.userInfo.extra['{NODE_NAME_KEY}'][0] : ''")}
            exprs = [v["expression"] for v in spec["validations"]]
            assert exprs[0] == "variables.node != ''"  # a token bound to no node may write nothing
            assert any("== variables.node" in e for e in exprs[1:])
            # Field by field: no spec change, labels and annotations only from the agent's own lists,
            # finalizers and owner references untouched (the lists: tests/conformance, the lab proves the rest).
            assert "request.operation != 'UPDATE' || object.spec == oldObject.spec" in exprs
            assert {"size(variables.badLabels) == 0", "size(variables.badAnnotations) == 0"} <= set(exprs)
            assert any("finalizers" in e and "ownerReferences" in e for e in exprs)
    assert sorted((b["spec"]["policyName"], tuple(b["spec"]["validationActions"])) for b in bindings) == sorted(
        (name, ("Deny",)) for name in policies)


@pytest.mark.parametrize("kube", ["1.25.0", "1.29.0"])
def test_no_policy_below_1_30(helm, kube):
    """ValidatingAdmissionPolicy is GA in 1.30, and node names in tokens are on by default from 1.30."""
    objs = render("vgpu", [values_files("vgpu")[0]], kube, helm=helm)
    assert not [o for o in objs if o["kind"] in POLICY_KINDS]


def test_policy_can_be_turned_off(helm, tmp_path):
    path = tmp_path / "off.yaml"
    path.write_text(yaml.safe_dump({"nodeAgentPolicy": False}))
    objs = render("vgpu", [values_files("vgpu")[0], path], "1.36.0", helm=helm)
    assert not [o for o in objs if o["kind"] in POLICY_KINDS]
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"nodeAgentPolicy": "yes"}))
    proc = subprocess.run([helm, "template", "x-vgpu", str(CHARTS_DIR / "vgpu"), "-n", NAMESPACE, "-f", str(bad)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode != 0 and "nodeAgentPolicy" in proc.stderr


@pytest.mark.parametrize("chart", ["pgpu", "mps"])
def test_pgpu_and_mps_agents_write_nothing(helm, chart):
    """No policy is needed there: their agents only list and watch nodes (config-manager)."""
    for values in values_files(chart):
        objs = render(chart, [values], "1.36.0", helm=helm)
        assert all(not w for w in agent_writes(objs).values()), (values.name, agent_writes(objs))


def test_notes_name_the_policies(helm4):
    values = values_files("vgpu")[0]
    proc = subprocess.run([helm4, "install", "--dry-run=client", release_name("vgpu", values),
                           str(CHARTS_DIR / "vgpu"), "--namespace", NAMESPACE, "--values", str(values)],
                          capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "-own-nodes" in proc.stdout.split("NOTES:", 1)[1]
