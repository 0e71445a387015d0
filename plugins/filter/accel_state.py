# Copyright: kube-accel contributors
# Apache License 2.0
"""Controller-side digests for the host play's fast path (roles/host_state)."""

from __future__ import annotations

import os
import sys

# Controller-side plugins do not see the module_utils path of ansible.cfg; install the same name resolution.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import accel_import  # noqa: E402

accel_import.install()
from ansible.module_utils import accel_host_state  # noqa: E402


class FilterModule:
    def filters(self):
        return {
            # {{ data | accel_digest }}: sha256 of any JSON-able value, independent of dict order.
            "accel_digest": accel_host_state.digest,
            # {{ root | accel_code_digest(['roles', 'plugins']) }}: names and contents of the code under root.
            "accel_code_digest": accel_host_state.code_digest,
        }
