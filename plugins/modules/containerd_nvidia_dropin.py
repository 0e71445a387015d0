#!/usr/bin/python
# Copyright: kube-accel contributors
# Apache-2.0
"""Write containerd's NVIDIA runtime drop-in and import it from the main config."""

from __future__ import annotations

DOCUMENTATION = r"""
module: containerd_nvidia_dropin
short_description: Add the NVIDIA runtime to containerd through a conf.d drop-in
description:
  - The layout comes from the running containerd (its C(config dump) version), not from the file; a config.toml
    without a version line is version 1, as containerd and nvidia-ctk read it. containerd 2.x merges imported plugin
    sections key by key, so there the drop-in holds only the NVIDIA runtime (version 2 when the main file still says
    2, since containerd migrates the merged config only then). containerd 1.x replaces whole plugin sections, so
    there it carries the CRI section resolved by C(containerd config dump) plus the runtime, and refuses (naming the
    registries, never the values) when that section holds registry credentials. Drop-ins are written 0600;
    credentials are masked in the diff and in every error.
  - Adds the drop-in glob to C(imports) of the main config, creating a minimal main config when there is none.
  - With O(manage_imports=false) the main config belongs to another program that renders it at every start (k3s and
    RKE2 write C(/var/lib/rancher/<k3s or rke2>/agent/etc/containerd/config.toml) from their Go template, whose base
    imports C(config-v3.toml.d/*.toml) beside it since k3s pull request 13680, 2026). The module then only reads it;
    the main config must exist and one of its C(imports) must match the drop-in, else the module fails and writes
    nothing. Where the drop-in would have to copy the CRI section (containerd 1.x) it refuses, since the copy would
    freeze the distribution's generated settings.
  - The result is validated by C(containerd config dump) before anything is written, when containerd is installed.
author: kube-accel contributors (@kube-accel)
options:
  main_config: {type: path, default: /etc/containerd/config.toml, description: Main containerd config.}
  dropin: {type: path, default: /etc/containerd/conf.d/99-nvidia.toml, description: Drop-in file written.}
  imports_glob: {type: str, default: /etc/containerd/conf.d/*.toml, description: Pattern added to imports.}
  manage_imports:
    type: bool
    default: true
    description:
      - Add O(imports_glob) to the main config's imports (and create a missing main config).
      - false where the Kubernetes distribution renders the main config (k3s, RKE2) - it is read, never written, and
        must already import the drop-in.
  runtime_name: {type: str, default: nvidia, description: Runtime handler name.}
  binary_name: {type: path, default: /usr/bin/nvidia-container-runtime, description: OCI runtime binary.}
  set_as_default: {type: bool, default: false, description: Make the runtime containerd's default.}
  systemd_cgroup: {type: bool, description: SystemdCgroup for the runtime; inherited from runc when unset.}
  config_version:
    {type: int, default: 0, choices: [0, 2, 3], description: 2 or 3; 0 detects it from the main config or containerd.}
  containerd_binary: {type: str, default: containerd, description: containerd executable.}
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode: {support: full}
  diff_mode: {support: full}
  platform:
    support: full
    platforms: posix
"""

EXAMPLES = r"""
- name: NVIDIA runtime for containerd
  kube_accel.gpu.containerd_nvidia_dropin:
    set_as_default: true

- name: NVIDIA runtime for k3s's containerd (its drop-in directory; config.toml is k3s's)
  kube_accel.gpu.containerd_nvidia_dropin:
    main_config: /var/lib/rancher/k3s/agent/etc/containerd/config.toml
    dropin: /var/lib/rancher/k3s/agent/etc/containerd/config-v3.toml.d/99-nvidia.toml
    manage_imports: false
    containerd_binary: /var/lib/rancher/k3s/data/current/bin/containerd
"""

RETURN = r"""
config_version: {type: int, returned: always, description: containerd config version used.}
validated: {type: bool, returned: always, description: Whether containerd itself parsed the result.}
"""

import copy
import json
import os
import posixpath
import re
import tempfile
from pathlib import PurePosixPath

from ansible.module_utils.basic import AnsibleModule

# Python 3.11+ has tomllib; older hosts (RHEL 9, Ubuntu 22.04) the toml package (python3-toml, the role installs it).
_toml = None
try:
    import tomllib
except ImportError:
    tomllib = None
    try:
        import toml as _toml
    except ImportError:  # neither: loads() says so
        _toml = None

CRI = {2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}
BARE = re.compile(r"^[A-Za-z0-9_-]+$")


def loads(text):
    if tomllib is not None:
        return tomllib.loads(text)
    if _toml is not None:
        return _toml.loads(text)
    raise RuntimeError("no TOML parser on the host (Python >= 3.11 or python3-toml needed)")


def key(k):
    return k if BARE.match(k) else json.dumps(k)


def value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ", ".join(value(i) for i in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{key(k)} = {value(i)}" for k, i in v.items()) + "}"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def dumps(doc, path=()):
    """TOML text for a dict; deterministic so an unchanged input gives the same bytes."""
    out = []
    tables = []
    for k, v in doc.items():
        if isinstance(v, dict) or (isinstance(v, list) and v and all(isinstance(i, dict) for i in v)):
            tables.append((k, v))
        else:
            out.append(f"{key(k)} = {value(v)}")
    for k, v in tables:
        sub = path + (k,)
        name = ".".join(key(p) for p in sub)
        if isinstance(v, list):
            for item in v:
                out.append(f"\n[[{name}]]")
                out.append(dumps(item, sub))
        else:
            out.append(f"\n[{name}]")
            body = dumps(v, sub)
            if body:
                out.append(body)
    return "\n".join(x for x in out if x != "")


def read(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return None


def with_imports(text, version, glob):
    """Main config text whose top-level imports include glob, edited in place to keep the owner's layout."""
    if text is None:
        return f"version = {version}\nimports = [{json.dumps(glob)}]\n"
    current = loads(text).get("imports", [])
    if glob in current:
        return text
    new = "imports = [" + ", ".join(json.dumps(i) for i in current + [glob]) + "]"
    pattern = re.compile(r"^imports\s*=\s*\[.*?\]", re.M | re.S)
    if pattern.search(text):
        return pattern.sub(new, text, count=1)
    version_line = re.compile(r"^version\s*=.*$", re.M)
    if version_line.search(text):
        return version_line.sub(lambda m: m.group(0) + "\n" + new, text, count=1)
    return new + "\n" + text


def imported(main_doc, main_path, dropin):
    """The import pattern of main_doc that brings in the drop-in file, or None. containerd resolves a relative pattern
    against the main config's directory and expands it with Go's filepath.Glob, whose * stops at a slash: so does
    PurePosixPath.match on a whole absolute pattern."""
    for pattern in main_doc.get("imports", []) or []:
        if not isinstance(pattern, str):
            continue
        full = pattern if posixpath.isabs(pattern) else posixpath.join(posixpath.dirname(main_path), pattern)
        if PurePosixPath(posixpath.normpath(dropin)).match(posixpath.normpath(full)):
            return pattern
    return None


def check_rendered_main(main_text, main_doc, p, full_copy):
    """With manage_imports false: the main config another program renders must exist and import the drop-in."""
    if main_text is None:
        raise ValueError(f"{p['main_config']} does not exist: the Kubernetes distribution writes it from its template "
                         "when its service starts (start k3s or RKE2 once, or set the path where it writes it); "
                         "nothing written")
    if imported(main_doc, p["main_config"], p["dropin"]) is None:
        raise ValueError(f"{p['main_config']} imports {main_doc.get('imports', [])!r}, nothing that matches "
                         f"{p['dropin']}: this release renders no drop-in directory (k3s and RKE2 import "
                         "config-v3.toml.d/*.toml beside config.toml only in releases with k3s pull request 13680, "
                         "2026, or config.toml.d/*.toml for a version 2 template), or an operator's template "
                         "replaced the base template without its imports; upgrade, add the imports line to the "
                         "template, or point the drop-in at the directory it imports; nothing written")
    if full_copy:
        raise ValueError(f"{p['main_config']} is read by containerd 1.x, which replaces whole plugin sections from "
                         "imported files: the drop-in would have to freeze the distribution's generated CRI section; "
                         "use a release with containerd 2.x; nothing written")


def dump(module, binary, main_doc):
    """containerd's resolved config for main_doc (imports removed), or None without containerd."""
    path = module.get_bin_path(binary)
    if not path:
        return None
    doc = {k: v for k, v in main_doc.items() if k != "imports"}
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(dumps(doc) + "\n")
    try:
        rc, out, err = module.run_command([path, "--config", f.name, "config", "dump"])
    finally:
        os.unlink(f.name)
    if rc != 0:
        raise ValueError(f"containerd config dump failed on the main config: {err}")
    return loads(out)


def validate(module, binary, version, main_doc, dropin_text, runtime):
    path = module.get_bin_path(binary)
    if not path:
        return False
    with tempfile.TemporaryDirectory() as d:
        drop = os.path.join(d, "dropin.toml")
        main = os.path.join(d, "config.toml")
        with open(drop, "w", encoding="utf-8") as f:
            f.write(dropin_text)
        doc = {k: v for k, v in main_doc.items() if k != "imports"}
        doc["version"] = version
        doc["imports"] = [drop]
        with open(main, "w", encoding="utf-8") as f:
            f.write(dumps(doc) + "\n")
        rc, out, err = module.run_command([path, "--config", main, "config", "dump"])
    if rc != 0:
        raise ValueError(f"containerd rejects the drop-in: {err or out}")
    result = loads(out)
    got = result.get("version")
    # containerd 2.x dumps its own newest version (3; 4 from 2.4), whose CRI runtime section is version 3's.
    layout = 3 if isinstance(got, int) and got >= 3 else (got if got in CRI else version)
    runtimes = dig(result, runtime_path(layout)) or {}
    if runtime not in runtimes:
        raise ValueError(f"containerd accepted the drop-in but its config dump (version {got}) does not list "
                         f"runtime {runtime!r}")
    return True


def write(module, path, text, mode):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path))
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(tmp, mode)
    module.atomic_move(tmp, path)
    os.chmod(path, mode)  # atomic_move gives a new file the umask's mode


def containerd_major(module, path):
    rc, out, _unused = module.run_command([path, "--version"])
    m = re.search(r"\sv?(\d+)\.\d+", out) if rc == 0 else None
    return int(m.group(1)) if m else None


def file_version(doc):
    """The config version containerd reads from a file: its version line, or 1 when it has content but none."""
    if "version" in doc:
        return int(doc["version"])
    return 1 if doc else None


def credentials(doc):
    """Registry credential values held by a config (CRI v2 section or the v3 images section), and their hosts."""
    values, hosts = [], []
    for cri in (doc.get("plugins", {}).get(CRI[2], {}), doc.get("plugins", {}).get("io.containerd.cri.v1.images", {})):
        registry = cri.get("registry", {}) if isinstance(cri, dict) else {}
        sources = [("auths", registry.get("auths", {}))]
        for host, conf in registry.get("configs", {}).items():
            sources.append((f"configs.{host}", (conf or {}).get("auth", {})))
        for host, headers in registry.get("headers", {}).items():
            auth = {k: v for k, v in (headers or {}).items() if k.lower() == "authorization"}
            sources.append((f"headers.{host}", auth))
        for where, block in sources:
            leaves = []
            stack = [block]
            while stack:
                item = stack.pop()
                if isinstance(item, dict):
                    stack.extend(item.values())
                elif isinstance(item, list):
                    stack.extend(item)
                elif isinstance(item, str) and item:
                    leaves.append(item)
            if leaves:
                hosts.append(where)
                values.extend(leaves)
    return sorted(set(values), key=len, reverse=True), hosts


def _occurrences(value):
    """The value as a whole token: a username such as "u" must not match inside "runtime" or "ValueError"."""
    return re.compile(r"(?<![A-Za-z0-9])" + re.escape(value) + r"(?![A-Za-z0-9])")


def scrub(text, secrets):
    for value in secrets:
        text = _occurrences(value).sub("********", text)
    return text


def mentions(text, secrets):
    return any(_occurrences(value).search(text) for value in secrets)


def runtime_path(version):
    return ("plugins", CRI[version], "containerd", "runtimes")


def dig(doc, keys):
    for k in keys:
        doc = doc.get(k) if isinstance(doc, dict) else None
    return doc


def plan(module, p, main_doc):
    """(read layout, write layout, source section of the drop-in, whether the drop-in must copy the CRI section,
    validated-by containerd path)."""
    fversion = file_version(main_doc)
    path = module.get_bin_path(p["containerd_binary"])
    if not path:
        # No containerd to ask: the file's version (or the option) decides, and a v2 drop-in copies the section
        # (containerd 1.x replaces whole plugin sections from imports).
        if fversion == 1:
            raise ValueError(f"{p['main_config']} has no version line, so containerd reads it as config version 1 "
                             "(the 1.x 'cri' layout), which this module does not write; add version = 2 or 3")
        version = p["config_version"] or fversion or 2
        return version, version, main_doc, version == 2, None
    major = containerd_major(module, path)
    resolved = dump(module, p["containerd_binary"], main_doc)
    dversion = resolved.get("version")
    if isinstance(dversion, int) and dversion > 3:
        dversion = 3  # containerd 2.4's version 4 keeps version 3's CRI runtime section
    elif dversion not in (2, 3):
        dversion = 3 if (major or 1) >= 2 else 2
    if fversion == 1 and dversion == 2:
        raise ValueError(f"{p['main_config']} has no version line, so containerd {major}.x reads it as config "
                         "version 1 (the 'cri' layout); a version 2 drop-in cannot be merged with it: convert "
                         "config.toml to version = 2 first")
    if p["config_version"] and p["config_version"] != dversion:
        raise ValueError(f"config_version {p['config_version']} given, but containerd (major {major}) reports "
                         f"config version {dversion}")
    if dversion == 3:
        # containerd 2.x merges imported plugin sections key by key, so the drop-in holds only the NVIDIA runtime.
        # Its version follows a version 2 main file: containerd migrates the merged config only when no file says
        # 3, and a version 3 drop-in would leave the main file's version 2 sections unread.
        return 3, (2 if fversion == 2 else 3), resolved, False, path
    return 2, 2, resolved, True, path


def main():
    module = AnsibleModule(
        argument_spec=dict(
            main_config=dict(type="path", default="/etc/containerd/config.toml"),
            dropin=dict(type="path", default="/etc/containerd/conf.d/99-nvidia.toml"),
            imports_glob=dict(type="str", default="/etc/containerd/conf.d/*.toml"),
            manage_imports=dict(type="bool", default=True),
            runtime_name=dict(type="str", default="nvidia"),
            binary_name=dict(type="path", default="/usr/bin/nvidia-container-runtime"),
            set_as_default=dict(type="bool", default=False),
            systemd_cgroup=dict(type="bool"),
            config_version=dict(type="int", default=0, choices=[0, 2, 3]),
            containerd_binary=dict(type="str", default="containerd"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    secrets = []
    try:
        main_text = read(p["main_config"])
        main_doc = loads(main_text) if main_text else {}
        secrets, cred_hosts = credentials(main_doc)
        if not p["manage_imports"]:
            check_rendered_main(main_text, main_doc, p, False)
        read_version, version, source, full_copy, _unused = plan(module, p, main_doc)
        if not p["manage_imports"]:
            check_rendered_main(main_text, main_doc, p, full_copy)
        runc = copy.deepcopy(dig(source, runtime_path(read_version) + ("runc",)) or {})
        if full_copy:
            if cred_hosts:
                raise ValueError(
                    "containerd 1.x replaces the whole " + CRI[2] + " section from an imported file, so the drop-in "
                    "would have to repeat the registry credentials of " + p["main_config"] + " (registry "
                    + ", ".join(cred_hosts) + "); kube-accel never copies credentials: move them out of config.toml "
                    "(kubelet image pull secrets or a credential provider) or use containerd 2.x")
            cri = copy.deepcopy(dig(source, ("plugins", CRI[read_version])) or {})
            ctrd = cri.setdefault("containerd", {})
        else:
            cri = {}
            ctrd = cri.setdefault("containerd", {})
        runtimes = ctrd.setdefault("runtimes", {})
        # Same shape as runc's entry (cgroup driver, root...), pointing at the NVIDIA runtime binary.
        rt = runc
        rt["runtime_type"] = "io.containerd.runc.v2"
        opts = rt.setdefault("options", {})
        opts["BinaryName"] = p["binary_name"]
        if p["systemd_cgroup"] is not None:
            opts["SystemdCgroup"] = p["systemd_cgroup"]
        runtimes[p["runtime_name"]] = rt
        if p["set_as_default"]:
            ctrd["default_runtime_name"] = p["runtime_name"]
        if not p["manage_imports"]:
            header = ("# Managed by kube-accel (container_toolkit). Imported by " + p["main_config"] + ",\n"
                      "# which the Kubernetes distribution renders; containerd 2.x merges it key by key.\n")
        elif full_copy:
            header = ("# Managed by kube-accel (container_toolkit). containerd 1.x replaces whole plugin sections\n"
                      "# from imported files: this holds the main config's CRI section plus the NVIDIA runtime.\n")
        else:
            header = ("# Managed by kube-accel (container_toolkit). containerd 2.x merges imported plugin\n"
                      "# sections key by key: only the NVIDIA runtime is here.\n")
        dropin_text = header + dumps({"version": version, "plugins": {CRI[version]: cri}}) + "\n"
        if p["manage_imports"]:
            new_main = with_imports(main_text, file_version(main_doc) or version, p["imports_glob"])
        else:
            new_main = main_text  # the distribution's file: read, never written
        old_dropin = read(p["dropin"])
        validated = validate(module, p["containerd_binary"], version, main_doc, dropin_text, p["runtime_name"])
    except Exception as e:  # noqa: BLE001 -- never a traceback; credentials scrubbed from the message
        module.fail_json(msg=scrub(f"containerd_nvidia_dropin: {type(e).__name__}: {e}", secrets))
    if mentions(dropin_text, secrets):
        module.fail_json(msg="registry credentials would be copied into the drop-in; nothing written")
    mode_wrong = old_dropin is not None and (os.stat(p["dropin"]).st_mode & 0o777) != 0o600
    changed = old_dropin != dropin_text or mode_wrong or main_text != new_main
    diff = [
        dict(before_header=p["dropin"], after_header=p["dropin"], before=scrub(old_dropin or "", secrets),
             after=dropin_text),
    ]
    if p["manage_imports"]:
        diff.append(dict(before_header=p["main_config"], after_header=p["main_config"],
                         before=scrub(main_text or "", secrets), after=scrub(new_main, secrets)))
    if changed and not module.check_mode:
        if old_dropin != dropin_text or mode_wrong:
            write(module, p["dropin"], dropin_text, 0o600)
        if main_text != new_main:
            mode = os.stat(p["main_config"]).st_mode & 0o777 if main_text is not None else 0o644
            write(module, p["main_config"], new_main, mode)
    module.exit_json(changed=changed, diff=diff, config_version=version, validated=validated)


if __name__ == "__main__":
    main()
