"""charts/vgpu (backend hami): GPUs reach a container only through HAMi's allocation, against HAMi
v2.10.0's code and the NVIDIA runtime as roles/container_toolkit configures it.

- HAMi's device plugin (a fork of NVIDIA's) reads its device-list strategy from DEVICE_LIST_STRATEGY; the chart sets
  one the runtime accepts (volume-mounts: /dev/null under /var/run/nvidia-container-devices, as NVIDIA's plugin
  hands it out and the toolkit reads it). With envvar the runtime, which ignores NVIDIA_VISIBLE_DEVICES in
  unprivileged containers, would give allocated pods no GPU.
- overwriteEnv is on in the device config HAMi's webhook reads: containers of a HAMi pod that ask for no HAMi
  resource get NVIDIA_VISIBLE_DEVICES=none (defence in depth).
- HAMi's own agents ask for every GPU by NVIDIA_VISIBLE_DEVICES and are privileged, which the runtime honours.
"""

from __future__ import annotations

import json

import pytest
import upstream
import yaml
from chartlib import REPO, container, containers, env, one, pod_spec
from vgpu_cases import params, render_case

HAMI_CASES = params("hami")
RUNTIME_SETTINGS = next(t["kube_accel.gpu.nvidia_runtime_config"]["settings"] for t in yaml.safe_load(
    (REPO / "roles" / "container_toolkit" / "tasks" / "runtime_config.yml").read_text())
    if "kube_accel.gpu.nvidia_runtime_config" in t)
PLUGIN = "pkg/device-plugin/nvidiadevice/nvinternal/plugin/server.go"


def _line(file: str, line: int) -> str:
    return (upstream.src(upstream.HAMI) / file).read_text().splitlines()[line - 1]


def test_hami_reads_the_strategy_and_hands_volume_mounts_as_nvidias_plugin_does():
    # The image asks for every GPU by the variable (docker/Dockerfile), which the runtime honours in privileged
    # containers only.
    assert "ENV NVIDIA_VISIBLE_DEVICES=all" in (upstream.src(upstream.HAMI) / "docker/Dockerfile").read_text()
    assert 'EnvVars: []string{"DEVICE_LIST_STRATEGY"},' in _line("cmd/device-plugin/nvidia/main.go", 119)
    assert 'deviceListAsVolumeMountsHostPath          = "/dev/null"' in _line(PLUGIN, 74)
    assert 'deviceListAsVolumeMountsContainerPathRoot = "/var/run/nvidia-container-devices"' in _line(PLUGIN, 75)
    assert "plugin.updateResponseForDeviceListEnvVar(response, deviceListAsVolumeMountsContainerPathRoot)" in \
        _line(PLUGIN, 1074)
    assert "if !hasResource && dev.config.OverwriteEnv {" in _line("pkg/device/nvidia/device.go", 380)
    assert 'Value: "none",' in _line("pkg/device/nvidia/device.go", 383)


@pytest.mark.parametrize(("name", "release", "values"), HAMI_CASES)
def test_allocations_reach_containers_through_the_runtime_kube_accel_configures(tmp_path, name, release, values):
    objs = render_case(tmp_path, release, values)
    ds = one(objs, "DaemonSet", f"{release}-device-plugin")
    strategies = env(container(ds, "device-plugin"))["DEVICE_LIST_STRATEGY"].split(",")
    accepted = {"envvar": RUNTIME_SETTINGS["accept-nvidia-visible-devices-envvar-when-unprivileged"],
                "volume-mounts": RUNTIME_SETTINGS["accept-nvidia-visible-devices-as-volume-mounts"],
                "cdi-annotations": True, "cdi-cri": True}
    assert any(accepted[s] for s in strategies), strategies
    # Every container asking for GPUs by the variable counts as privileged for the toolkit: CAP_SYS_ADMIN in its
    # bounding set (nvidia-container-toolkit v1.20.2 internal/config/image/privileged.go IsPrivileged), which a
    # privileged container has and the vGPU monitor adds (as upstream's chart: not privileged, SYS_ADMIN only).
    for c in containers(pod_spec(ds)):
        if env(c).get("NVIDIA_VISIBLE_DEVICES") or c["name"] == "device-plugin":  # the image sets it (see above)
            context = c.get("securityContext") or {}
            sys_admin = "SYS_ADMIN" in ((context.get("capabilities") or {}).get("add") or [])
            assert context.get("privileged") is True or sys_admin, c["name"]


@pytest.mark.parametrize(("name", "release", "values"), HAMI_CASES)
def test_webhook_overwrites_the_variable_in_containers_without_a_hami_resource(tmp_path, name, release, values):
    objs = render_case(tmp_path, release, values)
    device = tmp_path / "device-config.yaml"
    device.write_text(one(objs, "ConfigMap", f"{release}-device-config")["data"]["device-config.yaml"])
    proc = upstream.run("ka-conform-hami-config", "device-config", str(device))  # HAMi's own loader, strict
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["OverwriteEnv"] is True
