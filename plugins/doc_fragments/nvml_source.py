# Copyright: kube-accel contributors
# Apache License 2.0
"""Where a GPU facts module reads NVML and sysfs (host.gpu_facts.SOURCE_OPTIONS): nvidia_gpu_facts and
accel_host_facts."""


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  snapshot:
    description:
      - Path, on the managed host, of an NVML snapshot JSON to use instead of real NVML.
    type: path
  snapshot_data:
    description:
      - The content of an NVML snapshot (for example read on the controller with the C(file) lookup); takes the
        place of O(snapshot) when the file is not on the managed host.
    type: dict
  sysfs_root:
    description:
      - Directory used in place of C(/sys). When set, sysfs values are read below it even with a snapshot;
        otherwise a snapshot's recorded sysfs values are used, or the real C(/sys).
    type: path
  procfs_root:
    description:
      - Directory used in place of C(/proc) (for C(/proc/modules)); only with O(sysfs_root).
    type: path
    default: /proc
"""
