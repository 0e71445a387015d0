# Copyright: kube-accel contributors
# Apache License 2.0
"""Jinja filters exposing kube-accel's product constants to playbooks and roles."""

from __future__ import annotations

import os
import sys

# Controller-side plugins do not see the module_utils path of ansible.cfg; install the same name resolution.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import accel_import  # noqa: E402

accel_import.install()
from ansible.module_utils import accel_constants  # noqa: E402


def accel_label(name: str) -> str:
    """``'pool' | accel_label`` -> ``kube-accel.io/pool``."""
    return accel_constants.label(name)


def accel_upstream_label(name: str) -> str:
    """``'mps_capable' | accel_upstream_label`` -> ``nvidia.com/mps.capable``."""
    return accel_constants.UPSTREAM_LABELS[name]


class FilterModule:
    def filters(self):
        return {
            "accel_label": accel_label,
            "accel_upstream_label": accel_upstream_label,
            "accel_label_prefix": lambda _=None: accel_constants.LABEL_PREFIX,
        }
