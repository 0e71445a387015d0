"""One upstream version per component, wherever kube-accel names it.

The conformance suite checks kube-accel's output against the upstream source archives scripts/upstream.sh builds;
that evidence only holds for the images the charts and the GPU Operator values really deploy. This file ties them:
every image tag of a component with a pinned archive is that archive's tag, the archive list of upstream.sh, the
constants of upstream.py and the table of $KA_UPSTREAM_SRC/README.md agree, the GPU Operator chart version is one
value from the role default to the inventories, and no chart claims a Kubernetes its upstream chart refuses.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import upstream
import yaml
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm import operator_values as opv
from chartlib import CHARTS_DIR, REPO

ARCHIVE_ENTRY = re.compile(r'^\s*"([^"|]+)\|([^"|]+)\|([^"|]+)\|[^"]*"\s*$', re.M)
# Image (registry/repository) -> the source archive it is built from. k8s-mig-manager is built from the mig-parted
# repository (its cmd/nvidia-mig-manager), so it shares that tag.
SOURCE_OF_IMAGE = {
    "nvcr.io/nvidia/k8s-device-plugin": upstream.DEVICE_PLUGIN,
    "docker.io/projecthami/hami": upstream.HAMI,
    "docker.io/tkestack/gpu-manager": upstream.GPU_MANAGER,
    "nvcr.io/nvidia/gpu-operator": upstream.GPU_OPERATOR,
    "nvcr.io/nvidia/cloud-native/k8s-mig-manager": upstream.MIG_PARTED,
}
# Images with no pinned source archive, and why no tag comparison is possible.
NO_ARCHIVE = {
    "nvcr.io/nvidia/kubevirt-gpu-device-plugin": "sandbox device plugin for VM passthrough pools; no source pinned",
    "nvcr.io/nvidia/cuda": "base image of the helm test and verify Jobs, not a component",
    "registry.k8s.io/ingress-nginx/kube-webhook-certgen": "pinned by digest from ingress-nginx chart 4.15.1",
    "registry.k8s.io/kube-scheduler": "tag follows the cluster's version (empty in values)",
    "docker.io/tkestack/gpu-quota-admission": "gpu-admission has no tags: its source is pinned by commit "
                                              "(gpu-admission-47d56ae); the commit behind image v1.0.0 is not recorded",
    "nvcr.io/nvidia/driver": "GPU Operator operand kube-accel turns off (driver is a host role)",
    "nvcr.io/nvidia/cloud-native/k8s-driver-manager": "GPU Operator operand, turned off",
    "nvcr.io/nvidia/k8s/container-toolkit": "GPU Operator operand, turned off (toolkit is a host role)",
    "nvcr.io/nvidia/cloud-native/dcgm": "GPU Operator operand at the operator chart's default (test_gpu_operator)",
}
# Pinned images whose tag differs from their archive on purpose, with the reason ($KA_UPSTREAM_SRC/README.md says so).
KNOWN_DIFFERENT = {
    ("nvcr.io/nvidia/k8s/dcgm-exporter", "4.6.0-4.8.3-distroless"): (
        upstream.DCGM_EXPORTER, "the GPU Operator v26.7.0 default; the only dcgm-exporter snapshot is 4.5.3-4.8.2, "
                                "whose metric names the monitoring queries were checked against (same family)"),
}


def archives() -> dict[str, tuple[str, str]]:
    """scripts/upstream.sh ARCHIVES: stem -> (repository URL, tag or commit)."""
    text = (REPO / "scripts" / "upstream.sh").read_text()
    block = text[text.index("ARCHIVES=("):text.index("\n)\n", text.index("ARCHIVES=("))]
    return {stem: (url, ref) for stem, url, ref in ARCHIVE_ENTRY.findall(block)}


def _images(node, found: list[tuple[str, str, str]], where: str) -> None:
    if isinstance(node, dict):
        if "repository" in node and "tag" in node:
            name = "/".join(p for p in (node.get("registry"), node["repository"]) if p)
            found.append((name, str(node["tag"]), where))
        for key, value in node.items():
            _images(value, found, f"{where}.{key}")


def deployed_images() -> list[tuple[str, str, str]]:
    """(image, tag, where) for every image in a chart's default values and in the GPU Operator values."""
    found: list[tuple[str, str, str]] = []
    for values in sorted(CHARTS_DIR.glob("*/values.yaml")):
        _images(yaml.safe_load(values.read_text()), found, f"charts/{values.parent.name}")
    for operand, (repository, image, version) in opv.IMAGES.items():
        found.append((f"{repository}/{image}", version, f"helm.operator_values.IMAGES[{operand}]"))
    return found


def test_conformance_archives_are_the_ones_upstream_sh_builds():
    pinned = {v for k, v in vars(upstream).items() if k.isupper() and isinstance(v, str) and k not in ("SCRIPT",)}
    assert pinned == set(archives()), "tests/conformance/upstream.py and scripts/upstream.sh ARCHIVES differ"
    for stem, (_url, ref) in archives().items():
        assert stem.endswith(ref) or stem.endswith(ref[:7]), f"{stem}: archive name and ref {ref} disagree"


def test_shared_upstream_readme_lists_the_same_refs():
    readme = Path(os.environ.get("KA_UPSTREAM_SRC", REPO.parent / "shared" / "upstream")) / "README.md"
    if not readme.exists():
        pytest.skip(f"{readme} absent (a clone without ../shared): scripts/upstream.sh fetches the refs it names")
    rows = {}
    text = readme.read_text()
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0].startswith("`") and cells[0].endswith(".tar.gz`"):
            rows[cells[0].strip("`").removesuffix(".tar.gz")] = (cells[2], cells[3])
    # Below the table, "Not pinned by any chart yet": one list item per archive, its commit in the item's text
    # (HAMi-core is such an archive: kube-accel's tests build it, no chart pins it).
    for item in re.split(r"\n(?=- `)", text.split("## Not pinned by any chart yet", 1)[-1])[1:]:
        name = re.match(r"- `([^`]+)\.tar\.gz`", item)
        commit = re.search(r"commit ([0-9a-f]{7,40})\b", item)
        tag = re.search(r"\btag (v[0-9][\w.-]*)", item)
        if name and name.group(1) in archives():
            rows[name.group(1)] = (tag.group(1) if tag else "", commit.group(1) if commit else "")
    assert set(rows) == set(archives()), f"{readme} and scripts/upstream.sh list different archives"
    for stem, (_url, ref) in archives().items():
        tag, commit = rows[stem]
        assert ref == tag or (len(commit) >= 7 and ref.startswith(commit)), (
            f"{stem}: upstream.sh pins {ref}, {readme} says tag/commit {rows[stem]}")


@pytest.mark.parametrize(("image", "tag", "where"), [pytest.param(*i, id=f"{i[2]}:{i[0]}") for i in deployed_images()])
def test_image_tag_is_the_source_the_conformance_tests_run(image, tag, where):
    if (image, tag) in KNOWN_DIFFERENT:
        stem, _why = KNOWN_DIFFERENT[(image, tag)]
        assert not stem.endswith(tag), f"{image}:{tag} now matches {stem}: drop it from KNOWN_DIFFERENT"
        return
    if image in NO_ARCHIVE:
        return
    assert image in SOURCE_OF_IMAGE, (f"{where}: {image} has no pinned source: add its archive to scripts/upstream.sh "
                                      "and SOURCE_OF_IMAGE, or say in NO_ARCHIVE why none can be")
    stem = SOURCE_OF_IMAGE[image]
    ref = archives()[stem][1]
    assert tag == ref, (f"{where}: {image}:{tag}, but the conformance tests run {stem} ({ref}): bump the archive "
                        "with the image")


def test_tables_name_only_deployed_images():
    images = {image for image, _tag, _where in deployed_images()}
    stale = (set(SOURCE_OF_IMAGE) | set(NO_ARCHIVE) | {i for i, _ in KNOWN_DIFFERENT}) - images
    assert not stale, f"no longer deployed, remove from the tables: {sorted(stale)}"


def test_gpu_operator_version_is_one_value():
    ref = archives()[upstream.GPU_OPERATOR][1]
    assert ref == opv.OPERATOR_CHART_VERSION
    default = (REPO / "roles" / "gpu_operator" / "defaults" / "main.yml").read_text()
    assert re.search(rf"gpu_operator_chart_version: .*default\('{re.escape(ref)}'\)", default), \
        "roles/gpu_operator's chart version default differs from the archive the conformance tests run"
    for inventory in ("example", "lab"):
        cluster = yaml.safe_load((REPO / "inventories" / inventory / "group_vars" / "all.yml").read_text())
        assert cluster.get("accel_gpu_operator_chart_version") in (None, ref), inventory
    lab = (REPO / "inventories" / "lab" / "group_vars" / "all.yml").read_text()
    assert f"/upstream/src/{upstream.GPU_OPERATOR}/" in lab, "the lab's fallback chart is not the pinned archive's"


def test_monitoring_app_version_is_the_dcgm_exporter_its_queries_were_checked_against():
    chart = yaml.safe_load((CHARTS_DIR / "monitoring" / "Chart.yaml").read_text())
    assert chart["appVersion"] == archives()[upstream.DCGM_EXPORTER][1]


def _floor(constraint: str | None) -> tuple[int, int] | None:
    match = re.search(r">=\s*v?(\d+)\.(\d+)", constraint or "")
    return (int(match[1]), int(match[2])) if match else None


@pytest.mark.parametrize(("archive", "chart"), [
    (upstream.GPU_OPERATOR, "deployments/gpu-operator/Chart.yaml"),
    (upstream.HAMI, "charts/hami/Chart.yaml"),
    (upstream.DEVICE_PLUGIN, "deployments/helm/nvidia-device-plugin/Chart.yaml"),
])
def test_no_chart_claims_a_kubernetes_its_upstream_chart_refuses(archive, chart):
    theirs = _floor(yaml.safe_load((upstream.src(archive) / chart).read_text()).get("kubeVersion"))
    ours = {c.parent.name: _floor(yaml.safe_load(c.read_text())["kubeVersion"])
            for c in CHARTS_DIR.glob("*/Chart.yaml")}
    assert all(ours.values()), ours
    if theirs is not None:
        assert all(floor >= theirs for floor in ours.values()), f"{archive} {chart} needs >= {theirs}; ours: {ours}"
