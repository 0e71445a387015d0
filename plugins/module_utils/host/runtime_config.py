# Copyright: kube-accel contributors
# Apache License 2.0
"""Settings of the NVIDIA container runtime's own config file (``/etc/nvidia-container-runtime/config.toml``).

The runtime decides which GPUs a container gets from this file (nvidia-container-toolkit v1.20.2
``internal/config/image/cuda_image.go`` ``VisibleDevices``): ``accept-nvidia-visible-devices-envvar-when-unprivileged``
(default true) lets any container without CAP_SYS_ADMIN name GPUs in ``NVIDIA_VISIBLE_DEVICES``, and
``accept-nvidia-visible-devices-as-volume-mounts`` (default false) reads the device plugin's ``volume-mounts``
allocation (``/dev/null`` bind-mounted under ``/var/run/nvidia-container-devices``). kube-accel sets both keys of the
root table and leaves every other key, comment and the file's layout as the owner wrote them.

``merge(text, settings, path)`` returns the new text. It edits lines in place: an active ``key = ...`` line of the
root table is rewritten, else a commented default (``#key = ...``, as NVIDIA's package writes them) becomes the
active line where it stands (where ``nvidia-ctk config --set`` puts it), else the line is added at the end of the
root table. The result is parsed again and must equal the old file with only those keys changed; anything else is an
error and nothing is written. ``tests/conformance/test_nvidia_ctk.py`` compares it with ``nvidia-ctk config --set
--in-place`` (v1.20.2, NVIDIA's writer) on the same inputs.

Kept Python 3.9 compatible (tomllib, else python3-toml) like the rest of the host-side code.
"""

from __future__ import annotations

import json
import re

try:
    import tomllib as _parser
except ImportError:  # Python < 3.11: the distro's python3-toml (the role installs it)
    try:
        import toml as _parser
    except ImportError:
        _parser = None

# The root table of the toolkit's config and each key's type (v1.20.2 api/config/v1/config.go, type Config).
ROOT_KEYS = {
    "disable-require": bool,
    "swarm-resource": str,
    "accept-nvidia-visible-devices-envvar-when-unprivileged": bool,
    "accept-nvidia-visible-devices-as-volume-mounts": bool,
    "supported-driver-capabilities": str,
}
DEFAULT_PATH = "/etc/nvidia-container-runtime/config.toml"

_HEADER = re.compile(r"^\s*\[")
_BLANK = re.compile(r"^\s*$")


def loads(text: str) -> dict:
    if _parser is None:
        raise RuntimeError("no TOML parser on the host (Python >= 3.11 or python3-toml needed)")
    return _parser.loads(text)


def check_settings(settings: object) -> dict:
    """The settings, or ValueError naming the key or value that the toolkit's root table does not take."""
    if not isinstance(settings, dict) or not settings:
        raise ValueError(f"settings: {settings!r} is not a mapping of root-table keys to values")
    for key, value in settings.items():
        kind = ROOT_KEYS.get(key)
        if kind is None:
            raise ValueError(f"settings: {key!r} is not a key of the NVIDIA container runtime's root table; allowed: "
                             + ", ".join(sorted(ROOT_KEYS)))
        if not isinstance(value, kind):  # the kinds are bool and str: an int is neither
            raise ValueError(f"settings.{key}: {value!r} ({type(value).__name__}) is not what the toolkit reads "
                             f"there; allowed: a {kind.__name__}")
    return settings


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value, ensure_ascii=False)


def _root_end(lines: list[str]) -> int:
    """Index of the first table header (the end of the root table): lines inside a multi-line string or array of
    the root table are skipped; the parse check in merge() catches what this scan gets wrong."""
    depth = 0
    quote = None
    for i, line in enumerate(lines):
        if quote is None and depth == 0 and _HEADER.match(line):
            return i
        j = 0
        while j < len(line):
            if quote:
                if line.startswith(quote, j):
                    j += len(quote)
                    quote = None
                    continue
                if quote == '"' and line[j] == "\\":
                    j += 2
                    continue
                j += 1
                continue
            c = line[j]
            if c == "#":
                break
            for q in ('"""', "'''", '"', "'"):
                if line.startswith(q, j):
                    quote = q
                    j += len(q)
                    break
            else:
                depth += {"[": 1, "]": -1}.get(c, 0)
                j += 1
        if quote in ('"', "'"):  # a one-line string never spans lines
            quote = None
    return len(lines)


def _key_line(key: str, commented: bool) -> re.Pattern:
    name = "(?:" + re.escape(key) + "|" + re.escape(json.dumps(key)) + ")"
    return re.compile(r"^\s*" + (r"#\s*" if commented else "") + name + r"\s*=")


def merge(text: str | None, settings: dict, path: str = DEFAULT_PATH) -> str:
    """The config text with ``settings`` (root-table keys) applied; ``text`` None for a file that does not exist."""
    check_settings(settings)
    text = text or ""
    try:
        before = loads(text)
    except Exception as e:  # noqa: BLE001 -- tomllib and toml raise different types
        raise ValueError(f"{path} is not valid TOML ({e}); nothing written: fix or remove it") from e
    if all(key in before and before[key] == value for key, value in settings.items()):
        return text
    lines = text.splitlines()
    for key, value in settings.items():
        if key in before and before[key] == value:
            continue
        new = f"{key} = {_toml_value(value)}"
        end = _root_end(lines)
        active = [i for i in range(end) if _key_line(key, False).match(lines[i])]
        commented = [i for i in range(end) if _key_line(key, True).match(lines[i])]
        if active:
            lines[active[0]] = new
        elif commented:
            lines[commented[0]] = new
        else:
            at = end
            while at > 0 and _BLANK.match(lines[at - 1]):
                at -= 1
            lines[at:at] = [new] + ([""] if at < len(lines) and at == end and end < len(lines) else [])
    result = "\n".join(lines) + "\n"
    expected = dict(before)
    expected.update(settings)
    try:
        after = loads(result)
    except Exception as e:  # noqa: BLE001
        raise ValueError(f"{path}: setting {', '.join(settings)} in place would break the file ({e}); nothing "
                         "written") from e
    if after != expected:
        raise ValueError(f"{path}: setting {', '.join(settings)} in place would change other keys too; nothing "
                         "written (set them with nvidia-ctk config --set, then run again)")
    return result


def holds_only(text: str | None, settings: dict) -> bool:
    """Whether the file holds exactly ``settings`` and nothing else: what ``merge`` writes where there was no file.

    decommission removes such a file (kube-accel created it: no toolkit package wrote one); a file with anything
    more is the toolkit's or its owner's, and stays.
    """
    check_settings(settings)
    if text is None:
        return False
    try:
        return loads(text) == settings
    except Exception:  # noqa: BLE001 -- not TOML: not what kube-accel wrote
        return False
