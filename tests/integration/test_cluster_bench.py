"""The cluster bench (tests/bench/bench_cluster.py) at a small size, so that it cannot silently break.

The script runs as `make bench` runs it, a process of its own outside pytest, on a lab of its own (.lab/bench,
kwokctl cluster kube-accel-bench: real kube-apiserver, controller-manager and scheduler, kwok nodes, the shared lab
left alone) from an empty cluster, with the lab inventory's GPU Operator: the cluster play's first run and its no-op
re-run on 10 fake GPU nodes, then pods scheduled onto the pools.

Evidence: the bench's own rows (the play's recap, helm's revisions, the API server's audit log of the labelling
module's requests, the scheduler binding every pod).
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.bench

REPO = Path(__file__).resolve().parents[2]


def rows(path: Path) -> list[dict]:
    with path.open() as fh:
        return list(csv.DictReader(fh))


def test_the_cluster_bench_runs_from_an_empty_cluster(tmp_path):
    env = {**os.environ, "KA_BENCH_OUT": str(tmp_path), "PYTHONPATH": str(REPO / "scripts")}
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "bench" / "bench_cluster.py"), "--sizes", "10",
                           "--pods", "10"], cwd=REPO, env=env, capture_output=True, text=True, timeout=1200,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    cluster = {r["case"]: r for r in rows(tmp_path / "cluster.csv")}
    assert set(cluster) == {"first", "noop"}, cluster
    assert int(cluster["first"]["changed"]) > 0 and "DaemonSets ready" in cluster["first"]["note"], cluster["first"]
    assert cluster["noop"]["changed"] == "0" and "helm upgrades: 0" in cluster["noop"]["note"], cluster["noop"]
    # The labelling module's own requests, read from the audit log by its User-Agent: one node list per call (the
    # check-mode call that finds nodes to drain, then the reconcile), and a patch per node only on the first run.
    assert "labelling API requests: 2 list, 10 patch" in cluster["first"]["note"], cluster["first"]
    assert "labelling API requests: 2 list, 0 patch" in cluster["noop"]["note"], cluster["noop"]
    scheduling = {r["case"]: r for r in rows(tmp_path / "scheduling.csv")}
    assert set(scheduling) == {"gpu-pods", "cpu-pods"} and all(float(r["seconds"]) > 0 for r in scheduling.values())
