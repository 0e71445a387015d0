"""workload.py's logic (the GPU client) with a stand-in backend: no GPU library here, so the backend is a
small pure-Python object with the same methods as the CuPy/PyTorch backends."""

from __future__ import annotations

import io
import json
import signal
import sys
from types import SimpleNamespace

import pytest

from kube_accel.gpucheck import workload


class OutOfMemory(Exception):
    pass


class FakeBackend:
    name, version = "fake", "0"

    def __init__(self, limit_mib=None, on_step=None):
        self.limit_mib, self.on_step, self.steps, self.syncs = limit_mib, on_step, 0, 0

    def info(self):
        return {"device": "Fake GPU", "sm_count": 132}

    def alloc(self, nbytes):
        if self.limit_mib is not None and nbytes > self.limit_mib * workload.MIB:
            raise OutOfMemory("CUDA error: out of memory")
        return bytearray(0)

    def is_oom(self, exc):
        return isinstance(exc, OutOfMemory)

    def inputs(self, batch, size, dtype):
        return (batch, size, dtype)

    def step(self, _ab):
        self.steps += 1
        if self.on_step:
            self.on_step(self)

    def sync(self):
        self.syncs += 1


@pytest.fixture(autouse=True)
def reset_stop_flags():
    workload._STOP.update(requested=False, measuring=False)
    yield
    workload._STOP.update(requested=False, measuring=False)


def _bench_args(**kw):
    base = {"batch": 4, "size": 8, "dtype": "float16", "warmup": 3, "duration": 0.05}
    return SimpleNamespace(**{**base, **kw})


def test_bench_waits_for_go_then_measures_synchronised_iterations(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO("go\n"))
    backend = FakeBackend()
    result = workload.cmd_bench(backend, _bench_args())
    ready = json.loads(capsys.readouterr().out.splitlines()[0])
    assert ready["event"] == "ready"
    assert result["iterations"] == len(result["latencies_ms"]) == backend.steps - 3
    assert backend.syncs == result["iterations"] + 1  # one per iteration plus one after warm-up
    assert result["t_end"] - result["t_start"] >= 0.05 and result["batch"] == 4


def test_bench_refuses_to_start_without_go(monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    with pytest.raises(RuntimeError, match="expected 'go'"):
        workload.cmd_bench(FakeBackend(), _bench_args())


def test_sigterm_while_measuring_stops_after_the_current_iteration(monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("go\n"))

    def term_on_tenth(backend):
        if backend.steps == 10:
            workload._on_sigterm(signal.SIGTERM, None)  # as the handler would be called

    backend = FakeBackend(on_step=term_on_tenth)
    with pytest.raises(SystemExit) as exc:
        workload.cmd_bench(backend, _bench_args(duration=60))
    assert exc.value.code == 128 + signal.SIGTERM
    assert backend.steps == 10 and backend.syncs == backend.steps - 3 + 1  # it synchronised before leaving


def test_sigterm_outside_measurement_exits_at_once():
    with pytest.raises(SystemExit):
        workload._on_sigterm(signal.SIGTERM, None)


def test_mem_reports_refusal_only_for_out_of_memory():
    out = workload.cmd_mem(FakeBackend(limit_mib=2048), SimpleNamespace(under=1024, over=3072))
    assert out["under_ok"] and out["over_refused"] and "out of memory" in out["over_error"]
    out = workload.cmd_mem(FakeBackend(limit_mib=None), SimpleNamespace(under=1024, over=3072))
    assert out["under_ok"] and out["over_refused"] is False and out["over_error"] is None


def test_mem_under_failure_is_reported():
    out = workload.cmd_mem(FakeBackend(limit_mib=512), SimpleNamespace(under=1024, over=3072))
    assert out["under_ok"] is False and "out of memory" in out["under_error"]


def test_probe_reports_sm_count_and_client_thread_env(monkeypatch):
    monkeypatch.setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "12")
    out = workload.cmd_probe(FakeBackend(), None)
    assert out["sm_count"] == 132 and out["env_thread_percentage"] == "12" and out["lib"] == "fake"


def test_load_backend_names_each_failed_library(monkeypatch):
    class Broken:
        def __init__(self):
            raise ImportError("No module named 'cupy'")

    monkeypatch.setattr(workload, "BACKENDS", {"cupy": Broken, "torch": Broken})
    with pytest.raises(RuntimeError, match=r"cupy: ImportError: No module named 'cupy'; torch: ImportError"):
        workload.load_backend("auto")
