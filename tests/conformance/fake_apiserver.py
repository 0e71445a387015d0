"""A recording stand-in for kube-apiserver: lets an upstream binary start with kube-accel's flags and shows which
API calls its startup makes (no GPU, no cluster).

It answers every list with an empty list (resourceVersion "1"), holds every watch open without events, accepts
writes with the request body, and records (verb, path) for each request, where verb is the RBAC verb the request
needs (get, list, watch, create, update, patch, delete). Plain HTTP on 127.0.0.1; `kubeconfig()` writes a
kubeconfig pointing at it.
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

# Kinds of the resources informers watch (the BOOKMARK that ends a watch-list stream names the kind).
KINDS = {"pods": "Pod", "nodes": "Node", "resourcequotas": "ResourceQuota", "leases": "Lease", "events": "Event",
         "configmaps": "ConfigMap", "secrets": "Secret", "services": "Service", "namespaces": "Namespace"}

# /api/v1/[namespaces/NS/]RESOURCE[/NAME[/SUB]] and /apis/GROUP/VERSION/[namespaces/NS/]RESOURCE[/NAME[/SUB]]
_PATH = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)"
    r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<resource>[^/]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>[^/]+))?$"
)


class FakeAPIServer:
    def __init__(self) -> None:
        self.requests: list[tuple[str, str, str, str]] = []  # (verb, group, resource[/sub], namespace)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _record(self, method: str) -> tuple[str, dict]:
                url = urlsplit(self.path)
                query = parse_qs(url.query)
                match = _PATH.match(url.path)
                if not match:
                    return "", query
                resource = match["resource"] + (f"/{match['sub']}" if match["sub"] else "")
                if method == "GET":
                    verb = "watch" if query.get("watch") == ["true"] else ("get" if match["name"] else "list")
                else:
                    verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}[method]
                with server._lock:
                    server.requests.append((verb, match["group"] or "", resource, match["ns"] or ""))
                    if verb == "watch" and query.get("sendInitialEvents") == ["true"]:
                        # A watch-list stream replaces the initial list: it needs list permission too.
                        server.requests.append(("list", match["group"] or "", resource, match["ns"] or ""))
                self.resource = match["resource"]
                return verb, query

            def _send(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):  # noqa: N802
                verb, query = self._record("GET")
                if verb == "watch":
                    # An open watch with no events: chunked, never finished until the server stops. A watch-list
                    # stream (client-go's default) first gets the bookmark that ends its (empty) initial events.
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    if query.get("sendInitialEvents") == ["true"]:
                        kind = KINDS.get(self.resource, self.resource.rstrip("s").capitalize())
                        event = json.dumps({"type": "BOOKMARK", "object": {
                            "kind": kind, "apiVersion": "v1", "metadata": {
                                "resourceVersion": "1", "annotations": {"k8s.io/initial-events-end": "true"}}}})
                        data = (event + "\n").encode()
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                        self.wfile.flush()
                    while not server._stop.wait(0.2):
                        pass
                    return
                if verb == "list":
                    self._send(200, {"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": "1"},
                                     "items": []})
                    return
                path = urlsplit(self.path).path
                if path in ("/api", "/apis", "/version") or not verb:
                    self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404})
                    return
                self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
                                 "code": 404})

            def _write(self, method: str) -> None:
                self._record(method)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b"{}"
                try:
                    obj = json.loads(body or b"{}")
                except ValueError:
                    obj = {}
                self._send(201 if method == "POST" else 200, obj if isinstance(obj, dict) else {})

            def do_POST(self):  # noqa: N802
                self._write("POST")

            def do_PUT(self):  # noqa: N802
                self._write("PUT")

            def do_PATCH(self):  # noqa: N802
                self._write("PATCH")

            def do_DELETE(self):  # noqa: N802
                self._write("DELETE")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeAPIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def kubeconfig(self, path: Path) -> Path:
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": "fake"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
        }))
        return path

    def calls(self) -> set[tuple[str, str, str]]:
        """(verb, apiGroup, resource) of every request so far."""
        with self._lock:
            return {(v, g, r) for v, g, r, _ in self.requests}

    def wait_for(self, wanted: set[tuple[str, str, str]], timeout: float = 30) -> set[tuple[str, str, str]]:
        """Waits until every wanted call was made (or the timeout); returns the calls seen."""
        end = time.monotonic() + timeout
        while time.monotonic() < end and not wanted <= self.calls():
            time.sleep(0.2)
        return self.calls()


def closed_port_kubeconfig(path: Path) -> Path:
    """A kubeconfig for 127.0.0.1 on a port nothing listens on (a bound, never listening socket)."""
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "closed",
        "clusters": [{"name": "closed", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "closed", "user": {"token": "x"}}],
        "contexts": [{"name": "closed", "context": {"cluster": "closed", "user": "closed"}}],
    }))
    return path
