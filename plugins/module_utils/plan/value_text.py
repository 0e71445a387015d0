# Copyright: kube-accel contributors
# Apache License 2.0
"""How a value reads in a problem message: ``shown(value)``, a short, bounded rendering of any value (safe on YAML
alias bombs), and ``kind_of(value)``, what YAML loaded it as ("the string 'y'", "the number 4.0")."""

from __future__ import annotations

import reprlib

MAX_SHOWN = 120

_REPR = reprlib.Repr()
_REPR.maxstring = 60
_REPR.maxother = 60
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 6
_REPR.maxlevel = 3


def shown(value) -> str:
    """A bounded repr of ``value``: at most MAX_SHOWN characters, however large or deeply aliased the value."""
    if value is None:
        return "null"
    text = ("true" if value else "false") if isinstance(value, bool) else _REPR.repr(value)
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN - 3] + "..."


def kind_of(value) -> str:
    """How YAML loaded a value, for messages: "the string 'y'", "the number 4.0"."""
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if value is None:
        return "null (an empty YAML value)"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {shown(value)}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    return f"a {type(value).__name__}"
