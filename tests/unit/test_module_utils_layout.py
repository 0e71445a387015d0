"""plugins/module_utils is grouped by concern into sub-packages whose imports go one way only (``LAYERS``).

Each file is parsed (never imported) and its imports of module_utils resolved to files (absolute, ``from <package>
import <module>``, relative, and ``importlib.import_module`` / ``__import__`` calls with constant arguments, as
tests/molecule/scenario_reuse.py resolves them for Molecule's keys). The tests fail on an import against the declared
direction (naming the file and the import); on what would get round that resolution (``reference_problems``:
module_utils imported as a whole, an import call whose name is not a constant, a string or an attribute chain naming
``module_utils.<sub-package>`` of a sub-package the file may not import); on a file over ``MAX_LINES``, on a Python
file directly in module_utils, and when docs/architecture.md's section on the layout is not ``LAYERS``. To rewrite that
section after changing ``LAYERS`` or the packages:

    .venv/bin/python tests/unit/test_module_utils_layout.py --write
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "molecule"))  # as pytest's pythonpath has it, for --write

from scenario_reuse import import_call_target, is_import_call, module_utils_imports  # noqa: E402

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


def _allowed(mine: str, layers: dict) -> tuple[set[str], str]:
    """The sub-packages a file of ``mine`` may import (itself included), and that rule in words."""
    allowed = {mine, *layers.get(mine, ((), ""))[0]}
    return allowed, (f"{mine or 'module_utils'} may import {', '.join(sorted(allowed - {mine})) or 'nothing'} "
                     "besides itself")


def direction_problems(utils: Path = UTILS, layers: dict = LAYERS) -> list[str]:
    """Every import of one sub-package by another that ``layers`` does not allow ("<file>: imports <file> (<why>)"),
    and every ``reference_problems`` entry."""
    problems = []
    for path in utils_files(utils):
        allowed, rule = _allowed(package_of(path, utils), layers)
        for target in sorted(module_utils_imports(path, utils)):
            if package_of(target, utils) not in allowed:
                problems.append(f"{path.relative_to(utils.parent.parent).as_posix()}: imports "
                                f"{target.relative_to(utils.parent.parent).as_posix()} ({rule})")
        problems += reference_problems(path, utils, layers)
    return problems


# A dotted name in a string: ansible_collections.kube_accel.gpu.plugins.module_utils.helm.client
DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")


def _chain(node: ast.Attribute) -> str:
    """``mu.helm.client.X`` of an attribute chain (without its base when that is not a name: a call, a subscript)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _whole(path: Path, utils: Path, module: str, level: int, names: list[str]) -> bool:
    """Whether an import (as an ``ImportFrom`` has it; no names: the module itself, as ``import`` and import calls
    bind it) binds the module_utils package itself rather than a sub-package or a module of one."""
    bound = [module] if not names or names == ["*"] else [f"{module}.{n}" if module else n for n in names]
    for dotted in bound:
        if level:
            base = path.parent
            for _ in range(level - 1):
                base = base.parent
            if (base.joinpath(*dotted.split(".")) if dotted else base) == utils:
                return True
        elif dotted.split(".")[-1] == "module_utils":
            return True
    return False


def reference_problems(path: Path, utils: Path = UTILS, layers: dict = LAYERS) -> list[str]:
    """What in a module_utils file would get round the resolution of its imports, as "<file>:<line>: <what>":
    module_utils imported as a whole (``from <collection>.plugins import module_utils``, ``import
    <...>.module_utils as mu``, ``from ... import module_utils``, ``from .. import *``: ``mu.helm.client`` would then
    reach any sub-package), an ``import_module`` / ``__import__`` call whose arguments are not constants, and a
    string (not a docstring) or an attribute chain naming ``module_utils.<sub-package>`` of a sub-package the file
    may not import, or module_utils as a whole. Import calls with constant arguments are resolved with the imports."""
    name = path.relative_to(utils.parent.parent).as_posix()
    allowed, rule = _allowed(package_of(path, utils), layers)
    packages = {p.name for p in utils.iterdir() if p.is_dir()}
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
                  and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    call_args = {id(c) for n in ast.walk(tree) if is_import_call(n)
                 for a in (*n.args, *(k.value for k in n.keywords)) for c in ast.walk(a)}
    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    problems = []

    def whole(line: int) -> None:
        problems.append(f"{name}:{line}: imports module_utils as a whole (import a module of a sub-package: {rule})")

    def named(dotted: str, line: int, what: str) -> None:
        parts = dotted.split(".")
        if "module_utils" not in parts:
            return
        below = parts[parts.index("module_utils") + 1:]
        if not below:
            problems.append(f"{name}:{line}: {what} {dotted} names module_utils as a whole ({rule})")
        elif below[0] in packages and below[0] not in allowed:
            problems.append(f"{name}:{line}: {what} {dotted} names module_utils.{below[0]} ({rule})")

    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            if any(_whole(path, utils, alias.name, 0, []) for alias in node.names):
                whole(line)
        elif isinstance(node, ast.ImportFrom):
            if _whole(path, utils, node.module or "", node.level, [alias.name for alias in node.names]):
                whole(line)
        elif is_import_call(node):
            target = import_call_target(node)
            if target is None:
                problems.append(f"{name}:{line}: {ast.unparse(node.func)}() with arguments that are not constants "
                                f"(the direction cannot be checked: {rule})")
            elif _whole(path, utils, *target):
                whole(line)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings | call_args:
            for dotted in DOTTED.findall(node.value):
                named(dotted, line, "the string")
        elif isinstance(node, ast.Attribute) and id(node) not in inner:
            named(_chain(node), line, "the attribute chain")
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


BYPASSES = {
    "the package, absolute": ("from ansible_collections.a.b.plugins import module_utils as mu\nX = mu.helm.client.X\n",
                              ["1: imports module_utils as a whole"]),
    "the package, imported": ("import ansible_collections.a.b.plugins.module_utils as mu\nX = mu.plan.pools.X\n",
                              ["1: imports module_utils as a whole"]),
    "the package, relative": ("from ... import module_utils\n", ["1: imports module_utils as a whole"]),
    "every sub-package, relative": ("from .. import *\n", ["1: imports module_utils as a whole"]),
    "the package, absolute star": ("from ansible_collections.a.b.plugins.module_utils import *\n",
                                   ["1: imports module_utils as a whole"]),
    "import_module": ("import importlib\nC = importlib.import_module('ansible_collections.a.b.plugins.module_utils."
                      "helm.client')\n", ["imports plugins/module_utils/helm/__init__.py",
                                          "imports plugins/module_utils/helm/client.py"]),
    "import_module, relative": ("from importlib import import_module\nC = import_module('.client', "
                                "package='ansible_collections.a.b.plugins.module_utils.helm')\n",
                                ["imports plugins/module_utils/helm/__init__.py",
                                 "imports plugins/module_utils/helm/client.py"]),
    "import_module of the package": ("import importlib\nmu = importlib.import_module('ansible_collections.a.b.plugins."
                                     "module_utils')\n", ["2: imports module_utils as a whole"]),
    "__import__": ("__import__('ansible_collections.a.b.plugins.module_utils.plan.pools')\n",
                   ["imports plugins/module_utils/plan/__init__.py", "imports plugins/module_utils/plan/pools.py"]),
    "__import__, relative": ("P = __import__('plan', globals(), None, ['pools'], 2)\n",
                             ["imports plugins/module_utils/plan/__init__.py",
                              "imports plugins/module_utils/plan/pools.py"]),
    "import_module of a computed name": ("import importlib\nmu = importlib.import_module('ansible_collections.a.b.'"
                                         " + 'plugins.module' + '_utils')\n",
                                         ["2: importlib.import_module() with arguments that are not constants"]),
    "a string": ("import sys\nC = sys.modules['ansible_collections.a.b.plugins.module_utils.helm.client']\n",
                 ["2: the string ansible_collections.a.b.plugins.module_utils.helm.client names module_utils.helm"]),
    "an f-string": ("import sys\nP = 'ansible_collections.a.b.plugins'\n"
                    "C = sys.modules[f'{P}.module_utils.plan.pools']\n",
                    ["3: the string module_utils.plan.pools names module_utils.plan"]),
    "an attribute chain": ("from .... import plugins\nX = plugins.module_utils.helm.client.X\n",
                           ["2: the attribute chain plugins.module_utils.helm.client.X names module_utils.helm"]),
}


@pytest.fixture
def utils(tmp_path):
    utils = tmp_path / "plugins" / "module_utils"
    for name, text in {
        "common/__init__.py": "", "common/constants.py": "X = 1\n", "plan/__init__.py": "", "plan/pools.py": "X = 1\n",
        "helm/__init__.py": "", "helm/client.py": "X = 1\n", "host/__init__.py": "",
    }.items():
        (utils / name).parent.mkdir(parents=True, exist_ok=True)
        (utils / name).write_text(text)
    return utils


@pytest.mark.parametrize("text, expected", BYPASSES.values(), ids=BYPASSES)
def test_the_direction_check_sees_what_gets_round_the_imports(utils, text, expected):
    (utils / "host" / "facts.py").write_text(text)
    problems = direction_problems(utils)
    assert all(p.startswith("plugins/module_utils/host/facts.py") and "host may import common besides itself)" in p
               for p in problems), problems
    assert len(problems) == len(expected) and all(e in p for e, p in zip(expected, problems, strict=True)), problems


def test_what_the_direction_check_allows(utils):
    (utils / "host" / "facts.py").write_text(
        '"""Never ansible_collections.a.b.plugins.module_utils.helm: a docstring is prose."""\n'
        "import importlib\n"
        "from ansible.module_utils.basic import AnsibleModule\n"
        "from .. import common\n"
        "C = importlib.import_module('ansible_collections.a.b.plugins.module_utils.common.constants')\n"
        "D = importlib.import_module('.constants', package='ansible_collections.a.b.plugins.module_utils.common')\n"
        "X = common.constants.X\n"
        "NAME = 'ansible.module_utils.basic'\n")
    assert direction_problems(utils) == []


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
