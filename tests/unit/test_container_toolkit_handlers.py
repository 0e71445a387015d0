"""container_toolkit's restart handlers against simulated hosts: the runtime is restarted wherever systemd has its
unit (distro package in /usr/lib/systemd/system, kubespray's unit in /etc/systemd/system), and never where systemd
is not the service manager or has no such unit.

The handlers file is evaluated task by task the way Ansible would (``when`` as a Jinja expression, ``register``),
with each module's answer taken from the simulated host.
"""

from __future__ import annotations

from pathlib import Path

import jinja2
import pytest
import yaml

ROLE = Path(__file__).resolve().parents[2] / "roles" / "container_toolkit"
HANDLERS = yaml.safe_load((ROLE / "handlers" / "main.yml").read_text())
VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
ENV = jinja2.Environment(undefined=jinja2.StrictUndefined)
MODULE_KEYS = ("ansible.builtin.stat", "ansible.builtin.command", "ansible.builtin.systemd_service",
               "ansible.builtin.debug", "ansible.builtin.service_facts")


def render(value, variables):
    if isinstance(value, str):
        return ENV.from_string(value).render(**variables)
    if isinstance(value, list):
        return [render(v, variables) for v in value]
    if isinstance(value, dict):
        return {k: render(v, variables) for k, v in value.items()}
    return value


def condition(task, variables) -> bool:
    when = task.get("when")
    if when is None:
        return True
    whens = when if isinstance(when, list) else [when]
    return all(ENV.compile_expression(str(w))(**variables) for w in whens)


class Host:
    """What a host answers: unit files on disk, and systemd's view of them when systemd runs."""

    def __init__(self, service_mgr: str, unit_files: list[str]):
        self.service_mgr = service_mgr
        self.unit_files = unit_files

    def run(self, module: str, args):
        if module == "ansible.builtin.stat":
            return {"stat": {"exists": args["path"] in self.unit_files}}
        if module == "ansible.builtin.command":
            argv = args["argv"]
            assert argv[:2] == ["systemctl", "show"], argv
            unit = argv[-1]
            found = [p for p in self.unit_files if p.rsplit("/", 1)[-1] == unit]
            if self.service_mgr != "systemd":
                return {"rc": 1, "stdout": "", "stderr": "System has not been booted with systemd"}
            out = {"LoadState": "loaded" if found else "not-found", "FragmentPath": found[0] if found else ""}
            wanted = [a.split("=", 1)[1] for a in argv if a.startswith("--property=")]
            props = [p for w in wanted for p in w.split(",")] or list(out)
            if "--value" in argv:
                return {"rc": 0, "stdout": "\n".join(out[p] for p in props), "stderr": ""}
            return {"rc": 0, "stdout": "\n".join(f"{p}={out[p]}" for p in props), "stderr": ""}
        if module == "ansible.builtin.systemd_service":
            return {"changed": True, "name": args.get("name")}
        return {}


def run_handlers(host: Host, runtime: str) -> list[str]:
    """Names of the handler tasks that run for the runtime's restart topic."""
    variables = {**VARS, "container_toolkit_runtime": runtime,
                 "ansible_facts": {"service_mgr": host.service_mgr}}
    ran = []
    for task in HANDLERS:
        listen = task.get("listen", [])
        if f"container_toolkit restart {runtime}" not in (listen if isinstance(listen, list) else [listen]):
            continue
        module = next(k for k in MODULE_KEYS if k in task)
        if condition(task, variables):
            result = host.run(module, render(task[module], variables))
            ran.append(task["name"])
        else:
            result = {"skipped": True}
        if "register" in task:
            variables[task["register"]] = result
    return ran


RESTART = "Restart the container runtime"


@pytest.mark.parametrize(("unit_files", "restarted"), [
    (["/usr/lib/systemd/system/containerd.service"], True),  # Debian/Ubuntu/RHEL package
    (["/etc/systemd/system/containerd.service"], True),  # kubespray's unit
    (["/lib/systemd/system/containerd.service"], True),  # split-usr Debian
    ([], False),  # containerd from a tarball without a unit
], ids=["distro-package", "kubespray", "split-usr", "no-unit"])
def test_containerd_restarted_wherever_systemd_has_the_unit(unit_files, restarted):
    ran = run_handlers(Host("systemd", unit_files), "containerd")
    assert (RESTART in ran) is restarted, ran
    assert ("Say that the runtime was not restarted" in ran) is not restarted


@pytest.mark.parametrize("runtime", ["crio", "docker"])
def test_other_runtimes_from_etc_systemd_system(runtime):
    unit = VARS["container_toolkit_unit"][runtime]
    assert RESTART in run_handlers(Host("systemd", [f"/etc/systemd/system/{unit}.service"]), runtime)


def test_no_restart_without_systemd():
    # Lab hosts and Molecule containers: a unit file on disk but no systemd as PID 1.
    ran = run_handlers(Host("none", ["/usr/lib/systemd/system/containerd.service"]), "containerd")
    assert RESTART not in ran
    assert "Say that the runtime was not restarted" in ran
