# Copyright: kube-accel contributors
# Apache License 2.0
"""Jinja filter: values for the NVIDIA GPU Operator chart from kube-accel's pools.

    {{ pools | accel_gpu_operator_values({'image_registry': accel_image_registry, ...}) }}
"""

from __future__ import annotations

import importlib
import os
import sys

import ansible.module_utils

# Controller-side plugins cannot import custom module_utils by the ansible.module_utils name; load them by path
# and alias them under that name, since accel_pools imports its siblings as ansible.module_utils.<name>.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils"))
for _name in ("accel_constants", "accel_mig", "accel_pools", "accel_operator_values"):
    _mod = sys.modules.get(f"ansible.module_utils.{_name}") or importlib.import_module(_name)
    sys.modules.setdefault(f"ansible.module_utils.{_name}", _mod)
    setattr(ansible.module_utils, _name, _mod)
accel_operator_values = sys.modules["ansible.module_utils.accel_operator_values"]


def accel_gpu_operator_values(pools, cluster=None):
    """``pools``: list of pool dicts (or collect_pools entries); ``cluster``: see gpu_operator_values()."""
    return accel_operator_values.gpu_operator_values(list(pools or []), cluster or {})


def accel_gpu_operator_images(values):
    """Images the generated operator values pull (for the mirror list)."""
    return accel_operator_values.operator_images(values)


class FilterModule:
    def filters(self):
        return {
            "accel_gpu_operator_values": accel_gpu_operator_values,
            "accel_gpu_operator_images": accel_gpu_operator_images,
        }
