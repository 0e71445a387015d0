"""Evaluate a role's task file against a simulated host, the way Ansible would: ``when`` as a Jinja expression,
``register``, ``vars``, blocks, ``set_fact``, ``changed_when``, the role's vars files as lazily rendered templates and
kube-accel's own filters. For roles whose target OS or device has no image here (RHEL, grubby); each test's host
object answers the modules (``run(module, args, check) -> result``).
"""

from __future__ import annotations

import base64
import re
import types

import jinja2
import yaml
from ansible_collections.kube_accel.gpu.plugins.filter import accel_driver_filters, accel_repo_filters

OMIT = "__omit__"


def environment() -> jinja2.Environment:
    # Ansible renders lazy sequences (map, select) as lists and keeps a template's trailing newline.
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             finalize=lambda v: list(v) if isinstance(v, types.GeneratorType) else v)
    for module in (accel_driver_filters, accel_repo_filters):
        env.filters.update({f"kube_accel.gpu.{name}": f for name, f in module.FilterModule().filters().items()})
    env.filters["b64decode"] = lambda v: base64.b64decode(v).decode()
    env.filters["bool"] = lambda v: v if isinstance(v, bool) else str(v).lower() in ("true", "yes", "1", "on")
    # Ansible's own filters and tests these task files use.
    env.filters["regex_replace"] = lambda v, pattern, repl="": re.sub(pattern, repl, str(v))
    env.filters["split"] = lambda v, sep=None: str(v).split(sep)
    env.tests["issuperset"] = lambda a, b: set(a) >= set(b)
    env.tests["match"] = lambda v, pattern: re.match(pattern, str(v)) is not None
    env.tests["search"] = lambda v, pattern: re.search(pattern, str(v)) is not None
    env.tests["changed"] = lambda r: bool(isinstance(r, dict) and r.get("changed"))
    env.tests["skipped"] = lambda r: bool(isinstance(r, dict) and r.get("skipped"))
    return env


ENV = environment()


def literal(source: str) -> str:
    """Ansible keeps a backslash in a Jinja string literal as written ('\\1' stays a regex back-reference), where plain
    Jinja would decode it as an escape: double them so plain Jinja yields what Ansible does."""
    return source.replace("\\", "\\\\")


class RoleVars(dict):
    """Host and registered variables plus the role's vars files, whose values are templates rendered when an
    expression names them (as Ansible does)."""

    def __init__(self, templates: dict, base: dict):
        super().__init__(base)
        self.templates = templates

    def scope(self, text: str, seen=()) -> dict:
        scope = dict(self)
        for name, template in self.templates.items():
            if name in scope or name in seen or not re.search(rf"\b{name}\b", text):
                continue
            scope.update({k: v for k, v in self.scope(str(template), (*seen, name)).items() if k not in scope})
            scope[name] = render(template, scope, self, (*seen, name))
        return scope


def render(value, variables, role=None, seen=()):
    role = role if role is not None else (variables if isinstance(variables, RoleVars) else None)
    if isinstance(value, str):
        if "{{" not in value:
            return value
        scope = role.scope(value, seen) if role is not None else variables
        scope = {**scope, **{k: v for k, v in variables.items() if k not in scope}}
        text = ENV.from_string(literal(value)).render(scope)
        try:
            return yaml.safe_load(text) if text.strip().startswith(("[", "{")) or text in ("True", "False") else text
        except yaml.YAMLError:
            return text
    if isinstance(value, list):
        return [render(v, variables, role, seen) for v in value]
    if isinstance(value, dict):
        return {k: render(v, variables, role, seen) for k, v in value.items()}
    return value


def condition(task, variables) -> bool:
    when = task.get("when")
    if when is None:
        return True
    return all(ENV.compile_expression(literal(str(w)))(variables.scope(str(w)))
               for w in (when if isinstance(when, list) else [when]))


class AssertionFailed(Exception):
    """An ansible.builtin.assert that did not hold; the message is its rendered fail_msg."""


INCLUDES = ("ansible.builtin.import_tasks", "ansible.builtin.include_tasks")


def run_tasks(tasks, host, variables, module_keys, tasks_dir=None):
    """Run ``tasks``; ``tasks_dir`` is where import_tasks/include_tasks find their files (the role's tasks/)."""
    for task in tasks:
        if not condition(task, variables):
            if "register" in task:
                variables[task["register"]] = {"skipped": True, "changed": False}
            continue
        if "block" in task:
            run_tasks(task["block"], host, variables, module_keys, tasks_dir)
            continue
        include = next((k for k in INCLUDES if k in task), None)
        if include:
            run_tasks(yaml.safe_load((tasks_dir / task[include]).read_text()), host, variables, module_keys, tasks_dir)
            continue
        if "ansible.builtin.assert" in task:
            spec = task["ansible.builtin.assert"]
            scope = RoleVars(variables.templates, variables)
            for name, value in (task.get("vars") or {}).items():
                scope[name] = render(value, scope)
            thats = spec["that"] if isinstance(spec["that"], list) else [spec["that"]]
            for that in thats:
                if not ENV.compile_expression(literal(str(that)))(scope.scope(str(that))):
                    raise AssertionFailed(render(str(spec.get("fail_msg", that)), scope))
            continue
        module = next(k for k in task if k in module_keys)
        scope = RoleVars(variables.templates, variables)
        for name, value in (task.get("vars") or {}).items():
            scope[name] = render(value, scope)
        args = render(task[module], scope)
        if module == "ansible.builtin.set_fact":
            variables.update(args)
            continue
        # check_mode: false runs a task for real in check mode too (read-only probes); true always checks.
        result = host.run(module, args, bool(task.get("check_mode", variables["ansible_check_mode"])))
        if "changed_when" in task:
            result["changed"] = ENV.compile_expression(str(task["changed_when"]))(variables.scope(""))
        if "register" in task:
            variables[task["register"]] = result
