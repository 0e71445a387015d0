"""containerd_nvidia_dropin against a fake containerd 1.x / 2.x (config dump with imports, the way each merges)."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.kube_accel.gpu.plugins.modules import containerd_nvidia_dropin as mod

FAKE = r'''#!{python}
import copy, glob, sys
import tomllib
from ansible_collections.kube_accel.gpu.plugins.modules.containerd_nvidia_dropin import dumps
MAJOR = {major}
if sys.argv[1] == "--version":
    print(f"containerd github.com/containerd/containerd {{'v2.1.4' if MAJOR == 2 else 'v1.7.27'}} abc")
    sys.exit(0)
path = sys.argv[2]
def merge(to, frm, deep):
    for k, v in frm.items():
        if deep and isinstance(v, dict) and isinstance(to.get(k), dict):
            merge(to[k], v, deep)
        else:
            to[k] = copy.deepcopy(v)
out = {{"plugins": {{}}}}
pending = [path]
while pending:
    doc = tomllib.loads(open(pending.pop(0)).read())
    plugins = doc.get("plugins", {{}})
    if MAJOR == 2 and doc.get("version", 1) == 2:
        cri = plugins.pop("io.containerd.grpc.v1.cri", {{}})
        if "containerd" in cri:
            plugins["io.containerd.cri.v1.runtime"] = {{"containerd": cri.pop("containerd")}}
        if cri:
            plugins["io.containerd.cri.v1.images"] = cri
    for name, section in plugins.items():
        if MAJOR == 2:
            merge(out["plugins"].setdefault(name, {{}}), section, True)
        else:
            out["plugins"][name] = section
    for pattern in doc.get("imports", []):
        pending += sorted(glob.glob(pattern))
cri = "io.containerd.cri.v1.runtime" if MAJOR == 2 else "io.containerd.grpc.v1.cri"
rts = out["plugins"].setdefault(cri, {{}}).setdefault("containerd", {{}}).setdefault("runtimes", {{}})
rts.setdefault("runc", {{"runtime_type": "io.containerd.runc.v2", "options": {{}}}})
out["version"] = 3 if MAJOR == 2 else 2
print(dumps(out))
'''

SECRET = "s3cr3t-passw0rd"
TOKEN = "dG9rZW4tdmFsdWU="


def fake_containerd(tmp_path: Path, major: int) -> str:
    path = tmp_path / f"containerd{major}"
    path.write_text(FAKE.format(python=sys.executable, major=major))
    path.chmod(0o755)
    return str(path)


def run(tmp_path, capsys, main_text, major=None, **extra):
    main = tmp_path / "config.toml"
    if main_text is not None:
        main.write_text(main_text)
        main.chmod(0o644)
    args = {"main_config": str(main), "dropin": str(tmp_path / "conf.d" / "99-nvidia.toml"),
            "imports_glob": str(tmp_path / "conf.d" / "*.toml"), "set_as_default": True, "_ansible_diff": True,
            "containerd_binary": fake_containerd(tmp_path, major) if major else str(tmp_path / "no-containerd"),
            **extra}
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        mod.main()
    out = capsys.readouterr().out
    return exc.value.code, json.loads(out), out


V2_MAIN = """version = 2

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.example.net/mirror/pause:3.9"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = true
"""

AUTH = f"""
  [plugins."io.containerd.grpc.v1.cri".registry.configs."registry.example.net".auth]
    username = "robot"
    password = "{SECRET}"
    auth = "{TOKEN}"
"""


def resolved(tmp_path, major):
    import subprocess  # noqa: PLC0415
    out = subprocess.run([fake_containerd(tmp_path, major), "--config", str(tmp_path / "config.toml"),
                          "config", "dump"], check=True, capture_output=True, text=True).stdout
    return mod.loads(out)


def test_containerd2_with_version2_config_from_an_upgraded_host(tmp_path, capsys):
    code, result, _ = run(tmp_path, capsys, V2_MAIN, major=2)
    assert code == 0, result
    assert result["validated"] and result["changed"]
    dump = resolved(tmp_path, 2)
    runtime = dump["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]
    assert runtime["runtimes"]["nvidia"]["options"] == {"SystemdCgroup": True,
                                                         "BinaryName": "/usr/bin/nvidia-container-runtime"}
    assert runtime["default_runtime_name"] == "nvidia"
    assert dump["plugins"]["io.containerd.cri.v1.images"]["sandbox_image"] == "registry.example.net/mirror/pause:3.9"
    # The drop-in follows the main file's version 2 (containerd 2.x migrates the merged config as a whole).
    assert mod.loads((tmp_path / "conf.d" / "99-nvidia.toml").read_text())["version"] == 2
    code, again, _ = run(tmp_path, capsys, None, major=2)
    assert code == 0 and not again["changed"]


@pytest.mark.parametrize("major", [1, None], ids=["containerd-1.x", "no-containerd"])
def test_config_without_version_line_is_version_1(tmp_path, capsys, major):
    text = '[plugins.cri]\n  sandbox_image = "pause:3.9"\n'
    code, result, out = run(tmp_path, capsys, text, major=major)
    assert code == 1 and result["failed"]
    assert "no version line" in result["msg"] and "version 1" in result["msg"]
    assert "Traceback" not in out
    assert not (tmp_path / "conf.d" / "99-nvidia.toml").exists()


def test_containerd2_reads_a_version1_config_itself(tmp_path, capsys):
    # containerd 2.x migrates a version 1 file when it loads it; nvidia-ctk also reads it as version 1.
    code, result, _ = run(tmp_path, capsys, "", major=2)
    assert code == 0 and result["config_version"] == 3


def test_version_mismatch_is_a_clear_error(tmp_path, capsys):
    code, result, out = run(tmp_path, capsys, V2_MAIN, major=1, config_version=3)
    assert code == 1 and "containerd (major 1) reports config version 2" in result["msg"]
    assert "Traceback" not in out


def test_registry_credentials_never_copied_containerd2(tmp_path, capsys):
    code, result, out = run(tmp_path, capsys, V2_MAIN + AUTH, major=2)
    assert code == 0, result
    dropin = tmp_path / "conf.d" / "99-nvidia.toml"
    text = dropin.read_text()
    for secret in (SECRET, TOKEN, "robot", "registry.example.net\".auth"):
        assert secret not in text
    assert SECRET not in out and TOKEN not in out  # result and diff
    assert 'password = "********"' in result["diff"][1]["after"]
    assert stat.S_IMODE(os.stat(dropin).st_mode) == 0o600
    # Still in force through the main config.
    assert resolved(tmp_path, 2)["plugins"]["io.containerd.cri.v1.images"]["registry"]["configs"][
        "registry.example.net"]["auth"]["password"] == SECRET


@pytest.mark.parametrize("major", [1, None], ids=["containerd-1.x", "no-containerd"])
def test_registry_credentials_refused_where_the_section_is_replaced(tmp_path, capsys, major):
    code, result, out = run(tmp_path, capsys, V2_MAIN + AUTH, major=major)
    assert code == 1
    assert "configs.registry.example.net" in result["msg"] and "never copies credentials" in result["msg"]
    assert SECRET not in out and TOKEN not in out
    assert not (tmp_path / "conf.d" / "99-nvidia.toml").exists()


def test_containerd1_copies_the_cri_section_0600(tmp_path, capsys):
    code, result, _ = run(tmp_path, capsys, V2_MAIN, major=1)
    assert code == 0 and result["validated"], result
    dropin = tmp_path / "conf.d" / "99-nvidia.toml"
    assert stat.S_IMODE(os.stat(dropin).st_mode) == 0o600
    cri = resolved(tmp_path, 1)["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == "registry.example.net/mirror/pause:3.9"
    assert cri["containerd"]["runtimes"]["nvidia"]["options"]["SystemdCgroup"] is True


def test_errors_never_print_credentials(tmp_path, capsys):
    broken = V2_MAIN + AUTH + f'\n# {SECRET}\n[plugins."io.containerd.grpc.v1.cri"]\n'  # duplicate table
    code, result, out = run(tmp_path, capsys, broken, major=2)
    assert code == 1 and "Traceback" not in out


def test_credentials_are_matched_as_whole_values():
    """A one-letter username must not mask letters of an error message or look like a copied credential in a
    drop-in that says "runtimes" (found with containerd 2.4.2, tests/conformance/test_containerd.py)."""
    secrets = ["s3cret", "u"]
    assert mod.scrub("ValueError: user u said s3cret", secrets) == "ValueError: user ******** said ********"
    assert not mod.mentions('[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia]', secrets)
    assert mod.mentions('password = "s3cret"', secrets) and mod.mentions('username = "u"', secrets)
