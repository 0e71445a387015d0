#!/usr/bin/env python3
"""Benchmark 4 of kube-accel: the preflight (ansible/preflight.yml) on a large inventory, this checkout against a
baseline commit, side by side in one run.

The inventory has ``--hosts`` GPU hosts (default 200) dealt over pools of every mode, each on a recorded NVML
snapshot (tests/data/nvml), with ``ansible_connection: local``: what is timed is the preflight's own work (facts,
plan model, rules, report), not SSH. Each round runs the baseline and this checkout once, alternating which goes
first; the median of ``--rounds`` (default 3) is compared.

The baseline is checked out from this repository's own history into a temporary git worktree (``--baseline``, a
commit; default: the commit before the strict inventory model, ``BASELINE``).
Usage: tests/bench/bench_preflight.py [--hosts 200] [--rounds 3] [--baseline REV] [--keep]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from benchlib import REPO, Row, ansible_env, log, ratio_line, settle, stopwatch, write_rows

# The last commit with the argument-spec preflight (before the strict inventory model).
BASELINE = "779c2dd"
SNAPSHOTS = REPO / "tests" / "data" / "nvml"
# pool group -> (settings, snapshot): every mode and backend the preflight has rules for.
POOLS = {
    "pool_pgpu": ({"accel_pool": "pgpu", "accel_mode": "pgpu", "accel_numa_policy": "single-numa-node"},
                  "dual-socket-a100x8"),
    "pool_mps": ({"accel_pool": "mps", "accel_mode": "mps", "accel_mps_replicas": 4}, "a30"),
    "pool_timeslice": ({"accel_pool": "timeslice", "accel_mode": "timeslice", "accel_timeslice_replicas": 4}, "t4"),
    "pool_hami": ({"accel_pool": "hami", "accel_mode": "vgpu", "accel_vgpu_backend": "hami",
                   "accel_vgpu_split_count": 4}, "h100-80gb"),
    "pool_mig": ({"accel_pool": "mig", "accel_mode": "pgpu", "accel_mig_strategy": "mixed",
                  "accel_mig_geometry": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}}, "a100-80gb-mig"),
}


def write_inventory(root: Path, hosts: int) -> Path:
    """An inventory directory with ``hosts`` GPU hosts dealt round-robin over POOLS, and a control plane."""
    groups = {name: {"hosts": {}} for name in POOLS}
    names = list(POOLS)
    for i in range(hosts):
        group = names[i % len(names)]
        groups[group]["hosts"][f"bench-{group.removeprefix('pool_')}-{i:04d}"] = None
    inventory = {"all": {"children": {
        "kube_control_plane": {"hosts": {"bench-cp-0": None}},
        "gpu_pools": {"children": groups},
    }}}
    (root / "group_vars").mkdir(parents=True)
    (root / "hosts.yml").write_text(yaml.safe_dump(inventory, sort_keys=False))
    common = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "accel_kubernetes_version": "1.36",
        "accel_namespace": "kube-accel",
        "accel_control_plane_cidrs": ["10.0.0.10/32"],
        # The MIG pool's geometry is applied by the GPU Operator's mig-manager (a cluster setting: group_vars/all).
        "accel_gpu_operator_enabled": True,
        "accel_driver_branch": "550",
        "accel_lab": True,
        "accel_nvml_snapshot": f"{SNAPSHOTS}/{{{{ accel_lab_gpu }}}}.json",
    }
    (root / "group_vars" / "all.yml").write_text(yaml.safe_dump(common, sort_keys=False))
    for group, (settings, snapshot) in POOLS.items():
        (root / "group_vars" / f"{group}.yml").write_text(
            yaml.safe_dump({**settings, "accel_lab_gpu": snapshot}, sort_keys=False))
    return root / "hosts.yml"


def run_preflight(checkout: Path, inventory: Path, log_to: Path | None) -> float:
    """Wall seconds of one preflight run from ``checkout``; a failed run stops the benchmark (it measured
    nothing)."""
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory),
            str(checkout / "ansible" / "preflight.yml")]
    env = ansible_env(ANSIBLE_CONFIG=str(checkout / "ansible.cfg"))
    env.pop("ANSIBLE_CALLBACKS_ENABLED", None)
    settle()
    with stopwatch() as t:
        proc = subprocess.run(argv, cwd=checkout, env=env, capture_output=True, text=True, check=False)
    if log_to:
        log_to.write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        sys.exit(f"[bench] preflight from {checkout} failed (rc {proc.returncode}):\n"
                 f"{(proc.stdout + proc.stderr)[-6000:]}")
    return t[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", default=BASELINE)
    parser.add_argument("--keep", action="store_true", help="keep the inventory, worktree and logs")
    args = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="ka-bench-preflight-"))
    inventory = write_inventory(scratch / "inventory", args.hosts)
    worktree = scratch / "baseline"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(worktree), args.baseline],
                   check=True, capture_output=True)
    times: dict[str, list[float]] = {"baseline": [], "head": []}
    try:
        for round_ in range(args.rounds):
            order = [("baseline", worktree), ("head", REPO)]
            for name, checkout in order if round_ % 2 == 0 else order[::-1]:
                seconds = run_preflight(checkout, inventory, scratch / f"{name}-{round_}.log")
                times[name].append(seconds)
                log(f"round {round_ + 1}: {name} {seconds:.1f} s")
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(worktree)], check=False,
                       capture_output=True)
    medians = {name: statistics.median(values) for name, values in times.items()}
    rows = [Row("preflight", f"{name} ({args.baseline if name == 'baseline' else 'HEAD'}) median of "
                f"{args.rounds}", args.hosts, medians[name], note=" ".join(f"{v:.1f}" for v in times[name]))
            for name in times]
    write_rows("preflight", rows)
    print(ratio_line(f"preflight on {args.hosts} hosts, HEAD / {args.baseline}", medians["head"],
                     medians["baseline"], "<= 1.20x"))
    if args.keep:
        log(f"kept {scratch}")
    else:
        subprocess.run(["rm", "-rf", str(scratch)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
