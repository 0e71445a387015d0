"""Key facts of the vgpu chart, per backend."""

from __future__ import annotations

import pytest
import yaml
from ansible_collections.kube_accel.gpu.plugins.module_utils.common import constants as accel_constants
from chartlib import (
    VALUES_DIR,
    by_kind,
    container,
    env,
    host_paths,
    mounts,
    one,
    pod_spec,
    pool_terms,
    render,
    rules,
    selected_pools,
)

POOL = accel_constants.LABELS["pool"]
DEPLOY = accel_constants.UPSTREAM_LABELS["deploy_device_plugin"]
V = VALUES_DIR / "vgpu"


def scheduler_config(objs, key="config.yaml"):
    return yaml.safe_load(one(objs, "ConfigMap", "-scheduler-config")["data"][key])


def operator_guard(spec):
    (exprs,) = pool_terms(spec)
    return [e for e in exprs if e["key"] == DEPLOY]


@pytest.mark.parametrize(("kube", "tag"), [("1.25.0", "v1.25.0"), ("1.36.0", "v1.36.0")])
def test_hami_kube_scheduler_tag_follows_cluster(helm, kube, tag):
    objs = render("vgpu", [V / "hami.yaml"], kube, helm=helm)
    dep = one(objs, "Deployment", "kube-accel-vgpu-hami-scheduler")
    assert container(dep, "kube-scheduler")["image"] == f"registry.k8s.io/kube-scheduler:{tag}"


def test_hami_release(helm):
    objs = render("vgpu", [V / "hami.yaml"], helm=helm)
    assert {o["metadata"]["name"] for o in objs if o["kind"] in ("DaemonSet", "Deployment")} == {
        "kube-accel-vgpu-hami-device-plugin",
        "kube-accel-vgpu-hami-scheduler",
    }
    ds = one(objs, "DaemonSet", "kube-accel-vgpu-hami-device-plugin")
    spec = pod_spec(ds)
    assert selected_pools(spec, POOL) == {"vgpu-hami"}
    assert operator_guard(spec) == [{"key": DEPLOY, "operator": "NotIn", "values": ["true"]}]
    assert spec["hostPID"] is True
    plugin = container(ds, "device-plugin")
    assert plugin["command"][:2] == ["nvidia-device-plugin", "--config-file=/device-config.yaml"]
    assert "--disable-core-limit=false" in plugin["command"]
    assert mounts(plugin)["/usr/local/vgpu"] == "lib"
    assert host_paths(spec)["lib"] == "/usr/local/vgpu"
    assert host_paths(spec)["device-plugin"] == "/var/lib/kubelet/device-plugins"
    assert container(ds, "vgpu-monitor")["ports"][0]["containerPort"] == 9394

    device = yaml.safe_load(one(objs, "ConfigMap", "-device-config")["data"]["device-config.yaml"])["nvidia"]
    assert device["deviceSplitCount"] == 10
    assert device["deviceMemoryScaling"] == 1 and device["deviceCoreScaling"] == 1
    assert device["resourceCountName"] == accel_constants.RESOURCES["vgpu_hami"]
    assert device["resourceMemoryName"] == accel_constants.RESOURCES["vgpu_hami_memory"]
    assert device["resourceCoreName"] == accel_constants.RESOURCES["vgpu_hami_cores"]

    cfg = scheduler_config(objs)
    assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert cfg["kind"] == "KubeSchedulerConfiguration"
    assert cfg["profiles"] == [{"schedulerName": "hami-scheduler"}]
    (ext,) = cfg["extenders"]
    assert ext["urlPrefix"] == "https://127.0.0.1:8443"
    assert (ext["filterVerb"], ext["bindVerb"], ext["nodeCacheCapable"]) == ("filter", "bind", True)
    managed = {r["name"] for r in ext["managedResources"]}
    assert managed >= {"nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores"}

    dep = one(objs, "Deployment", "kube-accel-vgpu-hami-scheduler")
    args = container(dep, "vgpu-scheduler-extender")["command"]
    assert "--node-scheduler-policy=binpack" in args and "--gpu-scheduler-policy=spread" in args
    assert "--http_bind=0.0.0.0:8443" in args
    assert container(dep, "kube-scheduler")["command"][1] == "--config=/etc/kube-accel/scheduler/config.yaml"
    tls = next(v for v in pod_spec(dep)["volumes"] if v["name"] == "tls")
    assert tls["secret"]["items"] == [{"key": "cert", "path": "tls.crt"}, {"key": "key", "path": "tls.key"}]

    hook = one(objs, "MutatingWebhookConfiguration", "-webhook")["webhooks"][0]
    assert hook["failurePolicy"] == "Ignore"
    assert hook["clientConfig"]["service"] == {
        "name": "kube-accel-vgpu-hami-scheduler", "namespace": "kube-accel", "path": "/webhook", "port": 443,
    }
    jobs = by_kind(objs, "Job")
    assert jobs["kube-accel-vgpu-hami-certgen-create"]["metadata"]["annotations"]["helm.sh/hook"] == (
        "pre-install,pre-upgrade"
    )
    patch = container(jobs["kube-accel-vgpu-hami-certgen-patch"], "patch")["args"]
    assert "--webhook-name=kube-accel-vgpu-hami-webhook" in patch

    # RBAC: every permission is named; the certgen ClusterRole only touches this release's webhook.
    # (tests/conformance/test_hami.py ties each verb to the upstream call that needs it.)
    assert rules(one(objs, "ClusterRole", "kube-accel-vgpu-hami-scheduler-extender")) == {
        ("", "pods"): {"get", "list", "watch", "patch"},
        ("", "nodes"): {"get", "list", "watch", "patch"},
        ("", "resourcequotas"): {"list", "watch"},
        ("", "pods/binding"): {"create"},
        ("", "events"): {"create", "patch"},
    }
    certgen = one(objs, "ClusterRole", "kube-accel-vgpu-hami-certgen")
    assert certgen["rules"][0]["resourceNames"] == ["kube-accel-vgpu-hami-webhook"]
    bound = {b["roleRef"]["name"] for b in by_kind(objs, "ClusterRoleBinding").values()}
    assert {"system:kube-scheduler", "system:volume-scheduler"} <= bound

    job = one(objs, "Job", "-test")
    assert pod_spec(job)["schedulerName"] == "hami-scheduler"
    limits = container(job, "nvidia-smi")["resources"]["limits"]
    assert (limits["nvidia.com/gpu"], limits["nvidia.com/gpumem"], limits["nvidia.com/gpucores"]) == (1, 1024, 30)


def test_hami_cert_manager_and_policies(helm):
    objs = render("vgpu", [V / "hami-cert-manager.yaml"], helm=helm)
    hook = one(objs, "MutatingWebhookConfiguration", "-webhook")
    assert hook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
        "kube-accel/kube-accel-vgpu-hami-webhook-cert"
    )
    assert hook["webhooks"][0]["failurePolicy"] == "Fail"
    cert = one(objs, "Certificate", "-webhook-cert")
    assert "kube-accel-vgpu-hami-scheduler.kube-accel.svc" in cert["spec"]["dnsNames"]
    assert cert["spec"]["issuerRef"]["name"] == one(objs, "Issuer", "-selfsigned")["metadata"]["name"]
    assert "Job" not in {o["kind"] for o in objs if not o["metadata"]["name"].endswith("-test")}
    dep = one(objs, "Deployment", "kube-accel-vgpu-hami-scheduler")
    assert dep["spec"]["replicas"] == 2
    assert container(dep, "kube-scheduler")["image"] == "registry.dc1.example.net/mirror/kube-scheduler:v1.31.4"
    args = container(dep, "vgpu-scheduler-extender")["command"]
    assert "--node-scheduler-policy=spread" in args and "--gpu-scheduler-policy=topology-aware" in args
    tls = next(v for v in pod_spec(dep)["volumes"] if v["name"] == "tls")
    assert "items" not in tls["secret"]
    device = yaml.safe_load(one(objs, "ConfigMap", "-device-config")["data"]["device-config.yaml"])["nvidia"]
    assert (device["deviceSplitCount"], device["deviceMemoryScaling"], device["gpuCorePolicy"]) == (4, 1.5, "force")
    node = yaml.safe_load(one(objs, "ConfigMap", "-node-config")["data"]["config.json"])
    assert node == {"nodeconfig": [{"name": "gpu-h100-01.dc1.example.net", "devicesplitcount": 7}]}
    pol = one(objs, "NetworkPolicy", "kube-accel-vgpu-hami-device-plugin")
    assert pol["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "monitoring"
    }


def test_gpu_manager_release(helm):
    objs = render("vgpu", [V / "gpu-manager.yaml"], helm=helm)
    assert {o["metadata"]["name"] for o in objs if o["kind"] in ("DaemonSet", "Deployment")} == {
        "kube-accel-vgpu-gpu-manager-gpu-manager",
        "kube-accel-vgpu-gpu-manager-gpu-admission",
        "kube-accel-vgpu-gpu-manager-scheduler",
    }
    ds = one(objs, "DaemonSet", "kube-accel-vgpu-gpu-manager-gpu-manager")
    spec = pod_spec(ds)
    assert selected_pools(spec, POOL) == {"vgpu-vcuda"}
    assert operator_guard(spec)
    assert spec["hostPID"] is True
    gm = container(ds, "gpu-manager")
    flags = env(gm)["EXTRA_FLAGS"].split()
    assert "--container-runtime-endpoint=/run/containerd/containerd.sock" in flags
    assert "--cgroup-driver=systemd" in flags
    assert "--query-port=5678" in flags
    assert gm["ports"] == [{"name": "metrics", "containerPort": 5678, "protocol": "TCP"}]
    assert mounts(gm) == {
        "/var/lib/kubelet/device-plugins": "device-plugin",
        "/etc/gpu-manager/vdriver": "vdriver",
        "/etc/gpu-manager/vm": "vmdata",
        "/var/log/gpu-manager": "log",
        "/etc/gpu-manager/checkpoint": "checkpoint",
        "/var/run": "run-dir",
        "/sys/fs/cgroup": "cgroup",
        "/usr/local/host": "usr-directory",
    }
    assert host_paths(spec)["usr-directory"] == "/usr" and host_paths(spec)["log"] == "/etc/gpu-manager/log"
    assert not any("/var/lib/gpu-manager" in p for p in host_paths(spec).values())

    cfg = scheduler_config(objs)
    assert cfg["profiles"] == [{"schedulerName": "gpu-manager-scheduler"}]
    (ext,) = cfg["extenders"]
    assert ext["urlPrefix"] == "http://kube-accel-vgpu-gpu-manager-gpu-admission.kube-accel.svc:3456/scheduler"
    assert (ext["filterVerb"], ext["nodeCacheCapable"], ext["enableHTTPS"]) == ("predicates", False, False)
    assert "bindVerb" not in ext and "prioritizeVerb" not in ext
    assert [r["name"] for r in ext["managedResources"]] == [
        accel_constants.RESOURCES["vgpu_core_gpu_manager"],
        accel_constants.RESOURCES["vgpu_memory_gpu_manager"],
    ]
    adm = one(objs, "Deployment", "-gpu-admission")
    assert container(adm, "gpu-admission")["command"] == ["/usr/bin/gpu-admission"]
    assert "--address=0.0.0.0:3456" in container(adm, "gpu-admission")["args"]
    svc = one(objs, "Service", "kube-accel-vgpu-gpu-manager-gpu-admission")
    assert svc["spec"]["ports"][0]["port"] == 3456

    # (tests/conformance/test_gpu_manager.py ties each verb to the upstream call that needs it.)
    assert rules(one(objs, "ClusterRole", "kube-accel-vgpu-gpu-manager-gpu-manager")) == {
        ("", "nodes"): {"get", "update"},
        ("", "pods"): {"get", "list", "watch", "patch", "delete"},
        ("", "pods/status"): {"update"},
    }
    assert rules(one(objs, "ClusterRole", "kube-accel-vgpu-gpu-manager-gpu-admission")) == {
        ("", "pods"): {"list", "watch", "patch"},
        ("", "nodes"): {"list", "watch"},
    }
    job = one(objs, "Job", "-test")
    assert pod_spec(job)["schedulerName"] == "gpu-manager-scheduler"
    limits = container(job, "nvidia-smi")["resources"]["limits"]
    assert (limits["tencent.com/vcuda-core"], limits["tencent.com/vcuda-memory"]) == (50, 4)
    assert container(job, "nvidia-smi")["image"] == "nvcr.io/nvidia/cuda:11.4.3-base-ubuntu20.04"


def test_gpu_manager_extender_config(helm):
    objs = render("vgpu", [V / "gpu-manager-extender.yaml"], helm=helm)
    assert "Deployment" not in {o["kind"] for o in objs if o["metadata"]["name"].endswith("-scheduler")}
    cm = one(objs, "ConfigMap", "-scheduler-config")
    assert set(cm["data"]) == {"extender.yaml"}
    (ext,) = yaml.safe_load(cm["data"]["extender.yaml"])["extenders"]
    assert ext["filterVerb"] == "predicates"
    ds = one(objs, "DaemonSet", "-gpu-manager")
    flags = env(container(ds, "gpu-manager"))["EXTRA_FLAGS"].split()
    assert "--container-runtime-endpoint=unix:///run/k3s/containerd/containerd.sock" in flags
    assert "--cgroup-driver=cgroupfs" in flags and "--sample-period=5" in flags and "--query-port=5679" in flags
    assert operator_guard(pod_spec(ds)) == []
    job = one(objs, "Job", "-test")
    assert "schedulerName" not in pod_spec(job)
    assert container(job, "nvidia-smi")["resources"]["limits"]["tencent.com/vcuda-core"] == 200


def test_no_cluster_admin_and_no_wildcards(helm):
    for values in sorted(V.glob("*.yaml")):
        for obj in render("vgpu", [values], helm=helm):
            if obj["kind"] in ("ClusterRoleBinding", "RoleBinding"):
                assert obj["roleRef"]["name"] not in ("cluster-admin", "admin", "edit"), obj["metadata"]["name"]
            if obj["kind"] in ("ClusterRole", "Role"):
                for rule in obj["rules"]:
                    assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], obj["metadata"]["name"]
