#!/usr/bin/env python3
# Copyright: kube-accel contributors
# Apache License 2.0
"""Build a release of kube-accel into one directory (`make release`: dist/).

One semantic version for the product: galaxy.yml, pyproject.toml and every chart's Chart.yaml must carry the same
MAJOR.MINOR.PATCH[-prerelease], and CHANGELOG.md a `## <version>` section with its `### Upgrade notes`; otherwise
nothing is built and the out directory is left as it was. The release holds:

  kube_accel-gpu-<version>.tar.gz   the collection (ansible-galaxy collection build; galaxy.yml's build_ignore)
  charts/<name>-<version>.tgz       every application chart (helm package), charts/index.yaml (helm repo index)
  oci/<name>/                       each chart as an OCI image layout, stored as `helm push` stores it in a registry:
                                    `oras cp --from-oci-layout oci/<name>:<version> <registry>/<repo>/<name>:<version>`
  RELEASE_NOTES.md                  the version's CHANGELOG.md section, its upgrade notes included
  SHA256SUMS                        every file above (`sha256sum -c SHA256SUMS`)

Everything is built in a scratch directory and moved into place at the end, so a failed build leaves no half release.

    scripts/release.py [--out dist] [--chart-url https://example.org/charts] [--helm PATH] [--root CHECKOUT]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from datetime import UTC, datetime
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent

# semver.org 2.0.0 without build metadata: a release is named by its version alone.
_IDENT = r"(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)"
SEMVER = re.compile(rf"^(?:0|[1-9]\d*)\.(?:0|[1-9]\d*)\.(?:0|[1-9]\d*)(?:-{_IDENT}(?:\.{_IDENT})*)?$")
UPGRADE_NOTES = "### Upgrade notes"

# Helm 3's pkg/registry constants: the media types `helm push` writes and `helm pull` / `helm install oci://` read.
HELM_CONFIG_MEDIA_TYPE = "application/vnd.cncf.helm.config.v1+json"
HELM_CHART_MEDIA_TYPE = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
OCI_MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"
OCI_REF_NAME = "org.opencontainers.image.ref.name"

# Field order of Helm's chart.Metadata, Maintainer and Dependency structs: Go's encoding/json writes struct fields in
# declaration order, so the config blob matches helm push's byte for byte. A key in the set is written when empty too
# (no omitempty).
_METADATA_FIELDS = ("name", "home", "sources", "version", "description", "keywords", "maintainers", "icon",
                    "apiVersion", "condition", "tags", "appVersion", "deprecated", "annotations", "kubeVersion",
                    "dependencies", "type")
_MAINTAINER_FIELDS = ("name", "email", "url")
_DEPENDENCY_FIELDS = ("name", "version", "repository", "condition", "tags", "enabled", "import-values",
                      "export-values", "alias")
_DEPENDENCY_REQUIRED = {"name", "repository"}


class ReleaseError(Exception):
    """A release that must not be built (versions disagree, a tool failed); the message says what and where."""


def _read_yaml(path: Path) -> dict:
    # BaseLoader keeps every scalar as written: `version: 1.10` stays "1.10", not the float 1.1.
    data = yaml.load(path.read_text(), Loader=yaml.BaseLoader)
    return data if isinstance(data, dict) else {}


def chart_dirs(root: Path) -> list[Path]:
    """Every chart under charts/ (library charts included: they carry the product's version too)."""
    return sorted(p.parent for p in (root / "charts").glob("*/Chart.yaml"))


def released_charts(root: Path) -> list[Path]:
    """The charts a release packages: all but library charts, which cannot be installed on their own."""
    return [c for c in chart_dirs(root) if _read_yaml(c / "Chart.yaml").get("type") != "library"]


def changelog_section(text: str, version: str) -> str | None:
    """The `## <version>` section of a changelog, heading included, up to the next `## ` heading."""
    lines = text.splitlines(keepends=True)
    heading = re.compile(rf"^## {re.escape(version)}(?:\s|$)")
    start = next((i for i, line in enumerate(lines) if heading.match(line)), None)
    if start is None:
        return None
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return "".join(lines[start:end]).rstrip() + "\n"


def check_versions(root: Path = REPO) -> str:
    """The version every version-bearing file of ``root`` agrees on; ReleaseError naming each file that does not.

    galaxy.yml's version is the reference (the collection is the product); pyproject.toml and each chart must carry
    the same string, and CHANGELOG.md must describe it, upgrade notes included, before anything is built.
    """
    problems: list[str] = []
    galaxy = root / "galaxy.yml"
    version = str(_read_yaml(galaxy).get("version", ""))
    if not SEMVER.match(version):
        problems.append(f"galaxy.yml: version is {version!r}, expected a semantic version "
                        "MAJOR.MINOR.PATCH[-prerelease] (e.g. 0.1.0 or 0.2.0-rc.1)")
    expected = f"expected {version} (galaxy.yml's version: one version for the collection, Python package and charts)"

    found = str(tomllib.loads((root / "pyproject.toml").read_text()).get("project", {}).get("version", ""))
    if found != version:
        problems.append(f"pyproject.toml: version is {found!r}, {expected}")
    for chart in chart_dirs(root):
        found = str(_read_yaml(chart / "Chart.yaml").get("version", ""))
        if found != version:
            problems.append(f"{(chart / 'Chart.yaml').relative_to(root)}: version is {found!r}, {expected}")

    changelog = root / "CHANGELOG.md"
    text = changelog.read_text() if changelog.exists() else ""
    section = changelog_section(text, version)
    if section is None:
        headings = [ln.strip() for ln in text.splitlines() if ln.startswith("## ")]
        problems.append(f"CHANGELOG.md: no '## {version}' section (found: {', '.join(headings) or 'no ## headings'}), "
                        f"expected one for the version being released")
    elif not any(ln.strip() == UPGRADE_NOTES for ln in section.splitlines()):
        problems.append(f"CHANGELOG.md: section '{section.splitlines()[0]}' has no '{UPGRADE_NOTES}', expected one "
                        "(what a user upgrading to this version must know; the release notes carry it)")
    if problems:
        raise ReleaseError("refusing to build the release:\n  " + "\n  ".join(problems))
    return version


def find_helm(explicit: str | None = None) -> str:
    cache = Path(os.environ.get("KA_CACHE", Path.home() / ".cache" / "kube-accel"))
    for candidate in (explicit, os.environ.get("KUBE_ACCEL_HELM"), str(cache / "bin" / "helm"), shutil.which("helm")):
        if candidate and Path(candidate).exists():
            return candidate
    raise ReleaseError("helm not found: run `make toolchain` (it pins helm under ~/.cache/kube-accel/bin) "
                       "or pass --helm")


def find_galaxy() -> str:
    # The venv's own ansible-galaxy: the ansible-core pyproject.toml pins, whatever else is on PATH.
    beside = Path(sys.executable).parent / "ansible-galaxy"
    found = str(beside) if beside.exists() else shutil.which("ansible-galaxy")
    if not found:
        raise ReleaseError("ansible-galaxy not found: run `make venv` and build with .venv/bin/python")
    return found


def _run(cmd: list[str], cwd: Path | None = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False, timeout=600)
    if proc.returncode != 0:
        raise ReleaseError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr or proc.stdout}")
    return proc.stdout


def build_collection(galaxy: str, root: Path, out: Path) -> Path:
    meta = _read_yaml(root / "galaxy.yml")
    _run([galaxy, "collection", "build", "--force", "--output-path", str(out), str(root)], cwd=root)
    tarball = out / f"{meta['namespace']}-{meta['name']}-{meta['version']}.tar.gz"
    if not tarball.exists():
        raise ReleaseError(f"ansible-galaxy collection build wrote no {tarball.name} in {out}")
    return tarball


def package_charts(helm: str, root: Path, out: Path) -> dict[str, Path]:
    """Chart name -> its package in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    packages = {}
    for chart in released_charts(root):
        meta = _read_yaml(chart / "Chart.yaml")
        if meta.get("dependencies"):
            # Subcharts come from Chart.lock into the chart's charts/ before packaging, as `make lint` does.
            _run([helm, "dependency", "build", str(chart)])
        _run([helm, "package", str(chart), "--destination", str(out)])
        packages[meta["name"]] = out / f"{meta['name']}-{meta['version']}.tgz"
    return packages


def index_charts(helm: str, charts: Path, url: str | None = None) -> Path:
    """charts/index.yaml; without a URL its entries name the packages relatively (`urls: [pgpu-0.1.0.tgz]`), which
    helm resolves against wherever the index was fetched from."""
    _run([helm, "repo", "index", str(charts), *(["--url", url] if url else [])])
    return charts / "index.yaml"


def _go_json(value: object) -> bytes:
    """JSON as Go's encoding/json writes it: compact, UTF-8, and <, >, & and U+2028/9 escaped (HTML-safe)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                          ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(char, escaped)
    return text.encode()


def _struct(data: dict, fields: tuple[str, ...], required: frozenset[str] | set[str] = frozenset()) -> dict:
    """A Go struct's JSON: its fields in declaration order, empty ones left out unless required (omitempty)."""
    return {k: data.get(k, "") for k in fields if k in required or data.get(k) not in (None, "", [], {}, False)}


def _sorted_map(data: dict) -> dict:
    # Go writes map keys sorted.
    return {str(k): data[k] for k in sorted(data, key=str)}


def chart_config(metadata: dict) -> bytes:
    """The config blob `helm push` writes: json.Marshal(chart.Metadata) of the packaged Chart.yaml."""
    meta = dict(metadata)
    if "deprecated" in meta:
        meta["deprecated"] = str(meta["deprecated"]).lower() == "true"
    if isinstance(meta.get("annotations"), dict):
        meta["annotations"] = _sorted_map(meta["annotations"])
    if isinstance(meta.get("maintainers"), list):
        meta["maintainers"] = [_struct(m, _MAINTAINER_FIELDS) for m in meta["maintainers"]]
    if isinstance(meta.get("dependencies"), list):
        deps = []
        for entry in meta["dependencies"]:
            dep = dict(entry)
            if "enabled" in dep:
                dep["enabled"] = str(dep["enabled"]).lower() == "true"
            deps.append(_struct(dep, _DEPENDENCY_FIELDS, _DEPENDENCY_REQUIRED))
        meta["dependencies"] = deps
    return _go_json(_struct(meta, _METADATA_FIELDS))


def manifest_annotations(metadata: dict, created: str) -> dict:
    """Helm's generateOCIAnnotations: OCI keys from Chart.yaml, then the chart's own annotations (but title and
    version, which stay the chart's)."""
    notes = {
        "org.opencontainers.image.description": metadata.get("description", ""),
        "org.opencontainers.image.title": metadata.get("name", ""),
        "org.opencontainers.image.version": metadata.get("version", ""),
        "org.opencontainers.image.url": metadata.get("home", ""),
        "org.opencontainers.image.created": created,
    }
    if metadata.get("sources"):
        notes["org.opencontainers.image.source"] = metadata["sources"][0]
    if metadata.get("maintainers"):
        notes["org.opencontainers.image.authors"] = ", ".join(
            m.get("name", "") + (f" ({m['email']})" if m.get("email") else "") for m in metadata["maintainers"])
    notes = {k: v for k, v in notes.items() if str(v).strip()}
    for key, value in (metadata.get("annotations") or {}).items():
        if key not in ("org.opencontainers.image.title", "org.opencontainers.image.version"):
            notes[key] = value
    return _sorted_map(notes)


def _blob(layout: Path, media_type: str, data: bytes) -> dict:
    digest = hashlib.sha256(data).hexdigest()
    path = layout / "blobs" / "sha256" / digest
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}


def oci_layout(package: Path, layout: Path) -> Path:
    """The chart package as an OCI image layout holding what `helm push` would store: the .tgz as the one layer,
    the Chart.yaml metadata as config, Helm's annotations (created: the package file's time, as helm push takes it),
    tagged with the chart version."""
    with tarfile.open(package) as tar:
        member = next(m for m in tar.getmembers() if m.name.count("/") == 1 and m.name.endswith("/Chart.yaml"))
        metadata = yaml.load(tar.extractfile(member).read(), Loader=yaml.BaseLoader)
    created = datetime.fromtimestamp(package.stat().st_mtime, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    layer = _blob(layout, HELM_CHART_MEDIA_TYPE, package.read_bytes())
    config = _blob(layout, HELM_CONFIG_MEDIA_TYPE, chart_config(metadata))
    # Helm writes the manifest without its own mediaType field (the index and the registry's Content-Type carry it);
    # keeping to that keeps the manifest's digest equal to the one helm push produces.
    manifest = {"schemaVersion": 2, "config": config, "layers": [layer],
                "annotations": manifest_annotations(metadata, created)}
    descriptor = _blob(layout, OCI_MANIFEST_MEDIA_TYPE, _go_json(manifest))
    descriptor["annotations"] = {OCI_REF_NAME: metadata["version"]}
    (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX_MEDIA_TYPE, "manifests": [descriptor]}
    (layout / "index.json").write_text(json.dumps(index, indent=2) + "\n")
    return layout


def release_notes(root: Path, version: str) -> str:
    section = changelog_section((root / "CHANGELOG.md").read_text(), version)
    return f"# kube-accel {version}\n\n{section}"


def write_sums(out: Path) -> Path:
    sums = out / "SHA256SUMS"
    files = sorted(p for p in out.rglob("*") if p.is_file() and p != sums)
    sums.write_text("".join(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(out).as_posix()}\n"
                            for p in files))
    return sums


def _check_out(out: Path, root: Path) -> None:
    """The out directory is replaced whole: only the default dist/, a former release (SHA256SUMS) or an empty or
    missing directory may be, never a directory holding the checkout or someone's other files."""
    if root == out or root.is_relative_to(out):
        raise ReleaseError(f"--out {out}: holds the checkout, expected a directory of its own (default: dist)")
    if not out.exists() or out == root / "dist" or (out / "SHA256SUMS").exists() or not any(out.iterdir()):
        return
    raise ReleaseError(f"--out {out}: exists and holds files of no release (no SHA256SUMS), expected a new, empty or "
                       "former release directory; remove it or pick another")


def build(out: Path, root: Path = REPO, chart_url: str | None = None, helm: str | None = None) -> list[Path]:
    """Every release file in ``out`` (replaced whole), or ReleaseError with ``out`` left as it was."""
    root, out = root.resolve(), out.resolve()
    version = check_versions(root)
    _check_out(out, root)
    helm_bin, galaxy = find_helm(helm), find_galaxy()
    # Outside the checkout: ansible-galaxy packs the checkout, and would pack a scratch directory inside it too.
    stage = Path(tempfile.mkdtemp(prefix="kube-accel-release-"))
    try:
        build_collection(galaxy, root, stage)
        packages = package_charts(helm_bin, root, stage / "charts")
        index_charts(helm_bin, stage / "charts", chart_url)
        for name, package in packages.items():
            oci_layout(package, stage / "oci" / name)
        (stage / "RELEASE_NOTES.md").write_text(release_notes(root, version))
        write_sums(stage)
        stage.chmod(0o755)
        if out.exists():
            shutil.rmtree(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(stage, out)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return sorted(p for p in out.rglob("*") if p.is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "dist", help="release directory, replaced (default: dist)")
    parser.add_argument("--chart-url", help="base URL written into charts/index.yaml (default: relative URLs)")
    parser.add_argument("--helm", help="helm v3 binary (default: ~/.cache/kube-accel/bin/helm, then PATH)")
    parser.add_argument("--root", type=Path, default=REPO, help="checkout to release (default: this one)")
    args = parser.parse_args(argv)
    try:
        files = build(args.out, args.root, args.chart_url, args.helm)
    except ReleaseError as err:
        print(f"release.py: {err}", file=sys.stderr)
        return 1
    out = args.out.resolve()
    print(f"release {check_versions(args.root)} in {out}:")
    for path in files:
        print(f"  {path.relative_to(out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
