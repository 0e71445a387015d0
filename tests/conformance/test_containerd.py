"""kube-accel's containerd drop-in against a real containerd 2.x, and NVIDIA's own writer measured beside it.

containerd v2.4.2 and nvidia-ctk v1.20.2 are built from the Go module proxy by scripts/upstream.sh (versions in
scripts/versions.env). The module containerd_nvidia_dropin runs as Ansible runs it (its file with an arguments
file) on config.toml files real hosts carry: a host upgraded from containerd 1.7 (version 2 layout) with registry
credentials at 0640, as kubespray writes it; containerd 2.4's own default (version 4); a file with no version line.
containerd itself then merges config.toml with the drop-in (`config dump`): that, not the module's own reading, is
the evidence. The Debian 12 package (containerd 1.6) is covered by the container_toolkit Molecule scenario.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import upstream
from kalab.site import versions

REPO = Path(__file__).resolve().parents[2]
MODULE = REPO / "plugins" / "modules" / "containerd_nvidia_dropin.py"
VERSIONS = versions()  # scripts/versions.env, read as the lab reads it
CONTAINERD = f"containerd-{VERSIONS['CONTAINERD2_VERSION'].lstrip('v')}"
NVIDIA_CTK = f"nvidia-ctk-{VERSIONS['NVIDIA_CTK_VERSION'].lstrip('v')}"
PASSWORD = "s3cret-pass"
USERNAME = "u"  # one letter: a credential must be found as a whole value, not inside "runtime"
RUNTIME = "/usr/bin/nvidia-container-runtime"

KUBESPRAY_V2 = f"""version = 2
root = "/var/lib/containerd"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = true
  [plugins."io.containerd.grpc.v1.cri".registry.configs."registry.example.com".auth]
    username = "{USERNAME}"
    password = "{PASSWORD}"
"""
NO_VERSION = """[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
"""


def containerd_default() -> str:
    proc = subprocess.run([str(upstream.binary(CONTAINERD)), "config", "default"], capture_output=True, text=True,
                          check=True)
    return proc.stdout


@pytest.fixture(params=["kubespray-v2-auth", "containerd-default", "no-version"])
def host(request, tmp_path):
    text = {"kubespray-v2-auth": KUBESPRAY_V2, "containerd-default": None, "no-version": NO_VERSION}[request.param]
    config = tmp_path / "etc" / "config.toml"
    config.parent.mkdir()
    config.write_text(text if text is not None else containerd_default())
    config.chmod(0o640)
    return config


def run_module(config: Path, check: bool = False) -> dict:
    args = {"main_config": str(config), "dropin": str(config.parent / "conf.d" / "99-nvidia.toml"),
            "imports_glob": str(config.parent / "conf.d" / "*.toml"), "containerd_binary": str(
                upstream.binary(CONTAINERD)), "_ansible_check_mode": check, "_ansible_diff": True}
    path = config.parent.parent / "args.json"
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    proc = subprocess.run([sys.executable, str(MODULE), str(path)], capture_output=True, text=True, check=False)
    result = json.loads(proc.stdout)
    assert not result.get("failed"), result.get("msg")
    return result


def merged(config: Path) -> dict:
    """containerd's own view of config.toml with everything it imports."""
    proc = subprocess.run([str(upstream.binary(CONTAINERD)), "--config", str(config), "config", "dump"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return tomllib.loads(proc.stdout)


def nvidia_runtime(dump: dict) -> dict:
    # containerd 2.4 dumps config version 4, whose CRI runtime section is version 3's.
    assert dump["version"] >= 3, dump["version"]
    return dump["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"].get("nvidia")


def test_containerd_2_loads_the_nvidia_runtime_from_kube_accels_dropin(host):
    before = merged(host)
    assert nvidia_runtime(before) is None
    first = run_module(host)
    assert first["changed"] and first["validated"], first
    dropin = host.parent / "conf.d" / "99-nvidia.toml"
    assert dropin.stat().st_mode & 0o777 == 0o600
    text = dropin.read_text()
    assert PASSWORD not in text and f'"{USERNAME}"' not in text, text
    runtime = nvidia_runtime(merged(host))
    assert runtime["runtime_type"] == "io.containerd.runc.v2" and runtime["options"]["BinaryName"] == RUNTIME
    runc = merged(host)["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]["runc"]
    # Same cgroup driver as runc: a mismatch makes the kubelet's pods fail to start on the nvidia runtime.
    assert runtime["options"].get("SystemdCgroup") == runc["options"].get("SystemdCgroup")
    # What containerd kept from config.toml is still there (the drop-in holds only the runtime).
    images = merged(host)["plugins"].get("io.containerd.cri.v1.images", {})
    if host.read_text() == KUBESPRAY_V2 or PASSWORD in host.read_text():
        assert images["registry"]["configs"]["registry.example.com"]["auth"]["password"] == PASSWORD
    assert run_module(host)["changed"] is False


def test_check_mode_reports_the_change_and_writes_nothing(host):
    text = host.read_text()
    result = run_module(host, check=True)
    assert result["changed"] is True
    assert host.read_text() == text and not (host.parent / "conf.d" / "99-nvidia.toml").exists()
    # The diff shows the drop-in, never the credentials of config.toml.
    assert PASSWORD not in json.dumps(result["diff"])


def test_nvidia_ctk_copies_registry_credentials_into_a_world_readable_dropin(tmp_path):
    """Why kube-accel does not run `nvidia-ctk runtime configure` for containerd: on a
    version 2 config.toml, NVIDIA's writer copies the whole CRI section into its drop-in, registry credentials
    included, at mode 0644 beside a 0640 config.toml. Where it is the same, its runtime entry and ours merge to the
    same runtime in containerd. Should a later nvidia-ctk stop copying credentials, this test fails: reconsider."""
    config = tmp_path / "config.toml"
    config.write_text(f'imports = ["{tmp_path}/conf.d/*.toml"]\n' + KUBESPRAY_V2)
    config.chmod(0o640)
    dropin = tmp_path / "conf.d" / "99-nvidia.toml"
    proc = upstream.run(NVIDIA_CTK, "runtime", "configure", "--runtime=containerd", f"--config={config}",
                        f"--drop-in-config={dropin}", env={"HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert PASSWORD in dropin.read_text()
    assert dropin.stat().st_mode & 0o777 == 0o644
    theirs = nvidia_runtime(merged(config))

    ours_config = tmp_path / "ours" / "config.toml"
    ours_config.parent.mkdir()
    ours_config.write_text(KUBESPRAY_V2)
    run_module(ours_config)
    ours = nvidia_runtime(merged(ours_config))
    for key in ("runtime_type", "privileged_without_host_devices"):
        assert ours[key] == theirs[key], key
    assert ours["options"]["BinaryName"] == theirs["options"]["BinaryName"] == RUNTIME
    assert ours["options"]["SystemdCgroup"] == theirs["options"]["SystemdCgroup"] is True


def test_toolchain_pins_what_the_tests_run():
    for name in (CONTAINERD, NVIDIA_CTK):
        path = upstream.binary(name)
        assert os.access(path, os.X_OK), path
    out = subprocess.run([str(upstream.binary(CONTAINERD)), "--version"], capture_output=True, text=True,
                         check=True).stdout
    assert VERSIONS["CONTAINERD2_VERSION"].lstrip("v") in out, out
