# Copyright: kube-accel contributors
# Apache License 2.0
"""Strict checks of one inventory value against its definition in ``plan.inventory.VARIABLES``.

Values are checked as written, never coerced: a boolean is a YAML boolean (``true``/``false``; YAML 1.1's
``yes``/``no``/``on``/``off`` load as booleans too), never the string ``"yes"`` or ``y``; an integer is never ``4.0``
or ``"7"``; a list is never a string (which a loop would walk one character at a time). Each string that reaches a
host file, a kernel command line, an apt/dnf source, a URL or a Kubernetes object name is checked against the exact
grammar of that target (``plan.grammars``): nothing with a newline, quote or shell metacharacter passes where the target
does not allow it.

Public API:

- ``value_problems(name, value, written=None, source="") -> [(what, allowed)]``: every problem of one value of a known
  variable. ``written`` is the value's text as it stands in its file (it explains YAML surprises such as ``1.30``
  read as ``1.3``), ``source`` how the value came in (``"extra"``: ``-e key=value``, which passes strings; ``"ini"``:
  an INI ``:vars`` section, whose values are strings).
- ``shown(value)`` (from ``plan.value_text``): a short, bounded rendering of any value for messages (safe on YAML
  alias bombs).
- ``oversized(value)``: a description when a value holds more items than any setting could (YAML aliases expand
  exponentially), checked before anything walks it.
"""

from __future__ import annotations

import re

from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.grammars import GRAMMARS
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.inventory import VARIABLES
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.value_text import kind_of, shown

# A value with more nodes than this is no setting of kube-accel's (the largest, a MIG geometry or a label map, has
# tens): counted without expanding shared YAML aliases, so a "billion laughs" costs microseconds.
MAX_NODES = 2000

_TYPE_NAMES = {"str": "a string", "path": "a path (string)", "int": "an integer", "float": "a number",
               "bool": "a boolean", "list": "a list", "dict": "a mapping"}
_TRUE_WORDS = ("y", "yes", "true", "on", "1", "t")
_FALSE_WORDS = ("n", "no", "false", "off", "0", "f")


def oversized(value, limit: int = MAX_NODES) -> str:
    """A description when ``value`` holds more than ``limit`` nodes counted with every alias expanded; else ""."""
    memo: dict[int, int] = {}

    def count(node, depth: int) -> int:
        if depth > 64:
            return limit + 1
        if isinstance(node, dict):
            key = id(node)
            if key not in memo:
                memo[key] = 1 + sum(count(v, depth + 1) for v in node.values()) + len(node)
            return memo[key]
        if isinstance(node, (list, tuple)):
            key = id(node)
            if key not in memo:
                memo[key] = 1 + sum(count(v, depth + 1) for v in node)
            return memo[key]
        return 1

    total = count(value, 0)
    if total <= limit:
        return ""
    return f"a value of {total:,} items (YAML aliases repeat shared nodes), far more than any setting holds"


def _string_hint(source: str) -> str:
    if source == "extra":
        return " (-e key=value passes strings: pass typed values as JSON, e.g. -e '{\"name\": 4}')"
    if source == "ini":
        return " (an INI inventory reads values as Python literals: True, False, numbers; or use YAML group_vars)"
    return ""


def _written_hint(value, written) -> str:
    """Explains a YAML number that was written differently (1.30 read as 1.3)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return ""
    text = str(written if written is not None else value).strip()
    if text and text != repr(value) and text != str(value):
        return f": YAML read the unquoted {text} as the number {value!r}; quote it: \"{text}\""
    return f": quote it: \"{text or value}\""


def type_problem(entry: dict, value, written=None, source: str = "") -> str:
    """What is wrong with the value's type (empty string: the type is right)."""
    kind = entry["type"]
    if kind == "raw":
        return ""
    if value is None:
        return f"{kind_of(value)}, not {_TYPE_NAMES[kind]}: give a value or remove the line"
    if kind in ("str", "path"):
        if isinstance(value, str):
            return ""
        if entry.get("grammar") == "driver_branch" and isinstance(value, int) and not isinstance(value, bool):
            return ""  # 550 and "550" name the same branch; no digit is lost
        return f"{kind_of(value)}, not a string" + _written_hint(value, written)
    if kind == "bool":
        if isinstance(value, bool):
            return ""
        if isinstance(value, str) and value.strip().lower() in _TRUE_WORDS + _FALSE_WORDS:
            word = "true" if value.strip().lower() in _TRUE_WORDS else "false"
            word = word.capitalize() if source == "ini" else word
            why = " (YAML reads y and n as strings)" if value.strip().lower() in ("y", "n") else ""
            return f"{kind_of(value)}, not a boolean: write {word} without quotes{why}" + _string_hint(source)
        return f"{kind_of(value)}, not a boolean"
    if kind == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            return ""
        if isinstance(value, float):
            return f"{kind_of(value)}, not an integer (a decimal point makes it a float)"
        if isinstance(value, str) and re.fullmatch(r"\s*-?[0-9]+\s*", value):
            return f"{kind_of(value)}, not an integer: write {value.strip()} without quotes" + _string_hint(source)
        return f"{kind_of(value)}, not an integer"
    if kind == "float":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return ""
        if isinstance(value, str):
            try:
                float(value)
            except ValueError:
                return f"{kind_of(value)}, not a number"
            return f"{kind_of(value)}, not a number: write {value.strip()} without quotes" + _string_hint(source)
        return f"{kind_of(value)}, not a number"
    if kind == "list":
        if isinstance(value, list):
            return ""
        if isinstance(value, str):
            return (f"{kind_of(value)}, not a list (a loop would take it one character at a time): write it as a "
                    f"list, e.g. [{shown(value)}]")
        return f"{kind_of(value)}, not a list"
    if kind == "dict":
        return "" if isinstance(value, dict) else f"{kind_of(value)}, not a mapping"
    return ""


def _range(entry: dict) -> str:
    low, high, above = entry.get("minimum"), entry.get("maximum"), entry.get("exclusive_minimum")
    noun = "an integer" if entry["type"] == "int" else "a number"
    if above is not None:
        return f"{noun} above {above}" + (f" and at most {high}" if high is not None else "")
    if low is not None and high is not None:
        return f"{noun} {low}..{high}"
    if low is not None:
        return f"{noun} >= {low}"
    return f"{noun} <= {high}" if high is not None else noun


def allowed_text(name: str) -> str:
    """What a known variable accepts, in words."""
    entry = VARIABLES[name]
    if "choices" in entry:
        return ", ".join(map(str, entry["choices"])) + (f" ({entry['note']})" if entry.get("note") else "")
    if entry.get("grammar"):
        text = GRAMMARS[entry["grammar"]][1]
        return f"a list, each element {text}" if entry["type"] == "list" else text
    if entry["type"] in ("int", "float"):
        return _range(entry)
    if entry["type"] == "bool":
        return "true or false"
    if entry["type"] == "list" and entry.get("elements"):
        return f"a list of {_TYPE_NAMES[entry['elements']]}s"
    return _TYPE_NAMES.get(entry["type"], entry["type"])


def value_problems(name: str, value, written=None, source: str = "") -> list[tuple[str, str]]:
    """Every problem of ``value`` for the known variable ``name``: [(what is wrong, what is allowed)]."""
    entry = VARIABLES[name]
    big = oversized(value)
    if big:
        return [(big, allowed_text(name))]
    what = type_problem(entry, value, written, source)
    if what:
        return [(what, allowed_text(name))]
    problems = []
    if "choices" in entry and value not in entry["choices"]:
        return [(f"not {entry.get('choice_noun', 'one of the choices')}", allowed_text(name))]
    if entry["type"] in ("int", "float"):
        low, high, above = entry.get("minimum"), entry.get("maximum"), entry.get("exclusive_minimum")
        if ((low is not None and value < low) or (high is not None and value > high)
                or (above is not None and value <= above)):
            problems.append(("out of range", _range(entry)))
    grammar = entry.get("grammar")
    if entry["type"] == "list":
        element = entry.get("elements")
        for item in value:
            if element and not isinstance(item, str):
                problems.append((f"element {shown(item)} is {kind_of(item)}, not a string", allowed_text(name)))
            elif grammar:
                what = GRAMMARS[grammar][0](item)
                if what:
                    problems.append((f"element {shown(item)}: {what}", GRAMMARS[grammar][1]))
    elif grammar:
        what = GRAMMARS[grammar][0](value)
        if what:
            problems.append((what, GRAMMARS[grammar][1]))
    return problems
