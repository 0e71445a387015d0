"""nvidia_driver's RHEL tasks (tasks/redhat.yml, vars/RedHat.yml) against simulated RHEL hosts: there is no RHEL
host or image in CI, so the task file is evaluated task by task the way Ansible would (``when`` as a Jinja expression,
``register``, blocks, the role's own filters), with each module's answer taken from the simulated host. What the
tests assert is the sequence of actions the host would see: EPEL before the DKMS stream, ``dnf module
switch-to`` under a lifted version lock on a branch or flavour change, the ``fm`` profile on NVSwitch
systems, and the reboot the change asks for; the CUDA repository key fetched over https only and written for dnf only
when its fingerprint is pinned (tasks/repo_key.yml).
"""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml
from gpgkeys import make_key
from tasksim import OMIT, AssertionFailed, RoleVars, render, run_tasks

ROLE = Path(__file__).resolve().parents[2] / "roles" / "nvidia_driver"
TASKS = yaml.safe_load((ROLE / "tasks" / "redhat.yml").read_text())
RH_VARS = yaml.safe_load((ROLE / "vars" / "RedHat.yml").read_text())
MAIN_VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
MODULE_FILE = "[nvidia-driver]\nname=nvidia-driver\nstream={stream}\nprofiles={profile}\nstate=enabled\n"
MODULE_KEYS = ("ansible.builtin.stat", "ansible.builtin.slurp", "ansible.builtin.command",
               "ansible.builtin.yum_repository", "ansible.builtin.dnf", "community.general.dnf_versionlock",
               "ansible.builtin.debug", "ansible.builtin.set_fact", "ansible.builtin.uri", "ansible.builtin.copy")
KEYRING = "/etc/pki/rpm-gpg/kube-accel-cuda.asc"
NVIDIA_RPM_KEY = "610C7B14E068A878070DA4E99CD0A493D42D0685"


class RhelHost:
    """What a RHEL 9 host answers: repository files, the enabled nvidia-driver stream, the installed driver."""

    def __init__(self, epel=False, stream="", profile="default", installed="", served_key=None):
        self.files = {"/etc/yum.repos.d/epel.repo": "[epel]\n"} if epel else {}
        # What the key URL answers: by default the test key the converge pins (standing in for NVIDIA's).
        self.served_key = make_key()[0] if served_key is None else served_key
        if stream:
            self.files["/etc/dnf/modules.d/nvidia-driver.module"] = MODULE_FILE.format(stream=stream, profile=profile)
        self.installed = installed
        self.events: list[tuple] = []

    def run(self, module: str, args: dict, check: bool) -> dict:
        if module == "ansible.builtin.stat":
            return {"stat": {"exists": args["path"] in self.files}}
        if module == "ansible.builtin.slurp":
            if args["src"] not in self.files:
                return {"failed": True, "msg": "file not found"}
            return {"content": base64.b64encode(self.files[args["src"]].encode()).decode()}
        if module == "ansible.builtin.command":
            argv = args["argv"]
            if argv[0] == "rpm":
                return {"rc": 0 if self.installed else 1, "stdout": self.installed}
            assert argv[:4] == ["dnf", "-y", "module", "switch-to"], argv
            self.events.append(("switch-to", argv[4]))
            return {"changed": True, "rc": 0}
        if module == "ansible.builtin.yum_repository":
            self.events.append(("repo", args["name"], {k: v for k, v in args.items() if v != OMIT and k != "name"}))
            return {"changed": True}
        if module == "ansible.builtin.dnf":
            self.events.append(("dnf", args["name"], bool(args.get("allow_downgrade"))))
            return {"changed": True}
        if module == "community.general.dnf_versionlock":
            self.events.append(("versionlock", args["state"]))
            return {"changed": True}
        if module == "ansible.builtin.uri":
            self.events.append(("fetch", args["url"], check))
            return {"status": 200, "content": self.served_key}
        if module == "ansible.builtin.copy":
            changed = self.files.get(args["dest"]) != args["content"]
            self.events.append(("key", args["dest"]))
            if not check:
                self.files[args["dest"]] = args["content"]
            return {"changed": changed}
        if module == "ansible.builtin.debug":
            self.events.append(("say", args["msg"]))
            return {"changed": False}
        raise AssertionError(f"unexpected module {module}")


def converge(host: RhelHost, check=False, **settings):
    base = {"ansible_facts": {"distribution_major_version": "9", "architecture": "x86_64", "kernel": "5.14.0-503"},
            "ansible_check_mode": check, "omit": OMIT, "nvidia_driver_branch": "550",
            "nvidia_driver_source": "cuda-repo",
            "nvidia_driver_version": "", "nvidia_driver_install_packages": True, "nvidia_driver_install_headers": True,
            "nvidia_driver_extra_packages": [], "nvidia_driver_flavor": "", "nvidia_driver_fabricmanager": "auto",
            "nvidia_driver_epel": True, "nvidia_driver_epel_baseurl": "",
            "nvidia_driver_epel_metalink": "https://mirrors.fedoraproject.org/metalink?repo=epel-$releasever",
            "nvidia_driver_epel_gpgkey": "https://dl.fedoraproject.org/pub/epel/RPM-GPG-KEY-EPEL-9",
            "nvidia_driver_cuda_repo_url": "", "nvidia_driver_cuda_repo_key_url": "", "nvidia_gpus": {},
            # The test key stands in for NVIDIA's (whose private half signs NVIDIA's repository, not these tests).
            "nvidia_driver_cuda_repo_key": "", "nvidia_driver_cuda_repo_key_fingerprints": [make_key()[1]]}
    base.update(settings)
    variables = RoleVars({**MAIN_VARS, **RH_VARS}, base)
    run_tasks(TASKS, host, variables, MODULE_KEYS, ROLE / "tasks")
    return host.events, variables


def actions(events):
    """The package actions (the key's fetch and write are checked by the key tests)."""
    return [e[0] if e[0] != "dnf" else ("dnf", (e[1],) if isinstance(e[1], str) else tuple(e[1])) for e in events
            if e[0] not in ("fetch", "key")]


HGX = {"nvswitch": True, "gpus": [{"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"}]}
B200 = {"nvswitch": True, "gpus": [{"name": "NVIDIA B200", "compute_capability": "10.0"}]}
HEADERS = ("dnf", ("kernel-devel-5.14.0-503", "kernel-headers-5.14.0-503"))
PLUGIN = ("dnf", ("python3-dnf-plugin-versionlock",))


def test_fresh_host_gets_epel_before_the_dkms_stream():
    events, _ = converge(RhelHost())
    assert actions(events) == ["repo", "repo", HEADERS, PLUGIN, ("dnf", ("@nvidia-driver:550-dkms/default",)),
                               "versionlock"]
    epel = events[0]
    assert epel[1] == "kube-accel-epel" and epel[2]["gpgcheck"] is True and "metalink" in epel[2]
    assert events[-1] == ("versionlock", "present")


def test_host_with_epel_keeps_its_own_and_a_mirror_replaces_the_metalink():
    events, _ = converge(RhelHost(epel=True))
    assert [e[1] for e in events if e[0] == "repo"] == ["kube-accel-cuda"]
    events, _ = converge(RhelHost(), nvidia_driver_epel_baseurl="https://mirror.dc1.example.net/epel/9/x86_64")
    assert events[0][2] == {"description": "Extra Packages for Enterprise Linux (kube-accel, for dkms)",
                            "baseurl": "https://mirror.dc1.example.net/epel/9/x86_64",
                            "gpgkey": "https://dl.fedoraproject.org/pub/epel/RPM-GPG-KEY-EPEL-9", "gpgcheck": True}


def test_same_stream_again_neither_unlocks_nor_switches():
    events, variables = converge(RhelHost(epel=True, stream="550-dkms", installed="550.163.01-1.el9"))
    assert ("versionlock", "absent") not in events and not any(e[0] == "switch-to" for e in events)


def test_branch_change_switches_the_stream_under_a_lifted_lock_and_asks_for_a_reboot():
    events, variables = converge(RhelHost(epel=True, stream="550-dkms", installed="550.163.01-1.el9"),
                                 nvidia_driver_branch="570")
    assert actions(events)[2:] == [PLUGIN, "versionlock", "switch-to", ("dnf", ("@nvidia-driver:570-dkms/default",)),
                                   "versionlock"]
    assert [e for e in events if e[0] in ("versionlock", "switch-to")] == [
        ("versionlock", "absent"), ("switch-to", "nvidia-driver:570-dkms/default"), ("versionlock", "present")]
    assert render("{{ nvidia_driver_packages_changed }}", variables) is True


def test_branch_change_in_check_mode_is_reported_not_run():
    events, variables = converge(RhelHost(epel=True, stream="550-dkms", installed="550.163.01-1.el9"), check=True,
                                 nvidia_driver_branch="570")
    assert not any(e[0] == "switch-to" for e in events)
    assert ("say", "nvidia-driver module stream 550-dkms -> nvidia-driver:570-dkms/default (dnf module switch-to)") \
        in events
    assert variables["nvidia_driver_switch_check"]["changed"] is True
    assert render("{{ nvidia_driver_packages_changed }}", variables) is True


def test_nvswitch_host_gets_the_fm_profile_and_blackwell_the_open_stream():
    events, _ = converge(RhelHost(epel=True), nvidia_gpus=HGX)
    assert ("dnf", ("@nvidia-driver:550-dkms/fm",)) in actions(events)
    events, _ = converge(RhelHost(epel=True), nvidia_gpus=B200, nvidia_driver_branch="570")
    assert ("dnf", ("@nvidia-driver:570-open/fm",)) in actions(events)
    # proprietary -> open on an existing host is a stream switch too
    events, _ = converge(RhelHost(epel=True, stream="570-dkms", installed="570.86.10-1.el9"), nvidia_gpus=B200,
                         nvidia_driver_branch="570")
    assert ("switch-to", "nvidia-driver:570-open/fm") in events


def test_exact_version_change_installs_it_with_downgrades_under_a_lifted_lock():
    events, _ = converge(RhelHost(epel=True, stream="550-dkms", installed="550.163.01-1.el9"),
                         nvidia_driver_version="550.144.03")
    install = next(e for e in events if e[0] == "dnf" and e[1][0].startswith("@"))
    assert install == ("dnf", ["@nvidia-driver:550-dkms/default", "nvidia-driver-550.144.03"], True)
    assert [e for e in events if e[0] == "versionlock"] == [("versionlock", "absent"), ("versionlock", "present")]
    events, _ = converge(RhelHost(epel=True, stream="550-dkms", installed="550.144.03-1.el9"),
                         nvidia_driver_version="550.144.03")
    assert [e for e in events if e[0] == "versionlock"] == [("versionlock", "present")]


@pytest.mark.parametrize("install", [False])
def test_without_package_installs_only_the_repositories(install):
    events, _ = converge(RhelHost(), nvidia_driver_install_packages=install)
    assert actions(events) == ["repo", "repo"]


def test_the_key_is_fetched_over_https_checked_and_given_to_dnf_as_a_local_file():
    host = RhelHost(epel=True)
    events, _ = converge(host)
    assert events[:3] == [
        ("fetch", "https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64/D42D0685.pub", False),
        ("key", KEYRING),
        ("repo", "kube-accel-cuda", {"description": "NVIDIA CUDA (kube-accel)",
                                     "baseurl": "https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64",
                                     "gpgkey": f"file://{KEYRING}", "gpgcheck": True, "repo_gpgcheck": True})]
    assert host.files[KEYRING] == make_key()[0]


def test_a_key_without_the_pinned_fingerprint_is_refused_before_anything_is_written():
    """The attack: the key URL (or a machine in between) serves another key. Without the pin dnf would import whatever
    the URL served on first use; the play stops, names both fingerprints, and writes neither key nor repository."""
    other, other_fpr = make_key("attacker <attacker@evil.invalid>")
    host = RhelHost(epel=True, served_key=other)
    with pytest.raises(AssertionFailed) as failed:
        converge(host)
    assert other_fpr in str(failed.value) and make_key()[1] in str(failed.value)
    assert [e[0] for e in host.events] == ["fetch"] and KEYRING not in host.files


def test_nvidias_published_fingerprint_is_the_default_pin():
    host = RhelHost(epel=True)
    with pytest.raises(AssertionFailed) as failed:
        converge(host, nvidia_driver_cuda_repo_key_fingerprints=[])
    # The test key is not NVIDIA's: refused, and the message quotes the fingerprint NVIDIA publishes for D42D0685.
    assert NVIDIA_RPM_KEY in str(failed.value)
    assert not any(e[0] in ("key", "repo") for e in host.events)


def test_a_key_file_with_a_second_key_is_refused():
    extra = make_key("second <second@kube-accel.invalid>")[0]
    host = RhelHost(epel=True, served_key=make_key()[0] + extra)
    with pytest.raises(AssertionFailed, match="not pinned"):
        converge(host)
    assert KEYRING not in host.files


def test_a_key_url_that_is_not_https_is_refused_before_it_is_fetched():
    host = RhelHost(epel=True)
    with pytest.raises(AssertionFailed, match="not an https URL"):
        converge(host, nvidia_driver_cuda_repo_url="http://mirror.dc1.example.net/cuda/rhel9/x86_64")
    assert host.events == []


def test_an_inline_key_is_checked_and_nothing_is_fetched():
    host = RhelHost(epel=True)
    events, _ = converge(host, nvidia_driver_cuda_repo_url="http://mirror.dc1.example.net/cuda/rhel9/x86_64",
                         nvidia_driver_cuda_repo_key=make_key()[0])
    assert not [e for e in events if e[0] == "fetch"] and host.files[KEYRING] == make_key()[0]
    with pytest.raises(AssertionFailed, match="inline"):
        converge(RhelHost(epel=True), nvidia_driver_cuda_repo_key=make_key("x <x@kube-accel.invalid>")[0])


def test_check_mode_fetches_and_checks_the_key_but_writes_nothing():
    host = RhelHost(epel=True)
    events, _ = converge(host, check=True)
    assert events[0][0] == "fetch" and events[0][2] is False  # the GET runs in check mode too (check_mode: false)
    assert KEYRING not in host.files
    with pytest.raises(AssertionFailed):
        converge(RhelHost(epel=True, served_key=make_key("attacker <attacker@evil.invalid>")[0]), check=True)
