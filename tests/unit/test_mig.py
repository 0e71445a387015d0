"""MIG geometry validator against the published tables (../shared/reference/gpu-sharing-facts.md 1.2-1.8)."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.kube_accel.gpu.plugins.filter.accel_plan_filters import FilterModule
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import mig


def as_set(combos):
    return {frozenset(c.items()) for c in combos}


MAXIMAL_WITHOUT_2X = "7g · 4g+3g · 4g+2g+1g · 4g+1g×3 · 3g+3g · 3g+2g+2g · 3g+2g+1g×2 · 3g+1g×4 · 2g×3+1g · " \
    "2g×2+1g×3 · 2g+1g×5 · 1g×7"
MAXIMAL_WITH_2X_ONLY = "4g+2g+1g.2x · 4g+1g.2x×2 · 4g+1g.2x+1g×2 · 3g+2g+1g.2x · 3g+1g.2x×2 · 3g+1g.2x+1g×2 · " \
    "2g×3+1g.2x · 2g×2+1g.2x×2 · 2g×2+1g.2x+1g×2 · 2g+1g.2x×3 · 2g+1g.2x×2+1g×2 · 2g+1g.2x+1g×4 · 1g.2x×4 · " \
    "1g.2x×3+1g×2 · 1g.2x×2+1g×4 · 1g.2x+1g×6"


def _combos(text):
    result = []
    for item in text.split("·"):
        combo = {}
        for part in item.strip().split("+"):
            cls, _, count = part.partition("×")
            combo[cls] = combo.get(cls, 0) + int(count or 1)
        result.append(combo)
    return result


def test_enumeration_counts_match_the_reference():
    assert len(mig.valid_combinations("7x8", include_2x=False)) == 37
    assert len(mig.maximal_combinations("7x8", include_2x=False)) == 12
    assert len(mig.valid_combinations("7x8", include_2x=True)) == 77
    assert len(mig.maximal_combinations("7x8", include_2x=True)) == 28


def test_maximal_layouts_are_exactly_the_published_ones():
    without = _combos(MAXIMAL_WITHOUT_2X)
    with_2x = _combos(MAXIMAL_WITH_2X_ONLY)
    assert as_set(mig.maximal_combinations("7x8", include_2x=False)) == as_set(without)
    maximal = mig.maximal_combinations("7x8", include_2x=True)
    assert as_set(c for c in maximal if "1g.2x" in c) == as_set(with_2x)
    # The 12 maximal layouts without 1g.2x stay maximal when 1g.2x is allowed.
    assert as_set(c for c in maximal if "1g.2x" not in c) == as_set(without)


def test_a30_maximal_layouts():
    assert as_set(mig.maximal_combinations("4x4")) == as_set(_combos("4g · 2g+2g · 2g+1g+1g · 1g×4"))


def _named(model, combo):
    by_class = {p.cls.name: p.name for p in model.profiles.values()}
    return {by_class[c]: n for c, n in combo.items()}


@pytest.mark.parametrize("model_name", sorted(mig.MODELS))
def test_every_valid_layout_is_accepted_with_the_models_own_names(model_name):
    model = mig.MODELS[model_name]
    combos = mig.valid_combinations(model.family, include_2x=True, include_me=True)
    assert combos
    for combo in combos:
        geometry = _named(model, combo)
        assert mig.geometry_problems(model.device_ids[0], geometry) == [], geometry
        placement = mig.find_placement(model, geometry)
        assert sorted(p for p, _ in placement) == sorted(n for n, c in geometry.items() for _ in range(c))


@pytest.mark.parametrize(
    ("geometry", "expected"),
    [
        ({"7g.80gb": 1, "1g.10gb": 1}, "7g.80gbx1 + 1g.10gbx1: no legal placement on A100-80GB"),
        ({"4g.40gb": 1, "3g.40gb": 1, "1g.10gb": 1}, "needs 8/7 SM slices and 9/8 memory slices"),
        ({"3g.40gb": 2, "1g.10gb": 1}, "3g.40gbx2 + 1g.10gbx1: no legal placement"),
        ({"2g.20gb": 3, "1g.20gb": 1, "1g.10gb": 1}, "no legal placement"),
        ({"1g.10gb": 8}, "accel_mig_geometry['1g.10gb'] = 8: at most 7 per GPU on A100-80GB; allowed: 1..7"),
        ({"2g.20gb": 4}, "accel_mig_geometry['2g.20gb'] = 4: at most 3 per GPU"),
        ({"1g.20gb": 5}, "accel_mig_geometry['1g.20gb'] = 5: at most 4 per GPU"),
        ({"1g.10gb+me": 2}, "accel_mig_geometry['1g.10gb+me'] = 2: at most 1 per GPU"),
        ({"4g.40gb": 2}, "at most 1 per GPU"),
        ({"5g.50gb": 1}, "profile '5g.50gb' does not exist on A100-80GB"),
        ({"1g.5gb": 7}, "profile '1g.5gb' does not exist on A100-80GB; allowed: 1g.10gb, 1g.20gb, 2g.20gb"),
        ({"3g.40gb": 0}, "accel_mig_geometry['3g.40gb'] = 0: count must be an integer >= 1"),
        ({"3g.40gb": "two"}, "accel_mig_geometry['3g.40gb'] = 'two': count must be an integer >= 1"),
    ],
)
def test_invalid_layouts_are_refused_naming_profile_and_count(geometry, expected):
    problems = mig.geometry_problems("0x20B210DE", geometry)
    assert problems, geometry
    assert any(expected in p for p in problems), problems


def test_profile_names_are_keyed_by_device_id():
    # 1g.10gb is the base profile (max 7) on A100-80GB but the 2-memory-slice one (max 4) on A100-40GB.
    assert mig.geometry_problems("0x20B210DE", {"1g.10gb": 7}) == []
    assert "at most 4 per GPU on A100-40GB" in mig.geometry_problems("0x20B010DE", {"1g.10gb": 7})[0]
    # 1g.35gb is H200's 1g.2x (max 4) but GB300's base 1g (max 7).
    assert mig.geometry_problems("0x31C210DE", {"1g.35gb": 7}) == []
    assert "at most 4 per GPU on H200-141GB" in mig.geometry_problems("0x233510DE", {"1g.35gb": 7})[0]


def test_non_mig_gpu_is_refused():
    problems = mig.geometry_problems("0x1EB810DE", {"1g.10gb": 1}, gpu="GPU 0 (Tesla T4)")
    assert problems == [
        "accel_mig_geometry: the GPU on GPU 0 (Tesla T4) (PCI device 0x1EB810DE) does not support MIG (or is "
        "unknown to kube-accel); allowed: GPUs of the models " + ", ".join(sorted(mig.MODELS))
    ]


def test_placements_follow_the_start_position_rules():
    a100 = mig.MODELS["A100-80GB"]
    # 3g+2g+2g only fits as 3g@4 + 2g@0 + 2g@2 (reference 1.4).
    assert sorted(mig.find_placement(a100, {"3g.40gb": 1, "2g.20gb": 2}), key=lambda x: x[1]) == [
        ("2g.20gb", 0), ("2g.20gb", 2), ("3g.40gb", 4)]
    # 1g.2x + 1g x6: the 1g.2x must sit at position 6, the only one a 1g cannot use.
    placement = mig.find_placement(a100, {"1g.20gb": 1, "1g.10gb": 6})
    assert ("1g.20gb", 6) in placement
    # Creation order: largest profile first (creating small ones first can fragment the GPU).
    assert mig.find_placement(a100, {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1})[0][0] == "3g.40gb"
    a30 = mig.MODELS["A30-24GB"]
    assert mig.find_placement(a30, {"2g.12gb": 1, "1g.6gb": 2}) is not None
    assert mig.find_placement(a30, {"2g.12gb": 2, "1g.6gb": 1}) is None


@pytest.mark.parametrize("value", ["0x20B210DE", "0x20b210de", "20B2", "0x20b2", 0x20B210DE, 0x20B2])
def test_device_id_forms(value):
    assert mig.normalize_device_id(value) == "0x20B210DE"
    assert mig.model_for_device(value).name == "A100-80GB"


def test_mig_parted_config_for_the_lab_geometry():
    geometry = {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}
    name = mig.mig_config_name(geometry)
    assert name == "kube-accel-1g.10gb-2.2g.20gb-1.3g.40gb-1"
    assert mig.mig_config_name({}) == "all-disabled"
    doc = mig.mig_parted_config({name: geometry})
    assert doc["version"] == "v1"
    assert doc["mig-configs"]["all-disabled"] == [{"devices": "all", "mig-enabled": False}]
    (entry,) = doc["mig-configs"][name]
    # Same profile names on the A100-80GB and H100-80GB groups: both get the config.
    assert set(entry["device-filter"]) == set(mig.MODELS["A100-80GB"].device_ids + mig.MODELS["H100-80GB"].device_ids)
    assert entry["devices"] == "all" and entry["mig-enabled"] is True and entry["mig-devices"] == geometry
    only = mig.mig_parted_config({"kube-accel-mig": geometry}, device_ids={"kube-accel-mig": ["0x20b210de"]})
    assert only["mig-configs"]["kube-accel-mig"][0]["device-filter"] == "0x20B210DE"
    empty = mig.mig_parted_config({"kube-accel-on": {}})
    assert empty["mig-configs"]["kube-accel-on"][0]["mig-devices"] == {}


def test_mig_parted_config_refuses_illegal_geometry():
    with pytest.raises(ValueError, match="fits no MIG-capable GPU model"):
        mig.mig_parted_config({"x": {"4g.40gb": 1, "3g.40gb": 1, "1g.10gb": 1}})
    with pytest.raises(ValueError, match="not legal on PCI device"):
        mig.mig_parted_config({"x": {"1g.10gb": 7}}, device_ids={"x": ["0x20B010DE"]})


def test_filters_expose_the_mig_functions():
    filters = FilterModule().filters()
    assert filters["accel_mig_config_name"]({"7g.80gb": 1}) == "kube-accel-7g.80gb-1"
    doc = filters["accel_mig_parted_config"]({"kube-accel-a30": {"2g.12gb": 1, "1g.6gb": 2}})
    assert doc["mig-configs"]["kube-accel-a30"][0]["device-filter"] == "0x20B710DE"
    with pytest.raises(AnsibleFilterError):
        filters["accel_mig_parted_config"]({"x": {"9g.1gb": 1}})
    assert filters["accel_mig_geometry_problems"]({"2g.12gb": 3}, "0x20B710DE")
    assert filters["accel_mig_placement"]({"4g.24gb": 1}, "0x20B710DE") == [["4g.24gb", 0]]
    assert filters["accel_mig_placement"]({"4g.24gb": 2}, "0x20B710DE") is None


def test_mig_parted_config_for_hosts_uses_the_devices_seen():
    layout = {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}
    doc = mig.mig_parted_config_for_hosts({
        "mig-0": {"pool": "mig", "geometry": layout, "device_ids": ["0x20B210DE"]},
        "mig-1": {"pool": "mig", "geometry": layout, "device_ids": ["0x233010DE", "0x1EB810DE"]},
        "hami-0": {"pool": "hami", "geometry": {}, "device_ids": ["0x233010DE"]},
        "a30-0": {"pool": "a30-mig", "geometry": {"4g.24gb": 1}, "device_ids": []},
    })
    configs = doc["mig-configs"]
    mixed, a30 = mig.mig_config_name(layout), mig.mig_config_name({"4g.24gb": 1})
    assert sorted(configs) == sorted(["all-disabled", a30, mixed])
    assert configs[mixed][0]["device-filter"] == ["0x20B210DE", "0x233010DE"]
    assert configs[a30][0]["device-filter"] == "0x20B710DE"


def test_filter_builds_the_config_from_hostvars():
    hostvars = {
        "lab-mig-0": {"accel_pool": "mig", "accel_mig_geometry": {"1g.10gb": 7},
                      "nvidia_gpus": {"gpus": [{"pci_device_id": "0x20B210DE"}]}},
        "lab-pgpu-0": {"accel_pool": "pgpu"},
    }
    doc = FilterModule().filters()["accel_mig_parted_config_from_hostvars"](hostvars, ["lab-mig-0", "lab-pgpu-0"])
    assert doc["mig-configs"]["kube-accel-1g.10gb-7"] == [
        {"device-filter": "0x20B210DE", "devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]


def test_driver_minimums_for_mig():
    h200, a100_40 = "0x233510DE", "0x20B010DE"
    assert mig.driver_problems(h200, {"7g.141gb": 1}, driver_version="550.90.07") == []
    assert mig.driver_problems(h200, {"7g.141gb": 1}, driver_version="550.54.15") == [
        "accel_mig_geometry: MIG on H200-141GB needs driver 550.90.07 or newer, but the installed driver 550.54.15 "
        "is older; allowed: accel_driver_branch 550 or newer"]
    # A planned branch takes precedence over the installed driver (the hosts play installs it first).
    assert mig.driver_problems(h200, {"7g.141gb": 1}, driver_version="535.161.08", driver_branch=550) == []
    assert "the planned driver branch 535 is older" in mig.driver_problems(h200, {"7g.141gb": 1}, driver_branch=535)[0]
    # Profiles newer than their GPU: 1g.10gb (the 1g.2x class) on A100-40GB needs R525.
    assert mig.driver_problems(a100_40, {"1g.10gb": 4}, driver_branch=470) == [
        "accel_mig_geometry: profile '1g.10gb' on A100-40GB needs driver branch 525 or newer, but the planned driver "
        "branch 470 is older; allowed: accel_driver_branch 525 or newer"]
    assert mig.driver_problems(a100_40, {"1g.5gb": 7}, driver_branch=470) == []
    assert mig.driver_problems("0x1EB810DE", {"1g.10gb": 1}, driver_branch=470) == []  # not MIG: reported elsewhere
    assert set(mig.MIN_DRIVER) == set(mig.MODELS)


def test_config_name_of_a_plus_me_profile_is_a_label_value():
    # "+" is not allowed in a label value (nvidia.com/mig.config); the operator writes it "." (all-1g.10gb.me).
    assert mig.mig_config_name({"1g.10gb+me": 1, "3g.40gb": 1}) == "kube-accel-1g.10gb.me-1.3g.40gb-1"
