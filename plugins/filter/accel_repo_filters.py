# Copyright: kube-accel contributors
# Apache License 2.0
"""Jinja filters for repository keys and host files without quoting; the logic is module_utils/host/openpgp.py and
module_utils/host/file_values.py."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.kube_accel.gpu.plugins.module_utils.host import file_values as accel_host_files
from ansible_collections.kube_accel.gpu.plugins.module_utils.host import openpgp as accel_openpgp


def accel_openpgp_check(text, pinned):
    """Armoured key text -> {ok, fingerprints, unpinned, pinned, msg}: may it be written to a keyring?"""
    return accel_openpgp.check_key(str(text or ""), [str(p) for p in (pinned or [])])


def accel_key_url_problem(url):
    """'' when the key URL may be downloaded (https), else why not."""
    return accel_openpgp.key_url_problem(str(url or ""))


def accel_apt_field(value, field, words=False):
    """The value itself, or a template error naming the field when it would change an apt file's structure."""
    try:
        return accel_host_files.apt_field(value, str(field), bool(words))
    except ValueError as err:
        raise AnsibleFilterError(str(err)) from None


def accel_kernel_arg_problems(args):
    """One sentence per kernel argument that may not go on the GRUB command line."""
    return [p for p in (accel_host_files.kernel_arg_problem(a) for a in (args or [])) if p]


class FilterModule:
    def filters(self):
        return {
            "accel_openpgp_check": accel_openpgp_check,
            "accel_key_url_problem": accel_key_url_problem,
            "accel_apt_field": accel_apt_field,
            "accel_kernel_arg_problems": accel_kernel_arg_problems,
        }
