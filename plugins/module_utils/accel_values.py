# Copyright: kube-accel contributors
# Apache License 2.0
"""Strict checks of one inventory value against its definition in ``accel_inventory.VARIABLES``.

Values are checked as written, never coerced: a boolean is a YAML boolean (``true``/``false``; YAML 1.1's
``yes``/``no``/``on``/``off`` load as booleans too), never the string ``"yes"`` or ``y``; an integer is never ``4.0``
or ``"7"``; a list is never a string (which a loop would walk one character at a time). Each string that reaches a
host file, a kernel command line, an apt/dnf source, a URL or a Kubernetes object name is checked against the exact
grammar of that target (``GRAMMARS``): nothing with a newline, quote or shell metacharacter passes where the target
does not allow it.

Public API:

- ``value_problems(name, value, written=None, source="") -> [(what, allowed)]``: every problem of one value of a known
  variable. ``written`` is the value's text as it stands in its file (it explains YAML surprises such as ``1.30``
  read as ``1.3``), ``source`` how the value came in (``"extra"``: ``-e key=value``, which passes strings; ``"ini"``:
  an INI ``:vars`` section, whose values are strings).
- ``shown(value)``: a short, bounded rendering of any value for messages (safe on YAML alias bombs).
- ``oversized(value)``: a description when a value holds more items than any setting could (YAML aliases expand
  exponentially), checked before anything walks it.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
import reprlib
from decimal import Decimal, InvalidOperation

from ansible_collections.kube_accel.gpu.plugins.module_utils import accel_k8s_names as names
from ansible_collections.kube_accel.gpu.plugins.module_utils.accel_constants import (
    DRA_DRIVER_VERSION,
    DRA_FEATURE_GATE_EXCLUDES,
    DRA_FEATURE_GATE_REQUIRES,
    DRA_FEATURE_GATES,
    MIN_KUBERNETES,
    POOL_DERIVED_NAMES,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.accel_inventory import VARIABLES

# A value with more nodes than this is no setting of kube-accel's (the largest, a MIG geometry or a label map, has
# tens): counted without expanding shared YAML aliases, so a "billion laughs" costs microseconds.
MAX_NODES = 2000
MAX_SHOWN = 120

_REPR = reprlib.Repr()
_REPR.maxstring = 60
_REPR.maxother = 60
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 6
_REPR.maxlevel = 3

# Where an image registry prefix is spliced: registry[:port][/path], as a container image reference's domain and
# path components are written (no scheme, no tag or digest, no trailing "/").
REGISTRY_PREFIX_RE = re.compile(
    r"[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*(:[0-9]{1,5})?"
    r"(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*")
SEMVER_RE = re.compile(r"v?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?")
KUBERNETES_VERSION_RE = re.compile(r"v?1\.(0|[1-9][0-9]*)(\.(0|[1-9][0-9]*))?")
# An https repository URL as apt's deb822 "URIs:" field and a dnf baseurl take it: host[:port] and a path of
# unreserved characters; no whitespace, quotes, "$" (apt and dnf expand variables), query or fragment.
HTTPS_URL_RE = re.compile(r"https://[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?(/[A-Za-z0-9._~%+/-]*)?")
OCI_URL_RE = re.compile(r"oci://[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?(/[A-Za-z0-9._~/-]*)?")
PCI_ID_RE = re.compile(r"[0-9a-fA-F]{4}:[0-9a-fA-F]{4}")
DRIVER_BRANCH_RE = re.compile(r"[0-9]{3}")
MIG_PROFILE_RE = re.compile(r"[1-9][0-9]*(c\.[1-9][0-9]*)?g\.[1-9][0-9]*gb(\+[a-z0-9]+)*")
FILE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
REBOOT_PERCENT_RE = re.compile(r"([0-9]+)%")
# The longest pool name whose derived object names (accel_constants.POOL_DERIVED_NAMES) are all RFC 1123 labels.
POOL_NAME_MAX = names.DNS1123_LABEL_MAX - max(len(p.format(pool="")) for p in POOL_DERIVED_NAMES.values())
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_TYPE_NAMES = {"str": "a string", "path": "a path (string)", "int": "an integer", "float": "a number",
               "bool": "a boolean", "list": "a list", "dict": "a mapping"}
_TRUE_WORDS = ("y", "yes", "true", "on", "1", "t")
_FALSE_WORDS = ("n", "no", "false", "off", "0", "f")


def shown(value) -> str:
    """A bounded repr of ``value``: at most MAX_SHOWN characters, however large or deeply aliased the value."""
    if value is None:
        return "null"
    text = ("true" if value else "false") if isinstance(value, bool) else _REPR.repr(value)
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN - 3] + "..."


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


def _kind(value) -> str:
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
        return f"{_kind(value)}, not {_TYPE_NAMES[kind]}: give a value or remove the line"
    if kind in ("str", "path"):
        if isinstance(value, str):
            return ""
        if entry.get("grammar") == "driver_branch" and isinstance(value, int) and not isinstance(value, bool):
            return ""  # 550 and "550" name the same branch; no digit is lost
        return f"{_kind(value)}, not a string" + _written_hint(value, written)
    if kind == "bool":
        if isinstance(value, bool):
            return ""
        if isinstance(value, str) and value.strip().lower() in _TRUE_WORDS + _FALSE_WORDS:
            word = "true" if value.strip().lower() in _TRUE_WORDS else "false"
            word = word.capitalize() if source == "ini" else word
            why = " (YAML reads y and n as strings)" if value.strip().lower() in ("y", "n") else ""
            return f"{_kind(value)}, not a boolean: write {word} without quotes{why}" + _string_hint(source)
        return f"{_kind(value)}, not a boolean"
    if kind == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            return ""
        if isinstance(value, float):
            return f"{_kind(value)}, not an integer (a decimal point makes it a float)"
        if isinstance(value, str) and re.fullmatch(r"\s*-?[0-9]+\s*", value):
            return f"{_kind(value)}, not an integer: write {value.strip()} without quotes" + _string_hint(source)
        return f"{_kind(value)}, not an integer"
    if kind == "float":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return ""
        if isinstance(value, str):
            try:
                float(value)
            except ValueError:
                return f"{_kind(value)}, not a number"
            return f"{_kind(value)}, not a number: write {value.strip()} without quotes" + _string_hint(source)
        return f"{_kind(value)}, not a number"
    if kind == "list":
        if isinstance(value, list):
            return ""
        if isinstance(value, str):
            return (f"{_kind(value)}, not a list (a loop would take it one character at a time): write it as a "
                    f"list, e.g. [{shown(value)}]")
        return f"{_kind(value)}, not a list"
    if kind == "dict":
        return "" if isinstance(value, dict) else f"{_kind(value)}, not a mapping"
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


# --- Grammars: (check(value) -> what is wrong or "", allowed). The value already has its variable's type. ---------


def _line(value) -> str:
    return "contains a newline or control character" if _CONTROL.search(value) else ""


def _path(value) -> str:
    if _CONTROL.search(value):
        return "contains a newline or control character"
    return f"{len(value)} characters, longer than 4096" if len(value) > 4096 else ""


def _kubernetes_version(value) -> str:
    if not KUBERNETES_VERSION_RE.fullmatch(value):
        return "not a Kubernetes version"
    minor = int(value.lstrip("v").split(".")[1])
    if (1, minor) < MIN_KUBERNETES:
        return (f"older than every kube-accel chart accepts (kubeVersion >= {MIN_KUBERNETES[0]}.{MIN_KUBERNETES[1]}): "
                "the run would fail at the first helm install, after the hosts changed")
    return ""


def _namespace(value) -> str:
    what = names.dns1123_label(value)
    return f"{what}: not a namespace name" if what else ""


def _namespace_or_empty(value) -> str:
    return "" if value == "" else _namespace(value)


def _registry_prefix(value) -> str:
    if value == "" or REGISTRY_PREFIX_RE.fullmatch(value):
        return ""
    return "not a registry prefix (it replaces the registry of every image reference)"


def _secret_name(value) -> str:
    what = names.dns1123_label(value)
    return f"{what}: not a Secret name the charts accept" if what else ""


def _cidr(value) -> str:
    try:
        ipaddress.ip_network(value, strict=True)
    except ValueError as exc:
        return f"not a network in CIDR notation ({exc})"
    return "" if "/" in value else "no prefix length (write /32 for one address)"


def _count_or_percent(value, unit: str) -> str:
    """One batch size: a count of ``unit`` (hosts, nodes) >= 1 or a percentage "1%".."100%"."""
    if isinstance(value, bool):
        return f"{_kind(value)}, not a {unit} count or percentage"
    if isinstance(value, int):
        return "" if value >= 1 else f"{value} is not a {unit} count >= 1"
    if isinstance(value, str):
        match = REBOOT_PERCENT_RE.fullmatch(value)
        if match:
            return "" if 1 <= int(match.group(1)) <= 100 else f"{value!r} is not a percentage 1..100"
        if value.strip().isdigit():
            return f"{_kind(value)}: write {value.strip()} without quotes for a {unit} count"
    return f"{_kind(value)}, neither a {unit} count nor a percentage"


def _reboot_serial(value) -> str:
    """Ansible's serial: one batch size, or a list of them (batches that grow)."""
    if isinstance(value, list):
        if not value:
            return "an empty list"
        return next((what for what in (_count_or_percent(one, "host") for one in value) if what), "")
    return _count_or_percent(value, "host")


def _max_unavailable(value) -> str:
    """A DaemonSet's rollingUpdate.maxUnavailable as kube-accel passes it: one count or percentage, never a list."""
    if isinstance(value, list):
        return f"{_kind(value)}: one node count or percentage"
    return _count_or_percent(value, "node")


def _https_url(value) -> str:
    if HTTPS_URL_RE.fullmatch(value):
        return ""
    if value.startswith("http://"):
        return "plain http: packages and keys would travel unauthenticated"
    if _CONTROL.search(value) or re.search(r"[\s\"'`$\\;&|<>(){}]", value):
        return "contains whitespace, a quote or a shell or apt/dnf metacharacter"
    return "not an https URL"


def _chart_source(value) -> str:
    if value.startswith(("http://", "https://")):
        return _https_url(value)
    if value.startswith("oci://"):
        return "" if OCI_URL_RE.fullmatch(value) else "not an oci:// registry reference"
    if "://" in value:
        return "an unsupported URL scheme"
    return _path(value) if value else "empty"


def _chart_version(value) -> str:
    return "" if SEMVER_RE.fullmatch(value) else "not a chart version"


def _labels(value) -> str:
    problems = []
    for key, val in value.items():
        if not isinstance(val, str):
            problems.append(f"value of {shown(key)} is {_kind(val)}: label values are strings (quote it)")
            continue
        problems.extend(names.labels({key: val}))
    return "; ".join(problems)


IMAGE_KEY_RE = re.compile(r"[a-z0-9]+([._/-][a-z0-9]+)*:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
DIGEST_RE = re.compile(r"sha256:[a-f0-9]{64}")


def _image_digests(value) -> str:
    problems = []
    for key, digest in value.items():
        if not isinstance(key, str) or not IMAGE_KEY_RE.fullmatch(key):
            problems.append(f"key {shown(key)} is not \"repository:tag\" without the registry host")
        if not isinstance(digest, str) or not (digest == "" or DIGEST_RE.fullmatch(digest)):
            problems.append(f"the digest of {shown(key)} is {_kind(digest)}, not \"sha256:\" and 64 hex digits")
    return "; ".join(problems)


def _pool_name(value) -> str:
    what = names.dns1123_label(value)
    if what:
        return what
    for kind, pattern in POOL_DERIVED_NAMES.items():
        derived = pattern.format(pool=value)
        what = names.dns1123_label(derived)
        if what:
            return f"the {kind} name {derived!r} it derives is {what}"
    return ""


def _mig_geometry(value) -> str:
    if not value:
        return "an empty mapping (leave accel_mig_geometry unset for no MIG)"
    problems = []
    for profile, count in value.items():
        if not isinstance(profile, str) or not MIG_PROFILE_RE.fullmatch(profile):
            problems.append(f"{shown(profile)} is not a MIG profile name")
        if isinstance(count, bool) or not isinstance(count, int):
            problems.append(f"the count of {shown(profile)} is {_kind(count)}, not an integer")
        elif count < 1:
            problems.append(f"the count of {shown(profile)} is {count}, not at least 1")
    return "; ".join(problems)


def _driver_branch(value) -> str:
    text = str(value)
    if DRIVER_BRANCH_RE.fullmatch(text):
        return ""
    if re.fullmatch(r"[0-9]{3}-(open|server|server-open)", text):
        return "a branch with a package flavour: the flavour is accel_driver_flavor's"
    if re.fullmatch(r"[0-9]{3}(\.[0-9]+)+", text):
        return f"a driver version, not a branch (the branch is {text[:3]!r}; nvidia_driver_version pins a version)"
    if _CONTROL.search(text):
        return "contains a newline or control character"
    return "not a driver branch"


def _pci_id(value) -> str:
    return "" if PCI_ID_RE.fullmatch(value) else "not a PCI vendor:device ID"


def _file_name(value) -> str:
    return "" if FILE_NAME_RE.fullmatch(value) else "not a plain file name"


def _host_runtime(value) -> str:
    problems = []
    for key in sorted(set(value) - {"cgroup_version", "containerd_version"}):
        problems.append(f"unknown key {shown(key)}")
    cgroup = value.get("cgroup_version")
    if cgroup is not None and (isinstance(cgroup, bool) or cgroup not in (1, 2)):
        problems.append(f"cgroup_version is {_kind(cgroup)}, not 1 or 2")
    containerd = value.get("containerd_version")
    version = r"[0-9]+\.[0-9]+\.[0-9]+"
    if containerd is not None and not (isinstance(containerd, str) and re.fullmatch(version, containerd)):
        problems.append(f"containerd_version is {_kind(containerd)}, not a version such as \"1.7.24\"")
    return "; ".join(problems)


# A Kubernetes resource.Quantity as k8s.io/apimachinery parses it (pkg/api/resource/quantity.go ParseQuantity: a signed
# decimal number, then a binary-SI suffix, a decimal-SI suffix or a decimal exponent).
QUANTITY_RE = re.compile(r"(?P<number>[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+))"
                         r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?")
_BINARY_SI = {"Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60}
_DECIMAL_SI = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1), "k": Decimal("1e3"),
               "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"), "P": Decimal("1e15"),
               "E": Decimal("1e18")}
# The DRA driver hands MPS a pinned-memory limit in whole MiB (sharing.go limit.Megabyte: bytes / 1024 / 1024) and
# refuses a limit that comes to 0 MiB when it prepares a claim ("value set too low"): 1Mi is the least it takes. Its
# byte count is an int64 (Quantity.Value).
MIN_PINNED_MEMORY_BYTES = 2 ** 20
MAX_QUANTITY_BYTES = 2 ** 63 - 1


def quantity_bytes(text: str) -> int | None:
    """The value of a Kubernetes quantity string rounded up to an integer, as Quantity.Value() gives it; None when
    the text is no quantity."""
    match = QUANTITY_RE.fullmatch(text)
    if not match:
        return None
    suffix = match.group("suffix") or ""
    try:
        number = Decimal(match.group("number"))
        if suffix in _BINARY_SI:
            value = number * _BINARY_SI[suffix]
        elif suffix in _DECIMAL_SI:
            value = number * _DECIMAL_SI[suffix]
        else:
            value = number.scaleb(int(suffix[1:]))
        return int(value.to_integral_value(rounding="ROUND_CEILING"))
    except (InvalidOperation, OverflowError, ValueError):
        return None


def _memory_quantity(value) -> str:
    if _CONTROL.search(value):
        return "contains a newline or control character"
    found = quantity_bytes(value)
    if found is None:
        return "not a Kubernetes quantity"
    if found <= 0:
        return "not a positive quantity"
    if found < MIN_PINNED_MEMORY_BYTES:
        return (f"{found} bytes, less than 1Mi: the DRA driver passes the limit in whole MiB and refuses a claim "
                "whose limit comes to 0")
    if found > MAX_QUANTITY_BYTES:
        return "more bytes than the driver's int64 count holds"
    return ""


def _dra_feature_gates(value) -> str:
    problems = []
    for name, enabled in value.items():
        if name not in DRA_FEATURE_GATES:
            match = difflib.get_close_matches(str(name), list(DRA_FEATURE_GATES), n=1, cutoff=0.6)
            hint = f" (did you mean {match[0]}?)" if match else ""
            problems.append(f"unknown gate {shown(name)}{hint}: the driver's components exit at start on it")
        elif not isinstance(enabled, bool):
            problems.append(f"{name} is {_kind(enabled)}, not true or false")
    if problems:
        return "; ".join(problems)
    state = {name: spec[0] for name, spec in DRA_FEATURE_GATES.items()} | dict(value)
    for gate, needed in DRA_FEATURE_GATE_REQUIRES:
        if state[gate] and not state[needed]:
            problems.append(f"{gate} on needs {needed} on (the driver refuses to start otherwise)")
    for gate, other in DRA_FEATURE_GATE_EXCLUDES:
        if state[gate] and state[other]:
            problems.append(f"{gate} and {other} are mutually exclusive in the driver (it refuses to start)")
    return "; ".join(problems)


def dra_feature_gates_text() -> str:
    """The DRA driver's feature gates in words, alpha ones marked."""
    return ", ".join(f"{name} ({stage.lower()}, default {'true' if default else 'false'})"
                     for name, (default, stage) in DRA_FEATURE_GATES.items())


GRAMMARS = {
    "line": (_line, "one line of text (no newline or control character)"),
    "path": (_path, "a path without newlines or control characters"),
    "kubernetes_version": (_kubernetes_version, f"a version such as \"1.36\" or \"v1.36.3\", quoted, "
                                                f"{MIN_KUBERNETES[0]}.{MIN_KUBERNETES[1]} or newer"),
    "namespace": (_namespace, names.DNS1123_LABEL_ALLOWED),
    "namespace_or_empty": (_namespace_or_empty, f"empty, or {names.DNS1123_LABEL_ALLOWED}"),
    "registry_prefix": (_registry_prefix, "host[:port][/path], e.g. \"registry.example.com:5000/mirror\": no "
                                          "scheme, tag, digest or trailing \"/\"; empty for the upstream registries"),
    "secret_name": (_secret_name, names.DNS1123_LABEL_ALLOWED),
    "cidr": (_cidr, "CIDRs such as \"10.0.0.10/32\" or \"10.0.0.0/24\" (no host bits set)"),
    "reboot_serial": (_reboot_serial, "a host count >= 1, a percentage \"1%\"..\"100%\", or a list of those "
                                      "(Ansible serial batches)"),
    "max_unavailable": (_max_unavailable, "a node count >= 1 or a percentage \"1%\"..\"100%\" (a DaemonSet's "
                                          "rollingUpdate.maxUnavailable)"),
    "https_url": (_https_url, "an https:// URL of host[:port]/path (letters, digits, . _ ~ % + - /), no query"),
    "chart_source": (_chart_source, "an https:// or oci:// chart repository, or a local chart path"),
    "chart_version": (_chart_version, "a semantic version such as \"v26.7.0\" (Helm chart versions are SemVer 2)"),
    "labels": (_labels, f"label keys: {names.LABEL_KEY_ALLOWED}; values: strings, {names.LABEL_VALUE_ALLOWED}"),
    "pool_name": (_pool_name, f"an RFC 1123 label of at most {POOL_NAME_MAX} lower-case letters, digits and '-', "
                  "starting and ending with a letter or digit (it is part of the names "
                  + ", ".join(p.format(pool="<pool>") for p in POOL_DERIVED_NAMES.values()) + ")"),
    "mig_geometry": (_mig_geometry, "a mapping of MIG profile -> count per GPU, e.g. {'3g.40gb': 1, '1g.10gb': 4}"),
    "driver_branch": (_driver_branch, "a driver branch of three digits, e.g. \"550\""),
    "pci_id": (_pci_id, "4 hex digits, a colon, 4 hex digits, e.g. \"10de:20b5\""),
    "file_name": (_file_name, "a file name of letters, digits, '.', '_' and '-'"),
    "image_digests": (_image_digests, "a mapping of \"repository:tag\" (e.g. \"projecthami/hami:v2.10.0\") to "
                                      "\"sha256:\" and 64 lower-case hex digits, or \"\" to pull by tag"),
    "host_runtime": (_host_runtime, "{cgroup_version: 1 or 2, containerd_version: \"X.Y.Z\"}"),
    "memory_quantity": (_memory_quantity, "a Kubernetes quantity of at least 1Mi, quoted, e.g. \"10Gi\" or "
                                          "\"512Mi\" (binary suffixes Ki Mi Gi Ti Pi Ei, decimal k M G T P E)"),
    "dra_feature_gates": (_dra_feature_gates, f"a mapping of the DRA driver v{DRA_DRIVER_VERSION} feature gates to "
                                              f"true or false: {dra_feature_gates_text()}"),
}


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
                problems.append((f"element {shown(item)} is {_kind(item)}, not a string", allowed_text(name)))
            elif grammar:
                what = GRAMMARS[grammar][0](item)
                if what:
                    problems.append((f"element {shown(item)}: {what}", GRAMMARS[grammar][1]))
    elif grammar:
        what = GRAMMARS[grammar][0](value)
        if what:
            problems.append((what, GRAMMARS[grammar][1]))
    return problems
