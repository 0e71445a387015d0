# Copyright: kube-accel contributors
# Apache License 2.0
"""The run lock: one kube-accel run at a time, as a coordination.k8s.io/v1 Lease in kube-accel's namespace.

The decisions (who holds the lease, has it expired, what to write, what to tell the operator) are pure functions
over the Lease as the API returns it (a dict, camelCase), so they are unit-tested without a cluster.
``LeaseClient`` is the thin kubernetes-client edge, and ``RENEWER`` the detached process that keeps the lease
fresh while the run lives:

* the run's holder identity is ``user@host pid N started TIME`` of the ansible-playbook process;
* the renewer writes ``renewTime`` every ``interval`` seconds while that process lives and the lease is still
  its own; within a second of the process's end (success, a failed play, Ctrl-C, kill -9) it releases the lease
  and exits;
* when the renewer itself dies (or the controller, or its network), nobody renews: the lease expires
  ``leaseDurationSeconds`` after its last ``renewTime`` and the next run takes it over.

A helm operation that a killed ansible-playbook left running is not covered by the lock once it is released;
helm.client never touches a pending release younger than its timeout, whoever holds the lock.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

LEASE_NAME = "kube-accel-run"
DEFAULT_DURATION = 60
MANAGED_BY = {"app.kubernetes.io/managed-by": "kube-accel", "app.kubernetes.io/part-of": "kube-accel"}


class LeaseError(Exception):
    """A failure meant for the user (message only)."""


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def format_time(moment: datetime) -> str:
    """MicroTime as the API writes it."""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: Any) -> datetime | None:
    """A MicroTime/Time string (or a datetime) -> aware datetime; None when absent or unreadable."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    if not value or not isinstance(value, str):
        return None
    text = value.strip().replace("Z", "+00:00")
    # helm and the API may write nanoseconds; Python reads at most microseconds.
    head, dot, rest = text.partition(".")
    if dot:
        digits = "".join(c for c in rest if c.isdigit())
        tail = rest[len(digits):]
        text = f"{head}.{digits[:6].ljust(6, '0')}{tail}"
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def human(seconds: float) -> str:
    """42s, 3m20s, 2h5m."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"


def holder_identity(host: str, user: str, pid: int, started: datetime) -> str:
    return f"{user}@{host} pid {pid} started {format_time(started)[:19]}Z"


def process_start(pid: int) -> datetime | None:
    """When process ``pid`` started (Linux /proc), for the holder identity and to tell a reused PID apart."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        ticks = int(fields[19])  # field 22 (starttime), counted after the "(comm)" field
        with open("/proc/stat", encoding="utf-8") as handle:
            btime = next(int(line.split()[1]) for line in handle if line.startswith("btime "))
        return datetime.fromtimestamp(btime + ticks / os.sysconf("SC_CLK_TCK"), timezone.utc)
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _parent_and_cmdline(pid: int) -> tuple[int, str]:
    with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
        ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
    with open(f"/proc/{pid}/cmdline", "rb") as handle:
        cmdline = handle.read().replace(b"\0", b" ").decode("utf-8", "replace")
    return ppid, cmdline


def find_playbook_pid(start: int | None = None) -> int | None:
    """The ansible-playbook process this module runs under: the topmost ancestor whose command line names
    ansible-playbook (its workers are forks with the same command line). None when the module was reached over a
    connection (ssh) and the controller is not an ancestor."""
    pid, found = start or os.getppid(), None
    for _unused in range(64):
        if pid <= 1:
            break
        try:
            ppid, cmdline = _parent_and_cmdline(pid)
        except (OSError, ValueError, IndexError):
            break
        if "ansible-playbook" in cmdline:
            found = pid
        pid = ppid
    return found


def default_holder(pid: int | None) -> str:
    pid = pid or os.getpid()
    return holder_identity(socket.gethostname(), getpass.getuser(), pid, process_start(pid) or utcnow())


# ----------------------------------------------------------------------------------------------------------
# decisions over the Lease object


@dataclass
class LeaseView:
    holder: str | None
    renewed: datetime | None
    duration: int | None
    transitions: int

    def expires_at(self) -> datetime | None:
        if self.renewed is None or self.duration is None:
            return None
        return datetime.fromtimestamp(self.renewed.timestamp() + self.duration, timezone.utc)


def view(lease: dict | None) -> LeaseView | None:
    if lease is None:
        return None
    spec = lease.get("spec") or {}
    return LeaseView(
        holder=spec.get("holderIdentity") or None,
        renewed=parse_time(spec.get("renewTime") or spec.get("acquireTime")),
        duration=spec.get("leaseDurationSeconds"),
        transitions=int(spec.get("leaseTransitions") or 0),
    )


def state(lease: dict | None, ours: str, now: datetime) -> str:
    """absent (no Lease), free (released), ours, expired (its holder stopped renewing) or held (by another run)."""
    seen = view(lease)
    if seen is None:
        return "absent"
    if not seen.holder:
        return "free"
    if seen.holder == ours:
        return "ours"
    expires = seen.expires_at()
    if expires is None or expires <= now:
        return "expired"
    return "held"


def other_holder(lease: dict | None, ours: str | None, now: datetime) -> str | None:
    """The holder of a live lease that is not this run's, else None."""
    return view(lease).holder if state(lease, ours or "", now) == "held" else None


def claimed(lease: dict | None, name: str, namespace: str, ours: str, duration: int, now: datetime) -> dict:
    """The Lease to write to take the lock: a new one, or ``lease`` (keeping its resourceVersion) taken over."""
    seen = view(lease)
    stamp = format_time(now)
    spec = {
        "holderIdentity": ours,
        "leaseDurationSeconds": int(duration),
        "acquireTime": stamp,
        "renewTime": stamp,
        "leaseTransitions": (seen.transitions + (1 if seen.holder else 0)) if seen else 0,
    }
    if lease is None:
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(MANAGED_BY)},
            "spec": spec,
        }
    out = json.loads(json.dumps(lease))
    out["spec"] = {**(out.get("spec") or {}), **spec}
    return out


def renewed(lease: dict, now: datetime) -> dict:
    out = json.loads(json.dumps(lease))
    out["spec"]["renewTime"] = format_time(now)
    return out


def released(lease: dict) -> dict:
    out = json.loads(json.dumps(lease))
    for key in ("holderIdentity", "acquireTime", "renewTime"):
        out["spec"].pop(key, None)
    return out


def refusal(name: str, namespace: str, lease: dict, now: datetime, waited: float) -> str:
    """Why the lock is not ours, and what the operator can do about it."""
    seen = view(lease)
    expires = seen.expires_at()
    left = human(expires.timestamp() - now.timestamp()) if expires else "?"
    ago = human(now.timestamp() - seen.renewed.timestamp()) if seen.renewed else "?"
    waited_text = f" after waiting {human(waited)}" if waited else ""
    return (
        f"another kube-accel run holds the run lock (Lease {namespace}/{name}){waited_text}: {seen.holder}, "
        f"renewed {ago} ago, expires in {left} unless renewed again. Wait for that run to end, or set "
        f"accel_run_lock_wait (seconds) to wait for it. A run whose controller died stops renewing and its lease "
        f"expires {seen.duration}s (leaseDurationSeconds) after the last renewal; if you are sure that run is gone, "
        f"release it now with: kubectl -n {namespace} delete lease {name}"
    )


# ----------------------------------------------------------------------------------------------------------
# the kubernetes edge


class LeaseClient:
    """Read, create, replace and delete one Lease with the kubernetes client, as plain dicts."""

    def __init__(self, api_client: Any, namespace: str, name: str):
        from kubernetes import client  # noqa: PLC0415 - optional dependency, checked by the caller

        self.api = client.CoordinationV1Api(api_client)
        self.core = client.CoreV1Api(api_client)
        self.namespace = namespace
        self.name = name

    @staticmethod
    def _status(exc: Exception) -> int | None:
        return getattr(exc, "status", None)

    def read(self) -> dict | None:
        try:
            resp = self.api.read_namespaced_lease(self.name, self.namespace, _preload_content=False)
        except Exception as exc:
            if self._status(exc) == 404:
                return None
            raise
        return json.loads(resp.data)

    def create(self, body: dict) -> dict | None:
        """The created Lease, or None when someone else created it first (409)."""
        try:
            resp = self.api.create_namespaced_lease(self.namespace, body, _preload_content=False)
        except Exception as exc:
            if self._status(exc) == 409:
                return None
            raise
        return json.loads(resp.data)

    def replace(self, body: dict) -> dict | None:
        """The replaced Lease, or None when it changed or went away since it was read (409/404)."""
        try:
            resp = self.api.replace_namespaced_lease(self.name, self.namespace, body, _preload_content=False)
        except Exception as exc:
            if self._status(exc) in (404, 409):
                return None
            raise
        return json.loads(resp.data)

    def ensure_namespace(self) -> bool:
        try:
            self.core.read_namespace(self.namespace)
            return False
        except Exception as exc:
            if self._status(exc) != 404:
                raise
        try:
            self.core.create_namespace({"metadata": {"name": self.namespace, "labels": dict(MANAGED_BY)}})
        except Exception as exc:
            if self._status(exc) != 409:
                raise
        return True


def acquire(
    client: Any,
    ours: str,
    duration: int,
    wait: float,
    *,
    check_mode: bool = False,
    clock: Callable[[], datetime] = utcnow,
    sleep: Callable[[float], None] = time.sleep,
    poll: float = 2.0,
) -> dict:
    """Take the lock for ``ours`` (waiting up to ``wait`` seconds for another run); raises LeaseError when held.

    Returns ``changed``, ``state`` (what was found: absent/free/ours/expired) and ``previous_holder`` when an
    expired lease was taken over. Writes carry the resourceVersion read, so two runs racing for a free lease
    cannot both win: the loser's write is refused (409) and it reads again.
    """
    started = time.monotonic()
    while True:
        lease = client.read()
        now = clock()
        found = state(lease, ours, now)
        if found == "ours":
            return {"changed": False, "state": found}
        if found != "held":
            result = {"changed": True, "state": found}
            if found == "expired":
                result["previous_holder"] = view(lease).holder
            if check_mode:
                return result
            body = claimed(lease, client.name, client.namespace, ours, duration, now)
            written = client.create(body) if lease is None else client.replace(body)
            if written is not None:
                return result
            continue  # lost a race: read again
        waited = time.monotonic() - started
        if waited >= wait:
            raise LeaseError(refusal(client.name, client.namespace, lease, now, waited if wait else 0))
        sleep(min(poll, max(0.1, wait - waited)))


def release(client: Any, ours: str, *, check_mode: bool = False) -> dict:
    """Give the lock back when it is ours (the Lease stays, without a holder); anything else is left alone."""
    for _unused in range(5):
        lease = client.read()
        seen = view(lease)
        if seen is None or seen.holder != ours:
            return {"changed": False, "holder": seen.holder if seen else None}
        if check_mode:
            return {"changed": True, "holder": ours}
        if client.replace(released(lease)) is not None:
            return {"changed": True, "holder": ours}
    raise LeaseError(f"could not release Lease {client.namespace}/{client.name}: it kept changing")


# The detached renewer, run as `python -c RENEWER '<json>'` (the module's own files are gone once it returns).
# It renews while the owner process lives and the lease is its own, releases the lease when the owner ends, and
# stops renewing (without releasing) after max_hold seconds when it has no owner process to watch, or once it has
# failed to renew for longer than the lease's duration (the API gone: the lease has lapsed, another run may take it).
RENEWER = r'''
import json, os, sys, time
from datetime import datetime, timezone
cfg = json.loads(sys.argv[1])
from kubernetes import client, config
conf = client.Configuration()
config.load_kube_config(cfg["kubeconfig"], context=cfg["context"] or None, client_configuration=conf)
api = client.CoordinationV1Api(client.ApiClient(conf))
ns, name, ours = cfg["namespace"], cfg["name"], cfg["holder"]

def stamp():
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

def owner_alive():
    pid = cfg["owner_pid"]
    try:
        with open("/proc/%d/stat" % pid) as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z" and int(fields[19]) == cfg["owner_start_ticks"]

def read():
    try:
        return json.loads(api.read_namespaced_lease(name, ns, _preload_content=False).data)
    except client.exceptions.ApiException as exc:
        if exc.status == 404:
            return None
        raise

def write(lease, release):
    if release:
        for key in ("holderIdentity", "acquireTime", "renewTime"):
            lease["spec"].pop(key, None)
    else:
        lease["spec"]["renewTime"] = stamp()
    api.replace_namespaced_lease(name, ns, lease, _preload_content=False)

deadline = time.time() + cfg["max_hold"]
last = renewed = time.time()
while True:
    # The owner is checked every second so the lock is given back within a second of the run's end; the lease
    # is written every interval.
    time.sleep(min(1.0, cfg["interval"]))
    ending = owner_alive() is False if cfg["owner_pid"] else False
    if not cfg["owner_pid"] and time.time() > deadline:
        break
    if not ending and time.time() - last < cfg["interval"]:
        continue
    last = time.time()
    try:
        lease = read()
        if lease is None or (lease.get("spec") or {}).get("holderIdentity") != ours:
            break
        write(lease, ending)
        renewed = time.time()
        if ending:
            break
    except Exception:
        if ending or time.time() - renewed > cfg["duration"]:
            break
'''


def owner_start_ticks(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def spawn_renewer(python: str, settings: dict) -> int:
    """Start the renewer detached (own session, no inherited stdio, so Ansible does not wait for it); its PID."""
    import subprocess  # noqa: PLC0415

    with open(os.devnull, "rb") as null_in, open(os.devnull, "wb") as null_out:
        proc = subprocess.Popen(  # noqa: S603 - fixed argv: this interpreter and the script above
            [python, "-c", RENEWER, json.dumps(settings)],
            stdin=null_in,
            stdout=null_out,
            stderr=null_out,
            start_new_session=True,
            close_fds=True,
            cwd="/",
        )
    return proc.pid


# accel_release(s)' options naming the run lock (documented as run_lock_* in each module).
RUN_LOCK_ARGUMENT_SPEC = {
    "run_lock_name": {"type": "str", "default": LEASE_NAME},
    "run_lock_namespace": {"type": "str"},
    "run_lock_holder": {"type": "str"},
}


def release_lock_check(params: dict[str, Any]) -> Callable[[], str | None]:
    """lock_check from accel_release(s)' parameters: the Lease lives in the releases' namespace unless told."""
    return lock_check(params["kubeconfig"], params["context"], params["run_lock_namespace"] or params["namespace"],
                      params["run_lock_name"], params["run_lock_holder"] or None)


def lock_check(kubeconfig: str | None, context: str | None, namespace: str, name: str,
               ours: str | None) -> Callable[[], str | None]:
    """For accel_release(s): a call that returns the holder of the run lock when it is another live run. It reads
    the Lease only when called (a pending release was found), so the kubernetes client is needed only then."""

    def check() -> str | None:
        try:
            from kubernetes import client, config  # noqa: PLC0415
        except ImportError:
            raise LeaseError("the kubernetes Python client is not installed") from None
        configuration = client.Configuration()
        config.load_kube_config(kubeconfig, context=context or None, client_configuration=configuration)
        lease = LeaseClient(client.ApiClient(configuration), namespace, name).read()
        return other_holder(lease, ours, utcnow())

    return check
