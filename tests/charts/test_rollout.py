"""Rollouts at scale: node agents roll rollingUpdate.maxUnavailable nodes at once; the MPS control daemon is never
rolled by an upgrade (OnDelete) and its pod template does not follow the other pools' configs."""

from __future__ import annotations

import json

import pytest
import yaml
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm import pool_charts as cv
from chartlib import CHARTS, CHARTS_DIR, by_kind, helm_template, one, render, values_files

CONTROL_DAEMON = "mps-control-daemon"
CASES = [pytest.param(c, v, id=f"{c}-{v.stem}") for c in CHARTS for v in values_files(c)]


def daemonsets(objs):
    return by_kind(objs, "DaemonSet")


def write(tmp_path, name, values):
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


@pytest.mark.parametrize("chart", CHARTS)
def test_default_matches_the_timeout_model(chart):
    values = yaml.safe_load((CHARTS_DIR / chart / "values.yaml").read_text())
    assert values["rollingUpdate"] == {"maxUnavailable": cv.DEFAULT_MAX_UNAVAILABLE}


@pytest.mark.parametrize(("chart", "values"), CASES)
def test_node_agents_roll_max_unavailable_nodes(helm, tmp_path, chart, values):
    for expected, extra in ((cv.DEFAULT_MAX_UNAVAILABLE, []), (25, [write(tmp_path, "n", {"rollingUpdate": {
            "maxUnavailable": 25}})]), ("30%", [write(tmp_path, "p", {"rollingUpdate": {"maxUnavailable": "30%"}})])):
        found = daemonsets(render(chart, [values, *extra], helm=helm))
        assert found, "no DaemonSet rendered"
        for name, ds in found.items():
            if name.endswith(CONTROL_DAEMON):
                continue
            assert ds["spec"]["updateStrategy"] == {"type": "RollingUpdate",
                                                    "rollingUpdate": {"maxUnavailable": expected}}, name


@pytest.mark.parametrize("chart", CHARTS)
@pytest.mark.parametrize("bad", ["0%", "abc", 0, "101%", -1, "10", 1.5])
def test_schema_refuses_bad_max_unavailable(helm, chart, bad):
    proc = helm_template(chart, [values_files(chart)[0]], helm=helm,
                         extra=["--set-json", "rollingUpdate=" + json.dumps({"maxUnavailable": bad})])
    assert proc.returncode != 0, f"{chart} accepted maxUnavailable={bad!r}"
    assert "/rollingUpdate/maxUnavailable" in proc.stderr, proc.stderr


def control_daemon(helm, *values):
    return one(render("mps", list(values), helm=helm), "DaemonSet", CONTROL_DAEMON)


def test_control_daemon_is_replaced_only_on_delete(helm, tmp_path):
    for values in values_files("mps"):
        ds = control_daemon(helm, values)
        assert ds["spec"]["updateStrategy"] == {"type": "OnDelete"}
        assert not any(k.startswith("checksum/") for k in ds["spec"]["template"]["metadata"].get("annotations") or {})
    # The device plugin still rolls with its configs: its restart leaves running clients alone.
    plugin = one(render("mps", [values_files("mps")[0]], helm=helm), "DaemonSet", "-device-plugin")
    assert "checksum/configs" in plugin["spec"]["template"]["metadata"]["annotations"]


def test_control_daemon_template_ignores_another_pools_config(helm, tmp_path):
    one_pool = write(tmp_path, "one", {"pools": ["a"], "configs": {"mps-4": {"replicas": 4}}, "defaultConfig": "mps-4"})
    # Another config in the same release (e.g. a pool switching to mps-8): the template is the same.
    two_configs = write(tmp_path, "two", {"pools": ["a"], "configs": {"mps-4": {"replicas": 4},
                                                                      "mps-8": {"replicas": 8}}})
    before = control_daemon(helm, one_pool)["spec"]["template"]
    assert control_daemon(helm, one_pool, two_configs)["spec"]["template"] == before
    # A second pool with its own config: only the pool affinity changes, and OnDelete replaces no running daemon.
    two_pools = write(tmp_path, "pools", {"pools": ["a", "b"], "configs": {"mps-4": {"replicas": 4},
                                                                           "mps-8": {"replicas": 8}}})
    after = control_daemon(helm, one_pool, two_pools)["spec"]["template"]
    assert after["spec"]["affinity"] != before["spec"]["affinity"]
    strip = [{**t, "spec": {k: v for k, v in t["spec"].items() if k != "affinity"}} for t in (before, after)]
    assert strip[0] == strip[1]
