#!/usr/bin/env python3
"""Benchmarks 1 and 2 of kube-accel: host provisioning (ansible/hosts.yml) on podman lab hosts.

1. Fleet scale: hosts.yml on 1, 4 and 12 fresh hosts spread over the lab's pools, cold then re-run.
   Ratios: 12 hosts / 1 host (target <= 2x), re-run / first run (target <= 25%).
2. Overhead against the physical limit, on one fresh pGPU host each:
   - roles:  hosts.yml with the driver installed for real, as on a GPU host (Debian 12's 535 branch from
             non-free, kernel headers, DKMS module build), and the same without headers and module build,
   - script: a plain shell script doing the same: the files the roles write, copied in as one tarball,
             `apt-get update`, and `apt-get install` of the same package list (whose postinst builds the module).
   Both hosts read packages from one shared, pre-filled apt archive, so neither run pays for downloads.
   Ratio roles / script (target <= 1.5x).

Hosts are containers named ka-bench-*, started from the lab host image and removed at the end.
Usage: tests/bench/bench_hosts.py [--sizes 1,4,12] [--skip-fleet] [--skip-overhead]
                                  [--overhead-variants packages,dkms] [--connection NAME]
                                  [--enter nsenter,exec] [--compile-cache on,off] [--keep]
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from benchlib import (  # noqa: E402
    CACHE,
    REPO,
    Row,
    ansible_env,
    log,
    ratio_line,
    run_playbook,
    settle,
    stopwatch,
    write_rows,
)

PREFIX = "ka-bench-"
LABEL = "kube-accel.bench=hosts"
LAB_INVENTORY = REPO / "inventories" / "lab"
# Order hosts are dealt into pools: one host lands in the pool with the most roles to run (NUMA pGPU).
POOLS = ["pool_pgpu", "pool_mps", "pool_vgpu_hami", "pool_mig", "pool_vgpu_vcuda"]
# What the roles' files are told apart from: package state, caches, Ansible's own temporary files.
NOT_ROLE_FILES = ("/var/lib/dpkg", "/var/lib/apt", "/var/cache", "/var/log", "/tmp", "/var/tmp", "/run",
                  "/root/.ansible", "/root/.cache", "/usr/lib/python3", "/var/lib/kube-accel")
APT_ARCHIVES = CACHE / "bench" / "apt-archives"
CONNECTION = ""  # --connection; empty: the lab inventory's


def versions() -> dict[str, str]:
    pairs = (line.split("=", 1) for line in (REPO / "scripts" / "versions.env").read_text().splitlines()
             if "=" in line and not line.startswith("#"))
    return {k.strip(): v.strip() for k, v in pairs}


def podman(*args: str, check: bool = True, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(["podman", *args], capture_output=True, input=stdin, check=False)
    if check and proc.returncode != 0:
        sys.exit(f"[bench] podman {' '.join(args)} failed: {proc.stderr.decode(errors='replace')}")
    return proc


def remove_hosts(label: str = LABEL) -> None:
    names = podman("ps", "-a", "--filter", f"label={label}", "--format", "{{.Names}}").stdout.decode().split()
    if names:
        podman("rm", "-f", "-t", "0", *names)


def start_hosts(names: list[str], apt_archives: Path | None = None, label: str = LABEL) -> None:
    image = versions()["HOST_IMAGE"]
    for name in names:
        volume = ["-v", f"{apt_archives}:/var/cache/apt/archives"] if apt_archives else []
        podman("run", "-d", "--name", name, "--hostname", name, "--network", "host", "--label", label, *volume,
               image, "sleep", "infinity")


def lab_host_vars() -> dict:
    """The connection settings of the lab inventory's GPU hosts: the bench runs what `make demo` runs."""
    inventory = yaml.safe_load((LAB_INVENTORY / "hosts.yml").read_text())
    found = dict(inventory["all"]["children"]["gpu_pools"]["vars"])
    return {**found, "ansible_connection": CONNECTION} if CONNECTION else found


def write_inventory(directory: Path, pools: dict[str, list[str]], host_vars: dict | None = None) -> Path:
    """An inventory shaped like the lab's (same group_vars), with the given hosts in each pool group."""
    if directory.exists():
        shutil.rmtree(directory)
    shutil.copytree(LAB_INVENTORY / "group_vars", directory / "group_vars")
    children = {pool: {"hosts": {h: (host_vars or {}).get(h, {}) for h in hosts}} for pool, hosts in pools.items()}
    inventory = {"all": {"children": {
        "kube_control_plane": {"hosts": {"lab-control-plane": {
            "ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}}},
        "gpu_pools": {"vars": lab_host_vars(), "children": children},
    }}}
    path = directory / "hosts.yml"
    path.write_text(json.dumps(inventory, indent=1))  # JSON is YAML
    return path


def ways(enters: list[str], caches: list[str]) -> list[tuple[str, dict[str, str]]]:
    """podman_pipelined's settings to compare, each a name and its environment: every ``enter`` (nsenter, exec) with
    every ``compile_cache`` (on, off; nsenter only)."""
    found = []
    for enter in enters:
        for cache in caches if enter == "nsenter" else caches[:1]:
            name = f"{enter}, compile cache {cache}" if enter == "nsenter" and len(caches) > 1 else enter
            found.append((name, {"KUBE_ACCEL_PODMAN_ENTER": enter,
                                 "KUBE_ACCEL_PODMAN_COMPILE_CACHE": "true" if cache == "on" else "false"}))
    return found


def fleet(sizes: list[int], work: Path, variants: list[tuple[str, dict[str, str]]]) -> list[Row]:
    """hosts.yml on fresh hosts, first run and re-run, per size; with more than one of podman_pipelined's settings
    (``ways``), each on fresh hosts of its own, cases named "first (exec)" etc."""
    rows: list[Row] = []
    for size in sizes:
        for index, (way, settings) in enumerate(variants):
            tag = f"v{index}"  # file names: the way's name has spaces
            remove_hosts()
            names = [f"{PREFIX}h{i:02d}" for i in range(1, size + 1)]
            pools: dict[str, list[str]] = {}
            for i, name in enumerate(names):
                pools.setdefault(POOLS[i % len(POOLS)], []).append(name)
            start_hosts(names)
            inventory = write_inventory(REPO / "inventories" / f".tmp-bench-hosts-{size}", pools)
            # A fact cache of its own: the cold run must not find facts from an earlier size or run.
            env = ansible_env(ANSIBLE_CACHE_PLUGIN_CONNECTION=str(work / f"facts-{size}-{tag}"), **settings)
            for case in ("first", "rerun"):
                label = case if index == 0 else f"{case} ({way})"
                log(f"fleet: hosts.yml on {size} host(s), {label}")
                run = run_playbook("hosts.yml", inventory, env=env, log_to=work / f"fleet-{size}-{case}-{tag}.log")
                if case == "rerun" and run.total_changed:
                    sys.exit(f"[bench] the re-run on {size} hosts changed {run.changed}: not idempotent")
                rows.append(Row("hosts", label, size, round(run.seconds, 2), run.total_changed,
                                cpu_seconds=round(run.cpu_seconds, 1),
                                controller_cpu_seconds=round(run.controller_cpu_seconds, 1)))
                log(f"  {run.seconds:.1f} s, {run.cpu_seconds:.1f} CPU s ({run.controller_cpu_seconds:.1f} "
                    f"controller), changed={run.total_changed}")
            shutil.rmtree(inventory.parent)
    remove_hosts()
    return rows


def role_files(name: str) -> list[str]:
    """Paths the roles added or changed on a host, from podman's view of its writable layer."""
    diff = json.loads(podman("diff", "--format", "json", name).stdout or b"{}")
    paths = sorted(set(diff.get("added") or []) | set(diff.get("changed") or []))
    kept = [p for p in paths if not p.startswith(NOT_ROLE_FILES)]
    # A directory listed only because something excluded was created below it (/root for /root/.ansible).
    return [p for p in kept if any(k.startswith(f"{p}/") for k in kept)
            or not any(x.startswith(f"{p}/") for x in NOT_ROLE_FILES)]


def host_exec(name: str, script: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return podman("exec", "-i", "-e", "DEBIAN_FRONTEND=noninteractive", name, "sh", "-euc", script, stdin=stdin)


def installed(name: str) -> set[str]:
    out = host_exec(name, "dpkg-query -W -f='${Package} ${Status}\\n'").stdout.decode()
    return {line.split()[0] for line in out.splitlines() if line.endswith("install ok installed")}


def overhead(work: Path, variants: list[str]) -> list[Row]:
    """Roles vs plain script on fresh pGPU hosts, per variant: "packages" (driver packages, no kernel headers) and
    "dkms" (as on a GPU host: the same plus kernel headers and the DKMS module build). See the module docstring."""
    remove_hosts()
    APT_ARCHIVES.mkdir(parents=True, exist_ok=True)
    files_host = f"{PREFIX}files"
    start_hosts([files_host])

    def hosts_yml(host: str, host_vars: dict | None = None, tag: str = ""):
        inventory = write_inventory(work / f"inv-{host}", {"pool_pgpu": [host]}, {host: host_vars or {}})
        env = ansible_env(ANSIBLE_CACHE_PLUGIN_CONNECTION=str(work / f"facts-{host}"))
        return run_playbook("hosts.yml", inventory, env=env, log_to=work / f"overhead-{host}{tag}.log")

    # The files: what the roles write in the lab's configuration (no packages), read off a fresh host.
    hosts_yml(files_host)
    paths = role_files(files_host)
    tarball = host_exec(files_host, "tar -C / --no-recursion -cf - " + " ".join(shlex.quote(p) for p in paths))
    log(f"overhead: the roles write {len(paths)} paths: {', '.join(paths)}")
    baseline = installed(files_host)

    rows: list[Row] = []
    for variant in variants:
        warm_host, roles_host, script_host = (f"{PREFIX}{variant}-{n}" for n in ("warm", "roles", "script"))
        start_hosts([warm_host, roles_host, script_host], APT_ARCHIVES)
        packaged: dict = {"nvidia_driver_install_packages": True, "nvidia_driver_kernel_versions": []}
        if variant == "dkms":
            # A container has no headers for its host's kernel: both sides build for the kernel bookworm's headers
            # metapackage points at (as roles/nvidia_driver/molecule/dkms does).
            depends = host_exec(files_host, "apt-get update -qq && apt-cache depends linux-headers-amd64").stdout
            kernel = re.search(r"linux-headers-(\d\S*-amd64)", depends.decode())
            if not kernel:
                sys.exit(f"[bench] no kernel found in: {depends.decode()}")
            packaged["nvidia_driver_kernel_versions"] = [kernel[1]]
        # An untimed first run fills the shared apt archive, so neither timed run downloads, and tells which
        # packages the roles install.
        hosts_yml(warm_host, packaged)
        packages = sorted(installed(warm_host) - baseline)
        log(f"overhead/{variant}: the roles install {len(packages)} packages")

        log(f"overhead/{variant}: roles on a fresh host")
        roles = hosts_yml(roles_host, packaged)
        rerun = hosts_yml(roles_host, packaged, tag="-rerun")
        log(f"  {roles.seconds:.1f} s (re-run {rerun.seconds:.1f} s, changed={rerun.total_changed})")
        log(f"overhead/{variant}: plain script on a fresh host")
        script = ("tar -C / -xf - && apt-get update -qq && apt-get install -y -qq --no-install-recommends "
                  + " ".join(packages))
        settle()
        with stopwatch() as t:
            host_exec(script_host, script, stdin=tarball.stdout)
        log(f"  {t[0]:.1f} s")
        for name in (roles_host, script_host):
            missing = set(packages) - installed(name)
            if missing:
                sys.exit(f"[bench] {name} lacks {sorted(missing)}")
            for kernel in packaged["nvidia_driver_kernel_versions"]:
                host_exec(name, f"test -f /lib/modules/{kernel}/updates/dkms/nvidia-current.ko")
        note = f"{len(packages)} packages + {len(paths)} paths" + (" + DKMS build" if variant == "dkms" else "")
        suffix = "" if variant == "packages" else f"+{variant}"
        rows += [Row("overhead", f"roles{suffix}", 1, round(roles.seconds, 2), roles.total_changed, note,
                     round(roles.cpu_seconds, 1)),
                 Row("overhead", f"roles{suffix} re-run", 1, round(rerun.seconds, 2), rerun.total_changed, note,
                     round(rerun.cpu_seconds, 1)),
                 Row("overhead", f"script{suffix}", 1, round(t[0], 2), None, note, round(t[1], 1))]
        remove_hosts_named([warm_host, roles_host, script_host])
    return rows


def remove_hosts_named(names: list[str]) -> None:
    podman("rm", "-f", "-t", "0", *names)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,4,12", help="host counts for the fleet benchmark")
    parser.add_argument("--skip-fleet", action="store_true")
    parser.add_argument("--skip-overhead", action="store_true")
    parser.add_argument("--overhead-variants", default="packages,dkms",
                        help="packages (driver packages only) and/or dkms (plus kernel headers and module build)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (playbook logs)")
    parser.add_argument("--connection", default="", help="Ansible connection for the hosts (default: the lab's)")
    parser.add_argument("--enter", default="nsenter",
                        help="podman_pipelined's ways into a host, compared side by side: nsenter and/or exec")
    parser.add_argument("--compile-cache", default="on",
                        help="podman_pipelined's compile cache with nsenter, compared side by side: on and/or off")
    args = parser.parse_args()
    global CONNECTION  # noqa: PLW0603 - one setting for the whole run
    CONNECTION = args.connection
    sizes = sorted({int(s) for s in args.sizes.split(",")})
    work = Path(tempfile.mkdtemp(prefix="ka-bench-hosts-"))
    try:
        if not args.skip_fleet:
            variants = ways(args.enter.split(","), args.compile_cache.split(","))
            rows = fleet(sizes, work, variants)
            write_rows("hosts", rows)
            by = {(r.case, r.size): r.seconds for r in rows}
            cpu = {(r.case, r.size): r.cpu_seconds for r in rows}
            print(ratio_line(f"fleet {sizes[-1]} hosts / {sizes[0]} host", by["first", sizes[-1]],
                             by["first", sizes[0]], "<= 2x"))
            for size in sizes:
                print(ratio_line(f"re-run / first run, {size} hosts", by["rerun", size], by["first", size],
                                 "<= 0.25x"))
                base = variants[0][0]
                for other, _ in variants[1:]:
                    for case in ("first", "rerun"):
                        print(ratio_line(f"{case}, {size} hosts, wall: {base} / {other}", by[case, size],
                                         by[f"{case} ({other})", size]))
                        print(ratio_line(f"{case}, {size} hosts, machine CPU: {base} / {other}", cpu[case, size],
                                         cpu[f"{case} ({other})", size], unit="CPU-s"))
        if not args.skip_overhead:
            rows = overhead(work, args.overhead_variants.split(","))
            write_rows("overhead", rows)
            by = {r.case: r.seconds for r in rows}
            for suffix in ("", "+dkms"):
                if f"roles{suffix}" in by:
                    print(ratio_line(f"roles{suffix} / plain script{suffix}", by[f"roles{suffix}"],
                                     by[f"script{suffix}"], "<= 1.5x"))
    finally:
        remove_hosts()
        if args.keep:
            log(f"logs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
