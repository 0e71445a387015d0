# Copyright: kube-accel contributors
# Apache License 2.0
"""Jinja filter: values for the NVIDIA GPU Operator chart from kube-accel's pools.

    {{ pools | accel_gpu_operator_values({'image_registry': accel_image_registry, ...}) }}
"""

from __future__ import annotations

from ansible_collections.kube_accel.gpu.plugins.module_utils.helm import operator_values as accel_operator_values


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
