"""Who may reach the vgpu chart's ports: no NetworkPolicy rule of any release admits every
pod-network source unless the values say so; metrics ports (gpu-manager's also serves /debug/pprof/) admit only
metricsFrom; HAMi's webhook/extender port only controlPlaneFrom, which the cluster play always fills for a HAMi pool
(accel_control_plane_cidrs, refused when empty)."""

from __future__ import annotations

import pytest
import yaml
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import pools as accel_pools
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.cluster_settings import cluster_problems
from chartlib import VALUES_DIR, play_cluster, render
from test_release_values import inventory_hosts, releases

MONITORING = [{"namespaceSelector": {"matchExpressions": [
    {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["monitoring"]}]}}]


def ingress(objs: list[dict]) -> dict[str, dict[int, list | None]]:
    """NetworkPolicy name -> port -> its peers (None: any source)."""
    out: dict[str, dict[int, list | None]] = {}
    for pol in (o for o in objs if o["kind"] == "NetworkPolicy"):
        ports = out.setdefault(pol["metadata"]["name"], {})
        for rule in pol["spec"].get("ingress") or []:
            for port in rule.get("ports") or []:
                ports[port["port"]] = rule.get("from")
    return out


def write(tmp_path, values: dict):
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


@pytest.mark.parametrize("backend", ["hami", "gpu-manager"])
def test_no_port_is_open_to_every_pod_by_default(helm, tmp_path, backend):
    """The attack: any pod of the cluster scrapes, or profiles, a privileged node agent. With an empty metricsFrom no
    pod-network source may scrape; a rule without peers would open the port to every pod (gpu-manager's
    /debug/pprof/ too)."""
    objs = render("vgpu", [write(tmp_path, {"backend": backend, "pools": ["p"]})], helm=helm,
                  release=f"kube-accel-vgpu-{backend}")
    policies = ingress(objs)
    assert policies, "no NetworkPolicy rendered"
    open_ports = {name: [p for p, peers in ports.items() if peers is None] for name, ports in policies.items()}
    assert not any(open_ports.values()), open_ports


def test_metrics_ports_admit_exactly_metrics_from(helm, tmp_path):
    values = {"backend": "gpu-manager", "pools": ["p"], "metricsFrom": MONITORING}
    policies = ingress(render("vgpu", [write(tmp_path, values)], helm=helm, release="kube-accel-vgpu-gpu-manager"))
    assert policies["kube-accel-vgpu-gpu-manager-gpu-manager"] == {5678: MONITORING}
    values = {"backend": "hami", "pools": ["p"], "metricsFrom": MONITORING,
              "controlPlaneFrom": [{"ipBlock": {"cidr": "10.0.0.11/32"}}]}
    policies = ingress(render("vgpu", [write(tmp_path, values)], helm=helm, release="kube-accel-vgpu-hami"))
    assert policies["kube-accel-vgpu-hami-device-plugin"] == {9394: MONITORING}
    assert policies["kube-accel-vgpu-hami-scheduler"] == {8443: [{"ipBlock": {"cidr": "10.0.0.11/32"}}],
                                                          9395: MONITORING}


@pytest.mark.parametrize("inventory", ["lab", "example"])
def test_the_play_opens_the_webhook_to_its_control_plane(helm, tmp_path, inventory):
    """The values the cluster play passes (its cluster settings included) open HAMi's port 8443 to exactly the
    inventory's accel_control_plane_cidrs; before, the chart tests rendered the play's values without them."""
    cidrs = play_cluster(inventory)["control_plane_cidrs"]
    assert cidrs, f"inventories/{inventory} has no accel_control_plane_cidrs but a HAMi pool"
    hami = [r for r, _pools in releases(inventory) if r["key"] == "vgpu-hami"]
    assert hami
    for release in hami:
        objs = render("vgpu", [write(tmp_path, release["values"])], helm=helm, release=release["name"])
        assert ingress(objs)[f"{release['name']}-scheduler"][8443] == [{"ipBlock": {"cidr": c}} for c in cidrs]


def test_a_hami_pool_without_control_plane_cidrs_is_refused():
    """The cluster play's pool_charts role asserts these problems are none before it installs anything."""
    pools = accel_pools.collect_pools(inventory_hosts("lab"))
    cluster = {**play_cluster("lab"), "control_plane_cidrs": []}
    (problem,) = cluster_problems(pools, cluster)
    assert problem.startswith("accel_control_plane_cidrs = []") and "vgpu-hami" in problem
    assert cluster_problems(pools, play_cluster("lab")) == []
    no_hami = [p for p in pools if accel_pools.release_key(p["settings"]) != "vgpu-hami"]
    assert cluster_problems(no_hami, cluster) == []


def test_the_values_files_of_hami_releases_carry_control_plane_peers():
    for path in sorted((VALUES_DIR / "vgpu").glob("*.yaml")):
        values = yaml.safe_load(path.read_text()) or {}
        if values.get("backend", "hami") == "hami":
            assert values.get("controlPlaneFrom"), f"{path.name}: a HAMi release the play would refuse"
