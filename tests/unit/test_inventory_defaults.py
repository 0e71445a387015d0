"""Every inventory default is defined once, in accel_inventory.VARIABLES.

Roles still need ``accel_x | default(...)`` fallbacks in YAML (a collection ships no group_vars), so each fallback in
roles/ and ansible/ is read here and compared with the model: the same value where the model has a default, "no
value" ('' [] {} omit) where it has none. A role that falls back to its own value fails this test, naming the file.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import inventory as accel_inventory
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import pools as accel_pools

REPO = Path(__file__).resolve().parents[2]
FALLBACK = re.compile(r"\b(accel_[a-z0-9_]+)\s*\|\s*default\(\s*([^(),]*?)\s*(?:,\s*true\s*)?\)")
NO_VALUE = ("", [], {}, None)
# Required variables with a role fallback: a role run outside kube-accel's plays (no accel_mode) acts as on a
# whole-GPU pool. The preflight refuses a pool without accel_mode, so inside kube-accel the fallback never applies.
STANDALONE = {("accel_mode", "pgpu")}


def _literal(text: str):
    if text == "omit":
        return None
    return ast.literal_eval({"true": "True", "false": "False"}.get(text, text))


def fallbacks() -> list[tuple[str, str, object]]:
    found = []
    paths = [p for p in (REPO / "roles").rglob("*.yml") if "molecule" not in p.parts]
    paths += list((REPO / "ansible").rglob("*.yml")) + list((REPO / "roles").rglob("*.j2"))
    for path in sorted(paths):
        for name, raw in FALLBACK.findall(path.read_text()):
            found.append((str(path.relative_to(REPO)), name, _literal(raw)))
    return found


def test_the_scan_finds_the_fallbacks():
    # A regex that stopped matching would pass every case below without checking anything.
    names = {name for _path, name, _value in fallbacks()}
    assert {"accel_mig_owner", "accel_namespace", "accel_driver_branch", "accel_numa_policy"} <= names


@pytest.mark.parametrize(("path", "name", "value"), fallbacks(), ids=str)
def test_role_fallback_is_the_models_default(path, name, value):
    if name in accel_inventory.RUNTIME_FACTS:
        assert value in NO_VALUE, f"{path}: runtime fact {name} falls back to {value!r}"
        return
    assert name in accel_inventory.VARIABLES, f"{path}: {name} is not an inventory variable (accel_inventory)"
    entry = accel_inventory.VARIABLES[name]
    if "default" in entry:
        assert value == entry["default"], f"{path}: {name} falls back to {value!r}; the model's default is " \
                                          f"{entry['default']!r} (plugins/module_utils/plan/inventory.py)"
    else:
        assert value in NO_VALUE or (name, value) in STANDALONE, \
            f"{path}: {name} has no default in the model but falls back to {value!r}"


def test_pool_settings_fill_the_models_defaults_and_keep_the_inventory_names():
    settings = accel_pools.pool_settings({"accel_pool": "m", "accel_mode": "mps", "accel_mps_replicas": 8,
                                          "accel_numa_policy": "restricted", "ansible_host": "x"})
    assert settings["accel_mps_replicas"] == 8 and settings["accel_numa_policy"] == "restricted"
    assert settings["accel_mig_owner"] == accel_inventory.VARIABLES["accel_mig_owner"]["default"]
    assert "ansible_host" not in settings and all(k.startswith("accel_") for k in settings)
    # Required where they apply: no default to hide a missing value.
    assert "accel_mps_replicas" not in accel_pools.pool_settings({"accel_mode": "mps"})
    assert "accel_vgpu_backend" not in accel_pools.pool_settings({"accel_mode": "vgpu"})
