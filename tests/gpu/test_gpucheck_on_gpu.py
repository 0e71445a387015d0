"""kube-accel-gpucheck on a real NVIDIA GPU. Skipped where there is none (nvidia-smi missing or NVML init fails).

Run on a GPU node: ``pytest -m gpu tests/gpu -v`` (needs CuPy or PyTorch with CUDA for the MPS and benchmark
parts). Nothing here changes GPU settings; MPS runs as a private daemon and is quit at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kube_accel.gpucheck import cli, clients, smi

PRESENT, WHY = smi.gpu_presence()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not PRESENT, reason=WHY)]


@pytest.fixture(scope="module")
def gpu_library() -> str:
    """Which library the clients use; skips the test when the node has neither CuPy nor PyTorch with CUDA."""
    try:
        probe = clients.run_once([*clients.client_command(), "probe"], dict(os.environ))
    except clients.ClientError as exc:
        pytest.skip(f"no GPU library for the clients on this node: {exc}")
    return probe["lib"]


def test_nvidia_smi_xml_parses_and_agrees_with_nvml():
    import pynvml

    parsed = smi.parse_smi_xml(smi.run_smi_xml())
    pynvml.nvmlInit()
    try:
        count = pynvml.nvmlDeviceGetCount()
        uuids = [pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]
    finally:
        pynvml.nvmlShutdown()
    uuids = [u.decode() if isinstance(u, bytes) else u for u in uuids]
    assert parsed["count"] == count == len(parsed["gpus"])
    assert [g["uuid"] for g in parsed["gpus"]] == uuids  # XML order is NVML index order


def test_facts_module_matches_nvidia_smi(tmp_path):
    rc = cli.main(["facts", "--json", "--out", str(tmp_path)])
    result = json.loads((tmp_path / "results.json").read_text())["facts"]
    assert rc == cli.EXIT_OK, [f for f in result["findings"] if f["status"] != "match"]


def test_mps_limits_are_enforced_and_daemon_leaves_nothing(tmp_path, gpu_library):
    rc = cli.main(["mps", "--out", str(tmp_path), "--thread-percentage", "25", "--mem-limit-mib", "2048"])
    result = json.loads((tmp_path / "results.json").read_text())["mps"]
    assert rc == cli.EXIT_OK, result["checks"]
    # The tool checked every PID of the daemon and its servers by PID and start time after quitting.
    assert result["shutdown"]["quit_sent"] and result["shutdown"]["leftover"] == []


def test_short_benchmark_produces_every_mode(tmp_path, gpu_library):
    rc = cli.main(["bench", "--out", str(tmp_path), "--clients", "1,2", "--duration", "2", "--warmup", "5"])
    result = json.loads((tmp_path / "results.json").read_text())["bench"]
    assert rc == cli.EXIT_OK, result["errors"]
    assert {(r["mode"], r["n"]) for r in result["rows"]} == {
        ("baseline", 1),
        ("timeslice", 1),
        ("timeslice", 2),
        ("mps", 1),
        ("mps", 2),
    }
    assert all(r["throughput"] > 0 and r["p99_ms"] >= r["p50_ms"] > 0 for r in result["rows"])
    assert (tmp_path / "bench.png").stat().st_size > 5000


def test_console_script_runs():
    exe = Path(sys.executable).parent / "kube-accel-gpucheck"
    if not exe.exists():
        pytest.skip("project not installed (pip install -e .)")
    proc = subprocess.run([str(exe), "facts", "--json"], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode in (cli.EXIT_OK, cli.EXIT_SKIPPED), proc.stderr
    assert "facts" in json.loads(proc.stdout)
