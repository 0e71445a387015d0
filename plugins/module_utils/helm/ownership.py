# Copyright: kube-accel contributors
# Apache License 2.0
"""What kube-accel owns in a cluster, so that the cluster play removes what no pool or setting needs any more.

A Helm release is kube-accel's when the ownership record names it (the ConfigMap ``OWNERSHIP_CONFIGMAP`` in the
charts' namespace, written by the cluster play after every run: ``record_data``), or when it carries a pool release's
name in the charts' namespace (those names are kube-accel's by construction, ``pool_release_names``: so releases
installed before the record existed are found too). A release of the same name that kube-accel never recorded and
that is no pool release (a site's own GPU Operator) is never touched.

Releases are ``"namespace/name"`` strings.
"""

from __future__ import annotations

import json

from ansible_collections.kube_accel.gpu.plugins.module_utils.helm.pool_charts import (
    RELEASE_PREFIX,
    dra_driver_release,
    release_key,
)
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.inventory import VARIABLES

# Every key release_key gives a pool (one release per mode, per vGPU backend), from the inventory model's choices, so
# a new mode or backend is owned without a second list to keep in step.
POOL_RELEASE_KEYS = tuple(sorted({release_key({"accel_mode": mode, "accel_vgpu_backend": backend})
                                  for mode in VARIABLES["accel_mode"]["choices"]
                                  for backend in VARIABLES["accel_vgpu_backend"]["choices"]}))
RECORD_KEY = "releases"


def pool_release_names(namespace: str, prefix: str = RELEASE_PREFIX) -> list[str]:
    """Every release a pool can have, in the charts' namespace: one per release key, and NVIDIA's DRA driver, which
    the dra pools bring along (roles/dra_driver)."""
    return sorted([f"{namespace}/{prefix}-{key}" for key in POOL_RELEASE_KEYS]
                  + [f"{namespace}/{dra_driver_release(prefix)}"])


def desired(pools: list[dict], namespace: str, others: list[str] | None = None, prefix: str = RELEASE_PREFIX
            ) -> list[str]:
    """The releases a run keeps: one per mode (and vGPU backend) the pools use, in the charts' namespace (with dra
    pools also NVIDIA's DRA driver there), and ``others`` (monitoring, the GPU Operator, as ``namespace/name``) where
    they are on."""
    keys = {release_key(pool["settings"]) for pool in pools}
    names = {f"{prefix}-{key}" for key in keys} | ({dra_driver_release(prefix)} if "dra" in keys else set())
    return sorted({f"{namespace}/{name}" for name in names} | {o for o in others or [] if o})


def recorded(configmap_data: dict | None) -> list[str]:
    """The releases an ownership record names; [] for none or a record this version cannot read."""
    try:
        releases = json.loads((configmap_data or {}).get(RECORD_KEY) or "[]")
    except ValueError:
        return []
    return sorted({r for r in releases if isinstance(r, str) and r.count("/") == 1})


def record_data(desired: list[str]) -> dict[str, str]:
    """The ownership record's data for the releases this run wants."""
    return {RECORD_KEY: json.dumps(sorted(set(desired)))}


def stale(desired: list[str], configmap_data: dict | None, namespace: str, prefix: str = RELEASE_PREFIX) -> list[str]:
    """Releases kube-accel owns that this run no longer wants, to uninstall (absent ones cost one helm list)."""
    owned = set(recorded(configmap_data)) | set(pool_release_names(namespace, prefix))
    return sorted(owned - set(desired))
