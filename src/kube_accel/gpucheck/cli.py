"""``kube-accel-gpucheck``: validate GPU facts and MPS limits on a node, and benchmark the sharing modes.

Exit status: 0 every check that ran passed, 1 a check failed, 3 nothing could run (no GPU), 2 usage error.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from . import NO_GPU_REASON, checks, clients, facts, mps, report, smi

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_SKIPPED = 0, 1, 2, 3


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _index(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _percentage(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 100:
        raise argparse.ArgumentTypeError(f"must be within 1..100, got {value}")
    return value


def parse_client_counts(text: str) -> list[int]:
    try:
        counts = [int(tok) for tok in text.split(",") if tok.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not counts or any(n < 1 for n in counts):
        raise argparse.ArgumentTypeError(f"client counts must be positive integers, got {text!r}")
    return sorted(set(counts))


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    g = common.add_argument_group("common")
    g.add_argument("--out", type=Path, help="write results.json, results.md (and bench.png) here")
    g.add_argument("--json", action="store_true", help="print the results as JSON instead of Markdown")
    g.add_argument("--device", type=_index, default=0, help="GPU index to test (default 0)")
    g.add_argument("--nvidia-smi", default="nvidia-smi", help="nvidia-smi executable (only -q -x is run)")
    g.add_argument("--mps-control", default="nvidia-cuda-mps-control", help="MPS control executable")
    g.add_argument("--python", default=sys.executable, help="interpreter for GPU clients (needs CuPy or PyTorch)")
    g.add_argument("--lib", choices=["auto", "cupy", "torch"], default="auto", help="GPU library for clients")

    f = argparse.ArgumentParser(add_help=False)
    g = f.add_argument_group("facts")
    g.add_argument("--facts-json", type=Path, help="compare these facts (module or `ansible -m` JSON) instead")
    g.add_argument("--smi-xml", type=Path, help="saved `nvidia-smi -q -x` output instead of running it")
    g.add_argument("--mem-tolerance-mib", type=int, default=0, help="allowed memory_total_mib difference")

    m = argparse.ArgumentParser(add_help=False)
    g = m.add_argument_group("mps")
    g.add_argument("--thread-percentage", type=_percentage, default=25)
    g.add_argument("--mem-limit-mib", type=_positive_int, default=2048)

    b = argparse.ArgumentParser(add_help=False)
    g = b.add_argument_group("bench")
    g.add_argument(
        "--clients",
        type=parse_client_counts,
        default=list(checks.DEFAULT_NS),
        help="comma-separated process counts (default 1,2,4,8)",
    )
    g.add_argument("--duration", type=_positive_float, default=10.0, help="measured seconds per run")
    g.add_argument("--warmup", type=_index, default=20, help="warm-up iterations per client")
    g.add_argument("--batch", type=_positive_int, default=32)
    g.add_argument("--size", type=_positive_int, default=512, help="matrix side")
    g.add_argument("--dtype", default="float16")

    parser = argparse.ArgumentParser(
        prog="kube-accel-gpucheck", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("facts", parents=[common, f], help="(a) facts module vs nvidia-smi -q -x")
    sub.add_parser("mps", parents=[common, m], help="(b) MPS thread/memory limits and clean shutdown")
    sub.add_parser("bench", parents=[common, b], help="(c) baseline vs time-sliced vs MPS benchmark")
    sub.add_parser("all", parents=[common, f, m, b], help="facts, mps and bench")
    return parser


# --- sections ----------------------------------------------------------------------------------------------


def run_facts(args, smi_data: dict | None) -> dict:
    if smi_data is None:
        return {"skipped": f"{NO_GPU_REASON} and no --smi-xml given"}
    if args.facts_json:
        data = facts.load_facts_json(args.facts_json)
        source = str(args.facts_json)
    else:
        data = facts.unwrap_facts(facts.gather_facts())
        source = facts.SOURCE
    result = facts.compare_facts(data, smi_data, args.mem_tolerance_mib)
    result["source"] = source
    return result


def client_env(device: int, smi_data: dict | None) -> dict[str, str]:
    """Make the tested GPU ordinal 0 for the daemon and every client; MPS commands then address device 0.

    By UUID when nvidia-smi gave one: CUDA numbers devices fastest-first by default, which need not be the
    NVML/nvidia-smi index order.
    """
    gpus = (smi_data or {}).get("gpus") or []
    uuid = gpus[device].get("uuid") if 0 <= device < len(gpus) else None
    return {"CUDA_VISIBLE_DEVICES": uuid or str(device), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def run_mps(args, smi_data: dict | None) -> dict:
    extra = client_env(args.device, smi_data)
    base = clients.client_command(args.python, args.lib)
    logs = args.out / "mps-logs" if args.out else None
    factory = checks.default_daemon_factory(args.mps_control, logs, "check", extra)
    # MPS takes a device ordinal or UUID; the UUID cannot be misread whatever CUDA_VISIBLE_DEVICES does.
    visible = extra["CUDA_VISIBLE_DEVICES"]
    result = checks.run_mps_check(
        base,
        factory,
        device=visible if visible.startswith(("GPU-", "MIG-")) else 0,
        thread_pct=args.thread_percentage,
        mem_limit_mib=args.mem_limit_mib,
        extra_env=extra,
    )
    result["physical_device"] = args.device
    return result


def run_bench(args, smi_data: dict | None) -> dict:
    extra = client_env(args.device, smi_data)
    base = clients.client_command(args.python, args.lib)
    logs = args.out / "mps-logs" if args.out else None
    factory = checks.default_daemon_factory(args.mps_control, logs, "bench", extra)
    wargs = checks.workload_args(args.batch, args.size, args.dtype, args.warmup, args.duration)
    result = checks.run_benchmark(
        base, factory, args.clients, wargs, log=lambda msg: print(msg, file=sys.stderr, flush=True), extra_env=extra
    )
    result["physical_device"] = args.device
    return result


def environment(smi_data: dict | None, args) -> dict:
    env = {"date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "host": platform.node()}
    if smi_data:
        env["driver_version"] = smi_data.get("driver_version")
        env["cuda_driver_version"] = smi_data.get("cuda_driver_version")
        gpus = smi_data.get("gpus") or []
        if 0 <= args.device < len(gpus):
            env["gpu"] = gpus[args.device].get("name")
    return env


def _note_library(results: dict) -> None:
    """Record which GPU library the clients used (reported by the clients themselves)."""
    env = results["environment"]
    mps_result = results.get("mps") or {}
    if mps_result.get("lib"):
        env["lib"] = mps_result["lib"]
    for runs in ((results.get("bench") or {}).get("clients") or {}).values():
        if runs and runs[0].get("lib"):
            env.setdefault("lib", runs[0]["lib"])


def exit_status(results: dict) -> int:
    sections = [results[k] for k in ("facts", "mps", "bench") if k in results]
    ran = [s for s in sections if not s.get("skipped")]
    if not ran:
        return EXIT_SKIPPED
    return EXIT_OK if all(s.get("ok") for s in ran) else EXIT_FAIL


def _section(name: str, run) -> dict:
    """One failing part must not hide the others: an unexpected error becomes that section's failed result."""
    try:
        return run()
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    previous = mps.install_signal_handlers()
    try:
        return _run(args)
    finally:
        mps.restore_signal_handlers(previous)


def _run(args) -> int:
    wanted = ("facts", "mps", "bench") if args.command == "all" else (args.command,)
    present, reason = smi.gpu_presence(args.nvidia_smi)
    smi_data, smi_error = None, None
    try:
        if getattr(args, "smi_xml", None):
            smi_data = smi.parse_smi_xml(args.smi_xml.read_text())
        elif present:
            smi_data = smi.parse_smi_xml(smi.run_smi_xml(args.nvidia_smi))
    except (OSError, RuntimeError, ValueError, subprocess.TimeoutExpired, ET.ParseError) as exc:
        smi_error = f"nvidia-smi -q -x unusable: {type(exc).__name__}: {exc}"
    results: dict = {"environment": environment(smi_data, args), "gpu_present": present, "gpu_reason": reason}
    if smi_error:
        results["smi_error"] = smi_error
    for name in wanted:
        if name == "facts":
            results["facts"] = (
                {"ok": False, "error": smi_error} if smi_error else _section(name, lambda: run_facts(args, smi_data))
            )
        elif not present:
            results[name] = {"skipped": reason}
        elif name == "mps":
            results["mps"] = _section(name, lambda: run_mps(args, smi_data))
        else:
            results["bench"] = _section(name, lambda: run_bench(args, smi_data))
        if results[name].get("skipped"):
            print(f"{name}: skipped: {results[name]['skipped']}", file=sys.stderr)
        if results[name].get("error"):
            print(f"{name}: error: {results[name]['error']}", file=sys.stderr)
    _note_library(results)
    if args.out:
        for path in report.write_results(results, args.out):
            print(f"wrote {path}", file=sys.stderr)
    print(json.dumps(results, indent=2, default=str) if args.json else report.render_markdown(results))
    return exit_status(results)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
