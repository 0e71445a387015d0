"""Conformance tests: kube-accel's rendered charts and generated configs run through upstream code (upstream.py)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# upstream.py (this folder) and chartlib.py (the chart suite's render helpers) as plain imports.
for _path in (HERE, HERE.parent / "charts"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
