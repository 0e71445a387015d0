# Copyright: kube-accel contributors
# Apache License 2.0
"""Jinja filters for the driver, SR-IOV and IOMMU roles; the logic is module_utils/plan/driver.py."""

from __future__ import annotations

from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import driver as accel_driver


def accel_apt_moves(policy_text, packages, pin, installed_extra=None):
    """``apt-cache policy`` output -> what apt installs so the packages sit at the pinned version."""
    return accel_driver.apt_moves(str(policy_text or ""), list(packages or []), str(pin), list(installed_extra or []))


def accel_dnf_plan(module_text, wanted_stream, installed_version="", wanted_version=""):
    return accel_driver.dnf_plan(str(module_text or ""), str(wanted_stream), str(installed_version or ""),
                                 str(wanted_version or ""))


def accel_dnf_stream(branch, flavor):
    return accel_driver.dnf_stream(branch, str(flavor))


def accel_driver_flavor(facts, wanted=""):
    return accel_driver.driver_flavor(facts if isinstance(facts, dict) else {}, str(wanted or ""))


def accel_open_modules_required(facts):
    """One sentence per GPU model that needs the open kernel modules."""
    gpus = (facts if isinstance(facts, dict) else {}).get("gpus") or []
    return sorted({r for r in map(accel_driver.open_modules_required, gpus) if r})


def accel_loaded_driver(proc_version):
    """``(/proc/driver/nvidia/version) | accel_loaded_driver`` -> {version, branch, flavor}, {} when none."""
    return accel_driver.loaded_driver(str(proc_version or ""))


def accel_fabric_manager_available(branch):
    return accel_driver.fabric_manager_available(branch)


def accel_sriov_method(facts, wanted="auto"):
    return accel_driver.sriov_method(facts if isinstance(facts, dict) else {}, str(wanted or "auto"))


def accel_kernel_args_owned(wanted, owned_before, entries):
    return accel_driver.kernel_args_owned(wanted, owned_before, entries)


class FilterModule:
    def filters(self):
        return {
            "accel_loaded_driver": accel_loaded_driver,
            "accel_apt_moves": accel_apt_moves,
            "accel_dnf_plan": accel_dnf_plan,
            "accel_dnf_stream": accel_dnf_stream,
            "accel_driver_flavor": accel_driver_flavor,
            "accel_open_modules_required": accel_open_modules_required,
            "accel_fabric_manager_available": accel_fabric_manager_available,
            "accel_sriov_method": accel_sriov_method,
            "accel_kernel_args_owned": accel_kernel_args_owned,
        }
