#!/usr/bin/env python3
# Copyright: kube-accel contributors
# Apache License 2.0
"""Print every container image kube-accel can deploy, one per line, for mirroring into a private registry.

Renders each chart (charts/pgpu, mps, vgpu) with its defaults and with every values file of the chart test
matrix (tests/charts/values/<chart>/), always with upstream registries (global.imageRegistry emptied), and adds
the GPU Operator images the generated operator values enable. HAMi's kube-scheduler image follows the cluster
version: pass the exact one (--kube-version 1.36.2) so the mirrored tag matches.

An image the charts pull by digest is printed as registry/repository:tag@sha256:...: mirror that digest (all its
platforms, e.g. skopeo copy --all, so the digest stays the same) under that tag. Images without a digest are
printed as registry/repository:tag; pin them through the inventory's accel_image_digests ("repository:tag" ->
the digest your mirror holds) and the charts pull them by digest too.

    scripts/images.py [--kube-version 1.36.0] [--helm PATH] [--no-operator] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
CHARTS = ("pgpu", "mps", "vgpu")
VALUES = REPO / "tests" / "charts" / "values"
# Options that switch on image-bearing components not covered by a values file of the matrix.
EXTRA_SETS = {
    "pgpu": [["--set", "gfd.enabled=true", "--set", "passthrough.enabled=true", "--set", "passthrough.pools={vm}"]],
    "vgpu": [["--set", "backend=gpu-manager"]],
}


# Pinned choices of the test matrix that are not upstream defaults (a fixed kube-scheduler tag) are reset.
RESET = {"vgpu": ["--set", "kubeScheduler.image.tag="]}


def find_helm(explicit: str | None) -> str:
    for candidate in (explicit, os.environ.get("KUBE_ACCEL_HELM"),
                      str(Path.home() / ".cache" / "kube-accel" / "bin" / "helm"), shutil.which("helm")):
        if candidate and Path(candidate).exists():
            return candidate
    sys.exit("images.py: helm not found; run scripts/toolchain.sh or pass --helm")


def chart_tags(chart: str) -> dict[str, str]:
    """repository -> tag of every image in a chart's values.yaml (a digest reference drops the tag; put it back)."""
    tags: dict[str, str] = {}

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("repository"), str) and node.get("tag"):
                tags[node["repository"]] = str(node["tag"])
            for value in node.values():
                walk(value)

    walk(yaml.safe_load((REPO / "charts" / chart / "values.yaml").read_text()))
    return tags


def with_tag(image: str, tags: dict[str, str]) -> str:
    """registry/repository@digest -> registry/repository:tag@digest, the tag a mirror stores the digest under."""
    if "@" not in image:
        return image
    ref, digest = image.split("@", 1)
    repo = next((r for r in sorted(tags, key=len, reverse=True) if ref == r or ref.endswith("/" + r)), None)
    return f"{ref}:{tags[repo]}@{digest}" if repo else image


def images_in(manifest: str) -> set[str]:
    found = set()
    for doc in yaml.safe_load_all(manifest):
        if not doc:
            continue
        spec = doc.get("spec", {})
        spec = spec.get("template", {}).get("spec", spec) if isinstance(spec, dict) else {}
        for key in ("initContainers", "containers"):
            for container in spec.get(key) or []:
                found.add(container["image"])
    return found


def chart_images(helm: str, kube_version: str) -> set[str]:
    images: set[str] = set()
    for chart in CHARTS:
        variants: list[list[str]] = [[]]
        variants += [["--values", str(v)] for v in sorted((VALUES / chart).glob("*.yaml"))]
        variants += EXTRA_SETS.get(chart, [])
        for args in variants:
            cmd = [helm, "template", f"kube-accel-{chart}", str(REPO / "charts" / chart), "--namespace", "kube-accel",
                   "--kube-version", kube_version, *args, "--set", "global.imageRegistry=", *RESET.get(chart, [])]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                sys.exit(f"images.py: {' '.join(cmd)} failed:\n{proc.stderr}")
            images |= {with_tag(i, chart_tags(chart)) for i in images_in(proc.stdout)}
    return images


def operator_images() -> set[str]:
    from ansible_collections.kube_accel.gpu.plugins.filter import accel_operator  # noqa: PLC0415 - aliases module_utils like Ansible does
    from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import pools as accel_pools  # noqa: PLC0415

    example_mig = accel_pools.collect_pools({"gpu-01": {
        "accel_pool": "mig", "accel_mode": "pgpu", "accel_mig_strategy": "mixed", "accel_mig_owner": "operator",
        "accel_mig_geometry": {"7g.80gb": 1}}})
    values = accel_operator.accel_gpu_operator_values(example_mig, {})
    return set(accel_operator.accel_gpu_operator_images(values))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kube-version", default="1.36.0", help="cluster version (HAMi's kube-scheduler tag)")
    parser.add_argument("--helm", help="helm v3 binary")
    parser.add_argument("--no-operator", action="store_true", help="leave out the GPU Operator's images")
    parser.add_argument("--json", action="store_true", help="print a JSON list")
    args = parser.parse_args(argv)
    images = chart_images(find_helm(args.helm), args.kube_version)
    if not args.no_operator:
        images |= operator_images()
    ordered = sorted(images)
    print(json.dumps(ordered, indent=2) if args.json else "\n".join(ordered))
    return 0


if __name__ == "__main__":
    sys.exit(main())
