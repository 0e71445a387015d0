"""Unit tests for accel_maintenance: cordon ownership decisions over Node objects, the optimistic write against an
in-memory API server with the same resourceVersion rule, and the GPU checks before a node returns to service. The
real API server is covered by tests/integration/test_rolling_maintenance_lab.py; GPU facts here are shaped like
the nvidia_gpu_facts module's output (tests/data/nvml snapshots, no GPU)."""

from __future__ import annotations

import json

import pytest
from ansible_collections.kube_accel.gpu.plugins.module_utils.cluster import maintenance as am
from ansible_collections.kube_accel.gpu.plugins.module_utils.common import constants as accel_constants

NOW = "2026-11-23T12:00:00Z"
OURS = "ops@ctl-1 pid 100 started 2026-11-23T11:59:00Z"
DEAD = "ops@ctl-1 pid 90 started 2026-11-23T10:00:00Z"
KEY = am.CORDONED_BY


def node(unschedulable=False, annotation=None, rv="7"):
    annotations = {"other.example/keep": "x"}
    if annotation is not None:
        annotations[KEY] = annotation if isinstance(annotation, str) else json.dumps(annotation)
    return {
        "metadata": {"name": "gpu-1", "resourceVersion": rv, "annotations": annotations},
        "spec": {"unschedulable": unschedulable} if unschedulable else {},
    }


def test_annotation_keys_come_from_the_product_prefix():
    assert f"{accel_constants.LABEL_PREFIX}/cordoned-by" == KEY
    assert f"{accel_constants.LABEL_PREFIX}/last-maintenance" == am.LAST_MAINTENANCE


@pytest.mark.parametrize(
    ("current", "owner"),
    [
        (None, None),
        (node(), None),
        (node(unschedulable=True), "other"),
        (node(unschedulable=True, annotation={"holder": DEAD}), "kube-accel"),
        # Someone uncordoned a node kube-accel had cordoned: it is schedulable, the leftover annotation means nothing.
        (node(annotation={"holder": DEAD}), None),
    ],
)
def test_ownership(current, owner):
    assert am.ownership(current)["owner"] == owner
    assert am.ownership(current)["found"] is (current is not None)


def test_cordon_a_schedulable_node_records_who_and_why_with_its_resource_version():
    patch, result = am.plan_cordon(node(), OURS, "host roles: driver pin changed", NOW)
    assert patch["spec"] == {"unschedulable": True}
    assert patch["metadata"]["resourceVersion"] == "7"
    record = json.loads(patch["metadata"]["annotations"][KEY])
    assert record == {"holder": OURS, "reason": "host roles: driver pin changed", "cordoned_at": NOW}
    assert result["cordoned"] and result["owner"] == "kube-accel"


def test_cordon_leaves_an_operators_cordon_alone():
    patch, result = am.plan_cordon(node(unschedulable=True), OURS, "r", NOW)
    assert patch is None
    assert result == {"found": True, "owner": "other", "cordoned": False}


def test_cordon_recognises_the_cordon_a_dead_run_left():
    patch, result = am.plan_cordon(
        node(unschedulable=True, annotation={"holder": DEAD, "reason": "r0"}), OURS, "r", NOW
    )
    assert patch is None
    assert result["owner"] == "kube-accel" and result["earlier"]["holder"] == DEAD


def test_cordon_of_this_runs_own_cordon_is_idempotent():
    patch, result = am.plan_cordon(node(unschedulable=True, annotation={"holder": OURS}), OURS, "r", NOW)
    assert patch is None and "earlier" not in result


def test_cordon_of_a_missing_node_is_not_an_error():
    assert am.plan_cordon(None, OURS, "r", NOW) == (None, {"found": False, "owner": None, "cordoned": False})


def test_uncordon_lifts_only_kube_accels_cordon_and_keeps_the_record():
    cordoned = node(unschedulable=True, annotation={"holder": DEAD, "reason": "r0", "cordoned_at": "t0"})
    patch, result = am.plan_uncordon(cordoned, {"gpus": "8 GPU(s)"}, NOW)
    assert patch["spec"] == {"unschedulable": False}
    assert patch["metadata"]["annotations"][KEY] is None
    last = json.loads(patch["metadata"]["annotations"][am.LAST_MAINTENANCE])
    assert last == {
        "holder": DEAD,
        "reason": "r0",
        "cordoned_at": "t0",
        "uncordoned_at": NOW,
        "checks": {"gpus": "8 GPU(s)"},
    }
    assert result["uncordoned"]

    for other in (node(unschedulable=True), node(), None):
        assert am.plan_uncordon(other, None, NOW)[0] is None


def test_a_foreign_annotation_value_is_still_kube_accels_cordon():
    """Someone wrote the key by hand: the cordon is still kube-accel's to lift (the key is the contract)."""
    assert am.ownership(node(unschedulable=True, annotation="by hand"))["record"] == {"raw": "by hand"}


class FakeNodes:
    """One Node in memory; a patch must carry the resourceVersion last read, as the API server requires."""

    def __init__(self, current):
        self.current = current
        self.writes = []
        self.before_write = None  # an operator acting between our read and our write

    def read(self):
        return json.loads(json.dumps(self.current)) if self.current else None

    def write(self, patch):
        if self.before_write:
            self.before_write(), setattr(self, "before_write", None)
        if patch["metadata"].get("resourceVersion") != self.current["metadata"]["resourceVersion"]:
            raise am.ConflictError("409")
        self.current = am._apply_patch(self.current, patch)
        self.current["metadata"]["resourceVersion"] = str(int(self.current["metadata"]["resourceVersion"]) + 1)
        self.writes.append(patch)
        return self.current


def test_converge_cordons_once_and_then_reports_no_change():
    api = FakeNodes(node())
    first = am.converge(api.read, api.write, lambda n: am.plan_cordon(n, OURS, "r", NOW))
    assert first["changed"] and api.current["spec"]["unschedulable"]
    assert first["diff"]["before"] == {"unschedulable": False}
    assert first["diff"]["after"]["unschedulable"] is True and KEY in first["diff"]["after"]
    assert api.current["metadata"]["annotations"]["other.example/keep"] == "x"
    again = am.converge(api.read, api.write, lambda n: am.plan_cordon(n, OURS, "r", NOW))
    assert not again["changed"] and len(api.writes) == 1


def test_an_operator_cordon_landing_between_read_and_write_is_not_taken_over():
    api = FakeNodes(node())

    def operator_cordons():
        api.current["spec"]["unschedulable"] = True
        api.current["metadata"]["resourceVersion"] = "8"

    api.before_write = operator_cordons
    result = am.converge(api.read, api.write, lambda n: am.plan_cordon(n, OURS, "r", NOW))
    assert result["owner"] == "other" and not result["changed"]
    assert KEY not in api.current["metadata"]["annotations"] and api.writes == []


def test_check_mode_writes_nothing_and_plans_the_uncordon_from_the_planned_cordon():
    api = FakeNodes(node())
    cordon = am.converge(api.read, api.write, lambda n: am.plan_cordon(n, OURS, "r", NOW), check_mode=True)
    assert cordon["changed"] and api.writes == []
    uncordon = am.converge(
        lambda: am.planned_cordon(api.read(), cordon),
        api.write,
        lambda n: am.plan_uncordon(n, None, NOW),
        check_mode=True,
    )
    assert uncordon["changed"] and uncordon["uncordoned"] and api.writes == []
    # Without a planned cordon (the node was an operator's, or kube-accel did not cordon) nothing is planned.
    assert not am.converge(api.read, api.write, lambda n: am.plan_uncordon(n, None, NOW), check_mode=True)["changed"]


def test_lookup_reports_missing_nodes_and_owners():
    nodes = {"a": node(), "b": node(unschedulable=True)}
    found = am.lookup(nodes.get, ["b", "a", "c", "a"])
    assert found["a"]["owner"] is None and found["b"]["owner"] == "other" and not found["c"]["found"]


A100_MIG = {
    "count": 1,
    "driver_version": "535.129.03",
    "source": "snapshot:a100-80gb-mig",
    "gpus": [{"index": 0, "name": "NVIDIA A100 80GB PCIe", "mig_mode_current": True, "mig_mode_pending": True}],
}


def test_gpu_checks_pass_when_the_host_matches_the_plan():
    assert am.gpu_problems(A100_MIG, {"count": 1, "driver_branch": "535", "mig": True}) == []


@pytest.mark.parametrize(
    ("gpus", "expect", "problem"),
    [
        (
            {**A100_MIG, "count": 0, "gpus": [], "reason": "NVML: Driver/library version mismatch"},
            {"count": 1},
            "NVML sees 0 GPU(s) (NVML: Driver/library version mismatch), 1 before the change",
        ),
        (
            {"count": 0, "gpus": [], "reason": "libnvidia-ml.so not found"},
            {},
            "NVML sees no GPU: libnvidia-ml.so not found",
        ),
        (A100_MIG, {"driver_branch": "550"}, "driver 535.129.03 loaded, branch 550 expected"),
        (A100_MIG, {"driver_version": "535.183.01"}, "driver 535.129.03 loaded, 535.183.01 expected"),
        (
            {**A100_MIG, "gpus": [{**A100_MIG["gpus"][0], "mig_mode_current": False, "mig_mode_pending": False}]},
            {"mig": True},
            "GPU 0 (NVIDIA A100 80GB PCIe): MIG mode off, the pool's geometry needs it on",
        ),
        (
            {**A100_MIG, "gpus": [{**A100_MIG["gpus"][0], "mig_mode_pending": False}]},
            {"mig": True},
            "GPU 0 (NVIDIA A100 80GB PCIe): MIG mode change pending (GPU reset or reboot needed)",
        ),
    ],
)
def test_gpu_checks_name_what_keeps_the_node_out_of_service(gpus, expect, problem):
    assert am.gpu_problems(gpus, expect) == [problem]


@pytest.mark.parametrize(
    ("current", "pending", "problem"),
    [
        (True, True, "GPU 0 (NVIDIA A100 80GB PCIe): MIG mode on, the pool uses no MIG"),
        (True, False,
         "GPU 0 (NVIDIA A100 80GB PCIe): MIG mode still on until a GPU reset or reboot, the pool uses no MIG"),
        (False, False, None),
        (None, None, None),  # not MIG-capable
    ],
)
def test_a_pool_without_mig_wants_mig_off_on_every_gpu(current, pending, problem):
    """A geometry removed from the pool must not stay on the GPUs (roles/mig turns it off)."""
    gpus = {**A100_MIG, "gpus": [{**A100_MIG["gpus"][0], "mig_mode_current": current, "mig_mode_pending": pending}]}
    assert am.gpu_problems(gpus, {"mig_off": True}) == ([problem] if problem else [])
    assert am.gpu_problems(gpus, {"mig_off": False}) == []


def test_gpu_checks_skip_gpus_without_mig_and_empty_expectations():
    t4 = {"count": 1, "driver_version": "470.182.03", "gpus": [{"index": 0, "mig_mode_current": None}]}
    assert am.gpu_problems(t4, {"count": "", "driver_branch": "", "driver_version": None, "mig": True}) == []
    # A host that had no GPU before (no driver yet, a test host) is not held back for having none after.
    assert am.gpu_problems({"count": 0, "gpus": [], "reason": "libnvidia-ml.so not found"}, {"count": 0}) == []
    assert am.gpu_summary(A100_MIG) == "1 GPU(s), driver 535.129.03, MIG on 1 of 1, source snapshot:a100-80gb-mig"


def test_ownership_reads_the_nodes_mig_config_label():
    labelled = node()
    labelled["metadata"]["labels"] = {accel_constants.UPSTREAM_LABELS["mig_config"]: "kube-accel-3g.40gb-1"}
    assert am.ownership(labelled)["mig_config"] == "kube-accel-3g.40gb-1"
    assert am.ownership(node())["mig_config"] is None
    assert am.ownership(None)["mig_config"] is None


GEOMETRY = {"3g.40gb": 2}


@pytest.mark.parametrize(
    ("geometry", "owner", "drain", "label", "expected"),
    [
        (GEOMETRY, "host", False, "", True),  # kube-accel's own mig units apply it on the host
        (GEOMETRY, "operator", True, "kube-accel-3g.40gb-2", True),  # mig-manager was told: on after the change
        # A geometry just added to a pool in service: the cluster play labels the node after the hosts play, so MIG
        # is not on yet. Expecting it kept the node cordoned and stopped every run.
        (GEOMETRY, "operator", True, "", False),
        (GEOMETRY, "operator", True, "all-disabled", False),
        (GEOMETRY, "operator", False, "kube-accel-3g.40gb-2", False),  # not a cluster node: nothing applies it
        ({}, "host", True, "kube-accel-3g.40gb-2", False),  # no geometry
    ],
)
def test_the_check_expects_mig_on_only_where_something_has_turned_it_on(geometry, owner, drain, label, expected):
    """node_reboot's default, rendered by Ansible's own templar."""
    from pathlib import Path

    import yaml
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    defaults = yaml.safe_load((Path(__file__).resolve().parents[2] / "roles/node_reboot/defaults/main.yml").read_text())
    variables = {"accel_mig_geometry": geometry, "accel_mig_owner": owner, "node_reboot_drain": drain,
                 "node_reboot_node_mig_config": label}
    templar = Templar(loader=DataLoader(), variables=variables)
    assert templar.template(trust_as_template(defaults["node_reboot_expect_mig"])) is expected


@pytest.mark.parametrize(
    ("geometry", "strategy", "expected"),
    [({}, "none", True), (GEOMETRY, "none", True), ({}, "single", True), (GEOMETRY, "mixed", False)],
)
def test_the_check_expects_mig_off_where_the_pool_uses_no_mig(geometry, strategy, expected):
    """node_reboot's default, rendered by Ansible's own templar."""
    from pathlib import Path

    import yaml
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    defaults = yaml.safe_load((Path(__file__).resolve().parents[2] / "roles/node_reboot/defaults/main.yml").read_text())
    templar = Templar(loader=DataLoader(), variables={"accel_mig_geometry": geometry, "accel_mig_strategy": strategy})
    assert templar.template(trust_as_template(defaults["node_reboot_expect_mig_off"])) is expected



@pytest.mark.parametrize(
    ("distribution", "runtime", "expected"),
    [
        (None, "containerd", ["ctr", "--address", "/run/containerd/containerd.sock", "version"]),
        ("kubeadm", "crio", ["crictl", "--runtime-endpoint", "unix:///var/run/crio/crio.sock", "version"]),
        ("k3s", "containerd", ["k3s", "ctr", "version"]),
        ("rke2", "containerd",
         ["/var/lib/rancher/rke2/bin/ctr", "--address", "/run/k3s/containerd/containerd.sock", "version"]),
    ],
)
def test_the_runtime_check_asks_the_containerd_the_distribution_runs(distribution, runtime, expected):
    """node_reboot's default, rendered by Ansible's own templar: k3s and RKE2 run their own containerd and ctr."""
    from pathlib import Path

    import yaml
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    defaults = yaml.safe_load((Path(__file__).resolve().parents[2] / "roles/node_reboot/defaults/main.yml").read_text())
    variables = {**defaults, "accel_container_runtime": runtime}
    if distribution:
        variables["accel_kubernetes_distribution"] = distribution
    templar = Templar(loader=DataLoader(), variables=variables)
    assert templar.template(trust_as_template(defaults["node_reboot_runtime_command"])) == expected
