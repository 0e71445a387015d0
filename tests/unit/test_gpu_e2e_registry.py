"""scripts/gpu_e2e/registry.py: the pull-only registry that serves the GPU bundle's images to containerd. A small
docker-archive written like images.py writes it; the registry must answer what containerd's pull asks (by tag, then
by digest, then each blob) with the bytes whose digests the manifest names, and refuse an archive whose layer is not
what its name says. The real pull by containerd runs in tests/integration/test_real_node.py."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import sys
import tarfile
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "gpu_e2e"))
import registry  # noqa: E402


def archive(path: Path, layer: bytes, name: str | None = None) -> None:
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {}}).encode()
    diff_id = name or hashlib.sha256(layer).hexdigest()
    with tarfile.open(path, "w") as tar:
        for member, data in ((f"{diff_id}/layer.tar", layer), ("c.json", config),
                             ("manifest.json", json.dumps([{"Config": "c.json", "RepoTags": ["kube-accel.e2e/a/b:1"],
                                                            "Layers": [f"{diff_id}/layer.tar"]}]).encode())):
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


@pytest.fixture
def served(tmp_path):
    path = tmp_path / "images.tar"
    archive(path, b"layer bytes " * 1000)
    manifests, blobs = registry.load(str(path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), registry.handler(str(path), manifests, blobs))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def get(url: str):
    with urllib.request.urlopen(url) as r:
        return r.headers, r.read()


def test_pull_by_tag_then_digest_then_blobs(served):
    headers, body = get(f"{served}/v2/a/b/manifests/1")
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    assert headers["Docker-Content-Digest"] == digest
    assert headers["Content-Type"] == registry.MANIFEST
    assert get(f"{served}/v2/a/b/manifests/{digest}?ns=kube-accel.e2e")[1] == body
    manifest = json.loads(body)
    for blob in [manifest["config"], *manifest["layers"]]:
        _, data = get(f"{served}/v2/a/b/blobs/{blob['digest']}")
        assert len(data) == blob["size"] and "sha256:" + hashlib.sha256(data).hexdigest() == blob["digest"]


def test_unknown_names_are_404(served):
    for path in ("/v2/a/b/manifests/2", "/v2/other/manifests/1", "/v2/a/b/blobs/sha256:" + "0" * 64):
        with pytest.raises(urllib.error.HTTPError) as err:
            get(served + path)
        assert err.value.code == 404


def test_a_layer_not_what_its_name_says_is_refused(tmp_path):
    path = tmp_path / "images.tar"
    archive(path, b"tampered", name="0" * 64)
    with pytest.raises(SystemExit, match="is not the name's"):
        registry.load(str(path))
