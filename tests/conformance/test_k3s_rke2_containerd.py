"""kube-accel's NVIDIA runtime on hosts shaped like k3s's and RKE2's, loaded by the real containerd 2.x.

k3s and RKE2 (which runs k3s's agent) render /var/lib/rancher/<k3s or rke2>/agent/etc/containerd/config.toml from a Go
template at every start (k3s pkg/agent/containerd/config.go, writeContainerdConfig: config-v3.toml.tmpl, else
config.toml.tmpl, else the built-in base; the base is associated as "base"), and their base template imports
config-v3.toml.d/*.toml beside it since k3s pull request 13680 (2026, backported to the 1.32 to 1.35 lines). They also
add a runtime "nvidia" themselves where they find nvidia-container-runtime (k3s pkg/agent/containerd/runtimes.go:
/usr/local/nvidia/toolkit, then /usr/bin). kube-accel writes its runtime as a drop-in in that directory and never
touches their config.toml.

Each host here is rendered by ka-conform-k3s-template (tests/conformance/go/k3s-template): k3s's rendering mechanism
with Go's own text/template, from kube-accel's stand-in of the base template (k3s's own cannot be built here: the Go
module proxy answers 403 for github.com/k3s-io/k3s). containerd v2.4.2, built from the Go module proxy by
scripts/upstream.sh, then loads the result (`config dump`): that, not the module's reading, is the evidence. k3s's
own containerd is a fork of 2.x (v2.3.4-k3s1 in RKE2 v1.36) with the same config loader.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import upstream

REPO = Path(__file__).resolve().parents[2]
# The containerd the toolchain builds (scripts/versions.env, the pin scripts/upstream.sh builds it at).
PINS = dict(line.split("=", 1) for line in (REPO / "scripts" / "versions.env").read_text().splitlines()
            if "=" in line and not line.startswith("#"))
MODULE = REPO / "plugins" / "modules" / "containerd_nvidia_dropin.py"
BASE = REPO / "tests" / "conformance" / "go" / "k3s-template" / "base-v3.toml.tmpl"
HARNESS = "ka-conform-k3s-template"
CONTAINERD = f"containerd-{PINS['CONTAINERD2_VERSION'].lstrip('v')}"
RUNTIME = "/usr/bin/nvidia-container-runtime"
CRI = "io.containerd.cri.v1.runtime"
# What each distribution fills in (k3s: data dir /var/lib/rancher/k3s; RKE2: /var/lib/rancher/rke2); the socket is
# /run/k3s/containerd/containerd.sock for both (RKE2 pkg/executor/staticpod/spw.go ContainerdSock).
PAUSE = {"k3s": "rancher/mirrored-pause:3.6", "rke2": "index.docker.io/rancher/mirrored-pause:3.6"}


def host(tmp_path: Path, dist: str, extra_runtimes: dict | None = None, template: str | None = None,
         base: str | None = None) -> Path:
    """tmp_path/var/lib/rancher/<dist>/agent/etc/containerd with config.toml rendered as the distribution does."""
    etc = tmp_path / "var" / "lib" / "rancher" / dist / "agent" / "etc" / "containerd"
    etc.mkdir(parents=True, exist_ok=True)
    data = {
        "Program": dist, "SystemdCgroup": True, "EnableUnprivileged": True,
        "ExtraRuntimes": extra_runtimes or {},
        "NodeConfig": {
            "Containerd": {"Address": "/run/k3s/containerd/containerd.sock",
                           "Root": f"/var/lib/rancher/{dist}/agent/containerd", "State": "/run/k3s/containerd",
                           "Opt": f"/var/lib/rancher/{dist}/agent/containerd", "Template": str(etc),
                           "Registry": str(etc / "certs.d")},
            "AgentConfig": {"PauseImage": PAUSE[dist], "Snapshotter": "overlayfs",
                            "CNIBinDir": f"/var/lib/rancher/{dist}/data/cni",
                            "CNIConfDir": f"/var/lib/rancher/{dist}/agent/etc/cni/net.d"}},
    }
    (tmp_path / "data.json").write_text(json.dumps(data))
    args = ["-base", str(BASE), "-data", str(tmp_path / "data.json")]
    if base is not None:
        (tmp_path / "base.tmpl").write_text(base)
        args[1] = str(tmp_path / "base.tmpl")
    if template is not None:
        (etc / "config-v3.toml.tmpl").write_text(template)
        args += ["-template", str(etc / "config-v3.toml.tmpl")]
    proc = upstream.run(HARNESS, *args)
    assert proc.returncode == 0, proc.stderr
    (etc / "config.toml").write_text(proc.stdout)
    return etc


def run_module(etc: Path, check: bool = False, **extra) -> dict:
    """The module as Ansible runs it (its file with an arguments file), with the role's k3s/RKE2 arguments."""
    args = {"main_config": str(etc / "config.toml"), "dropin": str(etc / "config-v3.toml.d" / "99-nvidia.toml"),
            "imports_glob": str(etc / "config-v3.toml.d" / "*.toml"), "manage_imports": False,
            "containerd_binary": str(upstream.binary(CONTAINERD)), "_ansible_check_mode": check,
            "_ansible_diff": True, **extra}
    path = etc / "args.json"
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    proc = subprocess.run([sys.executable, str(MODULE), str(path)], capture_output=True, text=True, check=False)
    path.unlink()
    return json.loads(proc.stdout)


def dump(etc: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(upstream.binary(CONTAINERD)), "--config", str(etc / "config.toml"), "config", "dump"],
                          capture_output=True, text=True, check=False)


def merged(etc: Path) -> dict:
    """containerd's own view of the distribution's config.toml with everything it imports."""
    proc = dump(etc)
    assert proc.returncode == 0, proc.stderr
    return tomllib.loads(proc.stdout)


def runtimes(config: dict) -> dict:
    return config["plugins"][CRI]["containerd"]["runtimes"]


@pytest.mark.parametrize("dist", ["k3s", "rke2"])
def test_nvidia_runtime_lands_in_the_directory_the_distribution_imports(tmp_path, dist):
    etc = host(tmp_path, dist)
    rendered = (etc / "config.toml").read_bytes()
    assert "nvidia" not in runtimes(merged(etc))
    first = run_module(etc)
    assert first["changed"] and first["validated"] and not first.get("failed"), first
    dropin = etc / "config-v3.toml.d" / "99-nvidia.toml"
    assert dropin.stat().st_mode & 0o777 == 0o600
    assert (etc / "config.toml").read_bytes() == rendered  # theirs: never written
    config = merged(etc)
    nvidia = runtimes(config)["nvidia"]
    assert nvidia["runtime_type"] == "io.containerd.runc.v2" and nvidia["options"]["BinaryName"] == RUNTIME
    # The cgroup driver k3s chose for runc (SystemdCgroup = true under systemd): a mismatch fails pod starts.
    assert nvidia["options"]["SystemdCgroup"] is runtimes(config)["runc"]["options"]["SystemdCgroup"] is True
    assert config["plugins"][CRI]["containerd"]["default_runtime_name"] == "runc"  # RuntimeClass nvidia selects it
    # What the distribution configured is still in force.
    # (containerd 2.4 dumps config version 4, which keeps the [grpc] table as the server plugin's settings.)
    assert config["plugins"]["io.containerd.server.v1.grpc"]["address"] == "/run/k3s/containerd/containerd.sock"
    assert config["root"] == f"/var/lib/rancher/{dist}/agent/containerd"
    images = config["plugins"]["io.containerd.cri.v1.images"]
    assert images["pinned_images"]["sandbox"] == PAUSE[dist]
    assert images["registry"]["config_path"] == str(etc / "certs.d")
    assert run_module(etc)["changed"] is False
    # The next start renders config.toml again: same file, and the drop-in is still imported.
    host(tmp_path, dist)
    assert (etc / "config.toml").read_bytes() == rendered
    assert runtimes(merged(etc))["nvidia"]["options"]["BinaryName"] == RUNTIME


def test_check_mode_reports_the_dropin_and_writes_nothing(tmp_path):
    etc = host(tmp_path, "k3s")
    result = run_module(etc, check=True)
    assert result["changed"] is True and not (etc / "config-v3.toml.d").exists()
    assert [d["after_header"] for d in result["diff"]] == [str(etc / "config-v3.toml.d" / "99-nvidia.toml")]


@pytest.mark.parametrize("dist", ["k3s", "rke2"])
def test_the_runtime_the_distribution_found_is_kube_accels(tmp_path, dist):
    """The GPU Operator's toolkit in /usr/local/nvidia/toolkit makes k3s add its own "nvidia" runtime there; that
    binary reads the Operator's runtime config, not the one kube-accel hardens (/etc/nvidia-container-runtime). The
    drop-in merges over k3s's table key by key (no duplicate table), so "nvidia" runs kube-accel's binary, and on a
    HAMi pool it becomes the default."""
    found = {"nvidia": {"RuntimeType": "io.containerd.runc.v2",
                        "BinaryName": "/usr/local/nvidia/toolkit/nvidia-container-runtime"},
             "nvidia-experimental": {"RuntimeType": "io.containerd.runc.v2",
                                     "BinaryName": "/usr/local/nvidia/toolkit/nvidia-container-runtime-experimental"}}
    etc = host(tmp_path, dist, extra_runtimes=found)
    assert runtimes(merged(etc))["nvidia"]["options"]["BinaryName"] == found["nvidia"]["BinaryName"]
    result = run_module(etc, set_as_default=True)
    assert result["changed"] and result["validated"], result
    config = merged(etc)
    assert runtimes(config)["nvidia"]["options"]["BinaryName"] == RUNTIME
    assert runtimes(config)["nvidia"]["options"]["SystemdCgroup"] is True
    assert config["plugins"][CRI]["containerd"]["default_runtime_name"] == "nvidia"
    assert runtimes(config)["nvidia-experimental"]["options"]["BinaryName"] == \
        found["nvidia-experimental"]["BinaryName"]


CRUN = """{{ template "base" . }}
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.'crun-custom']
  runtime_type = "io.containerd.runc.v2"
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.'crun-custom'.options]
  BinaryName = "/usr/local/bin/crun"
"""


def test_an_operators_template_that_extends_the_base_keeps_working(tmp_path):
    etc = host(tmp_path, "rke2", template=CRUN)
    result = run_module(etc)
    assert result["changed"] and result["validated"], result
    config = merged(etc)
    assert runtimes(config)["crun-custom"]["options"]["BinaryName"] == "/usr/local/bin/crun"
    assert runtimes(config)["nvidia"]["options"]["BinaryName"] == RUNTIME
    assert (etc / "config-v3.toml.tmpl").read_text() == CRUN  # the operator's file is theirs


def test_a_release_without_the_dropin_directory_is_refused(tmp_path):
    """k3s and RKE2 releases before the drop-in directory (or an operator's full template without its imports):
    containerd would never read the drop-in, so the module says so and writes nothing."""
    lines = BASE.read_text().splitlines(keepends=True)
    base = "".join(line for line in lines if not line.startswith("imports = "))
    etc = host(tmp_path, "k3s", base=base)
    result = run_module(etc)
    assert result.get("failed") and "nothing that matches" in result["msg"], result
    assert not (etc / "config-v3.toml.d").exists()


def test_appending_the_runtime_to_the_template_breaks_containerd_where_k3s_found_one(tmp_path):
    """Why kube-accel does not append its runtime to config-v3.toml.tmpl after {{ template "base" . }} (the documented
    way to extend the template): where k3s found nvidia-container-runtime itself, the base already renders the table,
    the appended one repeats it and containerd refuses the whole file, so the node loses its runtime at the next
    start (k3s-io/k3s issue 13678, docs issue 566 for runc). The drop-in merges instead (test above)."""
    appended = """{{ template "base" . }}
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.'nvidia']
  runtime_type = "io.containerd.runc.v2"
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.'nvidia'.options]
  BinaryName = "/usr/bin/nvidia-container-runtime"
"""
    etc = host(tmp_path, "k3s", template=appended)
    assert dump(etc).returncode == 0  # no runtime found: the appended table is the only one
    found = {"nvidia": {"RuntimeType": "io.containerd.runc.v2", "BinaryName": RUNTIME}}
    etc = host(tmp_path, "k3s", extra_runtimes=found, template=appended)
    proc = dump(etc)
    assert proc.returncode != 0 and "already exists" in proc.stderr, proc.stderr
