"""Helm only, from the release artifacts: each chart whose README has a "Helm only" section
installs from its packaged .tgz (scripts/release.py, as `make release` builds it) on a node kube-accel did not label,
given only what that section says to provide.

A fresh fake GPU node joins the lab without any kube-accel label. The chart installs into a namespace of its own,
serving a pool no inventory names: its agents first run nowhere (the node is not the pool's yet), then, once the node
carries exactly the labels the README lists (and the RuntimeClass it names exists), they run there and nowhere else.
Where the README says to label the nodes first (vgpu: its schedulers and certgen Jobs run off the pool's nodes), the
test does, and checks that those components stayed off the node.
The test also checks that every label it sets is named in the README section, so the documentation and this test
cannot drift apart. dra-pools has no agents: it installs with its README's example values on a node labelled as the
README says, beside the DRA driver the lab already runs (its values checked against the README), and a claim from
its template is allocated on that node.

Evidence: the lab's real kube-apiserver, DaemonSet controller and kube-scheduler placing the chart's pods (kwok runs
them: no container runtime, so the runtime prerequisites in the README are not exercised here; `make gpu-e2e` does
that on a real node); helm installing the packaged archive; for dra-pools the real kube-scheduler allocating the
claim from ResourceSlices the lab's DRA stand-in publishes (NVIDIA's driver code over a recorded A100).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kalab.processes import stop_all
from kalab.standins import start_dra_standin
from lab_fixture import converge_cluster, wait_for
from test_dra_lab import DRIVER, get, pod_claims, stand_in_devices
from test_dra_lab import pod as dra_pod

pytestmark = [pytest.mark.lab, pytest.mark.cluster_only]

REPO = Path(__file__).resolve().parents[2]
NODE = "lab-helm-only-0"
POOL = "helm-only"
NAMESPACE = "helm-only"
RUNTIME_CLASS = "nvidia"
# What each chart's README "Helm only" section says a node needs, per chart (values from the chart's defaults).
CHARTS = {
    "pgpu": {"labels": {"kube-accel.io/pool": POOL, "nvidia.com/gpu.deploy.client": "true",
                        "nvidia.com/device-plugin.config": "exclusive"},
             "components": {"device-plugin"}},
    "mps": {"labels": {"kube-accel.io/pool": POOL, "nvidia.com/device-plugin.config": "mps-4",
                       "nvidia.com/mps.capable": "true"},
            "components": {"device-plugin", "mps-control-daemon"}},
    # HAMi (the default backend): its scheduler and certgen Jobs run where the pool label is absent (the lab's control
    # plane), its device plugin on the pool's nodes; controlPlaneFrom as the README's example sets it. The lab runs
    # kube-accel's HAMi release already: the README says to exempt the new release's namespace from it first.
    "vgpu": {"labels": {"kube-accel.io/pool": POOL, "nvidia.com/gpu.deploy.device-plugin": "false"},
             "components": {"device-plugin"}, "set": ["controlPlaneFrom[0].ipBlock.cidr=10.0.0.0/24"],
             "namespace_labels": {"hami.io/webhook": "ignore"}, "label_first": True},
}


def kubectl(lab, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    return lab.kubectl_run(*args, stdin=stdin, check=check, timeout=120)


def helm(lab, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(lab.helm), "--kubeconfig", str(lab.kubeconfig), *args], capture_output=True,
                          text=True, check=False, timeout=300)


def helm_only_section(chart: str) -> str:
    text = (REPO / "charts" / chart / "README.md").read_text()
    start = text.index("## Helm only")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else len(text)]


def pods_by_node(lab, release: str) -> dict[str, set[str]]:
    """component -> nodes of the release's pods."""
    pods = json.loads(kubectl(lab, "get", "pods", "-n", NAMESPACE, "-l", f"app.kubernetes.io/instance={release}",
                              "-o", "json").stdout)["items"]
    out: dict[str, set[str]] = {}
    for pod in pods:
        component = pod["metadata"]["labels"].get("app.kubernetes.io/component", "")
        out.setdefault(component, set()).add(pod["spec"].get("nodeName") or "")
    return out


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    out = tmp_path_factory.mktemp("release") / "dist"
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "release.py"), "--out", str(out)], cwd=REPO,
                          capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return out


@pytest.fixture(scope="module")
def bare_node(lab):
    """A fake GPU node as it joins a cluster: kwok runs it, no kube-accel label, and the RuntimeClass the README
    names (created here, as the README says to, when the cluster play has not)."""
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": NODE, "annotations": {"kwok.x-k8s.io/node": "fake"},
                         "labels": {"type": "kwok", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                                    "kubernetes.io/hostname": NODE}},
            "spec": {},
            "status": {"capacity": {"cpu": "64", "memory": "512Gi", "pods": "110"},
                       "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"}}}
    kubectl(lab, "apply", "-f", "-", stdin=json.dumps(node))
    created = kubectl(lab, "get", "runtimeclass", RUNTIME_CLASS, check=False).returncode != 0
    if created:
        kubectl(lab, "apply", "-f", "-", stdin=json.dumps({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                                                          "metadata": {"name": RUNTIME_CLASS},
                                                          "handler": RUNTIME_CLASS}))
    wait_for(f"{NODE} Ready", lambda: any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in json.loads(kubectl(lab, "get", "node", NODE, "-o", "json").stdout)["status"].get("conditions", [])))
    yield NODE
    kubectl(lab, "delete", "node", NODE, check=False)
    kubectl(lab, "delete", "namespace", NAMESPACE, "--wait=false", check=False)
    if created:
        kubectl(lab, "delete", "runtimeclass", RUNTIME_CLASS, check=False)


@pytest.mark.parametrize("chart", sorted(CHARTS))
def test_a_chart_from_its_archive_runs_where_its_readme_says(lab, artifacts, bare_node, chart):
    spec = CHARTS[chart]
    section = helm_only_section(chart)
    for key in spec["labels"]:
        assert f"`{key}" in section, f"charts/{chart}/README.md 'Helm only' does not name {key}"
    version = yaml.safe_load((REPO / "charts" / chart / "Chart.yaml").read_text())["version"]
    archive = artifacts / "charts" / f"{chart}-{version}.tgz"
    release = f"helm-only-{chart}"
    if spec.get("namespace_labels"):
        kubectl(lab, "create", "namespace", NAMESPACE, check=False)
    for key, value in spec.get("namespace_labels", {}).items():
        assert f"`{key}={value}`" in section, f"charts/{chart}/README.md 'Helm only' does not name {key}={value}"
        kubectl(lab, "label", "namespace", NAMESPACE, "--overwrite", f"{key}={value}")
    if spec.get("label_first"):  # the README's order where the chart has cluster-wide components
        kubectl(lab, "label", "node", NODE, "--overwrite", *[f"{k}={v}" for k, v in spec["labels"].items()])
    installed = helm(lab, "install", release, str(archive), "-n", NAMESPACE, "--create-namespace",
                     "--set", f"pools={{{POOL}}}", *[a for v in spec.get("set", []) for a in ("--set", v)],
                     "--wait", "--timeout", "3m")
    assert installed.returncode == 0, installed.stderr[-3000:]
    try:
        # Not the pool's node yet (unless the README labels it first): the agents run nowhere (not on the lab's
        # kube-accel nodes either).
        daemonsets = json.loads(kubectl(lab, "get", "daemonsets", "-n", NAMESPACE, "-l",
                                        f"app.kubernetes.io/instance={release}", "-o", "json").stdout)["items"]
        assert {d["metadata"]["labels"].get("app.kubernetes.io/component") for d in daemonsets} == spec["components"]
        if not spec.get("label_first"):
            assert all(d["status"].get("desiredNumberScheduled", 0) == 0 for d in daemonsets), daemonsets
            kubectl(lab, "label", "node", NODE, "--overwrite", *[f"{k}={v}" for k, v in spec["labels"].items()])
        wait_for(f"{release}'s agents on {NODE} only", lambda: {
            c: nodes for c, nodes in pods_by_node(lab, release).items() if c in spec["components"]
        } == {c: {NODE} for c in spec["components"]}, timeout=120)
        # Its cluster-wide components (schedulers, certgen) stay off the pool's node.
        assert not any(NODE in nodes for c, nodes in pods_by_node(lab, release).items()
                       if c not in spec["components"]), pods_by_node(lab, release)
        listed = {r["name"]: r for r in json.loads(helm(lab, "list", "-n", NAMESPACE, "-o", "json").stdout)}
        assert listed[release]["chart"] == f"{chart}-{version}" and listed[release]["status"] == "deployed", listed
    finally:
        helm(lab, "uninstall", release, "-n", NAMESPACE, "--wait", "--timeout", "2m")
        kubectl(lab, "label", "node", NODE, *[f"{k}-" for k in spec["labels"]], check=False)


def test_the_monitoring_chart_from_its_archive_as_its_readme_says(lab, artifacts):
    """The monitoring chart has no node agents: Helm only, it installs from its archive with the README's command, and
    what NOTES then names is in the cluster as the README describes it (the PrometheusRule carrying the label a
    Prometheus selects rules by, the adapter rules ConfigMap, the dashboard ConfigMap for Grafana's sidecar); the
    kube-state-metrics flag NOTES prints is the one the README gives."""
    section = helm_only_section("monitoring")
    command = section[section.index("```sh"):section.index("```", section.index("```sh") + 5)]
    words = command.split()
    sets = [words[i + 1].strip("'") for i, word in enumerate(words[:-1]) if word == "--set"]
    assert sets == ["alerts.labels.release=kube-prometheus-stack", "hpaAdapter.enabled=true"], command
    version = yaml.safe_load((REPO / "charts" / "monitoring" / "Chart.yaml").read_text())["version"]
    if kubectl(lab, "get", "crd", "prometheusrules.monitoring.coreos.com", check=False).returncode:
        pytest.fail("the lab serves no PrometheusRule CRD: the site run installs it with the monitoring chain")
    release, namespace = "helm-only-monitoring", "helm-only-monitoring"
    installed = helm(lab, "install", release, str(artifacts / "charts" / f"monitoring-{version}.tgz"), "-n", namespace,
                     "--create-namespace", *[a for s in sets for a in ("--set", s)], "--wait", "--timeout", "2m")
    try:
        assert installed.returncode == 0, installed.stderr[-3000:]
        allowlist = next(line.strip() for line in section.splitlines() if "--metric-labels-allowlist" in line)
        assert allowlist.strip("`") in installed.stdout, installed.stdout
        objects = {(o["kind"], o["metadata"]["name"]): o for o in json.loads(kubectl(
            lab, "get", "prometheusrules,configmaps", "-n", namespace, "-l", f"app.kubernetes.io/instance={release}",
            "-o", "json").stdout)["items"]}
        rule = objects[("PrometheusRule", release)]
        assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        assert {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]} >= {"KubeAccelGpuXidError"}
        adapter = objects[("ConfigMap", f"{release}-adapter-rules")]
        assert f"ConfigMap {release}-adapter-rules (namespace {namespace})" in installed.stdout
        assert yaml.safe_load(adapter["data"]["config.yaml"])["rules"], adapter["data"]
        dashboards = [o for (kind, _), o in objects.items() if kind == "ConfigMap"
                      and o["metadata"]["labels"].get("grafana_dashboard") == "1"]
        assert dashboards and all(json.loads(v) for d in dashboards for v in d["data"].values())
    finally:
        helm(lab, "uninstall", release, "-n", namespace, "--wait", "--timeout", "2m")
        kubectl(lab, "delete", "namespace", namespace, "--wait=false", check=False)


DRA_SNAPSHOT = REPO / "tests" / "data" / "nvml" / "a100-80gb.json"  # not the lab dra pool's H100: other GPU UUIDs


def readme_values(section: str) -> dict:
    """The values of the README's `helm install ... -f - <<'EOF'` example."""
    start = section.index("<<'EOF'\n") + len("<<'EOF'\n")
    return yaml.safe_load(section[start:section.index("\nEOF", start)])


def test_the_dra_pools_chart_from_its_archive_as_its_readme_says(lab, artifacts, bare_node, tmp_path):
    """dra-pools has no agents of its own. Its README asks for NVIDIA's DRA driver with the kubelet plugin on
    `kube-accel.io/dra=true` nodes (here the lab's driver release, whose values are checked against the README), the
    node labels, the pool's GPU UUIDs and the claim namespaces. Given those and the README's example values, the
    driver's kubelet plugin runs on the bare node, and a pod with a claim from the release's template gets the node's
    GPU from the real kube-scheduler, with the pool's sharing config. The kubelet plugin's ResourceSlices come from
    the lab's DRA stand-in (the driver's own enumeration and publishing code over a recorded A100), started for this
    node only."""
    section = helm_only_section("dra-pools")
    labels = {"kube-accel.io/pool": POOL, "kube-accel.io/dra": "true"}
    assert "`kube-accel.io/pool=<pool>`" in section and "`kube-accel.io/dra=true`" in section, section
    for setting in ("resources.computeDomains.enabled=false", "gpuResourcesEnabledOverride=true"):
        assert setting in section, f"charts/dra-pools/README.md 'Helm only' does not name {setting}"
    converge_cluster(lab, {"kube-accel-dra-driver"}, namespace="kube-accel")
    driver = json.loads(helm(lab, "get", "values", "kube-accel-dra-driver", "-n", "kube-accel", "-o", "json").stdout)
    assert driver["resources"]["computeDomains"]["enabled"] is False and driver["gpuResourcesEnabledOverride"] is True
    assert driver["kubeletPlugin"]["nodeSelector"] == {"kube-accel.io/dra": "true"}, driver["kubeletPlugin"]
    uuid = json.loads(DRA_SNAPSHOT.read_text())["nvml"]["devices"][0]["uuid"]
    values = readme_values(section)
    (example,) = values["devicePools"]
    assert set(example) == {"pool", "deviceClassName", "deviceType", "gpuUUIDs", "config"}, example
    # The driver's alpha gate for the example's sharing, as the README's first item says.
    gate = {"MPS": "MPSSupport", "TimeSlicing": "TimeSlicingSettings"}.get(example["config"]["sharing"]["strategy"])
    assert gate is None or driver["featureGates"].get(gate) is True, driver["featureGates"]
    cls = f"kube-accel-{POOL}"  # the README's class name pattern; the guard allows claimGuard.classPrefix kube-accel-
    values.update(pools=[POOL], claimTemplates={"namespaces": [NAMESPACE]})
    example.update(pool=POOL, deviceClassName=cls, gpuUUIDs=[uuid])
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
    version = yaml.safe_load((REPO / "charts" / "dra-pools" / "Chart.yaml").read_text())["version"]
    release = "helm-only-dra"
    root = tmp_path / "standin"
    root.mkdir()
    shutil.copy(lab.kubeconfig, root / "kubeconfig")
    kubectl(lab, "label", "node", NODE, "--overwrite", *[f"{k}={v}" for k, v in labels.items()])
    try:
        start_dra_standin(root, {NODE: {"snapshot": str(DRA_SNAPSHOT), "mig_geometry": None}})
        devices = wait_for(f"the driver's kubelet plugin on {NODE} and its ResourceSlices",
                           lambda: stand_in_devices(lab, NODE), timeout=120)
        (((slice_pool, device), published),) = devices.items()
        assert slice_pool == NODE and published["attributes"]["uuid"]["string"] == uuid, devices
        kubectl(lab, "create", "namespace", NAMESPACE, check=False)  # "created beforehand"
        installed = helm(lab, "install", release, str(artifacts / "charts" / f"dra-pools-{version}.tgz"), "-n",
                         NAMESPACE, "-f", str(tmp_path / "values.yaml"), "--wait", "--timeout", "2m")
        assert installed.returncode == 0, installed.stderr[-3000:]
        body = dra_pod("dra-helm-only", NAMESPACE, {}, [{"name": "gpu", "resourceClaimTemplateName": cls}])
        assert kubectl(lab, "create", "-f", "-", stdin=json.dumps(body)).returncode == 0
        placed = wait_for("the pod to be scheduled",
                          lambda: get(lab, "pod", "dra-helm-only", "-n", NAMESPACE)["spec"].get("nodeName"), timeout=60)
        assert placed == NODE
        (claimed,) = pod_claims(lab, NAMESPACE, "dra-helm-only")
        (result,) = claimed["status"]["allocation"]["devices"]["results"]
        assert (result["driver"], result["pool"], result["device"]) == (DRIVER, NODE, device), result
        (config,) = claimed["status"]["allocation"]["devices"]["config"]
        assert config["source"] == "FromClass" and config["opaque"]["parameters"] == example["config"], config
    finally:
        kubectl(lab, "delete", "pod", "dra-helm-only", "-n", NAMESPACE, "--wait=true", check=False)
        helm(lab, "uninstall", release, "-n", NAMESPACE, "--wait", "--timeout", "2m")
        kubectl(lab, "label", "node", NODE, *[f"{k}-" for k in labels], check=False)
        # The plugin pod leaves the node; the stand-in then deletes its slices, as the kubelet would.
        wait_for(f"{NODE}'s ResourceSlices gone", lambda: not stand_in_devices(lab, NODE), timeout=60)
        stop_all(root)
