"""GPU client process for the MPS checks and the benchmark; run as a script: ``python workload.py <cmd>``.

Standard library only at import time, so the parent can start it with any interpreter that has CuPy or
PyTorch. Every command prints JSON lines on stdout; the last line is the result.

  probe                 library, device name, visible SM count (an MPS thread limit lowers it)
  mem --under M --over M  allocate M MiB (must succeed) then M MiB (must be refused under an MPS limit)
  bench ...             warm up, print {"event": "ready"}, wait for "go" on stdin, run batched matmuls for
                        --duration seconds, print per-iteration latencies
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

MIB = 1024 * 1024

# Killing an MPS client in the middle of GPU work can hang the MPS server and every client on it (MPS docs),
# so SIGTERM only asks the measuring loop to stop after its current, synchronised iteration.
_STOP = {"requested": False, "measuring": False}


def _on_sigterm(signum, _frame):
    _STOP["requested"] = True
    if not _STOP["measuring"]:
        raise SystemExit(128 + signum)


def emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class CupyBackend:
    name = "cupy"

    def __init__(self):
        import cupy

        self.cp = cupy
        cupy.cuda.runtime.getDeviceCount()
        self.version = cupy.__version__

    def info(self) -> dict:
        props = self.cp.cuda.runtime.getDeviceProperties(0)
        name = props["name"]
        return {
            "device": name.decode() if isinstance(name, bytes) else str(name),
            "sm_count": int(self.cp.cuda.Device(0).attributes["MultiProcessorCount"]),
        }

    def alloc(self, nbytes: int):
        # cupy.cuda.Memory is a plain cudaMalloc, outside CuPy's pool, so the MPS limit applies to this request.
        buf = self.cp.cuda.Memory(nbytes)
        self.cp.cuda.Device(0).synchronize()
        return buf

    def is_oom(self, exc: BaseException) -> bool:
        return isinstance(exc, self.cp.cuda.memory.OutOfMemoryError) or "out of memory" in str(exc).lower()

    def inputs(self, batch: int, size: int, dtype: str):
        rng = self.cp.random.default_rng(0)
        a = rng.standard_normal((batch, size, size), dtype=self.cp.float32).astype(dtype)
        b = rng.standard_normal((batch, size, size), dtype=self.cp.float32).astype(dtype)
        return a, b, self.cp.empty_like(a)

    def step(self, abc) -> None:
        # Preallocated output: no allocation (and no implicit synchronisation of a free) inside the timed loop.
        self.cp.matmul(abc[0], abc[1], out=abc[2])

    def sync(self) -> None:
        self.cp.cuda.Device(0).synchronize()


class TorchBackend:
    name = "torch"

    def __init__(self):
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("torch.cuda.is_available() is False")
        self.torch = torch
        self.version = torch.__version__

    def info(self) -> dict:
        props = self.torch.cuda.get_device_properties(0)
        return {"device": props.name, "sm_count": int(props.multi_processor_count)}

    def alloc(self, nbytes: int):
        buf = self.torch.empty(nbytes, dtype=self.torch.uint8, device="cuda")
        self.torch.cuda.synchronize()
        return buf

    def is_oom(self, exc: BaseException) -> bool:
        oom = getattr(self.torch.cuda, "OutOfMemoryError", ())
        return (oom and isinstance(exc, oom)) or "out of memory" in str(exc).lower()

    def inputs(self, batch: int, size: int, dtype: str):
        dt = getattr(self.torch, dtype)
        gen = self.torch.Generator(device="cuda").manual_seed(0)
        a = self.torch.randn((batch, size, size), device="cuda", dtype=dt, generator=gen)
        b = self.torch.randn((batch, size, size), device="cuda", dtype=dt, generator=gen)
        return a, b, self.torch.empty_like(a)

    def step(self, abc) -> None:
        self.torch.bmm(abc[0], abc[1], out=abc[2])

    def sync(self) -> None:
        self.torch.cuda.synchronize()


BACKENDS = {"cupy": CupyBackend, "torch": TorchBackend}


def load_backend(lib: str):
    names = list(BACKENDS) if lib == "auto" else [lib]
    errors = []
    for name in names:
        try:
            return BACKENDS[name]()
        except Exception as exc:  # ImportError, no device, CUDA init failure: try the next library
            errors.append(f"{name}: {type(exc).__name__}: {exc}")
    raise RuntimeError("no usable GPU library (" + "; ".join(errors) + ")")


def cmd_probe(backend, _args) -> dict:
    return {
        "event": "result",
        "lib": backend.name,
        "lib_version": backend.version,
        **backend.info(),
        "env_thread_percentage": os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
    }


def cmd_mem(backend, args) -> dict:
    out = {"event": "result", "lib": backend.name, "under_mib": args.under, "over_mib": args.over}
    try:
        under = backend.alloc(args.under * MIB)
        out["under_ok"] = True
        del under
    except Exception as exc:
        out.update(under_ok=False, under_error=f"{type(exc).__name__}: {exc}")
    try:
        over = backend.alloc(args.over * MIB)
        out.update(over_refused=False, over_error=None)
        del over
    except Exception as exc:
        out.update(over_refused=backend.is_oom(exc), over_error=f"{type(exc).__name__}: {exc}")
    return out


def cmd_bench(backend, args) -> dict:
    abc = backend.inputs(args.batch, args.size, args.dtype)
    for _ in range(args.warmup):
        backend.step(abc)
    backend.sync()
    emit({"event": "ready", "pid": os.getpid(), "lib": backend.name})
    # All clients start together: the parent sends "go" once every client is warm.
    if sys.stdin.readline().strip() != "go":
        raise RuntimeError("expected 'go' on stdin")
    latencies = []
    t_start = time.monotonic()
    stop_at = t_start + args.duration
    _STOP["measuring"] = True
    while True:
        t0 = time.perf_counter()
        backend.step(abc)
        backend.sync()  # one iteration = one "request": latency includes queueing behind other clients
        latencies.append((time.perf_counter() - t0) * 1000.0)
        if time.monotonic() >= stop_at or _STOP["requested"]:
            break
    _STOP["measuring"] = False
    if _STOP["requested"]:
        raise SystemExit(128 + signal.SIGTERM)
    t_end = time.monotonic()
    return {
        "event": "result",
        "lib": backend.name,
        "pid": os.getpid(),
        "batch": args.batch,
        "iterations": len(latencies),
        "latencies_ms": latencies,
        "t_start": t_start,
        "t_end": t_end,
        "mps_pipe": os.environ.get("CUDA_MPS_PIPE_DIRECTORY"),
    }


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", choices=["auto", *BACKENDS], default="auto")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("probe")
    mem = sub.add_parser("mem")
    mem.add_argument("--under", type=int, required=True, help="MiB that must be allocatable")
    mem.add_argument("--over", type=int, required=True, help="MiB that must be refused")
    bench = sub.add_parser("bench")
    bench.add_argument("--batch", type=int, default=32)
    bench.add_argument("--size", type=int, default=512)
    bench.add_argument("--dtype", default="float16")
    bench.add_argument("--warmup", type=int, default=20)
    bench.add_argument("--duration", type=float, default=10.0)
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        backend = load_backend(args.lib)
        result = {"probe": cmd_probe, "mem": cmd_mem, "bench": cmd_bench}[args.cmd](backend, args)
    except Exception as exc:
        emit({"event": "error", "error": f"{type(exc).__name__}: {exc}"})
        return 1
    emit(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
