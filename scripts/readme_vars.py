#!/usr/bin/env python3
"""Render the README's inventory variable table from accel_inventory.VARIABLES (the one list of variables).

  readme_vars.py          rewrite the table in README.md
  readme_vars.py --check  exit 1 when README.md is out of date
"""

from __future__ import annotations

import sys
from pathlib import Path

from ansible_collections.kube_accel.gpu.plugins.module_utils.accel_inventory import variables_markdown

REPO = Path(__file__).resolve().parent.parent

BEGIN, END = "<!-- variables-table -->", "<!-- /variables-table -->"


def rendered(text: str) -> str:
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1] if END in rest else rest
    return f"{head}{BEGIN}\n{variables_markdown()}{END}{tail}"


def main() -> int:
    readme = REPO / "README.md"
    text = readme.read_text()
    new = rendered(text)
    if "--check" in sys.argv:
        if new != text:
            print("README.md variable table is out of date: run scripts/readme_vars.py", file=sys.stderr)
            return 1
        return 0
    readme.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
