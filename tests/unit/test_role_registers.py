"""No role registers a variable under the name of one of its own options (meta/argument_specs.yml).

A registered variable outranks the option's default and include parameters for the rest of the host's run, so the
next include of the role gets a dict where its argument check wants a bool or a string and fails. Found in the lab:
node_reboot's uncordon step registered node_reboot_uncordon, and the cluster play failed on the second node of a pool
it returned to service (tests/integration/test_pools_leave_lab.py, the HAMi pool removed).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROLES = Path(__file__).resolve().parents[2] / "roles"


def options(role: Path) -> set[str]:
    specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    return {name for spec in specs.values() for name in (spec.get("options") or {})}


def registers(node) -> set[str]:
    """Every ``register:`` name in a parsed tasks file (blocks, rescue and always included)."""
    if isinstance(node, list):
        return set().union(*(registers(n) for n in node)) if node else set()
    if isinstance(node, dict):
        found = {node["register"]} if isinstance(node.get("register"), str) else set()
        return found.union(*(registers(node[k]) for k in ("block", "rescue", "always") if k in node))
    return set()


SPECIFIED = sorted(p.name for p in ROLES.iterdir() if (p / "meta" / "argument_specs.yml").exists())


@pytest.mark.parametrize("role", SPECIFIED)
def test_no_register_shadows_an_option(role):
    tasks = [yaml.safe_load(f.read_text()) for f in sorted((ROLES / role).glob("tasks/*.yml"))]
    clash = options(ROLES / role) & set().union(*(registers(t) for t in tasks))
    assert not clash, f"roles/{role} registers variables named like its options: {sorted(clash)}"


def test_the_check_sees_a_clash():
    """The walk finds registers inside blocks (what the parametrized test relies on)."""
    assert registers([{"block": [{"name": "a", "register": "x"}], "rescue": [{"register": "y"}]}]) == {"x", "y"}
