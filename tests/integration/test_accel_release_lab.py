"""accel_release against the lab cluster, run through ansible-playbook exactly as the cluster play runs it.

Covers: install then no-op (revision unchanged in `helm history`), check mode, diff output, schema refusal with
nothing installed, helm 4, uninstall, and an upgrade whose pod can never become ready is
rolled back automatically and the previous revision keeps serving.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest
from lab_fixture import run_localhost_playbook

pytestmark = [pytest.mark.lab, pytest.mark.cluster_only]

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "data" / "charts" / "tiny"
NAMESPACE = "accel-release-test"

# kwok marks every scheduled pod Ready, so "never ready" has to be a pod the scheduler cannot place.
UNSATISFIABLE = {"kube-accel.io/pool": "no-such-pool"}


def playbook(lab, args: dict, tmp_path: Path, *, check=False, diff=False, json_output=True):
    """Run one accel_release task on localhost; returns (rc, task result or None, stdout)."""
    book = [
        {
            "name": "accel_release",
            "hosts": "localhost",
            "connection": "local",
            "gather_facts": False,
            "tasks": [{"name": "release", "kube_accel.gpu.accel_release": {"kubeconfig": str(lab.kubeconfig), **args}}],
        }
    ]
    env = {"ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"} if json_output else None
    proc = run_localhost_playbook(book, tmp_path / f"play-{uuid.uuid4().hex[:6]}.yml",
                                  *(["--check"] * check + ["--diff"] * diff), env=env)
    result = None
    if json_output:
        try:
            result = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
        except (ValueError, KeyError, IndexError):
            pytest.fail(f"no JSON result from ansible-playbook (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc.returncode, result, proc.stdout + proc.stderr


def helm(lab, *args, binary=None):
    argv = [str(binary or lab.helm), "--kubeconfig", str(lab.kubeconfig), "--namespace", NAMESPACE, *args]
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)


def history(lab, name):
    proc = helm(lab, "history", name, "--output", "json")
    assert proc.returncode == 0, proc.stderr
    return [(int(h["revision"]), h["status"], h.get("description", "")) for h in json.loads(proc.stdout)]


def deployment(lab, name):
    proc = lab.kubectl_run("get", "deployment", f"{name}-tiny", "-n", NAMESPACE, "-o", "json")
    return json.loads(proc.stdout)


@pytest.fixture(scope="module", autouse=True)
def _test_namespace(lab):
    """The releases' namespace (created by the module) goes away with the module's tests."""
    yield
    lab.kubectl_run("delete", "namespace", NAMESPACE, "--ignore-not-found", "--timeout=60s", check=False)


@pytest.fixture
def release(lab):
    """A fresh release name, uninstalled afterwards whatever the test did."""
    name = f"t{uuid.uuid4().hex[:8]}"
    yield name
    helm(lab, "uninstall", name, "--wait", "--timeout", "60s")


def base_args(name, **over):
    args = {
        "name": name,
        "namespace": NAMESPACE,
        "chart": str(TINY),
        "timeout": "60s",
        "values": {"replicas": 1, "podLabels": {"team": "gpu"}, "tolerations": [{"operator": "Exists"}]},
    }
    args.update(over)
    return args


def test_install_then_second_run_changes_nothing(lab, release, tmp_path):
    template = tmp_path / "values.yaml.j2"
    template.write_text("mode: {{ mode }}\nreplicas: {{ replicas }}\n")
    args = base_args(release, values_template=str(template), template_vars={"mode": "mps", "replicas": 1})
    rc, first, out = playbook(lab, args, tmp_path)
    assert rc == 0, out
    assert first["changed"] is True
    assert first["revision"] == 1 and first["status"] == "deployed"
    assert first["chart"] == "tiny-0.1.0" and first["app_version"] == "1.0.0"
    assert first["command"][1:3] == ["upgrade", release] and "--atomic" in first["command"]
    assert {"kind": "Deployment", "name": f"{release}-tiny", "namespace": NAMESPACE} in first["objects"]
    assert deployment(lab, release)["metadata"]["annotations"]["kube-accel.io/mode"] == "mps"

    rc, second, out = playbook(lab, args, tmp_path)
    assert rc == 0, out
    assert second["changed"] is False, second.get("changes")
    assert second["revision"] == 1 and "command" not in second
    assert history(lab, release) == [(1, "deployed", "Install complete")]


def test_check_mode_and_diff_report_without_changing(lab, release, tmp_path):
    assert playbook(lab, base_args(release), tmp_path)[0] == 0
    changed = base_args(release, values={"replicas": 2, "tolerations": [{"operator": "Exists"}]})

    rc, result, out = playbook(lab, changed, tmp_path, check=True)
    assert rc == 0, out
    assert result["changed"] is True and result["revision"] == 1
    assert "values differ: podLabels, replicas" in result["changes"]
    assert any(c.startswith("manifest differs:") and "Deployment/" in c for c in result["changes"])

    # The default callback prints the diff a user reads: values as YAML, then the manifest.
    rc, _, text = playbook(lab, changed, tmp_path, check=True, diff=True, json_output=False)
    assert rc == 0, text
    assert f"--- before: {release} values (revision 1)" in text and f"+++ after: {release} values (desired)" in text
    assert "-replicas: 1" in text and "+replicas: 2" in text and "-podLabels:" in text
    assert f"--- before: {release} manifest (revision 1)" in text and "+  replicas: 2" in text

    assert history(lab, release) == [(1, "deployed", "Install complete")]
    assert deployment(lab, release)["spec"]["replicas"] == 1


def test_schema_failure_names_the_field_and_installs_nothing(lab, release, tmp_path):
    rc, result, out = playbook(lab, base_args(release, values={"replicas": 1, "mode": "mig"}), tmp_path)
    assert rc != 0
    assert result["failed"] is True
    assert 'mode: "mig" is not one of the allowed values ["vgpu", "pgpu", "mps"]' in result["msg"]
    assert "Traceback" not in out
    assert helm(lab, "status", release).returncode != 0  # no release, not even a failed one


def test_helm4_installs_and_is_idempotent(lab, release, tmp_path):
    args = base_args(release, helm_binary=str(lab.helm4))
    rc, first, out = playbook(lab, args, tmp_path)
    assert rc == 0, out
    assert first["changed"] and first["revision"] == 1 and first["helm_version"].startswith("4.")
    assert "--rollback-on-failure" in first["command"] and "--wait=watcher" in first["command"]
    rc, second, out = playbook(lab, args, tmp_path)
    assert rc == 0, out
    assert second["changed"] is False, second.get("changes")
    assert [h[:2] for h in history(lab, release)] == [(1, "deployed")]


@pytest.mark.parametrize("which", ["helm", "helm4"])
def test_unready_upgrade_is_rolled_back_and_previous_revision_serves(lab, release, tmp_path, which):
    """The upgrade's pod can never be scheduled; atomic rollback restores revision 1."""
    binary = str(getattr(lab, which))
    good = base_args(release, helm_binary=binary)
    assert playbook(lab, good, tmp_path)[0] == 0
    before = deployment(lab, release)

    bad = base_args(
        release, helm_binary=binary, timeout="20s", values={**good["values"], "nodeSelector": UNSATISFIABLE}
    )
    rc, result, out = playbook(lab, bad, tmp_path)
    assert rc != 0, out
    assert "did not become ready within 20s" in result["msg"], result["msg"]
    assert "rolled back automatically, revision 3 is deployed again" in result["msg"], result["msg"]
    assert result["stderr"], "helm's stderr must come back"
    assert result["revision"] == 3 and result["status"] == "deployed"

    revisions = history(lab, release)
    assert [r[:2] for r in revisions] == [(1, "superseded"), (2, "failed"), (3, "deployed")], revisions
    assert "Rollback to 1" in revisions[2][2]

    after = deployment(lab, release)
    assert "nodeSelector" not in after["spec"]["template"]["spec"]
    assert after["spec"]["template"] == before["spec"]["template"]
    # The revision-1 pod kept serving throughout.
    assert after["status"].get("readyReplicas") == 1

    # And the module sees the rolled-back release as matching the good values again.
    rc, again, out = playbook(lab, good, tmp_path)
    assert rc == 0, out
    assert again["changed"] is False, again.get("changes")


def test_absent_uninstalls_once(lab, release, tmp_path):
    assert playbook(lab, base_args(release), tmp_path)[0] == 0
    absent = {"name": release, "namespace": NAMESPACE, "state": "absent"}
    rc, checked, out = playbook(lab, absent, tmp_path, check=True)
    assert rc == 0 and checked["changed"] is True, out
    assert helm(lab, "status", release).returncode == 0
    rc, removed, out = playbook(lab, absent, tmp_path)
    assert rc == 0 and removed["changed"] is True and removed["status"] == "uninstalled", out
    rc, again, out = playbook(lab, absent, tmp_path)
    assert rc == 0 and again["changed"] is False, out
    assert helm(lab, "status", release).returncode != 0


@pytest.mark.parametrize("which", ["helm", "helm4"])
def test_failed_release_without_atomic_is_recovered_on_the_next_run(lab, release, tmp_path, which):
    """With atomic off a failed upgrade stays failed. The next run must not call that converged, and must
    really remove what the failed revision added: helm 3 alone would patch from revision 1 and keep the
    failed revision's nodeSelector, so the module rolls back to the last good revision first."""
    binary = str(getattr(lab, which))
    good = base_args(release, helm_binary=binary)
    assert playbook(lab, good, tmp_path)[0] == 0
    bad = base_args(
        release,
        helm_binary=binary,
        atomic=False,
        timeout="10s",
        values={**good["values"], "nodeSelector": UNSATISFIABLE},
    )
    rc, result, out = playbook(lab, bad, tmp_path)
    assert rc != 0 and result["status"] == "failed", out
    assert "rolled back" not in result["msg"]

    rc, checked, out = playbook(lab, bad, tmp_path, check=True)
    assert rc == 0 and checked["changed"] is True, out
    assert checked["changes"][:2] == [
        "release status is 'failed': would first roll back to revision 1",
        "release status is 'failed', not 'deployed'",
    ]
    assert [h[1] for h in history(lab, release)][-1] == "failed"  # check mode touched nothing

    fixed_values = {**good["values"], "podLabels": {"team": "ml"}}
    rc, fixed, out = playbook(lab, base_args(release, helm_binary=binary, values=fixed_values), tmp_path)
    assert rc == 0, out
    assert fixed["changed"] is True and fixed["rolled_back_to"] == 1
    assert fixed["status"] == "deployed" and fixed["revision"] == 4
    revisions = history(lab, release)
    assert [r[1] for r in revisions] == ["superseded", "failed", "superseded", "deployed"], revisions
    assert "Rollback to 1" in revisions[2][2]
    spec = deployment(lab, release)
    assert "nodeSelector" not in spec["spec"]["template"]["spec"]
    assert spec["spec"]["template"]["metadata"]["labels"]["team"] == "ml"


WITH_CRD = REPO / "tests" / "data" / "charts" / "with-crd"
WIDGETS = "widgets.test.kube-accel.io"


def test_a_first_install_into_a_cluster_without_the_charts_crds(lab, release, tmp_path):
    """Helm's server dry run applies no crds/, so a chart whose templates hold a resource of its own CRD
    (the GPU Operator's ClusterPolicy) could not be rendered on a fresh cluster and the first install failed. On the
    lab's API server without the CRD, the module renders client side and the install applies the CRD first."""
    lab.kubectl_run("delete", "crd", WIDGETS, "--ignore-not-found", "--wait=true")
    args = {"name": release, "namespace": NAMESPACE, "chart": str(WITH_CRD), "create_namespace": True}
    try:
        rc, checked, out = playbook(lab, args, tmp_path, check=True)
        assert rc == 0 and checked["changed"] and checked["rendered"].startswith("client side"), out
        assert lab.kubectl_run("get", "crd", WIDGETS, check=False).returncode != 0  # check mode wrote nothing
        rc, result, out = playbook(lab, args, tmp_path)
        assert rc == 0 and result["changed"], out
        widget = json.loads(lab.kubectl_run("get", "widgets", f"{release}-widget", "-o", "json").stdout)
        assert widget["spec"]["size"] == 1
        # With the CRD now installed, a second run renders on the server again and changes nothing.
        rc, again, out = playbook(lab, args, tmp_path)
        assert rc == 0 and not again["changed"] and "rendered" not in again, out
    finally:
        helm(lab, "uninstall", release, "--wait", "--timeout", "60s")
        lab.kubectl_run("delete", "crd", WIDGETS, "--ignore-not-found", check=False)
