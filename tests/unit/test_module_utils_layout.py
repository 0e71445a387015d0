"""plugins/module_utils is grouped by concern into sub-packages whose imports go one way only (``LAYERS``).

Each file is parsed (never imported) and its imports of module_utils resolved to files (absolute, ``from <package>
import <module>`` and relative, as tests/molecule/scenario_reuse.py resolves them for Molecule's keys). The tests
fail on an import against the declared direction (naming the file and the import), on a file over ``MAX_LINES``, on a
Python file directly in module_utils, and when docs/architecture.md's section on the layout is not ``LAYERS``. To
rewrite that section after changing ``LAYERS`` or the packages:

    .venv/bin/python tests/unit/test_module_utils_layout.py --write
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "molecule"))  # as pytest's pythonpath has it, for --write

from scenario_reuse import module_utils_imports  # noqa: E402

UTILS = REPO / "plugins" / "module_utils"
DOC = REPO / "docs" / "architecture.md"
BEGIN, END = "<!-- module-utils-layout -->", "<!-- /module-utils-layout -->"
MAX_LINES = 500

# Sub-package -> (the sub-packages it may import besides itself, what it holds). Nothing else is allowed: host and
# cluster code never reach into the plan, the plan never imports Helm, and only verify sees every layer it checks.
LAYERS: dict[str, tuple[tuple[str, ...], str]] = {
    "common": ((), "product constants and PyYAML imported in one place; imports nothing of kube-accel's"),
    "plan": (("common",), "the inventory model, each value's type and grammar, the pool model, MIG geometry, driver "
                          "choices, Kubernetes names, the cluster settings and the plan rules"),
    "host": (("common",), "what runs on a GPU host: GPU and system facts, sysfs, the package database, host state, "
                          "the runtime's config, repository keys, values for host files"),
    "cluster": (("common",), "Kubernetes API operations of the modules: the client, node labels, drain, cordon "
                             "ownership (maintenance), the run lock (lease), Pod Security levels"),
    "helm": (("common", "plan"), "the helm client and release operations, and what the plan becomes in Helm: each "
                                 "chart's values, the GPU Operator's values, release ownership"),
    "verify": (("common", "plan", "helm"), "the verify play's checks: a pool's nodes against what the plan and its "
                                           "releases promised"),
}


def package_of(path: Path, utils: Path = UTILS) -> str:
    """The sub-package a module_utils file belongs to ("" for a file directly in module_utils)."""
    parts = path.relative_to(utils).parts
    return parts[0] if len(parts) > 1 else ""


def utils_files(utils: Path = UTILS) -> list[Path]:
    return sorted(utils.rglob("*.py"))


def direction_problems(utils: Path = UTILS, layers: dict = LAYERS) -> list[str]:
    """Every import of one sub-package by another that ``layers`` does not allow: "<file>: imports <file> (<why>)"."""
    problems = []
    for path in utils_files(utils):
        mine = package_of(path, utils)
        allowed = {mine, *layers.get(mine, ((), ""))[0]}
        for target in sorted(module_utils_imports(path, utils)):
            theirs = package_of(target, utils)
            if theirs not in allowed:
                problems.append(f"{path.relative_to(utils.parent.parent).as_posix()}: imports "
                                f"{target.relative_to(utils.parent.parent).as_posix()} ({mine or 'module_utils'} "
                                f"may import {', '.join(sorted(allowed - {mine})) or 'nothing'} besides itself)")
    return problems


def test_imports_go_one_way():
    problems = direction_problems()
    assert not problems, "imports against the layering of module_utils (LAYERS):\n" + "\n".join(problems)


def test_the_direction_check_sees_a_bad_import(tmp_path):
    utils = tmp_path / "plugins" / "module_utils"
    for name, text in {
        "common/__init__.py": "", "common/constants.py": "X = 1\n",
        "plan/__init__.py": "", "plan/pools.py": "from ..common.constants import X\n",
        "helm/__init__.py": "",
        "helm/client.py": "from ansible_collections.a.b.plugins.module_utils.plan import pools\n",
        "host/__init__.py": "", "host/facts.py": "import ansible_collections.a.b.plugins.module_utils.helm.client\n",
    }.items():
        (utils / name).parent.mkdir(parents=True, exist_ok=True)
        (utils / name).write_text(text)
    assert direction_problems(utils) == [
        "plugins/module_utils/host/facts.py: imports plugins/module_utils/helm/__init__.py (host may import common "
        "besides itself)",
        "plugins/module_utils/host/facts.py: imports plugins/module_utils/helm/client.py (host may import common "
        "besides itself)"]
    (utils / "plan" / "rules.py").write_text("from ..helm import client\n")
    assert [p.split(":")[0] for p in direction_problems(utils)].count("plugins/module_utils/plan/rules.py") == 2


def test_every_sub_package_is_declared_and_a_package():
    found = {p.name for p in UTILS.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert found == set(LAYERS)
    for name in LAYERS:
        # Ansible ships a module_utils sub-package in a module's payload only with its __init__.py; kept empty.
        init = UTILS / name / "__init__.py"
        assert init.is_file() and init.read_text() == "", init


def test_no_python_file_directly_in_module_utils():
    assert sorted(p.name for p in UTILS.glob("*.py")) == []


@pytest.mark.parametrize("path", utils_files(), ids=lambda p: p.relative_to(UTILS).as_posix())
def test_no_file_over_the_line_limit(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(REPO)}: {lines} lines (at most {MAX_LINES}: split it at a seam)"


def test_module_utils_parse():
    for path in utils_files():
        ast.parse(path.read_text(), str(path))


def section() -> str:
    """docs/architecture.md's table of the sub-packages, their files and what each may import."""
    rows = ["| Sub-package | Files | May import | Holds |", "|---|---|---|---|"]
    for name, (allowed, holds) in LAYERS.items():
        files = ", ".join(f"`{p.stem}`" for p in sorted((UTILS / name).glob("*.py")) if p.name != "__init__.py")
        rows.append(f"| `{name}/` | {files} | {', '.join(f'`{a}`' for a in allowed) or 'nothing'} | {holds} |")
    return "\n".join(rows)


def _doc_parts() -> tuple[str, str, str]:
    text = DOC.read_text()
    head, rest = text.split(BEGIN, 1)
    body, tail = rest.split(END, 1)
    return head, body, tail


def test_architecture_doc_shows_the_layout():
    _head, body, _tail = _doc_parts()
    assert body.strip() == section(), ("docs/architecture.md's module_utils layout is out of date: run "
                                       "`.venv/bin/python tests/unit/test_module_utils_layout.py --write`")


def write() -> None:
    head, _body, tail = _doc_parts()
    DOC.write_text(f"{head}{BEGIN}\n{section()}\n{END}{tail}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write()
    else:
        sys.exit(pytest.main([__file__, "-q"]))
