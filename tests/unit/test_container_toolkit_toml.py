"""The containerd module and nvidia_runtime_config parse TOML on the host: tomllib (Python 3.11+) or python3-toml.
The role installs the distro's python3-toml before each module runs wherever the host's Python lacks tomllib (Ubuntu
22.04: 3.10, RHEL 9: 3.9), and nowhere else."""

from __future__ import annotations

from pathlib import Path

import jinja2
import pytest
import yaml

ROLE = Path(__file__).resolve().parents[2] / "roles" / "container_toolkit"
# Each task file and the module in it that parses TOML.
MODULES = {"containerd.yml": "kube_accel.gpu.containerd_nvidia_dropin",
           "runtime_config.yml": "kube_accel.gpu.nvidia_runtime_config"}
ENV = jinja2.Environment(undefined=jinja2.StrictUndefined)


def family_vars(family: str) -> dict:
    return yaml.safe_load((ROLE / "vars" / f"{family}.yml").read_text())


def installs_before_module(tasks_file: str, family: str, major: int, minor: int) -> list[str]:
    variables = {**family_vars(family),
                 "ansible_facts": {"os_family": family, "python": {"version": {"major": major, "minor": minor}}}}
    installed = []
    for task in yaml.safe_load((ROLE / "tasks" / tasks_file).read_text()):
        if MODULES[tasks_file] in task:
            return installed
        when = task.get("when", True)
        whens = when if isinstance(when, list) else [when]
        if not all(w is True or ENV.compile_expression(str(w))(**variables) for w in whens):
            continue
        for key in ("ansible.builtin.package", "ansible.builtin.apt", "ansible.builtin.dnf"):
            if key in task:
                name = ENV.from_string(str(task[key]["name"])).render(**variables)
                installed.append(name)
    raise AssertionError(f"{MODULES[tasks_file]} task not found in {tasks_file}")


@pytest.mark.parametrize(("family", "major", "minor"), [("Debian", 3, 10), ("RedHat", 3, 9), ("Debian", 3, 9)],
                         ids=["ubuntu-22.04", "rhel-9", "debian-11"])
@pytest.mark.parametrize("tasks_file", sorted(MODULES))
def test_toml_parser_installed_without_tomllib(tasks_file, family, major, minor):
    assert installs_before_module(tasks_file, family, major, minor) == ["python3-toml"]


@pytest.mark.parametrize(("family", "minor"), [("Debian", 11), ("Debian", 12), ("RedHat", 12)])
@pytest.mark.parametrize("tasks_file", sorted(MODULES))
def test_no_install_with_tomllib(tasks_file, family, minor):
    assert installs_before_module(tasks_file, family, 3, minor) == []
