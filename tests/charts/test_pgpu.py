"""Key facts of the pgpu chart's objects."""

from __future__ import annotations

import yaml
from ansible_collections.kube_accel.gpu.plugins.module_utils.common import constants as accel_constants
from chartlib import (
    VALUES_DIR,
    container,
    env,
    helm_template,
    host_paths,
    mounts,
    one,
    pod_spec,
    render,
    rules,
    selected_pools,
)

POOL = accel_constants.LABELS["pool"]
# The digests upstream publishes for the pinned tags (GPU Operator v26.7.0 OLM bundle; charts/pgpu/values.yaml).
DEVICE_PLUGIN_DIGEST = "sha256:a61ba9fd8efb82f3a79f877f7580e02c1e8e7593f62473644bc9c79e315c3312"
SANDBOX_DIGEST = "sha256:367c597799aa6925f5bd2bc4bcdc45c26f018d13cdc2ce9aaf1ca07c492c6d9e"


def test_default_release(helm):
    objs = render("pgpu", [VALUES_DIR / "pgpu" / "default.yaml"], helm=helm)
    ds = one(objs, "DaemonSet", "kube-accel-pgpu-device-plugin")
    assert ds["metadata"]["name"] == "kube-accel-pgpu-device-plugin"
    spec = pod_spec(ds)
    assert selected_pools(spec, POOL) == {"pgpu", "mig"}
    assert spec["shareProcessNamespace"] is True
    plugin = container(ds, "nvidia-device-plugin")
    assert plugin["command"] == ["nvidia-device-plugin"]
    assert env(plugin)["CONFIG_FILE"] == "/config/config.yaml"
    # The default configs include MIG ones, so MIG monitoring and SYS_ADMIN are on, privileged is not.
    assert env(plugin)["NVIDIA_MIG_MONITOR_DEVICES"] == "all"
    assert plugin["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["SYS_ADMIN"]}
    assert "privileged" not in plugin["securityContext"]
    assert mounts(plugin) == {
        "/var/lib/kubelet/device-plugins": "device-plugin",
        "/driver-root": "driver-root",
        "/var/run/cdi": "cdi-root",
        "/config": "config",
        # config-manager's /config/config.yaml is a symlink into it (a real kubelet showed it dangling without).
        "/available-configs": "available-configs",
        # Every GPU through the runtime's volume-mount channel (what a volume-mounts allocation looks like).
        "/var/run/nvidia-container-devices/all": "all-gpus",
    }
    assert host_paths(spec) == {
        "device-plugin": "/var/lib/kubelet/device-plugins",
        "driver-root": "/",
        "cdi-root": "/var/run/cdi",
        "all-gpus": "/dev/null",
    }
    assert next(v for v in spec["volumes"] if v["name"] == "all-gpus")["hostPath"]["type"] == "CharDevice"
    for name, oneshot in (("config-manager-init", "true"), ("config-manager", "false")):
        cm = env(container(ds, name))
        assert cm["NODE_LABEL"] == accel_constants.UPSTREAM_LABELS["device_plugin_config"]
        assert cm["DEFAULT_CONFIG"] == "exclusive"
        assert cm["ONESHOT"] == oneshot
    assert env(container(ds, "config-manager"))["PROCESS_TO_SIGNAL"] == "nvidia-device-plugin"
    # Only GFD / passthrough are optional.
    names = {o["metadata"]["name"] for o in objs if o["kind"] == "DaemonSet"}
    assert names == {"kube-accel-pgpu-device-plugin"}
    # The NVIDIA runtime by RuntimeClass; mig-manager's pause label (tests/conformance has the upstream evidence).
    assert spec["runtimeClassName"] == accel_constants.RUNTIME_CLASS
    assert spec["nodeSelector"] == {accel_constants.UPSTREAM_LABELS["deploy_client"]: "true"}

    configs = one(objs, "ConfigMap", "-configs")["data"]
    assert set(configs) == {"exclusive", "mig-mixed", "mig-single"}
    parsed = {k: yaml.safe_load(v) for k, v in configs.items()}
    assert parsed["exclusive"]["flags"]["migStrategy"] == "none"
    assert parsed["mig-mixed"]["flags"]["migStrategy"] == "mixed"
    for cfg in parsed.values():
        assert cfg["version"] == "v1"
        assert "sharing" not in cfg, "pgpu hands out whole GPUs: no time-slicing or MPS"
        # The NVIDIA runtime kube-accel configures reads volume mounts, not NVIDIA_VISIBLE_DEVICES, from tenants.
        assert cfg["flags"]["plugin"]["deviceListStrategy"] == ["volume-mounts"]

    role = one(objs, "ClusterRole", "kube-accel-pgpu")
    # config-manager is an informer: list + watch (upstream cmd/config-manager/main.go:258-292).
    assert rules(role) == {("", "nodes"): {"list", "watch"}}

    job = one(objs, "Job", "-test")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "test"
    res = container(job, "nvidia-smi")["resources"]
    assert res["limits"]["nvidia.com/gpu"] == 1 == res["requests"]["nvidia.com/gpu"]
    assert selected_pools(pod_spec(job), POOL) == {"pgpu", "mig"}


def test_exclusive_only_drops_sys_admin(helm, tmp_path):
    values = tmp_path / "v.yaml"
    # Helm merges maps with the defaults: null removes the default MIG configs.
    values.write_text("configs: {exclusive: {migStrategy: none}, mig-mixed: null, mig-single: null}\n")
    ds = one(render("pgpu", [values], helm=helm), "DaemonSet", "kube-accel-pgpu-device-plugin")
    plugin = container(ds, "nvidia-device-plugin")
    # volume-mounts (the default) adds no capability: the agents ask for their GPUs by volume mount.
    assert plugin["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert "NVIDIA_MIG_MONITOR_DEVICES" not in env(plugin)
    assert mounts(plugin)["/var/run/nvidia-container-devices/all"] == "all-gpus"


def test_cdi_and_driver_root(helm):
    objs = render("pgpu", [VALUES_DIR / "pgpu" / "mig-cdi.yaml"], helm=helm)
    configs = {k: yaml.safe_load(v) for k, v in one(objs, "ConfigMap", "-configs")["data"].items()}
    assert configs["mig-mixed"]["flags"]["plugin"]["deviceListStrategy"] == ["cdi-cri"]
    assert configs["mig-single"]["flags"]["plugin"]["deviceListStrategy"] == ["cdi-annotations", "envvar"]
    assert configs["mig-mixed"]["flags"]["plugin"]["deviceIDStrategy"] == "index"
    assert configs["exclusive"]["flags"]["nvidiaDriverRoot"] == "/run/nvidia/driver"
    ds = one(objs, "DaemonSet", "kube-accel-pgpu-device-plugin")
    assert host_paths(pod_spec(ds))["driver-root"] == "/run/nvidia/driver"
    assert env(container(ds, "config-manager"))["DEFAULT_CONFIG"] == "mig-mixed"


def test_full_options(helm):
    objs = render("pgpu", [VALUES_DIR / "pgpu" / "full.yaml"], helm=helm)
    ds = one(objs, "DaemonSet", "kube-accel-pgpu-device-plugin")
    plugin = container(ds, "nvidia-device-plugin")
    assert plugin["securityContext"] == {"privileged": True}
    assert env(plugin)["PASS_DEVICE_SPECS"] == "true"
    assert plugin["image"] == f"registry.dc1.example.net/mirror/nvidia/k8s-device-plugin@{DEVICE_PLUGIN_DIGEST}"
    assert pod_spec(ds)["priorityClassName"] == "system-cluster-critical"
    gfd = one(objs, "DaemonSet", "-gpu-feature-discovery")
    assert env(container(gfd, "gpu-feature-discovery"))["GFD_SLEEP_INTERVAL"] == "120s"
    assert host_paths(pod_spec(gfd))["output-dir"] == "/etc/kubernetes/node-feature-discovery/features.d"
    sandbox = one(objs, "DaemonSet", "-sandbox-device-plugin")
    assert selected_pools(pod_spec(sandbox), POOL) == {"vm-passthrough"}
    assert selected_pools(pod_spec(ds), POOL) == {"train-pgpu", "mig"}
    assert container(sandbox, "sandbox-device-plugin")["image"] == (
        f"registry.dc1.example.net/mirror/nvidia/kubevirt-gpu-device-plugin@{SANDBOX_DIGEST}"
    )
    assert host_paths(pod_spec(sandbox))["vfio"] == "/dev/vfio"


def test_network_policies_deny_ingress(helm):
    objs = render("pgpu", [VALUES_DIR / "pgpu" / "full.yaml"], helm=helm)
    pols = [o for o in objs if o["kind"] == "NetworkPolicy"]
    assert len(pols) == 4
    for pol in pols:
        assert pol["spec"]["policyTypes"] == ["Ingress"] and pol["spec"]["ingress"] == []


def test_digest_wins_over_tag(helm, tmp_path):
    digest = "sha256:" + "0123456789abcdef" * 4
    values = tmp_path / "v.yaml"
    values.write_text(f"global: {{imageRegistry: mirror.example}}\nimage: {{repository: nvidia/k8s-device-plugin, "
                      f"tag: v0.20.0, digest: '{digest}'}}\n")
    ds = one(render("pgpu", [values], helm=helm), "DaemonSet", "kube-accel-pgpu-device-plugin")
    assert container(ds, "nvidia-device-plugin")["image"] == f"mirror.example/nvidia/k8s-device-plugin@{digest}"


def test_site_digests_win_and_empty_pulls_by_tag(helm, tmp_path):
    """global.imageDigests (the inventory's accel_image_digests) pins an image by "repository:tag": a site whose
    mirror holds another digest of the same tag pins that one; "" pulls by tag; an entry for another tag is ignored."""
    site = "sha256:" + "ab" * 32
    values = tmp_path / "v.yaml"
    values.write_text(yaml.safe_dump({"global": {"imageDigests": {
        "nvidia/k8s-device-plugin:v0.20.0": site, "nvidia/kubevirt-gpu-device-plugin:v1.6.0": "",
        "nvidia/cuda:0.0-other": "sha256:" + "cd" * 32}},
        "passthrough": {"enabled": True, "pools": ["vm"]}}))
    objs = render("pgpu", [values], helm=helm)
    plugin = container(one(objs, "DaemonSet", "kube-accel-pgpu-device-plugin"), "nvidia-device-plugin")
    assert plugin["image"] == f"nvcr.io/nvidia/k8s-device-plugin@{site}"
    sandbox = container(one(objs, "DaemonSet", "-sandbox-device-plugin"), "sandbox-device-plugin")
    assert sandbox["image"] == "nvcr.io/nvidia/kubevirt-gpu-device-plugin:v1.6.0"
    assert "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04" in [c["image"] for o in objs if pod_spec(o)
                                                              for c in pod_spec(o)["containers"]]


def test_a_site_digest_must_be_a_sha256_digest(helm, tmp_path):
    values = tmp_path / "v.yaml"
    values.write_text(yaml.safe_dump({"global": {"imageDigests": {"nvidia/k8s-device-plugin:v0.20.0": "latest"}}}))
    proc = helm_template("pgpu", [values], helm=helm)
    assert proc.returncode != 0 and "imageDigests" in proc.stderr


def test_passthrough_only_release(helm, tmp_path):
    values = tmp_path / "v.yaml"
    values.write_text("pools: []\npassthrough: {enabled: true, pools: [vm-passthrough]}\n")
    objs = render("pgpu", [values], helm=helm)
    assert [o["metadata"]["name"] for o in objs if o["kind"] == "DaemonSet"] == [
        "kube-accel-pgpu-sandbox-device-plugin"
    ]
    assert not [o for o in objs if o["kind"] in ("Job", "ConfigMap", "ClusterRole")]
