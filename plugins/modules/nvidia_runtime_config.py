#!/usr/bin/python
# Copyright: kube-accel contributors
# Apache-2.0
"""Set keys of the NVIDIA container runtime's config.toml, keeping everything else of the file."""

from __future__ import annotations

DOCUMENTATION = r"""
module: nvidia_runtime_config
short_description: Set keys of the NVIDIA container runtime's config.toml
description:
  - Sets keys of the root table of the NVIDIA Container Toolkit's config file (read by nvidia-container-runtime and
    its hook at every container start), the way C(nvidia-ctk config --set KEY=VALUE --in-place) does, without
    needing the toolkit installed. Every other key, comment and the file's layout stay as they are; a commented
    default line (C(#key = value), as NVIDIA's package writes them) becomes the active line in place.
  - The edited file is parsed again before it is written and must differ from the old one in the given keys only;
    otherwise the module fails and writes nothing. A file that is not valid TOML is refused, untouched.
  - A missing file is created holding only the given keys (the runtime takes every other setting from its
    built-in defaults; the toolkit package's postinst, C(nvidia-ctk config --in-place), keeps them).
author: kube-accel contributors (@kube-accel)
options:
  path:
    type: path
    default: /etc/nvidia-container-runtime/config.toml
    description: The toolkit's config file.
  settings:
    type: dict
    required: true
    description:
      - Root-table keys and their values, e.g. C(accept-nvidia-visible-devices-envvar-when-unprivileged=false).
      - Allowed keys (nvidia-container-toolkit v1.20.2) C(disable-require), C(swarm-resource),
        C(accept-nvidia-visible-devices-envvar-when-unprivileged), C(accept-nvidia-visible-devices-as-volume-mounts),
        C(supported-driver-capabilities); booleans or strings as the toolkit reads them.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode: {support: full}
  diff_mode: {support: full}
  platform:
    support: full
    platforms: posix
"""

EXAMPLES = r"""
- name: GPUs only through the device plugin's allocation
  kube_accel.gpu.nvidia_runtime_config:
    settings:
      accept-nvidia-visible-devices-envvar-when-unprivileged: false
      accept-nvidia-visible-devices-as-volume-mounts: true
"""

RETURN = r"""
path: {type: str, returned: always, description: The file.}
created: {type: bool, returned: always, description: Whether the file did not exist before.}
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kube_accel.gpu.plugins.module_utils.accel_runtime_config import merge


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", default="/etc/nvidia-container-runtime/config.toml"),
            settings=dict(type="dict", required=True),
        ),
        supports_check_mode=True,
    )
    path = module.params["path"]
    try:
        with open(path, encoding="utf-8") as f:
            old = f.read()
    except FileNotFoundError:
        old = None
    except OSError as e:
        module.fail_json(msg=f"nvidia_runtime_config: cannot read {path}: {e}")
    try:
        new = merge(old, module.params["settings"], path)
    except (ValueError, RuntimeError) as e:
        module.fail_json(msg=f"nvidia_runtime_config: {e}")
    changed = old != new
    if changed and not module.check_mode:
        directory = os.path.dirname(path)
        if not os.path.isdir(directory):
            os.makedirs(directory, mode=0o755)
        mode = os.stat(path).st_mode & 0o7777 if old is not None else 0o644
        fd, tmp = tempfile.mkstemp(dir=directory)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(new)
        os.chmod(tmp, mode)
        module.atomic_move(tmp, path)
        os.chmod(path, mode)  # atomic_move gives a new file the umask's mode
    module.exit_json(changed=changed, path=path, created=old is None,
                     diff=dict(before_header=path, after_header=path, before=old or "", after=new))


if __name__ == "__main__":
    main()
