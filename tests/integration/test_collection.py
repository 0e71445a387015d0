"""kube-accel as users install it: `ansible-galaxy collection build` of this checkout, the artifact installed into an
empty directory, then a playbook of the user's own, in a directory of its own (no ansible.cfg of this checkout, no
path back to it), that calls the collection's role, module and filter by FQCN.

The host runs with a local connection; its GPUs come from a recorded NVML snapshot (tests/data/nvml, composed from
published device data) through `accel_nvml_snapshot`: the one stand-in, because there is no GPU here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
GALAXY = yaml.safe_load((REPO / "galaxy.yml").read_text())
FQCN = f"{GALAXY['namespace']}.{GALAXY['name']}"


def run(*argv, cwd: Path, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(BIN / argv[0]), *argv[1:]], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert proc.returncode == 0, f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def artifact(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("build")
    run("ansible-galaxy", "collection", "build", "--output-path", str(out), str(REPO), cwd=REPO)
    (tarball,) = out.glob("*.tar.gz")
    return tarball


@pytest.fixture(scope="module")
def user_env(artifact, tmp_path_factory) -> dict:
    """An environment that sees the installed collection and the `ansible` package's collections, nothing of the
    checkout: no ANSIBLE_* settings from the caller, sys.path not scanned (the venv's .pth names the checkout)."""
    collections = tmp_path_factory.mktemp("collections")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_COLLECTIONS_PATH=f"{collections}:{sysconfig.get_paths()['purelib']}",
               ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="false", ANSIBLE_NOCOLOR="1", ANSIBLE_STDOUT_CALLBACK="default")
    run("ansible-galaxy", "collection", "install", "--no-deps", "-p", str(collections), str(artifact),
        cwd=collections, env=env)
    return {"env": env, "collections": collections}


def test_artifact_ships_what_users_run_and_nothing_of_the_lab(artifact):
    with tarfile.open(artifact) as tar:
        names = set(tar.getnames())
        manifest = json.load(tar.extractfile("MANIFEST.json"))["collection_info"]
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert (manifest["namespace"], manifest["name"], manifest["version"]) == ("kube_accel", "gpu", project["version"])
    for wanted in ("meta/runtime.yml", "roles/preflight/tasks/main.yml", "roles/pool_charts/defaults/main.yml",
                   "plugins/modules/nvidia_gpu_facts.py", "plugins/modules/containerd_nvidia_dropin.py",
                   "plugins/module_utils/plan/pools.py", "plugins/filter/accel_pool_filters.py",
                   "charts/pgpu/Chart.yaml", "charts/vgpu/values.schema.json", "ansible/site.yml",
                   "inventories/example/hosts.yml"):
        assert wanted in names, wanted
    for dev in ("tests", "scripts", "src", ".collections", ".venv", "molecule", "plugins/connection",
                "inventories/lab", "roles/nvidia_driver/molecule"):
        assert not any(n == dev or n.startswith(dev + "/") for n in names), dev


def test_a_users_playbook_runs_the_installed_role_module_and_filter(user_env, tmp_path):
    env, collections = user_env["env"], user_env["collections"]
    listed = json.loads(run("ansible-galaxy", "collection", "list", FQCN, "--format", "json", cwd=tmp_path,
                            env=env).stdout)
    assert list(listed) == [str(collections / "ansible_collections")]  # the installed copy, and only that one
    snapshot = REPO / "tests" / "data" / "nvml" / "h100-80gb.json"
    gpus = len(json.loads(snapshot.read_text())["nvml"]["devices"])
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump({"all": {"children": {"gpu_pools": {"children": {
        "pool_users": {"hosts": {"user-gpu-0": None},
                       "vars": {"accel_pool": "users", "accel_mode": "pgpu", "accel_nvml_snapshot": str(snapshot),
                                "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}}}}))
    (tmp_path / "site.yml").write_text(yaml.safe_dump([
        {"name": "The collection's preflight role", "hosts": "gpu_pools", "gather_facts": False,
         "roles": [{"role": f"{FQCN}.preflight"}]},
        {"name": "Its module and filter", "hosts": "gpu_pools", "gather_facts": False, "tasks": [
            {"name": "GPU facts from the snapshot", f"{FQCN}.nvidia_gpu_facts": {"snapshot": str(snapshot)}},
            {"name": "What the role and the module saw", "ansible.builtin.assert": {"that": [
                f"nvidia_gpus.count == {gpus}", "nvidia_gpus.gpus[0].name is search('H100')",
                f"('pool' | {FQCN}.accel_label) == 'kube-accel.io/pool'"]}}]}], sort_keys=False))
    proc = run("ansible-playbook", "-i", "inventory.yml", "site.yml", cwd=tmp_path, env=env)
    assert "user-gpu-0                 : ok=" in proc.stdout and "failed=0" in proc.stdout


def test_the_installed_role_still_refuses_a_bad_plan(user_env, tmp_path):
    """The role's validation travels with it: an unknown mode stops the user's run, naming field, value and choices."""
    env = user_env["env"]
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump({"all": {"children": {"gpu_pools": {"children": {
        "pool_bad": {"hosts": {"user-gpu-1": None},
                     "vars": {"accel_pool": "bad", "accel_mode": "fractional",
                              "accel_nvml_snapshot": str(REPO / "tests" / "data" / "nvml" / "t4.json"),
                              "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}}}}))
    (tmp_path / "site.yml").write_text(yaml.safe_dump([{"name": "Preflight", "hosts": "gpu_pools",
                                                        "gather_facts": False, "roles": [f"{FQCN}.preflight"]}]))
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "inventory.yml", "site.yml"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 2, proc.stdout[-3000:]
    # Field, value, where it was written, and what is allowed.
    assert ("accel_mode = 'fractional' (inventory.yml:9): not a kube-accel mode; allowed: vgpu, pgpu, mps, timeslice"
            in proc.stdout), proc.stdout[-3000:]
