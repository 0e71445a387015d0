"""accel_host_state: the digests behind the host play's fast path, on real files in a temporary tree."""

from __future__ import annotations

import os

from ansible_collections.kube_accel.gpu.plugins.module_utils.host import state as hs


def make_tree(root):
    (root / "etc" / "modprobe.d").mkdir(parents=True)
    conf = root / "etc" / "modprobe.d" / "kube-accel.conf"
    conf.write_text("blacklist nouveau\n")
    conf.chmod(0o644)
    (root / "etc" / "link").symlink_to("modprobe.d/kube-accel.conf")
    return conf


def test_digest_ignores_dict_order():
    assert hs.digest({"a": 1, "b": [1, 2]}) == hs.digest({"b": [1, 2], "a": 1})
    assert hs.digest({"a": 1}) != hs.digest({"a": "1"})


def test_state_changes_with_content_mode_links_and_presence(tmp_path):
    conf = make_tree(tmp_path)
    watch = [str(tmp_path / "etc"), str(tmp_path / "missing")]
    base = hs.state(watch, [])
    assert hs.first_difference(base, hs.state(watch, [])) is None

    conf.write_text("blacklist nouveau \n")
    assert hs.first_difference(base, hs.state(watch, [])) == str(conf)
    conf.write_text("blacklist nouveau\n")
    conf.chmod(0o600)
    assert hs.first_difference(base, hs.state(watch, [])) == str(conf)
    conf.chmod(0o644)
    (tmp_path / "etc" / "link").unlink()
    (tmp_path / "etc" / "link").symlink_to("elsewhere")
    assert hs.first_difference(base, hs.state(watch, [])) == str(tmp_path / "etc" / "link")
    (tmp_path / "etc" / "link").unlink()
    (tmp_path / "etc" / "link").symlink_to("modprobe.d/kube-accel.conf")
    (tmp_path / "missing").write_text("")
    assert hs.first_difference(base, hs.state(watch, [])) == str(tmp_path / "missing")


def test_names_only_listing(tmp_path):
    (tmp_path / "mods" / "nvidia").mkdir(parents=True)
    (tmp_path / "mods" / "nvidia" / "refcnt").write_text("3")
    base = hs.state([], [str(tmp_path / "mods")])
    (tmp_path / "mods" / "nvidia" / "refcnt").write_text("4")  # contents below do not count
    assert hs.first_difference(base, hs.state([], [str(tmp_path / "mods")])) is None
    (tmp_path / "mods" / "nvidia_uvm").mkdir()
    assert hs.first_difference(base, hs.state([], [str(tmp_path / "mods")])) == f"{tmp_path / 'mods'} (entries)"


def test_compare_reasons(tmp_path):
    conf = make_tree(tmp_path)
    watch = [str(tmp_path / "etc")]
    saved = hs.record("inputs-1", hs.state(watch, []), ["nvidia_driver: reboot"])
    assert hs.compare(None, "inputs-1", hs.state(watch, [])) == (False, "no record of a full run")
    assert hs.compare(saved, "inputs-1", hs.state(watch, [])) == (
        True, "inputs and host state match the last full run")
    assert hs.compare(saved, "inputs-2", hs.state(watch, []))[1].startswith("inputs changed")
    conf.unlink()
    assert hs.compare(saved, "inputs-1", hs.state(watch, [])) == (
        False, f"host changed since the last full run: {conf}")
    assert hs.compare({**saved, "version": 0}, "inputs-1", hs.state(watch, []))[0] is False


def test_code_digest_follows_content_not_caches(tmp_path):
    (tmp_path / "roles" / "r" / "__pycache__").mkdir(parents=True)
    task = tmp_path / "roles" / "r" / "main.yml"
    task.write_text("- x\n")
    first = hs.code_digest(str(tmp_path), ["roles"])
    (tmp_path / "roles" / "r" / "__pycache__" / "m.pyc").write_bytes(b"\0")
    os.utime(task, (0, 0))  # times do not count
    assert hs.code_digest(str(tmp_path), ["roles"]) == first
    task.write_text("- y\n")
    assert hs.code_digest(str(tmp_path), ["roles"]) != first


def test_record_keeps_code_apart_and_probes_a_code_only_difference_or_an_earlier_record(tmp_path):
    conf = make_tree(tmp_path)
    watch = [str(tmp_path / "etc")]
    saved = hs.record("inputs-1", hs.state(watch, []), [], code="code-1")
    assert saved["version"] == hs.RECORD_VERSION == 2 and saved["code"] == "code-1"
    assert hs.check(saved, "inputs-1", hs.state(watch, []), "code-1") == (
        True, "inputs and host state match the last full run", False)
    # A kube-accel upgrade alone: probed, not drained up front.
    assert hs.check(saved, "inputs-1", hs.state(watch, []), "code-2") == (
        False, "the kube-accel code changed (variables, facts and host state did not)", True)
    # Anything else beside it is a full run: variables or facts, drift, no record, a record of a later version.
    assert hs.check(saved, "inputs-2", hs.state(watch, []), "code-2") == (
        False, "inputs changed (variables or facts)", False)
    assert hs.check(saved, "inputs-2", hs.state(watch, []), "code-1")[2] is False
    conf.write_text("drifted\n")
    assert hs.check(saved, "inputs-1", hs.state(watch, []), "code-2") == (
        False, f"host changed since the last full run: {conf}", False)
    assert hs.check(None, "inputs-1", hs.state(watch, []), "code-1") == (False, "no record of a full run", False)
    assert hs.check({**saved, "version": 3}, "inputs-1", hs.state(watch, []), "code-1") == (
        False, "no record of a full run", False)
    # A record 0.1.0 wrote (version 1: the code folded into its inputs digest, other watched paths) is probed: the
    # roles in check mode decide, whatever its digests say; its pending reboot reasons are kept.
    v1 = {"version": 1, "inputs": "inputs-and-code-0.1.0", "state_digest": "other-paths", "state": {},
          "reboot_required": ["kernel arguments changed"]}
    assert hs.check(v1, "inputs-1", hs.state(watch, []), "code-2") == (
        False, "the record is an earlier kube-accel's (record version 1): its digests cannot be compared with this "
        "version's", True)


def test_code_digest_of_the_host_play_covers_its_role_list():
    """The probe includes ansible/tasks/host_roles.yml: a change there is a code change like any other."""
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    import yaml

    code = yaml.safe_load((repo / "roles/host_state/defaults/main.yml").read_text())["host_state_code"]
    assert any("ansible/tasks/host_roles.yml".startswith(c) for c in code)
