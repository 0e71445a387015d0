"""kube-accel's MIG configs against mig-parted v0.15.0 and the GPU Operator v26.7.0 mig-manager contract.

Every geometry kube-accel accepts (accel_mig: every model, every legal layout, ``+me`` profiles included) is
rendered by accel_mig.mig_parted_config and read by ``nvidia-mig-parted assert --valid-config`` (which stops after
parsing and selecting the config, before NVML: cmd/nvidia-mig-parted/assert/assert.go:125) and by
ka-conform-migparted (device filters matched by mig-parted's own MatchesDeviceFilter, config names checked as
Kubernetes label values, since mig-manager selects them through the nvidia.com/mig.config node label).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import upstream
import yaml
from ansible_collections.kube_accel.gpu.plugins.module_utils.cluster import labels as accel_labels
from ansible_collections.kube_accel.gpu.plugins.module_utils.common import constants as accel_constants
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import mig as accel_mig
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import pools as accel_pools
from chartlib import REPO, pod_spec
from test_device_plugin import _inventory_hosts, _releases, rendered

ALL_DEVICE_IDS = sorted({d for m in accel_mig.MODELS.values() for d in m.device_ids})


def mig_src(path: str) -> str:
    return (upstream.src(upstream.MIG_PARTED) / path).read_text()


def model_geometries(model: accel_mig.MigModel) -> dict[str, dict]:
    by_class = {p.cls.name: p.name for p in model.profiles.values()}
    out = {}
    for combo in accel_mig.valid_combinations(model.family, include_2x="1g.2x" in by_class, include_me=True):
        if all(c in by_class for c in combo):
            geometry = {by_class[c]: n for c, n in combo.items()}
            out[accel_mig.mig_config_name(geometry)] = geometry
    return out


def check_document(document: dict, tmp_path: Path, expected: dict[str, set[str]]) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    # mig-parted parses the whole file before it selects one config (assert.go:114-122).
    for name in sorted(document["mig-configs"])[:3]:
        proc = upstream.run("nvidia-mig-parted", "assert", "--valid-config", "-f", str(path), "-c", name)
        assert proc.returncode == 0 and "Selected MIG configuration is valid" in proc.stdout, (
            f"mig-parted refuses config {name}: {proc.stderr}")
    proc = upstream.run("ka-conform-migparted", str(path), *ALL_DEVICE_IDS)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert set(report) == set(document["mig-configs"])
    for name, r in report.items():
        assert not r["label"], f"config name {name!r} is not a valid nvidia.com/mig.config label value: {r['label']}"
        assert not r["badFilters"], f"{name}: {r['badFilters']}"
        if name in expected:
            assert set(r["matches"]) == expected[name], (name, r["matches"])


@pytest.mark.parametrize("model", sorted(accel_mig.MODELS))
def test_every_geometry_loads_in_mig_parted(model, tmp_path):
    m = accel_mig.MODELS[model]
    geometries = model_geometries(m)
    assert geometries
    document = accel_mig.mig_parted_config(geometries, dict.fromkeys(geometries, list(m.device_ids)))
    check_document(document, tmp_path, dict.fromkeys(geometries, set(m.device_ids)))


def test_plus_me_profiles_are_in_the_set_checked():
    names = {name for m in accel_mig.MODELS.values() for geometry in model_geometries(m).values() for name in geometry}
    assert {"1g.10gb+me", "2g.12gb+me"} <= names


@pytest.mark.parametrize("inventory", ["lab", "example"])
def test_operator_document_of_the_inventory(inventory, tmp_path):
    from ansible_collections.kube_accel.gpu.plugins.module_utils.helm import operator_values as accel_operator_values  # noqa: PLC0415

    pools = accel_pools.collect_pools(_inventory_hosts(inventory))
    document = accel_operator_values.mig_parted_document(pools)
    check_document(document, tmp_path, {})
    for pool in pools:
        label = accel_pools.node_labels(pool["settings"]).get(accel_constants.UPSTREAM_LABELS["mig_config"])
        if label:
            assert label in document["mig-configs"]


# --- pausing kube-accel's GPU clients during a MIG change (mig-manager, pkg/mig/reconfigure) ------------------

RECONFIGURE = "pkg/mig/reconfigure/reconfigure.go"


def mig_manager_contract() -> tuple[str, str]:
    """(label mig-manager pauses for third-party GPU clients, the value it pauses them with)."""
    text = mig_src(RECONFIGURE)
    label = re.search(r'gpuClientDeployLabel\s*=\s*"([^"]+)"', text).group(1)
    paused = re.search(r'func \(r \*Reconfigure\) maybeSetPaused\(.*?return "([^"]+)"\n}', text, re.S).group(1)
    # It waits for DaemonSet pods on the node whose nodeSelector has that key (all namespaces) ...
    waiter = re.search(r"func \(r \*Reconfigure\) waitForPodsWithNodeSelector.*?\n}\n", text, re.S).group(0)
    assert "corev1.NamespaceAll" in waiter and 'ownerRef.Kind != "DaemonSet"' in waiter
    assert "pod.Spec.NodeSelector[nodeSelectorKey]" in waiter
    assert "r.waitForPodsWithNodeSelector(gpuClientDeployLabel, timeout)" in text
    # ... and pauses the label only where the node already carries it.
    assert "if len(r.gpuClientDeployed) > 0 {\n\t\tlabels[gpuClientDeployLabel] = r.maybeSetPaused" in text
    return label, paused


def test_mig_pool_agents_stop_during_a_mig_change(tmp_path):
    label, paused = mig_manager_contract()
    for inventory in ("lab", "example"):
        releases = {r["key"]: r for r in _releases(inventory)}
        values = dict(releases["pgpu"]["values"])
        values["gfd"] = {"enabled": True}
        objs = rendered("pgpu", values, tmp_path)
        mig_pools = [p for p in accel_pools.collect_pools(_inventory_hosts(inventory))
                     if accel_pools.mig_enabled(p["settings"]) and p["settings"]["accel_mode"] == "pgpu"]
        assert mig_pools
        for pool in mig_pools:
            node_labels = accel_pools.node_labels(pool["settings"])
            assert node_labels.get(label) == "true", f"{pool['pool']}: mig-manager pauses {label} only if present"
        agents = [o for o in objs
                  if o["kind"] == "DaemonSet" and not o["metadata"]["name"].endswith("sandbox-device-plugin")]
        assert {o["metadata"]["name"].rsplit("-", 1)[-1] for o in agents} >= {"plugin", "discovery"}
        for ds in agents:
            selector = pod_spec(ds).get("nodeSelector") or {}
            assert selector.get(label) == "true", f"{ds['metadata']['name']}: mig-manager would not wait for it"
            assert selector[label] != paused


def test_label_reconcile_leaves_a_paused_client_label_alone():
    label, paused = mig_manager_contract()
    desired = {label: "true"}
    assert accel_labels.node_patch({label: paused}, [], desired, {label}, [], set()) is None
    assert accel_labels.node_patch({}, [], desired, {label}, [], set()) == {"metadata": {"labels": desired}}


def test_chart_default_pause_label_is_the_product_constant():
    label, _ = mig_manager_contract()
    chart_defaults = yaml.safe_load((REPO / "charts" / "pgpu" / "values.yaml").read_text())
    assert chart_defaults["gpuClientLabel"] == label == accel_constants.UPSTREAM_LABELS["deploy_client"]
