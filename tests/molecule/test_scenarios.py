"""Every Molecule scenario of the repo (top-level molecule/ and roles/*/molecule/), run with `molecule test`
on podman hosts from the project's Debian 12 images: create, check, converge, idempotence, verify, destroy.

A scenario whose whole input is unchanged since its last green run on this machine reuses that run and says which
(scenario_reuse.py: what the key holds); KA_MOLECULE_REUSE=0 runs every scenario. Each run prints its time per stage
(create, prepare, converge, ...) and keeps its full log under ~/.cache/kube-accel/molecule/logs/.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from scenario_reuse import Scenario, cache_root, find_reusable, hosts_state, inputs, outdated_images, write_record

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
# Longest first (BENCHMARKS.md, "Test suite"): with `-n 2 --dist worksteal` the DKMS build runs on one worker while
# the other works through the rest, instead of starting last and running alone at the end.
# The order: DKMS alone on one worker; the rest longest first behind it.
LONGEST_FIRST = ("roles/nvidia_driver:dkms", ".:sriov_vfio", ".:site", "roles/nvidia_driver:default", ".:kubelet_gpu",
                 ".:mig", "roles/package_db:default", "roles/container_toolkit:default")
STAGE = re.compile(r"\b([a-z_]+)\]?:?\s+Executing\b")
# Go-built commands a scenario's prepare copies onto its hosts (scripts/upstream.sh proxy NAME), built here because
# this lane runs beside the toolchain's Go builds: a cold CI ran container_toolkit before containerd 2.x existed.
# container_toolkit: containerd 2.x and its shim ("containerd-"), ctr, crictl and NVIDIA's runtime for the CRI attack.
UPSTREAM_COMMANDS = {"roles/container_toolkit:default": ("containerd-", "ctr-", "crictl-", "nvidia-container-runtime-")}


def scenarios() -> list[Scenario]:
    found = [Scenario(REPO, p.parent.name) for p in sorted((REPO / "molecule").glob("*/molecule.yml"))]
    found += [Scenario(p.parents[2], p.parent.name) for p in sorted((REPO / "roles").glob("*/molecule/*/molecule.yml"))]
    rank = {sid: i for i, sid in enumerate(LONGEST_FIRST)}
    return sorted(found, key=lambda s: rank.get(s.id, len(rank)))


def platform_names(scenario: Scenario) -> list[str]:
    data = yaml.safe_load((scenario.directory / "molecule.yml").read_text(encoding="utf-8"))
    return [p["name"] for p in data.get("platforms") or []]


def leftovers(scenario: Scenario) -> bool:
    """Hosts of the scenario still there, or Molecule's state (any project's scenario of that name) saying created."""
    if any(subprocess.run(["podman", "container", "exists", name], check=False).returncode == 0
           for name in platform_names(scenario)):
        return True
    states = [*Path.home().glob(f".ansible/tmp/molecule.*.{scenario.name}/state.yml"),
              *Path.home().glob(f".cache/molecule/*/{scenario.name}/state.yml")]
    return any((yaml.safe_load(p.read_text(encoding="utf-8")) or {}).get("created") for p in states)


def run_logged(argv: list[str], cwd: Path, env: dict, log, timeout: float) -> tuple[int, dict[str, float], str]:
    """Run a Molecule command, writing its output with elapsed seconds to log; the seconds each stage took."""
    started = time.monotonic()
    stages: dict[str, float] = {}
    current, since = None, started
    tail: list[str] = []
    with subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          bufsize=1) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            now = time.monotonic()
            log.write(f"{now - started:8.1f} {line}")
            tail = (tail + [line])[-200:]
            match = STAGE.search(line)
            if match:
                if current:
                    stages[current] = stages.get(current, 0.0) + now - since
                current, since = match.group(1), now
            if now - started > timeout:
                proc.kill()
        rc = proc.wait()
    if current:
        stages[current] = stages.get(current, 0.0) + time.monotonic() - since
    return rc, {k: round(v, 1) for k, v in stages.items()}, "".join(tail)


@pytest.mark.molecule
@pytest.mark.parametrize("scenario", scenarios(), ids=[s.id for s in scenarios()])
def test_molecule_scenario(scenario: Scenario, record_property):
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "ANSIBLE_NOCOLOR": "1", "PY_COLORS": "0",
           "NO_COLOR": "1"}
    outdated = outdated_images(scenario)
    assert not outdated, f"{', '.join(outdated)}: missing or older than scripts/molecule-images.txt; " \
        "run scripts/toolchain.sh molecule (make toolchain)"
    data = inputs(scenario)
    record, why = find_reusable(scenario, data)
    if record is not None:
        msg = (f"molecule {scenario.id}: reused the green run of {record['finished']} (commit {record['commit']}, "
               f"{record['seconds']:.0f} s, key {record['key'][:12]}): every input unchanged; "
               "KA_MOLECULE_REUSE=0 runs it")
        print(msg)
        record_property("molecule", json.dumps({"id": scenario.id, "reused": record["finished"],
                                                "seconds": 0, "stages": {}}))
        return

    if UPSTREAM_COMMANDS.get(scenario.id):
        built = subprocess.run([str(REPO / "scripts" / "upstream.sh"), "proxy", *UPSTREAM_COMMANDS[scenario.id]],
                               capture_output=True, text=True, check=False, timeout=1800)
        assert built.returncode == 0, f"scripts/upstream.sh proxy failed:\n{built.stderr[-3000:]}"
    logs = cache_root() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"{scenario.slug}-{time.strftime('%Y%m%dT%H%M%S')}.log"
    molecule = str(BIN / "molecule")
    started = time.monotonic()
    hosts: dict[str, dict] = {}
    rc, stages, tail = 1, {}, ""
    with log_path.open("w", encoding="utf-8") as log:
        log.write(f"# runs because: {why}\n")
        # `--destroy never` keeps the hosts for reading their packages and indices; the scenario's own first destroy is
        # then skipped, so leftovers of an interrupted run are removed first, and the last destroy runs below.
        if leftovers(scenario):
            run_logged([molecule, "destroy", "-s", scenario.name], scenario.cwd, env, log, 300)
        first_destroy = round(time.monotonic() - started, 1)
        try:
            argv = [molecule, "test", "-s", scenario.name, "--destroy", "never"]
            rc, stages, tail = run_logged(argv, scenario.cwd, env, log, 45 * 60)
            if rc != 0 and list(stages)[-1:] == ["create"]:
                # Only the podman driver's own create playbook failed, before any of the scenario's code ran: under
                # heavy load its podman_container job can fail reading `podman inspect` output that is not JSON
                # (BENCHMARKS.md, "Molecule"). One more try, said in the output; a second failure fails.
                print(f"molecule {scenario.id}: the driver's create failed; destroying and running once more")
                log.write("# the driver's create failed: destroy, then one more `molecule test`\n")
                run_logged([molecule, "destroy", "-s", scenario.name], scenario.cwd, env, log, 300)
                retried = stages
                rc, stages, tail = run_logged(argv, scenario.cwd, env, log, 45 * 60)
                stages = {k: round(retried.get(k, 0.0) + stages.get(k, 0.0), 1) for k in {**retried, **stages}}
            stages["destroy"] = round(stages.get("destroy", 0.0) + first_destroy, 1)
            if rc == 0:
                hosts = hosts_state(scenario, data["images"])
        finally:
            destroy_started = time.monotonic()
            run_logged([molecule, "destroy", "-s", scenario.name], scenario.cwd, env, log, 300)
            stages["destroy"] = round(stages.get("destroy", 0.0) + time.monotonic() - destroy_started, 1)
    seconds = time.monotonic() - started
    shown = ", ".join(f"{k} {v:.0f}" for k, v in stages.items())
    print(f"molecule {scenario.id} ran ({why}) in {seconds:.0f} s: {shown}; log {log_path}")
    record_property("molecule", json.dumps({"id": scenario.id, "reused": None, "seconds": round(seconds, 1),
                                            "stages": stages, "why": why}))
    assert rc == 0, f"log: {log_path}\n{tail[-8000:]}"
    write_record(scenario, data, hosts, seconds, stages)
