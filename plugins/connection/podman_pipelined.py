# Copyright: kube-accel contributors
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
---
name: podman_pipelined
short_description: containers.podman.podman with pipelining, for kube-accel's podman lab hosts
description:
  - The containers.podman.podman connection, with pipelining. Upstream turned pipelining off because its
    C(podman exec) did not pass standard input on; this plugin adds C(--interactive) when Ansible sends the module
    on standard input, so each task is one C(podman exec) instead of a temporary directory, a copy, an exec and a
    cleanup (four C(podman) runs).
  - Used by the lab and the benchmarks only; real GPU hosts are reached over SSH, where ansible.cfg enables
    pipelining too.
author: kube-accel contributors
version_added: "0.1.0"
options:
  remote_addr:
    description: The name or ID of the container.
    default: inventory_hostname
    vars:
      - name: ansible_host
      - name: inventory_hostname
      - name: ansible_podman_host
  remote_user:
    description: User (name or UID) that runs commands inside the container.
    ini:
      - section: defaults
        key: remote_user
    env:
      - name: ANSIBLE_REMOTE_USER
    vars:
      - name: ansible_user
  podman_extra_args:
    description: Extra arguments to the podman command line.
    default: ''
    ini:
      - section: defaults
        key: podman_extra_args
    vars:
      - name: ansible_podman_extra_args
    env:
      - name: ANSIBLE_PODMAN_EXTRA_ARGS
  podman_executable:
    description: The podman executable.
    default: podman
    vars:
      - name: ansible_podman_executable
    env:
      - name: ANSIBLE_PODMAN_EXECUTABLE
  pipelining:
    description: Send modules on standard input instead of copying them into the container first.
    type: boolean
    default: true
    ini:
      - section: connection
        key: pipelining
    env:
      - name: ANSIBLE_PIPELINING
    vars:
      - name: ansible_pipelining
"""

# DOCUMENTATION comes first, as in every Ansible plugin.
import shlex  # noqa: E402

from ansible.module_utils.common.text.converters import to_native  # noqa: E402
from ansible.plugins.connection import ensure_connect  # noqa: E402
from ansible_collections.containers.podman.plugins.connection.podman import (  # noqa: E402
    Connection as PodmanConnection,
)


class Connection(PodmanConnection):
    transport = "podman_pipelined"
    has_pipelining = True

    @ensure_connect
    def exec_command(self, cmd, in_data=None, sudoable=False):
        # The base of PodmanConnection only records the command (ConnectionBase.exec_command).
        super(PodmanConnection, self).exec_command(cmd, in_data=in_data, sudoable=sudoable)
        args = ["exec"]
        if in_data is not None:
            args.append("--interactive")
        if self.user:
            args.extend(("--user", self.user))
        return self._podman(args, shlex.split(to_native(cmd, errors="surrogate_or_strict")), in_data)
