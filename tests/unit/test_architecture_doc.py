"""docs/architecture.md's diagram is the code's graph: playbooks, roles, custom modules, filter files and charts.

The graph is read from the code itself: ``import_playbook``, ``roles:``, ``include_role``/``import_role`` and
``include_tasks``/``import_tasks`` in ansible/*.yml and in every role's tasks and handlers; role dependencies in
roles/*/meta/main.yml; task keys that name a custom module (plugins/modules, roles/*/library); ``| filter`` and
``map('filter')`` uses in playbooks and in role tasks, handlers, defaults, vars and templates, mapped to the filter
file that defines the filter; charts a role installs (a release module's chart path ending in a charts/ directory,
and for a role that feeds the ``accel_pool_releases`` filter to that module, every chart
``helm.pool_charts.chart_for`` picks for a release of any mode). The test fails when the diagram's nodes or edges
differ and says which. To redraw the diagram after a change:

    .venv/bin/python tests/unit/test_architecture_doc.py --write
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "architecture.md"
BEGIN, END = "<!-- architecture-graph -->", "<!-- /architecture-graph -->"
# kube-accel's own names are the collection's FQCNs (galaxy.yml): kube_accel.gpu.<role|module|filter>.
_GALAXY = yaml.safe_load((REPO / "galaxy.yml").read_text())
PREFIX = f"{_GALAXY['namespace']}.{_GALAXY['name']}."
# A filter applied with "| name", or passed by name to map().
FILTER_USE = re.compile(rf"\|\s*{re.escape(PREFIX)}([A-Za-z_]\w*)")
FILTER_MAPPED = re.compile(rf"\bmap\(\s*['\"]{re.escape(PREFIX)}([A-Za-z_]\w*)['\"]")
TASK_LISTS = ("tasks", "pre_tasks", "post_tasks", "handlers", "block", "rescue", "always")
ROLE_CALLS = {f"{p}{a}" for p in ("", "ansible.builtin.") for a in ("include_role", "import_role")}
TASK_FILES = {f"{p}{a}" for p in ("", "ansible.builtin.") for a in ("include_tasks", "import_tasks")}
PLAY_IMPORTS = {"import_playbook", "ansible.builtin.import_playbook"}
# The play order of the main job and the layers of the diagram.
KINDS = {"play": "Playbooks (ansible/)", "role": "Roles (roles/)", "mod": "Custom modules",
         "flt": "Filter files (plugins/filter)", "chart": "Charts (charts/)"}


def custom_modules() -> set[str]:
    return {p.stem for p in (REPO / "plugins" / "modules").glob("*.py")}


def filter_files() -> dict[str, str]:
    """Filter name -> the plugins/filter file (stem) whose FilterModule.filters() returns it."""
    out = {}
    for path in sorted((REPO / "plugins" / "filter").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name == "filters":
                for inner in ast.walk(node):
                    if isinstance(inner, ast.Dict):
                        out.update({k.value: path.stem for k in inner.keys if isinstance(k, ast.Constant)})
    return out


def pool_charts() -> set[str]:
    """Every chart the accel_pool_releases filter can pick: helm.pool_charts.chart_for of the release key of every
    mode."""
    from ansible_collections.kube_accel.gpu.plugins.module_utils.common import constants as accel_constants  # noqa: PLC0415
    from ansible_collections.kube_accel.gpu.plugins.module_utils.helm import pool_charts as accel_chart_values  # noqa: PLC0415
    from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import pools as accel_pools  # noqa: PLC0415

    keys = set()
    for mode in accel_constants.MODES:
        for backend in accel_constants.VGPU_BACKENDS if mode == "vgpu" else ("",):
            keys.add(accel_pools.release_key({"accel_mode": mode, "accel_vgpu_backend": backend}))
    return {accel_chart_values.chart_for(k) for k in keys}


def _strings(node):
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from _strings(key)
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)


def _chart_args(args) -> list[str]:
    """Literal ``chart:`` values in a release module's arguments (accel_release, or accel_releases' list)."""
    if isinstance(args, dict):
        own = [args["chart"]] if isinstance(args.get("chart"), str) else []
        return own + [c for value in args.values() for c in _chart_args(value)]
    if isinstance(args, list):
        return [c for value in args for c in _chart_args(value)]
    return []


def _role(name: str) -> str | None:
    """Graph node of a role call; only the collection's own roles (by FQCN) are kube-accel's."""
    return f"role:{name.removeprefix(PREFIX)}" if name.startswith(PREFIX) else None


class Graph:
    def __init__(self):
        self.modules, self.filters = custom_modules(), filter_files()
        self.charts = {p.parent.name for p in (REPO / "charts").glob("*/Chart.yaml")}
        self.edges: set[tuple[str, str]] = set()

    def add(self, src: str, dst: str | None) -> None:
        if dst and src != dst:
            self.edges.add((src, dst))

    def uses_filters(self, src: str, data) -> None:
        for text in _strings(data):
            for name in FILTER_USE.findall(text) + FILTER_MAPPED.findall(text):
                if name in self.filters:
                    self.add(src, f"flt:{self.filters[name]}")

    def tasks(self, src: str, tasks, base: Path, seen: set[Path]) -> None:
        for task in tasks or []:
            if not isinstance(task, dict):
                continue
            for key in TASK_LISTS:
                self.tasks(src, task.get(key), base, seen)
            for key, args in task.items():
                if key in ROLE_CALLS:
                    self.add(src, _role(args["name"]))
                elif key in TASK_FILES:
                    path = (base / (args["file"] if isinstance(args, dict) else args)).resolve()
                    if path not in seen and path.exists():
                        seen.add(path)
                        self.tasks(src, yaml.safe_load(path.read_text()), path.parent, seen)
                elif key.startswith(PREFIX) and key.removeprefix(PREFIX) in self.modules:
                    module = key.removeprefix(PREFIX)
                    self.add(src, f"mod:{module}")
                    if module in ("accel_release", "accel_releases"):
                        for chart in _chart_args(args):
                            if chart.rstrip("/").rsplit("/", 1)[-1] in self.charts:
                                self.add(src, f"chart:{chart.rstrip('/').rsplit('/', 1)[-1]}")
            self.uses_filters(src, task)

    def playbook(self, path: Path) -> None:
        src = f"play:{path.name}"
        for play in yaml.safe_load(path.read_text()) or []:
            for key in PLAY_IMPORTS & set(play):
                self.add(src, f"play:{Path(play[key]).name}")
            for role in play.get("roles") or []:
                self.add(src, _role(role["role"] if isinstance(role, dict) else role))
            for key in ("pre_tasks", "tasks", "post_tasks", "handlers"):
                self.tasks(src, play.get(key), path.parent, set())
            self.uses_filters(src, {k: v for k, v in play.items() if k not in ("pre_tasks", "tasks", "post_tasks",
                                                                                 "handlers")})

    def role(self, path: Path) -> None:
        src = f"role:{path.name}"
        meta = yaml.safe_load((path / "meta" / "main.yml").read_text()) if (path / "meta" / "main.yml").exists() \
            else {}
        for dep in (meta or {}).get("dependencies") or []:
            self.add(src, _role(dep["role"] if isinstance(dep, dict) else dep))
        for folder in ("tasks", "handlers"):
            for file in sorted((path / folder).glob("*.yml")):
                self.tasks(src, yaml.safe_load(file.read_text()), file.parent, set())
        for folder in ("defaults", "vars"):
            for file in sorted((path / folder).glob("*.yml")):
                self.uses_filters(src, yaml.safe_load(file.read_text()))
        for file in sorted((path / "templates").glob("**/*.j2")):
            self.uses_filters(src, file.read_text())
        # A role that installs releases (the accel_releases module) built by the accel_pool_releases filter installs
        # every chart that filter can pick.
        if (src, "mod:accel_releases") in self.edges and self._uses(path, "accel_pool_releases"):
            for chart in pool_charts():
                self.add(src, f"chart:{chart}")

    @staticmethod
    def _uses(path: Path, name: str) -> bool:
        return any(re.search(rf"\|\s*{re.escape(PREFIX + name)}\b", f.read_text()) for f in path.glob("**/*.yml"))


def code_graph() -> set[tuple[str, str]]:
    graph = Graph()
    for path in sorted((REPO / "ansible").glob("*.yml")):
        graph.playbook(path)
    for path in sorted(p for p in (REPO / "roles").iterdir() if (p / "tasks").is_dir()):
        graph.role(path)
    graph.edges.add(("inventory", "play:site.yml"))
    return graph.edges


def _node_id(node: str) -> str:
    return re.sub(r"\W", "_", node)


def _label(node: str) -> str:
    kind, _, name = node.partition(":")
    return {"inventory": "inventory<br/>hosts, group_vars", "flt": f"{name}.py", "chart": f"charts/{name}"}.get(
        kind if name else node, name or node)


def mermaid(edges: set[tuple[str, str]]) -> str:
    """The diagram: one subgraph per kind, every edge of the code graph, in a stable order."""
    nodes = {n for e in edges for n in e}
    lines = ["```mermaid", "flowchart LR", f'  inventory[("{_label("inventory")}")]']
    for kind, title in KINDS.items():
        members = sorted(n for n in nodes if n.startswith(f"{kind}:"))
        if members:
            lines.append(f'  subgraph {kind}s["{title}"]')
            lines += [f'    {_node_id(n)}["{_label(n)}"]' for n in members]
            lines.append("  end")
    lines += [f"  {_node_id(a)} --> {_node_id(b)}" for a, b in sorted(edges)]
    lines.append("```")
    return "\n".join(lines)


def drawn_graph(text: str) -> tuple[set[str], set[tuple[str, str]]]:
    """Node ids and edges of the Mermaid block between the markers, as written in the doc."""
    block = text.split(BEGIN, 1)[1].split(END, 1)[0]
    nodes = set(re.findall(r"^\s*(\w+)\s*[\[(]", block, re.M)) - {"subgraph"}
    nodes -= set(re.findall(r"^\s*subgraph\s+(\w+)", block, re.M))
    edges = set(re.findall(r"^\s*(\w+)\s*-->\s*(\w+)\s*$", block, re.M))
    return nodes, edges


def test_diagram_is_the_code_graph():
    edges = code_graph()
    want_edges = {(_node_id(a), _node_id(b)) for a, b in edges}
    want_nodes = {n for e in want_edges for n in e}
    nodes, drawn = drawn_graph(DOC.read_text())
    problems = [f"missing edge {a} --> {b}" for a, b in sorted(want_edges - drawn)]
    problems += [f"edge not in the code {a} --> {b}" for a, b in sorted(drawn - want_edges)]
    problems += [f"node not in the code {n}" for n in sorted(nodes - want_nodes)]
    problems += [f"missing node {n}" for n in sorted(want_nodes - nodes)]
    redraw = "`.venv/bin/python tests/unit/test_architecture_doc.py --write`"
    assert not problems, (f"docs/architecture.md's diagram differs from the code (redraw it with {redraw}):\n  "
                          + "\n  ".join(problems))


def test_graph_reaches_every_role_module_and_chart():
    """Nothing kube-accel ships is left out of the main job's map: each role, custom module, filter file and chart is
    reached from the inventory (a role only Molecule runs, or a module nothing calls, would be dead code here)."""
    edges = code_graph()
    reached, todo = set(), ["inventory"]
    while todo:
        node = todo.pop()
        if node not in reached:
            reached.add(node)
            todo += [b for a, b in edges if a == node]
    graph = Graph()
    shipped = ({f"role:{p.name}" for p in (REPO / "roles").iterdir() if (p / "tasks").is_dir()}
               | {f"mod:{m}" for m in graph.modules} | {f"chart:{c}" for c in graph.charts}
               | {f"flt:{f}" for f in graph.filters.values()})
    assert not shipped - reached, f"not reached from the inventory: {sorted(shipped - reached)}"


def test_drawn_graph_parser_sees_a_change():
    text = DOC.read_text()
    nodes, edges = drawn_graph(text)
    a, b = sorted(edges)[0]
    changed = drawn_graph(text.replace(f"  {a} --> {b}\n", "", 1))
    assert changed[1] == edges - {(a, b)}
    assert "play_site_yml" in nodes and "role_pool_charts" in nodes


def test_doc_names_only_paths_that_exist():
    """The 'where each concern lives' table names real paths (backticked, ending in / or a file)."""
    table = DOC.read_text().split("## Where each concern lives", 1)[1]
    for path in re.findall(r"^\| `([^`*]+)`", table, re.M):
        assert (REPO / path.rstrip("/")).exists(), f"docs/architecture.md names {path}, which does not exist"


def write() -> None:
    text = DOC.read_text()
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    DOC.write_text(f"{head}{BEGIN}\n{mermaid(code_graph())}\n{END}{tail}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write()
    else:
        print(mermaid(code_graph()))
