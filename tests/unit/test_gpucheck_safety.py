"""gpucheck must never change GPU settings: no nvidia-smi argument that sets anything, no NVML setter.

The scan parses the package source (every string literal and every attribute/name) so a new call like
``subprocess.run(["nvidia-smi", "-c", "3"])`` or ``pynvml.nvmlDeviceSetComputeMode(...)`` fails this test.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

from kube_accel.gpucheck import smi  # noqa: E402

PACKAGE = SRC / "kube_accel" / "gpucheck"

# nvidia-smi options and subcommands that change state (compute mode, MIG, persistence, clocks, power,
# ECC, reset, time-slice policy, accounting, driver model, GPU operation mode).
FORBIDDEN_SMI = {
    "-c",
    "--compute-mode",
    "-mig",
    "--multi-instance-gpu",
    "mig",
    "-pm",
    "--persistence-mode",
    "-ac",
    "--applications-clocks",
    "-rac",
    "--reset-applications-clocks",
    "-lgc",
    "--lock-gpu-clocks",
    "-rgc",
    "--reset-gpu-clocks",
    "-lmc",
    "--lock-memory-clocks",
    "-rmc",
    "--reset-memory-clocks",
    "-pl",
    "--power-limit",
    "-e",
    "--ecc-config",
    "-p",
    "--reset-ecc-errors",
    "-r",
    "--gpu-reset",
    "compute-policy",
    "--set-timeslice",
    "-am",
    "--accounting-mode",
    "-caa",
    "--clear-accounted-apps",
    "-dm",
    "--driver-model",
    "-fdm",
    "--force-driver-model",
    "--gom",
    "-acp",
    "--applications-clocks-permission",
    "-cc",
    "--cuda-clocks",
    "clocks",
    "-ba",
    "--set-boost",
    "-sts",
}
NVML_SETTER = re.compile(r"^nvml\w*(Set|Reset|Clear|Create|Destroy|Modify)\w*$")


def scan_source(text: str, filename: str = "<src>") -> list[str]:
    problems = []
    for node in ast.walk(ast.parse(text, filename)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in FORBIDDEN_SMI:
            problems.append(f"{filename}:{node.lineno}: state-changing nvidia-smi argument {node.value!r}")
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
        for candidate in filter(
            None, [name, node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None]
        ):
            if NVML_SETTER.match(candidate):
                problems.append(f"{filename}:{node.lineno}: NVML setter {candidate}")
    return problems


def test_package_source_has_no_setting_changes():
    files = sorted(PACKAGE.glob("*.py"))
    assert len(files) >= 8, "package files not found"
    problems = [p for f in files for p in scan_source(f.read_text(), f.name)]
    assert problems == []


def test_scanner_catches_forbidden_calls():
    bad = (
        "import subprocess, pynvml\n"
        "subprocess.run(['nvidia-smi', '-i', '0', '-c', 'EXCLUSIVE_PROCESS'])\n"
        "subprocess.run(['nvidia-smi', '-mig', '1'])\n"
        "pynvml.nvmlDeviceSetComputeMode(h, 3)\n"
        "getattr(pynvml, 'nvmlDeviceSetMigMode')(h, 1)\n"
    )
    found = scan_source(bad)
    assert len(found) == 4, found
    assert any("'-c'" in p for p in found) and any("'-mig'" in p for p in found)
    assert sum("NVML setter" in p for p in found) == 2


def test_nvidia_smi_is_only_ever_queried():
    assert smi.smi_command("/usr/bin/nvidia-smi") == ["/usr/bin/nvidia-smi", "-q", "-x"]
    # The executable name appears as a literal only where it is run (smi.py) and as the CLI option default.
    holders = sorted(
        f.name
        for f in PACKAGE.glob("*.py")
        if any(isinstance(n, ast.Constant) and n.value == "nvidia-smi" for n in ast.walk(ast.parse(f.read_text())))
    )
    assert holders == ["cli.py", "smi.py"]
