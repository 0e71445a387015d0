"""container_toolkit's repository key (tasks/repo_key.yml, imported by repo-debian.yml and repo-redhat.yml) evaluated
against a simulated host (tests/unit/tasksim.py): NVIDIA's key URL answers with a key, the role checks it against
the pinned fingerprint and only then writes it for apt or dnf. Keys are GnuPG's (tests/unit/gpgkeys.py).
Molecule cannot reach NVIDIA's repository, so the download path is exercised here."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from gpgkeys import make_key
from tasksim import AssertionFailed, RoleVars, run_tasks

ROLE = Path(__file__).resolve().parents[2] / "roles" / "container_toolkit"
TASKS = yaml.safe_load((ROLE / "tasks" / "repo_key.yml").read_text())
MAIN_VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
FAMILY_VARS = {f: yaml.safe_load((ROLE / "vars" / f"{f}.yml").read_text()) for f in ("Debian", "RedHat")}
MODULE_KEYS = ("ansible.builtin.uri", "ansible.builtin.copy")
NVIDIA = "C95B321B61E88C1809C4F759DDCAE044F796ECB0"


class Host:
    def __init__(self, served):
        self.served, self.files, self.events = served, {}, []

    def run(self, module, args, check):
        if module == "ansible.builtin.uri":
            self.events.append(("fetch", args["url"]))
            return {"status": 200, "content": self.served}
        self.events.append(("write", args["dest"]))
        changed = self.files.get(args["dest"]) != args["content"]
        if not check:
            self.files[args["dest"]] = args["content"]
        return {"changed": changed}


def converge(host, family="Debian", check=False, **settings):
    base = {"ansible_check_mode": check, "container_toolkit_install_packages": True, "container_toolkit_repo_key": "",
            "container_toolkit_repo_key_url": "https://nvidia.github.io/libnvidia-container/gpgkey",
            "container_toolkit_repo_key_fingerprints": [make_key()[1]], **settings}
    variables = RoleVars({**MAIN_VARS, **FAMILY_VARS[family]}, base)
    run_tasks(TASKS, host, variables, MODULE_KEYS, ROLE / "tasks")
    return variables


@pytest.mark.parametrize(("family", "keyring"), [
    ("Debian", "/etc/apt/keyrings/kube-accel-nvidia-container-toolkit.asc"),
    ("RedHat", "/etc/pki/rpm-gpg/kube-accel-nvidia-container-toolkit.asc"),
])
def test_a_pinned_key_is_fetched_over_https_and_written(family, keyring):
    host = Host(make_key()[0])
    variables = converge(host, family)
    assert host.events == [("fetch", "https://nvidia.github.io/libnvidia-container/gpgkey"), ("write", keyring)]
    assert host.files == {keyring: make_key()[0]} and variables["container_toolkit_key_installed"]["changed"]
    converge(host, family)
    assert host.events[-1] == ("write", keyring)  # the same key again: written unchanged (idempotent)


def test_a_swapped_key_is_refused_and_nothing_written():
    """The attack: whoever answers for nvidia.github.io serves their own key. Without the pin, get_url would write it
    into the keyring apt trusts for the repository."""
    attacker, attacker_fpr = make_key("attacker <attacker@evil.invalid>")
    host = Host(attacker)
    with pytest.raises(AssertionFailed) as failed:
        converge(host)
    assert attacker_fpr in str(failed.value) and "not pinned" in str(failed.value)
    assert host.files == {} and [e[0] for e in host.events] == ["fetch"]


def test_nvidias_fingerprint_is_the_default_pin():
    host = Host(make_key()[0])
    with pytest.raises(AssertionFailed) as failed:
        converge(host, container_toolkit_repo_key_fingerprints=[])
    assert NVIDIA in str(failed.value) and host.files == {}


def test_a_plain_http_key_url_is_refused_before_the_download():
    host = Host(make_key()[0])
    with pytest.raises(AssertionFailed, match="not an https URL"):
        converge(host, container_toolkit_repo_key_url="http://nvidia.github.io/libnvidia-container/gpgkey")
    assert host.events == []


def test_an_inline_key_is_checked_too():
    host = Host(None)
    converge(host, container_toolkit_repo_key=make_key()[0])
    assert [e[0] for e in host.events] == ["write"]
    with pytest.raises(AssertionFailed, match=r"inline\).*not pinned"):
        converge(Host(None), container_toolkit_repo_key=make_key("other <o@kube-accel.invalid>")[0])


def test_without_packages_nothing_is_fetched_or_written():
    host = Host(None)
    converge(host, container_toolkit_install_packages=False)
    assert host.events == []


def test_check_mode_checks_the_key_and_writes_nothing():
    host = Host(make_key()[0])
    converge(host, check=True)
    assert host.files == {} and host.events[0][0] == "fetch"
    with pytest.raises(AssertionFailed):
        converge(Host(make_key("attacker <attacker@evil.invalid>")[0]), check=True)
