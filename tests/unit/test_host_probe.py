"""The hosts play's check-mode probe (ansible/hosts.yml), read from the playbook and the roles.

The probe runs tasks/host_roles.yml in check mode and learns that a task would change through one handler: tasks
without a notify of their own inherit it from the include's apply, tasks with one notify a role topic the handler
also listens to. These tests keep that complete as roles change, and name the host-role commands that check mode
skips (a skipped command reports no change, so the probe would miss what it would do).
"""

from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
HANDLER = "Note that the probe would change the host"
# Check-mode-skipped commands that may change the host, and why the probe still does not miss a kube-accel upgrade
# there. A new entry needs a reason, or a "Say that it would" debug task beside it (changed_when: true in check mode).
SKIPPED_IN_CHECK_MODE = {
    # Runs for a kernel without an installed module: a new kernel is a new `kernel` fact, so a full run, never a probe.
    ("nvidia_driver", "Build and install the NVIDIA module for {{ nvidia_driver_kernel }}"),
    # Its check-mode twin "Say that the module stream would switch" reports the change.
    ("nvidia_driver", "Switch the nvidia-driver module stream"),
    # RHEL: boot entries lacking the planned arguments. Its check-mode twin "Report the boot entries grubby would
    # update" reports the change, so the probe sees it (docs/day2.md "Fast path for unchanged hosts").
    ("iommu", "Add the IOMMU arguments to every boot entry"),
    ("iommu", "Remove arguments kube-accel added that are no longer wanted"),
    # Host-applied MIG hosts are never probed (device state); not_host.yml's commands are followed by the removal of
    # kube-accel's geometry record, a file task that reports the change in check mode.
    ("mig", "Apply the geometry"),
    ("mig", "Turn MIG off"),
    ("mig", "Destroy the MIG compute and GPU instances"),
    ("mig", "Turn MIG mode off"),
}
COMMANDS = ("ansible.builtin.command", "ansible.builtin.shell", "ansible.builtin.raw", "ansible.builtin.script")


def load(path: Path):
    return yaml.safe_load(path.read_text()) or []


def host_roles() -> list[str]:
    """Roles tasks/host_roles.yml includes, and the roles those include."""
    names = [
        t["ansible.builtin.include_role"]["name"].split(".")[-1] for t in load(REPO / "ansible/tasks/host_roles.yml")
    ]
    for role in list(names):
        for tasks in (REPO / "roles" / role / "tasks").glob("*.yml"):
            for value in walk(load(tasks), "name"):
                if isinstance(value, str) and value.startswith("kube_accel.gpu.") and value.split(".")[-1] not in names:
                    names.append(value.split(".")[-1])
    return names


def walk(node, key):
    """Every value of ``key`` anywhere in a YAML tree."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k == key:
                yield v
            yield from walk(v, key)
    elif isinstance(node, list):
        for item in node:
            yield from walk(item, key)


def tasks(node):
    """Every task of a task list, blocks opened."""
    for task in node or []:
        if not isinstance(task, dict):
            continue
        yield task
        for part in ("block", "rescue", "always"):
            yield from tasks(task.get(part))


def compare_play() -> dict:
    return load(REPO / "ansible/hosts.yml")[0]


def test_the_probe_runs_the_host_roles_in_check_mode_notifying_its_handler():
    probe = next(
        t for t in tasks(compare_play()["tasks"]) if t.get("name", "").startswith("Run the host roles in check")
    )
    include = probe["ansible.builtin.include_tasks"]
    assert include["file"] == "tasks/host_roles.yml"
    assert include["apply"]["check_mode"] is True and include["apply"]["notify"] == HANDLER
    # The change path runs the same list.
    change = load(REPO / "ansible/tasks/host_change.yml")
    assert "host_roles.yml" in [
        t["ansible.builtin.include_tasks"]["file"] for t in tasks(change) if "ansible.builtin.include_tasks" in t
    ]


def test_the_probe_handler_hears_every_topic_the_host_roles_notify():
    handler = next(h for h in compare_play()["handlers"] if h["name"] == HANDLER)
    roles = host_roles()
    assert {"nvidia_driver", "container_toolkit", "package_db", "kubelet_gpu"} <= set(roles)
    notified: set[str] = set()
    for role in roles:
        for path in [
            *(REPO / "roles" / role / "tasks").glob("*.yml"),
            *(REPO / "roles" / role / "handlers").glob("*.yml"),
        ]:
            for value in walk(load(path), "notify"):
                notified.update([value] if isinstance(value, str) else value)
    assert notified, "no notify found: the walk is broken"
    assert sorted(notified - set(handler["listen"])) == [], "add these topics to the probe handler's listen"


def test_host_role_commands_that_check_mode_skips_are_known():
    skipped = set()
    for role in host_roles():
        for path in (REPO / "roles" / role / "tasks").glob("*.yml"):
            for task in tasks(load(path)):
                if (
                    any(c in task for c in COMMANDS)
                    and task.get("check_mode") is not False
                    and task.get("changed_when") is not False
                ):
                    skipped.add((role, task.get("name")))
    assert sorted(skipped - SKIPPED_IN_CHECK_MODE) == [], (
        "a changing command check mode skips: see SKIPPED_IN_CHECK_MODE"
    )
