"""The inventory model: strict values as written (plan.values), the inventory as a whole (plan.inventory_check), and
the model's limits against what the charts' values.schema.json enforce (one definition: a value the preflight passes
never fails in Helm after the hosts changed)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import inventory as accel_inventory
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import inventory_check as accel_plan_inventory
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.values import (
    GRAMMARS,
    oversized,
    shown,
    value_problems,
)

REPO = Path(__file__).resolve().parents[2]


def whats(name, value, **kwargs):
    return [what for what, _allowed in value_problems(name, value, **kwargs)]


# --- strict values ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["y", "yes", "true", "True", "on", "1", "n", "no", "false", "off"])
def test_a_boolean_is_a_yaml_boolean_never_a_string(value):
    (what,) = whats("accel_iommu", value)
    assert what.startswith(f"the string {value!r}, not a boolean: write ")


def test_yaml_booleans_pass_and_numbers_do_not():
    assert whats("accel_iommu", True) == [] and whats("accel_iommu", False) == []
    assert whats("accel_iommu", 1) == ["the number 1, not a boolean"]


def test_how_a_string_arrived_is_named_in_the_fix():
    assert whats("accel_mps_replicas", "4", source="extra")[0].endswith(
        "(-e key=value passes strings: pass typed values as JSON, e.g. -e '{\"name\": 4}')")
    assert "an INI inventory reads values as Python literals" in whats("accel_node_taint", "true", source="ini")[0]


@pytest.mark.parametrize(("value", "what"), [
    (4.0, "the number 4.0, not an integer (a decimal point makes it a float)"),
    ("7", "the string '7', not an integer: write 7 without quotes"),
    (True, "the boolean true, not an integer"),
    ([4], "a list, not an integer")])
def test_an_integer_is_an_integer_as_written(value, what):
    assert whats("accel_mps_replicas", value) == [what]


def test_an_unquoted_version_says_how_yaml_read_it():
    assert whats("accel_kubernetes_version", 1.3, written="1.30") == [
        "the number 1.3, not a string: YAML read the unquoted 1.30 as the number 1.3; quote it: \"1.30\""]
    assert whats("accel_kubernetes_version", 1.36) == ["the number 1.36, not a string: quote it: \"1.36\""]


def test_a_string_is_never_a_list():
    (what,) = whats("accel_image_pull_secrets", "regcred")
    assert "not a list (a loop would take it one character at a time)" in what
    assert whats("accel_image_pull_secrets", ["regcred", 7]) == ["element 7 is the number 7, not a string"]


def test_a_driver_branch_may_be_written_as_a_number():
    # 550 and "550" name the same branch, with no digit lost (unlike 1.30 -> 1.3).
    assert whats("accel_driver_branch", 550) == [] and whats("accel_driver_branch", "550") == []
    assert whats("accel_driver_branch", 5.5) == ["the number 5.5, not a string: quote it: \"5.5\""]


@pytest.mark.parametrize(("value", "what"), [
    ("535\nPin: release *", "contains a newline or control character"),
    ("550-open", "a branch with a package flavour: the flavour is accel_driver_flavor's"),
    ("550.54.15", "a driver version, not a branch (the branch is '550'; nvidia_driver_version pins a version)"),
    ("latest", "not a driver branch"), ("55", "not a driver branch")])
def test_driver_branch_grammar(value, what):
    assert whats("accel_driver_branch", value) == [what]


@pytest.mark.parametrize("url", ["http://mirror.example.com/cuda", "https://mirror.example.com/$(reboot)",
                                 "https://mirror.example.com/a b", "https://mirror.example.com/x\nTypes: deb",
                                 "https://mirror.example.com/x?y=1", "ftp://mirror.example.com/"])
def test_repository_urls_reach_apt_and_dnf_only_when_plain_https(url):
    assert whats("accel_driver_repo_url", url)


@pytest.mark.parametrize("url", ["https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64",
                                 "https://mirror.example.com:8443/nvidia/cuda_12-4/"])
def test_repository_urls_accepted(url):
    assert whats("accel_driver_repo_url", url) == []


def test_every_string_variable_has_a_grammar_or_choices():
    for name, entry in accel_inventory.VARIABLES.items():
        if entry["type"] in ("str", "path") or entry.get("elements") == "str":
            assert entry.get("grammar") in GRAMMARS or "choices" in entry, name


@pytest.mark.parametrize(("name", "bad"), [
    ("accel_kubeconfig", "/etc/kube\nconfig"), ("accel_kube_context", "a\rb"), ("accel_lab_gpu", "../x"),
    ("accel_nvml_snapshot", "/x\x00y"), ("accel_gpu_operator_chart_fallback", "/charts/op\n"),
    ("accel_image_registry", "mirror.example.com; rm -rf /")])
def test_nothing_with_a_newline_or_control_character_reaches_a_file(name, bad):
    assert whats(name, bad)


def test_an_alias_bomb_is_measured_without_expanding_it():
    node = ["lol"] * 9
    for _ in range(9):
        node = [node] * 9
    # 9^10 strings and 1 + 9 + ... + 9^9 lists, from ten shared nodes.
    assert oversized(node).startswith(f"a value of {9 ** 10 + sum(9 ** k for k in range(10)):,} items (YAML aliases")
    assert len(shown(node)) <= 120
    (what,) = whats("accel_vfio_pci_ids", node)
    assert "far more than any setting holds" in what
    assert oversized(["10de:20b5"]) == ""


def test_mig_geometry_grammar():
    assert whats("accel_mig_geometry", {"3g.40gb": 1, "1g.10gb+me": 1, "1c.2g.20gb": 2}) == []
    (what,) = whats("accel_mig_geometry", {"1g.10gb": "7", "big": 1, "2g.20gb": 0})
    assert what == ("the count of '1g.10gb' is the string '7', not an integer; 'big' is not a MIG profile name; "
                    "the count of '2g.20gb' is 0, not at least 1")


# --- the inventory as a whole ----------------------------------------------------------------------------------


def rec(value, origin=""):
    return {"value": value, "error": "", "origin": origin, "written": None, "source": ""}


def inventory(groups=None, hosts=None, effective=None, gpu_hosts=None, cluster_host=None, **extra):
    groups = groups or {}
    groups.setdefault("all", {"vars": {}, "children": ["gpu_pools"], "hosts": []})
    groups.setdefault("gpu_pools", {"vars": {}, "children": [g for g in groups if g.startswith("pool_")],
                                    "hosts": []})
    return {"groups": groups, "hosts": hosts or {}, "extra": {}, "effective": effective or {},
            "gpu_hosts": gpu_hosts or [], "cluster_host": cluster_host, "orphans": [], "role_options": [], **extra}


def pool_group(hosts, **settings):
    return {"vars": {f"accel_{k}": rec(v, f"g/{k}.yml:1") for k, v in settings.items()}, "children": [],
            "hosts": hosts}


def effective(**settings):
    return {f"accel_{k}": rec(v, "g.yml:1") for k, v in settings.items()}


def test_unknown_names_are_reported_where_they_are_written():
    inv = inventory(
        groups={"pool_a": pool_group(["h1"], pool="a", mode="mps", mps_replica=4),
                "kube_control_plane": {"vars": {"accel_namepsace": rec("x", "cp.yml:2")}, "children": [],
                                       "hosts": ["cp"]}},
        hosts={"h1": {"vars": {"mps_replicas": rec(4, "h1.yml:1"), "ntp_server": rec("x")}}},
        effective={"h1": effective(pool="a", mode="mps")}, gpu_hosts=["h1"], cluster_host="cp")
    out = accel_plan_inventory.check(inv)
    assert out["hosts"]["h1"]["problems"][:2] == [
        "h1: accel_mps_replica = 4 (g/mps_replica.yml:1): unknown variable (did you mean accel_mps_replicas?); "
        "allowed: the variables of kube-accel's inventory model (docs/inventory.md, docs/plan-checks.md)",
        "h1: mps_replicas = 4 (h1.yml:1): unknown variable (did you mean accel_mps_replicas?); allowed: the "
        "variables of kube-accel's inventory model (docs/inventory.md, docs/plan-checks.md), and the variables of "
        "kube-accel's roles"]
    assert out["inventory"] == [
        "group kube_control_plane: accel_namepsace = 'x' (cp.yml:2): unknown variable (did you mean "
        "accel_namespace?); allowed: the variables of kube-accel's inventory model (docs/inventory.md, "
        "docs/plan-checks.md)"]


def test_role_variables_are_known_and_their_typos_are_not():
    inv = inventory(groups={"pool_a": {"vars": {"nvidia_driver_install_pacakges": rec(False),
                                                "nvidia_driver_install_packages": rec(False)},
                                       "children": [], "hosts": ["h1"]}},
                    effective={"h1": effective(pool="a", mode="pgpu")}, gpu_hosts=["h1"],
                    role_options=["nvidia_driver_install_packages"])
    problems = accel_plan_inventory.check(inv)["hosts"]["h1"]["problems"]
    assert problems == [
        "h1: nvidia_driver_install_pacakges = false: unknown variable (did you mean nvidia_driver_install_packages?); "
        "allowed: the variables of kube-accel's inventory model (docs/inventory.md, docs/plan-checks.md), and the "
        "variables of kube-accel's roles"]


def test_a_host_in_two_pools_or_in_none():
    inv = inventory(groups={"pool_a": pool_group(["h1", "h2"], mode="vgpu"), "pool_b": pool_group(["h1"], mode="pgpu"),
                            "pool_c": pool_group([])},
                    hosts={"h3": {"vars": {}}}, effective={h: effective(pool=h) for h in ("h1", "h2", "h3")},
                    gpu_hosts=["h1", "h2", "h3"])
    inv["groups"]["gpu_pools"]["hosts"] = ["h3"]
    out = accel_plan_inventory.check(inv)
    assert ("h1: group_names = ['pool_a', 'pool_b']: different modes on one host: pool_a (accel_mode=vgpu), pool_b "
            "(accel_mode=pgpu); allowed: exactly one pool group under gpu_pools, so one mode per host"
            ) in out["hosts"]["h1"]["problems"]
    assert not any("group_names" in p for p in out["hosts"]["h2"]["problems"])
    assert out["hosts"]["h3"]["problems"][0] == (
        "h3: group_names: the host is in gpu_pools but in none of its pool groups; allowed: exactly one pool group "
        "under gpu_pools")


def test_the_hosts_of_a_pool_agree():
    inv = inventory(groups={"pool_a": pool_group(["h1", "h2", "h3"])},
                    effective={"h1": effective(pool="a", mode="pgpu"), "h2": effective(pool="a", mode="pgpu"),
                               "h3": {**effective(pool="a"), "accel_mode": rec("mps", "host_vars/h3.yml:1")}},
                    gpu_hosts=["h1", "h2", "h3"])
    out = accel_plan_inventory.check(inv)
    expected = ("accel_pool = 'a': the hosts of pool 'a' (groups pool_a) disagree on accel_mode: 'pgpu' on h1, h2 "
                "(g.yml:1); 'mps' on h3 (host_vars/h3.yml:1); allowed: the same pool settings on every host of a pool: "
                "set them in its pool group, or give the hosts different accel_pool names")
    for host in ("h1", "h2", "h3"):
        assert f"{host}: {expected}" in out["hosts"][host]["problems"]
        assert "accel_mode" in out["hosts"][host]["invalid"]
    # Per-host settings may differ.
    inv["effective"]["h3"]["accel_mode"] = rec("pgpu")
    inv["effective"]["h3"]["accel_hosts_fast_path"] = rec(False)
    assert all(not e["problems"] for e in accel_plan_inventory.check(inv)["hosts"].values())


def test_cluster_settings_are_checked_once_where_the_cluster_play_reads_them():
    cluster = {"accel_namespace": rec("Kube", "cp.yml:1"), "accel_kubernetes_version": rec("1.36", "all.yml:1")}
    gpu = {**effective(pool="a", mode="pgpu"), "accel_kubernetes_version": rec("1.36", "all.yml:1")}
    inv = inventory(groups={"pool_a": pool_group(["h1", "h2"])}, effective={"cp": cluster, "h1": gpu, "h2": gpu},
                    gpu_hosts=["h1", "h2"], cluster_host="cp")
    out = accel_plan_inventory.check(inv)
    assert out["cluster"][0].startswith("cp (kube_control_plane[0]): accel_namespace = 'Kube' (cp.yml:1): not an "
                                        "RFC 1123 label")
    # Both GPU hosts read the default instead: one problem, the cluster's, not one per host.
    assert out["cluster"][1] == (
        "cp (kube_control_plane[0]): accel_namespace = 'Kube' (cp.yml:1): every GPU host reads (not set): a cluster "
        "setting set where only the cluster host sees it; allowed: cluster settings once, in group_vars/all (or extra "
        "vars), the same for every host")
    assert out["hosts"]["h1"]["problems"] == []
    # One GPU host that sees another value has the problem itself.
    inv["effective"]["h2"] = {**gpu, "accel_kubernetes_version": rec("1.29", "host_vars/h2.yml:1")}
    inv["effective"]["cp"] = {"accel_kubernetes_version": rec("1.36", "all.yml:1")}
    out = accel_plan_inventory.check(inv)
    assert out["hosts"]["h2"]["problems"] == [
        "h2: accel_kubernetes_version = '1.29' (host_vars/h2.yml:1): a cluster setting that differs from what the "
        "cluster play reads on cp (kube_control_plane[0]): '1.36' (all.yml:1); allowed: cluster settings once, in "
        "group_vars/all (or extra vars), the same for every host"]
    assert out["hosts"]["h1"]["settings"]["accel_kubernetes_version"] == "1.36"


def test_settings_a_mode_ignores_are_refused_where_set_for_the_pool():
    inv = inventory(groups={"pool_a": pool_group(["h1"], pool="a", mode="pgpu", mps_replicas=4)},
                    effective={"h1": effective(pool="a", mode="pgpu", mps_replicas=4)}, gpu_hosts=["h1"])
    (problem,) = accel_plan_inventory.check(inv)["hosts"]["h1"]["problems"]
    assert problem == ("h1: accel_mps_replicas = 4 (g.yml:1): set for this pool, whose settings make it ignored (it "
                       "applies with accel_mode mps); allowed: remove it, or set it for pools it applies to")
    # A default for every pool (group_vars/all or gpu_pools) is not this pool's choice.
    inv["groups"]["pool_a"]["vars"].pop("accel_mps_replicas")
    inv["groups"]["gpu_pools"]["vars"]["accel_mps_replicas"] = rec(4)
    assert accel_plan_inventory.check(inv)["hosts"]["h1"]["problems"] == []
    # A value equal to the variable's default changes nothing and is left alone.
    inv["groups"]["pool_a"]["vars"]["accel_mig_strategy"] = rec("none")
    inv["effective"]["h1"]["accel_mig_strategy"] = rec("none")
    assert accel_plan_inventory.check(inv)["hosts"]["h1"]["problems"] == []


def test_template_errors_are_the_hosts_own_problem():
    broken = {**effective(pool="a", mode="pgpu"),
              "accel_numa_policy": {"value": "{{ numa", "error": "TemplateSyntaxError: unexpected end of template",
                                    "origin": "g.yml:3", "written": None, "source": ""}}
    inv = inventory(groups={"pool_a": pool_group(["h1", "h2"])},
                    effective={"h1": broken, "h2": effective(pool="b", mode="pgpu")}, gpu_hosts=["h1", "h2"])
    out = accel_plan_inventory.check(inv)
    assert out["hosts"]["h1"]["problems"] == [
        "h1: accel_numa_policy = '{{ numa' (g.yml:3): cannot be read: TemplateSyntaxError: unexpected end of "
        "template; allowed: a value, or a template that renders one for this host"]
    assert out["hosts"]["h1"]["invalid"] == ["accel_numa_policy"]
    assert "accel_numa_policy" not in out["hosts"]["h1"]["settings"]
    assert out["hosts"]["h2"]["problems"] == []


def test_pool_settings_that_reach_no_gpu_host_and_files_that_name_nothing():
    inv = inventory(groups={"pool_a": pool_group(["h1"]),
                            "stray": {"vars": {"accel_mode": rec("pgpu", "stray.yml:1")}, "children": [],
                                           "hosts": ["h9"]}},
                    effective={"h1": effective(pool="a", mode="pgpu")}, gpu_hosts=["h1"],
                    orphans=[{"path": "inv/group_vars/pool_aa.yml", "kind": "group_vars", "name": "pool_aa"}])
    inv["groups"]["all"]["children"].append("stray")
    out = accel_plan_inventory.check(inv)
    assert out["inventory"] == [
        "inventory: inv/group_vars/pool_aa.yml: names no group of the inventory (did you mean pool_a?), so Ansible "
        "never reads it; allowed: group_vars files named after a group of the inventory",
        "group stray: accel_mode = 'pgpu' (stray.yml:1): a pool setting that reaches no GPU host: its hosts "
        "(h9) are not under gpu_pools, so nothing sets up their GPUs; allowed: pool groups as children of gpu_pools; "
        "cluster settings only in group_vars/all"]


def test_lab_stand_ins_only_on_lab_hosts():
    runtime = {"cgroup_version": 1, "containerd_version": "1.7.24"}
    inv = inventory(groups={"pool_a": pool_group(["h1"])},
                    effective={"h1": effective(pool="a", mode="pgpu", lab_host_runtime=runtime)}, gpu_hosts=["h1"])
    (problem,) = accel_plan_inventory.check(inv)["hosts"]["h1"]["problems"]
    assert "a lab stand-in on a host that is not a lab host" in problem
    inv["effective"]["h1"]["accel_lab"] = rec(True)
    assert accel_plan_inventory.check(inv)["hosts"]["h1"]["problems"] == []


def test_required_pool_name_and_node_names():
    inv = inventory(groups={"pool_a": pool_group(["GPU_01"])}, effective={"GPU_01": effective(mode="pgpu")},
                    gpu_hosts=["GPU_01"])
    problems = accel_plan_inventory.check(inv)["hosts"]["GPU_01"]["problems"]
    assert problems[0].startswith("GPU_01: inventory_hostname = 'GPU_01': not an RFC 1123 subdomain")
    assert problems[1].startswith("GPU_01: accel_pool = (not set): required on every GPU host")


# --- one definition: the model's limits are the charts' --------------------------------------------------------

# model variable -> (chart, JSON pointer of the value's schema in that chart's values.schema.json)
SCHEMA_OF = {
    "accel_vgpu_split_count": ("vgpu", "/properties/hami/properties/deviceSplitCount"),
    "accel_vgpu_memory_scaling": ("vgpu", "/properties/hami/properties/deviceMemoryScaling"),
    "accel_vgpu_core_scaling": ("vgpu", "/properties/hami/properties/deviceCoreScaling"),
    "accel_vgpu_scheduler_policy": ("vgpu", "/properties/hami/properties/scheduler/properties/gpuSchedulerPolicy"),
    "accel_mps_replicas": ("mps", "/properties/configs/additionalProperties/properties/replicas"),
    "accel_timeslice_replicas": ("pgpu", "/properties/configs/additionalProperties/properties/timeSlicing/properties/"
                                         "replicas"),
    "accel_mig_strategy": ("pgpu", "/properties/configs/additionalProperties/properties/migStrategy"),
    "accel_pool": ("pgpu", "/properties/pools/items"),
    "accel_image_pull_secrets": ("pgpu", "/properties/global/properties/imagePullSecrets/items"),
    "accel_monitoring_dashboards_namespace": ("monitoring", "/properties/dashboards/properties/namespace"),
    "accel_monitoring_hpa_adapter_namespace": ("monitoring", "/properties/hpaAdapter/properties/namespace"),
}
SAMPLES = [-1, 0, 0.5, 1, 2, 9.99, 10, 10.5, 47, 48, 49, 63, 64, 65, 99, 100, 101, "", "a", "gpu-pool", "Pool_A",
           "p" * 45, "p" * 46, "x.y", "-a", "binpack", "spread", "topology-aware", "none", "single", "mixed", "1e"]


def schema_at(chart, pointer):
    node = json.loads((REPO / "charts" / chart / "values.schema.json").read_text())
    for part in pointer.strip("/").split("/"):
        node = node[part]
    return node


@pytest.mark.parametrize("name", sorted(SCHEMA_OF))
def test_what_the_preflight_passes_the_chart_schema_accepts(name):
    schema = schema_at(*SCHEMA_OF[name])
    entry = accel_inventory.VARIABLES[name]
    for sample in SAMPLES:
        value = [sample] if entry["type"] == "list" else sample
        if value_problems(name, value):
            continue
        element = sample
        assert not list(jsonschema.Draft7Validator(schema).iter_errors(element)), (name, sample)


@pytest.mark.parametrize("name", ["accel_vgpu_split_count", "accel_vgpu_memory_scaling", "accel_vgpu_core_scaling",
                                  "accel_mps_replicas", "accel_timeslice_replicas"])
def test_numeric_limits_are_the_charts(name):
    schema, entry = schema_at(*SCHEMA_OF[name]), accel_inventory.VARIABLES[name]
    assert entry.get("maximum") == schema.get("maximum")
    assert entry.get("minimum") == schema.get("minimum")
    assert entry.get("exclusive_minimum") == schema.get("exclusiveMinimum")


def test_cluster_settings_of_a_component_that_is_off():
    cluster = {"accel_gpu_operator_service_monitor": rec(True, "all.yml:3"),
               "accel_monitoring_rule_labels": rec({"release": "prom"}, "all.yml:4"),
               "accel_gpu_operator_chart_version": rec("v26.7.0", "all.yml:5")}
    inv = inventory(groups={"pool_a": pool_group(["h1"])},
                    effective={"cp": cluster, "h1": {**cluster, **effective(pool="a", mode="pgpu")}},
                    gpu_hosts=["h1"], cluster_host="cp")
    assert accel_plan_inventory.check(inv)["cluster"] == [
        "cp (kube_control_plane[0]): accel_gpu_operator_service_monitor = true (all.yml:3): set while the component it "
        "configures is off (it applies with accel_gpu_operator_enabled true); allowed: remove it, or turn the "
        "component on",
        "cp (kube_control_plane[0]): accel_monitoring_rule_labels = {'release': 'prom'} (all.yml:4): set while the "
        "component it configures is off (it applies with accel_monitoring_enabled true); allowed: remove it, or turn "
        "the component on"]
    on = {"accel_gpu_operator_enabled": rec(True), "accel_monitoring_enabled": rec(True)}
    inv["effective"] = {"cp": {**cluster, **on}, "h1": {**cluster, **on, **effective(pool="a", mode="pgpu")}}
    assert accel_plan_inventory.check(inv)["cluster"] == []


def test_a_hami_pool_needs_the_api_servers_addresses():
    gpu = effective(pool="v", mode="vgpu", vgpu_backend="hami")
    inv = inventory(groups={"pool_v": pool_group(["h1"])}, effective={"cp": {}, "h1": gpu}, gpu_hosts=["h1"],
                    cluster_host="cp")
    (problem,) = accel_plan_inventory.check(inv)["cluster"]
    assert problem.startswith("cp (kube_control_plane[0]): accel_control_plane_cidrs = []: pool(s) v use vGPU "
                              "backend hami")
    assert problem.endswith("; allowed: the API servers' addresses (CIDRs, e.g. [10.0.0.11/32]), or "
                            "[0.0.0.0/0, ::/0] to admit any source")
    cidrs = {"accel_control_plane_cidrs": rec(["10.0.0.11/32"])}
    inv["effective"] = {"cp": cidrs, "h1": {**gpu, **cidrs}}
    assert accel_plan_inventory.check(inv)["cluster"] == []


def test_image_digests_grammar():
    digest = "sha256:" + "a" * 64
    assert whats("accel_image_digests", {"projecthami/hami:v2.10.0": digest, "nvidia/k8s-device-plugin:v0.20.0": ""}
                 ) == []
    (what,) = whats("accel_image_digests", {"docker.io/projecthami/hami": "sha256:abc"})
    assert what == ("key 'docker.io/projecthami/hami' is not \"repository:tag\" without the registry host; the digest "
                    "of 'docker.io/projecthami/hami' is the string 'sha256:abc', not \"sha256:\" and 64 hex digits")


def test_hami_pools_need_the_admission_policies_kubernetes():
    cidrs = {"accel_control_plane_cidrs": rec(["10.0.0.11/32"]), "accel_kubernetes_version": rec("1.29")}
    gpu = {**cidrs, **effective(pool="v", mode="vgpu", vgpu_backend="hami")}
    inv = inventory(groups={"pool_v": pool_group(["h1"]),
                            "kube_control_plane": {"vars": {}, "children": [], "hosts": ["cp"]}},
                    effective={"cp": cidrs, "h1": gpu}, gpu_hosts=["h1"], cluster_host="cp")
    (problem,) = accel_plan_inventory.check(inv)["cluster"]
    assert problem.startswith("cp (kube_control_plane[0]): accel_kubernetes_version = '1.29': pool(s) v use vGPU "
                              "backend hami")
    assert "need Kubernetes 1.30" in problem
    for host in ("cp", "h1"):
        inv["effective"][host]["accel_kubernetes_version"] = rec("1.30")
    assert accel_plan_inventory.check(inv)["cluster"] == []


def test_vgpu_cluster_components_need_a_node_outside_every_pool():
    cidrs = {"accel_control_plane_cidrs": rec(["10.0.0.11/32"])}
    gpu = {**cidrs, **effective(pool="v", mode="vgpu", vgpu_backend="hami")}
    # The only control-plane host is a GPU host of the pool: the schedulers would find no node.
    inv = inventory(groups={"pool_v": pool_group(["h1"]),
                            "kube_control_plane": {"vars": {}, "children": [], "hosts": ["h1"]}},
                    effective={"h1": gpu}, gpu_hosts=["h1"], cluster_host="h1")
    (problem,) = accel_plan_inventory.check(inv)["cluster"]
    assert problem.startswith("h1 (kube_control_plane[0]): accel_cluster_components_on_pool_nodes = false: pool(s) "
                              "v run schedulers")
    flag = {"accel_cluster_components_on_pool_nodes": rec(True)}
    inv["effective"]["h1"] = {**gpu, **flag}
    assert accel_plan_inventory.check(inv)["cluster"] == []
    # A control plane outside every pool hosts them.
    inv["groups"]["kube_control_plane"]["hosts"] = ["cp"]
    inv["cluster_host"], inv["effective"] = "cp", {"cp": cidrs, "h1": gpu}
    assert accel_plan_inventory.check(inv)["cluster"] == []


def test_a_path_spelt_two_ways_is_one_cluster_setting():
    """Two inventory sources template {{ inventory_dir }}/.. differently: the same file is the same setting."""
    cp = {"accel_kubeconfig": rec("inventories/lab/../../.lab/kubeconfig")}
    other = {"accel_kubeconfig": rec("inventories/extra/../../.lab/kubeconfig")}
    inv = inventory(groups={"pool_a": pool_group(["h1"])},
                    effective={"cp": cp, "h1": {**other, **effective(pool="a", mode="pgpu")}},
                    gpu_hosts=["h1"], cluster_host="cp")
    assert accel_plan_inventory.check(inv)["hosts"]["h1"]["problems"] == []
    inv["effective"]["h1"]["accel_kubeconfig"] = rec("/etc/kubernetes/admin.conf")
    assert "a cluster setting that differs" in accel_plan_inventory.check(inv)["hosts"]["h1"]["problems"][0]


def test_a_vgpu_pool_without_a_backend_is_reported_not_crashed_on():
    gpu = {"accel_control_plane_cidrs": rec(["10.0.0.11/32"]), **effective(pool="v", mode="vgpu")}
    inv = inventory(groups={"pool_v": pool_group(["h1"])}, effective={"h1": gpu}, gpu_hosts=["h1"])
    out = accel_plan_inventory.check(inv)
    assert out["cluster"] == [] and out["hosts"]["h1"]["settings"]["accel_mode"] == "vgpu"


def test_the_driver_flavor_of_a_preinstalled_image_is_the_images():
    inv = inventory(groups={"pool_a": pool_group(["h1"], driver_flavor="open")},
                    effective={"h1": effective(pool="a", mode="pgpu", driver_source="preinstalled",
                                               driver_flavor="open")}, gpu_hosts=["h1"])
    (problem,) = accel_plan_inventory.check(inv)["hosts"]["h1"]["problems"]
    assert "it applies with accel_driver_source distro or cuda-repo" in problem
