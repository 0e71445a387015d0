# Copyright: kube-accel contributors
# Apache License 2.0
"""Jinja filters exposing kube-accel's product constants to playbooks and roles."""

from __future__ import annotations

from ansible_collections.kube_accel.gpu.plugins.module_utils.common import constants as accel_constants


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
