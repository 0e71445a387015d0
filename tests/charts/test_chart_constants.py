"""Chart defaults that mirror product constants, chart metadata against what the charts run and the Kubernetes range
the product supports, and the shared helper file kept identical in every chart."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
import yaml
from ansible_collections.kube_accel.gpu.plugins.module_utils.common import constants as accel_constants
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import inventory as accel_inventory
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import rules as accel_plan
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.dra_rules import MIN_KUBERNETES_DRA
from chartlib import CHARTS, CHARTS_DIR, NAMESPACE, REPO, SUPPORTED_KUBE_VERSIONS


def defaults(chart):
    return yaml.safe_load((CHARTS_DIR / chart / "values.yaml").read_text())


@pytest.mark.parametrize("chart", CHARTS)
def test_pool_label_key_is_the_product_constant(chart):
    assert defaults(chart)["poolLabelKey"] == accel_constants.LABELS["pool"]


@pytest.mark.parametrize("chart", [c for c in CHARTS if c in ("pgpu", "mps")])
def test_device_plugin_config_label(chart):
    assert defaults(chart)["configLabel"] == accel_constants.UPSTREAM_LABELS["device_plugin_config"]


ALL_CHARTS = sorted(p.parent.name for p in CHARTS_DIR.glob("*/Chart.yaml"))
# The image each chart names as its application (values path): Chart.yaml appVersion, which every object carries as
# app.kubernetes.io/version, must be that image's release. monitoring runs no image of its own: its appVersion is
# the DCGM exporter release its queries were checked against (tests/conformance/test_version_pins.py).
APP_IMAGE = {"pgpu": ("image",), "mps": ("image",), "vgpu": ("hami", "image")}


def meta(chart):
    return yaml.safe_load((CHARTS_DIR / chart / "Chart.yaml").read_text())


def test_every_chart_is_covered():
    assert set(ALL_CHARTS) == {*APP_IMAGE, "monitoring", "dra-pools"}, \
        "a new chart: name the image its appVersion follows"


def test_dra_pools_follows_the_dra_driver_it_configures():
    """dra-pools runs no image: its classes are written for the DRA driver release the dra_driver role installs
    (device attributes, opaque config API), so its appVersion is that release."""
    assert meta("dra-pools")["appVersion"] == accel_inventory.defaults("cluster")["accel_dra_driver_chart_version"]


@pytest.mark.parametrize("chart", sorted(APP_IMAGE))
def test_app_version_is_the_release_of_the_image_it_runs(chart):
    image = defaults(chart)
    for key in APP_IMAGE[chart]:
        image = image[key]
    assert meta(chart)["name"] == chart
    # Image tags carry a "v" that SemVer appVersions of these projects' own charts drop (k8s-device-plugin, HAMi).
    assert meta(chart)["appVersion"] == image["tag"].removeprefix("v"), (
        f"charts/{chart}/Chart.yaml appVersion {meta(chart)['appVersion']!r} but the chart runs "
        f"{image['repository']}:{image['tag']}")


def _minimum(constraint: str) -> tuple[int, int]:
    """The lower bound of a ">= X.Y.0-0" constraint: the only form kube-accel uses (no upper bound: the charts are
    validated against the newest schema kubernetes-validate ships, chartlib.KUBE_VERSIONS)."""
    match = re.fullmatch(r">= ?(\d+)\.(\d+)\.0-0", constraint)
    assert match, f"kubeVersion {constraint!r} is not a plain lower bound >= X.Y.0-0"
    return int(match[1]), int(match[2])


def test_kube_version_floor_is_the_oldest_version_the_tests_validate():
    """One supported range for the product: every chart's floor is the oldest Kubernetes the chart suite validates
    the rendered objects against (chartlib) and the conformance suite loads the scheduler configs with
    (kube-scheduler v1.25.16's own decoder, tests/conformance/go/schedcfg125/go.mod)."""
    floors = {chart: _minimum(meta(chart)["kubeVersion"]) for chart in ALL_CHARTS if chart != "dra-pools"}
    assert len(set(floors.values())) == 1, f"charts disagree on the oldest Kubernetes: {floors}"
    floor = next(iter(floors.values()))
    assert tuple(int(x) for x in SUPPORTED_KUBE_VERSIONS[0].split(".")[:2]) == floor
    gomod = (REPO / "tests" / "conformance" / "go" / "schedcfg125" / "go.mod").read_text()
    assert re.search(rf"require k8s\.io/kubernetes v{floor[0]}\.{floor[1]}\.\d+", gomod), \
        "the kube-scheduler decoder harness no longer loads configs at the charts' oldest minor"


def test_dra_pools_floor_is_the_preflights_dra_floor():
    """DRA pools alone need resource.k8s.io/v1: their chart's floor is the minor the preflight requires of a dra pool
    (plan.dra_rules.MIN_KUBERNETES_DRA), and nothing older than the product's floor."""
    assert _minimum(meta("dra-pools")["kubeVersion"]) == MIN_KUBERNETES_DRA[:2]
    assert _minimum(meta("dra-pools")["kubeVersion"]) >= _minimum(meta("pgpu")["kubeVersion"])


@pytest.mark.parametrize("chart", ALL_CHARTS)
def test_kube_version_constraint_as_helm_reads_it(helm, chart):
    """helm (the pinned v3) takes a provider's build of the oldest minor (a pre-release suffix such as -eks-..., which
    a constraint without "-0" refuses) and refuses the minor before it."""
    major, minor = _minimum(meta(chart)["kubeVersion"])
    argv = [helm, "template", "kube-accel-x", str(CHARTS_DIR / chart), "--namespace", NAMESPACE]
    ok = subprocess.run([*argv, "--kube-version", f"v{major}.{minor}.0-eks-1"], capture_output=True, text=True,
                        check=False, timeout=120)
    assert ok.returncode == 0, ok.stderr
    old = subprocess.run([*argv, "--kube-version", f"v{major}.{minor - 1}.99"], capture_output=True, text=True,
                         check=False, timeout=120)
    assert old.returncode != 0 and "chart requires kubeVersion" in old.stderr, old.stderr


def test_preflight_refuses_a_kubernetes_the_charts_refuse():
    major, minor = _minimum(meta("pgpu")["kubeVersion"])
    settings = {"accel_pool": "p", "accel_mode": "pgpu", "accel_kubernetes_version": f"{major}.{minor - 1}",
                "accel_iommu": False, "accel_sriov_numvfs": 0, "accel_vfio_passthrough": False,
                "accel_numa_policy": "none"}
    problems = accel_plan.host_problems("gpu-01", settings, {}, None)
    assert any("accel_kubernetes_version" in p for p in problems), problems
    assert accel_plan.host_problems("gpu-01", {**settings, "accel_kubernetes_version": f"{major}.{minor}"}, {},
                                    None) == []


def test_common_helpers_identical():
    texts = {c: (CHARTS_DIR / c / "templates" / "_common.tpl").read_text() for c in CHARTS}
    first = texts[CHARTS[0]]
    for chart, text in texts.items():
        assert text == first, f"charts/{chart}/templates/_common.tpl drifted from charts/{CHARTS[0]}'s copy"


@pytest.mark.parametrize(("chart", "path", "low", "high"), [
    ("mps", ("configs", "additionalProperties", "properties", "replicas"),
     accel_inventory.MPS_MIN_REPLICAS, accel_inventory.MPS_MAX_REPLICAS),
    ("pgpu", ("configs", "additionalProperties", "properties", "timeSlicing", "properties", "replicas"),
     accel_inventory.TIMESLICE_MIN_REPLICAS, accel_inventory.TIMESLICE_MAX_REPLICAS),
])
def test_replica_limits_in_the_schemas_are_the_inventory_models(chart, path, low, high):
    """A limit is defined once (accel_inventory); a JSON schema cannot import it, so it is compared here."""
    node = json.loads((CHARTS_DIR / chart / "values.schema.json").read_text())["properties"]
    for key in path:
        node = node[key]
    assert (node["minimum"], node["maximum"]) == (low, high), f"charts/{chart}/values.schema.json"
