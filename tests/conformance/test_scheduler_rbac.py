"""RBAC of the vgpu chart's second kube-scheduler (HAMi's scheduler pod; gpu-manager's second-scheduler mode)
against kube-scheduler's own code at the lab's version.

Evidence: Kubernetes v1.36.3 (k8s.io/kubernetes and k8s.io/client-go v0.36.3), the module sources the toolchain
built the lab's kube-scheduler from (scripts/toolchain.sh: GOMODCACHE=$KA_CACHE/go/mod); the sources of the other
components come from ../shared/upstream (tests/conformance/test_hami.py, test_gpu_manager.py, test_device_plugin.py).

kube-scheduler's usual rights come from the built-in roles the chart binds (system:kube-scheduler,
system:volume-scheduler, extension-apiserver-authentication-reader). The chart's own Role adds only what leader
election under the chart's Lease name needs: client-go's LeaseLock gets, creates and updates one Lease, and the
built-in role allows get/update only on the Lease named kube-scheduler. Each cited line must still hold the call.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from chartlib import REPO, by_kind, containers, pod_spec
from vgpu_cases import BUILTIN_ROLES, CASES, render_case


def _k8s_version() -> str:
    for line in (REPO / "scripts" / "versions.env").read_text().splitlines():
        if line.startswith("K8S_VERSION="):
            return line.split("=", 1)[1].strip()
    raise AssertionError("scripts/versions.env has no K8S_VERSION")


K8S = _k8s_version()  # v1.36.3
MODULES = {"kubernetes": f"kubernetes@{K8S}", "client-go": f"client-go@v0.{K8S.split('.', 1)[1]}"}
GOMOD = Path(os.environ.get("KA_CACHE", Path.home() / ".cache" / "kube-accel")) / "go" / "mod" / "k8s.io"

# (verb, module, file, line, text that line holds): the Lease calls of leader election.
LEASE_CALLS = [
    ("get", "client-go", "tools/leaderelection/resourcelock/leaselock.go", 43, "Leases(ll.LeaseMeta.Namespace).Get("),
    ("create", "client-go", "tools/leaderelection/resourcelock/leaselock.go", 68,
     "Leases(ll.LeaseMeta.Namespace).Create("),
    ("update", "client-go", "tools/leaderelection/resourcelock/leaselock.go", 89,
     "Leases(ll.LeaseMeta.Namespace).Update("),
]
# Why those calls are kube-scheduler's, and why the built-in role does not cover them.
CONTEXT = [
    # kube-scheduler's default lock is "leases", built by resourcelock.NewFromKubeconfig (a LeaseLock).
    ("kubernetes", "cmd/kube-scheduler/app/options/options.go", 113, 'ResourceLock:      "leases"'),
    ("kubernetes", "cmd/kube-scheduler/app/options/options.go", 357,
     "resourcelock.NewFromKubeconfig(config.ResourceLock"),
    # system:kube-scheduler: create any Lease, but get/update only the one named kube-scheduler.
    ("kubernetes", "plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go", 616,
     'NewRule("create").Groups(coordinationGroup).Resources("leases")'),
    ("kubernetes", "plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go", 617, 'Names("kube-scheduler")'),
]


def _line(module: str, file: str, line: int) -> str:
    path = GOMOD / MODULES[module] / file
    if not path.exists():
        pytest.fail(f"{path} missing: scripts/toolchain.sh builds Kubernetes {K8S} from these module sources")
    return path.read_text().splitlines()[line - 1]


@pytest.mark.parametrize("row", [(m, f, n, t) for _, m, f, n, t in LEASE_CALLS] + CONTEXT,
                         ids=lambda r: f"{r[1]}:{r[2]}")
def test_table_cites_upstream(row):
    module, file, line, needle = row
    assert needle in _line(module, file, line), f"{MODULES[module]}/{file}:{line} no longer holds {needle!r}"


def _bindings(objs: list[dict], sa: str) -> list[dict]:
    return [b for b in objs if b["kind"] in ("RoleBinding", "ClusterRoleBinding")
            and any(s.get("kind") == "ServiceAccount" and s["name"] == sa for s in b.get("subjects", []))]


def _leader_election(objs: list[dict], spec: dict) -> dict:
    """leaderElection of the KubeSchedulerConfiguration the pod's kube-scheduler container mounts."""
    (ctr,) = [c for c in containers(spec) if c["name"] == "kube-scheduler"]
    mounted = {m["name"] for m in ctr.get("volumeMounts", [])}
    cms = by_kind(objs, "ConfigMap")
    for vol in spec.get("volumes", []):
        if vol["name"] in mounted and "configMap" in vol:
            for text in cms[vol["configMap"]["name"]]["data"].values():
                doc = yaml.safe_load(text)
                if isinstance(doc, dict) and doc.get("kind") == "KubeSchedulerConfiguration":
                    return doc["leaderElection"]
    raise AssertionError("kube-scheduler mounts no KubeSchedulerConfiguration")


@pytest.mark.parametrize(("name", "release", "values"), [pytest.param(*c, id=c[0]) for c in CASES])
def test_kube_scheduler_role_is_exactly_its_leader_election(tmp_path, name, release, values):
    objs = render_case(tmp_path, release, values)
    schedulers = [o for o in objs if o["kind"] == "Deployment"
                  and any(c["name"] == "kube-scheduler" for c in containers(pod_spec(o)))]
    if values.get("backend") == "gpu-manager" and (values.get("gpuManager", {}).get("scheduler", {}) or {}).get(
            "mode") == "extender-config":
        assert not schedulers
        return
    assert len(schedulers) == 1
    spec = pod_spec(schedulers[0])
    sa = spec["serviceAccountName"]
    election = _leader_election(objs, spec)
    bindings = _bindings(objs, sa)
    builtin = {(b["kind"], b["roleRef"]["name"], b["metadata"].get("namespace", "")) for b in bindings
               if b["roleRef"]["name"] in BUILTIN_ROLES}
    assert builtin == {("ClusterRoleBinding", "system:kube-scheduler", ""),
                       ("ClusterRoleBinding", "system:volume-scheduler", ""),
                       ("RoleBinding", "extension-apiserver-authentication-reader", "kube-system")}
    own = [b for b in bindings if b["roleRef"]["name"] == sa]
    if not election["leaderElect"]:
        assert not own and not [o for o in objs if o["kind"] == "Role" and o["metadata"]["name"] == sa]
        return
    (binding,) = own
    assert binding["kind"] == "RoleBinding" and binding["metadata"]["namespace"] == election["resourceNamespace"]
    (role,) = [o for o in objs if o["kind"] == "Role" and o["metadata"]["name"] == sa]
    got = {(verb, group, res, tuple(rule.get("resourceNames", [])))
           for rule in role["rules"] for verb in rule["verbs"] for group in rule["apiGroups"]
           for res in rule["resources"]}
    # create cannot be limited by name (the object does not exist yet); get and update only the chart's Lease.
    want = {(verb, "coordination.k8s.io", "leases", () if verb == "create" else (election["resourceName"],))
            for verb, *_ in LEASE_CALLS}
    assert got == want
    # Every other role bound to this ServiceAccount is HAMi's extender's (test_hami.py keeps its table).
    others = {b["roleRef"]["name"] for b in bindings} - BUILTIN_ROLES - {sa}
    assert others <= {f"{release}-scheduler-extender"}, others


def test_leader_election_off_drops_the_role(tmp_path):
    """The Lease Role exists only for leader election: with it off kube-scheduler makes no Lease call."""
    objs = render_case(tmp_path, "kube-accel-vgpu-hami", {"backend": "hami", "pools": ["p"],
                                                          "hami": {"scheduler": {"leaderElect": False}}})
    assert not [o for o in objs if o["kind"] == "Role" and o["metadata"]["name"] == "kube-accel-vgpu-hami-scheduler"]
