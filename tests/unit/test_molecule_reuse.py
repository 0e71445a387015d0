"""The key that lets a Molecule scenario reuse its last green run (tests/molecule/scenario_reuse.py): every input
change must change it, and the record must only be found for the same inputs and the same package indices."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import scenario_reuse as reuse  # noqa: E402

IMAGES = {"localhost/kube-accel/debian12-python:1": "sha256:aaaa"}
TOOLS = {"python": "3.11", "distributions": "d1", "collections": "c1", "podman": "4.3.1", "kernel": "6.1",
         "containers_conf": "e1"}


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


@pytest.fixture
def repo(tmp_path):
    """A small repository: role r1 (scenario s) uses role r2, module m1 and filter f_name; r3 and m2 are unrelated."""
    write(tmp_path / "roles/r1/tasks/main.yml", "- name: Use r2\n  ansible.builtin.include_role:\n    name: r2\n"
          "- name: Use m1\n  m1: {x: \"{{ 1 | f_name }}\"}\n# r3 and m2 only in a comment\n")
    write(tmp_path / "roles/r1/README.md", "r3 m2\n")
    write(tmp_path / "roles/r1/molecule/s/molecule.yml", "platforms:\n  - name: h\n    image: localhost/kube-accel/"
          "debian12-python:1\n")
    write(tmp_path / "roles/r1/molecule/s/converge.yml", "- hosts: all\n  roles: [r1]\n"
          "  vars: {data: \"${MOLECULE_PROJECT_DIRECTORY}/../../tests/data/d.json\"}\n")
    write(tmp_path / "roles/r1/molecule/other/converge.yml", "- hosts: all\n")
    write(tmp_path / "roles/r2/tasks/main.yml", "- ansible.builtin.debug: {msg: hi}\n")
    write(tmp_path / "roles/r3/tasks/main.yml", "- ansible.builtin.debug: {msg: hi}\n")
    write(tmp_path / "plugins/modules/m1.py", "from ansible.module_utils.u import x\n")
    write(tmp_path / "plugins/modules/m2.py", "")
    write(tmp_path / "plugins/filter/f.py",
          "class FilterModule:\n    def filters(self):\n        return {'f_name': 1}\n")
    write(tmp_path / "plugins/module_utils/u.py", "x = 1\n")
    write(tmp_path / "tests/data/d.json", "{}\n")
    write(tmp_path / "tests/data/unused.json", "{}\n")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    return tmp_path


def scenario(repo: Path) -> reuse.Scenario:
    return reuse.Scenario(repo / "roles/r1", "s", repo=repo)


def key(repo: Path, images=None, tools=None, env=None) -> str | None:
    return reuse.key_of(reuse.inputs(scenario(repo), images=images or IMAGES, tools=tools or TOOLS, env=env or {}))


def test_input_files_follow_roles_plugins_and_paths(repo):
    files = {p.relative_to(repo).as_posix() for p in reuse.input_files(scenario(repo))}
    assert files == {
        "roles/r1/tasks/main.yml", "roles/r1/molecule/s/molecule.yml", "roles/r1/molecule/s/converge.yml",
        "roles/r2/tasks/main.yml", "plugins/modules/m1.py", "plugins/filter/f.py", "plugins/module_utils/u.py",
        "tests/data/d.json",
    }


@pytest.mark.parametrize("path", ["roles/r1/tasks/main.yml", "roles/r2/tasks/main.yml", "plugins/module_utils/u.py",
                                  "plugins/filter/f.py", "roles/r1/molecule/s/converge.yml", "tests/data/d.json"])
def test_a_changed_input_file_changes_the_key(repo, path):
    before = key(repo)
    with (repo / path).open("a", encoding="utf-8") as f:
        f.write("\n# changed\n")
    assert key(repo) != before


def test_a_new_file_in_the_role_changes_the_key(repo):
    before = key(repo)
    write(repo / "roles/r1/templates/new.j2", "x\n")
    assert key(repo) != before


def test_a_file_mode_change_changes_the_key(repo):
    before = key(repo)
    (repo / "roles/r2/tasks/main.yml").chmod(0o755)
    assert key(repo) != before


@pytest.mark.parametrize("path", ["roles/r3/tasks/main.yml", "plugins/modules/m2.py", "roles/r1/README.md",
                                  "roles/r1/molecule/other/converge.yml", "tests/data/unused.json"])
def test_files_the_scenario_cannot_read_leave_the_key(repo, path):
    before = key(repo)
    with (repo / path).open("a", encoding="utf-8") as f:
        f.write("\n# changed\n")
    assert key(repo) == before


def test_image_tool_and_environment_changes_change_the_key(repo):
    before = key(repo)
    assert key(repo, images={"localhost/kube-accel/debian12-python:1": "sha256:bbbb"}) != before
    assert key(repo, tools={**TOOLS, "distributions": "d2"}) != before
    assert key(repo, tools={**TOOLS, "podman": "5.0"}) != before
    assert key(repo, tools={**TOOLS, "kernel": "6.12"}) != before
    assert key(repo, tools={**TOOLS, "containers_conf": "e2"}) != before
    assert key(repo, env={"ANSIBLE_FORKS": "5"}) != before


def test_the_checkouts_own_path_is_not_part_of_the_environment(monkeypatch):
    """CI's clone and a developer's checkout on one machine share records: ANSIBLE_CONFIG names the checkout."""
    monkeypatch.setenv("ANSIBLE_CONFIG", f"{reuse.REPO}/ansible.cfg")
    monkeypatch.setenv("KA_CACHE", "/elsewhere/cache")
    env = reuse.environment()
    assert env["ANSIBLE_CONFIG"] == "REPO/ansible.cfg"
    assert env["KA_CACHE"] == "/elsewhere/cache"  # any other path still counts


def test_a_missing_image_has_no_key(repo):
    assert key(repo, images={"localhost/kube-accel/debian12-python:1": None}) is None


INDEX = {"meta_key": "non-free/binary-amd64/Packages", "base_uri": "http://deb.example/debian/dists/bookworm/",
         "sha256": "11" * 32}


def test_indices_as_recorded_are_not_stale():
    assert reuse.stale_indices({"h": [INDEX]}, fetch=lambda base: {INDEX["meta_key"]: INDEX["sha256"]}) == []


def test_a_changed_package_index_is_stale():
    stale = reuse.stale_indices({"h": [INDEX]}, fetch=lambda base: {INDEX["meta_key"]: "22" * 32})
    assert stale and "changed" in stale[0]


def test_an_unreachable_repository_is_stale():
    def fail(base):
        raise OSError("no route")
    assert "unreachable" in reuse.stale_indices({"h": [INDEX]}, fetch=fail)[0]


def test_an_index_apt_never_downloaded_is_not_checked():
    assert reuse.stale_indices({"h": [{**INDEX, "sha256": "missing"}]}, fetch=lambda base: {}) == []


def test_a_repository_on_the_host_is_not_fetched():
    def fail(base):
        raise OSError(f"{base} is on the host, not here")
    local = {**INDEX, "meta_key": "Packages", "base_uri": "file:/srv/ka-pkgdb/./"}
    assert reuse.stale_indices({"h": [local]}, fetch=fail) == []


def test_record_is_found_only_for_the_same_inputs(repo, tmp_path, monkeypatch):
    monkeypatch.setenv("KA_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("KA_MOLECULE_REUSE", raising=False)
    s = scenario(repo)
    data = reuse.inputs(s, images=IMAGES, tools=TOOLS, env={})
    assert reuse.find_reusable(s, data) == (None, "no green run recorded on this machine")
    reuse.write_record(s, data, {}, 12.0, {"converge": 5.0})
    record, why = reuse.find_reusable(s, data)
    assert record is not None and record["key"] == reuse.key_of(data) and why == "unchanged"

    monkeypatch.setenv("KA_MOLECULE_REUSE", "0")
    assert reuse.find_reusable(s, data) == (None, "KA_MOLECULE_REUSE=0")
    monkeypatch.delenv("KA_MOLECULE_REUSE")

    with (repo / "roles/r2/tasks/main.yml").open("a", encoding="utf-8") as f:
        f.write("# changed\n")
    changed = reuse.inputs(s, images=IMAGES, tools=TOOLS, env={})
    record, why = reuse.find_reusable(s, changed)
    assert record is None and "roles/r2/tasks/main.yml" in why


def test_record_with_a_changed_index_is_not_reused(repo, tmp_path, monkeypatch):
    monkeypatch.setenv("KA_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("KA_MOLECULE_REUSE", raising=False)
    monkeypatch.setattr(reuse, "release_hashes", lambda base, timeout=20: {INDEX["meta_key"]: "22" * 32})
    s = scenario(repo)
    data = reuse.inputs(s, images=IMAGES, tools=TOOLS, env={})
    reuse.write_record(s, data, {"h": [INDEX]}, 12.0, {})
    record, why = reuse.find_reusable(s, data)
    assert record is None and why.startswith("package indices changed")


def test_slugs_are_distinct_file_names(repo):
    slugs = {reuse.Scenario(repo, "site", repo=repo).slug, reuse.Scenario(repo / "roles/r1", "s", repo=repo).slug}
    assert slugs == {"molecule-site", "roles_r1-s"}


def test_image_key_is_the_one_lab_host_image_sh_writes():
    line, host_id = "sriov systemd initramfs-tools", "91adf5988f72" + "0" * 52
    shell = subprocess.run(["bash", "-c", 'printf "%s\\n%s\\n" "$1" "$2" | sha256sum | cut -c1-16', "_", line, host_id],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert reuse.molecule_image_key(line, host_id) == shell


def test_molecule_images_name_each_image_and_its_host_image_as_lab_host_image_sh_does():
    """The repository's molecule-images.txt: NAME lines on Debian 12, trixie:NAME lines on Debian 13, each image
    keyed by its own host image (scripts/lab-host-image.sh build_molecule_images)."""
    images = reuse.molecule_images(Path(__file__).resolve().parents[2])
    assert images["localhost/kube-accel/debian12-containerd:current"] == ("containerd containerd",
                                                                         "localhost/kube-accel/debian12-python:1")
    assert images["localhost/kube-accel/debian13-containerd:current"] == ("trixie:containerd containerd",
                                                                         "localhost/kube-accel/debian13-python:1")
