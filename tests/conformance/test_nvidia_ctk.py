"""CRI-O and Docker: kube-accel's runtime configuration against NVIDIA's own writer, `nvidia-ctk runtime configure`
(v1.20.2, built from the Go module proxy by scripts/upstream.sh). The NVIDIA runtime's own
config.toml: the role's merge (module nvidia_runtime_config) against `nvidia-ctk config --set --in-place`, and the
keys it sets against the toolkit source that reads them.

Measured: for these two runtimes nvidia-ctk writes the same configuration as the container_toolkit role (CRI-O: the
same drop-in; Docker: the same merge into daemon.json). The role keeps its own template and merge because they work
before the toolkit package (which brings nvidia-ctk) is installed and give Ansible's check and diff for free; these
tests fail, and say so, the day NVIDIA's writer produces something else. containerd: test_containerd.py (there
nvidia-ctk copies registry credentials, so the role keeps its own module).
"""

from __future__ import annotations

import copy
import json
import os
import tomllib
from pathlib import Path

import jinja2
import pytest
import upstream
import yaml
from ansible_collections.kube_accel.gpu.plugins.module_utils.host.runtime_config import merge
from kalab.site import versions

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


# --- the NVIDIA runtime's own config.toml (roles/container_toolkit/tasks/runtime_config.yml) ---------------------

RUNTIME_TASKS = yaml.safe_load((ROLE / "tasks" / "runtime_config.yml").read_text())
(SETTINGS,) = [t["kube_accel.gpu.nvidia_runtime_config"]["settings"] for t in RUNTIME_TASKS
               if "kube_accel.gpu.nvidia_runtime_config" in t]
SETS = [f"--set={k}={str(v).lower()}" for k, v in SETTINGS.items()]


def ctk_src() -> Path:
    """The toolkit's source at the pinned version, as the Go module proxy served it to scripts/upstream.sh."""
    root = Path(os.environ.get("KA_CACHE", Path.home() / ".cache" / "kube-accel")) / "go" / "mod"
    path = root / "github.com" / "!n!v!i!d!i!a" / f"nvidia-container-toolkit@{VERSIONS['NVIDIA_CTK_VERSION']}"
    if not path.is_dir():
        pytest.fail(f"{path} missing: scripts/upstream.sh proxy nvidia-ctk downloads it (make toolchain)")
    return path


def ctk_line(ref: str) -> str:
    path, line = ref.rsplit(":", 1)
    return (ctk_src() / path).read_text().splitlines()[int(line) - 1]


def ctk_config(tmp_path: Path, config: Path, *args: str) -> None:
    proc = upstream.run(NVIDIA_CTK, "config", f"--config-file={config}", *args, env={"HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr


def test_the_role_sets_what_the_runtime_reads():
    """The keys are the toolkit's own (api/config/v1/config.go), and the runtime hands an unprivileged container the
    GPUs of NVIDIA_VISIBLE_DEVICES only with the first one true, and reads the volume-mount request (a /dev/null bind
    mount under /var/run/nvidia-container-devices, what the device plugin's volume-mounts strategy returns) only with
    the second one true (internal/config/image/cuda_image.go VisibleDevices)."""
    assert SETTINGS == {"accept-nvidia-visible-devices-envvar-when-unprivileged": False,
                        "accept-nvidia-visible-devices-as-volume-mounts": True}
    assert 'toml:"accept-nvidia-visible-devices-envvar-when-unprivileged"' in ctk_line("api/config/v1/config.go:64")
    assert 'toml:"accept-nvidia-visible-devices-as-volume-mounts"' in ctk_line("api/config/v1/config.go:65")
    assert "AcceptEnvvarUnprivileged:    true," in ctk_line("api/config/v1/config.go:106")  # NVIDIA's default
    assert "if i.acceptDeviceListAsVolumeMounts {" in ctk_line("internal/config/image/cuda_image.go:266")
    assert "if i.isPrivileged || i.acceptEnvvarUnprivileged {" in ctk_line("internal/config/image/cuda_image.go:281")
    assert 'if source != "/dev/null" {' in ctk_line("internal/config/image/cuda_image.go:368")
    assert 'DeviceListAsVolumeMountsRoot = "/var/run/nvidia-container-devices"' in \
        ctk_line("internal/config/image/cuda_image.go:34")
    # "Privileged" is CAP_SYS_ADMIN in the bounding set, what Pod Security baseline forbids a tenant to add.
    assert "if c == capSysAdmin {" in ctk_line("internal/config/image/privileged.go:41")
    # IMEX channels follow the same two rules (cuda_image.go ImexChannelRequests).
    assert "if i.acceptDeviceListAsVolumeMounts {" in ctk_line("internal/config/image/cuda_image.go:425")
    assert "if i.isPrivileged || i.acceptEnvvarUnprivileged {" in ctk_line("internal/config/image/cuda_image.go:440")


def test_on_nvidias_own_file_the_merge_writes_what_nvidia_ctk_writes(tmp_path):
    """On the file the toolkit package writes (`nvidia-ctk config default`), byte for byte."""
    packaged = tmp_path / "packaged.toml"
    ctk_config(tmp_path, packaged, "--in-place")
    assert "#accept-nvidia-visible-devices-envvar-when-unprivileged = true" in packaged.read_text()
    ours = merge(packaged.read_text(), SETTINGS)
    ctk_config(tmp_path, packaged, "--in-place", *SETS)
    assert ours == packaged.read_text()


OPERATOR_FILES = {
    "envvar-turned-on": "# site file\naccept-nvidia-visible-devices-envvar-when-unprivileged = true\n"
                        "disable-require = true\n\n[nvidia-container-runtime]\nmode = \"cdi\"\n"
                        "runtimes = [\"/usr/local/sbin/runc\"]\n\n[nvidia-container-runtime.modes.cdi]\n"
                        "spec-dirs = [\"/etc/cdi\"]\n",
    "tables-only": "[nvidia-container-cli]\nroot = \"/run/nvidia/driver\"\n[nvidia-ctk]\npath = \"/opt/ctk\"\n",
    "already-set": "accept-nvidia-visible-devices-as-volume-mounts = true\n"
                   "accept-nvidia-visible-devices-envvar-when-unprivileged = false\n",
}


def without_empty_tables(doc: dict) -> dict:
    out = {key: without_empty_tables(value) if isinstance(value, dict) else value for key, value in doc.items()}
    return {key: value for key, value in out.items() if value != {}}


@pytest.mark.parametrize("name", sorted(OPERATOR_FILES))
def test_on_an_operators_file_the_runtime_reads_what_nvidia_ctk_writes(tmp_path, name):
    """nvidia-ctk rewrites the whole file (comments dropped, its defaults added as comments, in tables it adds for
    them: empty once parsed, so nothing the runtime reads); the merge edits lines in place. What the runtime parses
    from both is the same."""
    text = OPERATOR_FILES[name]
    ours = merge(text, SETTINGS)
    theirs = tmp_path / "config.toml"
    theirs.write_text(text)
    ctk_config(tmp_path, theirs, "--in-place", *SETS)
    assert tomllib.loads(ours) == without_empty_tables(tomllib.loads(theirs.read_text()))
    assert (ours == text) == (name == "already-set")
    if name == "envvar-turned-on":
        assert ours.startswith("# site file\n")  # the operator's comment stays; nvidia-ctk drops it


def test_without_a_file_only_the_settings_are_written_and_the_runtime_fills_in_its_defaults(tmp_path):
    """nvidia-ctk writes its whole default config plus the settings; the merge writes the settings alone. The runtime
    starts from its defaults and reads the file over them (api/config/v1/toml.go configNoOverrides), so it sees the
    same; the package's postinst (`nvidia-ctk config --in-place`) keeps the settings, and the role then changes
    nothing."""
    assert "cfg, err := GetDefault()" in ctk_line("api/config/v1/toml.go:170")
    assert "if err := t.Unmarshal(cfg); err != nil {" in ctk_line("api/config/v1/toml.go:177")
    ours = merge(None, SETTINGS)
    theirs, default = tmp_path / "missing.toml", tmp_path / "default.toml"
    ctk_config(tmp_path, theirs, "--in-place", *SETS)
    ctk_config(tmp_path, default, "--in-place")
    assert tomllib.loads(theirs.read_text()) == deep_merge(tomllib.loads(default.read_text()), tomllib.loads(ours))
    # The postinst of nvidia-container-toolkit-base (packaging/debian/*.postinst), on the file the role wrote.
    assert "config --config-file=/etc/nvidia-container-runtime/config.toml --in-place" in \
        (ctk_src() / "packaging/debian/nvidia-container-toolkit-base.postinst").read_text()
    postinst = tmp_path / "postinst.toml"
    postinst.write_text(ours)
    ctk_config(tmp_path, postinst, "--in-place")
    assert {k: tomllib.loads(postinst.read_text())[k] for k in SETTINGS} == SETTINGS
    assert merge(postinst.read_text(), SETTINGS) == postinst.read_text()
