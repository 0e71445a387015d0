"""Part (a): compare the facts module's view of the GPUs with ``nvidia-smi -q -x``."""

from __future__ import annotations

import importlib
import importlib.util
import json
import pkgutil
import sys
from pathlib import Path

from .smi import GPU_FIELDS, HOST_FIELDS

FACTS_MODULE = "accel_gpu_facts"
# The facts module is written in parallel with this tool; these are the entry points it may expose, tried in
# order. Each is called without arguments (real NVML) and may return {"nvidia_gpus": {...}} or the inner dict.
FACTS_FUNCTIONS = ("gather_facts", "gather_gpu_facts", "gather_nvidia_gpus", "collect_facts", "get_facts")


def default_repo() -> Path:
    """Repository root of a source checkout: src/kube_accel/gpucheck/facts.py -> four levels up."""
    return Path(__file__).resolve().parents[3]


def _alias_module_utils(module_utils: Path) -> None:
    """Make ``ansible.module_utils.<name>`` resolve to the repo's sibling files, as Ansible does at run time.

    Siblings may import each other through those names, so aliasing repeats until no further file imports.
    The facts module itself is left out: it is loaded by path below.
    """
    try:
        import ansible.module_utils as amu
    except ImportError:  # the facts module may not need Ansible at all
        return
    pending = [
        info.name
        for info in pkgutil.iter_modules([str(module_utils)])
        if info.name != FACTS_MODULE and f"ansible.module_utils.{info.name}" not in sys.modules
    ]
    added = str(module_utils) not in sys.path
    if added:
        sys.path.insert(0, str(module_utils))
    try:
        progress = True
        while pending and progress:
            progress = False
            for name in list(pending):
                try:
                    mod = importlib.import_module(name)
                except Exception:  # may need a sibling not aliased yet; a real error shows when the facts load
                    continue
                sys.modules[f"ansible.module_utils.{name}"] = mod
                setattr(amu, name, mod)
                pending.remove(name)
                progress = True
    finally:
        if added:
            sys.path.remove(str(module_utils))


def load_facts_module(repo: Path | None = None):
    """Import plugins/module_utils/accel_gpu_facts.py by path; None when the checkout has no such file.

    Loaded under a private module name so that it is exactly this file, even when another copy of the facts
    module was imported earlier in the same interpreter (tests, an installed collection).
    """
    repo = repo or default_repo()
    module_utils = repo / "plugins" / "module_utils"
    path = module_utils / f"{FACTS_MODULE}.py"
    if not path.is_file():
        return None
    _alias_module_utils(module_utils)
    name = f"_kube_accel_gpucheck_{FACTS_MODULE}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and typing resolve names through sys.modules
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def facts_entry_point(module, name: str | None = None):
    names = (name,) if name else FACTS_FUNCTIONS
    for candidate in names:
        func = getattr(module, candidate, None)
        if callable(func):
            return func
    raise LookupError(f"{module.__name__} has none of the entry points {', '.join(names)}")


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
