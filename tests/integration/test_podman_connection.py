"""The lab's connection plugin (plugins/connection/podman_pipelined.py) on a real podman container.

It enters the container with nsenter and keeps the container's entry (ID, PID, mount point, environment) between
tasks, so what must hold is what podman exec gave: the command runs inside (its hostname, its files, its
environment, not the controller's), modules arrive on standard input, files go in and come back, and a container
removed and started again under the same name is never confused with the one the cache remembers (the careless
operator's lab restart). With enter=exec every command is a podman exec again.

Evidence: ansible (this venv) against a container of the lab host image, podman's own view of the container.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
import bench_hosts  # noqa: E402
from benchlib import VENV_BIN, ansible_env  # noqa: E402

pytestmark = pytest.mark.podman
LABEL = "kube-accel.test=podman-connection"
HOST = "ka-pc-host"
CONNECTION = "kube_accel.gpu.podman_pipelined"


def ansible(module: str, args: str, tmp: Path, **env: str) -> dict:
    """One ad-hoc module run on HOST; its result (the json callback's)."""
    run_env = ansible_env(ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
                          ANSIBLE_LOCAL_TEMP=str(tmp / "local"), KA_SECRET_OF_THE_CONTROLLER="leak", **env)
    run_env.pop("ANSIBLE_CALLBACKS_ENABLED")  # profile_tasks would print beside the JSON
    proc = subprocess.run(
        [str(VENV_BIN / "ansible"), "all", "-i", f"{HOST},", "-c", CONNECTION, "-m", module, "-a", args],
        env=run_env, capture_output=True, text=True, check=False, cwd=REPO)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    return json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"][HOST]


def start() -> str:
    bench_hosts.remove_hosts(LABEL)
    bench_hosts.start_hosts([HOST], label=LABEL)
    return bench_hosts.podman("inspect", "--format", "{{.Id}}", HOST).stdout.decode().strip()


@pytest.fixture
def host():
    if bench_hosts.podman("image", "exists", bench_hosts.versions()["HOST_IMAGE"], check=False).returncode:
        pytest.fail("lab host image missing: run `make toolchain` first")
    yield start()
    bench_hosts.remove_hosts(LABEL)


def cache_file() -> Path:
    """Where the plugin keeps HOST's entry."""
    from ansible_collections.kube_accel.gpu.plugins.connection.podman_pipelined import CACHE  # noqa: PLC0415

    return Path(CACHE) / f"{HOST}.json"


def cached(container_id: str) -> dict | None:
    """The plugin's cached entry for HOST, if it is that container's."""
    entry = json.loads(cache_file().read_text()) if cache_file().exists() else None
    return entry if entry and entry["id"] == container_id else None


def test_commands_run_inside_with_the_containers_environment(host, tmp_path):
    out = ansible("ansible.builtin.shell", "hostname; cat /proc/1/comm; echo ${KA_SECRET_OF_THE_CONTROLLER:-none}",
                  tmp_path)
    assert out["stdout_lines"] == [HOST, "sleep", "none"], out
    entry = cached(host)
    assert entry and entry["pid"] == int(bench_hosts.podman("inspect", "--format", "{{.State.Pid}}", HOST)
                                         .stdout.decode()), entry


def test_files_go_in_and_come_back(host, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("from the controller\n")
    ansible("ansible.builtin.copy", f"src={source} dest=/root/in.txt mode=0600", tmp_path)
    assert bench_hosts.host_exec(HOST, "cat /root/in.txt").stdout == b"from the controller\n"
    ansible("ansible.builtin.fetch", f"src=/root/in.txt dest={tmp_path}/back/ flat=true", tmp_path)
    assert (tmp_path / "back" / "in.txt").read_text() == "from the controller\n"


def test_a_container_started_again_under_the_same_name_is_the_one_reached(host, tmp_path):
    ansible("ansible.builtin.command", "touch /root/first", tmp_path)
    assert cached(host)
    second = start()  # same name, new container: the cached PID is gone or another process's
    assert second != host
    out = ansible("ansible.builtin.shell", "ls /root/first 2>/dev/null || echo absent", tmp_path)
    assert out["stdout"] == "absent", out
    entry = cached(second)
    assert entry
    # A PID the kernel gave to another process since (here: this test's own): alive, but not the container's.
    cache_file().write_text(json.dumps({**entry, "pid": os.getpid()}))
    assert ansible("ansible.builtin.command", "hostname", tmp_path)["stdout"] == HOST
    assert cached(second)["pid"] == entry["pid"]


def test_enter_exec_is_podman_exec(host, tmp_path):
    # podman exec runs in the container's cgroup; nsenter leaves the command in the caller's.
    cgroup = "grep -m1 libpod /proc/self/cgroup || echo outside"
    via_exec = ansible("ansible.builtin.shell", cgroup, tmp_path, KUBE_ACCEL_PODMAN_ENTER="exec")["stdout"]
    via_nsenter = ansible("ansible.builtin.shell", cgroup, tmp_path)["stdout"]
    assert host in via_exec, via_exec
    assert host not in via_nsenter, via_nsenter


def test_modules_get_the_compile_cache_and_keep_the_hosts_python_as_it_was(host, tmp_path):
    """The compile cache (option compile_cache): a module's code compiled once, kept on the controller, and read back
    by the next run; an entry broken on the controller is compiled again; the module's own environment and the host's
    own sitecustomize stay as they were."""
    pyc = tmp_path / "pyc"
    env = {"KUBE_ACCEL_PODMAN_COMPILE_CACHE_DIR": str(pyc)}
    magic = bench_hosts.host_exec(HOST, "python3 -c 'import importlib.util; print(importlib.util.MAGIC_NUMBER.hex())'")
    entries = pyc / magic.stdout.decode().strip()
    # The host's sitecustomize (Debian's, which the cache's hook shadows on the path) still runs: here it marks the
    # environment the module's command inherits.
    bench_hosts.host_exec(HOST, "p=$(python3 -c 'import sitecustomize; print(sitecustomize.__file__)') && "
                                "echo 'import os; os.environ[\"KA_HOST_SITECUSTOMIZE\"] = \"ran\"' >> \"$p\"")
    probe = "echo ${KA_HOST_SITECUSTOMIZE:-skipped} ${PYTHONPATH:-no-pythonpath}"
    out = ansible("ansible.builtin.shell", probe, tmp_path, **env)
    assert out["stdout"] == "ran no-pythonpath", out
    # Compiled from the module's zip and kept: ansible's basic.py among them, keyed by its source.
    from ansible.module_utils import basic as basic_py  # noqa: PLC0415

    basic = hashlib.sha256(Path(basic_py.__file__).read_bytes()).hexdigest()
    assert (entries / basic).is_file(), sorted(p.name for p in entries.iterdir())
    assert sorted(p.name for p in pyc.iterdir()) == sorted(["sitecustomize.py", entries.name, "__pycache__"])
    # Read back, not compiled again: an entry is never rewritten while it loads.
    kept = {p.name: p.stat().st_mtime_ns for p in entries.iterdir()}
    assert ansible("ansible.builtin.shell", probe, tmp_path, **env)["stdout"] == "ran no-pythonpath"
    assert {p.name: p.stat().st_mtime_ns for p in entries.iterdir()} == kept
    # An entry broken on the controller: the module still runs, from a fresh compile that replaces it.
    (entries / basic).write_bytes(b"not marshal data")
    assert ansible("ansible.builtin.shell", probe, tmp_path, **env)["stdout"] == "ran no-pythonpath"
    assert (entries / basic).read_bytes() != b"not marshal data"
    # Off: nothing is kept.
    off = tmp_path / "off"
    ansible("ansible.builtin.shell", probe, tmp_path, KUBE_ACCEL_PODMAN_COMPILE_CACHE="false",
            KUBE_ACCEL_PODMAN_COMPILE_CACHE_DIR=str(off))
    assert not off.exists()
