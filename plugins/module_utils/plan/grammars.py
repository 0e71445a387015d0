# Copyright: kube-accel contributors
# Apache License 2.0
"""The grammar of each string setting that reaches a host file, a kernel command line, an apt/dnf source, a URL or a
Kubernetes object name: ``GRAMMARS`` maps a grammar name (an inventory variable's ``grammar``) to ``(check, allowed)``,
where ``check(value)`` says what is wrong ("" = fine) with a value that already has its variable's type. Nothing with
a newline, quote or shell metacharacter passes where the target does not allow it. ``plan.values`` applies them."""

from __future__ import annotations

import difflib
import ipaddress
import re
from decimal import Decimal, InvalidOperation

from ansible_collections.kube_accel.gpu.plugins.module_utils.common.constants import (
    DRA_DRIVER_VERSION,
    DRA_FEATURE_GATE_EXCLUDES,
    DRA_FEATURE_GATE_REQUIRES,
    DRA_FEATURE_GATES,
    MIN_KUBERNETES,
    POOL_DERIVED_NAMES,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import k8s_names as names
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.value_text import kind_of, shown

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
# The longest pool name whose derived object names (common.constants.POOL_DERIVED_NAMES) are all RFC 1123 labels.
POOL_NAME_MAX = names.DNS1123_LABEL_MAX - max(len(p.format(pool="")) for p in POOL_DERIVED_NAMES.values())
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


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
        return f"{kind_of(value)}, not a {unit} count or percentage"
    if isinstance(value, int):
        return "" if value >= 1 else f"{value} is not a {unit} count >= 1"
    if isinstance(value, str):
        match = REBOOT_PERCENT_RE.fullmatch(value)
        if match:
            return "" if 1 <= int(match.group(1)) <= 100 else f"{value!r} is not a percentage 1..100"
        if value.strip().isdigit():
            return f"{kind_of(value)}: write {value.strip()} without quotes for a {unit} count"
    return f"{kind_of(value)}, neither a {unit} count nor a percentage"


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
        return f"{kind_of(value)}: one node count or percentage"
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
            problems.append(f"value of {shown(key)} is {kind_of(val)}: label values are strings (quote it)")
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
            problems.append(f"the digest of {shown(key)} is {kind_of(digest)}, not \"sha256:\" and 64 hex digits")
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
            problems.append(f"the count of {shown(profile)} is {kind_of(count)}, not an integer")
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
        problems.append(f"cgroup_version is {kind_of(cgroup)}, not 1 or 2")
    containerd = value.get("containerd_version")
    version = r"[0-9]+\.[0-9]+\.[0-9]+"
    if containerd is not None and not (isinstance(containerd, str) and re.fullmatch(version, containerd)):
        problems.append(f"containerd_version is {kind_of(containerd)}, not a version such as \"1.7.24\"")
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
            problems.append(f"{name} is {kind_of(enabled)}, not true or false")
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
