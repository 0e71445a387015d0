# Copyright: kube-accel contributors
# Apache License 2.0
"""Kubernetes name rules, for every inventory value that becomes a label, namespace, Secret or chart name.

The rules are those of k8s.io/apimachinery/pkg/util/validation (``IsDNS1123Label``, ``IsDNS1123Subdomain``,
``IsValidLabelValue``, ``IsQualifiedName``), written out from the Kubernetes "Object Names and IDs" and "Labels and
Selectors" documentation (whole-string matches: ``re.match`` with ``$`` would accept a trailing newline, which
apimachinery refuses; the conformance test found it). Each function returns what is wrong (empty string = valid), so
callers can put it in their own "field = value: what is wrong; allowed: ..." message. ``tests/conformance`` checks
these against the upstream Go functions on the same inputs.
"""

from __future__ import annotations

import re

DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253
LABEL_VALUE_MAX = 63
QUALIFIED_NAME_MAX = 63

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")

DNS1123_LABEL_ALLOWED = ("at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit "
                         "(RFC 1123 label)")
DNS1123_SUBDOMAIN_ALLOWED = ("at most 253 characters of lower-case letters, digits, '-' and '.', each dot-separated "
                             "part starting and ending with a letter or digit (RFC 1123 subdomain)")
LABEL_VALUE_ALLOWED = ("at most 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit "
                       "(Kubernetes label value)")
LABEL_KEY_ALLOWED = ("an optional DNS subdomain prefix and '/', then a name of at most 63 letters, digits, '-', '_' "
                     "and '.' starting and ending with a letter or digit (Kubernetes label key)")


def _name(value, pattern, maximum: int, kind: str) -> str:
    """A non-empty string of at most ``maximum`` characters matching ``pattern`` whole."""
    if not isinstance(value, str):
        return "not a string"
    if not value:
        return "empty"
    if len(value) > maximum:
        return f"{len(value)} characters, longer than {maximum}"
    return "" if pattern.fullmatch(value) else f"not an RFC 1123 {kind}"


def dns1123_label(value) -> str:
    return _name(value, _DNS1123_LABEL, DNS1123_LABEL_MAX, "label")


def dns1123_subdomain(value) -> str:
    return _name(value, _DNS1123_SUBDOMAIN, DNS1123_SUBDOMAIN_MAX, "subdomain")


def label_value(value) -> str:
    """A label value; empty is a valid label value (callers that need a name check emptiness themselves)."""
    if not isinstance(value, str):
        return "not a string"
    if len(value) > LABEL_VALUE_MAX:
        return f"{len(value)} characters, longer than {LABEL_VALUE_MAX}"
    return "" if _LABEL_VALUE.fullmatch(value) else "not a valid label value"


def label_key(value) -> str:
    if not isinstance(value, str):
        return "not a string"
    prefix, slash, name = value.rpartition("/")
    if slash:
        if not prefix:
            return "empty prefix before '/'"
        problem = dns1123_subdomain(prefix)
        if problem:
            return f"prefix {prefix!r}: {problem}"
    if not name:
        return "empty name"
    if len(name) > QUALIFIED_NAME_MAX:
        return f"name part {len(name)} characters, longer than {QUALIFIED_NAME_MAX}"
    return "" if _QUALIFIED_NAME.fullmatch(name) else "not a valid label key"


def labels(value) -> list[str]:
    """Problems of a label map, one text per bad key or value."""
    if not isinstance(value, dict):
        return ["not a mapping"]
    problems = []
    for key, val in value.items():
        key_problem = label_key(key)
        if key_problem:
            problems.append(f"key {key!r}: {key_problem}")
        value_problem = label_value(val)
        if value_problem:
            problems.append(f"value {val!r} of {key!r}: {value_problem}")
    return problems
