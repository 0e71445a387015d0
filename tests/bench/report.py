#!/usr/bin/env python3
"""Turn the benchmark CSVs under the results directory into ``results.md`` (tables, ratios against the issue's
targets) and ``scaling.png`` (time against hosts and nodes). Run by ``make bench`` after the benchmarks."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from benchlib import OUT, REPO, Row, read_rows  # noqa: E402

# Targets (BENCHMARKS.md), checked where the rows to compute them exist.
FLEET_SCALE_MAX = 2.0
RERUN_SHARE_MAX = 0.25
OVERHEAD_MAX = 1.5
NOOP_MAX_S = 15.0
NOOP_AT_NODES = 1000


def verdict(ok: bool) -> str:
    return "met" if ok else "**not met**"


def machine() -> str:
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                            check=False).stdout.strip() or "unknown"
    return (f"{os.cpu_count()} CPUs, {mem_gib:.0f} GiB, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}, commit {commit}")


def whole(seconds: float | None) -> str:
    """A CPU-seconds cell: whole seconds, empty where the case did not record it."""
    return "" if seconds is None else f"{seconds:.0f}"


def busy(row: Row) -> str:
    """Average cores busy over the case: near the core count means the case was bound by the machine's CPU."""
    return "" if row.cpu_seconds is None else f"{row.cpu_seconds / row.seconds:.2f} of {os.cpu_count()}"


def by_case(rows: list[Row]) -> dict[tuple[str, int], Row]:
    return {(r.case, r.size): r for r in rows}


def fleet_section(rows: list[Row]) -> list[str]:
    idx = by_case(rows)
    sizes = sorted({r.size for r in rows})
    out = ["## 1. Provisioning fleet scale (`ansible/hosts.yml`, podman lab hosts)", "",
           "| hosts | first run (s) | machine CPU, first run (s) | of it controller (s) | cores busy | re-run (s) "
           "| re-run / first | changed on re-run |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s in sizes:
        first, rerun = idx.get(("first", s)), idx.get(("rerun", s))
        if first and rerun:
            out.append(f"| {s} | {first.seconds:.1f} | {whole(first.cpu_seconds)} "
                       f"| {whole(first.controller_cpu_seconds)} | {busy(first)} "
                       f"| {rerun.seconds:.1f} | {rerun.seconds / first.seconds:.2f} | {rerun.changed} |")
    out.append("")
    if len(sizes) > 1 and ("first", sizes[0]) in idx and ("first", sizes[-1]) in idx:
        ratio = idx["first", sizes[-1]].seconds / idx["first", sizes[0]].seconds
        out.append(f"- {sizes[-1]} hosts / {sizes[0]} host, first run: **{ratio:.2f}x** "
                   f"(target <= {FLEET_SCALE_MAX:g}x: {verdict(ratio <= FLEET_SCALE_MAX)})")
    shares = [idx["rerun", s].seconds / idx["first", s].seconds for s in sizes
              if ("rerun", s) in idx and ("first", s) in idx]
    if shares:
        worst = max(shares)
        out.append(f"- re-run / first run, worst size: **{worst:.2f}** "
                   f"(target <= {RERUN_SHARE_MAX:g}: {verdict(worst <= RERUN_SHARE_MAX)})")
    # The part of the cost that grows with a real fleet, where every host runs its own modules on its own CPUs.
    per_host = [f"{idx['first', s].controller_cpu_seconds / s:.1f} s at {s}" for s in sizes
                if ("first", s) in idx and idx["first", s].controller_cpu_seconds is not None]
    if per_host:
        out.append(f"- controller CPU per host, first run: {', '.join(per_host)} host(s)")
    return [*out, ""]


def overhead_section(rows: list[Row]) -> list[str]:
    idx = {r.case: r for r in rows}
    out = ["## 2. Overhead against the physical limit (one fresh pGPU host each)", "",
           "| case | seconds | machine CPU (s) | changed | what |", "|---|---:|---:|---:|---|"]
    out += [f"| {r.case} | {r.seconds:.1f} | {whole(r.cpu_seconds)} | {'' if r.changed is None else r.changed} "
            f"| {r.note} |" for r in rows]
    out.append("")
    for suffix in ("", "+dkms"):
        if f"roles{suffix}" in idx and f"script{suffix}" in idx:
            ratio = idx[f"roles{suffix}"].seconds / idx[f"script{suffix}"].seconds
            out.append(f"- roles{suffix} / plain script{suffix}: **{ratio:.2f}x** (target <= {OVERHEAD_MAX:g}x: "
                       f"{verdict(ratio <= OVERHEAD_MAX)})")
    return [*out, ""]


def cluster_section(rows: list[Row]) -> list[str]:
    idx = by_case(rows)
    sizes = sorted({r.size for r in rows})
    out = ["## 3. Cluster scale (`ansible/cluster.yml` on the kwok lab)", "",
           "| nodes | first run until DaemonSets ready (s) | no-op re-run (s) | changed on re-run | notes |",
           "|---:|---:|---:|---:|---|"]
    for s in sizes:
        first, noop = idx.get(("first", s)), idx.get(("noop", s))
        if first and noop:
            notes = "; ".join(n for n in (first.note, noop.note) if n)
            out.append(f"| {s} | {first.seconds:.1f} | {noop.seconds:.1f} | {noop.changed} | {notes} |")
    out.append("")
    noop = idx.get(("noop", NOOP_AT_NODES))
    if noop:
        out.append(f"- no-op re-run at {NOOP_AT_NODES} nodes: **{noop.seconds:.1f} s** (target < {NOOP_MAX_S:g} s: "
                   f"{verdict(noop.seconds < NOOP_MAX_S and noop.changed == 0)})")
    return [*out, ""]


def scheduling_section(rows: list[Row]) -> list[str]:
    idx = {r.case: r for r in rows}
    out = ["## 4. Scheduling (pods until all are bound)", "", "| pods request | pods | seconds | notes |",
           "|---|---:|---:|---|"]
    out += [f"| {r.case} | {r.size} | {r.seconds:.1f} | {r.note} |" for r in rows]
    out.append("")
    if "gpu-pods" in idx and "cpu-pods" in idx:
        out.append(f"- pool resources / CPU only: **{idx['gpu-pods'].seconds / idx['cpu-pods'].seconds:.2f}x**")
    return [*out, ""]


def preflight_section(rows: list[Row]) -> list[str]:
    out = ["## 5. Preflight (this checkout against a baseline commit, side by side)", "",
           "| case | hosts | median seconds | rounds |", "|---|---:|---:|---|"]
    out += [f"| {r.case} | {r.size} | {r.seconds:.1f} | {r.note} |" for r in rows]
    out.append("")
    head = next((r for r in rows if r.case.startswith("head")), None)
    base = next((r for r in rows if r.case.startswith("baseline")), None)
    if head and base:
        ratio = head.seconds / base.seconds
        out.append(f"- HEAD / baseline: **{ratio:.2f}x** (target <= 1.20x: {verdict(ratio <= 1.20)})")
    return [*out, ""]


SECTIONS = {"hosts": fleet_section, "overhead": overhead_section, "cluster": cluster_section,
            "scheduling": scheduling_section, "preflight": preflight_section}


def plot(tables: dict[str, list[Row]], path: Path) -> bool:
    import matplotlib  # noqa: PLC0415 - only the report needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    panels = [(name, label, cases) for name, label, cases in (
        ("hosts", "GPU hosts (podman lab)", {"first": "hosts.yml, first run", "rerun": "hosts.yml, re-run"}),
        ("cluster", "fake GPU nodes (kwok lab)", {"first": "cluster.yml until DaemonSets ready",
                                                   "noop": "cluster.yml, no-op re-run"}),
    ) if tables.get(name)]
    if not panels:
        return False
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.2), squeeze=False)
    for ax, (name, label, cases) in zip(axes[0], panels, strict=True):
        for case, legend in cases.items():
            points = sorted((r.size, r.seconds) for r in tables[name] if r.case == case)
            if points:
                ax.plot(*zip(*points, strict=True), marker="o", label=legend)
        if name == "cluster":
            ax.set_xscale("log")
            ax.axhline(NOOP_MAX_S, color="grey", linestyle="--", linewidth=0.8, label="no-op target")
        ax.set_xlabel(label)
        ax.set_ylabel("wall time (s)")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.suptitle("kube-accel: time against fleet size")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main() -> None:
    tables = {name: read_rows(OUT / f"{name}.csv") for name in SECTIONS if (OUT / f"{name}.csv").exists()}
    if not tables:
        sys.exit(f"[bench] no results in {OUT}: run the benchmarks first (make bench)")
    lines = ["# kube-accel benchmark results", "",
             f"Written by `make bench` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; machine: {machine()}.",
             "How to read and rerun: BENCHMARKS.md.", ""]
    for name, section in SECTIONS.items():
        if name in tables:
            lines += section(tables[name])
    if plot(tables, OUT / "scaling.png"):
        lines += ["![time against hosts and nodes](scaling.png)", ""]
    (OUT / "results.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
