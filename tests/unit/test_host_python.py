"""Host-side code runs on the hosts' own Python: Ubuntu 22.04 has 3.10, RHEL 9 has 3.9. Every module that runs on
a host (plugins/modules and the module_utils they import) must parse as Python 3.9 and use nothing at
run time that 3.9 lacks. ``from __future__ import annotations`` makes annotations strings, so new syntax there is
fine; the checks below look at code that is evaluated."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from scenario_reuse import module_utils_imports

REPO = Path(__file__).resolve().parents[2]
FEATURE = (3, 9)
TYPE_NAMES = {"int", "str", "float", "bool", "bytes", "list", "dict", "set", "tuple", "frozenset", "type", "object"}
NEW_MODULES = {"tomllib": (3, 11)}  # stdlib modules newer than 3.9: only behind try/except ImportError


def host_files() -> list[Path]:
    files = sorted((REPO / "plugins" / "modules").glob("*.py"))
    utils = REPO / "plugins" / "module_utils"
    seen, pending = set(), list(files)
    while pending:
        for path in module_utils_imports(pending.pop(), utils):
            if path not in seen:
                seen.add(path)
                pending.append(path)
    return files + sorted(seen)


FILES = host_files()


def annotation_nodes(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        parts = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            parts = [a.annotation for a in args.posonlyargs + args.args + args.kwonlyargs if a.annotation]
            parts += [a.annotation for a in (args.vararg, args.kwarg) if a and a.annotation]
            parts += [node.returns] if node.returns else []
        elif isinstance(node, ast.AnnAssign):
            parts = [node.annotation]
        for part in parts:
            ids |= {id(n) for n in ast.walk(part)}
    return ids


def typeish(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and node.value is None:
        return True
    if isinstance(node, ast.Name):
        return node.id in TYPE_NAMES
    if isinstance(node, ast.Subscript):
        return typeish(node.value)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return typeish(node.left) or typeish(node.right)
    return False


def guarded_imports(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
                isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError")
                for h in node.handlers):
            ids |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return ids


def problems(source: str, name: str = "<src>") -> list[str]:
    try:
        tree = ast.parse(source, name, feature_version=FEATURE)
    except SyntaxError as e:
        return [f"line {e.lineno}: {e.msg}"]
    found = []
    lines = source.splitlines()
    annotations = annotation_nodes(tree)
    guarded = guarded_imports(tree)
    for node in ast.walk(tree):
        line = getattr(node, "lineno", "?")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr) and id(node) not in annotations \
                and typeish(node):
            found.append(f"line {line}: X | Y type union evaluated at run time (Python 3.10)")
        if isinstance(node, (ast.With, ast.AsyncWith)):
            # with (a as x, b as y): -- the parenthesis closes after the last item (Python 3.10).
            last = node.items[-1].optional_vars or node.items[-1].context_expr
            after = lines[last.end_lineno:node.body[0].lineno]
            rest = lines[last.end_lineno - 1][last.end_col_offset:] + " ".join(after)
            if rest.lstrip().lstrip(",").lstrip().startswith(")"):
                found.append(f"line {line}: parenthesized context managers (Python 3.10)")
        if isinstance(node, ast.Call):
            fname = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            kws = {k.arg for k in node.keywords}
            if fname == "zip" and "strict" in kws:
                found.append(f"line {line}: zip(strict=) (Python 3.10)")
            if fname == "dataclass" and kws & {"slots", "kw_only", "match_args"}:
                found.append(f"line {line}: dataclass({', '.join(sorted(kws))}) (Python 3.10)")
        if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in guarded:
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for mod in names:
                if mod.split(".")[0] in NEW_MODULES:
                    found.append(f"line {line}: import {mod} without an ImportError fallback "
                                 f"(Python {'.'.join(map(str, NEW_MODULES[mod.split('.')[0]]))})")
        if isinstance(node, ast.Attribute) and node.attr == "UTC" and isinstance(node.value, ast.Name) \
                and node.value.id == "datetime":
            found.append(f"line {line}: datetime.UTC (Python 3.11)")
        if isinstance(node, ast.ImportFrom) and node.module == "datetime" and any(a.name == "UTC" for a in node.names):
            found.append(f"line {line}: from datetime import UTC (Python 3.11)")
    return found


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(REPO)) for p in FILES])
def test_host_side_code_runs_on_python_39(path):
    assert problems(path.read_text(), str(path)) == []


def test_host_files_found():
    names = {p.name for p in FILES}
    assert {"containerd_nvidia_dropin.py", "sriov_numvfs.py", "sysfs.py"} <= names


@pytest.mark.parametrize("source", [
    "match x:\n    case 1:\n        pass\n",
    "with (open('a') as a, open('b') as b):\n    pass\n",
    "with (\n    open('a') as a,\n    open('b'),\n):\n    pass\n",
    "T = int | None\n",
    "isinstance(x, (int | str))\n",
    "for a, b in zip(x, y, strict=True):\n    pass\n",
    "import tomllib\n",
    "try:\n    pass\nexcept* ValueError:\n    pass\n",
    "from datetime import UTC, datetime\n",
], ids=["match", "parenthesized-with", "parenthesized-with-multiline", "union-alias", "union-isinstance",
        "zip-strict", "tomllib", "except-star", "datetime-utc-import"])
def test_checker_catches_newer_python(source):
    assert problems(source)


def test_checker_allows_annotations_and_guarded_imports():
    source = ("from __future__ import annotations\n"
              "try:\n    import tomllib\nexcept ImportError:\n    tomllib = None\n"
              "def f(a: int | None = None) -> list[str] | None:\n    b: dict[str, int] | None = None\n"
              "    with (open('a')) as f, open('b') as g:\n        pass\n"
              "    return [str(a | 1)]\n")
    assert problems(source) == []
