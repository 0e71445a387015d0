"""Shared pieces of kube-accel's benchmarks: timing, playbook runs with their recap, and the results files.

Benchmarks are scripts (``make bench``), never timed tests: each measures its cases side by side in one run,
prints the ratios, and writes its rows to ``<out>/<bench>.csv``; ``report.py`` turns every CSV into
``results.md`` and ``scaling.png``.
"""

from __future__ import annotations

import csv
import os
import re
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, fields
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUT = Path(os.environ.get("KA_BENCH_OUT", REPO / "tests" / "bench" / "results"))
CACHE = Path(os.environ.get("KA_CACHE", Path.home() / ".cache" / "kube-accel"))
BIN = CACHE / "bin"
VENV_BIN = Path(sys.executable).parent


@dataclass
class Row:
    """One measurement. ``size`` is the host or node count; ``case`` names what was timed at that size."""

    bench: str
    case: str
    size: int
    seconds: float
    changed: int | None = None  # tasks reported changed (playbook cases), None where it does not apply
    note: str = ""
    # CPU seconds the whole machine spent during the case (controller, lab hosts, control plane alike): with the
    # wall time it tells whether a case waited or was bound by the machine's cores.
    cpu_seconds: float | None = None
    # CPU seconds of the benchmarked command and everything it started and reaped (ansible-playbook, its forks,
    # their `podman exec` clients), not the lab hosts' own processes: what a controller pays on a real fleet.
    controller_cpu_seconds: float | None = None


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def machine_cpu_seconds() -> float:
    """Busy CPU seconds of the whole machine since boot (/proc/stat: every state but idle and iowait)."""
    fields_ = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    busy = sum(fields_) - fields_[3] - fields_[4]
    return busy / os.sysconf("SC_CLK_TCK")


def settle() -> None:
    """Write back dirty pages and drop the page cache, so that a case neither pays for the previous case's
    writes nor reads what it left cached (cases compared side by side start equal). Needs root; else only sync."""
    os.sync()
    with suppress(OSError):
        Path("/proc/sys/vm/drop_caches").write_text("3\n")


@contextmanager
def stopwatch() -> Iterator[list[float]]:
    """``with stopwatch() as t: ...`` then ``t[0]`` holds the wall seconds and ``t[1]`` the machine's busy CPU
    seconds over the same span."""
    box: list[float] = []
    start, cpu = time.perf_counter(), machine_cpu_seconds()
    try:
        yield box
    finally:
        box.extend((time.perf_counter() - start, machine_cpu_seconds() - cpu))


RECAP = re.compile(r"^(?P<host>\S+)\s+:\s+ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+unreachable=(?P<unr>\d+)"
                   r"\s+failed=(?P<failed>\d+)")


@dataclass
class PlaybookRun:
    seconds: float
    cpu_seconds: float
    controller_cpu_seconds: float
    changed: dict[str, int]
    failed: dict[str, int]
    output: str

    @property
    def total_changed(self) -> int:
        return sum(self.changed.values())


def ansible_env(**extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        # Per-task times at the end of every log (--keep keeps them): where a slow case spends its time.
        "ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.profile_tasks",
        "PATH": f"{BIN}:{VENV_BIN}:{os.environ['PATH']}",
        **extra,
    }


def children_cpu_seconds() -> float:
    """User + system CPU seconds of this process's reaped children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_playbook(playbook: str, inventory: Path, *args: str, env: dict[str, str] | None = None,
                 log_to: Path | None = None) -> PlaybookRun:
    """Run ``ansible-playbook``, time it, and read the per-host changed/failed counts off PLAY RECAP.

    A failed host makes the benchmark fail: a fast run that did not do its work is no measurement.
    """
    argv = [str(VENV_BIN / "ansible-playbook"), "-i", str(inventory), str(REPO / "ansible" / playbook), *args]
    settle()
    children = children_cpu_seconds()
    with stopwatch() as t:
        proc = subprocess.run(argv, cwd=REPO, env=env or ansible_env(), capture_output=True, text=True, check=False)
    controller = children_cpu_seconds() - children
    output = proc.stdout + proc.stderr
    if log_to:
        log_to.parent.mkdir(parents=True, exist_ok=True)
        log_to.write_text(output)
    changed: dict[str, int] = {}
    failed: dict[str, int] = {}
    for line in proc.stdout.splitlines():
        m = RECAP.match(line)
        if m:
            changed[m["host"]] = int(m["changed"])
            failed[m["host"]] = int(m["failed"]) + int(m["unr"])
    if proc.returncode != 0 or any(failed.values()) or not changed:
        sys.exit(f"[bench] {' '.join(argv)} failed (rc {proc.returncode}):\n{output[-6000:]}")
    return PlaybookRun(t[0], t[1], controller, changed, failed, output)


def write_rows(bench: str, rows: list[Row]) -> Path:
    """Replace ``<OUT>/<bench>.csv`` with this run's rows."""
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{bench}.csv"
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=[f.name for f in fields(Row)])
        writer.writeheader()
        for row in rows:
            writer.writerow(asdict(row))
    log(f"wrote {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")
    return path


def optional(value: str | None, cast: type[int] | type[float]) -> int | float | None:
    """A CSV field that may be empty (written from None), or absent from an older file."""
    return None if value in (None, "", "None") else cast(value)


def read_rows(path: Path) -> list[Row]:
    with path.open() as fh:
        return [
            Row(bench=r["bench"], case=r["case"], size=int(r["size"]), seconds=float(r["seconds"]),
                changed=optional(r["changed"], int), note=r["note"],
                cpu_seconds=optional(r.get("cpu_seconds"), float),
                controller_cpu_seconds=optional(r.get("controller_cpu_seconds"), float))
            for r in csv.DictReader(fh)
        ]


def ratio_line(label: str, num: float, den: float, target: str = "", unit: str = "s") -> str:
    value = num / den if den else float("inf")
    return f"{label}: {num:.1f} {unit} / {den:.1f} {unit} = {value:.2f}x" + (f" (target {target})" if target else "")
