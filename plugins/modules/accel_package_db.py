#!/usr/bin/python
# Copyright: kube-accel contributors
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
---
module: accel_package_db
short_description: Find and repair a package database an interrupted install left behind
description:
  - Waits while a package manager holds its locks (its half states are then work in progress), then reads the
    database. On Debian and Ubuntu, C(dpkg --audit) and dpkg's journal (C(/var/lib/dpkg/updates), which makes apt
    refuse with "dpkg was interrupted"); on RHEL 8/9, duplicate packages from C(dnf check --duplicates).
  - Repairs what an interrupted operation leaves with the package manager's own commands. Debian - C(dpkg
    --configure -a), then, if C(dpkg --audit) still reports problems, C(apt-get install --fix-broken) with
    C(--reinstall) of packages whose unpack was interrupted. RHEL - C(dnf remove --duplicates).
  - Missing md5sums files and architecture problems are reported and left alone (not caused by an interruption).
  - A healthy database reports no change. In check mode nothing runs but the read-only checks; the result says
    what would run. With diff, C(before) lists what was found and C(after) what is left.
  - Logic and tests in module_utils/host/package_db.py; see roles/package_db.
version_added: "0.1.0"
author: kube-accel contributors (@kube-accel)
options:
  manager:
    description: The host's package manager family.
    type: str
    choices: [apt, dnf]
    required: true
  repair:
    description: Repair what is found. C(false) fails naming what was found and the commands to run by hand.
    type: bool
    default: true
  lock_timeout:
    description: Seconds to wait for a running package manager to release its locks before failing (0 or more).
    type: int
    default: 300
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  platform:
    support: full
    platforms: posix
"""

EXAMPLES = r"""
- name: Repair an interrupted dpkg before installing packages
  kube_accel.gpu.accel_package_db:
    manager: apt
  register: package_db_result
"""

RETURN = r"""
found:
  description: What was found before any repair, one line each (empty on a healthy database).
  returned: always
  type: list
  elements: str
remaining:
  description: What is left after the repair (in check mode, what would be left); findings not caused by an
    interruption stay.
  returned: always
  type: list
  elements: str
commands:
  description: Commands run (in check mode, those that would run).
  returned: always
  type: list
  elements: str
waited_for:
  description: Package manager processes whose locks the module waited for (path, pid, command) and the seconds.
  returned: always
  type: dict
report:
  description: The package manager's own report before the repair (dpkg --audit or dnf check output).
  returned: always
  type: str
msg:
  description: What was found and done, in words.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kube_accel.gpu.plugins.module_utils.host.package_db import (
    PackageDbError,
    check_timeout,
    describe,
    lock_holders,
    repair_apt,
    repair_dnf,
    wait_for_locks,
)

ENV = {"LC_ALL": "C", "LANGUAGE": "C", "DEBIAN_FRONTEND": "noninteractive"}


def main():
    module = AnsibleModule(
        argument_spec={
            "manager": {"type": "str", "choices": ["apt", "dnf"], "required": True},
            "repair": {"type": "bool", "default": True},
            "lock_timeout": {"type": "int", "default": 300},
        },
        supports_check_mode=True,
    )
    p = module.params

    def run(argv):
        return module.run_command(list(argv), environ_update=ENV)

    try:
        timeout = check_timeout(p["lock_timeout"])
        waited = wait_for_locks(lambda: lock_holders(p["manager"]), timeout)
        repair = repair_apt if p["manager"] == "apt" else repair_dnf
        result = repair(run, check_mode=module.check_mode, repair=p["repair"])
    except PackageDbError as exc:
        module.fail_json(msg=str(exc))
    found, remaining = describe(result["before"]), describe(result["after"])
    if not result["changed"]:
        msg = "Package database consistent" + (f"; left alone: {'; '.join(found)}" if found else "")
    elif module.check_mode:
        msg = f"Package database left interrupted ({'; '.join(found)}); would run: {'; then '.join(result['commands'])}"
    else:
        msg = (f"Package database left interrupted ({'; '.join(found)}); repaired with: "
               f"{'; then '.join(result['commands'])}")
    out = {"changed": result["changed"], "found": found, "remaining": remaining, "commands": result["commands"],
           "waited_for": waited, "report": result["before"]["report"], "msg": msg}
    if module._diff and result["changed"]:
        out["diff"] = {
            "before_header": "package database (found)",
            "after_header": "package database (after repair)" + (" (predicted)" if module.check_mode else ""),
            "before": "".join(f"{line}\n" for line in found),
            "after": "".join(f"{line}\n" for line in remaining),
        }
    module.exit_json(**out)


if __name__ == "__main__":
    main()
