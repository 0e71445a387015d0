"""The lab's podman hosts: one container per GPU host of the inventory, of the lab host image (HOST_IMAGE), on the
host network. The lab directory's hosts file names the containers this lab started; only those are removed.

The default lab's containers are named after their hosts, as the lab inventory reaches them. A second lab's are
named NAME-HOST (its cluster name first) so that both labs' hosts can run at once; its directory's
hosts-inventory.yml is an inventory source that points each host at its container (ansible_host), given to
ansible-playbook after the lab inventory (`-i inventories/lab/hosts.yml -i DIR/hosts-inventory.yml`)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import yaml

from kalab.site import LAB, Site, log, run, versions

# The lab's hosts get four times the CPU weight of other podman containers (1024, Molecule's hosts among them) when
# both are busy: `make test` runs the Molecule scenarios at nice 10 beside the lab tests, but a container's processes
# are weighed in its own cgroup (podman's libpod_parent), where nice does not reach; the lab tests decide the total.
CPU_SHARES = 4096


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return run("podman", *args, check=check)


HOSTS_INVENTORY = "hosts-inventory.yml"


def container_name(site: Site, host: str) -> str:
    """The podman container of ``host`` in ``site``'s lab (see the module docstring)."""
    return host if site.root.resolve() == LAB.resolve() else f"{site.name}-{host}"


def start_hosts(site: Site, hosts: dict[str, dict]) -> None:
    image = versions()["HOST_IMAGE"]
    if shutil.which("podman") is None or podman("image", "exists", image, check=False).returncode != 0:
        sys.exit(f"[lab] podman image {image} missing: run scripts/toolchain.sh first")
    names = {host: container_name(site, host) for host in hosts}
    for host, name in names.items():
        state = podman("inspect", "--format", "{{.State.Running}}", name, check=False)
        if state.returncode == 0 and state.stdout.strip() == "true":
            continue
        if state.returncode == 0:
            podman("start", name)
        else:
            podman(
                "run", "-d", "--name", name, "--hostname", host, "--network", "host", "--cpu-shares", str(CPU_SHARES),
                "--label", "kube-accel.lab=true", image, "sleep", "infinity",
            )
    (site.root / "hosts").write_text("\n".join(names.values()) + "\n")
    mapping = site.root / HOSTS_INVENTORY
    if any(host != name for host, name in names.items()):
        mapping.write_text("---\n# The containers of this lab's hosts (kalab.hosts): give after the lab inventory.\n"
                           + yaml.safe_dump({"all": {"hosts": {h: {"ansible_host": n} for h, n in names.items()}}}))
    else:
        mapping.unlink(missing_ok=True)
    log(f"{len(hosts)} host containers running")


def stop_hosts(site: Site) -> None:
    listed = site.root / "hosts"
    if not listed.exists() or shutil.which("podman") is None:
        return
    # Only the containers this lab started, by exact name.
    names = [n for n in listed.read_text().split() if n]
    if names:
        podman("rm", "-f", "-t", "0", *names, check=False)
    listed.unlink()
    (site.root / HOSTS_INVENTORY).unlink(missing_ok=True)
