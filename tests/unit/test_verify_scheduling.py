"""module_utils/verify/scheduling: a HAMi node's registration judged by HAMi v2.10.0's own conditions, and when a
verify Job's pod counts as unschedulable for a retry. Pure functions over recorded node and pod fields."""

from __future__ import annotations

import json

import pytest
from ansible_collections.kube_accel.gpu.plugins.module_utils.verify.scheduling import (
    HAMI_REGISTER,
    hami_registration_problems,
    retry_due,
    unschedulable,
)

# One device as HAMi's device plugin encodes it (plugin/register.go, device.DeviceInfo as JSON).
DEVICE = {"id": "GPU-0", "index": 0, "count": 10, "devmem": 81920, "devcore": 100, "type": "NVIDIA-H100",
          "numa": 0, "mode": "hami-core", "health": True}


def test_a_registered_node_with_its_count_resource_is_ready():
    assert hami_registration_problems("n", {HAMI_REGISTER: json.dumps([DEVICE])}, {"nvidia.com/gpu": "10"},
                                      "nvidia.com/gpu") == []


@pytest.mark.parametrize(("annotations", "allocatable", "says"), [
    ({}, {"nvidia.com/gpu": "10"}, "has not registered the node"),
    ({HAMI_REGISTER: "GPU-0,10,81920,100,NVIDIA-H100,0,true:"}, {"nvidia.com/gpu": "10"}, "not the JSON device list"),
    ({HAMI_REGISTER: "[]"}, {"nvidia.com/gpu": "10"}, "registers no GPU"),
    ({HAMI_REGISTER: json.dumps([DEVICE])}, {}, "allocatable nvidia.com/gpu=None"),
    ({HAMI_REGISTER: json.dumps([DEVICE])}, {"nvidia.com/gpu": "0"}, "allocatable nvidia.com/gpu='0'"),
])
def test_what_hamis_scheduler_would_not_add_is_named(annotations, allocatable, says):
    problems = hami_registration_problems("lab-hami-0", annotations, allocatable, "nvidia.com/gpu")
    assert len(problems) == 1
    assert problems[0].startswith("lab-hami-0: ")
    assert says in problems[0]


def refused(since=None):
    return {"node": None, "phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "2 node unregistered",
         "since": since}]}


def test_only_an_unbound_pending_pod_with_podscheduled_false_is_unschedulable():
    assert unschedulable(refused(5.0)) == {"reason": "Unschedulable", "message": "2 node unregistered", "since": 5.0}
    assert unschedulable({**refused(), "node": "lab-hami-0"}) is None
    assert unschedulable({**refused(), "phase": "Failed"}) is None
    assert unschedulable({"node": None, "phase": "Pending", "conditions": []}) is None


def test_a_retry_is_due_only_after_the_pod_was_refused_for_the_whole_interval():
    # Refused before the attempt started: counted from the attempt's start.
    assert retry_due([refused(0.0)], now=109.0, started=100.0, retry_after=10) is None
    assert retry_due([refused(0.0)], now=110.0, started=100.0, retry_after=10) == "2 node unregistered"
    # Refused after the start: counted from the refusal.
    assert retry_due([refused(105.0)], now=114.0, started=100.0, retry_after=10) is None
    assert retry_due([refused(None)], now=110.0, started=100.0, retry_after=10) == "2 node unregistered"
    assert retry_due([{"node": "n", "phase": "Running", "conditions": []}], now=1e9, started=0.0) is None
