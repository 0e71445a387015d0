"""Upgrade from the released 0.1.0 to this checkout through site.yml, in the lab, with pods running.

The release is checked out from this repository's own history (the commit CHANGELOG.md names for 0.1.0) into a
temporary directory, and its own site.yml installs it on the lab with its own inventory: hosts, charts, verify. A
pod is then pinned to each of its GPU nodes (a drain would evict it) and this checkout's site.yml runs on the
lab's inventory in this checkout, which adds one pool (dra, host lab-dra-0) and changes no other.

What the upgrade must show (docs/day2.md "Upgrading kube-accel"):
- no host of an unchanged pool is drained: 0.1.0's host records (version 1) cannot be compared with this version's,
  so each host's roles are asked in check mode first (the probe), and a host they would not change is recorded and
  left in service; only the new pool's host goes through the cordon-drain-change path;
- no pod on those nodes is evicted or restarted, and the MPS control daemon (OnDelete since 0.2.0) keeps running;
- every release kube-accel owns is at this version's chart, deployed, and verify finds no leftover; no node carries a
  kube-accel label key this version does not manage.

Evidence: 0.1.0's own code and this checkout's, run by ansible-playbook against the lab's real kube-apiserver, helm,
kube-controller-manager (Deployments, DaemonSets) and podman hosts; kwok (stand-in for the kubelet) runs the pods.
The test needs a lab no kube-accel has touched yet: `make test` runs it first on the second lab, whose podman hosts
are its own (marker second_lab, tests/conftest.py, scripts/test.sh); on a used lab it restarts the lab.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from lab_fixture import HOSTS_INVENTORY, LAB_INVENTORY, container, lab_env, reset_lab, site_play
from test_day2_lab import pinned_pod

pytestmark = [pytest.mark.lab, pytest.mark.second_lab]

REPO = Path(__file__).resolve().parents[2]
WORKLOADS = "upgrade-workloads"
RECORD = "/var/lib/kube-accel/host-state.json"
MPS_DAEMON = "kube-accel-mps-mps-control-daemon"
# The DRA driver's chart is NVIDIA's (its own version); every other release kube-accel installs is one of its charts.
FOREIGN_CHARTS = {"dra-driver-nvidia-gpu"}


def released_commit(version: str = "0.1.0") -> str:
    """The commit CHANGELOG.md says ``version`` was released from ("Released from commit <sha>")."""
    text = (REPO / "CHANGELOG.md").read_text()
    section = text[text.index(f"## {version} "):]
    return re.search(r"Released from commit ([0-9a-f]{7,40})", section)[1]


def gpu_hosts(inventory: Path) -> list[str]:
    """The hosts under gpu_pools in a lab hosts.yml."""
    pools = yaml.safe_load(inventory.read_text())["all"]["children"]["gpu_pools"]["children"]
    return sorted(h for pool in pools.values() for h in (pool.get("hosts") or {}))


def record_version(host: str) -> int:
    out = subprocess.run(["podman", "exec", container(host), "cat", RECORD], capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out)["version"]


def pods(lab, namespace: str, selector: str | None = None) -> dict[str, dict]:
    args = ["get", "pods", "-n", namespace, "-o", "json", *(["-l", selector] if selector else [])]
    return {p["metadata"]["name"]: p for p in json.loads(lab.kubectl_run(*args).stdout)["items"]}


def nodes(lab) -> dict[str, dict]:
    return {n["metadata"]["name"]: n for n in json.loads(lab.kubectl_run("get", "nodes", "-o", "json").stdout)["items"]}


@pytest.fixture(scope="module")
def upgrade(lab, tmp_path_factory):
    if any(name.startswith("kube-accel-") or name == "gpu-operator" for name in lab.releases()):
        reset_lab(lab)  # a lab an earlier test converged: 0.1.0 would be a downgrade
    commit = released_commit()
    old = tmp_path_factory.mktemp("upgrade") / "kube-accel-0.1.0"
    old.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit], capture_output=True, check=False)
    if archive.returncode:
        pytest.fail(f"commit {commit} (0.1.0, CHANGELOG.md) is not in this clone's history: "
                    f"{archive.stderr.decode()[-500:]}")
    subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
    # The lab reaches its podman hosts through this checkout's connection plugin (nsenter, no podman per task), not
    # 0.1.0's: how the lab enters a container is the lab's, not the release's (real hosts are reached over SSH).
    hosts_yml = old / "inventories" / "lab" / "hosts.yml"
    lab_hosts = hosts_yml.read_text()
    assert "kube_accel.gpu.podman_pipelined" in lab_hosts, "0.1.0's lab inventory names another connection"
    hosts_yml.write_text(lab_hosts.replace("kube_accel.gpu.podman_pipelined", "podman_pipelined"))
    bin_dir = Path(sys.executable).parent
    env = {**lab_env(lab.helm.parent), "ANSIBLE_CONFIG": str(old / "ansible.cfg"),
           # 0.1.0's collection (its .collections links to its checkout), the other collections from this venv.
           "ANSIBLE_COLLECTIONS_PATH": f"{old / '.collections'}:{REPO / '.venv/lib/python3.11/site-packages'}",
           "ANSIBLE_CONNECTION_PLUGINS": str(REPO / "plugins" / "connection"),
           # 0.1.0's facts stay its own (its checkout's fact cache), as with its own ansible.cfg alone.
           "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(old / ".cache" / "ansible-facts")}
    # On a second lab, its hosts' containers (kalab.hosts): the same source after 0.1.0's own lab inventory.
    mapping = ["-i", str(HOSTS_INVENTORY)] if HOSTS_INVENTORY.exists() else []
    installed = subprocess.run(
        [str(bin_dir / "ansible-playbook"), "-i", "inventories/lab/hosts.yml", *mapping, "ansible/site.yml",
         "-e", f"accel_kubeconfig={lab.kubeconfig}"],
        cwd=old, env=env, capture_output=True, text=True, check=False, timeout=900)
    assert installed.returncode == 0, installed.stdout[-5000:] + installed.stderr[-2000:]
    old_hosts = gpu_hosts(old / "inventories" / "lab" / "hosts.yml")
    before = {"releases": lab.releases(), "records": {h: record_version(h) for h in old_hosts}}
    lab.namespace(WORKLOADS)
    for host in old_hosts:
        pinned_pod(lab, f"on-{host}", host, WORKLOADS)
    before["pods"] = pods(lab, WORKLOADS)
    before["mps"] = pods(lab, "kube-accel", "app.kubernetes.io/instance=kube-accel-mps")
    before["nodes"] = nodes(lab)
    upgraded = site_play(lab, LAB_INVENTORY / "hosts.yml")
    yield {"old_hosts": old_hosts, "installed": installed, "before": before, "upgraded": upgraded}
    lab.kubectl_run("delete", "namespace", WORKLOADS, "--wait=false", check=False)


def test_the_release_installs_from_its_own_commit(upgrade):
    """0.1.0 itself, not this checkout: its charts are at 0.1.0 and its host records at version 1."""
    before = upgrade["before"]
    charts = {r["chart"] for name, r in before["releases"].items() if name.startswith("kube-accel-")}
    assert charts and all(c.endswith("-0.1.0") for c in charts), charts
    assert set(before["records"].values()) == {1}, before["records"]


def test_the_upgrade_drains_no_host_of_an_unchanged_pool(lab, upgrade):
    """Each host of 0.1.0's pools is probed in check mode, found unchanged, recorded and left in service; only the new
    pool's host (lab-dra-0) is cordoned and drained. Evidence: the run's output and the nodes' maintenance records."""
    proc = upgrade["upgraded"]
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    out = proc.stdout
    for host in upgrade["old_hosts"]:
        assert re.search(rf"ok: \[{host}\] => \n\s+msg: 'Check-mode probe: the record is an earlier kube-accel''s",
                         out), f"{host} was not probed"
        assert f"{host}: cordoned by kube-accel" not in out
    assert out.count("here: recorded, not drained (fast path from now on)") == len(upgrade["old_hosts"]), out[-5000:]
    assert "lab-dra-0: cordoned by kube-accel" in out
    from ansible_collections.kube_accel.gpu.plugins.module_utils.common import constants as accel_constants  # noqa: PLC0415

    after = nodes(lab)
    key = accel_constants.ANNOTATIONS["last_maintenance"]
    for host in upgrade["old_hosts"]:
        assert after[host]["metadata"].get("annotations", {}).get(key) == \
            upgrade["before"]["nodes"][host]["metadata"].get("annotations", {}).get(key), host
    assert not any(n["spec"].get("unschedulable") for n in after.values()), "a node left cordoned"
    assert {h: record_version(h) for h in [*upgrade["old_hosts"], "lab-dra-0"]} == \
        dict.fromkeys([*upgrade["old_hosts"], "lab-dra-0"], 2)


def test_no_pod_of_an_unchanged_pool_is_evicted_or_restarted(lab, upgrade):
    """The pinned pods and the MPS control daemon (OnDelete since 0.2.0) keep their UIDs and restart counts."""
    def identity(pod_map):
        return {n: (p["metadata"]["uid"], p["status"].get("phase"),
                    [c.get("restartCount", 0) for c in p["status"].get("containerStatuses", [])])
                for n, p in pod_map.items()}

    before = upgrade["before"]
    assert identity(pods(lab, WORKLOADS)) == identity(before["pods"])
    mps = identity(before["mps"])
    assert mps and {n: v for n, v in mps.items() if n.startswith(MPS_DAEMON)}, "no MPS control daemon before"
    now = identity(pods(lab, "kube-accel", "app.kubernetes.io/instance=kube-accel-mps"))
    for name, value in mps.items():
        if name.startswith(MPS_DAEMON):
            assert now.get(name) == value, f"{name} was replaced or restarted"


def test_every_release_is_at_this_version_and_nothing_old_is_left(lab, upgrade):
    """Every kube-accel release is deployed with this checkout's chart, verify reported no leftover, and no node
    carries a kube-accel.io label this version does not manage."""
    from ansible_collections.kube_accel.gpu.plugins.module_utils.common import constants as accel_constants  # noqa: PLC0415

    now = lab.releases()
    for name, release in now.items():
        assert release["status"] == "deployed", release
        if not name.startswith("kube-accel-"):
            continue
        chart, _, version = release["chart"].rpartition("-")
        if chart in FOREIGN_CHARTS:
            continue
        ours = yaml.safe_load((REPO / "charts" / chart / "Chart.yaml").read_text())["version"]
        assert version == ours, f"{name}: chart {release['chart']}, this checkout's is {chart}-{ours}"
    assert {n for n in upgrade["before"]["releases"] if n.startswith("kube-accel-")} <= set(now)
    assert "releases: no leftover" in upgrade["upgraded"].stdout
    managed = set(accel_constants.LABELS.values())
    prefix = accel_constants.LABEL_PREFIX + "/"
    stale = {(name, key) for name, node in nodes(lab).items() for key in node["metadata"]["labels"]
             if key.startswith(prefix) and key not in managed}
    assert not stale, f"labels this version does not manage: {sorted(stale)}"
