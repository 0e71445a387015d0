# Copyright: kube-accel contributors
# Apache License 2.0
"""Driver package decisions, as pure functions the roles reach through filters
(plugins/filter/accel_driver_filters.py) and the plan rules import.

- ``parse_apt_policy(text)`` / ``apt_moves(text, packages, pin)``: which packages apt must install, at which version,
  so that a changed pin (``nvidia_driver_version`` or the branch) really moves installed packages. ``state: present``
  leaves an installed package alone whatever the pin says; apt itself would move it only at some later upgrade.
- ``parse_dnf_module(text)`` / ``dnf_stream(branch, flavor, profile)`` / ``dnf_plan(...)``: the RHEL module stream,
  and whether a branch change needs ``dnf module switch-to`` (installing the new stream beside the enabled one fails).
- ``open_modules_required(gpu)`` / ``open_modules_supported(gpu)`` / ``driver_flavor(facts, wanted)``: NVIDIA's open
  GPU kernel modules, required on Blackwell and Grace Hopper, unavailable before Turing.
- ``FABRIC_MANAGER_BRANCHES`` / ``fabric_manager_available(branch)``: the driver branches NVIDIA publishes a Fabric
  Manager for.
- ``sriov_method(facts, wanted)``: how SR-IOV virtual functions are created on these GPUs.
- ``kernel_args_owned(wanted, owned_before, entries)``: which kernel arguments kube-accel added itself (and may later
  remove), as opposed to arguments the operator had set.

Runs on the controller; kept Python 3.9 compatible like the rest of module_utils.
"""

from __future__ import annotations

import configparser
import fnmatch
import re

# Driver branches with a published NVIDIA Fabric Manager (the daemon must be of the driver's exact version). Sources:
# NVIDIA's redistributable index developer.download.nvidia.com/compute/cuda/redist/fabricmanager/ (linux-x86_64:
# 450, 455, 460, 465, 470, 495, 510, 515; linux-sbsa: 515, 520, 525, 530, 535, 545, 550, 555, 560, 570) and the
# cuda-drivers-fabricmanager-<branch> packages Ubuntu carries (450, 470, 510, 525, 535, 550, 565, 570, 575, 580, 590,
# 595). A branch outside both lists has no Fabric Manager to install, so an NVSwitch host cannot use its GPUs.
FABRIC_MANAGER_BRANCHES = frozenset({450, 455, 460, 465, 470, 495, 510, 515, 520, 525, 530, 535, 545, 550, 555, 560,
                                     565, 570, 575, 580, 590, 595})
# NVIDIA's open GPU kernel modules support Turing (sm_75) and newer; Blackwell (sm_100, sm_120) and Grace Hopper
# (GH200) support only them (NVIDIA driver installation guide, "Open GPU kernel modules").
OPEN_MODULES_MIN_CC = (7, 5)
OPEN_MODULES_ONLY_CC = (10, 0)
OPEN_MODULES_ONLY_NAMES = ("GH200",)
# SR-IOV on NVIDIA GPUs exists from Ampere (sm_80): there NVIDIA's sriov-manage creates the VFs for vGPU.
SRIOV_MANAGE_MIN_CC = (8, 0)
FLAVORS = ("open", "proprietary")
SRIOV_METHODS = ("sysfs", "sriov-manage")

_VERSION_LINE = re.compile(r"^ (?:\*\*\*|   ) (\S+) (-?\d+)\s*$")


def _cc(gpu: dict):
    match = re.match(r"^\s*(\d+)\.(\d+)", str(gpu.get("compute_capability", "")))
    return (int(match.group(1)), int(match.group(2))) if match else None


def parse_apt_policy(text: str) -> dict:
    """``apt-cache policy PKG...`` (LANG=C) -> {package: {"installed", "candidate", "versions"}}; versions in apt's
    order (newest first), ``installed``/``candidate`` None for "(none)"."""
    packages: dict = {}
    current = None
    in_table = False
    for line in (text or "").splitlines():
        if line and not line[0].isspace() and line.rstrip().endswith(":"):
            current = line.rstrip()[:-1]
            packages[current] = {"installed": None, "candidate": None, "versions": []}
            in_table = False
            continue
        if current is None:
            continue
        stripped = line.strip()
        if stripped.startswith("Installed:") or stripped.startswith("Candidate:"):
            key, _unused, value = stripped.partition(":")
            value = value.strip()
            packages[current][key.lower()] = None if value in ("(none)", "") else value
        elif stripped == "Version table:":
            in_table = True
        elif in_table:
            match = _VERSION_LINE.match(line)
            if match:
                packages[current]["versions"].append(match.group(1))
    return packages


def pin_matches(version: str, pin: str) -> bool:
    """apt_preferences ``Pin: version`` semantics: a glob (``535.*``) or an exact version."""
    return fnmatch.fnmatchcase(version, pin)


def apt_moves(policy_text: str, packages, pin: str, installed_extra=()) -> dict:
    """What apt must install so every listed package sits at the version the pin selects.

    The pinned version is the newest offered version matching ``pin`` (what apt picks with a priority above 1000,
    downgrades included); a listed package with no matching version (its own numbering, e.g. Debian's
    nvidia-persistenced) keeps apt's candidate. ``installed_extra``: installed packages under the pin's name globs
    (libcuda1, cuda-drivers, ...): each one that is offered at a matching version is named too. Naming every package
    of the driver's version train with its version is what lets apt (and its --simulate in check mode, before the
    new pin file is written) move them together through their exact-version dependencies; an extra without a
    matching version (the previous branch's metapackage) is left to apt, which removes it when nothing can satisfy it.

    Returns ``names`` (``pkg=version`` for apt), ``moves`` ([{name, installed, wanted}] for installed packages that
    change version), ``summary`` (those moves as text), ``installs`` (listed packages not installed yet), ``wanted``
    ({name: version}) and ``missing`` (listed packages no repository offers).
    """
    policy = parse_apt_policy(policy_text)
    result = {"names": [], "moves": [], "installs": [], "wanted": {}, "missing": [], "summary": ""}
    listed = list(packages)
    extras = [name for name in installed_extra if name not in listed]
    for name in listed + extras:
        info = policy.get(name)
        if not info or not info["versions"]:
            if name in listed:
                result["missing"].append(name)
            continue
        matching = [v for v in info["versions"] if pin_matches(v, pin)]
        if name in extras and (not matching or info["installed"] is None):
            continue
        wanted = matching[0] if matching else (info["candidate"] or info["versions"][0])
        result["wanted"][name] = wanted
        result["names"].append(f"{name}={wanted}")
        if info["installed"] is None:
            result["installs"].append(name)
        elif info["installed"] != wanted:
            result["moves"].append({"name": name, "installed": info["installed"], "wanted": wanted})
    result["summary"] = "; ".join(f"{m['name']} {m['installed']} -> {m['wanted']}" for m in result["moves"])
    return result


def parse_dnf_module(text: str, module: str = "nvidia-driver") -> dict:
    """``/etc/dnf/modules.d/<module>.module`` -> {"stream", "profiles", "state"} (empty strings when absent)."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text or "")
    except configparser.Error:
        return {"stream": "", "profiles": [], "state": ""}
    if not parser.has_section(module):
        return {"stream": "", "profiles": [], "state": ""}
    section = parser[module]
    profiles = [p.strip() for p in section.get("profiles", "").split(",") if p.strip()]
    return {"stream": section.get("stream", "").strip(), "profiles": profiles,
            "state": section.get("state", "").strip()}


def dnf_stream(branch, flavor: str) -> str:
    """Module stream of NVIDIA's CUDA repository: ``<branch>-dkms`` (proprietary) or ``<branch>-open``."""
    return f"{branch}-{'open' if flavor == 'open' else 'dkms'}"


def dnf_plan(module_text: str, wanted_stream: str, installed_version: str, wanted_version: str) -> dict:
    """What the RHEL driver install must do before ``dnf install``.

    ``switch``: another stream is enabled (a branch or flavour change): ``dnf module switch-to``, which replaces the
    installed packages; installing the new stream beside it fails. ``move``: an exact ``wanted_version`` differs
    from the installed one. ``unlock``: either, so the version lock must be lifted first and set again after.
    """
    current = parse_dnf_module(module_text)
    switch = bool(current["stream"]) and current["state"] == "enabled" and current["stream"] != wanted_stream
    installed = (installed_version or "").strip()
    same = installed == wanted_version or installed.startswith(wanted_version + "-")
    move = bool(wanted_version) and bool(installed) and not same
    return {"current": current["stream"], "switch": switch, "move": move, "unlock": switch or move}


def open_modules_required(gpu: dict):
    """Why this GPU needs NVIDIA's open kernel modules (a sentence), or None."""
    cc = _cc(gpu)
    name = str(gpu.get("name", ""))
    if cc is not None and cc >= OPEN_MODULES_ONLY_CC:
        return f"{name} (compute capability {gpu.get('compute_capability')}, Blackwell or newer) runs only with " \
               f"NVIDIA's open kernel modules"
    if any(marker in name for marker in OPEN_MODULES_ONLY_NAMES):
        return f"{name} (Grace Hopper) runs only with NVIDIA's open kernel modules"
    return None


def open_modules_supported(gpu: dict) -> bool:
    cc = _cc(gpu)
    return cc is None or cc >= OPEN_MODULES_MIN_CC


def driver_flavor(facts, wanted: str = "") -> str:
    """``open`` or ``proprietary``: ``wanted`` when given, else open only where a GPU requires it."""
    if wanted in FLAVORS:
        return wanted
    gpus = (facts or {}).get("gpus") or []
    return "open" if any(open_modules_required(g) for g in gpus) else "proprietary"


def driver_branch_number(value):
    """Branch number of ``accel_driver_branch`` ("550", "535-server", "570-open") or None."""
    match = re.match(r"^\s*(\d+)", "" if value is None else str(value))
    return int(match.group(1)) if match else None


# /proc/driver/nvidia/version's first line: "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue ..." or
# "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build ...".
_PROC_VERSION_RE = re.compile(r"NVRM version:.*?Kernel Module\b.*?\s(\d+)\.(\d+)(?:\.(\d+))?\s")


def loaded_driver(proc_version: str) -> dict:
    """The loaded driver from /proc/driver/nvidia/version: {"version", "branch", "flavor"}; {} when it says none."""
    match = _PROC_VERSION_RE.search(proc_version or "")
    if not match:
        return {}
    version = ".".join(part for part in match.groups() if part is not None)
    return {"version": version, "branch": match.group(1),
            "flavor": "open" if "Open Kernel Module" in match.group(0) else "proprietary"}


def fabric_manager_available(branch) -> bool:
    number = driver_branch_number(branch)
    return number is not None and number in FABRIC_MANAGER_BRANCHES


def sriov_method(facts, wanted: str = "auto") -> str:
    """``sysfs`` or ``sriov-manage``: ``wanted`` when given; ``auto`` picks sriov-manage on Ampere and newer GPUs,
    whose virtual functions NVIDIA creates only with its tool, and the kernel's sriov_numvfs elsewhere."""
    if wanted in SRIOV_METHODS:
        return wanted
    gpus = (facts or {}).get("gpus") or []
    ampere = any((_cc(g) or (0, 0)) >= SRIOV_MANAGE_MIN_CC for g in gpus)
    return "sriov-manage" if ampere else "sysfs"


def kernel_args_owned(wanted, owned_before, entries) -> list:
    """Kernel arguments kube-accel owns after adding ``wanted``: those it owned before and still wants, and those
    not already on every boot entry (``entries``: one argument list per entry). An argument the operator had on
    every entry stays the operator's, so turning the IOMMU off never removes it."""
    wanted = list(wanted or [])
    entries = [set(e) for e in (entries or [])]
    everywhere = set.intersection(*entries) if entries else set()
    before = set(owned_before or [])
    return [arg for arg in wanted if arg in before or arg not in everywhere]
