"""Part (a) without a GPU: parsing `nvidia-smi -q -x` and comparing it with the facts module's output.

The XML fixture tests/data/gpucheck/nvidia-smi-q-x.composed.xml is COMPOSED from the published XML layout,
not recorded on a machine (none was available); the facts dicts below are composed in the facts module's
field names, with the spellings NVML gives (integers for compute mode and CUDA version, bools).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from kube_accel.gpucheck import facts, smi

XML = (Path(__file__).resolve().parents[1] / "data" / "gpucheck" / "nvidia-smi-q-x.composed.xml").read_text()

H100 = "GPU-11111111-2222-3333-4444-555555555555"
A100 = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"

# What the NVML-based facts module would report for the same host (composed, NVML spellings).
FACTS = {
    "count": 2,
    "driver_version": "570.172.08",
    "cuda_driver_version": 12080,
    "gpus": [
        {
            "index": 0,
            "uuid": H100,
            "name": "NVIDIA H100 80GB HBM3",
            "pci_bus_id": "0000:18:00.0",
            "memory_total_mib": 81559,
            "compute_capability": "9.0",
            "mig_mode_current": False,
            "compute_mode": 0,
            "persistence_mode": True,
        },
        {
            "index": 1,
            "uuid": A100,
            "name": "NVIDIA A100-SXM4-80GB",
            "pci_bus_id": "00000000:AF:00.0",
            "memory_total_mib": 81920,
            "compute_capability": [8, 0],
            "mig_mode_current": "Enabled",
            "compute_mode": "EXCLUSIVE_PROCESS",
            "persistence_mode": "Disabled",
        },
    ],
}


def test_parse_smi_xml_reads_host_and_gpu_fields():
    parsed = smi.parse_smi_xml(XML)
    assert parsed["count"] == 2
    assert parsed["driver_version"] == "570.172.08"
    assert parsed["cuda_driver_version"] == "12.8"
    h100, a100 = parsed["gpus"]
    assert h100 == {
        "index": 0,
        "uuid": H100,
        "name": "NVIDIA H100 80GB HBM3",
        "pci_bus_id": "00000000:18:00.0",
        "memory_total_mib": 81559,
        "compute_capability": None,
        "mig_mode_current": "disabled",
        "compute_mode": "default",
        "persistence_mode": "enabled",
    }
    # Index is the position (NVML order), not minor_number (0 here for the second GPU).
    assert a100["index"] == 1
    assert a100["pci_bus_id"] == "00000000:af:00.0"
    assert (a100["mig_mode_current"], a100["compute_mode"], a100["persistence_mode"]) == (
        "enabled",
        "exclusive_process",
        "disabled",
    )


def test_parse_smi_xml_reads_compute_capability_when_the_driver_reports_it():
    xml = XML.replace(
        "<compute_mode>Default</compute_mode>", "<compute_mode>Default</compute_mode><compute_cap>9.0</compute_cap>"
    )
    assert smi.parse_smi_xml(xml)["gpus"][0]["compute_capability"] == "9.0"


def test_parse_smi_xml_rejects_other_xml():
    with pytest.raises(ValueError, match="not nvidia-smi XML"):
        smi.parse_smi_xml("<html/>")


@pytest.mark.parametrize(
    ("norm", "value", "expected"),
    [
        (smi.norm_cuda_version, 12080, "12.8"),
        (smi.norm_cuda_version, 13000, "13.0"),
        (smi.norm_cuda_version, "12.8", "12.8"),
        (smi.norm_cuda_version, "12040", "12.4"),
        (smi.norm_bus_id, "0000:AF:00.0", "00000000:af:00.0"),
        (smi.norm_bus_id, "00000001:03:1f.7", "00000001:03:1f.7"),
        (smi.norm_compute_mode, 3, "exclusive_process"),
        (smi.norm_compute_mode, "NVML_COMPUTEMODE_PROHIBITED", "prohibited"),
        (smi.norm_compute_mode, "Exclusive Process", "exclusive_process"),
        (smi.norm_mode, True, "enabled"),
        (smi.norm_mode, 0, "disabled"),
        (smi.norm_mode, "N/A", "n/a"),
        (smi.norm_compute_capability, {"major": 9, "minor": 0}, "9.0"),
        (smi.norm_compute_capability, (7, 5), "7.5"),
        (smi.norm_int, "81559 MiB", 81559),
    ],
)
def test_normalisers_make_nvml_and_smi_spellings_equal(norm, value, expected):
    assert norm(value) == expected


def test_matching_facts_compare_clean():
    result = facts.compare_facts(FACTS, smi.parse_smi_xml(XML))
    assert result["ok"], [f for f in result["findings"] if f["status"] != "match"]
    statuses = {(f["gpu"], f["field"]): f["status"] for f in result["findings"]}
    # This XML has no compute capability: reported as such, not counted as a failure.
    assert statuses[(0, "compute_capability")] == "not_in_smi"
    assert statuses[(None, "cuda_driver_version")] == "match"
    assert sum(s == "match" for s in statuses.values()) == 3 + 2 * 7


def test_mismatches_and_missing_fields_are_reported():
    wrong = copy.deepcopy(FACTS)
    wrong["driver_version"] = "570.86.15"
    wrong["gpus"][0]["memory_total_mib"] = 81559 + 329  # e.g. reserved memory counted on one side only
    wrong["gpus"][1]["mig_mode_current"] = False
    del wrong["gpus"][1]["persistence_mode"]
    result = facts.compare_facts(wrong, smi.parse_smi_xml(XML))
    bad = {
        (f["gpu"], f["field"]): (f["status"], f["facts"], f["smi"])
        for f in result["findings"]
        if f["status"] not in ("match", "not_in_smi")
    }
    assert bad == {
        (None, "driver_version"): ("mismatch", "570.86.15", "570.172.08"),
        (0, "memory_total_mib"): ("mismatch", 81888, 81559),
        (1, "mig_mode_current"): ("mismatch", "disabled", "enabled"),
        (1, "persistence_mode"): ("missing_in_facts", None, "disabled"),
    }
    assert not result["ok"] and result["failures"] == 4
    # A tolerance absorbs the memory difference only.
    assert facts.compare_facts(wrong, smi.parse_smi_xml(XML), mem_tolerance_mib=329)["failures"] == 3


def test_gpus_are_paired_by_uuid_so_swapped_indexes_show_as_index_mismatches():
    swapped = copy.deepcopy(FACTS)
    swapped["gpus"][0]["index"], swapped["gpus"][1]["index"] = 1, 0
    swapped["gpus"].reverse()
    result = facts.compare_facts(swapped, smi.parse_smi_xml(XML))
    bad = sorted((f["gpu"], f["field"]) for f in result["findings"] if f["status"] == "mismatch")
    assert bad == [(0, "index"), (1, "index")]


def test_gpu_on_one_side_only_fails():
    one = copy.deepcopy(FACTS)
    one["count"] = 1
    one["gpus"] = one["gpus"][:1]
    result = facts.compare_facts(one, smi.parse_smi_xml(XML))
    missing = [f for f in result["findings"] if f["status"] == "gpu_missing"]
    assert [(m["gpu"], m["smi"]) for m in missing] == [(A100, A100)]
    assert not result["ok"]


def test_unwrap_accepts_module_ansible_and_bare_shapes(tmp_path):
    inner = {"count": 0, "gpus": []}
    assert facts.unwrap_facts({"nvidia_gpus": inner}) == inner
    assert facts.unwrap_facts({"changed": False, "ansible_facts": {"nvidia_gpus": inner}}) == inner
    assert facts.unwrap_facts(inner) == inner
    (tmp_path / "f.json").write_text(json.dumps({"ansible_facts": {"nvidia_gpus": inner}}))
    assert facts.load_facts_json(tmp_path / "f.json") == inner
    with pytest.raises(ValueError, match="no 'gpus'"):
        facts.unwrap_facts({"something": 1})


def test_not_supported_settings_match_across_spellings():
    smi_side = {
        "count": 0,
        "gpus": [{"uuid": "GPU-x", "index": 0, "mig_mode_current": "n/a", "persistence_mode": "n/a"}],
    }
    facts_side = {
        "count": 0,
        "gpus": [{"uuid": "GPU-x", "index": 0, "mig_mode_current": False, "persistence_mode": None}],
    }
    statuses = {f["field"]: f["status"] for f in facts.compare_facts(facts_side, smi_side)["findings"]}
    assert statuses["mig_mode_current"] == "match" and statuses["persistence_mode"] == "match"
    # ...but MIG enabled in the facts against N/A in nvidia-smi is a real disagreement.
    facts_side["gpus"][0]["mig_mode_current"] = True
    statuses = {f["field"]: f["status"] for f in facts.compare_facts(facts_side, smi_side)["findings"]}
    assert statuses["mig_mode_current"] == "mismatch"


def _smi_xml_for_snapshot(snapshot: dict) -> str:
    """nvidia-smi's spelling of a snapshot's values (composed: what nvidia-smi prints for such settings)."""
    nvml = snapshot["nvml"]
    cuda = nvml["cuda_driver_version"]
    gpus = []
    for dev in nvml["devices"]:
        mig = dev.get("mig_mode")
        mig_text = "N/A" if mig is None else ("Enabled" if mig[0] else "Disabled")
        mode = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}[dev["compute_mode"]]
        gpus.append(
            f"<gpu id='{dev['pci_bus_id']}'><product_name>{dev['name']}</product_name>"
            f"<persistence_mode>{'Enabled' if dev['persistence_mode'] else 'Disabled'}</persistence_mode>"
            f"<mig_mode><current_mig>{mig_text}</current_mig></mig_mode><uuid>{dev['uuid']}</uuid>"
            f"<pci><pci_bus_id>{dev['pci_bus_id']}</pci_bus_id></pci>"
            f"<fb_memory_usage><total>{dev['memory_total_bytes'] // 2**20} MiB</total></fb_memory_usage>"
            f"<compute_mode>{mode}</compute_mode></gpu>"
        )
    return (
        f"<nvidia_smi_log><driver_version>{nvml['driver_version']}</driver_version>"
        f"<cuda_version>{cuda // 1000}.{cuda % 1000 // 10}</cuda_version>"
        f"<attached_gpus>{len(gpus)}</attached_gpus>{''.join(gpus)}</nvidia_smi_log>"
    )


@pytest.mark.parametrize("snapshot", ["h100-80gb", "a100-80gb-mig", "t4", "dual-socket-a100x8"])
def test_real_facts_module_output_compares_clean_with_nvidia_smi_spelling(snapshot):
    """Interop with plugins/module_utils/host/gpu_facts.py as it is: its real output format (bools,
    "Default", sysfs-style bus ids, "12.4") must compare equal to nvidia-smi's spelling of the same host.
    The snapshots in tests/data/nvml are the facts module's own (composed) device data."""
    module = facts.accel_gpu_facts
    path = Path(__file__).resolve().parents[1] / "data" / "nvml" / f"{snapshot}.json"
    source = module.RecordedSource.from_file(str(path))
    gathered = facts.unwrap_facts(module.gather(source))
    result = facts.compare_facts(gathered, smi.parse_smi_xml(_smi_xml_for_snapshot(json.loads(path.read_text()))))
    assert result["ok"], [f for f in result["findings"] if f["status"] not in ("match", "not_in_smi")]
    assert {f["field"] for f in result["findings"] if f["status"] == "not_in_smi"} == {"compute_capability"}
