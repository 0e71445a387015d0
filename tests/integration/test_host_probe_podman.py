"""A kube-accel upgrade on a converged host: the hosts play drains only a host the new code changes.

The collection is copied to a temporary directory and the hosts play runs from the copy, so an "upgrade" is an edit
of the copy (never of this checkout). One fresh podman host of the lab's pGPU pool:

1. converged from the copy, recorded;
2. upgrade A, a comment in a role's tasks file (what the host receives does not change): the record differs in the
   code digest alone, the host roles run in check mode, find nothing to change, the host is recorded with the new
   code and never looked up in the cluster (no cordon, no drain), and the next run takes the fast path;
3. upgrade B, a line of a file a role writes on the host: the check-mode probe finds the change, the host goes the
   change path (it is looked up as a cordon candidate), the roles write the new line, and the next run takes the fast
   path again.

The cluster is a stand-in: an HTTP server that answers every Node lookup "not found" and logs each request. The hosts
play asks the API only about hosts that change (their cordon and drain follow from that answer), so the log says
whether the host was a drain candidate at all; the cordon itself is tests/integration/test_rolling_maintenance_lab.py's.
"""

from __future__ import annotations

import json
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
import bench_hosts  # noqa: E402
from benchlib import ansible_env, run_playbook  # noqa: E402

pytestmark = pytest.mark.podman
LABEL = "kube-accel.test=host-probe"
HOST = "ka-hp-pgpu"
RECORD = "/var/lib/kube-accel/host-state.json"
MODULES_FILE = "/etc/modules-load.d/kube-accel-nvidia.conf"
KERNEL_MODULES_TASKS = "roles/kernel_modules/tasks/main.yml"
MANAGED_LINE = "# Managed by kube-accel (kernel_modules), "
UPGRADED_LINE = "# Managed by kube-accel, upgraded (kernel_modules), "


class StandInApi(BaseHTTPRequestHandler):
    """Every request is logged; every Node is "not found" (hosts that are not cluster nodes yet)."""

    requests: list[str] = []

    def _answer(self) -> None:
        StandInApi.requests.append(f"{self.command} {self.path}")
        body = json.dumps(
            {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "reason": "NotFound",
                "code": 404,
                "message": "not found",
            }
        ).encode()
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_PATCH = do_POST = _answer  # noqa: N815 - http.server's names

    def log_message(self, *args) -> None:  # quiet
        pass


@pytest.fixture(scope="module")
def upgrade_lab(tmp_path_factory):
    if bench_hosts.podman("image", "exists", bench_hosts.versions()["HOST_IMAGE"], check=False).returncode:
        pytest.fail("lab host image missing: run `make toolchain` first")
    work = tmp_path_factory.mktemp("host-probe")
    collection = work / "collections" / "ansible_collections" / "kube_accel" / "gpu"
    for part in ("ansible", "roles", "plugins", "meta"):
        shutil.copytree(REPO / part, collection / part, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(REPO / "galaxy.yml", collection / "galaxy.yml")

    server = ThreadingHTTPServer(("127.0.0.1", 0), StandInApi)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    kubeconfig = work / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "stand-in",
                "clusters": [{"name": "stand-in", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}],
                "users": [{"name": "stand-in", "user": {"token": "stand-in"}}],
                "contexts": [{"name": "stand-in", "context": {"cluster": "stand-in", "user": "stand-in"}}],
            }
        )
    )

    bench_hosts.remove_hosts(LABEL)
    bench_hosts.start_hosts([HOST], label=LABEL)
    inventory = bench_hosts.write_inventory(work / "inventory", {"pool_pgpu": [HOST]})
    env = ansible_env(
        ANSIBLE_CACHE_PLUGIN_CONNECTION=str(work / "facts"),
        ANSIBLE_COLLECTIONS_PATH=f"{work / 'collections'}:{REPO / '.venv/lib/python3.11/site-packages'}",
    )

    runs = iter(range(1, 100))

    def run():
        StandInApi.requests.clear()
        return run_playbook(
            str(collection / "ansible" / "hosts.yml"),
            inventory,
            "-e",
            f"accel_kubeconfig={kubeconfig}",
            env=env,
            log_to=work / f"run-{next(runs)}.log",
        )

    yield collection, run
    server.shutdown()
    bench_hosts.remove_hosts(LABEL)


def said(run) -> str:
    """The run's output with YAML's line wrapping undone (messages are compared whole)."""
    return " ".join(run.output.split())


def record() -> dict:
    return json.loads(bench_hosts.host_exec(HOST, f"cat {RECORD}").stdout)


def host_file(path: str) -> str:
    return bench_hosts.host_exec(HOST, f"cat {path}").stdout.decode()


def test_upgrade_drains_only_a_host_the_new_code_changes(upgrade_lab):
    collection, run = upgrade_lab
    tasks = collection / KERNEL_MODULES_TASKS
    assert MANAGED_LINE in tasks.read_text()

    first = run()
    assert first.changed[HOST] > 0
    assert f"GET /api/v1/nodes/{HOST}" in StandInApi.requests  # a host that changes is looked up
    converged = record()
    assert MANAGED_LINE in host_file(MODULES_FILE)

    # Upgrade A: role code changes, nothing the host receives does.
    tasks.write_text(tasks.read_text() + "# A comment a kube-accel upgrade added.\n")
    upgrade = run()
    assert "Check-mode probe: the kube-accel code changed (variables, facts and host state did not)" in said(upgrade)
    assert "the host roles in check mode change nothing here: recorded, not drained" in said(upgrade)
    assert "TASK [kube_accel.gpu.kernel_modules : Load the NVIDIA modules at boot]" in upgrade.output  # probed
    assert "Cordon and drain the node" not in upgrade.output
    assert StandInApi.requests == []  # not a cordon candidate: no API call at all
    assert upgrade.changed[HOST] == 1, upgrade.output[-4000:]  # the record, nothing else
    probed = record()
    assert probed["code"] != converged["code"]
    assert (probed["inputs"], probed["state_digest"]) == (converged["inputs"], converged["state_digest"])

    after = run()
    assert "Fast path: inputs and host state match the last full run" in said(after)
    assert after.total_changed == 0 and StandInApi.requests == []

    # Upgrade B: a line of a file the host receives changes.
    tasks.write_text(tasks.read_text().replace(MANAGED_LINE, UPGRADED_LINE))
    change = run()
    assert "the host roles in check mode would change this host (a host role task would change)" in said(change)
    assert f"GET /api/v1/nodes/{HOST}" in StandInApi.requests  # a cordon candidate again
    assert UPGRADED_LINE in host_file(MODULES_FILE)
    assert record()["code"] != probed["code"]

    again = run()
    assert "Fast path: inputs and host state match the last full run" in said(again)
    assert again.total_changed == 0
