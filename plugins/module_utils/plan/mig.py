# Copyright: kube-accel contributors
# Apache License 2.0
"""MIG geometry: per-model profile tables, placement search, validation and mig-parted config rendering.

Public API (used by the preflight filters, the host ``mig`` role and the GPU Operator values):

- ``MODELS``: model name -> ``MigModel`` (profile name -> ``MigProfile``, PCI device IDs).
- ``model_for_device(pci_device_id)``: the ``MigModel`` for a PCI device ID (``"0x20B210DE"``, ``"20b2"`` or an
  int), or ``None`` when the GPU has no MIG support known to kube-accel.
- ``geometry_problems(pci_device_id, geometry, where="accel_mig_geometry")``: list of problems (empty = legal).
- ``driver_problems(pci_device_id, geometry, driver_version=None, driver_branch=None)``: MIG driver minimums.
- ``find_placement(model, geometry)``: ``[(profile, start_slice), ...]`` in creation order, or ``None``.
- ``valid_combinations(family, include_2x=True)`` / ``maximal_combinations(...)``: the enumerations the unit tests
  compare with the published tables.
- ``mig_config_name(pool)`` and ``mig_parted_config(geometries, device_ids=None)``: a mig-parted ``version: v1``
  document; ``mig_parted_config_for_hosts({host: {pool, geometry, device_ids}})`` builds it for an inventory's MIG
  pools (one config per pool, device filters from the GPUs the hosts reported).

Everything is keyed by PCI device ID, never by profile name alone: ``1g.10gb`` is the two-memory-slice profile on
A100-40GB but the base profile on A100-80GB, and ``1g.35gb`` is H200's ``1g.2x`` but GB300's ``1g``.
Source: ../shared/reference/gpu-sharing-facts.md sections 1.2, 1.4, 1.6.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ProfileClass:
    """Placement rule of one GI profile class on a slice family (from ``nvidia-smi mig -lgipp``)."""

    name: str
    starts: tuple[int, ...]  # allowed start positions on the memory-slice axis
    size: int  # memory slices occupied
    sm: int  # SM slices used
    max_count: int  # instances per GPU


# 7 SM slices / 8 memory slices: A100, H100, H200, B200 and their relatives.
FAMILY_8 = {
    "memory_slices": 8,
    "sm_slices": 7,
    "classes": {
        "1g": ProfileClass("1g", (0, 1, 2, 3, 4, 5, 6), 1, 1, 7),
        "1g+me": ProfileClass("1g+me", (0, 1, 2, 3, 4, 5, 6), 1, 1, 1),
        "1g.2x": ProfileClass("1g.2x", (0, 2, 4, 6), 2, 1, 4),
        "2g": ProfileClass("2g", (0, 2, 4), 2, 2, 3),
        "3g": ProfileClass("3g", (0, 4), 4, 3, 2),
        "4g": ProfileClass("4g", (0,), 4, 4, 1),
        "7g": ProfileClass("7g", (0,), 8, 7, 1),
    },
}

# 4-way split: A30 (placements as in NVIDIA/go-nvml's A30 mock, consistent with the documented maxima).
FAMILY_4 = {
    "memory_slices": 4,
    "sm_slices": 4,
    "classes": {
        "1g": ProfileClass("1g", (0, 1, 2, 3), 1, 1, 4),
        "1g+me": ProfileClass("1g+me", (0, 1, 2, 3), 1, 1, 1),
        "2g": ProfileClass("2g", (0, 2), 2, 2, 2),
        "2g+me": ProfileClass("2g+me", (0, 2), 2, 2, 1),
        "4g": ProfileClass("4g", (0,), 4, 4, 1),
    },
}

FAMILIES = {"7x8": FAMILY_8, "4x4": FAMILY_4}


@dataclass(frozen=True)
class MigProfile:
    name: str
    cls: ProfileClass


@dataclass(frozen=True)
class MigModel:
    name: str
    family: str
    device_ids: tuple[str, ...]  # mig-parted device-filter form, e.g. 0x20B210DE
    profiles: dict[str, MigProfile] = field(hash=False)

    @property
    def memory_slices(self) -> int:
        return FAMILIES[self.family]["memory_slices"]

    @property
    def sm_slices(self) -> int:
        return FAMILIES[self.family]["sm_slices"]


def _model(name: str, family: str, device_ids: tuple[str, ...], names: dict[str, str]) -> MigModel:
    classes = FAMILIES[family]["classes"]
    return MigModel(
        name=name,
        family=family,
        device_ids=device_ids,
        profiles={pname: MigProfile(pname, classes[cls]) for cls, pname in names.items()},
    )


def _names_8(g1: str, g1x2: str, g3: str, g7: str, me: bool = True) -> dict[str, str]:
    # The 2g profile shares the 1g.2x memory size and 4g shares 3g's on every 7x8 part.
    names = {"1g": f"1g.{g1}gb", "1g.2x": f"1g.{g1x2}gb", "2g": f"2g.{g1x2}gb", "3g": f"3g.{g3}gb",
             "4g": f"4g.{g3}gb", "7g": f"7g.{g7}gb"}
    if me:
        names["1g+me"] = f"1g.{g1}gb+me"
    return names


MODELS: dict[str, MigModel] = {
    m.name: m
    for m in (
        _model("A100-40GB", "7x8", ("0x20B010DE", "0x20B110DE", "0x20F110DE", "0x20F610DE"),
               _names_8("5", "10", "20", "40")),
        _model("A100-80GB", "7x8", ("0x20B210DE", "0x20B510DE", "0x20F310DE", "0x20F510DE"),
               _names_8("10", "20", "40", "80")),
        _model("H100-80GB", "7x8", ("0x233010DE", "0x233110DE", "0x232210DE", "0x232410DE"),
               _names_8("10", "20", "40", "80")),
        _model("H100-94GB", "7x8", ("0x232110DE", "0x233A10DE"), _names_8("12", "24", "47", "94")),
        # Per-ID mapping inside the operator's 96GB group is partly inferred (reference 1.6).
        _model("H100-96GB", "7x8", ("0x234210DE", "0x233D10DE", "0x20B610DE", "0x232910DE"),
               _names_8("12", "24", "48", "96")),
        _model("H200-141GB", "7x8", ("0x233510DE", "0x233B10DE"), _names_8("18", "35", "71", "141")),
        _model("GH200-144GB", "7x8", ("0x234810DE",), _names_8("18", "36", "72", "144")),
        _model("B200-180GB", "7x8", ("0x290110DE",), _names_8("23", "45", "90", "180")),
        _model("GB200-186GB", "7x8", ("0x294110DE",), _names_8("23", "47", "93", "186")),
        _model("B300", "7x8", ("0x318210DE",), _names_8("34", "67", "135", "269")),
        _model("GB300", "7x8", ("0x31C210DE",), _names_8("35", "70", "139", "278")),
        _model("A30-24GB", "4x4", ("0x20B710DE",),
               {"1g": "1g.6gb", "1g+me": "1g.6gb+me", "2g": "2g.12gb", "2g+me": "2g.12gb+me", "4g": "4g.24gb"}),
    )
}

_BY_DEVICE_ID = {dev: model for model in MODELS.values() for dev in model.device_ids}

# Minimum driver for MIG per model (MIG User Guide v620, "Deployment Considerations"; reference 1.5). H100-94GB
# follows the H100 entry and the 96GB group the H20 one; GH200-144GB follows H200 (derived, not listed upstream).
MIN_DRIVER = {
    "A100-40GB": "450.80.02", "A100-80GB": "450.80.02", "A30-24GB": "460.73.01",
    "H100-80GB": "525.85.12", "H100-94GB": "525.85.12", "H100-96GB": "535.161.07",
    "H200-141GB": "550.90.07", "GH200-144GB": "550.90.07",
    "B200-180GB": "570.133.20", "GB200-186GB": "570.133.20", "B300": "580.82.07", "GB300": "595.58.03",
}
# Profiles that came with a later driver branch than their GPU (reference 1.2: "R470+", "R525+").
PROFILE_MIN_BRANCH = {
    ("A100-40GB", "1g.5gb+me"): 470, ("A100-40GB", "1g.10gb"): 525,
    ("A30-24GB", "1g.6gb+me"): 470, ("A30-24GB", "2g.12gb+me"): 525,
}


def _version(text) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", str(text)))


def driver_problems(pci_device_id, geometry, driver_version=None, driver_branch=None,
                    where: str = "accel_mig_geometry") -> list[str]:
    """Driver too old for MIG on this model, or for a profile of the geometry.

    Checks the planned ``driver_branch`` (e.g. 550) when given, else the installed ``driver_version``.
    """
    model = model_for_device(pci_device_id)
    if model is None or (driver_branch is None and not driver_version):
        return []
    minimum = MIN_DRIVER[model.name]
    min_branch = _version(minimum)[0]
    if driver_branch is not None:
        have, shown, ok = driver_branch, f"the planned driver branch {driver_branch}", driver_branch >= min_branch
    else:
        have = _version(driver_version)[0]
        shown, ok = f"the installed driver {driver_version}", _version(driver_version) >= _version(minimum)
    problems = []
    if not ok:
        problems.append(f"{where}: MIG on {model.name} needs driver {minimum} or newer, but {shown} is older; "
                        f"allowed: accel_driver_branch {min_branch} or newer")
    for name in geometry or {}:
        needed = PROFILE_MIN_BRANCH.get((model.name, str(name)))
        if needed and have < needed:
            problems.append(f"{where}: profile {name!r} on {model.name} needs driver branch {needed} or newer, "
                            f"but {shown} is older; allowed: accel_driver_branch {needed} or newer")
    return problems


def normalize_device_id(pci_device_id) -> str:
    """``0x20b210de`` / ``20B2`` / ``0x20B2`` / int -> ``0x20B210DE`` (mig-parted device-filter form)."""
    if isinstance(pci_device_id, int):
        value = pci_device_id
    else:
        text = str(pci_device_id).strip().lower()
        text = text.removeprefix("0x")
        value = int(text, 16)
    if value <= 0xFFFF:  # bare device ID: add NVIDIA's vendor ID
        value = (value << 16) | 0x10DE
    return f"0x{value:08X}"


def model_for_device(pci_device_id) -> MigModel | None:
    try:
        return _BY_DEVICE_ID.get(normalize_device_id(pci_device_id))
    except (TypeError, ValueError):
        return None


def _place(cls_list: list[ProfileClass], memory_slices: int, sm_slices: int):
    """Depth-first search over start positions; largest profiles first (the order mig-parted must create them)."""
    order = sorted(range(len(cls_list)), key=lambda i: (-cls_list[i].size, -cls_list[i].sm))
    if sum(c.sm for c in cls_list) > sm_slices or sum(c.size for c in cls_list) > memory_slices:
        return None
    used = [False] * memory_slices
    placed: list[tuple[int, int]] = []

    def search(k: int, min_start: int) -> bool:
        if k == len(order):
            return True
        cls = cls_list[order[k]]
        # Identical consecutive classes take increasing positions, which prunes symmetric orderings.
        same_as_prev = k > 0 and cls_list[order[k - 1]] == cls
        for start in cls.starts:
            if same_as_prev and start <= min_start:
                continue
            span = range(start, start + cls.size)
            if span.stop > memory_slices or any(used[s] for s in span):
                continue
            for s in span:
                used[s] = True
            placed.append((order[k], start))
            if search(k + 1, start):
                return True
            placed.pop()
            for s in span:
                used[s] = False
        return False

    if not search(0, -1):
        return None
    return placed


def find_placement(model: MigModel, geometry: dict[str, int]) -> list[tuple[str, int]] | None:
    """A legal placement ``[(profile name, start slice)]`` in creation order, or ``None`` if there is none."""
    names = [name for name, count in geometry.items() for _unused in range(count)]
    placed = _place([model.profiles[n].cls for n in names], model.memory_slices, model.sm_slices)
    if placed is None:
        return None
    return [(names[i], start) for i, start in placed]


def _fits(family: dict, counts: dict[str, int]) -> bool:
    classes = family["classes"]
    cls_list = [classes[c] for c, n in counts.items() for _unused in range(n)]
    if any(n > classes[c].max_count for c, n in counts.items()):
        return False
    return _place(cls_list, family["memory_slices"], family["sm_slices"]) is not None


def valid_combinations(family: str = "7x8", include_2x: bool = True, include_me: bool = False) -> list[dict]:
    """Every non-empty multiset of profile classes with a legal placement (class -> count).

    The published counts (reference 1.4) treat ``+me`` as ``1g``, hence ``include_me=False`` by default.
    """
    fam = FAMILIES[family]
    classes = [c for c in fam["classes"] if (include_me or "+me" not in c) and (include_2x or c != "1g.2x")]
    ranges = [range(fam["classes"][c].max_count + 1) for c in classes]
    found = []
    for counts in itertools.product(*ranges):
        # Indexed, not zip(strict=True): module_utils run on the hosts' Python, 3.9 on RHEL 9.
        combo = {c: counts[i] for i, c in enumerate(classes) if counts[i]}
        if combo and _fits(fam, combo):
            found.append(combo)
    return found


def maximal_combinations(family: str = "7x8", include_2x: bool = True, include_me: bool = False) -> list[dict]:
    """Valid combinations to which no further instance of an allowed class can be added."""
    valid = valid_combinations(family, include_2x, include_me)
    keys = {frozenset(Counter(c).items()) for c in valid}
    result = []
    for combo in valid:
        extended = False
        for cls in FAMILIES[family]["classes"]:
            bigger = dict(combo)
            bigger[cls] = bigger.get(cls, 0) + 1
            if frozenset(Counter(bigger).items()) in keys:
                extended = True
                break
        if not extended:
            result.append(combo)
    return result


def geometry_problems(pci_device_id, geometry, where: str = "accel_mig_geometry", gpu: str = "") -> list[str]:
    """Problems with a per-GPU geometry (profile name -> count) on the GPU model with this PCI device ID."""
    label = f" on {gpu}" if gpu else ""
    model = model_for_device(pci_device_id)
    if model is None:
        supported = ", ".join(sorted(MODELS))
        return [f"{where}: the GPU{label} (PCI device {pci_device_id}) does not support MIG (or is unknown "
                f"to kube-accel); allowed: GPUs of the models {supported}"]
    if not isinstance(geometry, dict):
        return [f"{where} = {geometry!r}: must be a mapping of MIG profile -> count per GPU; allowed profiles on "
                f"{model.name}: {', '.join(model.profiles)}"]
    problems = []
    clean: dict[str, int] = {}
    for name, count in geometry.items():
        profile = model.profiles.get(str(name))
        if profile is None:
            problems.append(f"{where}: profile {name!r} does not exist on {model.name}{label}; allowed: "
                            f"{', '.join(model.profiles)}")
            continue
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            problems.append(f"{where}[{name!r}] = {count!r}: count must be an integer >= 1; allowed: "
                            f"1..{profile.cls.max_count}")
            continue
        if count > profile.cls.max_count:
            problems.append(f"{where}[{name!r}] = {count}: at most {profile.cls.max_count} per GPU on "
                            f"{model.name}; allowed: 1..{profile.cls.max_count}")
            continue
        clean[name] = count
    if problems or not clean:
        return problems
    if find_placement(model, clean) is None:
        sm = sum(model.profiles[n].cls.sm * c for n, c in clean.items())
        mem = sum(model.profiles[n].cls.size * c for n, c in clean.items())
        layout = " + ".join(f"{n}x{c}" for n, c in clean.items())
        problems.append(
            f"{where} = {layout}: no legal placement on {model.name}{label} (needs {sm}/{model.sm_slices} SM "
            f"slices and {mem}/{model.memory_slices} memory slices, and each profile may only start at its "
            f"allowed positions); allowed: a combination that fits, e.g. one of "
            f"{'; '.join(example_layouts(model))}"
        )
    return problems


def example_layouts(model: MigModel, limit: int = 4) -> list[str]:
    """A few maximal layouts in the model's own profile names, for error messages."""
    by_class = {p.cls.name: p.name for p in model.profiles.values()}
    layouts = []
    for combo in maximal_combinations(model.family, include_2x="1g.2x" in by_class)[:limit]:
        layouts.append(" + ".join(f"{by_class[c]}x{n}" for c, n in combo.items()))
    return layouts


def mig_config_name(geometry: dict) -> str:
    """The mig-parted config (and ``nvidia.com/mig.config`` label value) for a geometry, readable and stable:
    ``{"3g.40gb": 1, "1g.10gb": 2}`` -> ``kube-accel-1g.10gb-2.3g.40gb-1``; pools with one layout share it.
    A label value has no "+": ``1g.10gb+me`` is written ``1g.10gb.me``, as the operator's ``all-1g.10gb.me``."""
    parts = [f"{profile.replace('+', '.')}-{int(count)}" for profile, count in sorted(geometry.items())]
    return "kube-accel-" + ".".join(parts) if parts else "all-disabled"


def mig_parted_config(geometries: dict, device_ids: dict | None = None) -> dict:
    """Render a mig-parted ``version: v1`` document.

    ``geometries``: config name -> geometry (profile -> count per GPU); ``{}`` means MIG on with no instances.
    ``device_ids``: optional config name -> PCI device IDs the config must cover (e.g. from the pool's facts);
    without it every model whose profile names fit the geometry gets an entry.
    Raises ``ValueError`` when a geometry fits no model. ``all-disabled`` is always present.
    """
    configs: dict[str, list] = {"all-disabled": [{"devices": "all", "mig-enabled": False}]}
    for name, wanted_geometry in geometries.items():
        geometry = dict(wanted_geometry or {})
        wanted = None
        if device_ids and device_ids.get(name):
            wanted = {normalize_device_id(d) for d in device_ids[name]}
        filters: list[str] = []
        for model in MODELS.values():
            ids = [d for d in model.device_ids if wanted is None or d in wanted]
            if not ids or any(p not in model.profiles for p in geometry):
                continue
            if geometry and geometry_problems(ids[0], geometry, where=name):
                continue
            filters.extend(ids)
        if wanted is not None and set(filters) != wanted:
            missing = ", ".join(sorted(wanted - set(filters)))
            raise ValueError(f"mig config {name}: geometry {geometry} is not legal on PCI device(s) {missing}")
        if not filters:
            raise ValueError(f"mig config {name}: geometry {geometry} fits no MIG-capable GPU model known to "
                             f"kube-accel")
        configs[name] = [{
            "device-filter": filters if len(filters) > 1 else filters[0],
            "devices": "all",
            "mig-enabled": True,
            "mig-devices": geometry,
        }]
    return {"version": "v1", "mig-configs": configs}


def mig_parted_config_for_hosts(hosts: dict) -> dict:
    """mig-parted document for the MIG pools of an inventory.

    ``hosts``: host -> ``{"pool": accel_pool, "geometry": accel_mig_geometry, "device_ids": [pci_device_id, ...]}``
    (device IDs from the host's ``nvidia_gpus`` facts; empty when not gathered). Hosts without a geometry are
    skipped. One config per geometry (``mig_config_name``); its device filter covers the device IDs seen on the
    hosts with that geometry, or every model the geometry fits when none reported its GPUs. Raises ``ValueError``
    when a geometry is illegal.
    """
    geometries: dict[str, dict] = {}
    device_ids: dict[str, set] = {}
    for host in sorted(hosts):
        entry = hosts[host] or {}
        geometry = {str(k): int(v) for k, v in (entry.get("geometry") or {}).items()}
        if not geometry:
            continue
        name = mig_config_name(geometry)
        geometries[name] = geometry
        ids = {normalize_device_id(d) for d in entry.get("device_ids") or [] if model_for_device(d)}
        device_ids.setdefault(name, set()).update(ids)
    return mig_parted_config(geometries, {k: sorted(v) for k, v in device_ids.items() if v})
