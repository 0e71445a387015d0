"""scripts/kalab imports one way, down the layers its __init__ docstring lists: a module imports only from layers
below its own (never from its own layer, one above, or scripts/lab.py, the command line on top), and only at module
level, so no import inside a function hides a cycle. Nothing imports a lab module outside the package (``GONE``), nor
scripts/lab.py (a command, not a library)."""

from __future__ import annotations

import ast
from pathlib import Path

import kalab

PACKAGE = Path(kalab.__file__).parent
SCRIPTS = PACKAGE.parent
REPO = SCRIPTS.parent
# Bottom first: a module may import from the layers before its own. kalab/__init__.py lists them top first.
LAYERS = [["site", "nvidia_smi", "informer"], ["cluster", "nodes", "hosts", "processes", "dra"], ["standins"],
          ["upstream"], ["monitoring"]]
LAYER = {module: i for i, layer in enumerate(LAYERS) for module in layer}
GONE = {"lab_upstream", "lab_monitoring"}  # no such scripts/*.py: that code is kalab.upstream and kalab.monitoring


def lab_imports(path: Path) -> list[tuple[str, int, bool]]:
    """(module, line, at module level) for each import in ``path`` of the lab's own code: kalab's modules as
    "kalab.NAME" (absolute or relative), scripts/lab.py as "lab", and the modules kalab replaced."""
    tree = ast.parse(path.read_text(), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level:  # from . import x, from .x import y
            names = [f"kalab.{node.module}"] if node.module else [f"kalab.{a.name}" for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module == "kalab":
            names = [f"kalab.{a.name}" for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module]
        else:
            continue
        for name in names:
            root = name.split(".")[0]
            if root in {"kalab", "lab"} | GONE:
                out.append((".".join(name.split(".")[:2]), node.lineno, node in tree.body))
    return out


def modules() -> list[str]:
    return sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")


def test_every_module_has_its_layer_and_the_map_shows_them():
    assert modules() == sorted(LAYER), "a new kalab module needs its place in LAYERS and in kalab/__init__.py's map"
    doc = kalab.__doc__
    for module in modules():
        assert f"\n  {module}  " in doc, f"kalab/__init__.py's map does not describe {module}"
    layers = "\n".join(f"  {', '.join(layer)}" for layer in reversed(LAYERS))
    assert f"  scripts/lab.py\n{layers}\n" in doc, "kalab/__init__.py's layers differ from LAYERS"


def test_imports_go_down_the_layers_only():
    wrong = []
    for module in modules():
        for name, line, top in lab_imports(PACKAGE / f"{module}.py"):
            where = f"kalab/{module}.py:{line} imports {name}"
            target = name.removeprefix("kalab.")
            if not name.startswith("kalab."):
                wrong.append(f"{where}: the package never imports the command line or the modules it replaced")
            elif target not in LAYER:
                wrong.append(f"{where}: not a module of the package")
            elif LAYER[target] >= LAYER[module]:
                wrong.append(f"{where}: {target} is not below {module} (layers: kalab/__init__.py)")
            elif not top:
                wrong.append(f"{where}: inside a function (imports of the package are at module level)")
    assert not wrong, "\n".join(wrong)


def test_no_import_cycle():
    """A cycle by the imports themselves, whatever LAYERS says."""
    graph = {m: {n.removeprefix("kalab.") for n, _, _ in lab_imports(PACKAGE / f"{m}.py") if n.startswith("kalab.")}
             for m in modules()}

    def visit(module: str, path: list[str]) -> None:
        assert module not in path, f"import cycle: {' -> '.join([*path[path.index(module):], module])}"
        for target in sorted(graph.get(module, ())):
            visit(target, [*path, module])

    for module in graph:
        visit(module, [])


def test_the_command_line_is_on_top_and_nothing_imports_the_replaced_modules():
    cli = lab_imports(SCRIPTS / "lab.py")
    assert cli and all(name.startswith("kalab.") and top for name, _, top in cli), cli
    assert not [p.name for p in SCRIPTS.glob("lab_*.py")], "the lab's code lives in scripts/kalab"
    stale = [f"{path.relative_to(REPO)}:{line} imports {name}"
             for base in (REPO / "scripts", REPO / "tests") for path in sorted(base.rglob("*.py"))
             for name, line, _ in lab_imports(path) if name in GONE | {"lab"}]
    assert not stale, "\n".join(stale)
