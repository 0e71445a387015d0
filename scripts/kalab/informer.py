"""A watch-backed cache of one kind of Kubernetes object, for the lab's stand-ins (kalab.standins).

The stand-ins read the lab's pods, a ConfigMap per node and the webhook configurations from such caches rather than
listing them once a second (BENCHMARKS.md "Lab stand-ins watch instead of listing"). An Informer lists once, then
follows a watch from that list's resourceVersion, as client-go's reflector does: a relist after the watch ends (its
timeout), or on an ERROR event (410 Gone: the version is compacted), or when the connection breaks. Objects are kept
as the API server's JSON (dicts), keyed by namespace/name.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

# A watch ends after this long and is followed by a fresh list (the API server caps watches at its own
# --min-request-timeout anyway): a missed event cannot outlive it.
WATCH_SECONDS = 240


def key(obj: dict) -> str:
    meta = obj["metadata"]
    return f"{meta.get('namespace', '')}/{meta['name']}"


class Informer:
    """The current objects of ``list_call`` (a kubernetes client list method of every object of a kind), kept by a
    daemon thread."""

    def __init__(self, name: str, list_call: Callable):
        self.name, self._call = name, list_call
        self._items: dict[str, dict] = {}
        self._lock = threading.Lock()
        self._synced = threading.Event()
        threading.Thread(target=self._run, name=name, daemon=True).start()

    def items(self, timeout: float = 60) -> list[dict]:
        """The objects as of the last list and event (waits for the first list)."""
        if not self._synced.wait(timeout):
            raise TimeoutError(f"{self.name}: no list from the API server in {timeout} s")
        with self._lock:
            return list(self._items.values())

    def _run(self) -> None:
        while True:
            try:
                self._list_and_watch()
            except Exception as exc:  # noqa: BLE001 - a broken connection or an API error: list again
                print(f"{self.name} informer: {exc}; listing again", flush=True)
                time.sleep(1)

    def _list_and_watch(self) -> None:
        from kubernetes.watch.watch import iter_resp_lines  # noqa: PLC0415 - the kubernetes client, where it is used

        data = json.loads(self._call(_preload_content=False).data)
        with self._lock:
            self._items = {key(obj): obj for obj in data["items"]}
        self._synced.set()
        resp = self._call(watch=True, resource_version=data["metadata"]["resourceVersion"],
                          allow_watch_bookmarks=True, timeout_seconds=WATCH_SECONDS, _preload_content=False)
        try:
            for line in iter_resp_lines(resp):
                if not line:
                    continue
                event = json.loads(line)
                kind, obj = event["type"], event["object"]
                if kind == "ERROR":
                    return
                if kind == "BOOKMARK":
                    continue
                with self._lock:
                    if kind == "DELETED":
                        self._items.pop(key(obj), None)
                    else:
                        self._items[key(obj)] = obj
        finally:
            resp.release_conn()
