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
  - Entered with C(nsenter), a module that Ansible sends on standard input finds a compile cache (O(compile_cache)).
    Python's zipimport compiles the source of every module and module_util from the module's zip on each run (twice
    per file on Python 3.11-3.13, once for its file name and once for its code), a quarter of all CPU time of a lab
    C(site.yml) re-run, sampled with py-spy. The cache keeps each compiled file, keyed by its source's SHA-256, in a
    directory on the controller that the module's Python reaches through an inherited file descriptor and finds first
    on its C(PYTHONPATH), as a C(sitecustomize) that removes itself from the path and the environment and then runs
    the host's own C(sitecustomize). Nothing is written into the container.
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
  compile_cache:
    description: Give modules sent on standard input the controller's compile cache (nsenter only).
    type: boolean
    default: true
    vars:
      - name: ansible_podman_compile_cache
    env:
      - name: KUBE_ACCEL_PODMAN_COMPILE_CACHE
  compile_cache_dir:
    description:
      - The compile cache's directory on the controller (created with mode 0700).
      - Unset, C(kube-accel-podman-UID/pyc) in the controller's temporary directory.
    type: path
    vars:
      - name: ansible_podman_compile_cache_dir
    env:
      - name: KUBE_ACCEL_PODMAN_COMPILE_CACHE_DIR
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
# The compile cache (options compile_cache, compile_cache_dir): this hook, then one directory per Python bytecode
# version.
PYC = os.path.join(CACHE, "pyc")
# Runs first in the module's Python (its PYTHONPATH starts with PYC, reached as /proc/self/fd/N). It must never fail
# the module: any error leaves Python as it was.
COMPILE_CACHE_HOOK = """\
# kube-accel's podman_pipelined connection: a compile cache for the module code Ansible sends on standard input.
import os
import sys


def _install():
    here = os.environ["PYTHONPATH"].split(os.pathsep)[0]  # the plugin put this directory first
    sys.path[:] = [p for p in sys.path if p != here]
    rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != here]
    if rest:
        os.environ["PYTHONPATH"] = os.pathsep.join(rest)
    else:
        os.environ.pop("PYTHONPATH", None)
    import _imp
    import marshal
    import zipimport
    from hashlib import sha256
    from importlib.util import MAGIC_NUMBER

    cache = os.path.join(here, MAGIC_NUMBER.hex())
    compile_source = zipimport._compile_source

    def cached(pathname, source):
        path = os.path.join(cache, sha256(source).hexdigest())
        try:
            with open(path, "rb") as entry:
                code = marshal.loads(entry.read())
            _imp._fix_co_filename(code, pathname)  # TypeError unless a code object
            return code
        except (OSError, EOFError, ValueError, TypeError):
            pass
        code = compile_source(pathname, source)
        try:
            os.makedirs(cache, exist_ok=True)
            # A name of its own: hosts' PIDs repeat (each container has its PID namespace), and an entry is renamed
            # into place whole, so no reader meets a partly written one.
            part = f"{path}.{os.urandom(8).hex()}"
            with os.fdopen(os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as entry:
                entry.write(marshal.dumps(code))
            os.replace(part, path)
        except OSError:
            pass
        return code

    zipimport._compile_source = cached
    # The host's own sitecustomize, which this one shadows.
    from importlib.machinery import PathFinder

    spec = PathFinder.find_spec(__name__, sys.path)
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(sys.modules[__name__])


try:
    _install()
except Exception:
    pass
"""


def _write_whole(path: str, text: str) -> None:
    """``text`` into ``path`` (its directory made 0700), renamed into place whole: parallel workers write these files
    and read them."""
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path))
    with os.fdopen(fd, "w", encoding="utf-8") as out_file:
        out_file.write(text)
    os.replace(tmp, path)


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
        _write_whole(path, json.dumps(entry))
        return entry

    def _compile_cache(self) -> int | None:
        """A descriptor of the compile cache's directory, its hook in place (option compile_cache), or None."""
        if not self.get_option("compile_cache"):
            return None
        pyc = self.get_option("compile_cache_dir") or PYC
        try:
            hook = os.path.join(pyc, "sitecustomize.py")
            try:
                with open(hook, encoding="utf-8") as current:
                    same = current.read() == COMPILE_CACHE_HOOK
            except OSError:
                same = False
            if not same:
                _write_whole(hook, COMPILE_CACHE_HOOK)
            return os.open(pyc, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            return None

    @ensure_connect
    def exec_command(self, cmd, in_data=None, sudoable=False):
        # The base of PodmanConnection only records the command (ConnectionBase.exec_command).
        super(PodmanConnection, self).exec_command(cmd, in_data=in_data, sudoable=sudoable)
        args = shlex.split(to_native(cmd, errors="surrogate_or_strict"))
        if self._entry is not None:
            env = dict(item.split("=", 1) for item in self._entry["env"] if "=" in item)
            cache = self._compile_cache() if in_data is not None else None
            if cache is not None:
                env["PYTHONPATH"] = os.pathsep.join(p for p in (f"/proc/self/fd/{cache}", env.get("PYTHONPATH")) if p)
            local = [self._nsenter, "--target", str(self._entry["pid"]), "--all", "--root", "--wd", *args]
            try:
                proc = subprocess.Popen([to_bytes(a, errors="surrogate_or_strict") for a in local], env=env,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        pass_fds=() if cache is None else (cache,))
                stdout, stderr = proc.communicate(input=in_data)
            finally:
                if cache is not None:
                    os.close(cache)
            if proc.returncode == 1 and b"nsenter: " in stderr and not stdout:
                raise AnsibleError(f"{self._container_id}: nsenter failed: {to_native(stderr).strip()}")
            return proc.returncode, stdout, stderr
        exec_args = ["exec"]
        if in_data is not None:
            exec_args.append("--interactive")
        if self.user:
            exec_args.extend(("--user", self.user))
        return self._podman(exec_args, args, in_data)
