"""Unit tests for module_utils/helm/client.py and helm/release.py, with the helm modules they use (chart, diff,
errors, recovery, values): argv per helm major, the change decision, schema messages, diffs, errors.

helm itself is replaced by a scripted runner only for the decision logic; what real helm does with these argvs
is covered by tests/integration/test_accel_release_lab.py against the lab cluster.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import yaml
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm import chart as hchart
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm import client as ah
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm import diff as hdiff
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm import errors as herr
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm import recovery as hrec
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm import release as hrel
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm import values as hval

TINY = Path(__file__).resolve().parents[1] / "data" / "charts" / "tiny"

MANIFEST_V1 = """---
# Source: tiny/templates/configmap.yaml
apiVersion: v1
kind: ConfigMap
metadata:
  name: rel-tiny
data:
  replicas: "1"
---
# Source: tiny/templates/deployment.yaml
apiVersion: apps/v1
kind: Deployment
metadata:
  name: rel-tiny
spec:
  replicas: 1
"""
MANIFEST_V2 = MANIFEST_V1.replace('replicas: "1"', 'replicas: "2"').replace("replicas: 1", "replicas: 2")


class FakeHelm:
    """Scripted helm: answers by subcommand from a small release model, records every argv."""

    def __init__(self, version="v3.21.4+g1a2b3c4", release=None, upgrade=(0, None, ""), render_manifest=None):
        self.version = version
        self.release = release  # dict: revision, status, chart, app_version, values, manifest
        self.upgrade_result = upgrade
        self.render_manifest = render_manifest
        self.calls: list[list[str]] = []
        self.history: list[dict] = []

    def __call__(self, argv):
        argv = list(argv)
        self.calls.append(argv)
        sub = argv[1]
        if sub == "version":
            return 0, self.version + "\n", ""
        if sub == "list":
            if not self.release:
                return 0, "[]\n", ""
            rel = self.release
            entry = {
                "name": "rel",
                "namespace": "ns",
                "revision": str(rel["revision"]),
                "status": rel["status"],
                "chart": rel["chart"],
                "app_version": rel["app_version"],
            }
            return 0, json.dumps([entry]), ""
        if sub == "get" and argv[2] == "values":
            return 0, json.dumps(self.release["values"] or None), ""
        if sub == "get" and argv[2] == "manifest":
            return 0, self.release["manifest"], ""
        if sub == "upgrade" and "--dry-run=server" in argv:
            values = yaml.safe_load(Path(argv[argv.index("--values") + 1]).read_text())
            manifest = self.render_manifest or (MANIFEST_V2 if values.get("replicas") == 2 else MANIFEST_V1)
            return 0, json.dumps(self._release_json(manifest, "pending-upgrade")), ""
        if sub == "upgrade":
            rc, out, err = self.upgrade_result
            return rc, out if out is not None else json.dumps(self._release_json(MANIFEST_V2, "deployed", 2)), err
        if sub == "history":
            return 0, json.dumps(self.history), ""
        if sub == "rollback":
            # helm copies the good revision's values and manifest into a new deployed revision.
            self.release = deployed_release(revision=len(self.history) + 1)
            return 0, "Rollback was a success! Happy Helming!\n", ""
        if sub == "uninstall":
            self.release = None
            self.history = []
            return 0, 'release "rel" uninstalled\n', ""
        if sub == "show":
            return 0, "name: tiny\nversion: 0.1.0\nappVersion: 1.0.0\n", ""
        raise AssertionError(f"unexpected helm call {argv}")

    @staticmethod
    def _release_json(manifest, status, version=1):
        return {
            "name": "rel",
            "version": version,
            "info": {"status": status},
            "manifest": manifest,
            "chart": {"metadata": {"name": "tiny", "version": "0.1.0", "appVersion": "1.0.0"}},
        }

    def subcommands(self):
        return [" ".join(c[1:3]) if c[1] == "get" else c[1] for c in self.calls]

    def real_upgrades(self):
        return [c for c in self.calls if c[1] == "upgrade" and "--dry-run=server" not in c]


def deployed_release(**over):
    rel = {
        "revision": 1,
        "status": "deployed",
        "chart": "tiny-0.1.0",
        "app_version": "1.0.0",
        "values": {"replicas": 1},
        "manifest": MANIFEST_V1,
    }
    rel.update(over)
    return rel


def spec(**over):
    base = {"name": "rel", "namespace": "ns", "chart": str(TINY), "values": {"replicas": 1}}
    base.update(over)
    return ah.ReleaseSpec(**base)


def present(fake, check=False, diff=False, validate=True, **spec_over):
    helm = ah.Helm("/usr/bin/helm", fake, kubeconfig="/k/config", context="lab")
    return hrel.ensure_present(helm, spec(**spec_over), check_mode=check, diff_mode=diff, validate=validate)


# ---------------------------------------------------------------------------------------------------------- version


@pytest.mark.parametrize(
    ("text", "expected"),
    [("v3.21.4+g1a2b3c4\n", (3, 21, 4)), ("v4.2.4", (4, 2, 4)), ("v3.21", (3, 21, 0))],
)
def test_parse_helm_version(text, expected):
    assert ah.parse_helm_version(text) == expected


def test_helm_2_or_garbage_refused():
    with pytest.raises(herr.HelmError, match="use helm 3 or 4"):
        ah.Helm("/h", FakeHelm(version="v2.17.0"))
    with pytest.raises(herr.HelmError, match="cannot read helm's version"):
        ah.Helm("/h", FakeHelm(version="nonsense"))


# ---------------------------------------------------------------------------------------------------------- argv


def test_upgrade_argv_helm3_atomic_wait():
    helm = ah.Helm("/usr/bin/helm", FakeHelm(), kubeconfig="/k/config", context="lab")
    argv = helm.upgrade_argv(spec(chart_version="0.1.0", timeout="90s"), "/tmp/v.yaml")
    assert argv[:5] == ["/usr/bin/helm", "upgrade", "rel", str(TINY), "--install"]
    assert "--atomic" in argv and "--wait" in argv and "--rollback-on-failure" not in argv
    for flag, value in [
        ("--namespace", "ns"),
        ("--kubeconfig", "/k/config"),
        ("--kube-context", "lab"),
        ("--version", "0.1.0"),
        ("--timeout", "90s"),
        ("--values", "/tmp/v.yaml"),
    ]:
        assert argv[argv.index(flag) + 1] == value
    assert "--reset-values" in argv and "--create-namespace" in argv


def test_upgrade_argv_helm4_rollback_on_failure():
    helm = ah.Helm("/usr/bin/helm4", FakeHelm(version="v4.2.4"))
    argv = helm.upgrade_argv(spec(), "/tmp/v.yaml")
    assert "--rollback-on-failure" in argv and "--wait=watcher" in argv
    assert "--atomic" not in argv and "--wait" not in argv
    assert "--kubeconfig" not in argv and "--kube-context" not in argv


@pytest.mark.parametrize("version", ["v3.21.4", "v4.2.4"])
def test_no_wait_no_atomic_and_no_namespace_creation(version):
    helm = ah.Helm("/h", FakeHelm(version=version))
    argv = helm.upgrade_argv(spec(wait=False, atomic=False, create_namespace=False), "/v")
    assert not [a for a in argv if a.startswith(("--wait", "--atomic", "--rollback"))]
    assert "--create-namespace" not in argv


@pytest.mark.parametrize("version", ["v3.21.4", "v4.2.4"])
def test_dry_run_argv_renders_without_waiting(version):
    argv = ah.Helm("/h", FakeHelm(version=version)).upgrade_argv(spec(), "/v", dry_run=True)
    assert "--dry-run=server" in argv and argv[-2:] == ["--output", "json"]
    assert not [a for a in argv if a.startswith(("--wait", "--atomic", "--rollback", "--timeout"))]


def test_uninstall_argv_per_major():
    assert "--wait" in ah.Helm("/h", FakeHelm()).uninstall_argv("rel", "ns", True, "1m")
    assert "--wait=watcher" in ah.Helm("/h", FakeHelm(version="v4.2.4")).uninstall_argv("rel", "ns", True, "1m")


# ---------------------------------------------------------------------------------------------------------- decide


def desired(**over):
    base = {
        "chart_name": "tiny",
        "chart_version": "0.1.0",
        "app_version": "1.0.0",
        "values": {"replicas": 1},
        "manifest": MANIFEST_V1,
    }
    base.update(over)
    return hdiff.Desired(**base)


def deployed(**over):
    rel = deployed_release(**over)
    return hdiff.Deployed(**rel)


def test_same_release_is_not_a_change():
    decision = hdiff.decide(desired(values={"replicas": 1.0}), deployed())  # JSON numbers: 1 == 1.0
    assert decision == hdiff.Decision(False, [])


def test_not_installed_is_a_change():
    decision = hdiff.decide(desired(), None)
    assert decision.changed and "not installed" in decision.reasons[0]


def test_values_differ_names_the_keys():
    decision = hdiff.decide(desired(values={"replicas": 1, "podLabels": {"a": "b"}}), deployed())
    assert decision.changed
    assert "values differ: podLabels" in decision.reasons


def test_chart_version_differs():
    decision = hdiff.decide(desired(chart_version="0.2.0"), deployed())
    assert decision.reasons == ["chart tiny-0.1.0 -> tiny-0.2.0"]


def test_manifest_differs_names_the_objects():
    decision = hdiff.decide(desired(manifest=MANIFEST_V2), deployed())
    assert decision.reasons == ["manifest differs: ConfigMap/rel-tiny, Deployment/rel-tiny"]


def test_manifest_whitespace_and_comments_do_not_count():
    reformatted = MANIFEST_V1.replace("# Source: tiny/templates/configmap.yaml\n", "") + "\n\n"
    assert not hdiff.decide(desired(manifest=reformatted), deployed()).changed


@pytest.mark.parametrize("status", ["failed", "pending-upgrade", "superseded"])
def test_failed_or_pending_status_is_a_change(status):
    decision = hdiff.decide(desired(), deployed(status=status))
    assert decision.changed and decision.reasons == [f"release status is '{status}', not 'deployed'"]


def test_unrendered_manifest_decides_on_the_rest():
    assert not hdiff.decide(desired(manifest=None), deployed()).changed


# ---------------------------------------------------------------------------------------------------------- ensure


def test_no_change_skips_upgrade():
    fake = FakeHelm(release=deployed_release())
    result = present(fake)
    assert result["changed"] is False
    assert fake.real_upgrades() == []
    assert result["revision"] == 1 and result["status"] == "deployed" and result["chart"] == "tiny-0.1.0"
    assert {"kind": "Deployment", "name": "rel-tiny", "namespace": "ns"} in result["objects"]


def test_change_runs_upgrade_and_returns_new_revision():
    fake = FakeHelm(release=deployed_release())
    result = present(fake, values={"replicas": 2})
    assert result["changed"] is True
    assert len(fake.real_upgrades()) == 1
    assert result["command"] == fake.real_upgrades()[0]
    assert result["revision"] == 2 and result["status"] == "deployed"
    assert "values differ: replicas" in result["changes"]


def test_check_mode_reports_without_upgrading():
    fake = FakeHelm(release=deployed_release())
    result = present(fake, check=True, diff=True, values={"replicas": 2})
    assert result["changed"] is True and fake.real_upgrades() == []
    assert result["revision"] == 1
    assert "--atomic" in result["command"]
    text = hdiff.unified_diff(result["diff"])
    assert "-replicas: 1\n" in text and "+replicas: 2\n" in text  # values
    assert '-  replicas: "1"' in text and '+  replicas: "2"' in text  # manifest


def test_pending_release_is_changed_without_rendering():
    fake = FakeHelm(release=deployed_release(revision=2, status="pending-upgrade"))
    fake.history = [
        {"revision": 1, "status": "deployed", "updated": "2026-11-23T10:00:00Z"},
        {"revision": 2, "status": "pending-upgrade", "updated": "2026-11-23T10:00:00Z"},
    ]
    result = present(fake, check=True)
    assert result["changed"] and "would roll back to revision 1 first" in result["changes"][0]
    assert "release status is 'pending-upgrade', not 'deployed'" in result["changes"]
    assert not [c for c in fake.calls if "--dry-run=server" in c]


def test_failed_rollout_reports_rollback_and_stderr():
    stderr = (
        "Error: UPGRADE FAILED: release rel failed, and has been rolled back due to atomic being set: "
        "context deadline exceeded\n"
    )
    fake = FakeHelm(release=deployed_release(), upgrade=(1, "", stderr))
    with pytest.raises(herr.HelmError) as err:
        present(fake, values={"replicas": 2}, timeout="20s")
    # After the failed attempt helm list shows the rollback revision as deployed; the fake still says 1.
    assert "did not become ready within 20s" in err.value.msg
    assert "rolled back automatically, revision 1 is deployed again" in err.value.msg
    assert err.value.stderr == stderr and err.value.command[1] == "upgrade"


def test_unreachable_cluster_is_named():
    def runner(argv):
        if argv[1] == "version":
            return 0, "v3.21.4", ""
        return 1, "", 'Error: Kubernetes cluster unreachable: Get "https://127.0.0.1:6443/version": connection refused'

    helm = ah.Helm("/h", runner, kubeconfig="/lab/kubeconfig")
    with pytest.raises(herr.HelmError) as err:
        hrel.ensure_present(helm, spec(), check_mode=False, diff_mode=False, validate=False)
    assert "cannot reach the Kubernetes cluster (kubeconfig /lab/kubeconfig)" in err.value.msg
    assert "connection refused" in err.value.msg and "connection refused" in err.value.stderr


def test_absent_is_idempotent_and_uninstalls_when_present():
    fake = FakeHelm()
    helm = ah.Helm("/h", fake)
    assert hrel.ensure_absent(helm, "rel", "ns", check_mode=False, diff_mode=False, wait=True, timeout="1m") == {
        "changed": False,
        "status": "absent",
        "objects": [],
    }
    fake = FakeHelm(release=deployed_release())
    helm = ah.Helm("/h", fake)
    checked = hrel.ensure_absent(helm, "rel", "ns", check_mode=True, diff_mode=True, wait=True, timeout="1m")
    assert checked["changed"] and "uninstall" not in fake.subcommands()
    assert checked["diff"][1]["after"] == "" and "Deployment" in checked["diff"][1]["before"]
    result = hrel.ensure_absent(helm, "rel", "ns", check_mode=False, diff_mode=False, wait=True, timeout="1m")
    assert result["changed"] and result["status"] == "uninstalled" and "uninstall" in fake.subcommands()


# ---------------------------------------------------------------------------------------------------------- schema


def test_schema_failure_names_field_value_and_constraint():
    fake = FakeHelm()
    with pytest.raises(herr.HelmError) as err:
        present(fake, values={"replicas": 9, "mode": "mig", "bogus": 1})
    msg = err.value.msg
    assert "chart tiny-0.1.0's values.schema.json (3 problems)" in msg
    assert "replicas: 9 is above the maximum 5 (Number of Deployment replicas (0-5).)" in msg
    assert 'mode: "mig" is not one of the allowed values ["vgpu", "pgpu", "mps"]' in msg
    assert "'bogus' was unexpected" in msg
    # Nothing reached helm beyond the version probe.
    assert fake.subcommands() == ["version"]


def test_schema_paths_inside_arrays_and_required_fields():
    schema = {
        "type": "object",
        "required": ["pools"],
        "properties": {
            "pools": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "name": {"type": "string"},
                        "gpus": {"type": "integer", "minimum": 1, "description": "GPUs per node"},
                    },
                },
            }
        },
    }
    lines = hval.schema_errors(schema, {"pools": [{"name": "a", "gpus": 1}, {"gpus": 0}]})
    assert lines == [
        "pools[1]: 'name' is a required property",
        "pools[1].gpus: 0 is below the minimum 1 (GPUs per node)",
    ]
    assert hval.schema_errors(schema, {}) == ["(root): 'pools' is a required property"]


def test_chart_defaults_satisfy_schema_before_user_values():
    local = hchart.read_local_chart(str(TINY))
    assert hval.schema_errors(local.schema, hval.coalesce(local.defaults, {})) == []
    # A null removes a default, as helm's coalescing does.
    assert "image" not in hval.coalesce(local.defaults, {"image": None})


def test_packaged_chart_is_read(tmp_path):
    import tarfile

    archive = tmp_path / "tiny-0.1.0.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(TINY, arcname="tiny")
    local = hchart.read_local_chart(str(archive))
    assert local.metadata["version"] == "0.1.0" and local.schema["additionalProperties"] is False


# ---------------------------------------------------------------------------------------------------------- values


def test_values_template_rendered_and_merged_under_values(tmp_path):
    template = tmp_path / "values.yaml.j2"
    template.write_text(
        "replicas: {{ pools | length }}\n"
        "nodeSelector:\n  pool: {{ pools[0] }}\n  zone: a\n"
        "podLabels: {{ extra | to_json }}\n"
    )
    merged = hrel.desired_values(
        {"nodeSelector": {"zone": "b"}}, str(template), {"pools": ["p1", "p2"], "extra": {"x": "1"}}
    )
    assert merged == {"replicas": 2, "nodeSelector": {"pool": "p1", "zone": "b"}, "podLabels": {"x": "1"}}


def test_values_template_undefined_variable_is_a_clear_error(tmp_path):
    template = tmp_path / "values.yaml.j2"
    template.write_text("replicas: {{ missing }}\n")
    with pytest.raises(herr.HelmError, match=r"values_template .*values.yaml.j2.*'missing' is undefined"):
        hrel.desired_values({}, str(template), {})
    template.write_text("- a list\n")
    with pytest.raises(herr.HelmError, match="must render to a YAML mapping"):
        hrel.desired_values({}, str(template), {})


def test_manifest_objects_namespaces():
    manifest = MANIFEST_V1 + "---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: x\n"
    manifest += "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: s\n  namespace: other\n"
    assert hdiff.manifest_objects(manifest, "ns") == [
        {"kind": "ConfigMap", "name": "rel-tiny", "namespace": "ns"},
        {"kind": "Deployment", "name": "rel-tiny", "namespace": "ns"},
        {"kind": "Namespace", "name": "x", "namespace": None},
        {"kind": "Service", "name": "s", "namespace": "other"},
    ]


# ---------------------------------------------------------------------------------------------------------- errors


def test_helm_missing_is_explained(tmp_path, monkeypatch):
    monkeypatch.setattr(ah, "TOOLCHAIN_BIN", str(tmp_path))
    with pytest.raises(herr.HelmError, match=r"helm binary 'helm' not found on PATH nor in .*set helm_binary"):
        ah.find_helm("helm", which=lambda _name: None)
    with pytest.raises(herr.HelmError, match="does not exist or is not executable"):
        ah.find_helm(str(tmp_path / "nohelm"))
    cached = tmp_path / "helm4"
    cached.write_text("#!/bin/sh\n")
    cached.chmod(0o755)
    assert ah.find_helm("helm4", which=lambda _name: None) == str(cached)


@pytest.mark.parametrize(
    ("stderr", "expected"),
    [
        (
            'Error: Kubernetes cluster unreachable: Get "https://127.0.0.1:1/version": dial tcp: connection refused',
            "cannot reach the Kubernetes cluster (kubeconfig /kc, context lab)",
        ),
        ('Error: context "lab" does not exist', "kube context 'lab' does not exist in kubeconfig /kc"),
        (
            "Error: UPGRADE FAILED: another operation (install/upgrade/rollback) is in progress",
            "locked by another helm operation",
        ),
        ("Error: template: tiny/templates/x.yaml:3: bad", "x failed: Error: template: tiny/templates/x.yaml:3: bad"),
        ("", "x failed: helm exited with rc 1 and no message"),
    ],
)
def test_explain_failure(stderr, expected):
    assert expected in herr.explain_failure("x", 1, stderr, "/kc", "lab")


def test_diff_text_is_readable_yaml():
    entries = hdiff.build_diff("rel", deployed(values={"a": {"b": 1}}), desired(values={"a": {"b": 2}, "c": [1]}))
    text = hdiff.unified_diff(entries)
    assert "--- rel values (revision 1)\n+++ rel values (desired)\n" in text
    assert "-  b: 1\n+  b: 2\n" in text and "+c:\n+- 1\n" in text
    assert entries[1]["before_header"] == "rel manifest (revision 1)"
    assert "rel manifest" not in text  # identical manifests add no hunk
    fresh = hdiff.build_diff("rel", None, desired())
    assert fresh[0]["before"] == "" and fresh[1]["after"].startswith("---")


def test_rollout_failure_says_where_the_release_stands():
    timeout_err = "Error: UPGRADE FAILED: context deadline exceeded"
    rolled = herr.explain_rollout_failure("rel", timeout_err, True, "20s", deployed(), deployed(revision=3))
    assert rolled == (
        "helm upgrade of release 'rel' failed: its resources did not become ready within 20s; rolled back "
        "automatically, revision 3 is deployed again. helm said: Error: UPGRADE FAILED: context deadline exceeded"
    )
    removed = herr.explain_rollout_failure("rel", "Error: INSTALLATION FAILED: boom", True, "1m", None, None)
    assert removed.startswith("helm install of release 'rel' failed: helm reported an error; the failed install")
    stuck = herr.explain_rollout_failure("rel", "x", True, "1m", deployed(), deployed(revision=2, status="failed"))
    assert "did not restore a deployed revision (revision 2 is failed" in stuck
    plain = herr.explain_rollout_failure("rel", "x", False, "1m", deployed(), deployed(revision=2, status="failed"))
    assert "rolled back" not in plain and "rollback" not in plain


@pytest.mark.parametrize(("version", "has_all"), [("v3.21.4", True), ("v4.2.4", False)])
def test_release_lookup_sees_every_state(version, has_all):
    """helm 3 hides pending releases from `list` without --all; helm 4 has no --all and lists every state."""
    fake = FakeHelm(version=version, release=deployed_release(status="pending-install"))
    found = ah.Helm("/h", fake).deployed("rel", "ns")
    assert found.status == "pending-install"
    listing = next(c for c in fake.calls if c[1] == "list")
    assert ("--all" in listing) is has_all


def test_uninstalled_with_kept_history_counts_as_absent():
    fake = FakeHelm(release=deployed_release(status="uninstalled"))
    assert ah.Helm("/h", fake).deployed("rel", "ns") is None


def test_failed_release_is_rolled_back_to_last_good_revision_before_upgrading():
    fake = FakeHelm(
        release=deployed_release(revision=2, status="failed", values={"replicas": 1, "nodeSelector": {"x": "y"}})
    )
    fake.history = [{"revision": 1, "status": "superseded"}, {"revision": 2, "status": "failed"}]
    checked = present(fake, check=True)
    assert (
        checked["changed"]
        and checked["changes"][0] == "release status is 'failed': would first roll back to revision 1"
    )
    assert "rollback" not in fake.subcommands() and checked["rollback_command"][1:4] == ["rollback", "rel", "1"]

    result = present(fake)  # desired values equal revision 1's: the rollback alone converges
    assert fake.subcommands().count("rollback") == 1 and fake.real_upgrades() == []
    assert result["changed"] is True and result["rolled_back_to"] == 1 and result["revision"] == 3
    assert result["changes"] == ["release status was 'failed': rolled back to revision 1"]


def test_failed_first_install_is_upgraded_in_place():
    fake = FakeHelm(release=deployed_release(status="failed"))
    fake.history = [{"revision": 1, "status": "failed"}]
    result = present(fake)
    assert "rollback" not in fake.subcommands() and len(fake.real_upgrades()) == 1
    assert result["changed"] and "rolled_back_to" not in result


@pytest.mark.parametrize(("version", "wait_flag"), [("v3.21.4", "--wait"), ("v4.2.4", "--wait=watcher")])
def test_rollback_argv(version, wait_flag):
    argv = ah.Helm("/h", FakeHelm(version=version)).rollback_argv("rel", "ns", 4, True, "2m")
    assert argv == ["/h", "rollback", "rel", "4", "--namespace", "ns", wait_flag, "--timeout", "2m"]


# ---------------------------------------------------------------------------------------------------------- several


def test_release_specs_take_shared_settings_and_ignore_other_keys():
    items = [{"name": "a", "chart": "/c/pgpu", "values": {"x": 1}, "pools": ["p"], "key": "pgpu"},
             {"name": "b", "chart": "/c/mps", "namespace": "other", "chart_version": "0.2.0"}]
    specs = hrel.release_specs(items, namespace="ns", wait=True, timeout="2m", atomic=False, create_namespace=True)
    assert specs == [
        ah.ReleaseSpec(name="a", namespace="ns", chart="/c/pgpu", values={"x": 1}, timeout="2m", atomic=False),
        ah.ReleaseSpec(name="b", namespace="other", chart="/c/mps", chart_version="0.2.0", timeout="2m",
                       atomic=False),
    ]


def test_release_specs_report_every_problem():
    items = [{"name": "a"}, {"name": "b", "chart": "c", "values": ["x"]}, {"name": "b", "chart": "c"}]
    with pytest.raises(herr.HelmError) as err:
        hrel.release_specs(items, namespace="ns")
    assert err.value.msg == (
        "invalid releases: releases[0] needs a name and a chart (got name='a', chart=None); "
        "release b: values must be a mapping, not list; release b is listed twice")


class ManyReleases:
    """Scripted helm for several releases, none installed yet; counts upgrades in flight at once."""

    def __init__(self, failing=()):
        self.failing = set(failing)
        self.lock = threading.Lock()
        self.in_flight = self.peak = 0

    def __call__(self, argv):
        argv = list(argv)
        if argv[1] == "version":
            return 0, "v3.21.4", ""
        if argv[1] == "list":
            return 0, "[]", ""
        name = argv[2]
        if "--dry-run=server" in argv:
            return 0, json.dumps(FakeHelm._release_json(MANIFEST_V1.replace("rel-tiny", name), "pending-install")), ""
        with self.lock:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
        time.sleep(0.05)  # the rollout wait
        with self.lock:
            self.in_flight -= 1
        if name in self.failing:
            return 1, "", f"Error: release {name} failed: context deadline exceeded\n"
        return 0, json.dumps(FakeHelm._release_json(MANIFEST_V1.replace("rel-tiny", name), "deployed")), ""


def test_releases_run_side_by_side_and_one_failure_does_not_stop_the_others():
    fake = ManyReleases(failing={"r2"})
    helm = ah.Helm("/h", fake)
    specs = [spec(name=f"r{i}") for i in range(6)]
    results, failures = hrel.ensure_each_present(helm, specs, check_mode=False, diff_mode=True, validate=False,
                                               workers=3)
    assert list(results) == ["r0", "r1", "r3", "r4", "r5"]
    assert all(r["changed"] and r["status"] == "deployed" and r["diff"] for r in results.values())
    assert list(failures) == ["r2"] and "context deadline exceeded" in failures["r2"].stderr
    assert 1 < fake.peak <= 3


def test_unexpected_errors_become_messages_per_release():
    def runner(argv):
        if argv[1] == "version":
            return 0, "v3.21.4", ""
        raise RuntimeError("boom")

    results, failures = hrel.ensure_each_present(ah.Helm("/h", runner), [spec()], check_mode=True, diff_mode=False,
                                               validate=False)
    assert results == {}
    assert failures["rel"].msg == "unexpected error: boom" and "RuntimeError" in failures["rel"].extra["exception"]


# ---------------------------------------------------------------------------------------------------------- pending


NOW = hrec.parse_helm_time("2026-11-23T12:00:00Z")


def at(seconds_ago: float) -> str:
    """helm history's ``updated`` of a revision written ``seconds_ago`` before NOW, with nanoseconds as helm writes."""
    from datetime import timedelta  # noqa: PLC0415

    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%S.%f") + "123Z"


def pending_present(fake, check=False, diff=False, holder=None, **spec_over):
    helm = ah.Helm("/usr/bin/helm", fake, kubeconfig="/k/config", context="lab")
    return hrel.ensure_present(helm, spec(timeout="5m", **spec_over), check_mode=check, diff_mode=diff,
                             validate=False, run_lock=lambda: holder, clock=lambda: NOW)


def test_helm_time_and_durations():
    assert hrec.parse_helm_time("2026-11-23T17:26:43.649038325Z").microsecond == 649038
    assert hrec.parse_helm_time("2026-11-23T17:26:43+02:00").utcoffset().total_seconds() == 7200
    assert hrec.parse_helm_time("Mon Nov 23 17:26:53 2026") is None
    assert hrec.duration_seconds("1h30m") == 5400 and hrec.duration_seconds("90s") == 90
    assert hrec.duration_seconds("1.5m") == 90


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        ([{"revision": 1, "status": "pending-install", "updated": at(400)}], ("pending-install", 1, 400, None)),
        (
            [{"revision": 1, "status": "superseded", "updated": at(900)},
             {"revision": 2, "status": "deployed", "updated": at(800)},
             {"revision": 3, "status": "pending-upgrade", "updated": at(301)}],
            ("pending-upgrade", 3, 301, 2),
        ),
        (
            [{"revision": 1, "status": "superseded", "updated": at(900)},
             {"revision": 2, "status": "failed", "updated": at(800)},
             {"revision": 3, "status": "pending-rollback", "updated": at(10)}],
            ("pending-rollback", 3, 10, 1),
        ),
    ],
)
def test_pending_of_reads_the_newest_revision_and_what_to_go_back_to(entries, expected):
    found = hrec.pending_of(entries, NOW)
    assert (found.status, found.revision, round(found.age), found.good_revision) == expected
    assert found.action == ("reinstall" if expected[3] is None else "rollback")


def test_not_pending_when_the_newest_revision_is_settled():
    entries = [{"revision": 1, "status": "pending-upgrade", "updated": at(900)},
               {"revision": 2, "status": "deployed", "updated": at(800)}]
    assert hrec.pending_of(entries, NOW) is None
    assert hrec.pending_of([], NOW) is None


@pytest.mark.parametrize(
    ("age", "holder", "alive"),
    [
        (301, None, []),  # older than the 5m timeout, nobody holds the lock: dead
        (299, None, ["within the operation's timeout (5m00s)"]),
        (301, "ops@ctl pid 7 started 2026-11-23T11:55:00Z", ["another kube-accel run holds the run lock: ops@ctl"]),
        (None, None, ["cannot be read"]),
    ],
)
def test_still_alive_decision(age, holder, alive):
    reasons = hrec.still_alive(hrec.Pending("pending-upgrade", 3, age, 2), 300, holder)
    assert len(reasons) == len(alive)
    for reason, fragment in zip(reasons, alive, strict=True):
        assert fragment in reason


def test_stale_pending_install_is_uninstalled_and_installed_again():
    fake = FakeHelm(release=deployed_release(status="pending-install", values={}))
    fake.history = [{"revision": 1, "status": "pending-install", "updated": at(400)}]
    result = pending_present(fake, diff=True)
    assert fake.subcommands()[-3:] == ["uninstall", "upgrade", "upgrade"]  # uninstall, render, install
    uninstall = next(c for c in fake.calls if c[1] == "uninstall")
    assert uninstall[2] == "rel" and "--wait" in uninstall
    assert len(fake.real_upgrades()) == 1 and result["changed"] is True
    rec = result["recovered"]
    assert (rec["status"], rec["revision"], rec["age_s"], rec["action"]) == ("pending-install", 1, 400, "reinstall")
    assert rec["command"] == uninstall and rec["check_mode"] is False
    assert result["changes"][0].startswith("release status is 'pending-install' (revision 1, 6m40s old")
    assert result["changes"][0].endswith("uninstalled, installing again")
    prepared = result["diff"][0]["prepared"]
    assert "found pending-install revision 1, 6m40s old" in prepared and "$ /usr/bin/helm uninstall rel" in prepared


def test_stale_pending_upgrade_is_rolled_back_then_upgraded():
    fake = FakeHelm(release=deployed_release(revision=2, status="pending-upgrade"))
    fake.history = [{"revision": 1, "status": "deployed", "updated": at(900)},
                    {"revision": 2, "status": "pending-upgrade", "updated": at(600)}]
    result = pending_present(fake, values={"replicas": 2})
    rollback = next(c for c in fake.calls if c[1] == "rollback")
    assert rollback[1:4] == ["rollback", "rel", "1"]
    assert fake.subcommands().index("rollback") < fake.subcommands().index("upgrade")
    assert len(fake.real_upgrades()) == 1
    assert result["rolled_back_to"] == 1 and result["recovered"]["action"] == "rollback"
    assert result["changes"][0].endswith("rolled back to revision 1")
    assert "values differ: replicas" in result["changes"]


def test_check_mode_says_what_recovery_would_do_and_runs_nothing():
    fake = FakeHelm(release=deployed_release(status="pending-install"))
    fake.history = [{"revision": 1, "status": "pending-install", "updated": at(400)}]
    result = pending_present(fake, check=True, diff=True)
    assert "uninstall" not in fake.subcommands() and not fake.real_upgrades()
    assert result["changed"] is True and result["recovered"]["check_mode"] is True
    assert result["changes"][0].endswith("would uninstall and install again")
    assert "Recovery (would)" in result["diff"][0]["prepared"]


@pytest.mark.parametrize(
    ("age", "holder", "why", "command"),
    [
        (30, None, "written 30s ago, within the operation's timeout (5m00s)", "/usr/bin/helm rollback rel 1"),
        (900, "ops@ctl pid 7 started 2026-11-23T11:00:00Z", "another kube-accel run holds the run lock: ops@ctl pid 7",
         "/usr/bin/helm rollback rel 1"),
    ],
)
def test_live_or_unprovable_pending_fails_with_what_to_run(age, holder, why, command):
    fake = FakeHelm(release=deployed_release(revision=2, status="pending-upgrade"))
    fake.history = [{"revision": 1, "status": "deployed", "updated": at(900)},
                    {"revision": 2, "status": "pending-upgrade", "updated": at(age)}]
    with pytest.raises(herr.HelmError) as caught:
        pending_present(fake, holder=holder)
    err = caught.value
    assert "release 'rel' (namespace ns) is pending-upgrade at revision 2" in err.msg
    assert why in err.msg and f"run: {command} --namespace ns --kubeconfig /k/config" in err.msg
    assert err.extra["lock_holder"] == holder and err.extra["revision_age_s"] == age
    assert err.extra["status"] == "pending-upgrade"
    assert "rollback" not in fake.subcommands() and not fake.real_upgrades()


def test_unreadable_lock_proves_nothing():
    fake = FakeHelm(release=deployed_release(status="pending-install"))
    fake.history = [{"revision": 1, "status": "pending-install", "updated": at(4000)}]

    def broken():
        raise RuntimeError("connection refused")

    helm = ah.Helm("/usr/bin/helm", fake)
    with pytest.raises(herr.HelmError,
                       match=r"could not be read: connection refused.*run: /usr/bin/helm uninstall rel"):
        hrel.ensure_present(helm, spec(), check_mode=False, diff_mode=False, validate=False, run_lock=broken,
                          clock=lambda: NOW)
    assert "uninstall" not in fake.subcommands()


@pytest.mark.parametrize("version", ["v3.21.4", "v4.2.4"])
def test_history_is_read_as_json_for_both_majors(version):
    fake = FakeHelm(version=version)
    fake.history = [{"revision": 1, "status": "deployed", "updated": at(5)}]
    assert ah.Helm("/h", fake).history("rel", "ns")[0]["status"] == "deployed"
    argv = next(c for c in fake.calls if c[1] == "history")
    assert argv[-2:] == ["--output", "json"]


class CrdLessHelm(FakeHelm):
    """A cluster without the chart's CRDs: helm's server dry run cannot render the chart's custom resources (as
    helm v3.21 answers for the GPU Operator's ClusterPolicy on a fresh cluster), `helm template` renders them."""

    def __call__(self, argv):
        argv = list(argv)
        if argv[1] == "upgrade" and "--dry-run=server" in argv:
            self.calls.append(argv)
            return 1, "", ('Error: unable to build kubernetes objects from new release manifest: resource mapping not '
                           'found for name: "cluster-policy" namespace: "" from "": no matches for kind '
                           '"ClusterPolicy" in version "nvidia.com/v1"\nensure CRDs are installed first\n')
        if argv[1] == "template":
            self.calls.append(argv)
            return 0, MANIFEST_V1, ""
        return super().__call__(argv)


def test_a_first_install_renders_client_side_when_the_cluster_lacks_the_charts_crds():
    """A first install with the GPU Operator failed on a fresh cluster, since the server dry run applies
    no crds/; the install itself applies them first, so it goes ahead, its diff rendered by `helm template`."""
    fake = CrdLessHelm()
    result = present(fake, diff=True)
    assert result["changed"] and result["rendered"].startswith("client side")
    assert result["chart"] == "tiny-0.1.0" and len(fake.real_upgrades()) == 1
    assert [c for c in fake.calls if c[1] == "template"][0][:4] == ["/usr/bin/helm", "template", "rel", str(TINY)]
    fake = CrdLessHelm()
    checked = present(fake, check=True)
    assert checked["changed"] and checked["objects"] and not fake.real_upgrades()


def test_an_upgrade_does_not_hide_a_missing_crd():
    """A deployed release whose dry run misses a CRD is not a first install: the error stands."""
    fake = CrdLessHelm(release=deployed_release())
    with pytest.raises(herr.HelmError, match="ensure CRDs are installed first|no matches for kind"):
        present(fake)
    assert not fake.real_upgrades()
