"""scripts/gpu_e2e/cuda-probe.c against fake_libcuda.c, a stand-in libcuda.so.1 for machines without a GPU.

Both are built with gcc into tmp_path; the probe finds the fake through LD_LIBRARY_PATH. The fake is strict where the
driver is (no memory calls without a current context, no double release) and reports leaks on stderr. The PTX kernel
is checked textually here, and by ptxas where one is on PATH.
"""

from __future__ import annotations

import ctypes.util
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE_SRC = ROOT / "scripts/gpu_e2e/cuda-probe.c"
FAKE_SRC = Path(__file__).resolve().parent / "fake_libcuda.c"
CFLAGS = ["-O2", "-Wall", "-Wextra", "-Werror"]
UUID_RE = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
ENV_NAMES = (
    "NVIDIA_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_MPS_PIPE_DIRECTORY",
    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
    "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
)


def extract_ptx(source: str | None = None) -> str:
    """The PTX text of cuda-probe.c's kPtx: its adjacent C string literals, unescaped."""
    source = PROBE_SRC.read_text() if source is None else source
    match = re.search(r"static const char kPtx\[\] =(.*?);\n", source, re.S)
    assert match, "kPtx not found in cuda-probe.c"
    escapes = {"n": "\n", "t": "\t", "\\": "\\", '"': '"'}
    literals = re.findall(r'"((?:[^"\\]|\\.)*)"', match.group(1))
    return "".join(re.sub(r"\\(.)", lambda m: escapes[m.group(1)], lit) for lit in literals)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not installed: cannot build cuda-probe.c and the fake libcuda.so.1")
    out = tmp_path_factory.mktemp("cuda_probe")
    (out / "lib").mkdir()
    (out / "empty").mkdir()
    probe = out / "cuda-probe"
    subprocess.run([gcc, *CFLAGS, "-o", str(probe), str(PROBE_SRC), "-ldl"], check=True, capture_output=True)
    fake = out / "lib" / "libcuda.so.1"
    subprocess.run([gcc, *CFLAGS, "-shared", "-fPIC", "-o", str(fake), str(FAKE_SRC)], check=True, capture_output=True)
    return {"probe": probe, "lib": out / "lib", "empty": out / "empty"}


def run_probe(
    built: dict[str, Path], *args: str, lib: Path | None = None, **env: str
) -> tuple[int, dict, subprocess.CompletedProcess]:
    full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LD_LIBRARY_PATH": str(lib or built["lib"]), **env}
    cmd = [str(built["probe"]), *args]
    proc = subprocess.run(cmd, check=False, env=full_env, capture_output=True, text=True, timeout=60)
    assert "fake libcuda: leaked" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout), proc


def test_reports_the_fake_device(built: dict[str, Path]) -> None:
    rc, out, _ = run_probe(built)
    assert rc == 0, out
    assert out["ok"] is True
    assert out["error"] is None
    assert out["driver_version"] == 12080
    assert out["device_count"] == 1
    assert out["allocs"] == []
    assert out["env"] == dict.fromkeys(ENV_NAMES)
    assert isinstance(out["hostname"], str)
    assert out["hostname"]
    (dev,) = out["devices"]
    assert UUID_RE.match(dev["uuid"])
    assert dev["uuid"] == "GPU-1234abcd-ef01-2345-6789-abcdeffedc00"
    assert dev["index"] == 0
    assert dev["name"] == "NVIDIA H100 80GB HBM3"
    assert dev["compute_capability"] == "9.0"
    assert dev["sm_count_attr"] == 132
    assert dev["blocks"] == 8 * 132
    assert dev["sms_used"] == 132
    assert dev["max_smid"] == 131
    assert dev["blocks_unwritten"] == 0
    assert dev["total_mib"] == dev["ctx_total_mib"] == dev["free_mib"] == 81559
    assert dev["kernel_ms"] >= 0
    assert dev["driver_version"] == 12080
    assert dev["ok"] is True
    assert dev["error"] is None


def test_limits_show_in_context_view_and_allocations(built: dict[str, Path]) -> None:
    rc, out, _ = run_probe(
        built,
        "--alloc-mib",
        "1024,9000",
        "--blocks=64",
        "--spin-cycles",
        "10",
        FAKE_CUDA_SM_COUNT="16",
        FAKE_CUDA_LIMIT_MIB="4096",
    )
    assert rc == 0, out
    (dev,) = out["devices"]
    assert (dev["sm_count_attr"], dev["blocks"], dev["sms_used"], dev["max_smid"]) == (16, 64, 16, 15)
    assert dev["total_mib"] == 81559
    assert dev["ctx_total_mib"] == dev["free_mib"] == 4096
    assert out["allocs"] == [
        {"mib": 1024, "ok": True, "error": None, "stage": None},
        {"mib": 9000, "ok": False, "error": "CUDA_ERROR_OUT_OF_MEMORY", "stage": "alloc"},
    ]


def test_fewer_sms_used_than_the_device_has(built: dict[str, Path]) -> None:
    rc, out, _ = run_probe(built, FAKE_CUDA_ACTIVE_SMS="33")
    assert rc == 0, out
    (dev,) = out["devices"]
    assert (dev["sm_count_attr"], dev["sms_used"], dev["max_smid"]) == (132, 33, 32)


def test_allocation_that_fails_on_first_use(built: dict[str, Path]) -> None:
    rc, out, _ = run_probe(built, "--alloc-mib", "256,1024", FAKE_CUDA_TOUCH_LIMIT_MIB="512")
    assert rc == 0, out
    assert out["allocs"] == [
        {"mib": 256, "ok": True, "error": None, "stage": None},
        {"mib": 1024, "ok": False, "error": "CUDA_ERROR_OUT_OF_MEMORY", "stage": "memset"},
    ]


def test_env_echo_and_json_escaping(built: dict[str, Path]) -> None:
    env = {
        "NVIDIA_VISIBLE_DEVICES": "GPU-1234abcd-ef01-2345-6789-abcdeffedc00",
        "CUDA_VISIBLE_DEVICES": "0",
        "CUDA_MPS_PIPE_DIRECTORY": "/run/nvidia/mps",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": '0=8G "quoted" \\ tab\there \u00e9 \udcff',
        "FAKE_CUDA_NAME": 'Fake "GPU" \\ \x01',
    }
    rc, out, _ = run_probe(built, **env)
    assert rc == 0, out
    expected = {name: env[name] for name in ENV_NAMES}
    # A byte that is not UTF-8 (here 0xff, passed through the surrogate escape) comes back as U+FFFD.
    expected["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = '0=8G "quoted" \\ tab\there \u00e9 \ufffd'
    assert out["env"] == expected
    assert out["devices"][0]["name"] == 'Fake "GPU" \\ \x01'


def test_two_devices(built: dict[str, Path]) -> None:
    rc, out, _ = run_probe(built, FAKE_CUDA_DEVICES="2")
    assert rc == 0, out
    assert out["device_count"] == 2
    assert [d["index"] for d in out["devices"]] == [0, 1]
    assert len({d["uuid"] for d in out["devices"]}) == 2
    assert all(d["ok"] and d["sms_used"] == 132 for d in out["devices"])


def test_no_device(built: dict[str, Path]) -> None:
    rc, out, _ = run_probe(built, FAKE_CUDA_DEVICES="0")
    assert rc == 1
    assert out["ok"] is False
    assert "CUDA_ERROR_NO_DEVICE" in out["error"]
    assert out["error"].startswith("cuInit:")
    assert (out["device_count"], out["devices"]) == (0, [])
    assert out["driver_version"] == 12080


def test_no_libcuda(built: dict[str, Path]) -> None:
    if ctypes.util.find_library("cuda"):
        pytest.skip("a libcuda is installed on this machine: the probe would find it")
    rc, out, _ = run_probe(built, lib=built["empty"])
    assert rc == 1
    assert out["ok"] is False
    assert out["error"].startswith("dlopen libcuda.so.1"), out["error"]
    assert (out["driver_version"], out["device_count"], out["devices"]) == (None, 0, [])


@pytest.mark.parametrize("args", [["--blocks", "x"], ["--blocks", "0"], ["--alloc-mib", "1,,x"], ["--bogus"]])
def test_bad_options(built: dict[str, Path], args: list[str]) -> None:
    rc, out, _ = run_probe(built, *args)
    assert rc == 1
    assert out["ok"] is False
    assert args[0] in out["error"]


def test_hold_keeps_running_after_printing(built: dict[str, Path]) -> None:
    start = time.monotonic()
    rc, out, _ = run_probe(built, "--hold-s", "1", "--spin-cycles", "0")
    assert rc == 0, out
    assert time.monotonic() - start >= 1.0


def test_ptx_is_well_formed_textually() -> None:
    ptx = extract_ptx()
    lines = [line.strip() for line in ptx.splitlines() if line.strip()]
    assert lines[:3] == [".version 7.0", ".target sm_75", ".address_size 64"]
    assert ptx.count(".visible .entry smid_kernel(") == 1
    assert ptx.count("{") == ptx.count("}") == 1
    params = re.findall(r"\.param \.u64 (\w+)", ptx)
    assert params == ["smid_kernel_param_0", "smid_kernel_param_1"]
    body = ptx[ptx.index("{") + 1 : ptx.rindex("}")]
    declared = {name: int(count) for name, count in re.findall(r"\.reg \.\w+ %(\w+?)<(\d+)>;", body)}
    labels = set(re.findall(r"^\s*(\$?\w+):\s*$", body, re.M))
    specials = re.compile(r"%(?:tid|ntid|ctaid|nctaid|smid|nsmid|laneid|warpid|clock64|clock)\b(?:\.[xyz])?")
    for line in (specials.sub("", line.strip()) for line in body.splitlines()):
        if not line or line.endswith(":"):
            continue
        assert line.endswith(";"), f"statement without ';': {line!r}"
        for name, index in re.findall(r"%([a-z]+)(\d+)\b", line):
            assert name in declared, f"undeclared register %{name}{index}"
            assert int(index) < declared[name], f"%{name}{index} beyond %{name}<{declared[name]}>"
        for target in re.findall(r"\bbra(?:\.uni)? (\S+);", line):
            assert target in labels, f"branch to undefined label {target}"
        for param in re.findall(r"ld\.param\.u64 %\w+, \[(\w+)\];", line):
            assert param in params
    for special in ("%tid.x", "%ctaid.x", "%smid", "%clock64"):
        assert special in body
    assert "st.global.u32" in body
    assert "ret;" in body


def test_ptxas_accepts_the_kernel(tmp_path: Path) -> None:
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        pytest.skip("ptxas (CUDA toolkit) is not on PATH")
    src = tmp_path / "smid_kernel.ptx"
    src.write_text(extract_ptx())
    for arch in ("sm_75", "sm_90"):
        cmd = [ptxas, f"-arch={arch}", str(src), "-o", str(tmp_path / f"{arch}.cubin")]
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
