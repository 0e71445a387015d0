"""Import kube-accel's module_utils outside Ansible under the names Ansible gives them.

Ansible resolves ``from ansible.module_utils.accel_x import ...`` through the module_utils path in
ansible.cfg. Filters, tests and lab scripts install this finder to resolve the same names from plugins/module_utils.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODULE_UTILS = REPO / "plugins" / "module_utils"
PREFIX = "ansible.module_utils."


class _ModuleUtilsFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):  # noqa: ARG002 - importlib protocol
        if not fullname.startswith(PREFIX):
            return None
        candidate = MODULE_UTILS / (fullname[len(PREFIX):] + ".py")
        if "." in fullname[len(PREFIX):] or not candidate.is_file():
            return None
        return importlib.util.spec_from_file_location(fullname, candidate)


def install() -> None:
    if not any(isinstance(f, _ModuleUtilsFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _ModuleUtilsFinder())
