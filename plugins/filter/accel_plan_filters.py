# Copyright: kube-accel contributors
# Apache License 2.0
"""Jinja filters for the preflight plan rules and MIG geometry (logic lives in plugins/module_utils)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import mig as accel_mig
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import rules as accel_plan


def _plain(value):
    """Copy Ansible's (possibly lazy or tagged) containers into plain dicts/lists."""
    if isinstance(value, dict) or hasattr(value, "items"):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def accel_plan_problems(plan, host, facts=None):
    """``preflight_plan.hosts[inventory_hostname] | accel_plan_problems(inventory_hostname, nvidia_gpus)`` -> list:
    the host's entry of the ``accel_plan`` action's report (its problems, the settings that passed, the names that
    failed, their origins) with the plan rules run on those settings and the host's facts."""
    plan = _plain(plan or {})
    found = accel_plan.host_problems(str(host), plan.get("settings") or {}, _plain(facts or {}),
                                     invalid=plan.get("invalid") or (), origins=plan.get("origins") or {})
    return list(plan.get("problems") or []) + [p for p in found if p not in (plan.get("problems") or [])]


def accel_vcuda_core_problems(value, where="tencent.com/vcuda-core"):
    """``request | accel_vcuda_core_problems`` -> [] when a vcuda-core request is valid."""
    return accel_plan.vcuda_core_problems(value, str(where))


def accel_mig_geometry_problems(geometry, pci_device_id, where="accel_mig_geometry"):
    """``accel_mig_geometry | accel_mig_geometry_problems(gpu.pci_device_id)`` -> list of problems."""
    return accel_mig.geometry_problems(str(pci_device_id), _plain(geometry), str(where))


def accel_mig_placement(geometry, pci_device_id):
    """A legal placement ``[[profile, start slice], ...]`` in creation order (largest first), or ``None``."""
    model = accel_mig.model_for_device(str(pci_device_id))
    if model is None or accel_mig.geometry_problems(str(pci_device_id), _plain(geometry)):
        return None
    return [list(item) for item in accel_mig.find_placement(model, _plain(geometry))]


def accel_mig_config_name(geometry):
    """``accel_mig_geometry | accel_mig_config_name`` -> mig-parted config name (also the nvidia.com/mig.config
    label value), e.g. ``kube-accel-1g.10gb-2.3g.40gb-1``."""
    return accel_mig.mig_config_name(_plain(geometry or {}))


def accel_mig_parted_config(geometries, device_ids=None):
    """``{config: geometry} | accel_mig_parted_config`` -> mig-parted ``version: v1`` document (a dict)."""
    try:
        return accel_mig.mig_parted_config(_plain(geometries), _plain(device_ids) if device_ids else None)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def accel_mig_parted_config_from_hostvars(hostvars, hosts):
    """``hostvars | accel_mig_parted_config_from_hostvars(groups['gpu_pools'])`` -> mig-parted document with one
    config per MIG pool (accel_pool, accel_mig_geometry), device filters from the hosts' nvidia_gpus facts."""
    plan = {}
    for host in hosts:
        host_vars = hostvars[host]
        gpus = (host_vars.get("nvidia_gpus") or {}).get("gpus") or []
        plan[str(host)] = {
            "pool": host_vars.get("accel_pool"),
            "geometry": _plain(host_vars.get("accel_mig_geometry") or {}),
            "device_ids": [str(g.get("pci_device_id")) for g in gpus if g.get("pci_device_id")],
        }
    try:
        return accel_mig.mig_parted_config_for_hosts(plan)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self):
        return {
            "accel_plan_problems": accel_plan_problems,
            "accel_vcuda_core_problems": accel_vcuda_core_problems,
            "accel_mig_geometry_problems": accel_mig_geometry_problems,
            "accel_mig_placement": accel_mig_placement,
            "accel_mig_config_name": accel_mig_config_name,
            "accel_mig_parted_config": accel_mig_parted_config,
            "accel_mig_parted_config_from_hostvars": accel_mig_parted_config_from_hostvars,
        }
