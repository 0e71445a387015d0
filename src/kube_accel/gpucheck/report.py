"""Render results as Markdown tables, a PNG plot and a JSON file."""

from __future__ import annotations

import json
from pathlib import Path

MODE_LABELS = {"baseline": "baseline (1 process alone)", "timeslice": "time-sliced", "mps": "MPS"}


def _fmt(value, digits: int = 2) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def render_environment(env: dict) -> str:
    lines = ["| Item | Value |", "|---|---|"]
    for key in ("date", "host", "gpu", "driver_version", "cuda_driver_version", "lib", "lib_version"):
        if key in env:
            lines.append(f"| {key} | {_fmt(env[key])} |")
    return "\n".join(lines)


def render_facts(result: dict) -> str:
    lines = [
        f"Facts vs nvidia-smi: **{'PASS' if result['ok'] else 'FAIL'}** ({result['failures']} failing field(s))",
        "",
        "| GPU | Field | Facts | nvidia-smi | Status |",
        "|---|---|---|---|---|",
    ]
    for f in result["findings"]:
        gpu = "host" if f["gpu"] is None else f["gpu"]
        lines.append(f"| {gpu} | {f['field']} | {_fmt(f['facts'])} | {_fmt(f['smi'])} | {f['status']} |")
    return "\n".join(lines)


def render_mps(result: dict) -> str:
    lines = [
        f"MPS limits (thread {result['thread_percentage']} %, pinned memory {result['mem_limit_mib']} MiB "
        f"on device {result.get('physical_device', result['device'])}): **{'PASS' if result['ok'] else 'FAIL'}**",
        "",
        "| Check | Result | Detail |",
        "|---|---|---|",
    ]
    for c in result["checks"]:
        detail = str(c["detail"]).replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {c['name']} | {'pass' if c['ok'] else 'FAIL'} | {detail} |")
    return "\n".join(lines)


def render_bench(result: dict) -> str:
    lines = [
        "| Mode | N | Throughput (samples/s) | p50 (ms) | p99 (ms) | Iterations |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    order = {"baseline": 0, "timeslice": 1, "mps": 2}
    for r in sorted(result["rows"], key=lambda r: (order.get(r["mode"], 9), r["n"])):
        lines.append(
            f"| {MODE_LABELS.get(r['mode'], r['mode'])} | {r['n']} | {_fmt(r['throughput'], 1)} | "
            f"{_fmt(r['p50_ms'], 3)} | {_fmt(r['p99_ms'], 3)} | {r['iterations']} |"
        )
    lines += [
        "",
        "| N | MPS/TS throughput | MPS/TS p50 | MPS/TS p99 | TS/baseline throughput | MPS/baseline throughput |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for q in result["ratios"]:
        lines.append(
            f"| {q['n']} | {_fmt(q['throughput_mps_over_ts'])} | {_fmt(q['p50_mps_over_ts'])} | "
            f"{_fmt(q['p99_mps_over_ts'])} | {_fmt(q['ts_throughput_over_baseline'])} | "
            f"{_fmt(q['mps_throughput_over_baseline'])} |"
        )
    if result.get("errors"):
        lines += ["", "Runs that failed:", ""]
        lines += [f"- {e['mode']} N={e['n']}: {e['error']}" for e in result["errors"]]
    return "\n".join(lines)


def render_markdown(results: dict) -> str:
    parts = ["# kube-accel-gpucheck results", ""]
    if results.get("environment"):
        parts += ["## Environment", "", render_environment(results["environment"]), ""]
    for key, title, render in (
        ("facts", "Facts", render_facts),
        ("mps", "MPS limits", render_mps),
        ("bench", "Sharing-mode benchmark", render_bench),
    ):
        section = results.get(key)
        if section is None:
            continue
        parts += [f"## {title}", ""]
        if section.get("skipped"):
            parts += [f"Skipped: {section['skipped']}", ""]
        elif section.get("error"):
            parts += [f"**FAIL**: could not run: {section['error']}", ""]
        else:
            parts += [render(section), ""]
    return "\n".join(parts)


def plot_bench(result: dict, path: Path) -> Path:
    """Throughput and p99 latency against N per mode; the baseline is a dashed line."""
    import matplotlib

    matplotlib.use("Agg")  # no display on a node
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_l) = plt.subplots(1, 2, figsize=(11, 4.2))
    baseline = next((r for r in result["rows"] if r["mode"] == "baseline"), None)
    for mode, marker in (("timeslice", "o"), ("mps", "s")):
        rows = sorted((r for r in result["rows"] if r["mode"] == mode), key=lambda r: r["n"])
        if not rows:
            continue
        ns = [r["n"] for r in rows]
        ax_t.plot(ns, [r["throughput"] for r in rows], marker=marker, label=MODE_LABELS[mode])
        ax_l.plot(ns, [r["p99_ms"] for r in rows], marker=marker, label=f"{MODE_LABELS[mode]} p99")
        ax_l.plot(ns, [r["p50_ms"] for r in rows], marker=marker, linestyle=":", label=f"{MODE_LABELS[mode]} p50")
    if baseline:
        ax_t.axhline(baseline["throughput"], color="grey", linestyle="--", label="baseline")
        ax_l.axhline(baseline["p99_ms"], color="grey", linestyle="--", label="baseline p99")
    ax_t.set(xlabel="concurrent client processes (N)", ylabel="throughput (samples/s)", title="Throughput")
    ax_l.set(xlabel="concurrent client processes (N)", ylabel="latency per batch (ms)", title="Latency")
    for ax in (ax_t, ax_l):
        ax.set_xscale("log", base=2)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_results(results: dict, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [out_dir / "results.json", out_dir / "results.md"]
    written[0].write_text(json.dumps(results, indent=2, default=str) + "\n")
    written[1].write_text(render_markdown(results))
    bench = results.get("bench")
    if bench and not bench.get("skipped") and bench.get("rows"):
        try:
            written.append(plot_bench(bench, out_dir / "bench.png"))
        except ImportError as exc:  # the numbers matter more than the picture: keep JSON and Markdown
            bench["plot_error"] = f"bench.png not written: {exc}"
            written[0].write_text(json.dumps(results, indent=2, default=str) + "\n")
    return written
