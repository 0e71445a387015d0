"""Inventory values reach the host's apt and GRUB files only in a form that cannot change those files' structure.
The role templates are rendered as Ansible renders
them (Jinja with Ansible's own ``quote`` filter and kube-accel's filters), each with a hostile value:

- apt sources (deb822) and preferences have no quoting: a line break starts another field, so a mirror URL or a
  version carrying ``\\nTrusted: yes`` would switch off apt's signature check. The templates refuse such values.
- The GRUB drop-in is a shell script update-grub sources as root: an argument ``$(...)`` ran at every update-grub.
  Rendered with any string, sourcing the drop-in with /bin/sh runs nothing and yields the argument literally.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import jinja2
import pytest
from ansible.errors import AnsibleFilterError
from ansible.plugins.filter.core import FilterModule as CoreFilters
from ansible_collections.kube_accel.gpu.plugins.filter import accel_repo_filters
from ansible_collections.kube_accel.gpu.plugins.module_utils.host import file_values as accel_host_files

ROLES = Path(__file__).resolve().parents[2] / "roles"


def environment() -> jinja2.Environment:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["quote"] = CoreFilters().filters()["quote"]
    env.filters.update({f"kube_accel.gpu.{n}": f for n, f in accel_repo_filters.FilterModule().filters().items()})
    return env


ENV = environment()


def render(role: str, template: str, **variables) -> str:
    text = (ROLES / role / "templates" / template).read_text()
    return ENV.from_string(text).render(ansible_managed="Ansible managed", **variables)


def deb822_fields(text: str) -> list[list[str]]:
    """Field names per stanza, as apt reads a deb822 file (comments dropped, a blank line ends a stanza)."""
    stanzas, current = [], []
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        if not line.strip():
            if current:
                stanzas.append(current)
            current = []
        elif not line[0].isspace():
            current.append(line.split(":", 1)[0])
    return [*stanzas, current] if current else stanzas


CUDA = {"nvidia_driver_cuda_repo": "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64",
        "nvidia_driver_cuda_keyring": "/etc/apt/keyrings/kube-accel-cuda.asc"}
PIN = {"nvidia_driver_pin_version": "550.*",
       "nvidia_driver_pin_globs": "nvidia-* libnvidia-* libcuda* cuda-drivers* xserver-xorg-video-nvidia*"}
TOOLKIT = {"container_toolkit_install_packages": True, "container_toolkit_keyring": "/etc/apt/keyrings/k.asc",
           "container_toolkit_repo_url": "https://nvidia.github.io/libnvidia-container/stable/deb/amd64"}
NONFREE = {"nvidia_driver_debian_mirror": "http://deb.debian.org/debian",
           "nvidia_driver_debian_security_mirror": "http://deb.debian.org/debian-security",
           "ansible_facts": {"distribution_release": "bookworm"}}
INJECT = "\nTrusted: yes"


def test_the_usual_values_render_the_usual_files():
    assert deb822_fields(render("nvidia_driver", "cuda.sources.j2", **CUDA)) == [["Types", "URIs", "Suites",
                                                                                   "Signed-By"]]
    assert deb822_fields(render("nvidia_driver", "nvidia-driver.pref.j2", **PIN)) == [
        ["Explanation", "Package", "Pin", "Pin-Priority"]]
    assert deb822_fields(render("container_toolkit", "nvidia-container-toolkit.sources.j2", **TOOLKIT)) == [
        ["Types", "URIs", "Suites", "Signed-By"]]
    assert len(deb822_fields(render("nvidia_driver", "debian-nonfree.sources.j2", **NONFREE))) == 2
    pref = render("container_toolkit", "nvidia-container-toolkit.pref.j2", container_toolkit_version="1.17.8-1")
    assert "Pin: version 1.17.8-1\n" in pref


@pytest.mark.parametrize(("role", "template", "variables", "field"), [
    ("nvidia_driver", "cuda.sources.j2", {**CUDA, "nvidia_driver_cuda_repo": "https://m.example/cuda" + INJECT},
     "accel_driver_repo_url"),
    ("nvidia_driver", "cuda.sources.j2", {**CUDA, "nvidia_driver_cuda_repo": "https://m.example/a https://evil/b"},
     "accel_driver_repo_url"),
    ("nvidia_driver", "nvidia-driver.pref.j2", {**PIN, "nvidia_driver_pin_version": "550.*" + INJECT},
     "nvidia_driver_version"),
    ("nvidia_driver", "nvidia-driver.pref.j2", {**PIN, "nvidia_driver_pin_globs": "nvidia-*\nPin-Priority: -1"},
     "nvidia_driver_pin_globs"),
    ("nvidia_driver", "debian-nonfree.sources.j2", {**NONFREE, "nvidia_driver_debian_mirror": "http://m" + INJECT},
     "nvidia_driver_debian_mirror"),
    ("container_toolkit", "nvidia-container-toolkit.sources.j2",
     {**TOOLKIT, "container_toolkit_repo_url": "https://m.example/deb" + INJECT}, "container_toolkit_repo_url"),
    ("container_toolkit", "nvidia-container-toolkit.pref.j2", {"container_toolkit_version": "1.17.8-1" + INJECT},
     "container_toolkit_version"),
])
def test_a_value_that_would_add_an_apt_field_is_refused(role, template, variables, field):
    with pytest.raises(AnsibleFilterError, match=field):
        render(role, template, **variables)


def test_the_injection_would_have_worked_without_the_check():
    """The attack as the old template wrote it: the mirror URL's line break gives the stanza a Trusted field."""
    old = "Types: deb\nURIs: {{ nvidia_driver_cuda_repo }}/\nSuites: /\nSigned-By: {{ nvidia_driver_cuda_keyring }}\n"
    text = ENV.from_string(old).render(**{**CUDA, "nvidia_driver_cuda_repo": "https://m.example/cuda" + INJECT})
    assert "Trusted" in deb822_fields(text)[0]


def source_dropin(dropin: str, tmp_path: Path, cmdline: str = "console=ttyS0") -> str:
    """GRUB_CMDLINE_LINUX after /etc/default/grub and the drop-in (twice), sourced by /bin/sh as update-grub does."""
    (tmp_path / "dropin.cfg").write_text(dropin)
    script = (f"GRUB_CMDLINE_LINUX={cmdline!r}\nGRUB_CMDLINE_LINUX_DEFAULT=quiet\n"
              f". ./dropin.cfg\n. ./dropin.cfg\nprintf '%s' \"$GRUB_CMDLINE_LINUX\"\n")
    proc = subprocess.run(["/bin/sh", "-ec", script], cwd=tmp_path, capture_output=True, text=True, check=True,
                          timeout=30)
    return proc.stdout


HOSTILE = ["$(touch pwned)", "`touch pwned`", "a;touch pwned", "'\"$(touch pwned)\"'", "*", "x\ntouch pwned"]


@pytest.mark.parametrize("arg", HOSTILE)
def test_the_grub_dropin_runs_nothing_whatever_the_argument(tmp_path, arg):
    (tmp_path / "decoy").write_text("")  # a file an unquoted * would glob to
    out = source_dropin(render("iommu", "grub-dropin.cfg.j2", iommu_kernel_args=["iommu=pt", arg]), tmp_path)
    assert not (tmp_path / "pwned").exists()
    assert out == f"console=ttyS0 iommu=pt {arg}"


def test_the_old_grub_dropin_ran_command_substitutions(tmp_path):
    """The finding, shown: the previous template put the arguments in a double-quoted variable."""
    old = ('KUBE_ACCEL_IOMMU_CMDLINE="{{ iommu_kernel_args | join(\' \') }}"\n'
           'for a in $KUBE_ACCEL_IOMMU_CMDLINE; do GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX $a"; done\n')
    source_dropin(ENV.from_string(old).render(iommu_kernel_args=["$(touch pwned)"]), tmp_path)
    assert (tmp_path / "pwned").exists()


def test_the_grub_dropin_adds_each_argument_once_and_keeps_the_operators(tmp_path):
    dropin = render("iommu", "grub-dropin.cfg.j2", iommu_kernel_args=["intel_iommu=on", "iommu=pt"])
    assert source_dropin(dropin, tmp_path, "console=ttyS0 iommu=pt") == "console=ttyS0 iommu=pt intel_iommu=on"
    # An argument that is a prefix of one already there is still added (word match, not substring).
    dropin = render("iommu", "grub-dropin.cfg.j2", iommu_kernel_args=["iommu=p"])
    assert source_dropin(dropin, tmp_path, "iommu=pt") == "iommu=pt iommu=p"


@pytest.mark.parametrize(("arg", "ok"), [
    ("intel_iommu=on", True), ("iommu=pt", True), ("pci=realloc", True), ("vfio-pci.ids=10de:2330,10de:2335", True),
    ("pcie_acs_override=downstream,multifunction", True), ("isolcpus=1-3", True), ("hugepagesz=1G", True),
    ("$(reboot)", False), ("a b", False), ('foo="a b"', False), ("x\ny", False), ("", False), ("-x", False),
])
def test_kernel_arguments_are_plain_kernel_parameters(arg, ok):
    assert (accel_host_files.kernel_arg_problem(arg) == "") is ok
