"""The pool filters of plugins/filter/accel_pool_filters.py on plain hostvars (Ansible's HostVars is a Mapping too)."""

from __future__ import annotations

from collections.abc import Mapping

from ansible_collections.kube_accel.gpu.plugins.filter import accel_pool_filters as filters
from ansible_collections.kube_accel.gpu.plugins.module_utils.host import system_facts as accel_host_facts
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import pools as ap


class Recording(Mapping):
    """One host's vars that remembers which were read (each read is a templating pass in Ansible)."""

    def __init__(self, data, reads):
        self.data, self.reads = data, reads

    def __getitem__(self, key):
        self.reads.append(key)
        return self.data[key]

    def __iter__(self):
        return iter(self.data)

    def __len__(self):
        return len(self.data)


def gpus(device_id, memory=81920):
    return {"count": 1, "gpus": [{"pci_device_id": device_id, "memory_total_mib": memory}]}


HOSTS = {
    "m-2": {"accel_pool": "mig", "accel_mode": "pgpu", "accel_driver_branch": "550", "nvidia_gpus": gpus("0xB")},
    "m-1": {"accel_pool": "mig", "accel_mode": "pgpu", "accel_driver_branch": "550", "nvidia_gpus": gpus("0xA")},
    "s-1": {"accel_pool": "mps", "accel_mode": "mps", "accel_mps_replicas": 4, "nvidia_gpus": gpus("0xC", 24576)},
    "x-1": {"ansible_host": "10.0.0.9"},
}


def test_pools_read_full_settings_once_per_pool_and_match_collect_pools():
    reads: dict[str, list] = {h: [] for h in HOSTS}
    hostvars = {h: Recording(v, reads[h]) for h, v in HOSTS.items()}
    pools = filters.accel_pools_of(list(HOSTS), hostvars)
    full = ap.collect_pools(HOSTS)
    assert [(p["pool"], p["settings"], p["hosts"]) for p in pools] == [
        (p["pool"], p["settings"], p["hosts"]) for p in full]
    assert [(p["gpu_count"], p["gpu_memory_mib"], p["device_ids"]) for p in pools] == [
        (1, 81920, ["0xA", "0xB"]), (1, 24576, ["0xC"])]
    # m-1 is the mig pool's first host: all its accel_* vars are read; m-2 only gives its pool, GPUs and OS.
    assert "accel_driver_branch" in reads["m-1"] and "accel_driver_branch" not in reads["m-2"]
    assert sorted(set(reads["m-2"])) == ["accel_pool", "nvidia_gpus", "preflight_os_release"]


def test_each_hosts_os_release_reaches_its_nodes_labels():
    hosts = {h: dict(v) for h, v in HOSTS.items()}
    hosts["m-2"]["preflight_os_release"] = accel_host_facts.parse_os_release('ID="ubuntu"\nVERSION_ID="24.04"\n')
    nodes = filters.accel_desired_nodes(filters.accel_pools_of(list(hosts), hosts))
    assert nodes["m-2"]["labels"]["feature.node.kubernetes.io/system-os_release.VERSION_ID"] == "24.04"
    assert "feature.node.kubernetes.io/system-os_release.ID" not in nodes["m-1"]["labels"]


def test_releases_point_at_their_chart_directory():
    pools = filters.accel_pools_of(list(HOSTS), HOSTS)
    cluster = {"image_registry": "", "image_pull_secrets": []}
    assert [r["chart"] for r in filters.accel_pool_releases(pools, cluster)] == ["mps", "pgpu"]
    releases = filters.accel_pool_releases(pools, cluster, chart_dir="/srv/charts")
    assert [(r["name"], r["chart"], r["pools"]) for r in releases] == [
        ("kube-accel-mps", "/srv/charts/mps", ["mps"]), ("kube-accel-pgpu", "/srv/charts/pgpu", ["mig"])]
