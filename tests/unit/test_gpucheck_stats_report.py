"""Benchmark statistics, ratios and report rendering (Markdown content, PNG file). Inputs are composed."""

from __future__ import annotations

import json
import sys

import pytest

from kube_accel.gpucheck import report, stats


@pytest.mark.parametrize(
    ("values", "pct", "expected"),
    [
        ([5.0], 99, 5.0),
        ([1, 2, 3, 4], 50, 2.5),
        (list(range(1, 101)), 50, 50.5),
        (list(range(1, 101)), 99, 99.01),
        (list(range(1, 101)), 100, 100),
        (list(range(1, 101)), 0, 1),
        ([10, 1, 7, 3], 50, 5.0),  # unsorted input
    ],
)
def test_percentile_interpolates_like_numpy_linear(values, pct, expected):
    assert stats.percentile(values, pct) == pytest.approx(expected)


def test_percentile_matches_numpy_on_random_data():
    np = pytest.importorskip("numpy")
    data = list(np.random.default_rng(7).exponential(3.0, 997))
    for pct in (50, 90, 99, 99.9):
        assert stats.percentile(data, pct) == pytest.approx(float(np.percentile(data, pct)))


def test_percentile_rejects_bad_input():
    with pytest.raises(ValueError, match="empty"):
        stats.percentile([], 50)
    with pytest.raises(ValueError, match="0..100"):
        stats.percentile([1.0], 101)


def _client(lat, batch=8, start=100.0, end=102.0):
    return {"latencies_ms": lat, "iterations": len(lat), "batch": batch, "t_start": start, "t_end": end}


def test_aggregate_pools_latencies_and_uses_the_union_window():
    row = stats.aggregate_clients(
        "timeslice", 2, [_client([1.0, 2.0, 3.0]), _client([4.0, 5.0], start=101.0, end=104.0)]
    )
    assert row["iterations"] == 5 and row["samples"] == 40
    assert row["window_s"] == pytest.approx(4.0)  # 100.0 .. 104.0
    assert row["throughput"] == pytest.approx(10.0)
    assert row["p50_ms"] == pytest.approx(3.0)
    assert row["p99_ms"] == pytest.approx(4.96)
    assert row["mean_ms"] == pytest.approx(3.0)


def test_aggregate_refuses_missing_clients_and_empty_runs():
    with pytest.raises(ValueError, match="expected 2 client results, got 1"):
        stats.aggregate_clients("mps", 2, [_client([1.0])])
    with pytest.raises(ValueError, match="no iterations"):
        stats.aggregate_clients("mps", 1, [_client([])])


ROWS = [
    {"mode": "baseline", "n": 1, "throughput": 1000.0, "p50_ms": 1.0, "p99_ms": 2.0, "iterations": 10},
    {"mode": "timeslice", "n": 2, "throughput": 1200.0, "p50_ms": 2.0, "p99_ms": 5.0, "iterations": 20},
    {"mode": "mps", "n": 2, "throughput": 1500.0, "p50_ms": 1.5, "p99_ms": 2.5, "iterations": 25},
    {"mode": "timeslice", "n": 4, "throughput": 1100.0, "p50_ms": 4.0, "p99_ms": 9.0, "iterations": 22},
]


def test_ratios_per_n_with_missing_side_as_none():
    ratios = stats.mode_ratios(ROWS)
    assert [q["n"] for q in ratios] == [2, 4]
    two, four = ratios
    assert two["throughput_mps_over_ts"] == pytest.approx(1.25)
    assert two["p50_mps_over_ts"] == pytest.approx(0.75)
    assert two["p99_mps_over_ts"] == pytest.approx(0.5)
    assert two["ts_throughput_over_baseline"] == pytest.approx(1.2)
    assert two["mps_throughput_over_baseline"] == pytest.approx(1.5)
    assert four["throughput_mps_over_ts"] is None and four["mps_throughput_over_baseline"] is None
    assert four["ts_throughput_over_baseline"] == pytest.approx(1.1)


def _bench():
    return {
        "rows": ROWS,
        "ratios": stats.mode_ratios(ROWS),
        "errors": [{"mode": "mps", "n": 4, "error": "OOM"}],
        "ok": False,
    }


def test_bench_markdown_has_rows_in_mode_order_and_ratios():
    md = report.render_bench(_bench())
    lines = md.splitlines()
    assert lines[0] == "| Mode | N | Throughput (samples/s) | p50 (ms) | p99 (ms) | Iterations |"
    assert lines[2] == "| baseline (1 process alone) | 1 | 1,000.0 | 1.000 | 2.000 | 10 |"
    assert lines[3] == "| time-sliced | 2 | 1,200.0 | 2.000 | 5.000 | 20 |"
    assert lines[4] == "| time-sliced | 4 | 1,100.0 | 4.000 | 9.000 | 22 |"
    assert lines[5] == "| MPS | 2 | 1,500.0 | 1.500 | 2.500 | 25 |"
    assert "| 2 | 1.25 | 0.75 | 0.50 | 1.20 | 1.50 |" in lines
    assert "| 4 | n/a | n/a | n/a | 1.10 | n/a |" in lines
    assert "- mps N=4: OOM" in lines


def test_mps_and_facts_markdown():
    mps_md = report.render_mps(
        {
            "thread_percentage": 25,
            "mem_limit_mib": 2048,
            "device": 0,
            "ok": False,
            "checks": [{"name": "a", "ok": True, "detail": "x|y"}, {"name": "b", "ok": False, "detail": "z"}],
        }
    )
    assert "**FAIL**" in mps_md and "| a | pass | x\\|y |" in mps_md and "| b | FAIL | z |" in mps_md
    facts_md = report.render_facts(
        {
            "ok": True,
            "failures": 0,
            "findings": [
                {"gpu": None, "field": "driver_version", "facts": "570.1", "smi": "570.1", "status": "match"},
                {"gpu": 0, "field": "compute_capability", "facts": "9.0", "smi": None, "status": "not_in_smi"},
            ],
        }
    )
    assert "**PASS**" in facts_md
    assert "| host | driver_version | 570.1 | 570.1 | match |" in facts_md
    assert "| 0 | compute_capability | 9.0 | n/a | not_in_smi |" in facts_md


def test_skipped_sections_say_why():
    md = report.render_markdown({"mps": {"skipped": "no NVIDIA GPU/driver on this machine"}})
    assert "## MPS limits\n\nSkipped: no NVIDIA GPU/driver on this machine" in md


def test_write_results_writes_json_markdown_and_a_png(tmp_path):
    results = {"environment": {"date": "2026-11-22T04:00:00Z"}, "bench": _bench()}
    written = report.write_results(results, tmp_path / "out")
    assert [p.name for p in written] == ["results.json", "results.md", "bench.png"]
    assert json.loads(written[0].read_text())["bench"]["rows"][0]["mode"] == "baseline"
    assert "| time-sliced | 2 |" in written[1].read_text()
    png = written[2].read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


def test_no_png_without_benchmark_rows(tmp_path):
    written = report.write_results({"bench": {"skipped": "no GPU"}}, tmp_path)
    assert [p.name for p in written] == ["results.json", "results.md"]


def test_missing_matplotlib_keeps_the_numbers(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    written = report.write_results({"bench": _bench()}, tmp_path)
    assert [p.name for p in written] == ["results.json", "results.md"]
    saved = json.loads(written[0].read_text())
    assert saved["bench"]["rows"] and "bench.png not written" in saved["bench"]["plot_error"]
