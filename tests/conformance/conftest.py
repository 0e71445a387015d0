"""Conformance tests: kube-accel's rendered charts and generated configs run through upstream code (upstream.py)."""

from __future__ import annotations

# upstream.py (this folder) and chartlib.py (the chart suite's render helpers) import as plain modules: pytest's
# pythonpath (pyproject.toml) names both folders.
