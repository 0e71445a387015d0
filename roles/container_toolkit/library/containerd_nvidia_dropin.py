#!/usr/bin/python
# Copyright: kube-accel contributors
# Apache-2.0
"""Write containerd's NVIDIA runtime drop-in and import it from the main config."""

from __future__ import annotations

import copy
import json
import os
import re
import tempfile

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: containerd_nvidia_dropin
short_description: Add the NVIDIA runtime to containerd through a conf.d drop-in
description:
  - containerd 1.x/2.x merge an imported file by replacing whole plugin sections, so a drop-in that holds only the
    new runtime would wipe the main config's CRI settings. Like C(nvidia-ctk runtime configure --drop-in-config),
    this module writes the complete CRI runtime section, taken from the main config (resolved by
    C(containerd config dump) when containerd is installed), plus the NVIDIA runtime.
  - Adds the drop-in glob to C(imports) of the main config, creating a minimal main config when there is none.
  - The result is validated by C(containerd config dump) before anything is written, when containerd is installed.
options:
  main_config: {type: path, default: /etc/containerd/config.toml, description: Main containerd config.}
  dropin: {type: path, default: /etc/containerd/conf.d/99-nvidia.toml, description: Drop-in file written.}
  imports_glob: {type: str, default: /etc/containerd/conf.d/*.toml, description: Pattern added to imports.}
  runtime_name: {type: str, default: nvidia, description: Runtime handler name.}
  binary_name: {type: path, default: /usr/bin/nvidia-container-runtime, description: OCI runtime binary.}
  set_as_default: {type: bool, default: false, description: Make the runtime containerd's default.}
  systemd_cgroup: {type: bool, description: SystemdCgroup for the runtime; inherited from runc when unset.}
  config_version: {type: int, default: 0, description: 2 or 3; 0 detects it from the main config or containerd.}
  containerd_binary: {type: str, default: containerd, description: containerd executable.}
attributes:
  check_mode: {support: full}
  diff_mode: {support: full}
"""

EXAMPLES = r"""
- name: NVIDIA runtime for containerd
  containerd_nvidia_dropin:
    set_as_default: true
"""

RETURN = r"""
config_version: {type: int, returned: always, description: containerd config version used.}
validated: {type: bool, returned: always, description: Whether containerd itself parsed the result.}
"""

try:
    import tomllib
except ImportError:  # Python < 3.11 (RHEL 9): the toml package
    tomllib = None
    try:
        import toml as _toml
    except ImportError:
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
        module.fail_json(msg=f"containerd config dump failed on the main config: {err or out}")
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
        module.fail_json(msg=f"containerd rejects the drop-in: {err or out}", dropin=dropin_text)
    runtimes = loads(out)["plugins"][CRI[version]]["containerd"]["runtimes"]
    if runtime not in runtimes:
        module.fail_json(msg="containerd accepted the drop-in but does not list the runtime", dump=out)
    return True


def detect_version(module, binary, main_doc):
    if main_doc.get("version"):
        return int(main_doc["version"])
    path = module.get_bin_path(binary)
    if path:
        rc, out, _ = module.run_command([path, "--version"])
        m = re.search(r"\sv?(\d+)\.\d+", out) if rc == 0 else None
        if m:
            return 3 if int(m.group(1)) >= 2 else 2
    return 2


def write(module, path, text, mode):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path))
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(tmp, mode)
    module.atomic_move(tmp, path)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            main_config=dict(type="path", default="/etc/containerd/config.toml"),
            dropin=dict(type="path", default="/etc/containerd/conf.d/99-nvidia.toml"),
            imports_glob=dict(type="str", default="/etc/containerd/conf.d/*.toml"),
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
    try:
        main_text = read(p["main_config"])
        main_doc = loads(main_text) if main_text else {}
        version = p["config_version"] or detect_version(module, p["containerd_binary"], main_doc)
        resolved = dump(module, p["containerd_binary"], main_doc)
        source = resolved if resolved is not None else main_doc
        cri = copy.deepcopy(source.get("plugins", {}).get(CRI[version], {}))
        ctrd = cri.setdefault("containerd", {})
        runtimes = ctrd.setdefault("runtimes", {})
        # Same shape as runc's entry (cgroup driver, root...), pointing at the NVIDIA runtime binary.
        rt = copy.deepcopy(runtimes.get("runc", {}))
        rt["runtime_type"] = "io.containerd.runc.v2"
        opts = rt.setdefault("options", {})
        opts["BinaryName"] = p["binary_name"]
        if p["systemd_cgroup"] is not None:
            opts["SystemdCgroup"] = p["systemd_cgroup"]
        runtimes[p["runtime_name"]] = rt
        if p["set_as_default"]:
            ctrd["default_runtime_name"] = p["runtime_name"]
        header = (
            "# Managed by kube-accel (container_toolkit). containerd replaces whole plugin sections from imported\n"
            "# files, so this holds the complete CRI runtime section of the main config plus the NVIDIA runtime.\n"
        )
        dropin_text = header + dumps({"version": version, "plugins": {CRI[version]: cri}}) + "\n"
        new_main = with_imports(main_text, version, p["imports_glob"])
    except (RuntimeError, ValueError, TypeError, KeyError) as e:
        module.fail_json(msg=str(e))
    old_dropin = read(p["dropin"])
    changed = old_dropin != dropin_text or main_text != new_main
    validated = validate(module, p["containerd_binary"], version, main_doc, dropin_text, p["runtime_name"])
    diff = [
        dict(before_header=p["dropin"], after_header=p["dropin"], before=old_dropin or "", after=dropin_text),
        dict(before_header=p["main_config"], after_header=p["main_config"], before=main_text or "", after=new_main),
    ]
    if changed and not module.check_mode:
        if old_dropin != dropin_text:
            write(module, p["dropin"], dropin_text, 0o644)
        if main_text != new_main:
            write(module, p["main_config"], new_main, 0o644)
    module.exit_json(changed=changed, diff=diff, config_version=version, validated=validated)


if __name__ == "__main__":
    main()
