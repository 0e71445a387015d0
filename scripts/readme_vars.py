#!/usr/bin/env python3
"""Render what is generated from plan.inventory.VARIABLES (the one list of variables, with their defaults): the
variable table of docs/inventory.md and the preflight role's ``inventory`` argument spec.

  readme_vars.py          rewrite both
  readme_vars.py --check  exit 1 when one is out of date
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.inventory import argument_spec, variables_markdown

REPO = Path(__file__).resolve().parent.parent
TABLES = (REPO / "docs" / "inventory.md",)
ARGUMENT_SPECS = REPO / "roles" / "preflight" / "meta" / "argument_specs.yml"

BEGIN, END = "<!-- variables-table -->", "<!-- /variables-table -->"
# The inventory entry point is the file's last block; everything above it is written by hand.
SPEC_ANCHOR = "  inventory:\n"


def rendered(text: str) -> str:
    """A README with its variable table (between the markers) rendered."""
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1] if END in rest else rest
    return f"{head}{BEGIN}\n{variables_markdown()}{END}{tail}"


class _Dumper(yaml.SafeDumper):
    """Indents sequences under their key, as yamllint's indentation rule and the hand-written part do."""

    def increase_indent(self, flow=False, indentless=False):
        return super().increase_indent(flow, False)


def rendered_spec(text: str) -> str:
    """argument_specs.yml with its ``inventory`` options rendered from argument_spec()."""
    head = text.split(SPEC_ANCHOR, 1)[0]
    block = {"inventory": {"short_description": "kube-accel inventory variables (generated from "
                                                "plugins/module_utils/plan/inventory.py VARIABLES)",
                           "options": argument_spec()}}
    dumped = yaml.dump(block, Dumper=_Dumper, sort_keys=False, width=100, default_flow_style=False, allow_unicode=True)
    return head + "".join(f"  {line}\n" if line else "\n" for line in dumped.splitlines())


def outputs() -> dict[Path, str]:
    out = {path: rendered(path.read_text()) for path in TABLES}
    out[ARGUMENT_SPECS] = rendered_spec(ARGUMENT_SPECS.read_text())
    return out


def main() -> int:
    stale = []
    for path, new in outputs().items():
        if new == path.read_text():
            continue
        stale.append(path.relative_to(REPO))
        if "--check" not in sys.argv:
            path.write_text(new)
    if stale and "--check" in sys.argv:
        print(f"out of date: {', '.join(map(str, stale))}: run scripts/readme_vars.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
