"""nvidia_runtime_config and its merge (plugins/module_utils/host/runtime_config.py) on files shaped as NVIDIA's
package and operators write them. NVIDIA's own writer on the same inputs: tests/conformance/test_nvidia_ctk.py."""

from __future__ import annotations

import json
import stat
import tomllib

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.kube_accel.gpu.plugins.module_utils.host.runtime_config import holds_only, merge
from ansible_collections.kube_accel.gpu.plugins.modules import nvidia_runtime_config as mod

ENVVAR = "accept-nvidia-visible-devices-envvar-when-unprivileged"
MOUNTS = "accept-nvidia-visible-devices-as-volume-mounts"
SETTINGS = {ENVVAR: False, MOUNTS: True}

# The layout of the toolkit package's file: root keys first, its defaults as comments, then the tables.
PACKAGED = """#accept-nvidia-visible-devices-as-volume-mounts = false
#accept-nvidia-visible-devices-envvar-when-unprivileged = true
disable-require = false
supported-driver-capabilities = "compat32,compute,display,graphics,ngx,utility,video"
#swarm-resource = "DOCKER_RESOURCE_GPU"

[nvidia-container-cli]
#debug = "/var/log/nvidia-container-toolkit.log"
environment = []
load-kmods = true

[nvidia-container-runtime]
log-level = "info"
mode = "auto"
runtimes = ["runc", "crun"]

[nvidia-container-runtime.modes.cdi]
annotation-prefixes = ["cdi.k8s.io/"]
default-kind = "nvidia.com/gpu"
"""


def changed_lines(before: str, after: str) -> list[tuple[str, str]]:
    return [(b, a) for b, a in zip(before.splitlines(), after.splitlines(), strict=False) if b != a]


def test_packaged_file_gets_its_commented_defaults_turned_on_in_place():
    after = merge(PACKAGED, SETTINGS)
    assert changed_lines(PACKAGED, after) == [
        ("#accept-nvidia-visible-devices-as-volume-mounts = false", f"{MOUNTS} = true"),
        ("#accept-nvidia-visible-devices-envvar-when-unprivileged = true", f"{ENVVAR} = false"),
    ]
    assert len(after.splitlines()) == len(PACKAGED.splitlines())
    assert tomllib.loads(after) == {**tomllib.loads(PACKAGED), **SETTINGS}
    assert merge(after, SETTINGS) == after  # a second run changes nothing


def test_an_operator_who_turned_the_envvar_on_is_set_back_and_keeps_the_rest():
    before = ("# site policy: do not edit by hand\n" f'"{ENVVAR}" = true\n' "disable-require = true\n\n"
              "[nvidia-container-runtime]\n" f"{ENVVAR} = true  # a key of the same name in a table is not ours\n")
    after = merge(before, SETTINGS)
    assert changed_lines(before, after)[0] == (f'"{ENVVAR}" = true', f"{ENVVAR} = false")
    doc = tomllib.loads(after)
    assert doc[ENVVAR] is False and doc[MOUNTS] is True and doc["disable-require"] is True
    assert doc["nvidia-container-runtime"][ENVVAR] is True
    assert after.startswith("# site policy: do not edit by hand\n")
    # The missing key goes at the end of the root table, before the blank line that ends it.
    assert after.splitlines()[3] == f"{MOUNTS} = true" and after.splitlines()[4] == ""


def test_missing_or_empty_file_holds_only_the_settings():
    assert merge(None, SETTINGS) == f"{ENVVAR} = false\n{MOUNTS} = true\n"
    assert merge("", SETTINGS) == merge(None, SETTINGS)


def test_file_without_root_keys_gets_them_above_its_first_table():
    after = merge("[nvidia-container-runtime]\nmode = \"cdi\"\n", SETTINGS)
    assert after == f"{ENVVAR} = false\n{MOUNTS} = true\n\n[nvidia-container-runtime]\nmode = \"cdi\"\n"


def test_a_bracket_inside_a_root_array_or_string_is_not_a_table():
    before = 'swarm-resource = "[not a table]"\nx = [\n  "[nor this]",\n]\n[t]\ny = 1\n'
    after = merge(before, SETTINGS)
    assert tomllib.loads(after) == {**tomllib.loads(before), **SETTINGS}
    assert after.index(ENVVAR) < after.index("[t]")


def test_invalid_toml_is_refused_with_the_path():
    with pytest.raises(ValueError, match=r"/x/config.toml is not valid TOML .*nothing written"):
        merge("mode = = 1\n", SETTINGS, "/x/config.toml")


@pytest.mark.parametrize(("settings", "message"), [
    ({"accept-nvidia-visible-devices": False}, r"'accept-nvidia-visible-devices' is not a key .*allowed: accept-nv"),
    ({ENVVAR: "false"}, rf"settings.{ENVVAR}: 'false' \(str\) is not what the toolkit reads there; allowed: a bool"),
    ({"disable-require": 1}, r"settings.disable-require: 1 \(int\) .*allowed: a bool"),
    ({}, r"settings: \{\} is not a mapping"),
])
def test_bad_settings_name_the_key_and_what_is_allowed(settings, message):
    with pytest.raises(ValueError, match=message):
        merge(PACKAGED, settings)


def run(path, capsys, check=False, state="present", **settings):
    args = {"path": str(path), "settings": settings or SETTINGS, "state": state, "_ansible_check_mode": check,
            "_ansible_diff": True}
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        mod.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def test_module_creates_the_file_then_changes_nothing(tmp_path, capsys):
    path = tmp_path / "nvidia-container-runtime" / "config.toml"
    rc, out = run(path, capsys, check=True)
    assert rc == 0 and out["changed"] and out["created"] and not path.exists()  # check mode writes nothing
    assert out["diff"]["after"] == merge(None, SETTINGS) and out["diff"]["before"] == ""
    rc, out = run(path, capsys)
    assert rc == 0 and out["changed"] and path.read_text() == merge(None, SETTINGS)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    rc, out = run(path, capsys)
    assert rc == 0 and not out["changed"] and not out["created"]


def test_module_keeps_the_file_mode_and_tells_the_truth_in_check_mode(tmp_path, capsys):
    path = tmp_path / "config.toml"
    path.write_text(PACKAGED)
    path.chmod(0o640)
    rc, out = run(path, capsys, check=True)
    assert rc == 0 and out["changed"] and path.read_text() == PACKAGED
    assert out["diff"]["before"] == PACKAGED and out["diff"]["after"] == merge(PACKAGED, SETTINGS)
    rc, out = run(path, capsys)
    assert rc == 0 and out["changed"] and path.read_text() == merge(PACKAGED, SETTINGS)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_module_fails_on_a_broken_file_and_leaves_it(tmp_path, capsys):
    path = tmp_path / "config.toml"
    path.write_text("[nvidia-container-runtime\n")
    rc, out = run(path, capsys)
    assert rc == 1 and "is not valid TOML" in out["msg"] and str(path) in out["msg"]
    assert path.read_text() == "[nvidia-container-runtime\n"


def test_holds_only_the_settings_is_what_kube_accel_created():
    assert holds_only(merge(None, SETTINGS), SETTINGS)
    assert holds_only(merge("", SETTINGS), SETTINGS)
    assert not holds_only(None, SETTINGS)
    assert not holds_only(merge(PACKAGED, SETTINGS), SETTINGS)  # the toolkit's file, hardened
    assert not holds_only(merge(None, {ENVVAR: False}), SETTINGS)  # one key short
    assert not holds_only(f"{ENVVAR} = true\n{MOUNTS} = true\n", SETTINGS)  # a value changed since
    assert not holds_only("[broken\n", SETTINGS)


def test_absent_removes_only_a_file_kube_accel_created_and_check_mode_tells_the_truth(tmp_path, capsys):
    ours = tmp_path / "ours.toml"
    rc, out = run(ours, capsys)
    rc, out = run(ours, capsys, check=True, state="absent")
    assert rc == 0 and out["changed"] and ours.exists() and out["diff"]["after"] == ""
    rc, out = run(ours, capsys, state="absent")
    assert rc == 0 and out["changed"] and not out["kept"] and not ours.exists()
    rc, out = run(ours, capsys, state="absent")
    assert rc == 0 and not out["changed"] and not out["kept"]  # a second decommission finds nothing

    packaged = tmp_path / "packaged.toml"
    packaged.write_text(merge(PACKAGED, SETTINGS))
    rc, out = run(packaged, capsys, state="absent")
    assert rc == 0 and not out["changed"] and out["kept"] and packaged.read_text() == merge(PACKAGED, SETTINGS)
