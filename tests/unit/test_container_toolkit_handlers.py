"""container_toolkit's restart handlers against simulated hosts: the runtime is restarted wherever systemd has its
unit (distro package in /usr/lib/systemd/system, kubespray's unit in /etc/systemd/system), and never where systemd
is not the service manager or has no such unit. On k3s and RKE2 (containerd inside their service) the one of their
two services that runs on the node is restarted, and nothing where none runs.

The handlers file is evaluated task by task the way Ansible would (``when`` as a Jinja expression, ``register``),
with each module's answer taken from the simulated host.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import jinja2
import jinja2.nativetypes
import pytest
import yaml

ROLE = Path(__file__).resolve().parents[2] / "roles" / "container_toolkit"
HANDLERS = yaml.safe_load((ROLE / "handlers" / "main.yml").read_text())
VARS = {**yaml.safe_load((ROLE / "defaults" / "main.yml").read_text()),
        **yaml.safe_load((ROLE / "vars" / "main.yml").read_text())}
ENV = jinja2.Environment(undefined=jinja2.StrictUndefined)
# Ansible renders variables lazily and keeps native types (a dict, a bool) when a value is one expression.
NATIVE = jinja2.nativetypes.NativeEnvironment(undefined=jinja2.StrictUndefined)


def resolve(variables):
    """Variables whose values are templates rendered against each other (those that need facts stay text)."""
    out = dict(variables)
    for _ in range(5):
        for name, value in out.items():
            if isinstance(value, str) and "{{" in value:
                # Those that need facts or the collection's own filters stay text.
                with contextlib.suppress(jinja2.TemplateError):
                    out[name] = NATIVE.from_string(value).render(**out)
    return out


MODULE_KEYS = ("ansible.builtin.stat", "ansible.builtin.command", "ansible.builtin.systemd_service",
               "ansible.builtin.debug", "ansible.builtin.service_facts")


def render(value, variables):
    if isinstance(value, str):
        return NATIVE.from_string(value).render(**variables)
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

    def __init__(self, service_mgr: str, unit_files: list[str], active=()):
        self.service_mgr = service_mgr
        self.unit_files = unit_files
        self.active = set(active)
        self.restarted = []

    def run(self, module: str, args):
        if module == "ansible.builtin.stat":
            return {"stat": {"exists": args["path"] in self.unit_files}}
        if module == "ansible.builtin.command" and args["argv"][:2] == ["systemctl", "is-active"]:
            if self.service_mgr != "systemd":
                return {"rc": 1, "stdout": "", "stdout_lines": [], "stderr": "System has not been booted with systemd"}
            # One line per unit, in the order asked; a unit without a file is "inactive" too.
            lines = ["active" if unit in self.active else "inactive" for unit in args["argv"][2:]]
            return {"rc": 0 if "inactive" not in lines else 3, "stdout": "\n".join(lines), "stdout_lines": lines}
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
            self.restarted.append(args.get("name"))
            return {"changed": True, "name": args.get("name")}
        return {}


def run_handlers(host: Host, runtime: str, distribution: str = "kubeadm") -> list[str]:
    """Names of the handler tasks that run for the runtime's restart topic (a loop's task once per item it ran)."""
    variables = resolve({**VARS, "container_toolkit_runtime": runtime,
                         "container_toolkit_kubernetes_distribution": distribution,
                         "ansible_facts": {"service_mgr": host.service_mgr}})
    ran = []
    for task in HANDLERS:
        listen = task.get("listen", [])
        if f"container_toolkit restart {runtime}" not in (listen if isinstance(listen, list) else [listen]):
            continue
        module = next(k for k in MODULE_KEYS if k in task)
        index_var = task.get("loop_control", {}).get("index_var", "index")
        items = [(None, {})] if "loop" not in task else [
            (item, {"item": item, index_var: i}) for i, item in enumerate(render(task["loop"], variables))]
        result = {"skipped": True}
        for _item, extra in items:
            scope = {**variables, **extra}
            if condition(task, scope):
                result = host.run(module, render(task[module], scope))
                ran.append(task["name"])
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


DISTRIBUTION_RESTART = "Restart the distribution's service (its containerd reads the drop-in at start)"
NOT_RUNNING = "Say that the distribution's service was not restarted"


@pytest.mark.parametrize(("distribution", "units", "active", "restarted"), [
    ("k3s", ["k3s.service"], ["k3s.service"], ["k3s.service"]),  # server (install script, INSTALL_K3S_EXEC server)
    ("k3s", ["k3s-agent.service"], ["k3s-agent.service"], ["k3s-agent.service"]),  # agent (K3S_URL set)
    # RKE2's tarball and RPMs install both units; rke2-agent's ExecCondition refuses to start beside the server.
    ("rke2", ["rke2-server.service", "rke2-agent.service"], ["rke2-agent.service"], ["rke2-agent.service"]),
    ("rke2", ["rke2-server.service", "rke2-agent.service"], ["rke2-server.service"], ["rke2-server.service"]),
], ids=["k3s-server", "k3s-agent", "rke2-agent", "rke2-server"])
def test_distribution_restarts_the_service_that_runs_containerd(distribution, units, active, restarted):
    host = Host("systemd", [f"/etc/systemd/system/{u}" for u in units], active)
    ran = run_handlers(host, "containerd", distribution)
    assert host.restarted == restarted, ran
    # Never the containerd unit: a node may carry Debian's containerd package beside k3s, which is not the
    # kubelet's runtime there.
    assert RESTART not in ran and NOT_RUNNING not in ran


@pytest.mark.parametrize("service_mgr", ["systemd", "none"])
def test_distribution_not_running_is_said_not_restarted(service_mgr):
    host = Host(service_mgr, ["/usr/local/lib/systemd/system/rke2-server.service"], active=[])
    ran = run_handlers(host, "containerd", "rke2")
    assert host.restarted == [] and NOT_RUNNING in ran, ran


def test_kubeadm_path_unchanged_beside_a_distribution_unit():
    # kubeadm (the default): containerd's own unit, whatever else the host has.
    host = Host("systemd", ["/usr/lib/systemd/system/containerd.service", "/etc/systemd/system/k3s.service"],
                active=["k3s.service"])
    ran = run_handlers(host, "containerd")
    assert host.restarted == ["containerd"] and DISTRIBUTION_RESTART not in ran
