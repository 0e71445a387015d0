"""The key that lets a Molecule scenario reuse its last green run (tests/molecule/scenario_reuse.py): every input
change must change it, and the record must only be found for the same inputs and the same package indices."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import json
import lzma
import shutil
import subprocess
import threading
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
    write(tmp_path / "plugins/filter/f.py",
          "class FilterModule:\n    def filters(self):\n        return {'f_name': 1}\n")
    write(tmp_path / "plugins/module_utils/u.py", "from ansible.module_utils import u2\nx = 1\n")
    write(tmp_path / "plugins/module_utils/u2.py", "y = 2\n")
    # Imported by no plugin the scenario uses (m2 is unused; the action plugin of m1 imports u3).
    write(tmp_path / "plugins/module_utils/unused_util.py", "z = 3\n")
    write(tmp_path / "plugins/modules/m2.py", "from ansible.module_utils import unused_util\n")
    # A repository path in a plugin's strings is a message (the plugin runs from the installed collection).
    write(tmp_path / "plugins/action/m1.py",
          "from ansible.module_utils import u3\nMSG = 'see tests/data/unused.json'\n")
    write(tmp_path / "plugins/module_utils/u3.py", "w = 4\n")
    write(tmp_path / "tests/data/d.json", "{}\n")
    write(tmp_path / "tests/data/unused.json", "{}\n")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    return tmp_path


def write_utils(repo: Path, files: dict[str, str]) -> None:
    """Sub-packages of plugins/module_utils: each with its empty __init__.py, helm/values.py and cluster/client.py
    (which nothing below imports unless a test's file does), then ``files`` (path below module_utils -> text)."""
    utils = repo / "plugins" / "module_utils"
    for package in ("plan", "common", "helm", "cluster"):
        write(utils / package / "__init__.py", "")
    write(utils / "helm" / "values.py", "def merge(): pass\n")
    write(utils / "cluster" / "client.py", "y = 2\n")
    for name, text in files.items():
        write(utils / name, text)


def scenario(repo: Path) -> reuse.Scenario:
    return reuse.Scenario(repo / "roles/r1", "s", repo=repo)


def key(repo: Path, images=None, tools=None, env=None) -> str | None:
    return reuse.key_of(reuse.inputs(scenario(repo), images=images or IMAGES, tools=tools or TOOLS, env=env or {}))


def test_input_files_follow_roles_plugins_and_paths(repo):
    files = {p.relative_to(repo).as_posix() for p in reuse.input_files(scenario(repo))}
    assert files == {
        "roles/r1/tasks/main.yml", "roles/r1/molecule/s/molecule.yml", "roles/r1/molecule/s/converge.yml",
        "roles/r2/tasks/main.yml", "plugins/modules/m1.py", "plugins/filter/f.py", "plugins/module_utils/u.py",
        "plugins/module_utils/u2.py", "plugins/action/m1.py", "plugins/module_utils/u3.py", "tests/data/d.json",
    }



def test_module_utils_sub_packages_are_followed_by_their_imports(repo):
    """Sub-packages of module_utils: a dotted import, ``from <package> import <module>`` and a relative import inside
    module_utils each bring exactly the files imported (and the packages' __init__.py), whatever their names; a
    module of the same name in another sub-package, or a word in YAML, brings nothing."""
    prefix = "ansible_collections.kube_accel.gpu.plugins.module_utils"
    write(repo / "plugins/modules/m3.py", f"from {prefix}.plan.pools import node_labels\n"
          f"from {prefix}.helm import client\n")
    write(repo / "roles/r1/tasks/main.yml", "- name: r1\n  kube_accel.gpu.m1:\n- kube_accel.gpu.m3: {values: 1}\n")
    write_utils(repo, {"plan/pools.py": "from ..common import constants\nfrom . import inventory\n",
                       "plan/inventory.py": "VARIABLES = {}\n", "plan/values.py": "x = 1\n",
                       "common/constants.py": "LABELS = {}\n", "helm/client.py": "from .values import merge\n"})
    files = {p.relative_to(repo).as_posix() for p in reuse.input_files(scenario(repo))}
    utils = {f for f in files if "/module_utils/" in f}
    assert utils == {f"plugins/module_utils/{name}" for name in (
        "u.py", "u2.py", "u3.py", "plan/__init__.py", "plan/pools.py", "plan/inventory.py", "common/__init__.py",
        "common/constants.py", "helm/__init__.py", "helm/client.py", "helm/values.py")}


def test_import_calls_with_constant_names_are_followed(repo):
    """``importlib.import_module`` (absolute, or relative to a constant package) and ``__import__`` (with a level:
    relative to the file) bring the files they import, as an import statement does; a computed name brings nothing."""
    prefix = "ansible_collections.kube_accel.gpu.plugins.module_utils"
    write(repo / "plugins/modules/m3.py", f"import importlib\nC = importlib.import_module('{prefix}.helm.client')\n"
          f"P = importlib.import_module('.pools', package='{prefix}.plan')\n"
          f"N = importlib.import_module('{prefix}.' + 'cluster.client')\n")
    write(repo / "roles/r1/tasks/main.yml", "- kube_accel.gpu.m3: {}\n")
    write_utils(repo, {"plan/pools.py": "x = 1\n",
                       "helm/client.py": "V = __import__('values', globals(), None, ['merge'], 1)\n"})
    files = {p.relative_to(repo).as_posix() for p in reuse.input_files(scenario(repo))}
    assert {f for f in files if "/module_utils/" in f} == {f"plugins/module_utils/{name}" for name in (
        "plan/__init__.py", "plan/pools.py", "helm/__init__.py", "helm/client.py", "helm/values.py")}


@pytest.mark.parametrize("path", ["roles/r1/tasks/main.yml", "roles/r2/tasks/main.yml", "plugins/module_utils/u.py",
                                  "plugins/module_utils/u2.py", "plugins/module_utils/u3.py", "plugins/action/m1.py",
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
                                  "plugins/module_utils/unused_util.py",
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


# Package data a green run records (reuse.host_state) and the check before a reuse (reuse.stale_indices).
HEADERS = "linux-headers-6.1.0-50-amd64"
BASE_PACKAGES = (f"Package: {HEADERS}\nSource: linux\nVersion: 6.1.158-1\nArchitecture: amd64\n"
                 "Description: Header files\n Package: not-a-field (a continuation line)\n Version: 0\n\n"
                 "Package: curl\nVersion: 7.88.1-10+deb12u14\nArchitecture: amd64\n\n"
                 "Package: gcc-12\nVersion: 12.2.0-14+deb12u1\nArchitecture: amd64\n\n")


def test_parse_packages_reads_every_stanza_of_a_name():
    text = BASE_PACKAGES + f"Package: {HEADERS}\nVersion: 6.1.159-1\n\nPackage: gcc-12\nArchitecture: amd64\n"
    assert reuse.parse_packages(text) == {HEADERS: {"6.1.158-1", "6.1.159-1"}, "curl": {"7.88.1-10+deb12u14"},
                                          "gcc-12": {"12.2.0-14+deb12u1"}}
    assert reuse.parse_packages(text, {HEADERS, "absent"}) == {HEADERS: {"6.1.158-1", "6.1.159-1"}}
    # What host_state reads off a host: only the Package: and Version: lines, no blank lines between stanzas.
    assert reuse.parse_packages("Package: a\nVersion: 1\nPackage: b\nVersion: 2\nPackage: a\nVersion: 3\n") == {
        "a": {"1", "3"}, "b": {"2"}}


def test_changed_packages_are_the_host_against_its_image():
    image = reuse.parse_installed("bash:amd64\t5.2.15-2+b7\tinstalled\nless:amd64\t590-2\tinstalled\n"
                                  "tzdata:all\t2024a-0+deb12u1\tinstalled\nold:amd64\t1\tconfig-files\n"
                                  "libc6:i386\t2.36-9\tinstalled\n")
    assert "old:amd64" not in image
    host = reuse.parse_installed("bash:amd64\t5.2.15-2+b7\tinstalled\nless:amd64\t590-2.1~deb12u2\tinstalled\n"
                                 "gcc-12:amd64\t12.2.0-14\tinstalled\nold:amd64\t1\tconfig-files\n"
                                 "dkms:all\t3.0.10-8\thalf-configured\nlibc6:i386\t2.36-9\tinstalled\n"
                                 "gone:amd64\t2\tnot-installed\n")
    changed = reuse.changed_packages(image, host)
    # Added (in any state but removed), upgraded, removed (None); the unchanged and the config-files ones are not.
    assert changed == {"dkms:all": "3.0.10-8", "gcc-12:amd64": "12.2.0-14", "less:amd64": "590-2.1~deb12u2",
                       "tzdata:all": None}
    assert reuse.package_names({**changed, "gcc-12:i386": "12.2.0-14"}) == ["dkms", "gcc-12", "less", "tzdata"]


def test_host_state_records_changed_packages_and_what_each_index_offers_for_them(tmp_path, monkeypatch):
    """host_state's podman calls, answered as a Debian host and its image would: the image is read once per id."""
    monkeypatch.setenv("KA_CACHE", str(tmp_path / "cache"))
    lists = "/var/lib/apt/lists/deb.debian.org_debian"
    image_runs = []

    def run(argv, **kwargs):
        script = " ".join(argv)
        if argv[:2] == ["podman", "run"]:
            image_runs.append(argv)
            out = "bash:amd64\t5.2\tinstalled\nless:amd64\t590-2\tinstalled\n"
        elif "indextargets" in script:
            out = (f"main/binary-amd64/Packages\thttp://deb.debian.org/debian/dists/bookworm/\t9f\t{lists}_main\n"
                   "main/binary-amd64/Packages\thttp://deb.debian.org/debian-security/dists/bookworm-security/\t"
                   f"missing\t{lists}-security_main\n"
                   f"non-free/binary-amd64/Packages\thttp://deb.debian.org/debian/dists/bookworm/\t8e\t{lists}_nf\n")
        elif "grep" in script:
            assert argv[-2:] == [f"{lists}_main", f"{lists}_nf"]  # the downloaded ones only
            out = (f"@@{lists}_main\nPackage: less\nVersion: 590-2.1~deb12u2\nPackage: gcc-12\nVersion: 12.2.0-14\n"
                   "Package: less\nVersion: 590-2\nPackage: curl\nVersion: 7.88\n"
                   f"@@{lists}_nf\n")
        elif "dpkg-query" in script:
            out = "bash:amd64\t5.2\tinstalled\nless:amd64\t590-2.1~deb12u2\tinstalled\ngcc-12:amd64\t12.2.0-14\t" \
                  "installed\n"
        else:
            raise AssertionError(argv)
        return subprocess.CompletedProcess(argv, 0, out, "")

    monkeypatch.setattr(reuse.subprocess, "run", run)
    state = reuse.host_state("h1", "sha256:aaaa")
    assert state["packages"] == {"gcc-12:amd64": "12.2.0-14", "less:amd64": "590-2.1~deb12u2"}
    main, security, non_free = state["indices"]
    assert main["offers"] == {"gcc-12": ["12.2.0-14"], "less": ["590-2", "590-2.1~deb12u2"]}
    assert non_free["offers"] == {"gcc-12": [], "less": []}  # a version appearing there later is a change
    assert security["sha256"] == "missing" and "offers" not in security
    assert reuse.host_state("h2", "sha256:aaaa")["packages"] == state["packages"]
    assert len(image_runs) == 1 and image_runs[0][-4] == "sha256:aaaa"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class FakeRepository:
    """A Debian repository served by http.server: dists/bookworm-security/{InRelease, main/binary-amd64/Packages.xz}."""

    META = "main/binary-amd64/Packages"

    def __init__(self, root: Path):
        self.root = root
        self.requests: list[str] = []
        repo = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, directory=str(root), **kwargs)

            def log_message(self, *args):
                repo.requests.append(self.path)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # A short poll: shutdown() waits for the next one.
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()
        self.base = f"http://127.0.0.1:{self.server.server_port}/debian-security/dists/bookworm-security/"

    def publish(self, packages: str, *, listed_sha: str | None = None, by_hash: bool = False,
                compress=lzma.compress, suffix: str = ".xz") -> str:
        """Write the index and an InRelease listing it (listed_sha: the SHA-256 InRelease gives the compressed file);
        the SHA-256 of the uncompressed index, as a host records it."""
        dists = self.root / "debian-security/dists/bookworm-security"
        if dists.exists():
            shutil.rmtree(dists)
        raw = packages.encode()
        packed = compress(raw)
        directory = dists / "main/binary-amd64"
        directory.mkdir(parents=True)
        if by_hash:
            (directory / "by-hash/SHA256").mkdir(parents=True)
            (directory / "by-hash/SHA256" / _sha(packed)).write_bytes(packed)
        else:
            (directory / f"Packages{suffix}").write_bytes(packed)
        (dists / "InRelease").write_text(
            "-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA512\n\nOrigin: Debian\nSuite: stable-security\n"
            f"Acquire-By-Hash: {'yes' if by_hash else 'no'}\nSHA256:\n"
            f" {_sha(b'contrib')} 7 contrib/binary-amd64/Packages\n"
            f" {_sha(raw)} {len(raw)} {self.META}\n"
            f" {listed_sha or _sha(packed)} {len(packed)} {self.META}{suffix}\n"
            "-----BEGIN PGP SIGNATURE-----\n\nnot checked\n-----END PGP SIGNATURE-----\n", encoding="utf-8")
        return _sha(raw)

    def hosts(self, sha256: str, offers: dict[str, list[str]] | None = None) -> dict[str, dict]:
        """What host_state records for one host that installed HEADERS from this repository's index."""
        offers = {HEADERS: ["6.1.158-1"]} if offers is None else offers
        return {"ka-nvidia-dkms": {"image": "sha256:aaaa", "packages": {f"{HEADERS}:amd64": "6.1.158-1"}, "indices": [
            {"base_uri": self.base, "meta_key": self.META, "sha256": sha256, "file": "/var/lib/apt/lists/x",
             "offers": offers}]}}

    def close(self):
        if self.thread.is_alive():
            self.server.shutdown()
            self.server.server_close()


@pytest.fixture
def debian(tmp_path):
    repository = FakeRepository(tmp_path / "mirror")
    yield repository
    repository.close()


def test_an_unchanged_index_is_not_downloaded(debian):
    recorded = debian.publish(BASE_PACKAGES)
    assert reuse.stale_indices(debian.hosts(recorded)) == []
    assert all(path.endswith("/InRelease") for path in debian.requests)


@pytest.mark.parametrize("by_hash", [False, True], ids=["by-path", "by-hash"])
def test_a_changed_index_with_only_unrelated_packages_changed_is_reused(debian, by_hash):
    recorded = debian.publish(BASE_PACKAGES)
    debian.publish(BASE_PACKAGES.replace("7.88.1-10+deb12u14", "7.88.1-10+deb12u15")
                   + "Package: new-package\nVersion: 1\n\n", by_hash=by_hash)
    assert reuse.stale_indices(debian.hosts(recorded)) == []
    fetched = [p for p in debian.requests if not p.endswith("/InRelease")]
    assert len(fetched) == 1 and ("/by-hash/SHA256/" in fetched[0]) == by_hash


def test_a_gzip_index_is_read_when_no_xz_is_listed(debian):
    recorded = debian.publish(BASE_PACKAGES)
    debian.publish(BASE_PACKAGES + "Package: other\nVersion: 1\n", compress=gzip.compress, suffix=".gz")
    assert reuse.stale_indices(debian.hosts(recorded)) == []


@pytest.mark.parametrize("change", ["added", "replaced", "removed", "appeared"])
def test_a_changed_version_of_an_installed_package_is_not_reused(debian, change):
    recorded = debian.publish(BASE_PACKAGES)
    offers = None
    if change == "added":  # a second version beside the installed one
        new = BASE_PACKAGES + f"Package: {HEADERS}\nVersion: 6.1.159-1\n\n"
    elif change == "replaced":
        new = BASE_PACKAGES.replace("6.1.158-1", "6.1.159-1")
    elif change == "removed":
        new = BASE_PACKAGES.replace(f"Package: {HEADERS}", "Package: linux-headers-6.1.0-51-amd64")
    else:  # the index offered none then (the host took it from another index) and offers one now
        offers, new = {HEADERS: []}, BASE_PACKAGES
        recorded = debian.publish(BASE_PACKAGES.replace(f"Package: {HEADERS}", "Package: other"))
    debian.publish(new)
    stale = reuse.stale_indices(debian.hosts(recorded, offers))
    assert len(stale) == 1
    assert stale[0].startswith(f"ka-nvidia-dkms: bookworm-security main: {HEADERS} versions changed (")


def test_a_download_that_does_not_match_inrelease_is_not_reused(debian):
    recorded = debian.publish(BASE_PACKAGES)
    debian.publish(BASE_PACKAGES + "Package: other\nVersion: 1\n", listed_sha="ab" * 32)
    stale = reuse.stale_indices(debian.hosts(recorded))
    assert len(stale) == 1 and "cannot be read" in stale[0] and "SHA-256" in stale[0]


def test_a_decompressed_index_that_does_not_match_inrelease_is_not_reused(debian, monkeypatch):
    recorded = debian.publish(BASE_PACKAGES)
    debian.publish(BASE_PACKAGES + "Package: other\nVersion: 1\n")
    inrelease = debian.root / "debian-security/dists/bookworm-security/InRelease"
    text = inrelease.read_text(encoding="utf-8").splitlines()
    text = [f" {'cd' * 32} 1 {FakeRepository.META}" if line.endswith(f" {FakeRepository.META}") else line
            for line in text]
    inrelease.write_text("\n".join(text) + "\n", encoding="utf-8")
    stale = reuse.stale_indices(debian.hosts(recorded))
    assert len(stale) == 1 and "decompressed" in stale[0]


def test_a_changed_index_that_cannot_be_fetched_is_not_reused(debian):
    recorded = debian.publish(BASE_PACKAGES)
    debian.publish(BASE_PACKAGES + "Package: other\nVersion: 1\n")
    (debian.root / "debian-security/dists/bookworm-security/main/binary-amd64/Packages.xz").unlink()
    stale = reuse.stale_indices(debian.hosts(recorded))
    assert len(stale) == 1 and "cannot be read" in stale[0] and "404" in stale[0]


def test_an_unreachable_repository_is_not_reused(debian):
    recorded = debian.publish(BASE_PACKAGES)
    hosts = debian.hosts(recorded)
    debian.close()
    stale = reuse.stale_indices(hosts)
    assert len(stale) == 1 and "InRelease unreachable" in stale[0]


def test_a_changed_index_without_recorded_versions_is_not_reused(debian):
    recorded = debian.publish(BASE_PACKAGES)
    hosts = debian.hosts(recorded)
    del hosts["ka-nvidia-dkms"]["indices"][0]["offers"]
    assert reuse.stale_indices(hosts) == []  # unchanged: nothing to compare
    debian.publish(BASE_PACKAGES + "Package: other\nVersion: 1\n")
    assert "no versions recorded" in reuse.stale_indices(hosts)[0]
    assert reuse.stale_indices({"h": []}) == ["h: no package data recorded"]


def test_an_index_apt_never_downloaded_and_a_repository_on_the_host_are_not_fetched():
    def fail(*args):
        raise AssertionError("fetched")
    rows = [{"meta_key": "main/binary-amd64/Packages", "base_uri": "http://deb.example/debian/dists/bookworm/",
             "sha256": "missing", "file": "/x"},
            {"meta_key": "Packages", "base_uri": "file:/srv/ka-pkgdb/./", "sha256": "11" * 32, "file": "/y",
             "offers": {}}]
    assert reuse.stale_indices({"h": {"packages": {}, "indices": rows}}, release=fail, index=fail) == []


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


def test_a_record_is_reused_until_an_installed_package_changes_in_its_index(repo, tmp_path, monkeypatch, debian):
    monkeypatch.setenv("KA_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("KA_MOLECULE_REUSE", raising=False)
    s = scenario(repo)
    data = reuse.inputs(s, images=IMAGES, tools=TOOLS, env={})
    recorded = debian.publish(BASE_PACKAGES)
    reuse.write_record(s, data, debian.hosts(recorded), 12.0, {})
    debian.publish(BASE_PACKAGES.replace("gcc-12\nVersion: 12.2.0-14+deb12u1", "gcc-12\nVersion: 12.2.0-14+deb12u2"))
    assert reuse.find_reusable(s, data)[1] == "unchanged"
    debian.publish(BASE_PACKAGES.replace("6.1.158-1", "6.1.159-1"))
    record, why = reuse.find_reusable(s, data)
    assert record is None
    assert why == (f"package indices changed: ka-nvidia-dkms: bookworm-security main: {HEADERS} versions changed "
                   "(6.1.158-1 -> 6.1.159-1)")


def test_a_record_of_the_older_format_is_never_reused(repo, tmp_path, monkeypatch):
    """KEY_VERSION 1 records held whole-index hashes only: a new key, and a record without hosts is refused."""
    monkeypatch.setenv("KA_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("KA_MOLECULE_REUSE", raising=False)
    s = scenario(repo)
    data = reuse.inputs(s, images=IMAGES, tools=TOOLS, env={})
    assert data["key_version"] == reuse.KEY_VERSION >= 2
    old = {**data, "key_version": 1}
    reuse.write_record(s, old, {}, 12.0, {})
    record, why = reuse.find_reusable(s, data)
    assert record is None and "key_version" in why
    path = reuse.write_record(s, data, {}, 12.0, {})
    legacy = json.loads(path.read_text(encoding="utf-8"))
    legacy["indices"] = legacy.pop("hosts")
    path.write_text(json.dumps(legacy), encoding="utf-8")
    assert reuse.find_reusable(s, data) == (None, "record has no package data (an older format)")


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


def test_what_a_plugin_reads_from_the_collection_is_an_input(repo, monkeypatch):
    write(repo / "roles/r3/defaults/main.yml", "x: 1\n")
    monkeypatch.setitem(reuse.PLUGIN_READS, "plugins/action/m1.py", ("roles/*/defaults/main.yml",))
    files = {p.relative_to(repo).as_posix() for p in reuse.input_files(scenario(repo))}
    assert "roles/r3/defaults/main.yml" in files and "roles/r3/tasks/main.yml" not in files


def test_every_plugin_that_reads_collection_files_is_listed():
    """A plugin that finds files through its own location reads the collection at run time: PLUGIN_READS must name
    it, or a scenario's key would miss those files."""
    repo = Path(reuse.__file__).resolve().parents[2]
    readers = {p.relative_to(repo).as_posix() for p in (repo / "plugins").glob("*/*.py") if "__file__" in p.read_text()}
    assert readers == set(reuse.PLUGIN_READS)


def test_prose_and_python_comments_name_nothing(repo):
    write(repo / "roles/r1/meta/argument_specs.yml",
          "argument_specs:\n  main:\n    short_description: like r3\n    options:\n      a: {description: see m2}\n")
    write(repo / "plugins/module_utils/u.py", '"""Docstring naming unused_util and tests/data/unused.json."""\n'
          "# a comment naming r3\nfrom ansible.module_utils import u2\nx = 1\n")
    files = {p.relative_to(repo).as_posix() for p in reuse.input_files(scenario(repo))}
    assert not files & {"roles/r3/tasks/main.yml", "plugins/modules/m2.py", "plugins/module_utils/unused_util.py",
                        "tests/data/unused.json"}
    assert "plugins/module_utils/u2.py" in files
