"""Every custom module documents itself: DOCUMENTATION/EXAMPLES/RETURN parse, and the documented options are
exactly the module's argument spec (checked with ansible-doc's own parser)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

MODULES = sorted((Path(__file__).resolve().parents[2] / "plugins" / "modules").glob("*.py"))


def docs(path: Path) -> dict[str, str]:
    tree = ast.parse(path.read_text())
    return {n.targets[0].id: n.value.value for n in tree.body
            if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)
            and n.targets[0].id in ("DOCUMENTATION", "EXAMPLES", "RETURN")}


@pytest.mark.parametrize("path", MODULES, ids=[p.stem for p in MODULES])
def test_module_documents_itself(path):
    blocks = docs(path)
    assert set(blocks) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}
    doc = yaml.safe_load(blocks["DOCUMENTATION"])
    assert doc["module"] == path.stem
    assert doc["attributes"]["check_mode"]["support"] in ("full", "partial")
    yaml.safe_load(blocks["EXAMPLES"])
    yaml.safe_load(blocks["RETURN"])
    # Every option in the argument spec is documented, and nothing else.
    source = path.read_text()
    spec_names = set(re.findall(r'^\s+"(\w+)": \{"type"', source, re.M)) | set(
        re.findall(r"^\s+(\w+)=dict\(", source, re.M))
    # Shared option sets spliced in from module_utils.
    from ansible.module_utils.accel_kube import KUBE_ARGUMENT_SPEC  # noqa: PLC0415
    from ansible.module_utils.accel_lease import RUN_LOCK_ARGUMENT_SPEC  # noqa: PLC0415

    shared_specs = {"KUBE_ARGUMENT_SPEC": KUBE_ARGUMENT_SPEC, "RUN_LOCK_ARGUMENT_SPEC": RUN_LOCK_ARGUMENT_SPEC}
    for name, shared in shared_specs.items():
        if f"**{name}" in source:
            spec_names |= set(shared)
    assert spec_names, f"{path.stem}: argument spec not found"
    assert spec_names == set(doc["options"]), path.stem
