"""The containerd module parses TOML on the host: tomllib (Python 3.11+) or python3-toml. The role installs the
distro's python3-toml before the module runs wherever the host's Python lacks tomllib (Ubuntu 22.04: 3.10, RHEL 9:
3.9), and nowhere else."""

from __future__ import annotations

from pathlib import Path

import jinja2
import pytest
import yaml

ROLE = Path(__file__).resolve().parents[2] / "roles" / "container_toolkit"
TASKS = yaml.safe_load((ROLE / "tasks" / "containerd.yml").read_text())
ENV = jinja2.Environment(undefined=jinja2.StrictUndefined)


def family_vars(family: str) -> dict:
    return yaml.safe_load((ROLE / "vars" / f"{family}.yml").read_text())


def installs_before_module(family: str, major: int, minor: int) -> list[str]:
    variables = {**family_vars(family),
                 "ansible_facts": {"os_family": family, "python": {"version": {"major": major, "minor": minor}}}}
    installed = []
    for task in TASKS:
        if "kube_accel.gpu.containerd_nvidia_dropin" in task:
            return installed
        when = task.get("when", True)
        whens = when if isinstance(when, list) else [when]
        if not all(w is True or ENV.compile_expression(str(w))(**variables) for w in whens):
            continue
        for key in ("ansible.builtin.package", "ansible.builtin.apt", "ansible.builtin.dnf"):
            if key in task:
                name = ENV.from_string(str(task[key]["name"])).render(**variables)
                installed.append(name)
    raise AssertionError("containerd_nvidia_dropin task not found")


@pytest.mark.parametrize(("family", "major", "minor"), [("Debian", 3, 10), ("RedHat", 3, 9), ("Debian", 3, 9)],
                         ids=["ubuntu-22.04", "rhel-9", "debian-11"])
def test_toml_parser_installed_without_tomllib(family, major, minor):
    assert installs_before_module(family, major, minor) == ["python3-toml"]


@pytest.mark.parametrize(("family", "minor"), [("Debian", 11), ("Debian", 12), ("RedHat", 12)])
def test_no_install_with_tomllib(family, minor):
    assert installs_before_module(family, 3, minor) == []
