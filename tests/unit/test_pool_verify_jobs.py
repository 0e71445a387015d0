"""Each pool's verify Job result is its own, and a Job refused for a reason that clears is retried
(accel_pool_verify.finish_job).

Every pool's Job runs side by side under one deadline: a pool waited for after that deadline passed (another pool's
Job stalled until then) still reports what happened to its own Job, read at least once, instead of "timeout". A Job
whose pod stays unschedulable while the pool's scheduler path is ready is started again (HAMi's scheduler reads
registrations on its own clock; kube-scheduler does not retry a pod an extender refused), and only then.

Stand-in: the API calls finish_job and start_job make (read/create/delete a Job, list its pods) are served from
recorded Job states, one list of attempts per pool; what is under test is the wait's control flow, not the API.
The lab test with delayed registrations (tests/integration/test_registration_delay_lab.py) runs the same code
against HAMi's real scheduler."""

from __future__ import annotations

import datetime
import time
from types import SimpleNamespace

import pytest
from ansible_collections.kube_accel.gpu.plugins.module_utils.common.constants import POOL_DERIVED_NAMES
from ansible_collections.kube_accel.gpu.plugins.modules import accel_pool_verify
from ansible_collections.kube_accel.gpu.plugins.modules.accel_pool_verify import finish_job
from kubernetes.client.exceptions import ApiException

PARAMS = {"namespace": "kube-accel", "job_timeout": 1, "pool_label": "kube-accel.io/pool", "job_image": "cuda",
          "job_command": ["nvidia-smi", "-L"], "taint_key": "kube-accel.io/pool"}
REFUSED = "0/9 nodes are available: 2 node unregistered, 7 node(s) didn't match Pod's node affinity/selector."
HAMI_JOB = POOL_DERIVED_NAMES["verify Job"].format(pool="vgpu-hami")
LONG_AGO = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


class Jobs:
    """Jobs by name, each a list of attempts (one per creation of the Job); an attempt is a list of states, the last
    one repeated: "succeeded", "failed", None (its pod bound and running) or "unschedulable" (its pod unbound, with
    kube-scheduler's PodScheduled=False condition)."""

    def __init__(self, attempts: dict[str, list[list]], nodes: dict[str, str]):
        self.attempts, self.nodes = attempts, nodes
        self.attempt = dict.fromkeys(attempts, 0)
        self.reads: dict[str, int] = {}
        self.deleted: list[str] = []
        self.created: list[str] = []
        self.gone: set[str] = set()

    def state(self, name):
        states = self.attempts[name][self.attempt[name]]
        return states[min(self.reads.get(name, 1), len(states)) - 1]

    def read_namespaced_job(self, name, namespace):
        if name in self.gone:
            raise ApiException(status=404, reason="Not Found")
        self.reads[name] = self.reads.get(name, 0) + 1
        state = self.state(name)
        return SimpleNamespace(status=SimpleNamespace(succeeded=1 if state == "succeeded" else None,
                                                      failed=1 if state == "failed" else None))

    def list_namespaced_pod(self, namespace, label_selector):
        name = label_selector.split("=", 1)[1]
        state = self.state(name)
        if state == "unschedulable":
            pod = SimpleNamespace(spec=SimpleNamespace(node_name=None), status=SimpleNamespace(
                phase="Pending", conditions=[SimpleNamespace(type="PodScheduled", status="False",
                                                             reason="Unschedulable", message=REFUSED,
                                                             last_transition_time=LONG_AGO)]))
        else:
            pod = SimpleNamespace(spec=SimpleNamespace(node_name=self.nodes[name]), status=SimpleNamespace(
                phase="Running" if state is None else "Succeeded",
                conditions=[SimpleNamespace(type="Ready", status="False", reason=None,
                                            message="0/2 nodes are available",
                                            last_transition_time=None)] if state is None else []))
        return SimpleNamespace(items=[pod])

    def delete_namespaced_job(self, name, namespace, propagation_policy):
        self.deleted.append(name)
        self.gone.add(name)

    def create_namespaced_job(self, namespace, body):
        name = body["metadata"]["name"]
        self.created.append(name)
        self.gone.discard(name)
        self.attempt[name] += 1
        self.reads[name] = 0


def pool(name, node):
    return {"pool": name, "nodes": [node], "request": {"nvidia.com/gpu": "1"}}


def job(name):
    return {"name": name, "since": None, "started": time.time()}


@pytest.fixture(autouse=True)
def quick_polls(monkeypatch):
    """finish_job polls every 0.05 s instead of every second: the control flow is the same, the deadlines real."""
    real_sleep = time.sleep
    monkeypatch.setattr(accel_pool_verify.time, "sleep", lambda seconds: real_sleep(min(seconds, 0.05)))


@pytest.fixture
def quick_retry(monkeypatch):
    """A retry after 0.2 s instead of 10 s: the control flow is the same."""
    monkeypatch.setattr(accel_pool_verify, "RETRY_AFTER_S", 0.2)


def test_a_stalled_pool_does_not_decide_the_next_pools_rows():
    api = Jobs({"verify-hami": [[None]], "verify-vcuda": [["succeeded"]], "verify-pgpu": [[None, "failed"]]},
               {"verify-hami": "lab-hami-0", "verify-vcuda": "lab-vcuda-0", "verify-pgpu": "lab-pgpu-0"})
    deadline = time.time() + PARAMS["job_timeout"]
    stalled = finish_job(api, api, PARAMS, pool("vgpu-hami", "lab-hami-0"), job("verify-hami"), deadline)
    assert time.time() >= deadline  # the stalled Job used the whole shared deadline
    assert stalled[0] == "timeout on lab-hami-0"
    assert stalled[1] == ["pool vgpu-hami: verify Job timeout after 1 s 0/2 nodes are available"]
    # Pools waited for after the deadline: their Jobs are read, and their own results reported.
    done = finish_job(api, api, PARAMS, pool("vgpu-vcuda", "lab-vcuda-0"), job("verify-vcuda"), deadline)
    assert done[:2] == ("completed on lab-vcuda-0", [])
    failed = finish_job(api, api, PARAMS, pool("pgpu", "lab-pgpu-0"), job("verify-pgpu"), deadline)
    assert failed[0] == "timeout on lab-pgpu-0"  # read once after the deadline: still running then
    assert api.reads == {"verify-hami": api.reads["verify-hami"], "verify-vcuda": 1, "verify-pgpu": 1}
    assert api.reads["verify-hami"] >= 2
    assert api.deleted == ["verify-hami", "verify-vcuda", "verify-pgpu"]
    assert api.created == []


def test_a_job_that_fails_before_the_deadline_is_failed_not_timeout():
    api = Jobs({"verify-mps": [[None, "failed"]]}, {"verify-mps": "lab-mps-0"})
    row, problems, _ = finish_job(api, api, PARAMS, pool("mps", "lab-mps-0"), job("verify-mps"), time.time() + 30)
    assert row == "failed on lab-mps-0"
    assert problems == ["pool mps: verify Job failed after 1 s"]


def test_a_job_refused_before_the_scheduler_read_the_registration_is_started_again(quick_retry):
    api = Jobs({HAMI_JOB: [["unschedulable"], ["succeeded"]]}, {HAMI_JOB: "lab-hami-0"})
    row, problems, _ = finish_job(api, api, PARAMS, pool("vgpu-hami", "lab-hami-0"), job(HAMI_JOB),
                                  time.time() + 30, path_ready=lambda: True)
    assert (row, problems) == ("completed on lab-hami-0, attempt 2", [])
    # The first Job was deleted and created again under its name; the second deleted once done.
    assert api.created == [HAMI_JOB]
    assert api.deleted == [HAMI_JOB, HAMI_JOB]


def test_no_retry_while_the_scheduler_path_is_not_ready(quick_retry):
    """Negative control of the test above: the same refused pod, with the pool's registrations not (yet) as its
    scheduler reads them, is left to its Job; nothing is created again and the row says why it timed out."""
    api = Jobs({HAMI_JOB: [["unschedulable"], ["succeeded"]]}, {HAMI_JOB: "lab-hami-0"})
    row, problems, _ = finish_job(api, api, PARAMS, pool("vgpu-hami", "lab-hami-0"), job(HAMI_JOB),
                                  time.time() + 0.8, path_ready=lambda: False)
    assert row == "timeout"
    assert problems == [f"pool vgpu-hami: verify Job timeout after 1 s {REFUSED}"]
    assert api.created == []


def test_a_bound_pod_is_never_retried(quick_retry):
    api = Jobs({"verify-pgpu": [[None, None, None, "succeeded"]]}, {"verify-pgpu": "lab-pgpu-0"})
    row, problems, _ = finish_job(api, api, PARAMS, pool("pgpu", "lab-pgpu-0"), job("verify-pgpu"),
                                  time.time() + 30, path_ready=lambda: True)
    assert (row, problems) == ("completed on lab-pgpu-0", [])
    assert api.created == []


def test_every_attempt_refused_names_the_attempts_and_the_first_reason(quick_retry):
    api = Jobs({HAMI_JOB: [["unschedulable"]] * 50}, {HAMI_JOB: "lab-hami-0"})
    row, problems, _ = finish_job(api, api, PARAMS, pool("vgpu-hami", "lab-hami-0"), job(HAMI_JOB),
                                  time.time() + 1.5, path_ready=lambda: True)
    assert row.startswith("timeout, attempt ")
    assert len(api.created) >= 2
    assert f"attempt {len(api.created) + 1} after " in problems[0]
    assert problems[0].endswith(f"earlier attempts unschedulable: {REFUSED})")
