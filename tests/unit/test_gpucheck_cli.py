"""kube-accel-gpucheck's command line without a GPU: argument handling, skip behaviour and exit status, and
the offline facts comparison (saved XML + facts JSON). Inputs are the composed fixtures of
test_gpucheck_facts.py; the fake NVML objects stand in for a driver that is absent here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kube_accel.gpucheck import NO_GPU_REASON, cli, facts, smi

DATA = Path(__file__).resolve().parents[1] / "data" / "gpucheck"
XML = DATA / "nvidia-smi-q-x.composed.xml"
H100 = "GPU-11111111-2222-3333-4444-555555555555"
A100 = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
FACTS = {
    "count": 2,
    "driver_version": "570.172.08",
    "cuda_driver_version": 12080,
    "gpus": [
        {
            "index": 0,
            "uuid": H100,
            "name": "NVIDIA H100 80GB HBM3",
            "pci_bus_id": "00000000:18:00.0",
            "memory_total_mib": 81559,
            "compute_capability": "9.0",
            "mig_mode_current": "Disabled",
            "compute_mode": "Default",
            "persistence_mode": "Enabled",
        },
        {
            "index": 1,
            "uuid": A100,
            "name": "NVIDIA A100-SXM4-80GB",
            "pci_bus_id": "00000000:AF:00.0",
            "memory_total_mib": 81920,
            "compute_capability": "8.0",
            "mig_mode_current": "Enabled",
            "compute_mode": "Exclusive_Process",
            "persistence_mode": "Disabled",
        },
    ],
}
NO_SMI = "/nonexistent/nvidia-smi"


def test_client_counts_parse_sort_and_deduplicate():
    assert cli.parse_client_counts("8,1,2,4,2") == [1, 2, 4, 8]
    for bad in ("", "0,2", "a,b", "-1"):
        with pytest.raises(Exception, match="client counts|comma-separated"):
            cli.parse_client_counts(bad)


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["frobnicate"],
        ["mps", "--thread-percentage", "0"],
        ["mps", "--thread-percentage", "101"],
        ["bench", "--clients", "0"],
        ["bench", "--batch", "0"],
        ["bench", "--duration", "0"],
        ["bench", "--warmup", "-1"],
        ["all", "--device", "-1"],
        ["facts", "--thread-percentage", "5"],
    ],
)
def test_bad_arguments_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == cli.EXIT_USAGE
    assert "usage: kube-accel-gpucheck" in capsys.readouterr().err


def test_defaults_follow_the_issue():
    args = cli.build_parser().parse_args(["all"])
    assert args.clients == [1, 2, 4, 8]
    assert args.device == 0 and args.lib == "auto"
    assert 1 <= args.thread_percentage < 100 and args.mem_limit_mib >= 1


def test_without_a_gpu_everything_is_skipped_with_the_reason(tmp_path, capsys):
    rc = cli.main(["all", "--nvidia-smi", NO_SMI, "--out", str(tmp_path)])
    out = capsys.readouterr()
    assert rc == cli.EXIT_SKIPPED
    assert out.out.count(f"Skipped: {NO_GPU_REASON}") == 3
    assert f"mps: skipped: {NO_GPU_REASON}" in out.err
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["gpu_present"] is False and saved["bench"] == {"skipped": f"{NO_GPU_REASON} ({NO_SMI} not found)"}
    assert not (tmp_path / "bench.png").exists()


def _facts_file(tmp_path, data) -> Path:
    path = tmp_path / "facts.json"
    path.write_text(json.dumps({"changed": False, "ansible_facts": {"nvidia_gpus": data}}))
    return path


def test_offline_facts_comparison_passes(tmp_path, capsys):
    argv = ["facts", "--nvidia-smi", NO_SMI, "--smi-xml", str(XML), "--facts-json", str(_facts_file(tmp_path, FACTS))]
    assert cli.main([*argv, "--json"]) == cli.EXIT_OK
    result = json.loads(capsys.readouterr().out)
    assert result["facts"]["ok"] and result["facts"]["failures"] == 0
    assert result["environment"]["driver_version"] == "570.172.08"
    assert result["environment"]["gpu"] == "NVIDIA H100 80GB HBM3"


def test_offline_facts_comparison_fails_on_a_mismatch(tmp_path, capsys):
    wrong = json.loads(json.dumps(FACTS))
    wrong["gpus"][1]["compute_mode"] = "Default"
    argv = ["facts", "--nvidia-smi", NO_SMI, "--smi-xml", str(XML), "--facts-json", str(_facts_file(tmp_path, wrong))]
    assert cli.main(argv) == cli.EXIT_FAIL
    assert "| 1 | compute_mode | default | exclusive_process | mismatch |" in capsys.readouterr().out


def test_facts_come_from_the_collections_facts_code(tmp_path, capsys):
    # No --facts-json: the facts module's own gathering runs. This machine has no NVML, so the module reports no GPU
    # and the saved XML's two GPUs are missing from the facts: a failure that names the module as its source.
    rc = cli.main(["facts", "--nvidia-smi", NO_SMI, "--smi-xml", str(XML), "--json"])
    result = json.loads(capsys.readouterr().out)["facts"]
    assert rc == cli.EXIT_FAIL
    assert result["source"] == "kube_accel.gpu host.gpu_facts.gather_facts()"
    assert {f["status"] for f in result["findings"] if f["field"] == "gpu"} == {"gpu_missing"}


def test_client_env_selects_the_gpu_by_uuid():
    data = smi.parse_smi_xml(XML.read_text())
    assert cli.client_env(1, data) == {"CUDA_VISIBLE_DEVICES": A100, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert cli.client_env(0, None)["CUDA_VISIBLE_DEVICES"] == "0"


@pytest.mark.parametrize(
    ("sections", "expected"),
    [
        ({"facts": {"skipped": "x"}, "mps": {"skipped": "x"}}, cli.EXIT_SKIPPED),
        ({"facts": {"ok": True}, "mps": {"skipped": "x"}}, cli.EXIT_OK),
        ({"facts": {"ok": True}, "bench": {"ok": False}}, cli.EXIT_FAIL),
    ],
)
def test_exit_status(sections, expected):
    assert cli.exit_status(sections) == expected


class FakeNvml:
    """Stands in for pynvml: only the read-only calls gpu_presence makes."""

    def __init__(self, count=1, fail=None):
        self.count, self.fail, self.calls = count, fail, []

    def nvmlInit(self):
        self.calls.append("init")
        if self.fail:
            raise RuntimeError(self.fail)

    def nvmlDeviceGetCount(self):
        return self.count

    def nvmlShutdown(self):
        self.calls.append("shutdown")


@pytest.fixture
def smi_on_path(tmp_path):
    exe = tmp_path / "nvidia-smi"
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(0o755)
    return str(exe)


def test_gpu_presence(smi_on_path):
    assert smi.gpu_presence(NO_SMI) == (False, f"{NO_GPU_REASON} ({NO_SMI} not found)")
    ok, why = smi.gpu_presence(smi_on_path, FakeNvml(fail="NVML_ERROR_DRIVER_NOT_LOADED"))
    assert not ok and why == f"{NO_GPU_REASON} (NVML init failed: NVML_ERROR_DRIVER_NOT_LOADED)"
    nvml = FakeNvml(count=0)
    assert smi.gpu_presence(smi_on_path, nvml) == (False, f"{NO_GPU_REASON} (NVML reports 0 devices)")
    assert nvml.calls == ["init", "shutdown"]
    assert smi.gpu_presence(smi_on_path, FakeNvml(count=2)) == (True, "2 GPU(s)")


def test_console_script_is_declared():
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert 'kube-accel-gpucheck = "kube_accel.gpucheck.cli:main"' in pyproject


def test_a_failing_section_is_reported_and_does_not_hide_the_others(monkeypatch, capsys):
    def nvml_gone():
        raise OSError("NVML went away")

    # The edge: NVML failing under the facts code.
    monkeypatch.setattr(facts.accel_gpu_facts, "gather_facts", nvml_gone)
    rc = cli.main(["all", "--nvidia-smi", NO_SMI, "--smi-xml", str(XML), "--json"])
    result = json.loads(capsys.readouterr().out)
    assert rc == cli.EXIT_FAIL
    assert result["facts"] == {"ok": False, "error": "OSError: NVML went away"}
    assert result["mps"]["skipped"].startswith(NO_GPU_REASON)


def test_unreadable_nvidia_smi_output_fails_the_facts_section(tmp_path, capsys):
    broken = tmp_path / "broken.xml"
    broken.write_text("<nvidia_smi_log><gpu>")
    rc = cli.main(["facts", "--nvidia-smi", NO_SMI, "--smi-xml", str(broken), "--facts-json", str(XML)])
    out = capsys.readouterr().out
    assert rc == cli.EXIT_FAIL
    assert "**FAIL**: could not run: nvidia-smi -q -x unusable: ParseError" in out


def test_main_restores_the_callers_signal_handlers(capsys):
    import signal

    before = signal.getsignal(signal.SIGTERM)
    cli.main(["mps", "--nvidia-smi", NO_SMI])
    capsys.readouterr()
    assert signal.getsignal(signal.SIGTERM) is before
