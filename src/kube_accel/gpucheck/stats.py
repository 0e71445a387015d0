"""Statistics for benchmark results: percentiles, aggregation of client runs, mode ratios."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def percentile(values: Sequence[float], pct: float) -> float:
    """Percentile with linear interpolation between closest ranks (numpy's default "linear" method).

    Interpolating keeps p99 meaningful for short runs: with 150 samples nearest-rank p99 would just be the
    second largest value.
    """
    if not values:
        raise ValueError("percentile of an empty sample")
    if not 0 <= pct <= 100:
        raise ValueError(f"percentile must be within 0..100, got {pct}")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * pct / 100.0
    low = math.floor(rank)
    high = math.ceil(rank)
    if low == high:
        return float(ordered[low])
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def aggregate_clients(mode: str, n: int, clients: Iterable[dict]) -> dict:
    """Combine the result records of the N concurrent clients of one run into one row.

    Throughput counts every sample of every client over the union of their measuring windows (first start to
    last end), so a straggler lowers it instead of being ignored. Latencies of all clients are pooled.
    """
    clients = list(clients)
    if len(clients) != n:
        raise ValueError(f"{mode} N={n}: expected {n} client results, got {len(clients)}")
    latencies: list[float] = []
    samples = 0
    iterations = 0
    for c in clients:
        latencies.extend(c["latencies_ms"])
        iterations += c["iterations"]
        samples += c["iterations"] * c["batch"]
    if not latencies:
        raise ValueError(f"{mode} N={n}: clients reported no iterations")
    window = max(c["t_end"] for c in clients) - min(c["t_start"] for c in clients)
    if window <= 0:
        raise ValueError(f"{mode} N={n}: non-positive measuring window {window}")
    return {
        "mode": mode,
        "n": n,
        "iterations": iterations,
        "samples": samples,
        "window_s": window,
        "throughput": samples / window,
        "p50_ms": percentile(latencies, 50),
        "p99_ms": percentile(latencies, 99),
        "mean_ms": sum(latencies) / len(latencies),
    }


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den in (None, 0):
        return None
    return num / den


def mode_ratios(rows: Iterable[dict]) -> list[dict]:
    """MPS over time-slicing per N (throughput, p50, p99), plus each mode's throughput over the baseline.

    A ratio above 1 means MPS has more throughput (good) or more latency (bad); a missing side gives None
    rather than a made-up number.
    """
    rows = list(rows)
    baseline = next((r for r in rows if r["mode"] == "baseline"), None)
    by_key = {(r["mode"], r["n"]): r for r in rows}
    ns = sorted({r["n"] for r in rows if r["mode"] in ("timeslice", "mps")})
    out = []
    for n in ns:
        ts = by_key.get(("timeslice", n))
        mps = by_key.get(("mps", n))
        out.append(
            {
                "n": n,
                "throughput_mps_over_ts": _ratio(mps and mps["throughput"], ts and ts["throughput"]),
                "p50_mps_over_ts": _ratio(mps and mps["p50_ms"], ts and ts["p50_ms"]),
                "p99_mps_over_ts": _ratio(mps and mps["p99_ms"], ts and ts["p99_ms"]),
                "ts_throughput_over_baseline": _ratio(ts and ts["throughput"], baseline and baseline["throughput"]),
                "mps_throughput_over_baseline": _ratio(mps and mps["throughput"], baseline and baseline["throughput"]),
            }
        )
    return out
