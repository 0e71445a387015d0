"""Every Molecule scenario of the repo (top-level molecule/ and roles/*/molecule/), run with `molecule test`
on podman hosts from the project's Debian 12 image: create, check, converge, idempotence, verify, destroy."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def scenarios():
    found = [(REPO, p.parent.name) for p in sorted((REPO / "molecule").glob("*/molecule.yml"))]
    found += [(p.parents[2], p.parent.name) for p in sorted((REPO / "roles").glob("*/molecule/*/molecule.yml"))]
    return found


@pytest.mark.molecule
@pytest.mark.parametrize(("cwd", "scenario"), scenarios(),
                         ids=[f"{c.relative_to(REPO) or '.'}:{s}" for c, s in scenarios()])
def test_molecule_scenario(cwd, scenario):
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "ANSIBLE_NOCOLOR": "1", "PY_COLORS": "0"}
    started = time.monotonic()
    proc = subprocess.run([str(BIN / "molecule"), "test", "-s", scenario], cwd=cwd, env=env,
                          capture_output=True, text=True, check=False, timeout=45 * 60)
    print(f"molecule {cwd.relative_to(REPO)}:{scenario} took {time.monotonic() - started:.0f} s")
    assert proc.returncode == 0, (proc.stdout[-6000:] + "\n" + proc.stderr[-3000:])
