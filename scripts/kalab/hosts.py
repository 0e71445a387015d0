"""The lab's podman hosts: one container per GPU host of the inventory, of the lab host image (HOST_IMAGE), on the
host network. The lab directory's hosts file names the containers this lab started; only those are removed."""

from __future__ import annotations

import shutil
import subprocess
import sys

from kalab.site import Site, log, run, versions

# The lab's hosts get four times the CPU weight of other podman containers (1024, Molecule's hosts among them) when
# both are busy: `make test` runs the Molecule scenarios at nice 10 beside the lab tests, but a container's processes
# are weighed in its own cgroup (podman's libpod_parent), where nice does not reach; the lab tests decide the total.
CPU_SHARES = 4096


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return run("podman", *args, check=check)


def start_hosts(site: Site, hosts: dict[str, dict]) -> None:
    image = versions()["HOST_IMAGE"]
    if shutil.which("podman") is None or podman("image", "exists", image, check=False).returncode != 0:
        sys.exit(f"[lab] podman image {image} missing: run scripts/toolchain.sh first")
    for name in hosts:
        state = podman("inspect", "--format", "{{.State.Running}}", name, check=False)
        if state.returncode == 0 and state.stdout.strip() == "true":
            continue
        if state.returncode == 0:
            podman("start", name)
        else:
            podman(
                "run", "-d", "--name", name, "--hostname", name, "--network", "host", "--cpu-shares", str(CPU_SHARES),
                "--label", "kube-accel.lab=true", image, "sleep", "infinity",
            )
    (site.root / "hosts").write_text("\n".join(hosts) + "\n")
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
