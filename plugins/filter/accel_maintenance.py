# Copyright: kube-accel contributors
# Apache License 2.0
"""Controller-side checks a node passes before rolling maintenance returns it to service (roles/node_reboot)."""

from __future__ import annotations

from ansible_collections.kube_accel.gpu.plugins.module_utils.cluster import maintenance as accel_maintenance


class FilterModule:
    def filters(self):
        return {
            # {{ nvidia_gpus | accel_gpu_problems({'count': 8, 'driver_branch': '550', 'mig': true}) }}: list of
            # what keeps the node out of service (empty when the GPUs match the plan).
            "accel_gpu_problems": accel_maintenance.gpu_problems,
            # {{ nvidia_gpus | accel_gpu_summary }}: one line of what the checks saw.
            "accel_gpu_summary": accel_maintenance.gpu_summary,
        }
