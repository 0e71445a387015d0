"""The first site.yml on a fresh lab, as `make demo` runs it, passes the first time.

`make demo` (scripts/demo.sh) starts the lab (`lab.py up`) and runs `ansible-playbook -i inventories/lab/hosts.yml
ansible/site.yml` once: nodes with no kube-accel label and no GPU capacity, hosts kube-accel never touched, node agents
registering while the play goes on. The first lab of `make test` starts that way (tests/conftest.py runs this test
first and the lab fixture leaves the nodes unlabelled for it), and this test runs that one play, with no retry: a race
between the agents' registrations and verify fails it.

Evidence: kube-accel's own site.yml against the lab's real kube-apiserver, kube-controller-manager, kube-scheduler,
helm, HAMi's scheduler extender and gpu-admission, the GPU Operator's controller and podman hosts; the node agents'
registrations come from the lab's stand-ins (docs/lab.md), the pods run on kwok (stand-in for the kubelet).
"""

from __future__ import annotations

import re
import time

import pytest
from ansible_collections.kube_accel.gpu.plugins.module_utils.common import constants as accel_constants
from lab_fixture import LAB_INVENTORY, reset_lab, site_play
from test_site_lab import RECAP, node_labels, summary

pytestmark = pytest.mark.lab

POOL_LABEL = accel_constants.LABELS["pool"]


def test_the_first_site_run_on_a_fresh_lab_passes(lab):
    if any(POOL_LABEL in labels for labels in node_labels(lab).values()) or lab.releases():
        reset_lab(lab)  # run alone on a used lab: the first run needs a fresh one
    assert not any(POOL_LABEL in labels for labels in node_labels(lab).values()), "the lab's nodes are not fresh"
    started = time.time()
    proc = site_play(lab, LAB_INVENTORY / "hosts.yml")
    took = time.time() - started
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    recap = {m[0]: int(m[4]) + int(m[3]) for m in RECAP.findall(proc.stdout)}
    assert recap and not any(recap.values()), recap
    table = summary(proc.stdout)
    rows = {line.split()[0]: line.split()[-1] for line in table
            if line.split() and line.split()[-1] in ("PASS", "FAIL")}
    assert set(rows) == set(lab.nodes_by_pool), rows
    assert set(rows.values()) == {"PASS"}, table
    settle = next(line for line in table if line.startswith("settle:"))
    assert "passed" in settle, table
    attempts = [line.split()[0] for line in table if re.search(r", attempt \d+", line)]
    print(f"first site.yml on a fresh lab: {took:.0f} s; verify {settle}; pools whose Job needed another attempt: "
          f"{attempts or 'none'}")
