"""ansible/decommission.yml on real podman hosts from the lab host image (docs/operations.md "Taking hosts out").

Two hosts are set up by the host roles (hosts.yml's order) with settings that write kubelet drop-ins, IOMMU kernel
arguments, a toolkit and a driver version pin, a MIG record; one also carries an earlier plan's SR-IOV unit. A third
host stays in its pool. The test plays the careless operator: decommission.yml without --limit, and with a limit that
takes every GPU host, changes nothing. Then check mode changes nothing on the hosts, the real run removes every file
kube-accel wrote except the ones kept on purpose (the driver's and toolkit's repositories and settings, which keep the
installed driver working), reports the kernel arguments still booted, leaves the operator's own files and the third
host alone, and a second run changes nothing.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
import bench_hosts  # noqa: E402
from benchlib import RECAP, VENV_BIN, ansible_env  # noqa: E402

pytestmark = pytest.mark.podman
LABEL = "kube-accel.test=decommission"
PGPU, MIG, STAYS = "ka-dc-pgpu", "ka-dc-mig", "ka-dc-mps"
FAKE_CMDLINE = "/root/fake-cmdline"
# What decommission keeps on purpose: the driver and toolkit stay installed, and these keep them working and updated.
KEPT = {
    "/etc/apt/sources.list.d/kube-accel-debian-nonfree.sources",
    "/etc/apt/sources.list.d/kube-accel-nvidia-container-toolkit.sources",
    "/etc/modprobe.d/kube-accel-blacklist-nouveau.conf",
    "/etc/systemd/system/nvidia-persistenced.service.d/kube-accel.conf",
    # containerd's main config keeps the imports line of the drop-in directory (created here, where none was): it
    # imports nothing once the drop-in is gone, and other drop-ins there may rely on it.
    "/etc/containerd/config.toml",
}
# An earlier plan's SR-IOV boot unit for a device this host does not have (test_site_settings_off_lab's shape).
SRIOV_BDF = "0000:3b:00.0"
SRIOV_PLANTED = (
    "mkdir -p /etc/kube-accel/sriov /etc/systemd/system/multi-user.target.wants /usr/local/libexec/kube-accel"
    f" && echo NUMVFS=4 > /etc/kube-accel/sriov/{SRIOV_BDF}.env"
    " && echo '[Unit]' > /etc/systemd/system/kube-accel-sriov@.service"
    " && echo '#!/bin/sh' > /usr/local/libexec/kube-accel/sriov-numvfs"
    " && ln -sf /etc/systemd/system/kube-accel-sriov@.service"
    f" /etc/systemd/system/multi-user.target.wants/kube-accel-sriov@{SRIOV_BDF}.service"
)
OPERATOR_FILES = ["/etc/modules-load.d/operator.conf", "/etc/containerd/conf.d/10-operator.toml",
                  "/etc/modprobe.d/operator.conf"]


# The host roles in hosts.yml's order (ansible/tasks/host_change.yml), without its fast-path record and maintenance:
# what decommission reverts is what the roles wrote, whatever the hosts play around them does.
CONVERGE = """
- hosts: gpu_pools
  gather_facts: true
  gather_subset: [min, hardware, virtual]
  tasks:
    - {name: role, ansible.builtin.include_role: {name: "kube_accel.gpu.{{ converge_role }}"},
       loop_control: {loop_var: converge_role},
       loop: [nvidia_driver, container_toolkit, kernel_modules, iommu, sriov, vfio, mig, kubelet_gpu]}
    - ansible.builtin.meta: flush_handlers
    # The hosts play's record of the full run (roles/host_state), as it leaves it.
    - name: record
      ansible.builtin.shell: mkdir -p /var/lib/kube-accel && echo '{}' > /var/lib/kube-accel/host-state.json
"""


def ansible(inventory: Path, env: dict, *args: str, playbook: Path = REPO / "ansible" / "decommission.yml"
            ) -> tuple[int, dict[str, int], str]:
    proc = subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i", str(inventory), str(playbook), *args],
                          cwd=REPO, env=env, capture_output=True, text=True, check=False)
    changed = {m["host"]: int(m["changed"]) for m in map(RECAP.match, proc.stdout.splitlines()) if m}
    return proc.returncode, changed, proc.stdout + proc.stderr


def state(host: str) -> str:
    """Every path the roles wrote with its content's digest (links: their target): what check mode must not touch."""
    paths = bench_hosts.role_files(host)
    script = ("for p in \"$@\"; do if [ -L \"$p\" ]; then echo \"$p -> $(readlink \"$p\")\";"
              " elif [ -f \"$p\" ]; then sha256sum \"$p\"; elif [ -e \"$p\" ]; then echo \"$p dir\"; fi; done")
    return bench_hosts.podman("exec", host, "sh", "-c", script, "sh", *paths).stdout.decode()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    if bench_hosts.podman("image", "exists", bench_hosts.versions()["HOST_IMAGE"], check=False).returncode:
        pytest.fail("lab host image missing: run `make toolchain` first")
    work = tmp_path_factory.mktemp("decommission")
    bench_hosts.remove_hosts(LABEL)
    bench_hosts.start_hosts([PGPU, MIG, STAYS], label=LABEL)
    pgpu_vars = {"accel_iommu": True, "iommu_cpu_vendor": "intel", "iommu_bootloader_update": False,
                 "iommu_proc_cmdline": FAKE_CMDLINE, "container_toolkit_version": "1.17.8-1"}
    # The lab's NVML snapshots, by a path that does not depend on where the inventory is.
    nvml = "{{ lookup('ansible.builtin.env', 'KA_REPO') }}/tests/data/nvml/{{ accel_lab_gpu }}.json"
    inventory = bench_hosts.write_inventory(work / "inventory",
                                            {"pool_pgpu": [PGPU], "pool_mig": [MIG], "pool_mps": [STAYS]},
                                            {PGPU: {**pgpu_vars, "accel_nvml_snapshot": nvml},
                                             MIG: {"accel_nvml_snapshot": nvml}, STAYS: {"accel_nvml_snapshot": nvml}})
    env = ansible_env(ANSIBLE_CACHE_PLUGIN_CONNECTION=str(work / "facts"), KA_REPO=str(REPO))
    # The kernel the host booted: an earlier boot with kube-accel's IOMMU arguments.
    bench_hosts.host_exec(PGPU, f"echo 'BOOT_IMAGE=/vmlinuz root=/dev/sda1 intel_iommu=on iommu=pt' > {FAKE_CMDLINE}")
    converge = work / "converge.yml"
    converge.write_text(CONVERGE)
    yield inventory, env, converge
    bench_hosts.remove_hosts(LABEL)


def test_decommission_reverts_the_host_and_nothing_else(fleet):
    inventory, env, converge = fleet
    rc, changed, out = ansible(inventory, env, playbook=converge)
    assert rc == 0 and all(changed[h] > 0 for h in (PGPU, MIG, STAYS)), out[-6000:]
    bench_hosts.host_exec(PGPU, SRIOV_PLANTED)
    for host in (PGPU, MIG):
        bench_hosts.host_exec(host, " && ".join(f"mkdir -p $(dirname {f}) && echo '# mine' > {f}"
                                                for f in OPERATOR_FILES))
    written = {h: set(bench_hosts.role_files(h)) for h in (PGPU, MIG)}
    for path in ("/etc/kubernetes/kubelet.conf.d/50-kube-accel-gpu.conf",
                 "/etc/systemd/system/kubelet.service.d/20-kube-accel-config-dir.conf",
                 "/etc/default/grub.d/kube-accel-iommu.cfg", "/etc/apt/preferences.d/kube-accel-nvidia-driver.pref",
                 "/etc/apt/preferences.d/kube-accel-nvidia-container-toolkit.pref",
                 "/etc/containerd/conf.d/99-nvidia.toml", "/etc/systemd/system/kube-accel-cdi.service",
                 "/etc/nvidia-container-runtime/config.toml", "/etc/modules-load.d/kube-accel-nvidia.conf",
                 f"/etc/kube-accel/sriov/{SRIOV_BDF}.env"):
        assert path in written[PGPU], f"{PGPU}: the roles did not write {path}: the test proves nothing there"
    assert "/etc/kube-accel/mig-geometry" in written[MIG]
    record = "test -e /var/lib/kube-accel/host-state.json && echo yes || true"  # not in role_files: bench excludes it
    assert all(bench_hosts.host_exec(h, record).stdout == b"yes\n" for h in (PGPU, MIG, STAYS))
    before = {h: state(h) for h in (PGPU, MIG, STAYS)}

    # The careless operator: no --limit, then a limit that is every GPU host. Nothing runs on any host.
    rc, changed, out = ansible(inventory, env)
    assert rc != 0 and "without --limit it would take every GPU host" in out and not any(changed.values()), out
    rc, changed, out = ansible(inventory, env, "--limit", "gpu_pools")
    assert rc != 0 and "decommission_all_hosts=true" in out and not any(changed.values()), out
    assert {h: state(h) for h in (PGPU, MIG, STAYS)} == before

    # Check mode says what it would change and changes nothing.
    rc, changed, out = ansible(inventory, env, "--limit", f"{PGPU},{MIG}", "--check", "--diff")
    assert rc == 0, out[-6000:]
    assert changed[PGPU] > 0 and changed[MIG] > 0 and STAYS not in changed, changed
    assert {h: state(h) for h in (PGPU, MIG, STAYS)} == before

    rc, changed, out = ansible(inventory, env, "--limit", f"{PGPU},{MIG}", "--diff")
    assert rc == 0, out[-6000:]
    assert changed[PGPU] > 0 and changed[MIG] > 0 and STAYS not in changed, changed
    words = " ".join(out.split())  # the YAML callback folds long lines
    assert "iommu: booted kernel command line still has intel_iommu=on iommu=pt, removed from the bootloader" in words
    assert "kube_accel_reboot_pending" in out
    for host in (PGPU, MIG):
        left = set(bench_hosts.role_files(host))
        files_left = {p for p in left if bench_hosts.host_exec(host, f"test -d {p} || echo file").stdout}
        files_left -= {*OPERATOR_FILES, FAKE_CMDLINE}
        assert files_left == KEPT, f"{host}: left {sorted(files_left - KEPT)}, removed {sorted(KEPT - files_left)}"
        for f in OPERATOR_FILES:
            assert bench_hosts.host_exec(host, f"cat {f}").stdout == b"# mine\n"
        assert bench_hosts.host_exec(host, "test -e /var/lib/kube-accel && echo yes || true").stdout == b""
    assert state(STAYS) == before[STAYS]
    assert bench_hosts.host_exec(STAYS, record).stdout == b"yes\n"

    rc, changed, out = ansible(inventory, env, "--limit", f"{PGPU},{MIG}")
    assert rc == 0 and changed == {PGPU: 0, MIG: 0}, (changed, out[-6000:])
