"""The releases the cluster play builds (accel_chart_values.pool_releases, the code behind its accel_pool_releases
filter) for the lab and example inventories are accepted by the charts, and the rendered DaemonSets select exactly the
inventory's pools of that release."""

from __future__ import annotations

import pytest
import yaml
from ansible_collections.kube_accel.gpu.plugins.module_utils.common import constants as accel_constants
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm import pool_charts as accel_chart_values
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import pools as accel_pools
from chartlib import REPO, containers, one, play_cluster, pod_spec, render, selected_pools


def inventory_hosts(name: str) -> dict[str, dict]:
    """host -> merged group_vars of its pool (host ranges are kept as one host: pools are what matters)."""
    base = REPO / "inventories" / name
    groups = yaml.safe_load((base / "hosts.yml").read_text())["all"]["children"]["gpu_pools"]["children"]
    common = yaml.safe_load((base / "group_vars" / "gpu_pools.yml").read_text())
    hosts = {}
    for group, body in groups.items():
        pool_vars = {**common, **yaml.safe_load((base / "group_vars" / f"{group}.yml").read_text())}
        for host in body["hosts"]:
            hosts[host] = pool_vars
    return hosts


def releases(name: str, cluster: dict | None = None):
    """[(release, its pools)] the cluster play builds for an inventory, with the cluster settings it passes (the
    inventory's own unless ``cluster`` is given)."""
    pools = accel_pools.collect_pools(inventory_hosts(name))
    by_name = {p["pool"]: p for p in pools}
    cluster = cluster if cluster is not None else play_cluster(name)
    return [(r, [by_name[n] for n in r["pools"]]) for r in accel_chart_values.pool_releases(pools, cluster)]


CASES = [pytest.param(inv, release, pools, id=f"{inv}-{release['key']}")
         for inv in ("lab", "example") for release, pools in releases(inv)]


@pytest.mark.parametrize(("inventory", "release", "pools"), CASES)
def test_play_values_render(helm, tmp_path, inventory, release, pools):
    values = release["values"]
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    chart = release["chart"]
    objs = render(chart, [path], helm=helm, release=release["name"])
    want = set(values["pools"])
    for ds in (o for o in objs if o["kind"] == "DaemonSet"):
        got = selected_pools(pod_spec(ds), accel_constants.LABELS["pool"])
        if ds["metadata"]["name"].endswith("-sandbox-device-plugin"):
            assert got == set(values["passthrough"]["pools"])
        else:
            assert got == want, ds["metadata"]["name"]
    if chart == "mps":
        cm = one(objs, "ConfigMap", "-configs")
        for pool in pools:
            assert accel_pools.device_plugin_config(pool["settings"]) in cm["data"]


@pytest.mark.parametrize(("inventory", "release", "pools"), CASES)
def test_config_readers_mount_the_configs(helm, tmp_path, inventory, release, pools):
    """config-manager writes /config/config.yaml as a symlink into /available-configs (k8s-device-plugin v0.20.0
    cmd/config-manager updateSymlink): a container that reads /config without that mount finds a dangling link.
    Found by scripts/gpu-e2e.sh on a real kubelet (the plugin crash-looped: "open /config/config.yaml: no such
    file")."""
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(release["values"]))
    objs = render(release["chart"], [path], helm=helm, release=release["name"])
    readers = 0
    for ds in (o for o in objs if o["kind"] == "DaemonSet"):
        spec = pod_spec(ds)
        for c in containers(spec):
            names = {m["name"] for m in c.get("volumeMounts", [])}
            if "config" in names:
                readers += 1
                assert "available-configs" in names, f"{ds['metadata']['name']}/{c['name']}"
    # HAMi's and gpu-manager's agents read no device-plugin config; dra-pools runs no DaemonSet at all.
    assert readers or release["chart"] in ("vgpu", "dra-pools")
