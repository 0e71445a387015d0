"""accel_namespaces against the lab's real API server (which enforces nothing itself: the module reads the Pod
Security labels the API server's admission plugin would enforce): create with labels, label an existing namespace,
refuse a stricter enforced level with nothing changed, check mode and diff, then no change on a second run."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from lab_fixture import run_localhost_playbook

pytestmark = [pytest.mark.lab, pytest.mark.cluster_only]

ENFORCE = "pod-security.kubernetes.io/enforce"


def run(lab, tmp_path: Path, namespaces: dict, *, check_only=(), check=False):
    book = [{"name": "accel_namespaces", "hosts": "localhost", "connection": "local", "gather_facts": False,
             "tasks": [{"name": "namespaces", "kube_accel.gpu.accel_namespaces": {
                 "kubeconfig": str(lab.kubeconfig), "namespaces": namespaces, "check_only": list(check_only)}}]}]
    proc = run_localhost_playbook(book, tmp_path / f"ns-{uuid.uuid4().hex[:6]}.yml", "--diff",
                                  *(["--check"] if check else []),
                                  env={"ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"})
    try:
        return json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    except (ValueError, KeyError, IndexError):
        pytest.fail(f"no JSON result (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")


def labels(lab, name):
    proc = lab.kubectl_run("get", "namespace", name, "-o", "json", check=False)
    return json.loads(proc.stdout)["metadata"].get("labels", {}) if proc.returncode == 0 else None


def test_namespaces_created_labelled_refused_and_idempotent(lab, tmp_path):
    fresh, existing, strict = (f"ka-ns-{uuid.uuid4().hex[:6]}-{n}" for n in ("fresh", "plain", "strict"))
    lab.kubectl_run("create", "namespace", existing)
    lab.kubectl_run("create", "namespace", strict)
    lab.kubectl_run("label", "namespace", strict, f"{ENFORCE}=baseline")
    try:
        wanted = {fresh: "privileged", existing: "privileged"}
        # Check mode: the diff tells what would happen, nothing happens.
        dry = run(lab, tmp_path, wanted, check=True)
        assert dry["changed"] and labels(lab, fresh) is None and ENFORCE not in labels(lab, existing)
        assert dry["diff"]["before"][fresh] is None and dry["diff"]["after"][fresh][ENFORCE] == "privileged"

        done = run(lab, tmp_path, wanted)
        assert done["changed"] and sorted(done["created"]) == [fresh] and sorted(done["labelled"]) == [existing]
        assert labels(lab, fresh)[ENFORCE] == labels(lab, existing)[ENFORCE] == "privileged"
        assert run(lab, tmp_path, wanted)["changed"] is False

        # A namespace that enforces a stricter level is refused, with the reason; nothing is labelled.
        refused = run(lab, tmp_path, {strict: "privileged"}, check_only=[strict])
        assert refused.get("failed") and any(strict in r and "baseline" in r for r in refused["refused"]), refused
        assert labels(lab, strict)[ENFORCE] == "baseline"
    finally:
        for name in (fresh, existing, strict):
            lab.kubectl_run("delete", "namespace", name, "--wait=false", check=False)
