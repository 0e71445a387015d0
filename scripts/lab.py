#!/usr/bin/env python3
"""The local lab: a real Kubernetes control plane (kwokctl --runtime binary, locally built binaries, bound to
127.0.0.1) with fake GPU nodes named after the lab inventory's GPU hosts, a fake control-plane node for its
kube_control_plane host (role label and NoSchedule taint as kubeadm sets them: where the charts' cluster components
run), plus one podman container per GPU host.

  lab.py up       start (or adopt) the cluster, apply the fake nodes, start the host containers
  lab.py down     delete the cluster (kwokctl stops its own processes by PID) and the host containers
  lab.py status   print what runs
  lab.py monitoring [--report FILE]   the monitoring chain on what the cluster play deployed (kalab/monitoring.py)
  lab.py load --util NS=PCT --xid NODE/GPU=CODE   the DCGM exporter stand-in's readings
  lab.py delay-registration SECONDS   the HAMi, device-plugin and DRA stand-ins register a node only SECONDS after
                  its agent pod runs (0 clears): a slow node agent, for the race between registration and verify
Everything lives under the repo's ignored .lab/ directory.

A second lab (benchmarks) lives beside it with its own directory, cluster name and inventory:
  lab.py --dir .lab/bench --name kube-accel-bench up --inventory INV/hosts.yml --no-hosts
The lab's code is the kalab package beside this script (scripts/kalab/__init__.py maps it); this is its command line.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ansible_collections.kube_accel.gpu.plugins.module_utils.common import constants as accel_constants
from kalab import monitoring as monitoring_chain
from kalab.cluster import cluster_running, delete_cluster, start_cluster
from kalab.hosts import start_hosts, stop_hosts
from kalab.nodes import apply_nodes, control_plane_hosts
from kalab.processes import running, stop_all
from kalab.site import (
    BIN,
    CLUSTER,
    INVENTORY,
    LAB,
    NVML_DATA,
    REPO,
    Site,
    gpu_hosts,
    inventory,
    log,
    recorded_gpus,
    run,
    truthy,
)
from kalab.standins import REGISTER_DELAY_FILE
from kalab.upstream import apply_prometheus_rule_crd, start_upstream


def site_of(args: argparse.Namespace) -> Site:
    root = Path(args.dir).resolve() if args.dir else LAB
    return Site(root=root, name=args.name, inventory=Path(getattr(args, "inventory", None) or INVENTORY).resolve())


def up(args: argparse.Namespace) -> None:
    site = site_of(args)
    site.root.mkdir(parents=True, exist_ok=True)
    if not args.skip_toolchain:
        run(str(REPO / "scripts" / "toolchain.sh"), "demo", capture=False)
    start_cluster(site, audit_nodes=args.audit_nodes)
    inv = inventory(site.inventory)
    hosts = gpu_hosts(inv)
    apply_nodes(site, hosts, standins=not args.no_upstream, control_planes=control_plane_hosts(inv))
    if any(truthy(hv.get("accel_monitoring_enabled", False)) for hv in hosts.values()):
        apply_prometheus_rule_crd(site)
    if not args.no_hosts:
        start_hosts(site, hosts)
    if not args.no_upstream:
        start_upstream(site, hosts)


def monitoring(args: argparse.Namespace) -> None:
    """The monitoring chain on what the cluster play deployed (scripts/kalab/monitoring.py), and its report."""
    site = site_of(args)
    if not cluster_running(site):
        sys.exit("[lab] the lab is down: run `make demo` first")
    hosts = gpu_hosts(inventory(site.inventory))
    first = hosts[sorted(hosts)[0]]
    if not truthy(first.get("accel_monitoring_enabled", False)):
        sys.exit(f"[lab] {site.inventory} does not set accel_monitoring_enabled")
    namespace = first.get("accel_namespace") or "kube-accel"
    gpus = {name: recorded_gpus(name, hv) for name, hv in hosts.items()}
    driver = json.loads((NVML_DATA / f"{first['accel_lab_gpu']}.json").read_text()).get("driver_version", "")
    monitoring_chain.up(site.root, site.kubeconfig, gpus, namespace,
                        first.get("accel_monitoring_hpa_adapter_namespace") or namespace, driver)
    if args.report:
        out = Path(args.report).resolve()
        counts = monitoring_chain.report(site.root, site.kubeconfig,
                                         first.get("accel_monitoring_dashboards_namespace") or namespace, out)
        empty = sorted(title for title, n in counts.items() if n == 0)
        log(f"dashboard report: {out} ({len(counts)} panels, {sum(counts.values())} series"
            + (f"; no data: {', '.join(empty)})" if empty else ")"))


def load(args: argparse.Namespace) -> None:
    """Set the DCGM exporter stand-in's readings: utilisation of a namespace's GPUs, a GPU's last XID."""

    def pairs(items: list[str], kind) -> dict:
        out = {}
        for item in items:
            key, sep, value = item.partition("=")
            try:
                if not sep or not key:
                    raise ValueError
                out[key] = kind(value)
            except ValueError:
                what = "a number" if kind is float else "an integer"
                sys.exit(f"[lab] {item!r}: expected KEY=VALUE where VALUE is {what}")
        return out

    print(json.dumps(monitoring_chain.set_load(site_of(args).root, pairs(args.util, float) or None,
                                               pairs(args.xid, int) or None)))


def delay_registration(args: argparse.Namespace) -> None:
    """How long the stand-ins wait after an agent pod runs before they register its node (kalab.standins)."""
    path = site_of(args).root / REGISTER_DELAY_FILE
    if args.seconds < 0:
        sys.exit(f"[lab] delay-registration: {args.seconds} is negative; give seconds >= 0 (0 clears the delay)")
    if args.seconds:
        path.write_text(f"{args.seconds:g}\n")
    else:
        path.unlink(missing_ok=True)
    log(f"stand-ins register a node {args.seconds:g} s after its agent pod runs")


def down(args: argparse.Namespace) -> None:
    site = site_of(args)
    stop_all(site.root)  # by PID, before the API server they talk to goes
    stop_hosts(site)
    delete_cluster(site)
    log("lab removed")


def status(args: argparse.Namespace) -> None:
    site = site_of(args)
    if not cluster_running(site):
        print("cluster: down")
        sys.exit(1)
    print("cluster: up")
    for name, pid in running(site.root).items():
        print(f"process: {name} (pid {pid})")
    run(str(BIN / "kubectl"), "--kubeconfig", str(site.kubeconfig), "get", "nodes", "-L",
        accel_constants.LABELS["pool"], capture=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", help="lab directory (default .lab); a second lab needs its own")
    parser.add_argument("--name", default=CLUSTER, help=f"kwokctl cluster name (default {CLUSTER})")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up")
    p_up.add_argument("--skip-toolchain", action="store_true", help="do not (re)check the toolchain")
    p_up.add_argument("--no-hosts", action="store_true", help="cluster and fake nodes only, no podman hosts")
    p_up.add_argument("--inventory", help="inventory whose GPU hosts become fake nodes (default inventories/lab)")
    p_up.add_argument("--no-upstream", action="store_true",
                      help="no upstream controllers as lab processes (HAMi scheduler and webhook, GPU Operator; "
                      "kalab/upstream.py)")
    p_up.add_argument("--audit-nodes", action="store_true",
                      help="log every request on nodes to the cluster's audit.log (new clusters only)")
    p_up.set_defaults(func=up)
    p_mon = sub.add_parser("monitoring", help="Prometheus, kube-state-metrics and prometheus-adapter on what the "
                           "cluster play deployed, with the DCGM exporter stand-in (kalab/monitoring.py)")
    p_mon.add_argument("--report", help="also render the deployed dashboard with the lab's data to this HTML file")
    p_mon.set_defaults(func=monitoring)
    p_load = sub.add_parser("load", help="set the DCGM exporter stand-in's readings")
    p_load.add_argument("--util", action="append", default=[], metavar="NAMESPACE=PERCENT",
                        help="utilisation of the GPUs the namespace's pods use")
    p_load.add_argument("--xid", action="append", default=[], metavar="NODE/GPU=CODE",
                        help="last XID of a GPU (0 clears)")
    p_load.set_defaults(func=load)
    p_delay = sub.add_parser("delay-registration", help="the stand-ins register a node SECONDS after its agent "
                             "pod runs (0 clears)")
    p_delay.add_argument("seconds", type=float)
    p_delay.set_defaults(func=delay_registration)
    sub.add_parser("down").set_defaults(func=down)
    sub.add_parser("status").set_defaults(func=status)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
