# Copyright: kube-accel contributors
# Apache License 2.0
"""The cluster's settings: the cluster-wide inventory variables every release reads (``cluster_settings``), and the
pools those settings cannot serve (``cluster_problems``), which the plan refuses before any chart is rendered."""

from __future__ import annotations

import copy
from typing import Any

from ansible_collections.kube_accel.gpu.plugins.module_utils.common.constants import RUNTIME_CLASS
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.pools import release_key

# The cluster-wide inventory settings the chart values read: key of ``cluster`` -> (inventory variable, its default).
# The cluster play (pool_charts, through the accel_cluster_settings filter), the lab and the chart tests all build
# ``cluster`` with ``cluster_settings``, so what is rendered in a test is what the play passes.
CLUSTER_SETTINGS: dict[str, tuple[str, Any]] = {
    "image_registry": ("accel_image_registry", ""),
    "image_pull_secrets": ("accel_image_pull_secrets", []),
    # "repository:tag" -> "sha256:...": the charts pull those images by digest (global.imageDigests).
    "image_digests": ("accel_image_digests", {}),
    # The only pod-network sources of HAMi's webhook/extender port and gpu-admission's extender port.
    "control_plane_cidrs": ("accel_control_plane_cidrs", []),
    # Who may scrape the vGPU agents' metrics ports (gpu-manager's also serves /debug/pprof/); none by default.
    "metrics_cidrs": ("accel_metrics_cidrs", []),
    "metrics_namespaces": ("accel_metrics_namespaces", []),
    # Pods holding cluster-wide tokens (schedulers, extenders, gpu-admission, certgen) on pool nodes too: only for
    # clusters whose every node is in a pool (charts/vgpu clusterComponents.avoidPoolNodes).
    "cluster_components_on_pool_nodes": ("accel_cluster_components_on_pool_nodes", False),
    # Namespaces that get each dra pool's ResourceClaimTemplate (a pod names a template of its own namespace only);
    # empty: the charts' namespace alone.
    "dra_claim_namespaces": ("accel_dra_claim_namespaces", []),
    # rollingUpdate.maxUnavailable of the node agent DaemonSets (pgpu, mps, vgpu charts).
    "rollout_max_unavailable": ("accel_rollout_max_unavailable", None),
}


def cluster_settings(variables: dict[str, Any], runtime_class: str = RUNTIME_CLASS) -> dict[str, Any]:
    """``cluster`` for ``pool_releases`` from inventory variables (a host's vars, or group_vars/all); a variable
    that is unset, None or "" takes its default."""
    out: dict[str, Any] = {}
    for key, (name, default) in CLUSTER_SETTINGS.items():
        value = variables.get(name)
        out[key] = copy.deepcopy(default) if value is None or value == "" else value
    out["runtime_class"] = runtime_class or RUNTIME_CLASS
    return out


# Kubernetes from which the vgpu chart renders its ValidatingAdmissionPolicies (tenant policy, node-agent policies):
# admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy is GA in 1.30.
MIN_KUBERNETES_HAMI_POLICIES = (1, 30)


def cluster_problems(pools: list[dict[str, Any]], cluster: dict[str, Any],
                     kubernetes_version: tuple[int, int] | None = None,
                     non_pool_nodes: bool | None = None) -> list[str]:
    """Why these pools cannot be installed with these cluster settings (one sentence each; [] = fine).

    A HAMi pool without control-plane CIDRs would get a NetworkPolicy that shuts the API server out of the webhook:
    admission would stop silently (failurePolicy Ignore: pods skip HAMi) or refuse every GPU pod. Refused instead.
    """
    hami = sorted(p["pool"] for p in pools if release_key(p["settings"]) == "vgpu-hami")
    vgpu = sorted(p["pool"] for p in pools if release_key(p["settings"]).startswith("vgpu-"))
    problems = []
    if hami and not cluster.get("control_plane_cidrs"):
        problems.append(
            f"accel_control_plane_cidrs = []: pool(s) {', '.join(hami)} use vGPU backend hami, whose webhook and "
            "extender port admit only these addresses where NetworkPolicies are enforced; empty shuts the API "
            "server out, and pods would skip HAMi's admission or be refused; allowed: the API servers' addresses "
            "(CIDRs, e.g. [10.0.0.11/32]), or [0.0.0.0/0, ::/0] to admit any source")
    if hami and kubernetes_version is not None and kubernetes_version < MIN_KUBERNETES_HAMI_POLICIES:
        minimum = ".".join(map(str, MIN_KUBERNETES_HAMI_POLICIES))
        problems.append(
            f"accel_kubernetes_version = '{kubernetes_version[0]}.{kubernetes_version[1]}': pool(s) {', '.join(hami)} "
            f"use vGPU backend hami, whose limits a pod author could switch off and whose node agents could write "
            f"any node or pod without the vgpu chart's ValidatingAdmissionPolicies, which need Kubernetes {minimum}; "
            f"allowed: HAMi pools on Kubernetes {minimum} or newer")
    if vgpu and non_pool_nodes is False and not cluster.get("cluster_components_on_pool_nodes"):
        problems.append(
            f"accel_cluster_components_on_pool_nodes = false: pool(s) {', '.join(vgpu)} run schedulers and "
            "admission components holding cluster-wide tokens, which kube-accel keeps off pool nodes, and every "
            "kube_control_plane host is a pool's: they would stay Pending and the install time out; allowed: a node "
            "outside every pool, or accel_cluster_components_on_pool_nodes: true")
    return problems
