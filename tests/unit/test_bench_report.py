"""The benchmark plumbing (tests/bench): PLAY RECAP parsing and the report's ratios against the issue's targets.
The benchmarks themselves are scripts run by `make bench`, never timed tests."""

from __future__ import annotations

import os

import benchlib  # noqa: E402
import report  # noqa: E402
from benchlib import Row  # noqa: E402


def test_recap_line_is_parsed():
    line = "ka-bench-h01               : ok=41   changed=12   unreachable=0    failed=1    skipped=20   rescued=0"
    m = benchlib.RECAP.match(line)
    assert m and (m["host"], m["changed"], m["failed"]) == ("ka-bench-h01", "12", "1")


def test_fleet_ratios_and_verdicts():
    rows = [Row("hosts", "first", 1, 40.0, cpu_seconds=30.0, controller_cpu_seconds=12.0),
            Row("hosts", "rerun", 1, 8.0, 0),
            Row("hosts", "first", 12, 100.0, cpu_seconds=190.0, controller_cpu_seconds=96.0),
            Row("hosts", "rerun", 12, 30.0, 0)]
    text = "\n".join(report.fleet_section(rows))
    assert f"| 12 | 100.0 | 190 | 96 | 1.90 of {os.cpu_count()} | 30.0 | 0.30 | 0 |" in text
    assert "**2.50x** (target <= 2x: **not met**)" in text
    # worst re-run share is 12 hosts' 0.30
    assert "**0.30** (target <= 0.25: **not met**)" in text
    assert "controller CPU per host, first run: 12.0 s at 1, 8.0 s at 12 host(s)" in text


def test_noop_target_needs_zero_changes():
    rows = [Row("cluster", "first", 1000, 90.0, 20), Row("cluster", "noop", 1000, 9.0, 1)]
    assert any("9.0 s** (target < 15 s: **not met**)" in line for line in report.cluster_section(rows))
    rows[1] = Row("cluster", "noop", 1000, 9.0, 0)
    assert any("(target < 15 s: met)" in line for line in report.cluster_section(rows))


def test_csv_round_trip(tmp_path, monkeypatch):
    monkeypatch.setattr(benchlib, "OUT", tmp_path)
    rows = [Row("overhead", "roles", 1, 61.5, None, "40 packages + 12 paths", 20.5, 9.5),
            Row("overhead", "script", 1, 50.0)]
    assert benchlib.read_rows(benchlib.write_rows("overhead", rows)) == rows
