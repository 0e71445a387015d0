"""Part (a): compare the facts module's view of the GPUs with ``nvidia-smi -q -x``."""

from __future__ import annotations

import json
from pathlib import Path

# The facts module's own code (module_utils of the kube_accel.gpu collection), as an ordinary package: a checkout's
# venv has .collections on its path (the Makefile's kube_accel_collection.pth); for an installed collection, put the
# directory that holds its ansible_collections/ on PYTHONPATH.
from ansible_collections.kube_accel.gpu.plugins.module_utils.host import gpu_facts as accel_gpu_facts

from .smi import GPU_FIELDS, HOST_FIELDS

SOURCE = "kube_accel.gpu host.gpu_facts.gather_facts()"


def gather_facts() -> dict:
    """This host's ``nvidia_gpus`` fact, gathered from real NVML exactly as the nvidia_gpu_facts module does."""
    return accel_gpu_facts.gather_facts()


def unwrap_facts(data: dict) -> dict:
    """Accept the module's return value, an ``ansible -m`` JSON result, or a bare ``nvidia_gpus`` dict."""
    for key in ("ansible_facts", "nvidia_gpus"):
        if isinstance(data, dict) and key in data:
            data = data[key]
    if isinstance(data, dict) and "nvidia_gpus" in data:
        data = data["nvidia_gpus"]
    if not isinstance(data, dict) or "gpus" not in data:
        raise ValueError("facts have no 'gpus' list (expected the nvidia_gpus fact)")
    return data


def load_facts_json(path: Path) -> dict:
    return unwrap_facts(json.loads(Path(path).read_text()))


def _finding(gpu, field, facts_value, smi_value, status) -> dict:
    return {"gpu": gpu, "field": field, "facts": facts_value, "smi": smi_value, "status": status}


# Values that mean the same thing on both sides although spelt differently: nvidia-smi prints N/A for a
# setting the GPU does not support, where the facts give None (persistence) or False (MIG: "not enabled").
EQUIVALENT = {
    "mig_mode_current": {("disabled", "n/a")},
    "persistence_mode": {(None, "n/a")},
    "compute_mode": {(None, "n/a")},
}


def _compare_value(gpu, field, facts_value, smi_value, norm, mem_tolerance_mib) -> dict:
    f = norm(facts_value)
    s = smi_value
    if (f, s) in EQUIVALENT.get(field, ()):
        return _finding(gpu, field, f, s, "match")
    if s is None:
        return _finding(gpu, field, f, s, "not_in_smi")
    if f is None:
        return _finding(gpu, field, f, s, "missing_in_facts")
    same = abs(f - s) <= mem_tolerance_mib if field == "memory_total_mib" else f == s
    return _finding(gpu, field, f, s, "match" if same else "mismatch")


def compare_facts(facts: dict, smi: dict, mem_tolerance_mib: int = 0) -> dict:
    """Field-by-field comparison. GPUs are paired by UUID so an index disagreement shows as a mismatch on
    ``index`` instead of as every field of two GPUs differing.

    Statuses: match, mismatch, missing_in_facts (a field the facts should carry), not_in_smi (this driver's
    XML does not report it; not a failure), gpu_missing (a GPU on one side only).
    """
    findings = []
    for field, norm in HOST_FIELDS.items():
        findings.append(_compare_value(None, field, facts.get(field), smi.get(field), norm, mem_tolerance_mib))
    facts_gpus = {norm_uuid: g for g in facts.get("gpus", []) if (norm_uuid := GPU_FIELDS["uuid"](g.get("uuid")))}
    smi_gpus = {g["uuid"]: g for g in smi.get("gpus", []) if g.get("uuid")}
    for uuid in sorted(set(facts_gpus) | set(smi_gpus)):
        if uuid not in facts_gpus or uuid not in smi_gpus:
            # The UUID shows on the side that has the GPU; the other side is None.
            in_facts = uuid in facts_gpus
            findings.append(
                _finding(uuid, "gpu", uuid if in_facts else None, None if in_facts else uuid, "gpu_missing")
            )
            continue
        fg, sg = facts_gpus[uuid], smi_gpus[uuid]
        for field, norm in GPU_FIELDS.items():
            if field == "uuid":
                continue
            findings.append(_compare_value(sg["index"], field, fg.get(field), sg.get(field), norm, mem_tolerance_mib))
    failed = [f for f in findings if f["status"] in ("mismatch", "missing_in_facts", "gpu_missing")]
    return {"ok": not failed, "failures": len(failed), "findings": findings}
