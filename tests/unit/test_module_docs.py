"""Every custom module (plugins/modules, roles/*/library) documents exactly what it accepts and returns.

Evidence comes from ansible-core itself, not from reading the source with regexes:

- the docs are what ``ansible-doc --json`` (ansible-core's own loader, ``read_docstring`` + doc fragments) returns;
- the argument spec is the one the module hands to ``AnsibleModule``, captured the way ``ansible-test sanity
  --test validate-modules`` captures it (its ``module_args.get_py_argument_spec``: run the module as ``__main__``
  with ``AnsibleModule.__init__`` replaced by a recorder that stops the run);
- options are compared by validate-modules' rules (``_validate_argument_spec`` in ansible-test 2.19): names and
  aliases, type (unset = ``str``), required, default and choices after the type's own conversion, list elements,
  and suboptions recursively; required_if/mutually_exclusive name only real options.

ansible-test's own validate-modules cannot run here yet: it needs a collection layout (issue 17, part 1) and
voluptuous. When the collection exists, ``ansible-test sanity`` replaces this file.
"""

from __future__ import annotations

import inspect
import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible.module_utils import basic
from ansible.module_utils.common.parameters import DEFAULT_TYPE_VALIDATORS

REPO = Path(__file__).resolve().parents[2]
MODULES = sorted((REPO / "plugins" / "modules").glob("*.py")) + sorted(REPO.glob("roles/*/library/*.py"))
ANSIBLE_DOC = Path(sys.executable).parent / "ansible-doc"
# validate-modules' return_schema for modules: the types a RETURN entry and its list elements may declare.
RETURN_TYPES = {"bool", "complex", "dict", "float", "int", "list", "raw", "str"}
ELEMENT_TYPES = {"bits", "bool", "bytes", "dict", "float", "int", "json", "jsonarg", "list", "path", "raw", "sid",
                 "str"}
SUPPORT = {"full", "partial", "none", "N/A"}


@pytest.fixture(scope="module")
def ansible_doc() -> dict[str, dict]:
    """``ansible-doc --json`` for every module at once, with each module's own folder on the module path."""
    paths = sorted({str(p.parent) for p in MODULES})
    argv = [str(ANSIBLE_DOC), "-t", "module", "--json"]
    for path in paths:
        argv += ["-M", path]
    proc = subprocess.run([*argv, *(p.stem for p in MODULES)], cwd=REPO, capture_output=True, text=True,
                          check=False, timeout=120, env={**os.environ, "ANSIBLE_NOCOLOR": "1",
                                                         "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


class _Recorded(Exception):
    """Raised by the recording AnsibleModule.__init__: the module stops before it reads parameters or acts."""


def argument_spec(path: Path) -> dict:
    """The keyword arguments the module passes to AnsibleModule (validate-modules' technique)."""
    seen: dict = {}

    original = basic.AnsibleModule.__init__
    # Positional arguments by AnsibleModule's own parameter names, as validate-modules maps them.
    names = list(inspect.signature(original).parameters)[1:]

    def record(self, *args, **kwargs):
        seen.update(dict(zip(names, args, strict=False)), **kwargs)
        raise _Recorded

    basic.AnsibleModule.__init__ = record
    try:
        runpy.run_path(str(path), run_name="__main__")
    except _Recorded:
        pass
    finally:
        basic.AnsibleModule.__init__ = original
    assert seen, f"{path.name} never constructed AnsibleModule when run as __main__"
    return seen


def _converted(value, type_name):
    checker = type_name if callable(type_name) else DEFAULT_TYPE_VALIDATORS[type_name]
    return None if value is None else checker(value)


def spec_problems(spec: dict, options: dict, where: str = "") -> list[str]:
    """Differences between an argument spec and DOCUMENTATION options, by validate-modules' rules."""
    problems = []
    options = options or {}
    documented = set()
    for name, doc in options.items():
        documented |= {name, *doc.get("aliases", [])}
    accepted = set()
    for name, data in spec.items():
        at = f"{where}{name}"
        aliases = list(data.get("aliases", []))
        accepted |= {name, *aliases}
        doc_names = [n for n in [name, *aliases] if n in options]
        if not doc_names:
            continue  # reported below as undocumented
        doc = options[doc_names[0]]
        if set(doc.get("aliases", [])) | {doc_names[0]} != {name, *aliases}:
            problems.append(f"{at}: names {sorted({name, *aliases})}, documented as "
                            f"{sorted(set(doc.get('aliases', [])) | {doc_names[0]})}")
        spec_type, doc_type = data.get("type", "str"), doc.get("type", "str")
        if spec_type != doc_type:
            problems.append(f"{at}: type {spec_type!r} in the spec, {doc_type!r} in DOCUMENTATION")
            continue
        if spec_type == "list" and not data.get("elements"):
            problems.append(f"{at}: type list without elements")
        if data.get("elements") != doc.get("elements"):
            problems.append(f"{at}: elements {data.get('elements')!r} in the spec, {doc.get('elements')!r} documented")
        if bool(data.get("required")) != bool(doc.get("required")):
            problems.append(f"{at}: required={bool(data.get('required'))} in the spec, "
                            f"{bool(doc.get('required'))} documented")
        if data.get("required") and data.get("default") is not None:
            problems.append(f"{at}: required and has a default")
        try:
            spec_default, doc_default = _converted(data.get("default"), spec_type), _converted(doc.get("default"),
                                                                                               spec_type)
        except (TypeError, ValueError) as err:
            problems.append(f"{at}: default not a {spec_type}: {err}")
        else:
            if spec_default != doc_default:
                problems.append(f"{at}: default {spec_default!r} in the spec, {doc_default!r} documented")
        spec_choices = sorted(map(str, (_converted(c, spec_type) for c in data.get("choices", []))))
        doc_choices = sorted(map(str, (_converted(c, spec_type) for c in doc.get("choices", []))))
        if spec_choices != doc_choices:
            problems.append(f"{at}: choices {spec_choices} in the spec, {doc_choices} documented")
        if data.get("options") or doc.get("suboptions"):
            problems += spec_problems(data.get("options") or {}, doc.get("suboptions") or {}, f"{at}.")
    problems += [f"{where}{n}: accepted but not documented" for n in sorted(accepted - documented)]
    problems += [f"{where}{n}: documented but not accepted" for n in sorted(documented - accepted)]
    return problems


def rule_problems(kwargs: dict) -> list[str]:
    """required_if / mutually_exclusive / ... name only options of the spec (validate-modules checks the same)."""
    spec = kwargs.get("argument_spec") or {}
    problems = []
    for key in ("mutually_exclusive", "required_together", "required_one_of"):
        for group in kwargs.get(key) or []:
            problems += [f"{key} names unknown option {n!r}" for n in group if n not in spec]
    for rule in kwargs.get("required_if") or []:
        name, _value, needed = rule[:3]
        problems += [f"required_if names unknown option {n!r}" for n in [name, *needed] if n not in spec]
    for name, needed in (kwargs.get("required_by") or {}).items():
        names = [name, *([needed] if isinstance(needed, str) else needed)]
        problems += [f"required_by names unknown option {n!r}" for n in names if n not in spec]
    return problems


def return_problems(returns: dict, where: str = "") -> list[str]:
    """validate-modules' return_schema: description and type everywhere, returned at the top level, known types;
    a complex value says what it contains."""
    problems = []
    for key, entry in (returns or {}).items():
        at = f"{where}{key}"
        missing = {"description", "type"} - set(entry) | ({"returned"} - set(entry) if not where else set())
        if missing:
            problems.append(f"RETURN {at} lacks {sorted(missing)}")
            continue
        if entry["type"] not in RETURN_TYPES:
            problems.append(f"RETURN {at}: type {entry['type']!r} is not one of {sorted(RETURN_TYPES)}")
        if entry.get("elements") not in ELEMENT_TYPES | {None}:
            problems.append(f"RETURN {at}: elements {entry['elements']!r} is not one of {sorted(ELEMENT_TYPES)}")
        if entry["type"] == "complex" and "contains" not in entry:
            problems.append(f"RETURN {at}: type complex without contains")
        problems += return_problems(entry.get("contains"), f"{at}.")
    return problems


@pytest.mark.parametrize("path", MODULES, ids=[p.stem for p in MODULES])
def test_module_documents_itself(ansible_doc, path):
    assert path.stem in ansible_doc, f"ansible-doc did not load {path.relative_to(REPO)}"
    entry = ansible_doc[path.stem]
    doc = entry["doc"]
    assert doc["module"] == path.stem
    assert {"short_description", "description", "author"} <= set(doc), sorted(doc)
    assert doc["attributes"]["check_mode"]["support"] in ("full", "partial")
    assert {a.get("support") for a in doc["attributes"].values() if "support" in a} <= SUPPORT
    kwargs = argument_spec(path)
    assert kwargs.get("supports_check_mode") is True, "check_mode is documented but AnsibleModule is not told"
    problems = spec_problems(kwargs.get("argument_spec") or {}, doc.get("options") or {}) + rule_problems(kwargs)
    problems += return_problems(entry.get("return"))
    assert not problems, f"{path.relative_to(REPO)}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("path", MODULES, ids=[p.stem for p in MODULES])
def test_examples_call_the_module_with_documented_options(ansible_doc, path):
    """EXAMPLES is YAML (a list of tasks); every task that calls this module passes only documented options."""
    doc = ansible_doc[path.stem]["doc"]
    tasks = yaml.safe_load(ansible_doc[path.stem]["examples"])
    assert isinstance(tasks, list) and tasks, "EXAMPLES is not a list of tasks"
    options = set()
    for name, option in (doc.get("options") or {}).items():
        options |= {name, *option.get("aliases", [])}
    calls = [t for t in tasks if path.stem in t or any(k.endswith(f".{path.stem}") for k in t)]
    assert calls, f"no example task calls {path.stem}"
    for task in calls:
        key = next(k for k in task if k == path.stem or k.endswith(f".{path.stem}"))
        args = task[key] or {}
        assert isinstance(args, dict), f"{task.get('name')}: free-form arguments"
        assert set(args) <= options, f"{task.get('name')}: undocumented {sorted(set(args) - options)}"


# The comparison above must notice what validate-modules notices: each of these edits of a real module's argument
# spec is reported.
BROKEN_SPECS = [
    ("undocumented option", lambda spec: spec.update(extra={"type": "str"}), "extra: accepted but not documented"),
    ("dropped option", lambda spec: spec.pop("manager"), "manager: documented but not accepted"),
    ("type", lambda spec: spec["lock_timeout"].update(type="float"), "lock_timeout: type 'float'"),
    ("default", lambda spec: spec["lock_timeout"].update(default=30), "lock_timeout: default 30"),
    ("choices", lambda spec: spec["manager"].update(choices=["apt", "dnf", "zypper"]), "manager: choices"),
    ("required", lambda spec: spec["manager"].pop("required"), "manager: required=False"),
    ("alias", lambda spec: spec["repair"].update(aliases=["fix"]), "repair: names ['fix', 'repair']"),
]


@pytest.mark.parametrize(("what", "edit", "expected"), BROKEN_SPECS, ids=[b[0] for b in BROKEN_SPECS])
def test_comparison_catches_a_drifted_spec(ansible_doc, what, edit, expected):
    path = REPO / "plugins" / "modules" / "accel_package_db.py"
    spec = {k: dict(v) for k, v in argument_spec(path)["argument_spec"].items()}
    assert spec_problems(spec, ansible_doc["accel_package_db"]["doc"]["options"]) == []
    edit(spec)
    problems = spec_problems(spec, ansible_doc["accel_package_db"]["doc"]["options"])
    assert any(expected in p for p in problems), problems
