"""Parts (b) and (c): the MPS limit checks and the sharing-mode benchmark, over injectable clients/daemons."""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from . import clients, mps, stats

DEFAULT_NS = (1, 2, 4, 8)
# SM counts under an MPS thread limit are rounded to what the hardware can partition (pairs of SMs per TPC on
# recent GPUs), so the visible count may exceed pct% of the SMs by this much.
SM_ROUNDING_TOLERANCE = 2


def no_mps_env(private_empty_dir: str | os.PathLike, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for clients that must NOT use MPS: an empty pipe directory, so a node-wide daemon in the
    default /tmp/nvidia-mps cannot silently turn the time-sliced runs into MPS runs."""
    env = {**os.environ, **(extra or {})}
    env[mps.PIPE_ENV] = str(private_empty_dir)
    env.pop("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", None)
    env.pop("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", None)
    return env


def sm_limit_ok(visible: int, full: int, pct: float) -> bool:
    if pct >= 100:
        return visible == full
    return 1 <= visible < full and visible <= math.ceil(full * pct / 100) + SM_ROUNDING_TOLERANCE


def _check(name: str, ok: bool, detail: str) -> dict:
    return {"name": name, "ok": bool(ok), "detail": detail}


def run_mps_check(
    client_base: list[str],
    daemon_factory: Callable[[], mps.MpsDaemon],
    device: int = 0,
    thread_pct: int = 25,
    mem_limit_mib: int = 2048,
    over_margin_mib: int = 1024,
    extra_env: dict[str, str] | None = None,
) -> dict:
    """Start a private daemon, set limits, prove a client is refused past the memory limit and sees fewer SMs,
    quit the daemon and prove no process of it remains. Each step is a named check; errors become failed
    checks and never skip the shutdown."""
    out: dict = {"thread_percentage": thread_pct, "mem_limit_mib": mem_limit_mib, "device": device, "checks": []}
    checks = out["checks"]
    with tempfile.TemporaryDirectory(prefix="kagc-nomps-") as empty:
        try:
            full = clients.run_once([*client_base, "probe"], no_mps_env(empty, extra_env))
        except (clients.ClientError, OSError) as exc:
            checks.append(_check("client without MPS", False, str(exc)))
            out["ok"] = False
            return out
    out.update(lib=full["lib"], gpu=full["device"], full_sm_count=full["sm_count"])
    daemon = daemon_factory()
    try:
        with daemon:
            daemon.command(mps.command_set_thread_percentage(thread_pct))
            readback = mps.parse_percentage(daemon.command("get_default_active_thread_percentage"))
            checks.append(
                _check(
                    "thread percentage read back from the daemon",
                    readback == thread_pct,
                    f"set {thread_pct}, read {readback:g}",
                )
            )
            daemon.command(mps.command_set_pinned_mem_limit(device, mem_limit_mib))

            under, over = mem_limit_mib // 2, mem_limit_mib + over_margin_mib
            mem = clients.run_once([*client_base, "mem", "--under", str(under), "--over", str(over)], daemon.env())
            checks.append(
                _check(
                    f"allocation of {under} MiB under the limit succeeds",
                    mem.get("under_ok"),
                    mem.get("under_error") or "ok",
                )
            )
            checks.append(
                _check(
                    f"allocation of {over} MiB past the limit is refused",
                    mem.get("over_refused"),
                    mem.get("over_error") or "allocation succeeded: limit NOT enforced",
                )
            )

            servers = daemon.server_pids()
            checks.append(
                _check("client ran through this MPS daemon (server listed)", bool(servers), f"servers {servers}")
            )
            if servers:
                text = daemon.command(f"get_device_pinned_mem_limit {servers[0]} {device}")
                low, high = mps.parse_mem_limit_mib(text)
                checks.append(
                    _check(
                        "pinned memory limit read back from the server",
                        low <= mem_limit_mib <= high,
                        f"set {mem_limit_mib}M, read {text!r}",
                    )
                )

            limited = clients.run_once([*client_base, "probe"], daemon.env())
            out["mps_sm_count"] = limited["sm_count"]
            checks.append(
                _check(
                    f"client under {thread_pct}% threads sees fewer SMs",
                    sm_limit_ok(limited["sm_count"], full["sm_count"], thread_pct),
                    f"{limited['sm_count']} of {full['sm_count']} SMs visible",
                )
            )

            # A client's own CUDA_MPS_ACTIVE_THREAD_PERCENTAGE may only lower its share further.
            lower = max(1, thread_pct // 2)
            env = daemon.env()
            env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(lower)
            lowered = clients.run_once([*client_base, "probe"], env)
            out["mps_sm_count_client_env"] = lowered["sm_count"]
            checks.append(
                _check(
                    f"client env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={lower} lowers it further",
                    lowered["sm_count"] <= limited["sm_count"] and lowered.get("env_thread_percentage") == str(lower),
                    f"{lowered['sm_count']} SMs visible",
                )
            )
    except Exception as exc:  # recorded as a failed check; the daemon was already stopped by the with-block
        checks.append(_check("MPS check ran to completion", False, f"{type(exc).__name__}: {exc}"))
    finally:
        report = daemon.stop()  # idempotent: returns the report of the with-block's stop
    out["shutdown"] = report
    checks.append(
        _check(
            "daemon quit and no MPS process left",
            not report["leftover"],
            f"pids {report['pids']}, quit sent {report['quit_sent']}, "
            f"signalled {report['signalled']}, leftover {report['leftover']}",
        )
    )
    out["ok"] = all(c["ok"] for c in checks)
    return out


def run_benchmark(
    client_base: list[str],
    daemon_factory: Callable[[], mps.MpsDaemon],
    ns=DEFAULT_NS,
    workload_args: list[str] | None = None,
    ready_timeout: float = 300.0,
    run_timeout: float = 300.0,
    log: Callable[[str], None] = lambda _msg: None,
    extra_env: dict[str, str] | None = None,
) -> dict:
    """Baseline (1 process alone), time-sliced (N processes, no MPS) and MPS (N processes, private daemon)."""
    cmd = [*client_base, "bench", *(workload_args or [])]
    rows: list[dict] = []
    errors: list[dict] = []
    raw: dict[str, list] = {}

    def one(mode: str, n: int, env: dict[str, str]) -> None:
        log(f"bench: {mode} N={n}")
        try:
            results = clients.run_concurrent(cmd, n, env, ready_timeout, run_timeout)
            rows.append(stats.aggregate_clients(mode, n, results))
            raw[f"{mode}/{n}"] = [{k: v for k, v in r.items() if k != "latencies_ms"} for r in results]
        except (clients.ClientError, ValueError, OSError) as exc:
            errors.append({"mode": mode, "n": n, "error": str(exc)})

    with tempfile.TemporaryDirectory(prefix="kagc-nomps-") as empty:
        env = no_mps_env(empty, extra_env)
        one("baseline", 1, env)
        for n in ns:
            one("timeslice", n, env)
    daemon = daemon_factory()
    try:
        with daemon:
            for n in ns:
                one("mps", n, daemon.env())
    except mps.MpsError as exc:
        errors.append({"mode": "mps", "n": None, "error": str(exc)})
    report = daemon.stop()
    return {
        "workload": {"argv": cmd[len(client_base) :]},
        "rows": rows,
        "ratios": stats.mode_ratios(rows),
        "errors": errors,
        "clients": raw,
        "mps_shutdown": report,
        "ok": not errors and not report["leftover"],
    }


def workload_args(batch: int, size: int, dtype: str, warmup: int, duration: float) -> list[str]:
    return [
        "--batch",
        str(batch),
        "--size",
        str(size),
        "--dtype",
        dtype,
        "--warmup",
        str(warmup),
        "--duration",
        str(duration),
    ]


def default_daemon_factory(
    control: str,
    logs_dir: str | os.PathLike | None = None,
    name: str = "mps",
    extra_env: dict[str, str] | None = None,
):
    def factory() -> mps.MpsDaemon:
        logs = Path(logs_dir) / name if logs_dir else None
        return mps.MpsDaemon(control=control, keep_logs_in=logs, extra_env=extra_env)

    return factory
