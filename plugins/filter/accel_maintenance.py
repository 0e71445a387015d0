# Copyright: kube-accel contributors
# Apache License 2.0
"""Controller-side checks a node passes before rolling maintenance returns it to service (roles/node_reboot)."""

from __future__ import annotations

import os
import sys

# Controller-side plugins do not see the module_utils path of ansible.cfg; install the same name resolution.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import accel_import  # noqa: E402

accel_import.install()
from ansible.module_utils import accel_maintenance  # noqa: E402


class FilterModule:
    def filters(self):
        return {
            # {{ nvidia_gpus | accel_gpu_problems({'count': 8, 'driver_branch': '550', 'mig': true}) }}: list of
            # what keeps the node out of service (empty when the GPUs match the plan).
            "accel_gpu_problems": accel_maintenance.gpu_problems,
            # {{ nvidia_gpus | accel_gpu_summary }}: one line of what the checks saw.
            "accel_gpu_summary": accel_maintenance.gpu_summary,
        }
