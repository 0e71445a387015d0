"""The host play's fast path (roles/host_state) on real podman hosts, one fresh host per lab pool.

- every path the host roles wrote on a fresh host lies under a watched path (a role that writes somewhere new
  without the watch list knowing would let drift there go unrepaired);
- the re-run takes the fast path on every host and changes nothing;
- a managed file deleted on one host makes that host run its roles again, which put the file back;
- the NVIDIA runtime's config turned back to NVIDIA's default on another host (the careless operator: unprivileged
  containers could name GPUs in NVIDIA_VISIBLE_DEVICES again) makes that host run its roles, which undo it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
import bench_hosts  # noqa: E402
from benchlib import ansible_env, run_playbook  # noqa: E402

# Podman hosts only (their inventory names no reachable cluster): beside the unit tests in `make test`, not in the
# lab lane, which waits on nothing else and decides the total.
pytestmark = pytest.mark.podman
LABEL = "kube-accel.test=host-state"
POOLS = ["pool_pgpu", "pool_mps", "pool_vgpu_hami", "pool_mig", "pool_vgpu_vcuda"]
DRIFTED = "/etc/modprobe.d/kube-accel-blacklist-nouveau.conf"
RUNTIME_CONFIG = "/etc/nvidia-container-runtime/config.toml"
ENVVAR_KEY = "accept-nvidia-visible-devices-envvar-when-unprivileged"


def covered(path: str, watched: list[str]) -> bool:
    """Under a watched path, or a directory above one (whose listing changed because a watched child was added)."""
    return any(path == w or path.startswith(w.rstrip("/") + "/") or w.startswith(path.rstrip("/") + "/")
               for w in watched)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    if bench_hosts.podman("image", "exists", bench_hosts.versions()["HOST_IMAGE"], check=False).returncode:
        pytest.fail("lab host image missing: run `make toolchain` first")
    work = tmp_path_factory.mktemp("host-state")
    hosts = {pool: f"ka-hs-{pool.removeprefix('pool_').replace('_', '-')}" for pool in POOLS}
    bench_hosts.remove_hosts(LABEL)
    bench_hosts.start_hosts(list(hosts.values()), label=LABEL)
    inventory = bench_hosts.write_inventory(work / "inventory", {pool: [h] for pool, h in hosts.items()})
    env = ansible_env(ANSIBLE_CACHE_PLUGIN_CONNECTION=str(work / "facts"))
    yield inventory, env, list(hosts.values())
    bench_hosts.remove_hosts(LABEL)


def test_fast_path_covers_every_written_path_skips_and_repairs(fleet):
    inventory, env, hosts = fleet
    first = run_playbook("hosts.yml", inventory, env=env)
    assert all(first.changed[h] > 0 for h in hosts), first.changed

    watched = yaml.safe_load((REPO / "roles/host_state/defaults/main.yml").read_text())["host_state_watch"]
    for host in hosts:
        written = bench_hosts.role_files(host)
        assert written, f"{host}: podman diff found nothing the roles wrote"
        assert [p for p in written if not covered(p, watched)] == [], f"{host}: written but not watched"
        record = bench_hosts.host_exec(host, "cat /var/lib/kube-accel/host-state.json").stdout
        assert yaml.safe_load(record)["state_digest"]

    rerun = run_playbook("hosts.yml", inventory, env=env)
    assert rerun.total_changed == 0, rerun.changed
    assert rerun.output.count("Fast path: inputs and host state match the last full run") == len(hosts)
    assert "Install the NVIDIA driver" not in rerun.output  # no role was even included

    drifted, unsafe = hosts[0], hosts[1]
    bench_hosts.host_exec(drifted, f"rm {DRIFTED}")
    bench_hosts.host_exec(unsafe, f"sed -i 's/^{ENVVAR_KEY} = false$/{ENVVAR_KEY} = true/' {RUNTIME_CONFIG}")
    assert f"{ENVVAR_KEY} = true" in bench_hosts.host_exec(unsafe, f"cat {RUNTIME_CONFIG}").stdout.decode()
    repair = run_playbook("hosts.yml", inventory, env=env)
    assert f"host changed since the last full run: {DRIFTED}" in repair.output
    assert f"host changed since the last full run: {RUNTIME_CONFIG}" in repair.output
    assert repair.changed[drifted] > 0 and repair.changed[unsafe] > 0
    assert all(repair.changed[h] == 0 for h in hosts[2:]), repair.changed
    assert bench_hosts.host_exec(drifted, f"test -f {DRIFTED}").returncode == 0
    assert f"{ENVVAR_KEY} = false" in bench_hosts.host_exec(unsafe, f"cat {RUNTIME_CONFIG}").stdout.decode()

    # With the fast path off, the full run finds nothing to change: the record agrees with the roles.
    full = run_playbook("hosts.yml", inventory, "-e", "accel_hosts_fast_path=false", env=env)
    assert full.total_changed == 0, full.changed
