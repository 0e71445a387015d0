"""iommu's grubby path (RHEL family: tasks/grubby.yml) against a simulated grubby: no RHEL host or grubby here, so the
task file is evaluated the way Ansible would (tests/unit/tasksim.py) and the host keeps real boot-entry argument
lists that grubby --args / --remove-args edit. The state file records only what kube-accel added, so
turning the IOMMU off leaves the arguments the operator had set."""

from __future__ import annotations

import base64
import shlex
from pathlib import Path

import yaml
from tasksim import RoleVars, run_tasks

ROLE = Path(__file__).resolve().parents[2] / "roles" / "iommu"
TASKS = yaml.safe_load((ROLE / "tasks" / "grubby.yml").read_text())
STATE = "/etc/kube-accel/iommu-kernel-args"
MODULE_KEYS = ("ansible.builtin.slurp", "ansible.builtin.command", "ansible.builtin.copy", "ansible.builtin.set_fact",
               "ansible.builtin.debug")


class GrubbyHost:
    def __init__(self, entries):
        self.entries = [list(e) for e in entries]
        self.files: dict[str, str] = {}
        self.reported: list[str] = []

    def run(self, module, args, check):
        if module == "ansible.builtin.debug":
            self.reported.append(" ".join(args["msg"].split()))
            return {}
        if module == "ansible.builtin.slurp":
            if args["src"] not in self.files:
                return {"failed": True}
            return {"content": base64.b64encode(self.files[args["src"]].encode()).decode()}
        if module == "ansible.builtin.copy":
            if check:
                return {"changed": self.files.get(args["dest"]) != args["content"]}
            changed = self.files.get(args["dest"]) != args["content"]
            self.files[args["dest"]] = args["content"]
            return {"changed": changed}
        argv = args["argv"] if isinstance(args, dict) else shlex.split(args)
        if argv == ["grubby", "--info=ALL"]:
            lines = []
            for i, entry in enumerate(self.entries):
                lines += [f"index={i}", f'args="{" ".join(entry)}"', f"kernel=/boot/vmlinuz-{i}"]
            return {"rc": 0, "stdout_lines": lines}
        assert argv[:2] == ["grubby", "--update-kernel=ALL"], argv
        if check:  # the command module in check mode: skipped, nothing run, no change reported
            return {"skipped": True, "changed": False}
        option, _, values = argv[2].partition("=")
        for entry in self.entries:
            for value in values.split():
                if option == "--args" and value not in entry:
                    entry.append(value)
                if option == "--remove-args" and value in entry:
                    entry.remove(value)
        return {"rc": 0}


def converge(host, kernel_args, check=False):
    variables = RoleVars({}, {"ansible_check_mode": check, "iommu_state_file": STATE, "iommu_kernel_args": kernel_args})
    run_tasks(TASKS, host, variables, MODULE_KEYS)
    return variables


def test_operator_arguments_stay_when_the_iommu_is_turned_off():
    host = GrubbyHost([["ro", "quiet", "iommu=pt"], ["ro", "iommu=pt"]])  # the operator set iommu=pt
    converge(host, ["intel_iommu=on", "iommu=pt"])
    assert host.entries == [["ro", "quiet", "iommu=pt", "intel_iommu=on"], ["ro", "iommu=pt", "intel_iommu=on"]]
    assert host.files[STATE] == "intel_iommu=on\n"
    converge(host, ["intel_iommu=on", "iommu=pt"])  # a second run keeps owning what it added
    assert host.files[STATE] == "intel_iommu=on\n"
    converge(host, [])  # iommu_enabled: false
    assert host.entries == [["ro", "quiet", "iommu=pt"], ["ro", "iommu=pt"]]
    assert host.files[STATE] == "\n"


def test_arguments_kube_accel_added_are_removed():
    host = GrubbyHost([["ro"]])
    converge(host, ["intel_iommu=on", "iommu=pt"])
    assert host.files[STATE] == "intel_iommu=on iommu=pt\n"
    converge(host, [])
    assert host.entries == [["ro"]]


def test_check_mode_reports_the_bootloader_change_and_makes_none():
    """The hosts play's check-mode probe (an upgrade of kube-accel) counts changed tasks: grubby's command tasks skip
    in check mode, so a report task must say what they would do. It failed before: nothing was reported."""
    host = GrubbyHost([["ro"], ["ro", "intel_iommu=on"]])
    converge(host, ["intel_iommu=on", "iommu=pt"], check=True)
    assert host.entries == [["ro"], ["ro", "intel_iommu=on"]] and STATE not in host.files
    assert host.reported == ["grubby would add intel_iommu=on iommu=pt on every boot entry"]
    converge(host, ["intel_iommu=on", "iommu=pt"])
    assert host.reported == ["grubby would add intel_iommu=on iommu=pt on every boot entry"]  # a real run: no report
    converge(host, ["intel_iommu=on", "iommu=pt"], check=True)  # converged: nothing to report
    assert len(host.reported) == 1
    converge(host, [], check=True)
    assert host.reported[-1] == "grubby would remove intel_iommu=on iommu=pt on every boot entry"
