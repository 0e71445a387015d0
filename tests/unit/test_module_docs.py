"""What ansible-test sanity does not check in the modules' docs: their EXAMPLES call the module by its FQCN with
documented options only.

Docs against argument specs, return docs, attributes, markup and licences are ansible-test's validate-modules
(`scripts/sanity.sh`, a stage of `make test`); this file only adds the examples. The docs are what
``ansible-doc --json`` (ansible-core's own loader, with doc fragments) returns for the collection.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
MODULES = sorted((REPO / "plugins" / "modules").glob("*.py"))
GALAXY = yaml.safe_load((REPO / "galaxy.yml").read_text())
FQCN = f"{GALAXY['namespace']}.{GALAXY['name']}"


@pytest.fixture(scope="module")
def ansible_doc() -> dict[str, dict]:
    """``ansible-doc --json`` for every module of the collection at once (ansible.cfg's collections path)."""
    argv = [str(Path(sys.executable).parent / "ansible-doc"), "-t", "module", "--json",
            *(f"{FQCN}.{p.stem}" for p in MODULES)]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False, timeout=120,
                          env={**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("path", MODULES, ids=[p.stem for p in MODULES])
def test_examples_call_the_module_by_fqcn_with_documented_options(ansible_doc, path):
    """EXAMPLES is YAML (a list of tasks); every task that calls this module uses its FQCN and documented options."""
    entry = ansible_doc[f"{FQCN}.{path.stem}"]
    tasks = yaml.safe_load(entry["examples"])
    assert isinstance(tasks, list) and tasks, "EXAMPLES is not a list of tasks"
    assert not [t.get("name") for t in tasks if path.stem in t], "an example calls the module by its short name"
    options = set()
    for name, option in (entry["doc"].get("options") or {}).items():
        options |= {name, *option.get("aliases", [])}
    calls = [t for t in tasks if f"{FQCN}.{path.stem}" in t]
    assert calls, f"no example task calls {FQCN}.{path.stem}"
    for task in calls:
        args = task[f"{FQCN}.{path.stem}"] or {}
        assert isinstance(args, dict), f"{task.get('name')}: free-form arguments"
        assert set(args) <= options, f"{task.get('name')}: undocumented {sorted(set(args) - options)}"
