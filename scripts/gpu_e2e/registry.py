#!/usr/bin/env python3
"""A pull-only OCI registry on 127.0.0.1 for the images of one docker-archive (images.py writes it), so that
containerd pulls them as it pulls from a site's mirror (hosts.toml names this endpoint for kube-accel.e2e): the
kubelet's own image path, and no `ctr` in the bundle (its 2 MiB are what the GPU host's 64 MiB lacked). Python
standard library only: it runs on the GPU host.

Each layer is checked against its digest (the archive names it by its diff ID) before the registry answers; a
manifest is served by tag and by digest; blobs are streamed from the archive at their offset.

Usage: registry.py ARCHIVE PORT   (serves until killed; prints "ready" once listening)
"""

from __future__ import annotations

import hashlib
import http.server
import json
import sys
import tarfile

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar"  # uncompressed: its digest is its diff ID


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def load(archive: str) -> tuple[dict, dict]:
    """(repository, reference) -> manifest bytes; digest -> (offset, size) of the blob in the archive."""
    manifests, blobs = {}, {}
    with tarfile.open(archive) as tar:
        members = {m.name: m for m in tar.getmembers()}
        for entry in json.load(tar.extractfile("manifest.json")):
            config = tar.extractfile(entry["Config"]).read()
            blobs[sha256(config)] = (members[entry["Config"]].offset_data, len(config))
            layers = []
            for name in entry["Layers"]:
                member = members[name]
                digest = sha256(tar.extractfile(member).read())
                if digest != "sha256:" + name.split("/")[0]:
                    raise SystemExit(f"{name}: digest {digest} is not the name's")
                blobs[digest] = (member.offset_data, member.size)
                layers.append({"mediaType": LAYER, "digest": digest, "size": member.size})
            body = json.dumps({"schemaVersion": 2, "mediaType": MANIFEST, "layers": layers,
                               "config": {"mediaType": CONFIG, "digest": sha256(config), "size": len(config)}}).encode()
            for tag in entry["RepoTags"]:
                name, ref = tag.rsplit(":", 1)
                repository = name.split("/", 1)[1]  # without the registry host
                manifests[(repository, ref)] = manifests[(repository, sha256(body))] = body
    return manifests, blobs


def handler(archive: str, manifests: dict, blobs: dict) -> type[http.server.BaseHTTPRequestHandler]:
    class Registry(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # one line per request on stderr (the e2e keeps it as a log)
            sys.stderr.write(f"{self.command} {self.path} {args[1] if len(args) > 1 else ''}\n")

        def reply(self, code: int, headers: dict, body: bytes = b"", stream: tuple[int, int] | None = None) -> None:
            self.send_response(code)
            for key, value in {**headers, "Docker-Distribution-API-Version": "registry/2.0"}.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(stream[1] if stream else len(body)))
            self.end_headers()
            if self.command == "HEAD":
                return
            if not stream:
                self.wfile.write(body)
                return
            with open(archive, "rb") as f:
                f.seek(stream[0])
                left = stream[1]
                while left:
                    chunk = f.read(min(left, 1 << 20))
                    self.wfile.write(chunk)
                    left -= len(chunk)

        def do_GET(self):
            path = self.path.split("?", 1)[0]
            if path in ("/v2", "/v2/"):
                return self.reply(200, {"Content-Type": "application/json"}, b"{}")
            repository, sep, ref = path[len("/v2/"):].rpartition("/manifests/")
            if sep and (repository, ref) in manifests:
                body = manifests[(repository, ref)]
                return self.reply(200, {"Content-Type": MANIFEST, "Docker-Content-Digest": sha256(body)}, body)
            _, sep, digest = path.rpartition("/blobs/")
            if sep and digest in blobs:
                return self.reply(200, {"Content-Type": "application/octet-stream", "Docker-Content-Digest": digest},
                                  stream=blobs[digest])
            return self.reply(404, {"Content-Type": "application/json"},
                              b'{"errors": [{"code": "NAME_UNKNOWN", "message": "not in this archive"}]}')

        do_HEAD = do_GET

    return Registry


def main() -> None:
    archive, port = sys.argv[1], int(sys.argv[2])
    manifests, blobs = load(archive)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler(archive, manifests, blobs))
    print(f"ready: {len(manifests) // 2} images, {len(blobs)} blobs on 127.0.0.1:{port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
