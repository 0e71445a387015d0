# Copyright: kube-accel contributors
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
---
name: podman_pipelined
short_description: containers.podman.podman with pipelining, for kube-accel's podman lab hosts
description:
  - The containers.podman.podman connection, with pipelining. Upstream turned pipelining off because its
    C(podman exec) did not pass standard input on; this plugin adds C(--interactive) when Ansible sends the module
    on standard input, so each task is one C(podman exec) instead of a temporary directory, a copy, an exec and a
    cleanup (four C(podman) runs).
  - As root, with no C(remote_user), it enters the container's namespaces with C(nsenter) (util-linux) instead
    of C(podman exec), and copies files through the container's mount point. It runs C(podman inspect) and
    C(podman mount) once when it first meets a container (cached by container ID), and no C(podman) per task after
    that. The command gets the container's environment and runs as root with every capability, outside the
    container's cgroup (the caller's CPU weight applies to it). Otherwise, and with O(enter=exec), each task is one
    C(podman exec).
  - Used by the lab and the benchmarks only; real GPU hosts are reached over SSH, where ansible.cfg enables
    pipelining too.
author: kube-accel contributors
version_added: "0.1.0"
options:
  remote_addr:
    description: The name or ID of the container.
    default: inventory_hostname
    vars:
      - name: ansible_host
      - name: inventory_hostname
      - name: ansible_podman_host
  remote_user:
    description: User (name or UID) that runs commands inside the container.
    ini:
      - section: defaults
        key: remote_user
    env:
      - name: ANSIBLE_REMOTE_USER
    vars:
      - name: ansible_user
  podman_extra_args:
    description: Extra arguments to the podman command line.
    default: ''
    ini:
      - section: defaults
        key: podman_extra_args
    vars:
      - name: ansible_podman_extra_args
    env:
      - name: ANSIBLE_PODMAN_EXTRA_ARGS
  podman_executable:
    description: The podman executable.
    default: podman
    vars:
      - name: ansible_podman_executable
    env:
      - name: ANSIBLE_PODMAN_EXECUTABLE
  enter:
    description: How a command reaches the container; C(nsenter) falls back to C(exec) where it cannot be used.
    type: str
    choices: [nsenter, exec]
    default: nsenter
    vars:
      - name: ansible_podman_enter
    env:
      - name: KUBE_ACCEL_PODMAN_ENTER
  pipelining:
    description: Send modules on standard input instead of copying them into the container first.
    type: boolean
    default: true
    ini:
      - section: connection
        key: pipelining
    env:
      - name: ANSIBLE_PIPELINING
    vars:
      - name: ansible_pipelining
"""

# DOCUMENTATION comes first, as in every Ansible plugin.
import json  # noqa: E402
import os  # noqa: E402
import shlex  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402

from ansible.errors import AnsibleError  # noqa: E402
from ansible.module_utils.common.text.converters import to_bytes, to_native  # noqa: E402
from ansible.plugins.connection import ConnectionBase, ensure_connect  # noqa: E402
from ansible_collections.containers.podman.plugins.connection.podman import (  # noqa: E402
    Connection as PodmanConnection,
)

# Where a container's entry (ID, PID, mount point, environment) is kept between tasks: each task is a new process.
CACHE = os.path.join(tempfile.gettempdir(), f"kube-accel-podman-{os.getuid()}")


def _alive(entry: dict) -> bool:
    """The cached PID is still the container's first process (a PID is reused; its cgroup names the container)."""
    try:
        with open(f"/proc/{entry['pid']}/cgroup", encoding="utf-8") as cgroup:
            return entry["id"] in cgroup.read() and os.path.isdir(os.path.join(entry["mount"], "proc"))
    except (OSError, KeyError, TypeError):
        return False


class Connection(PodmanConnection):
    transport = "podman_pipelined"
    has_pipelining = True

    def _connect(self):
        if self._connected:
            return self
        self._entry = None
        self._nsenter = shutil.which("nsenter")
        if self.get_option("enter") == "nsenter" and not self.user and os.geteuid() == 0 and self._nsenter:
            self._entry = self._lookup()
        if self._entry is None:
            return super()._connect()  # podman mount, then one podman exec per command
        ConnectionBase._connect(self)
        self._mount_point = to_bytes(self._entry["mount"], errors="surrogate_or_strict")  # bytes, as the base keeps it
        self._connected = True
        return self

    def _lookup(self) -> dict | None:
        """The container's entry, from the cache while its PID is alive, else from podman (and cached)."""
        path = os.path.join(CACHE, f"{self._container_id}.json")
        try:
            with open(path, encoding="utf-8") as cached:
                entry = json.load(cached)
            if _alive(entry):
                return entry
        except (OSError, ValueError):
            pass
        rc, out, _ = self._podman("inspect")
        if rc != 0:
            return None  # not running, or not a container: exec reports it
        info = json.loads(out)[0]
        rc, mount, _ = self._podman("mount")
        entry = {"id": info["Id"], "pid": info["State"]["Pid"], "env": info["Config"].get("Env") or [],
                 "mount": to_native(mount).strip()}
        if rc != 0 or not _alive(entry):
            return None
        os.makedirs(CACHE, mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=CACHE)
        with os.fdopen(fd, "w", encoding="utf-8") as out_file:
            json.dump(entry, out_file)
        os.replace(tmp, path)  # atomic: parallel workers may look the same container up
        return entry

    @ensure_connect
    def exec_command(self, cmd, in_data=None, sudoable=False):
        # The base of PodmanConnection only records the command (ConnectionBase.exec_command).
        super(PodmanConnection, self).exec_command(cmd, in_data=in_data, sudoable=sudoable)
        args = shlex.split(to_native(cmd, errors="surrogate_or_strict"))
        if self._entry is not None:
            env = dict(item.split("=", 1) for item in self._entry["env"] if "=" in item)
            local = [self._nsenter, "--target", str(self._entry["pid"]), "--all", "--root", "--wd", *args]
            proc = subprocess.Popen([to_bytes(a, errors="surrogate_or_strict") for a in local], env=env,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            stdout, stderr = proc.communicate(input=in_data)
            if proc.returncode == 1 and b"nsenter: " in stderr and not stdout:
                raise AnsibleError(f"{self._container_id}: nsenter failed: {to_native(stderr).strip()}")
            return proc.returncode, stdout, stderr
        exec_args = ["exec"]
        if in_data is not None:
            exec_args.append("--interactive")
        if self.user:
            exec_args.extend(("--user", self.user))
        return self._podman(exec_args, args, in_data)
