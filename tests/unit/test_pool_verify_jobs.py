"""Each pool's verify Job result is its own (accel_pool_verify.finish_job): every pool's Job runs side by side under
one deadline, and a pool waited for after that deadline passed (another pool's Job stalled until then) still reports
what happened to its own Job, read at least once, instead of "timeout".

Stand-in: the two API reads finish_job makes (read_namespaced_job, list_namespaced_pod) and the delete are served
from recorded Job states, one object per pool; what is under test is the wait's control flow, not the API."""

from __future__ import annotations

import time
from types import SimpleNamespace

from ansible_collections.kube_accel.gpu.plugins.modules.accel_pool_verify import finish_job

PARAMS = {"namespace": "kube-accel", "job_timeout": 2}


class Jobs:
    """Jobs by name: each a list of statuses, the last one repeated ("succeeded", "failed" or None: still running)."""

    def __init__(self, states: dict[str, list], nodes: dict[str, str]):
        self.states, self.nodes, self.reads, self.deleted = states, nodes, {}, []

    def read_namespaced_job(self, name, namespace):
        seen = self.reads[name] = self.reads.get(name, 0) + 1
        state = self.states[name][min(seen, len(self.states[name])) - 1]
        return SimpleNamespace(status=SimpleNamespace(succeeded=1 if state == "succeeded" else None,
                                                      failed=1 if state == "failed" else None))

    def list_namespaced_pod(self, namespace, label_selector):
        name = label_selector.split("=", 1)[1]
        pod = SimpleNamespace(spec=SimpleNamespace(node_name=self.nodes[name]),
                              status=SimpleNamespace(conditions=[SimpleNamespace(message="0/2 nodes are available")]
                                                     if self.states[name][-1] is None else []))
        return SimpleNamespace(items=[pod])

    def delete_namespaced_job(self, name, namespace, propagation_policy):
        self.deleted.append(name)


def pool(name, node):
    return {"pool": name, "nodes": [node]}


def test_a_stalled_pool_does_not_decide_the_next_pools_rows():
    api = Jobs({"verify-hami": [None], "verify-vcuda": ["succeeded"], "verify-pgpu": [None, "failed"]},
               {"verify-hami": "lab-hami-0", "verify-vcuda": "lab-vcuda-0", "verify-pgpu": "lab-pgpu-0"})
    deadline = time.time() + PARAMS["job_timeout"]
    stalled = finish_job(api, api, PARAMS, pool("vgpu-hami", "lab-hami-0"), {"name": "verify-hami"}, deadline)
    assert time.time() >= deadline  # the stalled Job used the whole shared deadline
    assert stalled[0] == "timeout on lab-hami-0"
    assert stalled[1] == ["pool vgpu-hami: verify Job timeout after 2 s 0/2 nodes are available"]
    # Pools waited for after the deadline: their Jobs are read, and their own results reported.
    done = finish_job(api, api, PARAMS, pool("vgpu-vcuda", "lab-vcuda-0"), {"name": "verify-vcuda"}, deadline)
    assert done[:2] == ("completed on lab-vcuda-0", [])
    failed = finish_job(api, api, PARAMS, pool("pgpu", "lab-pgpu-0"), {"name": "verify-pgpu"}, deadline)
    assert failed[0] == "timeout on lab-pgpu-0"  # read once after the deadline: still running then
    assert api.reads == {"verify-hami": api.reads["verify-hami"], "verify-vcuda": 1, "verify-pgpu": 1}
    assert api.reads["verify-hami"] >= 2
    assert api.deleted == ["verify-hami", "verify-vcuda", "verify-pgpu"]


def test_a_job_that_fails_before_the_deadline_is_failed_not_timeout():
    api = Jobs({"verify-mps": [None, "failed"]}, {"verify-mps": "lab-mps-0"})
    row, problems, _ = finish_job(api, api, PARAMS, pool("mps", "lab-mps-0"), {"name": "verify-mps"},
                                  time.time() + 30)
    assert row == "failed on lab-mps-0"
    assert problems == ["pool mps: verify Job failed after 2 s"]
