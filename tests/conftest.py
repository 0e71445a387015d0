"""Shared pytest setup: make the repo's module_utils importable the way Ansible imports them."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

import ansible.module_utils

REPO = Path(__file__).resolve().parent.parent
MODULE_UTILS = REPO / "plugins" / "module_utils"
MODULES = REPO / "plugins" / "modules"

# Ansible resolves `from ansible.module_utils.<name> import ...` through the configured module_utils path;
# tests get the same names by aliasing each file under plugins/module_utils.
for _path in (MODULE_UTILS, MODULES, REPO / "plugins" / "filter"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
for _info in pkgutil.iter_modules([str(MODULE_UTILS)]):
    _mod = importlib.import_module(_info.name)
    sys.modules.setdefault(f"ansible.module_utils.{_info.name}", _mod)
    setattr(ansible.module_utils, _info.name, _mod)
