"""docs/inventory.md documents every inventory variable, rendered from the one list of the inventory model; the
README opens with the two commands."""

from __future__ import annotations

from pathlib import Path

from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.inventory import VARIABLES
from readme_vars import rendered  # scripts/readme_vars.py

README = Path(__file__).resolve().parents[2] / "README.md"
INVENTORY_DOC = README.parent / "docs" / "inventory.md"


def test_readme_variable_table_is_current():
    text = INVENTORY_DOC.read_text()
    assert rendered(text) == text, "run scripts/readme_vars.py"
    for name in VARIABLES:
        assert f"| `{name}` |" in text


def test_readme_opens_with_the_two_commands():
    lines = README.read_text().splitlines()
    block = lines[lines.index("```sh") + 1:lines.index("```sh") + 3]
    assert block[0].startswith("make demo") and block[1].startswith("make test")
    # CI runs the README's test command itself; the stage report around it prints, it decides nothing.
    commands = [ln.strip() for ln in (README.parent / ".ci" / "run").read_text().splitlines()
                if ln.strip() and not ln.lstrip().startswith("#")]
    assert commands[-1] in ("make test", "exec make test")
    assert "set -euo pipefail" in commands
