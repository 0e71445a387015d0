"""Summary of the Molecule stage: per scenario, ran or reused, total and per-stage seconds (BENCHMARKS.md)."""

from __future__ import annotations

import json

_ROWS: list[dict] = []


def pytest_runtest_logreport(report):
    if report.when != "call":
        return
    for name, value in report.user_properties:
        if name == "molecule":
            _ROWS.append({**json.loads(value), "outcome": report.outcome})


def pytest_terminal_summary(terminalreporter):
    if not _ROWS:
        return
    write = terminalreporter.write_line
    terminalreporter.section("molecule scenarios (seconds)")
    stages = ["destroy", "syntax", "create", "prepare", "check", "converge", "idempotence", "verify"]
    write(f"{'scenario':34} {'result':8} {'total':>6} " + " ".join(f"{s[:8]:>8}" for s in stages))
    for row in sorted(_ROWS, key=lambda r: -r["seconds"]):
        if row["reused"]:
            write(f"{row['id']:34} reused   {0:6d}  green run of {row['reused']}")
            continue
        cells = " ".join(f"{row['stages'].get(s, 0):8.0f}" for s in stages)
        write(f"{row['id']:34} {row['outcome']:8} {row['seconds']:6.0f} {cells}")
