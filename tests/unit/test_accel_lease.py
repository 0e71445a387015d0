"""Unit tests for accel_lease: the run lock's decisions over the Lease object, acquire/release against an in-memory
API with the same optimistic concurrency (resourceVersion), and the operator's message. The renewer against the real
API is covered by tests/integration/test_run_lock_lab.py; here it meets an API server that is gone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest
from ansible_collections.kube_accel.gpu.plugins.module_utils.cluster import lease as al

NOW = datetime(2026, 11, 23, 12, 0, 0, tzinfo=UTC)
OURS = "ops@ctl-1 pid 100 started 2026-11-23T11:59:00Z"
OTHER = "dev@ctl-2 pid 200 started 2026-11-23T11:58:00Z"


def lease(holder=OTHER, renewed_ago=5.0, duration=60, transitions=0):
    spec = {"leaseDurationSeconds": duration, "leaseTransitions": transitions}
    if holder:
        spec.update(holderIdentity=holder, renewTime=al.format_time(NOW - timedelta(seconds=renewed_ago)))
    return {"metadata": {"name": "kube-accel-run", "namespace": "kube-accel", "resourceVersion": "1"}, "spec": spec}


class FakeLeases:
    """One Lease in memory; writes must carry the resourceVersion last read, as the API server requires."""

    def __init__(self, current=None, name="kube-accel-run", namespace="kube-accel"):
        self.name, self.namespace = name, namespace
        self.current = current
        self.writes = []
        self.before_write = None  # a competing writer, to test races

    def read(self):
        return json.loads(json.dumps(self.current)) if self.current else None

    def _store(self, body):
        rv = int((self.current or {}).get("metadata", {}).get("resourceVersion", "0")) + 1
        body = json.loads(json.dumps(body))
        body.setdefault("metadata", {})["resourceVersion"] = str(rv)
        self.current = body
        self.writes.append(body)
        return body

    def create(self, body):
        if self.before_write:
            self.before_write(), setattr(self, "before_write", None)
        return None if self.current else self._store(body)

    def replace(self, body):
        if self.before_write:
            self.before_write(), setattr(self, "before_write", None)
        if not self.current or body["metadata"]["resourceVersion"] != self.current["metadata"]["resourceVersion"]:
            return None
        return self._store(body)


@pytest.mark.parametrize(
    ("current", "expected"),
    [
        (None, "absent"),
        (lease(holder=None), "free"),
        (lease(holder=OURS), "ours"),
        (lease(renewed_ago=59), "held"),
        (lease(renewed_ago=61), "expired"),
        (lease(renewed_ago=10, duration=5), "expired"),
    ],
)
def test_state(current, expected):
    assert al.state(current, OURS, NOW) == expected


def test_other_holder_only_for_a_live_lease_of_another_run():
    assert al.other_holder(lease(), OURS, NOW) == OTHER
    assert al.other_holder(lease(holder=OURS), OURS, NOW) is None
    assert al.other_holder(lease(renewed_ago=120), OURS, NOW) is None
    assert al.other_holder(None, None, NOW) is None
    assert al.other_holder(lease(), None, NOW) == OTHER


def test_acquire_creates_the_lease():
    api = FakeLeases()
    assert al.acquire(api, OURS, 30, 0, clock=lambda: NOW) == {"changed": True, "state": "absent"}
    spec = api.current["spec"]
    assert spec["holderIdentity"] == OURS and spec["leaseDurationSeconds"] == 30
    assert spec["renewTime"] == spec["acquireTime"] == "2026-11-23T12:00:00.000000Z"
    assert api.current["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "kube-accel"


def test_acquire_again_by_the_same_run_changes_nothing():
    api = FakeLeases(lease(holder=OURS))
    assert al.acquire(api, OURS, 60, 0, clock=lambda: NOW) == {"changed": False, "state": "ours"}
    assert api.writes == []


def test_second_run_is_refused_naming_the_holder():
    api = FakeLeases(lease(renewed_ago=5))
    with pytest.raises(al.LeaseError) as caught:
        al.acquire(api, OURS, 60, 0, clock=lambda: NOW)
    msg = str(caught.value)
    assert f"another kube-accel run holds the run lock (Lease kube-accel/kube-accel-run): {OTHER}" in msg
    assert "renewed 5s ago, expires in 55s" in msg and "accel_run_lock_wait" in msg
    assert "60s (leaseDurationSeconds)" in msg and "kubectl -n kube-accel delete lease kube-accel-run" in msg
    assert api.writes == []


def test_expired_lease_is_taken_over_and_counted():
    api = FakeLeases(lease(renewed_ago=90, transitions=2))
    taken = al.acquire(api, OURS, 60, 0, clock=lambda: NOW)
    assert taken == {"changed": True, "state": "expired", "previous_holder": OTHER}
    assert api.current["spec"]["holderIdentity"] == OURS and api.current["spec"]["leaseTransitions"] == 3


def test_waiting_takes_the_lock_once_the_holder_releases():
    api = FakeLeases(lease(renewed_ago=1))
    slept = []

    def sleep(seconds):
        slept.append(seconds)
        if len(slept) == 2:
            api.current["spec"].pop("holderIdentity")

    taken = al.acquire(api, OURS, 60, 30, clock=lambda: NOW, sleep=sleep, poll=1.0)
    assert taken["state"] == "free" and slept == [1.0, 1.0]


def test_waiting_gives_up_after_the_wait():
    api = FakeLeases(lease(renewed_ago=1))
    with pytest.raises(al.LeaseError, match="after waiting"):
        al.acquire(api, OURS, 60, 0.05, clock=lambda: NOW, sleep=lambda s: None, poll=0.01)


def test_a_race_for_an_expired_lease_has_one_winner():
    api = FakeLeases(lease(renewed_ago=90))

    def competitor():  # another run writes between our read and our write
        body = al.claimed(api.read(), "kube-accel-run", "kube-accel", "third@ctl-3 pid 3", 60, NOW)
        api._store(body)

    api.before_write = competitor
    with pytest.raises(al.LeaseError, match="third@ctl-3 pid 3"):
        al.acquire(api, OURS, 60, 0, clock=lambda: NOW)


def test_check_mode_writes_nothing():
    api = FakeLeases()
    assert al.acquire(api, OURS, 60, 0, check_mode=True, clock=lambda: NOW)["changed"] is True
    assert api.writes == [] and api.current is None


def test_release_only_our_own_lock():
    api = FakeLeases(lease(holder=OURS))
    assert al.release(api, OURS) == {"changed": True, "holder": OURS}
    assert "holderIdentity" not in api.current["spec"] and al.state(api.current, OURS, NOW) == "free"
    assert al.release(api, OURS)["changed"] is False
    other = FakeLeases(lease())
    assert al.release(other, OURS) == {"changed": False, "holder": OTHER} and other.writes == []


def test_renewal_moves_only_renew_time():
    before = lease(holder=OURS, renewed_ago=20)
    after = al.renewed(before, NOW)
    assert after["spec"]["renewTime"] == al.format_time(NOW)
    assert {k: v for k, v in after["spec"].items() if k != "renewTime"} == {
        k: v for k, v in before["spec"].items() if k != "renewTime"}


def test_times_and_identity():
    assert al.parse_time("2026-11-23T12:00:00.123456789Z") == NOW.replace(microsecond=123456)
    assert al.parse_time("2026-11-23T12:00:00Z") == NOW and al.parse_time("") is None
    assert al.human(42) == "42s" and al.human(200) == "3m20s" and al.human(7500) == "2h05m"
    assert al.holder_identity("ctl-1", "ops", 100, NOW) == "ops@ctl-1 pid 100 started 2026-11-23T12:00:00Z"
    assert al.process_start(os.getpid()) is not None
    assert al.owner_start_ticks(os.getpid()) is not None


def test_playbook_pid_is_found_among_the_ancestors_only():
    # pytest is not run by ansible-playbook: nothing to watch.
    assert al.find_playbook_pid() is None


def test_renewer_script_compiles():
    compile(al.RENEWER, "<renewer>", "exec")


@pytest.mark.parametrize("owner", ["none", "alive"])
def test_renewer_stops_once_the_api_is_gone_for_a_lease_duration(tmp_path, owner):
    # The real renewer script against a kubeconfig whose API server does not listen (port 9 on loopback): every
    # read fails. Without this stop, a renewer with no owner to watch would loop until max_hold (4 h here), and one
    # with a live owner for ever.
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "gone",
        "clusters": [{"name": "gone", "cluster": {"server": "http://127.0.0.1:9"}}],
        "users": [{"name": "gone", "user": {"token": "x"}}],
        "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "gone"}}]}))
    pid = os.getpid() if owner == "alive" else None
    cfg = {"kubeconfig": str(kubeconfig), "context": None, "namespace": "kube-accel", "name": "kube-accel-run",
           "holder": OURS, "interval": 1, "duration": 3, "max_hold": 14400, "owner_pid": pid,
           "owner_start_ticks": al.owner_start_ticks(pid) if pid else None}
    began = time.monotonic()
    subprocess.run([sys.executable, "-c", al.RENEWER, json.dumps(cfg)], check=True, timeout=60,
                   capture_output=True)
    assert 3 <= time.monotonic() - began < 60
