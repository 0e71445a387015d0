# Copyright: kube-accel contributors
# Apache License 2.0
"""Controller-side digests for the host play's fast path (roles/host_state)."""

from __future__ import annotations

from ansible_collections.kube_accel.gpu.plugins.module_utils.host import state as accel_host_state


class FilterModule:
    def filters(self):
        return {
            # {{ data | accel_digest }}: sha256 of any JSON-able value, independent of dict order.
            "accel_digest": accel_host_state.digest,
            # {{ root | accel_code_digest(['roles', 'plugins']) }}: names and contents of the code under root.
            "accel_code_digest": accel_host_state.code_digest,
        }
