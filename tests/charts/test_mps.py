"""Key facts of the mps chart's objects and NOTES."""

from __future__ import annotations

import subprocess

import yaml
from ansible_collections.kube_accel.gpu.plugins.module_utils.common import constants as accel_constants
from chartlib import (
    CHARTS_DIR,
    NAMESPACE,
    VALUES_DIR,
    container,
    env,
    host_paths,
    mounts,
    one,
    pod_spec,
    render,
    rules,
    selected_pools,
)

POOL = accel_constants.LABELS["pool"]


def test_default_release(helm):
    objs = render("mps", [VALUES_DIR / "mps" / "default.yaml"], helm=helm)
    plugin_ds = one(objs, "DaemonSet", "kube-accel-mps-device-plugin")
    daemon_ds = one(objs, "DaemonSet", "kube-accel-mps-mps-control-daemon")
    for ds in (plugin_ds, daemon_ds):
        assert selected_pools(pod_spec(ds), POOL) == {"mps"}

    cfg = yaml.safe_load(one(objs, "ConfigMap", "-configs")["data"]["mps-4"])
    assert cfg["sharing"]["mps"] == {
        "renameByDefault": False,
        "failRequestsGreaterThanOne": True,
        "resources": [{"name": "nvidia.com/gpu", "replicas": 4}],
    }
    assert cfg["flags"]["mpsRoot"] == "/run/nvidia/mps"
    assert cfg["flags"]["migStrategy"] == "none", "the device plugin refuses MPS on MIG devices"
    assert cfg["flags"]["plugin"]["deviceListStrategy"] == ["volume-mounts"]

    plugin = container(plugin_ds, "nvidia-device-plugin")
    assert env(plugin)["MPS_ROOT"] == "/run/nvidia/mps"
    assert mounts(plugin)["/mps"] == "mps-root" and mounts(plugin)["/dev/shm"] == "mps-shm"
    assert plugin["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert host_paths(pod_spec(plugin_ds))["mps-shm"] == "/run/nvidia/mps/shm"
    # Its GPUs through the runtime's volume-mount channel, as an allocation: no capability needed.
    assert mounts(plugin)["/var/run/nvidia-container-devices/all"] == "all-gpus"
    assert host_paths(pod_spec(plugin_ds))["all-gpus"] == "/dev/null"

    spec = pod_spec(daemon_ds)
    assert spec["nodeSelector"] == {accel_constants.UPSTREAM_LABELS["mps_capable"]: "true"}
    assert spec["hostPID"] is True and "shareProcessNamespace" not in spec
    init = container(daemon_ds, "mps-control-daemon-mounts")
    assert init["command"] == ["mps-control-daemon", "mount-shm"]
    assert init["volumeMounts"] == [{"name": "mps-root", "mountPath": "/mps", "mountPropagation": "Bidirectional"}]
    ctr = container(daemon_ds, "mps-control-daemon-ctr")
    assert ctr["securityContext"] == {"privileged": True}
    # /config/config.yaml is config-manager's symlink into /available-configs (a real kubelet showed it dangling).
    assert mounts(ctr) == {"/mps": "mps-root", "/dev/shm": "mps-shm", "/config": "config",
                           "/available-configs": "available-configs"}
    assert host_paths(spec) == {"mps-root": "/run/nvidia/mps", "mps-shm": "/run/nvidia/mps/shm"}
    # config-manager matches /proc/PID/cmdline[0], i.e. the command as written (cmd/config-manager/main.go:459).
    assert env(container(daemon_ds, "config-manager"))["PROCESS_TO_SIGNAL"] == "mps-control-daemon"
    assert env(container(daemon_ds, "config-manager"))["NODE_LABEL"] == "nvidia.com/device-plugin.config"

    assert rules(one(objs, "ClusterRole", "kube-accel-mps")) == {("", "nodes"): {"list", "watch"}}
    job = one(objs, "Job", "-test")
    assert container(job, "nvidia-smi")["resources"]["limits"]["nvidia.com/gpu"] == 1


def test_several_configs_and_rename(helm):
    objs = render("mps", [VALUES_DIR / "mps" / "multi.yaml"], helm=helm)
    data = {k: yaml.safe_load(v) for k, v in one(objs, "ConfigMap", "-configs")["data"].items()}
    assert {k: v["sharing"]["mps"]["resources"][0]["replicas"] for k, v in data.items()} == {"mps-4": 4, "mps-8": 8}
    assert data["mps-8"]["sharing"]["mps"]["renameByDefault"] is True
    assert data["mps-8"]["sharing"]["mps"]["failRequestsGreaterThanOne"] is False
    assert data["mps-4"]["flags"]["mpsRoot"] == "/var/run/kube-accel/mps"
    daemon = one(objs, "DaemonSet", "kube-accel-mps-mps-control-daemon")
    assert host_paths(pod_spec(daemon))["mps-shm"] == "/var/run/kube-accel/mps/shm"
    assert selected_pools(pod_spec(daemon), POOL) == {"batch-mps", "infer-mps"}
    assert env(container(daemon, "config-manager"))["DEFAULT_CONFIG"] == "mps-8"
    job = one(objs, "Job", "-test")
    assert container(job, "nvidia-smi")["resources"]["limits"]["nvidia.com/gpu.shared"] == 1


def notes(helm4, values):
    proc = subprocess.run(
        [helm4, "install", "--dry-run=client", "kube-accel-mps", str(CHARTS_DIR / "mps"), "-n", NAMESPACE,
         "--values", str(values)],
        capture_output=True, text=True, check=False, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split("NOTES:", 1)[1]


def test_notes_show_per_client_limits(helm4, tmp_path):
    values = tmp_path / "v.yaml"
    values.write_text("configs:\n  mps-3: {replicas: 3, gpuMemoryMiB: 24576}\n  mps-10: {replicas: 10}\n")
    text = notes(helm4, values)
    # 100/3 and 24576/3 with integer division, as the control daemon computes them.
    assert "mps-3: 3 replicas per GPU" in text
    assert "active thread percentage per client: 33%" in text
    assert "pinned device memory limit per client: 8192 MiB (of 24576 MiB)" in text
    assert "active thread percentage per client: 10%" in text
    assert "active thread percentage per client: 25%" in text  # the default mps-4
    assert "GPU memory / 10 (set configs.mps-10.gpuMemoryMiB" in text
    assert "nvidia.com/gpu: 1" in text


def test_notes_renamed_resource(helm4):
    text = notes(helm4, VALUES_DIR / "mps" / "multi.yaml")
    assert "mps-8: 8 replicas per GPU, resource nvidia.com/gpu.shared" in text
    assert "pinned device memory limit per client: 10240 MiB (of 81920 MiB)" in text
    assert "nvidia.com/gpu.shared: 1" in text
