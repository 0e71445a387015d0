"""Install every chart for real into the lab cluster (kwok fake GPU nodes) with helm v3 and helm v4.

Uses the session fixture ``lab`` from tests/conftest.py (attributes: kubeconfig, helm, helm4, nodes_by_pool).
Each release gets the pools of its mode from the fake nodes' own labels, is installed with
``helm upgrade --install --wait``, every object of its manifest must exist, and every DaemonSet must want
exactly the nodes of its pools (DaemonSet status.desiredNumberScheduled). Release names differ from the
cluster play's (ka-test-*) and live in their own namespace, so a lab that already runs the play is untouched.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from ansible_collections.kube_accel.gpu.plugins.module_utils.common import constants as accel_constants
from chartlib import CHARTS_DIR

pytestmark = [pytest.mark.lab, pytest.mark.cluster_only]

NAMESPACE = "kube-accel-chart-tests"
POOL = accel_constants.LABELS["pool"]
MODE = accel_constants.LABELS["mode"]
BACKEND = accel_constants.LABELS["vgpu_backend"]
MPS_CAPABLE = accel_constants.UPSTREAM_LABELS["mps_capable"]
DEPLOY_PLUGIN = accel_constants.UPSTREAM_LABELS["deploy_device_plugin"]

# release -> (chart, node filter on labels, extra values). The test HAMi release leaves its tenant policy out: the
# cluster play's HAMi release already guards the lab's pods, and two such policies would each refuse the other
# release's scheduler (one HAMi release per cluster; tests/integration/test_tenant_attacks_lab.py proves the play's).
RELEASES = {
    "ka-test-pgpu": ("pgpu", lambda lb: lb.get(MODE) == "pgpu", {}),
    "ka-test-mps": ("mps", lambda lb: lb.get(MODE) == "mps", {}),
    "ka-test-vgpu-hami": ("vgpu", lambda lb: lb.get(MODE) == "vgpu" and lb.get(BACKEND, "hami") == "hami",
                          {"backend": "hami", "hami": {"tenantPolicy": False}}),
    "ka-test-vgpu-gpu-manager": ("vgpu", lambda lb: lb.get(MODE) == "vgpu" and lb.get(BACKEND) == "gpu-manager",
                                 {"backend": "gpu-manager"}),
}


def kubectl(lab, *args: str, check: bool = True) -> str:
    proc = subprocess.run([str(lab.kubectl), "--kubeconfig", str(lab.kubeconfig), *args],
                          capture_output=True, text=True, check=False, timeout=120)
    if check:
        assert proc.returncode == 0, f"kubectl {' '.join(args)}:\n{proc.stderr}"
    return proc.stdout


def nodes(lab) -> dict[str, dict[str, str]]:
    items = json.loads(kubectl(lab, "get", "nodes", "-o", "json"))["items"]
    return {n["metadata"]["name"]: n["metadata"].get("labels", {}) for n in items}


def helm_run(lab, binary: str, *args: str, timeout: int = 420) -> subprocess.CompletedProcess:
    return subprocess.run([binary, *args, "--kubeconfig", str(lab.kubeconfig)],
                          capture_output=True, text=True, check=False, timeout=timeout)


ROLE_DEFAULTS = yaml.safe_load((CHARTS_DIR.parent / "roles" / "pool_charts" / "defaults" / "main.yml").read_text())


@pytest.fixture(scope="module", autouse=True)
def runtime_class(lab):
    """The RuntimeClass the pgpu and mps pods select, as the cluster play creates it (roles/pool_charts) before any
    release: these tests install the charts without the play."""
    manifest = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                "metadata": {"name": ROLE_DEFAULTS["pool_charts_runtime_class"],
                             "labels": {"app.kubernetes.io/part-of": "kube-accel",
                                        "app.kubernetes.io/managed-by": "kube-accel"}},
                "handler": ROLE_DEFAULTS["pool_charts_runtime_handler"]}
    proc = subprocess.run([str(lab.kubectl), "--kubeconfig", str(lab.kubeconfig), "apply", "-f", "-"],
                          input=json.dumps(manifest), capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return manifest["metadata"]["name"]


@pytest.fixture(scope="module", autouse=True)
def exempt_namespace(lab):
    """The test releases' namespace, exempted from the cluster play's HAMi webhook as an administrator does it
    (docs/modes/vgpu.md "HAMi and whole-GPU pools in one cluster"): the pgpu and mps test pods ask for nvidia.com/gpu,
    which that webhook would hand to HAMi's scheduler, and the charts' own pods there carry the hami.io/webhook=ignore
    label that its tenant policy refuses in a namespace the webhook serves."""
    subprocess.run([str(lab.kubectl), "--kubeconfig", str(lab.kubeconfig), "create", "namespace", NAMESPACE],
                   capture_output=True, text=True, check=False, timeout=60)
    proc = subprocess.run([str(lab.kubectl), "--kubeconfig", str(lab.kubeconfig), "label", "namespace", NAMESPACE,
                           "hami.io/webhook=ignore", "--overwrite"], capture_output=True, text=True, check=False,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return NAMESPACE


@pytest.mark.parametrize("which", ["helm", "helm4"])
def test_install_refuses_a_missing_runtime_class(lab, tmp_path: Path, which: str):
    """Without the RuntimeClass every pod would be refused and --wait would only time out: the chart stops first."""
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"pools": ["pgpu"], "runtimeClassName": "no-such-class"}))
    install = helm_run(lab, str(getattr(lab, which)), "upgrade", "--install", "ka-test-no-rc", str(CHARTS_DIR / "pgpu"),
                       "--namespace", NAMESPACE, "--create-namespace", "--values", str(values), "--wait",
                       "--timeout", "1m", timeout=90)
    assert install.returncode != 0
    assert 'runtimeClassName="no-such-class": no such RuntimeClass in the cluster' in install.stderr, install.stderr
    listed = helm_run(lab, str(getattr(lab, which)), "list", "--namespace", NAMESPACE, "-q")
    assert "ka-test-no-rc" not in listed.stdout.split()


@pytest.mark.parametrize("which", ["helm", "helm4"])
@pytest.mark.parametrize("release", list(RELEASES))
def test_install(lab, tmp_path: Path, release: str, which: str):
    chart, wanted, extra = RELEASES[release]
    binary = str(getattr(lab, which))
    labels = nodes(lab)
    selected = {name: lb for name, lb in labels.items() if POOL in lb and wanted(lb)}
    if not selected:
        pytest.skip(f"the lab has no nodes for {release}")
    pools = sorted({lb[POOL] for lb in selected.values()})
    # Cross-check with the fixture: the nodes of these pools are exactly the ones the labels selected.
    assert sorted(n for p in pools for n in lab.nodes_by_pool[p]) == sorted(selected)

    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"pools": pools, **extra}))
    install = helm_run(lab, binary, "upgrade", "--install", release, str(CHARTS_DIR / chart),
                       "--namespace", NAMESPACE, "--create-namespace", "--values", str(values),
                       "--wait", "--timeout", "3m")
    try:
        assert install.returncode == 0, f"{which} install {release}:\n{install.stdout}\n{install.stderr}"
        manifest = helm_run(lab, binary, "get", "manifest", release, "--namespace", NAMESPACE)
        assert manifest.returncode == 0, manifest.stderr
        objs = [o for o in yaml.safe_load_all(manifest.stdout) if o]
        assert objs
        for obj in objs:
            ns = ["--namespace", obj["metadata"].get("namespace", NAMESPACE)]
            kubectl(lab, "get", obj["kind"], obj["metadata"]["name"], *ns, "-o", "name")
        for ds in (o for o in objs if o["kind"] == "DaemonSet"):
            live = json.loads(kubectl(lab, "get", "daemonset", ds["metadata"]["name"], "--namespace", NAMESPACE,
                                      "-o", "json"))
            expected = set(selected)
            if ds["metadata"]["name"].endswith("-mps-control-daemon"):
                expected = {n for n in expected if selected[n].get(MPS_CAPABLE) == "true"}
            if chart == "vgpu":
                expected = {n for n in expected if selected[n].get(DEPLOY_PLUGIN) != "true"}
            assert expected, f"{ds['metadata']['name']}: no lab node qualifies; the check would prove nothing"
            assert live["status"]["desiredNumberScheduled"] == len(expected), (
                f"{ds['metadata']['name']} wants {live['status']['desiredNumberScheduled']} nodes, "
                f"pools {pools} have {sorted(expected)}"
            )
            assert live["status"].get("numberReady", 0) == len(expected)
        if chart in ("pgpu", "mps"):
            # The test Job requests the mode's resource from the fake nodes' capacity and completes on kwok.
            # (vgpu test pods: HAMi's scheduler runs as a lab process for the cluster play's release, proven in
            # tests/integration/test_hami_lab.py; GPU-Manager's scheduler does not run in the lab.)
            test = helm_run(lab, binary, "test", release, "--namespace", NAMESPACE, "--timeout", "3m")
            assert test.returncode == 0, f"{which} test {release}:\n{test.stdout}\n{test.stderr}"
    finally:
        helm_run(lab, binary, "uninstall", release, "--namespace", NAMESPACE, "--wait")
