"""Shared pytest setup: module_utils importable the way Ansible imports them, and the lab fixture."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO / "plugins"))
for _path in (REPO / "plugins" / "modules", REPO / "plugins" / "filter", REPO / "plugins" / "module_utils"):
    sys.path.insert(0, str(_path))

import accel_import  # noqa: E402

accel_import.install()

from lab_fixture import lab  # noqa: E402,F401  (session fixture)

