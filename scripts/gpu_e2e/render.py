#!/usr/bin/env python3
"""Render what kube-accel's cluster play would install for each pool of ``pools.yml`` on one node: the release
values (helm.pool_charts.pool_releases, the code behind the play's accel_pool_releases filter) through the repo's
own charts with helm, the node's labels and taints (plan.pools.desired_nodes, behind accel_desired_nodes), the
RuntimeClass roles/pool_charts creates, and what the node must then advertise (plan.pools.advertised_resources,
behind the verify module's expectations), and the inventory ``site.yml`` runs with on the GPU host itself.
scripts/gpu-e2e.sh runs site.yml with that inventory where the bundle's Ansible fits the host's Python, and applies
the rendered manifests itself where it does not (or where site.yml failed: the pools are still checked).

Usage: render.py OUTDIR NODE_NAME [HELM]
Writes OUTDIR/<pool>/{manifests.yaml,node.json,expect.json,inventory.yml} and OUTDIR/pools.txt.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "src"))  # noqa: E402 (the collection's import path in a checkout, as tests use it)

from ansible_collections.kube_accel.gpu.plugins.module_utils.common import constants as accel_constants  # noqa: E402
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm import pool_charts as accel_chart_values  # noqa: E402
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import pools as accel_pools  # noqa: E402
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import values as accel_values  # noqa: E402
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.cluster_settings import cluster_settings  # noqa: E402
from footprint import E2E_ROOT  # noqa: E402 (gpu-e2e.sh's E: the bundle unpacks there)


def checked(name: str, value) -> None:
    problems = accel_values.value_problems(name, value)
    if problems:
        raise SystemExit(f"pools.yml: {name}={value!r}: " + "; ".join(p for _, p in problems))




def inventory(node: str, settings: dict, cluster: dict) -> dict:
    """One control-plane host (this machine, local connection) and the node in its pool. The driver branch and, on a
    machine without a GPU, the NVML stand-in come as extra variables: they are the host's, known only there."""
    local = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}
    return {"all": {
        "vars": {
            **cluster,
            "accel_kubeconfig": f"{E2E_ROOT}/admin.kubeconfig",
            # The verify Jobs run the bundle's CUDA probe (no registry is reachable): exit 0 only after a kernel ran.
            "pool_verify_job_image": f"{cluster['accel_image_registry']}/cuda-probe:1",
            "pool_verify_job_command": ["cuda-probe"],
            # One node: what it advertises settles in seconds; the e2e's deadline is minutes for three pools.
            "pool_verify_settle_timeout": 90,
            "pool_verify_job_timeout": 90,
        },
        "children": {
            "kube_control_plane": {"hosts": {"e2e-control-plane": local}},
            # A pool is a group under gpu_pools (docs/inventory.md): pool_<name>, holding the node.
            "gpu_pools": {"children": {f"pool_{settings['accel_pool']}": {"hosts": {node: {**local, **settings}}}}},
        },
    }}


def render_pool(out: Path, node: str, pool: str, settings: dict, cluster: dict, helm: str) -> None:
    for name, value in settings.items():
        checked(name, value)
    pools = accel_pools.collect_pools({node: settings})
    releases = accel_chart_values.pool_releases(pools, cluster_settings(cluster))
    docs = [{
        "apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
        "metadata": {"name": accel_constants.RUNTIME_CLASS}, "handler": accel_constants.RUNTIME_CLASS,
    }]
    for release in releases:
        rendered = subprocess.run(
            [helm, "template", release["name"], str(REPO / "charts" / release["chart"]),
             "--namespace", cluster["accel_namespace"], "--values", "-"],
            input=yaml.safe_dump(release["values"]), capture_output=True, text=True, check=True).stdout
        # Hooks (the chart's `helm test` Job) are helm's to run, not part of the release.
        docs += [d for d in yaml.safe_load_all(rendered)
                 if d and "helm.sh/hook" not in (d.get("metadata", {}).get("annotations") or {})]
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": cluster["accel_namespace"]}}
    target = out / pool
    target.mkdir(parents=True, exist_ok=True)
    (target / "manifests.yaml").write_text(yaml.safe_dump_all([ns, *docs], sort_keys=False))
    (target / "inventory.yml").write_text("---\n" + yaml.safe_dump(inventory(node, settings, cluster), sort_keys=False))
    (target / "node.json").write_text(json.dumps(accel_pools.desired_nodes(pools)[node], indent=1) + "\n")
    full = accel_pools.pool_settings(settings)
    per_gpu = accel_pools.advertised_resources(full, 1, 0)
    (target / "expect.json").write_text(json.dumps({
        "pool": pool,
        "mode": full["accel_mode"],
        "releases": [r["name"] for r in releases],
        # resource -> count per physical GPU (the node multiplies by its GPU count)
        "per_gpu": per_gpu,
        "request": accel_pools.request_for(full),
        "replicas": {"timeslice": full.get("accel_timeslice_replicas"),
                     "mps": full.get("accel_mps_replicas")}.get(full["accel_mode"]),
    }, indent=1) + "\n")


def main() -> None:
    out, node = Path(sys.argv[1]), sys.argv[2]
    helm = sys.argv[3] if len(sys.argv) > 3 else "helm"
    plan = yaml.safe_load((Path(__file__).parent / "pools.yml").read_text())
    for name, value in plan["cluster"].items():
        checked(name, value)
    for pool, settings in plan["pools"].items():
        render_pool(out, node, pool, {**plan["common"], **settings}, plan["cluster"], helm)
    (out / "pools.txt").write_text("\n".join(plan["pools"]) + "\n")


if __name__ == "__main__":
    main()
