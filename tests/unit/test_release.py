"""`make release` (scripts/release.py): the real script with the real helm and ansible-galaxy into a scratch
directory, each artifact read back; and the refusals when the product's versions disagree.

This is the release build of CI: tests/unit runs in the "not lab" pytest lane of `make test`.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import threading
import uuid
from pathlib import Path

import pytest
import release  # scripts/release.py
import yaml

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "release.py"
VERSION = str(yaml.load((REPO / "galaxy.yml").read_text(), Loader=yaml.BaseLoader)["version"])
CHARTS = [c.name for c in release.released_charts(REPO)]


def _helm() -> str:
    try:
        return release.find_helm()
    except release.ReleaseError as err:
        pytest.fail(str(err))  # CI has the toolchain: a missing helm is a broken setup, not a reason to skip


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """One full release build for the whole module (a few seconds)."""
    out = tmp_path_factory.mktemp("release") / "dist"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--helm", _helm()],
                          capture_output=True, text=True, check=False, timeout=600)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return out


def test_library_charts_are_not_released(tmp_path):
    assert {"pgpu", "mps", "vgpu", "monitoring"} <= set(CHARTS)
    for name, kind in (("app", "application"), ("lib", "library")):
        (tmp_path / "charts" / name).mkdir(parents=True)
        (tmp_path / "charts" / name / "Chart.yaml").write_text(f"apiVersion: v2\nname: {name}\ntype: {kind}\n")
    assert [c.name for c in release.released_charts(tmp_path)] == ["app"]
    assert [c.name for c in release.chart_dirs(tmp_path)] == ["app", "lib"]  # both carry the product's version


def test_every_artifact_is_present(dist):
    expected = {f"kube_accel-gpu-{VERSION}.tar.gz", "charts/index.yaml", "RELEASE_NOTES.md", "SHA256SUMS"}
    expected |= {f"charts/{name}-{VERSION}.tgz" for name in CHARTS}
    expected |= {f"oci/{name}/{f}" for name in CHARTS for f in ("oci-layout", "index.json")}
    present = {p.relative_to(dist).as_posix() for p in dist.rglob("*") if p.is_file()}
    assert expected <= present
    assert {p.split("/")[0] for p in present} == {"charts", "oci", f"kube_accel-gpu-{VERSION}.tar.gz",
                                                  "RELEASE_NOTES.md", "SHA256SUMS"}


def test_sha256sums_cover_every_file_and_check(dist):
    listed = {line.split("  ", 1)[1] for line in (dist / "SHA256SUMS").read_text().splitlines()}
    present = {p.relative_to(dist).as_posix() for p in dist.rglob("*") if p.is_file()}
    assert listed == present - {"SHA256SUMS"}
    proc = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=dist, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_chart_index_lists_every_chart_at_the_version(dist):
    index = yaml.safe_load((dist / "charts" / "index.yaml").read_text())
    assert sorted(index["entries"]) == CHARTS
    for name in CHARTS:
        (entry,) = index["entries"][name]
        assert entry["version"] == VERSION
        # Relative by default: helm resolves it against wherever index.yaml was fetched from.
        assert entry["urls"] == [f"{name}-{VERSION}.tgz"]
        assert entry["digest"] == hashlib.sha256((dist / "charts" / f"{name}-{VERSION}.tgz").read_bytes()).hexdigest()


def test_chart_url_is_written_into_the_index(dist, tmp_path):
    shutil.copy(dist / "charts" / f"pgpu-{VERSION}.tgz", tmp_path)
    index = release.index_charts(_helm(), tmp_path, "https://charts.example.org/kube-accel")
    assert yaml.safe_load(index.read_text())["entries"]["pgpu"][0]["urls"] == [
        f"https://charts.example.org/kube-accel/pgpu-{VERSION}.tgz"]


@pytest.mark.parametrize("name", CHARTS)
def test_chart_package_holds_the_chart_at_the_version(dist, name):
    with tarfile.open(dist / "charts" / f"{name}-{VERSION}.tgz") as tar:
        chart = yaml.safe_load(tar.extractfile(f"{name}/Chart.yaml").read())
        names = tar.getnames()
    assert (chart["name"], chart["version"]) == (name, VERSION)
    assert f"{name}/values.yaml" in names and any(n.startswith(f"{name}/templates/") for n in names)


def test_collection_tarball_is_the_collection_without_development_files(dist):
    with tarfile.open(dist / f"kube_accel-gpu-{VERSION}.tar.gz") as tar:
        info = json.load(tar.extractfile("MANIFEST.json"))["collection_info"]
        names = tar.getnames()
    assert (info["namespace"], info["name"], info["version"]) == ("kube_accel", "gpu", VERSION)
    tops = {n.split("/")[0] for n in names}
    assert {"roles", "plugins", "charts", "ansible"} <= tops
    assert not tops & {"tests", ".lab", "scripts", "molecule", ".venv", "dist"}
    assert not [n for n in names if "/molecule/" in n or n.startswith("inventories/lab")]


def _layout(dist: Path, name: str) -> tuple[Path, dict, dict]:
    layout = dist / "oci" / name
    (descriptor,) = json.loads((layout / "index.json").read_text())["manifests"]
    return layout, descriptor, json.loads(_blob(layout, descriptor))


def _blob(layout: Path, descriptor: dict) -> bytes:
    """A blob of the layout, checked against its descriptor's digest and size."""
    algorithm, digest = descriptor["digest"].split(":")
    data = (layout / "blobs" / algorithm / digest).read_bytes()
    assert (algorithm, hashlib.sha256(data).hexdigest(), len(data)) == ("sha256", digest, descriptor["size"])
    return data


@pytest.mark.parametrize("name", CHARTS)
def test_oci_layout_holds_the_chart_as_helm_stores_it(dist, name):
    layout, descriptor, manifest = _layout(dist, name)
    assert json.loads((layout / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}
    assert descriptor["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert descriptor["annotations"] == {"org.opencontainers.image.ref.name": VERSION}
    assert manifest["schemaVersion"] == 2

    assert manifest["config"]["mediaType"] == "application/vnd.cncf.helm.config.v1+json"
    config = json.loads(_blob(layout, manifest["config"]))
    assert (config["name"], config["version"], config["apiVersion"]) == (name, VERSION, "v2")

    (layer,) = manifest["layers"]
    assert layer["mediaType"] == "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
    assert _blob(layout, layer) == (dist / "charts" / f"{name}-{VERSION}.tgz").read_bytes()
    assert manifest["annotations"]["org.opencontainers.image.title"] == name
    assert manifest["annotations"]["org.opencontainers.image.version"] == VERSION


class _Registry(http.server.BaseHTTPRequestHandler):
    """Just enough of the OCI distribution API for `helm push`: blob uploads and manifests, kept in memory."""

    blobs: dict[str, bytes] = {}
    manifests: dict[str, bytes] = {}

    def log_message(self, *args):
        pass

    def _reply(self, code: int, body: bytes = b"", headers: dict | None = None):
        self.send_response(code)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self):
        path = self.path.split("?")[0]
        if m := re.fullmatch(r"/v2/.+/manifests/(.+)", path):
            data = self.manifests.get(m[1])
            headers = {"Content-Type": "application/vnd.oci.image.manifest.v1+json",
                       "Docker-Content-Digest": f"sha256:{hashlib.sha256(data or b'').hexdigest()}"}
            return self._reply(200, data, headers) if data is not None else self._reply(404)
        if (m := re.fullmatch(r"/v2/.+/blobs/(.+)", path)) and m[1] in self.blobs:
            return self._reply(200, self.blobs[m[1]], {"Docker-Content-Digest": m[1]})
        return self._reply(200, b"{}") if path == "/v2/" else self._reply(404)

    do_HEAD = do_GET

    def do_POST(self):
        repository = re.fullmatch(r"/v2/(.+)/blobs/uploads/", self.path)[1]
        self._reply(202, headers={"Location": f"/v2/{repository}/blobs/uploads/{uuid.uuid4()}"})

    def do_PUT(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        path, _, query = self.path.partition("?")
        digest = f"sha256:{hashlib.sha256(body).hexdigest()}"
        if m := re.fullmatch(r"/v2/.+/manifests/(.+)", path):
            self.manifests[m[1]] = self.manifests[digest] = body
        else:
            assert query.replace("%3A", ":").endswith(f"digest={digest}")
            self.blobs[digest] = body
        self._reply(201, headers={"Docker-Content-Digest": digest})


def test_oci_layout_is_byte_for_byte_what_helm_push_stores(dist, tmp_path):
    """helm push of the same package into a registry stores the same manifest, config and layer: the layout copied
    with `oras cp --from-oci-layout` is what a registry would hold after helm push."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Registry)  # a free port: nothing else is touched
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env = {**os.environ, "TZ": "UTC", "HELM_REGISTRY_CONFIG": str(tmp_path / "registry.json"),
               "HELM_CACHE_HOME": str(tmp_path / "cache"), "HELM_CONFIG_HOME": str(tmp_path / "config")}
        for name in CHARTS:
            proc = subprocess.run([_helm(), "push", str(dist / "charts" / f"{name}-{VERSION}.tgz"),
                                   f"oci://127.0.0.1:{server.server_port}/kube-accel", "--plain-http"],
                                  env=env, capture_output=True, text=True, check=False, timeout=120)
            assert proc.returncode == 0, proc.stderr
            layout, descriptor, manifest = _layout(dist, name)
            assert _Registry.manifests[VERSION] == _blob(layout, descriptor), name
            for blob in (manifest["config"], *manifest["layers"]):
                assert _Registry.blobs[blob["digest"]] == _blob(layout, blob), (name, blob["mediaType"])
    finally:
        server.shutdown()
        server.server_close()


def test_release_notes_are_the_changelog_section_with_upgrade_notes(dist):
    notes = (dist / "RELEASE_NOTES.md").read_text()
    section = release.changelog_section((REPO / "CHANGELOG.md").read_text(), VERSION)
    assert notes.startswith(f"# kube-accel {VERSION}\n")
    assert section.startswith(f"## {VERSION}") and section in notes
    upgrade = section.split("### Upgrade notes", 1)[1].strip()
    assert upgrade and upgrade in notes
    assert not re.search(r"^## (?!" + re.escape(VERSION) + ")", notes, re.MULTILINE)


# Refusals: a copy of the files that carry the version, changed one at a time.


@pytest.fixture
def root(tmp_path) -> Path:
    copy = tmp_path / "checkout"
    for rel in ("galaxy.yml", "pyproject.toml", "CHANGELOG.md",
                *(str(p.relative_to(REPO)) for p in (REPO / "charts").glob("*/Chart.yaml"))):
        (copy / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, copy / rel)
    return copy


def _set(path: Path, pattern: str, replacement: str) -> None:
    text, count = re.subn(pattern, replacement, path.read_text(), count=1, flags=re.MULTILINE)
    assert count == 1, (path, pattern)
    path.write_text(text)


OTHER = "99.0.0"
REFUSALS = {
    "chart": (lambda r: _set(r / "charts/mps/Chart.yaml", r"^version: .*$", f"version: {OTHER}"),
              ["charts/mps/Chart.yaml", repr(OTHER), f"expected {VERSION}"]),
    "pyproject": (lambda r: _set(r / "pyproject.toml", r'^version = ".*"$', f'version = "{OTHER}"'),
                  ["pyproject.toml", repr(OTHER), f"expected {VERSION}"]),
    "not semver": (lambda r: _set(r / "galaxy.yml", r"^version: .*$", "version: 1.10"),
                   ["galaxy.yml", "'1.10'", "MAJOR.MINOR.PATCH"]),
    "no changelog section": (lambda r: _set(r / "CHANGELOG.md", rf"^## {re.escape(VERSION)}\b", "## 0.0.1"),
                             ["CHANGELOG.md", f"no '## {VERSION}' section", "## 0.0.1"]),
    "no upgrade notes": (lambda r: _set(r / "CHANGELOG.md", r"^### Upgrade notes$", "### Notes"),
                         ["CHANGELOG.md", "'### Upgrade notes'"]),
}


def test_the_checkout_has_one_version():
    assert release.check_versions(REPO) == VERSION


@pytest.mark.parametrize("case", REFUSALS)
def test_disagreeing_versions_are_refused(root, case):
    assert release.check_versions(root) == VERSION
    change, words = REFUSALS[case]
    change(root)
    with pytest.raises(release.ReleaseError) as err:
        release.check_versions(root)
    for word in words:
        assert word in str(err.value)


def test_refused_release_writes_nothing(root, tmp_path):
    REFUSALS["chart"][0](root)
    fresh, former = tmp_path / "fresh", tmp_path / "former"
    former.mkdir()
    (former / "SHA256SUMS").write_text("kept\n")
    for out in (fresh, former):
        proc = subprocess.run([sys.executable, str(SCRIPT), "--root", str(root), "--out", str(out)],
                              capture_output=True, text=True, check=False, timeout=60)
        assert proc.returncode == 1
        assert "charts/mps/Chart.yaml: version is '99.0.0', expected" in proc.stderr
    assert not fresh.exists()
    assert [p.name for p in former.iterdir()] == ["SHA256SUMS"] and (former / "SHA256SUMS").read_text() == "kept\n"


def test_out_directory_with_other_files_is_refused(root, tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine\n")
    with pytest.raises(release.ReleaseError, match="holds files of no release"):
        release.build(tmp_path / "mine", root=root)
    with pytest.raises(release.ReleaseError, match="holds the checkout"):
        release.build(root.parent, root=root)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "mine\n"


@pytest.mark.parametrize(("version", "valid"), [
    ("0.1.0", True), ("1.20.3", True), ("2.0.0-rc.1", True), ("1.0.0-alpha-2.x", True),
    ("1.0", False), ("01.0.0", False), ("1.0.0-01", False), ("1.0.0+build.5", False), ("v1.0.0", False),
])
def test_semantic_version(version, valid):
    assert bool(release.SEMVER.match(version)) is valid
