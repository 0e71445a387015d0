# Copyright: kube-accel contributors
# Apache License 2.0
"""Filters turning the inventory's pools into cluster state: node labels/taints and chart releases."""

from __future__ import annotations

from ansible_collections.kube_accel.gpu.plugins.module_utils.cluster import labels as accel_labels
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm import ownership as accel_ownership
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm import pool_charts as accel_chart_values
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import pools as accel_pools
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.cluster_settings import (
    cluster_problems,
    cluster_settings,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.verify import pool_checks as accel_verify

# Facts of every host the pools need: its GPUs, and its os-release as the preflight read it (NFD's OS labels).
HOST_FACTS = ("nvidia_gpus", "preflight_os_release")


def _plain(hostvars, host):
    # HostVars templates lazily; read only the accel_* names (and the facts) of each host.
    hv = hostvars[host]
    return {k: hv[k] for k in hv if k.startswith("accel_") or k in HOST_FACTS}


def _inventory_view(hosts, hostvars):
    """host -> the vars collect_pools and accel_pools_of read: everything for the first host of each pool (its
    settings are the pool's), only the pool name and GPU facts for the others.

    Templating every accel_* variable of every host costs seconds at 1,000 hosts, for settings that are dropped.
    """
    view, seen = {}, set()
    for host in sorted(hosts):
        hv = hostvars[host]
        pool = hv.get("accel_pool")
        if pool is None:
            view[host] = {k: hv.get(k) for k in HOST_FACTS}
        elif pool in seen:
            view[host] = {"accel_pool": pool, **{k: hv.get(k) for k in HOST_FACTS}}
        else:
            seen.add(pool)
            view[host] = _plain(hostvars, host)
    return view


def accel_pools_of(hosts, hostvars):
    """``groups['gpu_pools'] | accel_pools_of(hostvars)`` -> [{pool, settings, hosts, gpu_memory_mib}]."""
    plain = _inventory_view(hosts, hostvars)
    pools = accel_pools.collect_pools(plain)
    for pool in pools:
        facts = plain[pool["hosts"][0]].get("nvidia_gpus") or {}
        gpus = facts.get("gpus") or []
        pool["gpu_count"] = int(facts.get("count") or 0)
        pool["gpu_memory_mib"] = int(gpus[0]["memory_total_mib"]) if gpus else 0
        # PCI device IDs seen on the pool's hosts narrow the mig-parted device filters to the real models.
        pool["device_ids"] = sorted({g["pci_device_id"] for h in pool["hosts"]
                                     for g in (plain[h].get("nvidia_gpus") or {}).get("gpus") or []
                                     if g.get("pci_device_id")})
        # A DeviceClass cannot select by node: a dra pool's class selects its GPUs by UUID (charts/dra-pools).
        pool["gpu_uuids"] = sorted({g["uuid"] for h in pool["hosts"]
                                    for g in (plain[h].get("nvidia_gpus") or {}).get("gpus") or [] if g.get("uuid")})
        pool["os_release"] = {h: plain[h]["preflight_os_release"] for h in pool["hosts"]
                              if plain[h].get("preflight_os_release")}
    return pools


def accel_desired_nodes(pools):
    return accel_pools.desired_nodes(pools)


def accel_managed_label_keys(_unused=None):
    return sorted(accel_pools.managed_label_keys())


def accel_sharing_label_keys(_unused=None):
    return sorted(accel_pools.sharing_label_keys())


def accel_sharing_changes(changes):
    """One node of accel_node_labels' ``switching`` -> "key before -> after; ..." (its cordon reason)."""
    return accel_labels.describe_switch(dict(changes or {}))


def accel_cluster_settings(variables, runtime_class=""):
    """{accel_* name: value} -> the cluster settings the releases read (cluster_settings)."""
    return cluster_settings(dict(variables or {}), runtime_class)


def accel_cluster_problems(pools, cluster):
    """Why these pools cannot be installed with these cluster settings (cluster_problems)."""
    return cluster_problems(pools, cluster)


def accel_pool_releases(pools, cluster, prefix=accel_chart_values.RELEASE_PREFIX, chart_dir="", timeout=""):
    """Pools grouped into releases with their chart values and helm timeouts (accel_chart_values.pool_releases)."""
    return accel_chart_values.pool_releases(pools, cluster, prefix, chart_dir, str(timeout or ""))


def accel_desired_releases(pools, namespace, others=None):
    """``pools | accel_desired_releases(namespace, [monitoring, operator])`` -> ["namespace/name", ...]."""
    return accel_ownership.desired(list(pools or []), str(namespace), [str(o) for o in others or [] if o])


def accel_stale_releases(desired, configmap_data, namespace):
    """``desired | accel_stale_releases(ownership_configmap_data, namespace)`` -> ["namespace/name", ...]."""
    return accel_ownership.stale(list(desired or []), dict(configmap_data or {}), str(namespace))


def accel_ownership_record(desired):
    """``desired | accel_ownership_record`` -> the ownership ConfigMap's data."""
    return accel_ownership.record_data(list(desired or []))


def accel_dra_driver_values(pools, cluster, feature_gates=None, version=""):
    """``pools | accel_dra_driver_values(cluster, accel_dra_feature_gates, version)``: NVIDIA's DRA driver chart
    values (accel_chart_values.dra_driver_values)."""
    return accel_chart_values.dra_driver_values(list(pools or []), dict(cluster or {}), dict(feature_gates or {}),
                                                str(version or ""))


def accel_verify_pools(pools, releases, gpu_operator=False):
    """The verify module's pool list (accel_verify.expected_pools)."""
    return accel_verify.expected_pools(pools, releases, bool(gpu_operator))


class FilterModule:
    def filters(self):
        return {
            "accel_pools_of": accel_pools_of,
            "accel_desired_nodes": accel_desired_nodes,
            "accel_managed_label_keys": accel_managed_label_keys,
            "accel_sharing_label_keys": accel_sharing_label_keys,
            "accel_sharing_changes": accel_sharing_changes,
            "accel_cluster_settings": accel_cluster_settings,
            "accel_cluster_problems": accel_cluster_problems,
            "accel_pool_releases": accel_pool_releases,
            "accel_verify_pools": accel_verify_pools,
            "accel_stale_releases": accel_stale_releases,
            "accel_desired_releases": accel_desired_releases,
            "accel_ownership_record": accel_ownership_record,
            "accel_dra_driver_values": accel_dra_driver_values,
        }
