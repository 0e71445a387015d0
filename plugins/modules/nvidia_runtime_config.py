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
  - With O(state=absent) (ansible/decommission.yml) the file is removed only when it holds exactly the given
    settings and nothing else, i.e. when this module created it; any other file is left as it is (RV(kept)).
author: kube-accel contributors (@kube-accel)
options:
  path:
    type: path
    default: /etc/nvidia-container-runtime/config.toml
    description: The toolkit's config file.
  state:
    type: str
    choices: [present, absent]
    default: present
    description:
      - C(present) sets the keys; C(absent) removes a file that holds only these settings (one this module created).
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

- name: Remove the config only where kube-accel created it (no toolkit package wrote one)
  kube_accel.gpu.nvidia_runtime_config:
    state: absent
    settings:
      accept-nvidia-visible-devices-envvar-when-unprivileged: false
      accept-nvidia-visible-devices-as-volume-mounts: true
"""

RETURN = r"""
path: {type: str, returned: always, description: The file.}
created: {type: bool, returned: always, description: Whether the file did not exist before.}
kept:
  type: bool
  returned: always
  description: O(state=absent) only - the file exists but holds more than the given settings, so it stays.
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kube_accel.gpu.plugins.module_utils.host.runtime_config import holds_only, merge


def remove(module, path, old):
    """state=absent: remove the file only where it holds nothing but the settings (this module created it)."""
    try:
        ours = holds_only(old, module.params["settings"])
    except ValueError as e:
        module.fail_json(msg=f"nvidia_runtime_config: {e}")
    if ours and not module.check_mode:
        os.unlink(path)
    module.exit_json(changed=ours, path=path, created=False, kept=old is not None and not ours,
                     diff=dict(before_header=path, after_header=path, before=old or "",
                               after="" if ours else old or ""))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", default="/etc/nvidia-container-runtime/config.toml"),
            settings=dict(type="dict", required=True),
            state=dict(type="str", choices=["present", "absent"], default="present"),
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
    if module.params["state"] == "absent":
        remove(module, path, old)
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
    module.exit_json(changed=changed, path=path, created=old is None, kept=False,
                     diff=dict(before_header=path, after_header=path, before=old or "", after=new))


if __name__ == "__main__":
    main()
