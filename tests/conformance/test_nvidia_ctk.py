"""CRI-O and Docker: kube-accel's runtime configuration against NVIDIA's own writer, `nvidia-ctk runtime configure`
(v1.20.2, built from the Go module proxy by scripts/upstream.sh; issue 16, What to build 2).

Measured: for these two runtimes nvidia-ctk writes the same configuration as the container_toolkit role (CRI-O: the
same drop-in; Docker: the same merge into daemon.json). The role keeps its own template and merge because they work
before the toolkit package (which brings nvidia-ctk) is installed and give Ansible's check and diff for free; these
tests fail, and say so, the day NVIDIA's writer produces something else. containerd: test_containerd.py (there
nvidia-ctk copies registry credentials, so the role keeps its own module).
"""

from __future__ import annotations

import copy
import json
import tomllib
from pathlib import Path

import jinja2
import pytest
import upstream
import yaml
from lab import versions  # scripts/lab.py

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "container_toolkit"
VERSIONS = versions()  # scripts/versions.env, read as the lab reads it
NVIDIA_CTK = f"nvidia-ctk-{VERSIONS['NVIDIA_CTK_VERSION'].lstrip('v')}"
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())


def nvidia_ctk(tmp_path: Path, *args: str) -> None:
    proc = upstream.run(NVIDIA_CTK, "runtime", "configure", *args, env={"HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr


def deep_merge(base: dict, extra: dict) -> dict:
    """Ansible's combine(recursive=true), as docker.yml merges the NVIDIA runtime into daemon.json."""
    out = copy.deepcopy(base)
    for key, value in extra.items():
        out[key] = deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


@pytest.mark.parametrize("default", [True, False])
def test_crio_dropin_is_the_one_nvidia_ctk_writes(tmp_path, default):
    binary = DEFAULTS["container_toolkit_runtime_binary"]
    ours = jinja2.Template((ROLE / "templates" / "crio-nvidia.toml.j2").read_text()).render(
        ansible_managed="managed", container_toolkit_set_as_default=default,
        container_toolkit_runtime_name="nvidia", container_toolkit_runtime_binary=binary)
    config, dropin = tmp_path / "crio.conf", tmp_path / "crio.conf.d" / "99-nvidia.toml"
    config.write_text('[crio.runtime]\nconmon = "/usr/bin/conmon"\n')
    nvidia_ctk(tmp_path, "--runtime=crio", f"--config={config}", f"--drop-in-config={dropin}",
               f"--nvidia-runtime-path={binary}", *(["--set-as-default"] if default else []))
    assert tomllib.loads(ours) == tomllib.loads(dropin.read_text())


@pytest.mark.parametrize("default", [True, False])
def test_docker_merge_is_the_one_nvidia_ctk_writes(tmp_path, default):
    binary = DEFAULTS["container_toolkit_runtime_binary"]
    before = {"log-driver": "json-file", "log-opts": {"max-size": "10m"}, "runtimes": {"other": {"path": "/x"}}}
    # docker.yml: the runtime, and default-runtime when the pool asks for it, combined into what is there.
    ours = deep_merge(before, {"runtimes": {"nvidia": {"path": binary, "args": []}},
                               **({"default-runtime": "nvidia"} if default else {})})
    config = tmp_path / "daemon.json"
    config.write_text(json.dumps(before))
    nvidia_ctk(tmp_path, "--runtime=docker", f"--config={config}", f"--nvidia-runtime-path={binary}",
               *(["--set-as-default"] if default else []))
    assert json.loads(config.read_text()) == ours


def test_the_docker_merge_above_is_the_roles():
    """The merge emulated above is the one docker.yml writes (its vars, read from the task file)."""
    tasks = yaml.safe_load((ROLE / "tasks" / "docker.yml").read_text())
    (merge,) = [t for t in tasks if t["name"].startswith("Merge the NVIDIA runtime")]
    assert "'runtimes': {container_toolkit_runtime_name: {'path': container_toolkit_runtime_binary, 'args': []}}" in \
        merge["vars"]["container_toolkit_docker_nvidia"]
    assert "{'default-runtime': container_toolkit_runtime_name} if container_toolkit_set_as_default" in \
        merge["vars"]["container_toolkit_docker_default"]
    assert "recursive=true" in merge["vars"]["container_toolkit_docker_merged"]
