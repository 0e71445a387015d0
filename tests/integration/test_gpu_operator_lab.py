"""The GPU Operator's real controller in the lab.

`lab.py up` runs gpu-operator v26.7.0's controller (cmd/gpu-operator, built by scripts/upstream.sh from the pinned
archive) on 127.0.0.1 against the lab's API server, with the chart's CRDs applied and the chart's own args and env
(scripts/kalab/upstream.py start_gpu_operator). The site run installs the GPU Operator chart with kube-accel's values
(roles/gpu_operator: from the archive's chart, NVIDIA's repository being unreachable here), so the ClusterPolicy
that controller reconciles is exactly the one kube-accel builds. Evidence comes from that controller: the node labels
it writes (the API server's managedFields name it as their writer), the DaemonSets it creates and owns, its log.
The stand-ins: kwok nodes and pods (no kubelet: an operand "runs" once kwok marks its pod Ready) and the recorded
GPU products the lab's nodes carry in place of GPU feature discovery.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm import operator_values as opv
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import pools as accel_pools
from lab_fixture import wait_for

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")
RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)
NAMESPACE = "gpu-operator"
DEPLOY = "nvidia.com/gpu.deploy."
PLAIN_NODE = "lab-gpu-operator-plain-0"  # no GPU: the operator must not touch it
JOINING_NODE = "lab-gpu-operator-join-0"  # a GPU node that joins later: makes the operator reconcile every node
# Operands kube-accel runs itself (device plugins) or the host roles install (driver, toolkit): the operator's
# DaemonSets for them must not exist (assets/state-*/ names of gpu-operator v26.7.0).
KUBE_ACCELS = ("nvidia-driver-daemonset", "nvidia-container-toolkit-daemonset", "nvidia-device-plugin-daemonset",
               "nvidia-device-plugin-mps-control-daemon", "gpu-feature-discovery")


wait = functools.partial(wait_for, timeout=120, every=1)


def site(lab):
    """site.yml's preflight and cluster plays (the hosts and verify plays have nothing to do with the operator)."""
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "PATH": f"{lab.helm.parent}:{Path(sys.executable).parent}:{os.environ['PATH']}"}
    proc = subprocess.run([PLAYBOOK, "-i", str(REPO / "inventories" / "lab" / "hosts.yml"),
                           str(REPO / "ansible" / "site.yml"), "--tags", "preflight,cluster",
                           "-e", f"accel_kubeconfig={lab.kubeconfig}"],
                          cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=900)
    recap = {m[0]: int(m[2]) for m in RECAP.findall(proc.stdout)}
    return proc, recap


def get(lab, *args) -> dict:
    return json.loads(lab.kubectl_run("get", *args, "-o", "json").stdout)


def nodes(lab) -> dict[str, dict]:
    return {n["metadata"]["name"]: n for n in get(lab, "nodes", "--show-managed-fields")["items"]}


def labels(lab) -> dict[str, dict[str, str]]:
    return {name: n["metadata"].get("labels", {}) for name, n in nodes(lab).items()}


def fake_node(lab, name: str, node_labels: dict[str, str]) -> None:
    body = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                         "labels": {"type": "kwok", "kubernetes.io/hostname": name, **node_labels}}}
    proc = subprocess.run([str(lab.kubectl), "--kubeconfig", str(lab.kubeconfig), "apply", "-f", "-"],
                          input=json.dumps(body), capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def intended() -> dict[str, dict]:
    """Node -> what kube-accel means the operator to run there, from the lab inventory's pools: the MIG manager on
    the pools whose MIG layout the operator owns, the DCGM exporter on every pool but VM passthrough."""
    from ansible_collections.kube_accel.gpu.plugins.module_utils.verify import pool_checks as accel_verify  # noqa: PLC0415
    from kalab.site import gpu_hosts, inventory

    out = {}
    for pool in accel_pools.collect_pools(gpu_hosts(inventory())):
        settings = pool["settings"]
        operands = accel_verify.operator_operands(settings)  # what the verify play checks too
        for host in pool["hosts"]:
            out[host] = {"settings": settings, "mig_manager": operands[accel_verify.OPERATOR_MIG_MANAGER],
                         "dcgm_exporter": operands[accel_verify.OPERATOR_DCGM_EXPORTER]}
    return out


def operator_wrote(node: dict, key: str) -> bool:
    """The API server's managedFields name gpu-operator as a writer of this label (controller-runtime's client
    writes as the binary's name)."""
    field = f"f:{key}"
    return any(m.get("manager") == "gpu-operator" and field in m.get("fieldsV1", {}).get("f:metadata", {}).get(
        "f:labels", {}) for m in node["metadata"].get("managedFields", []))


@pytest.fixture(scope="module")
def operator(lab):
    root = lab.kubeconfig.parent
    info_path = root / "gpu-operator" / "info.json"
    if not info_path.exists():
        pytest.fail(f"{info_path} missing: `scripts/lab.py up` runs the GPU Operator's controller when the lab "
                    "inventory enables the operator (accel_gpu_operator_enabled)")
    info = json.loads(info_path.read_text())
    from kalab.processes import running

    assert "gpu-operator" in running(root), f"the lab's gpu-operator process is not running: {info}"
    fake_node(lab, PLAIN_NODE, {})
    first, recap = site(lab)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-2000:]
    info["first_run"] = first.stdout
    # kube-accel's own DaemonSets as its run left them, before the operator reconciled anything.
    info["plugins_before"] = {d["metadata"]["name"]: d["metadata"]["generation"]
                              for d in get(lab, "daemonsets", "-n", "kube-accel")["items"]}

    def ready():
        (cp,) = get(lab, "clusterpolicies")["items"]
        return cp if cp.get("status", {}).get("state") == "ready" else None

    info["cluster_policy"] = wait("the controller to reconcile the ClusterPolicy to ready", ready, timeout=180)
    info["log_path"] = Path(info["log"])
    yield info
    lab.kubectl_run("delete", "node", PLAIN_NODE, JOINING_NODE, "--wait=false", "--ignore-not-found", check=False)


def test_the_site_run_installs_the_operator_from_the_archives_chart(lab, operator):
    """NVIDIA's repository does not answer here: the role installs the chart of the pinned source archive
    (accel_gpu_operator_chart_fallback) instead of skipping, and the ClusterPolicy is the one built from the pools."""
    said = " ".join(operator["first_run"].split())  # the YAML callback folds long messages
    assert "installing the local chart" in said and "GPU Operator skipped" not in said
    assert [(name, r["status"]) for name, r in lab.releases(NAMESPACE).items()] == [("gpu-operator", "deployed")]
    spec = operator["cluster_policy"]["spec"]
    assert spec["migManager"]["config"]["name"] == opv.MIG_PARTED_CONFIGMAP
    # The controller that reconciled it is the lab's process: its log names the ClusterPolicy's states.
    log = operator["log_path"].read_text()
    assert '"ClusterPolicy step completed","state:":"state-mig-manager","status":"ready"' in log, log[-3000:]


def test_the_operator_namespace_is_exempt_from_hamis_webhook(lab, operator):
    """The lab has a HAMi pool: HAMi's webhook would give its scheduler to the operator's validator pods (they ask for
    nvidia.com/gpu), so the role labels the operator's namespace out of it, as an administrator would."""
    labels = get(lab, "namespace", NAMESPACE)["metadata"]["labels"]
    assert labels.get("hami.io/webhook") == "ignore", labels


def test_the_controller_listens_on_loopback_only(operator):
    """Nothing the lab starts listens beyond 127.0.0.1 (after leader election, with every controller on)."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    mine = [line.split()[3] for line in out.splitlines() if f"pid={operator['pid']}," in line]
    assert sorted(mine) == sorted(f"127.0.0.1:{operator[p]}" for p in ("metrics_port", "probe_port")), out


def test_the_operator_labels_exactly_the_nodes_kube_accel_intends(lab, operator):
    """gpu.deploy.* labels only on kube-accel's GPU nodes; on each, the device plugin off, the DCGM exporter on, the
    MIG manager exactly where the operator owns the MIG layout (written by the operator itself: managedFields)."""
    want = intended()
    current = nodes(lab)
    labelled = {name for name, n in current.items()
                if any(k.startswith(DEPLOY) for k in n["metadata"].get("labels", {}))}
    assert labelled == set(want), "nodes the operator gave gpu.deploy.* labels"
    assert "nvidia.com/gpu.present" not in current[PLAIN_NODE]["metadata"].get("labels", {})
    for name, meant in want.items():
        node = current[name]
        got = node["metadata"]["labels"]
        assert got["nvidia.com/gpu.present"] == "true", name
        assert got[DEPLOY + "device-plugin"] == "false", name
        assert (got.get(DEPLOY + "dcgm-exporter") == "true") is meant["dcgm_exporter"], name
        assert (got.get(DEPLOY + "mig-manager") == "true") is meant["mig_manager"], name
        if meant["mig_manager"]:
            assert got["nvidia.com/mig.config"] == accel_pools.mig_config_name(meant["settings"]), name
        else:
            # The operator sets all-disabled on a node it takes for MIG capable: kube-accel would remove it again.
            assert "nvidia.com/mig.config" not in got, name
        assert operator_wrote(node, DEPLOY + "dcgm-exporter"), f"{name}: gpu-operator did not write the label"
    assert any(m["mig_manager"] for m in want.values()), "the lab inventory has an operator-owned MIG pool"


def daemonset_nodes(lab, name: str) -> set[str]:
    pods = get(lab, "pods", "-n", NAMESPACE, "-l", f"app={name}")["items"]
    return {p["spec"].get("nodeName") for p in pods}


def test_mig_manager_and_dcgm_exporter_run_only_on_their_pools(lab, operator):
    want = intended()

    def placed():
        sets = {ds["metadata"]["name"]: ds for ds in get(lab, "daemonsets", "-n", NAMESPACE)["items"]}
        done = all(d["status"].get("desiredNumberScheduled") == d["status"].get("numberReady") for d in sets.values())
        return sets if done and {"nvidia-mig-manager", "nvidia-dcgm-exporter"} <= set(sets) else None

    sets = wait("the operator's DaemonSets to be placed", placed)
    for name in ("nvidia-mig-manager", "nvidia-dcgm-exporter"):
        owners = sets[name]["metadata"].get("ownerReferences", [])
        assert [(o["kind"], o["name"]) for o in owners] == [("ClusterPolicy", "cluster-policy")], name
    assert daemonset_nodes(lab, "nvidia-mig-manager") == {n for n, m in want.items() if m["mig_manager"]}
    assert daemonset_nodes(lab, "nvidia-dcgm-exporter") == {n for n, m in want.items() if m["dcgm_exporter"]}


def test_device_plugins_driver_and_toolkit_stay_kube_accels(lab, operator):
    all_sets = get(lab, "daemonsets", "-A")["items"]
    assert not [d["metadata"]["name"] for d in all_sets if d["metadata"]["name"] in KUBE_ACCELS]
    log = operator["log_path"].read_text()
    for state in ("state-driver", "state-container-toolkit", "state-device-plugin", "state-mps-control-daemon",
                  "gpu-feature-discovery"):
        assert f'"ClusterPolicy step completed","state:":"{state}","status":"disabled"' in log, state
    # kube-accel's device-plugin DaemonSets: not the operator's, and not changed by it.
    after = {d["metadata"]["name"]: d for d in get(lab, "daemonsets", "-n", "kube-accel")["items"]}
    assert after and {n: d["metadata"]["generation"] for n, d in after.items()} == operator["plugins_before"]
    assert not [n for n, d in after.items() if d["metadata"].get("ownerReferences")]
    # One RuntimeClass both create: name and handler agree (the operator owns it once it reconciled).
    rc = get(lab, "runtimeclass", "nvidia")
    assert rc["handler"] == "nvidia"


def test_no_fight_labels_hold_while_the_operator_reconciles_and_a_second_run_changes_nothing(lab, operator):
    """A GPU node joining makes the operator reconcile every node (nodelabeling_controller.go labelGPUNodes lists
    them all) and the ClusterPolicy; during a minute of that, kube-accel's nodes keep every label, polled every 2 s.
    Then a second site run changes nothing, and the labels are still the same."""
    want = intended()
    before = {n: v for n, v in labels(lab).items() if n in want}
    log_before = len(operator["log_path"].read_text().splitlines())
    # As NFD would label it (the operator reads its OS from the first GPU node it lists: this name sorts first).
    fake_node(lab, JOINING_NODE, {"feature.node.kubernetes.io/pci-10de.present": "true",
                                  "feature.node.kubernetes.io/system-os_release.ID": "debian",
                                  "feature.node.kubernetes.io/system-os_release.VERSION_ID": "12",
                                  "nvidia.com/mig.capable": "false"})
    wait("the operator to label the joining GPU node",
         lambda: labels(lab)[JOINING_NODE].get("nvidia.com/gpu.present") == "true", timeout=60)
    deadline = time.time() + 60
    polls = 0
    while time.time() < deadline:
        now = {n: v for n, v in labels(lab).items() if n in want}
        changed = {n: {k: (before[n].get(k), now[n].get(k)) for k in set(before[n]) | set(now[n])
                       if before[n].get(k) != now[n].get(k)} for n in want if now[n] != before[n]}
        assert not changed, f"labels changed while the operator ran: {changed}"
        polls += 1
        time.sleep(2)
    assert polls >= 20
    new = operator["log_path"].read_text().splitlines()[log_before:]
    # It did reconcile (the joining node), and touched no node of kube-accel's.
    assert any("Setting node label" in line and JOINING_NODE in line for line in new)
    assert not [line for line in new if re.search(r'"(Setting|Deleting) node label"', line)
                and any(f'"NodeName":"{n}"' in line for n in want)]
    lab.kubectl_run("delete", "node", JOINING_NODE, "--wait=false")

    revisions = {name: r["revision"] for name, r in lab.releases().items()}
    second, recap = site(lab)
    assert second.returncode == 0, second.stdout[-4000:]
    assert recap and set(recap.values()) == {0}, f"changes on the second run: {recap}\n{second.stdout[-4000:]}"
    assert {name: r["revision"] for name, r in lab.releases().items()} == revisions
    assert {n: v for n, v in labels(lab).items() if n in want} == before


def test_service_monitor_crd_and_object_when_the_inventory_asks_for_one(lab, tmp_path):
    """With accel_gpu_operator_service_monitor, the lab applies Prometheus Operator's ServiceMonitor CRD (fetched by
    scripts/upstream.sh at the version the operator compiles against) and the controller creates the DCGM exporter's
    ServiceMonitor with accel_gpu_operator_service_monitor_labels. A lab of its own (no hosts): the test sets NFD's OS
    labels as NFD would, the preflight that reads them needing hosts."""
    import shutil

    import yaml

    inventory = tmp_path / "inventory"
    shutil.copytree(REPO / "inventories" / "lab", inventory)
    all_vars = inventory / "group_vars" / "all.yml"
    settings = yaml.safe_load(all_vars.read_text())
    settings.update(accel_gpu_operator_service_monitor=True,
                    accel_gpu_operator_service_monitor_labels={"release": "kube-prometheus-stack"})
    all_vars.write_text(yaml.safe_dump(settings))
    root, name = tmp_path / "lab", "kube-accel-gpuop-sm"
    lab_py = [sys.executable, str(REPO / "scripts" / "lab.py"), "--dir", str(root), "--name", name]
    up = subprocess.run([*lab_py, "up", "--no-hosts", "--skip-toolchain", "--inventory", str(inventory / "hosts.yml")],
                        capture_output=True, text=True, check=False, timeout=300)
    try:
        assert up.returncode == 0, up.stderr[-3000:]
        info = json.loads((root / "gpu-operator" / "info.json").read_text())
        assert info["service_monitor_crd"] and "servicemonitors.monitoring.coreos.com" in info["crds"]
        kubectl = [str(lab.kubectl), "--kubeconfig", str(root / "kubeconfig")]
        subprocess.run([*kubectl, "label", "nodes", "--all", "--overwrite",
                        "feature.node.kubernetes.io/system-os_release.ID=debian",
                        "feature.node.kubernetes.io/system-os_release.VERSION_ID=12"], check=True, capture_output=True)
        env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
               "PATH": f"{lab.helm.parent}:{Path(sys.executable).parent}:{os.environ['PATH']}"}
        play = subprocess.run([PLAYBOOK, "-i", str(inventory / "hosts.yml"), str(REPO / "ansible" / "cluster.yml"),
                               "-e", f"accel_kubeconfig={root / 'kubeconfig'}"], cwd=REPO, env=env,
                              capture_output=True, text=True, check=False, timeout=600)
        assert play.returncode == 0, play.stdout[-4000:]

        def monitor():
            proc = subprocess.run([*kubectl, "get", "servicemonitors", "-n", NAMESPACE, "-o", "json"],
                                  capture_output=True, text=True, check=False)
            items = json.loads(proc.stdout)["items"] if proc.returncode == 0 else []
            return next((m for m in items if m["metadata"]["name"] == "nvidia-dcgm-exporter"), None)

        found = wait("the controller to create the DCGM exporter's ServiceMonitor", monitor, timeout=180)
        assert found["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        assert [(o["kind"], o["name"]) for o in found["metadata"]["ownerReferences"]] == [
            ("ClusterPolicy", "cluster-policy")]
    finally:
        subprocess.run([*lab_py, "down"], capture_output=True, text=True, check=False, timeout=300)
