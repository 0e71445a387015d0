"""kube-accel's GPU Operator values and node labels against the upstream gpu-operator v26.7.0 it deploys.

Evidence comes from the pinned source tree (upstream.src): the chart (deployments/gpu-operator: values.yaml,
templates, the vendored NFD subchart and the ClusterPolicy CRD) and the node-labelling controller
(controllers/state_manager.go, controllers/nodelabeling_controller.go). Label keys and values are parsed from the
Go source, not restated here.
"""

from __future__ import annotations

import copy
import re
import subprocess
import tempfile
from functools import cache
from pathlib import Path

import jsonschema
import pytest
import upstream
import yaml
from ansible_collections.kube_accel.gpu.plugins.module_utils.cluster import labels as accel_labels
from ansible_collections.kube_accel.gpu.plugins.module_utils.common import constants as accel_constants
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm import operator_values as opv
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import pools as accel_pools
from chartlib import REPO, tool
from test_operator_values import LAB_POOLS, MIG_POOL, variant  # the inputs the existing operator tests use

# --- upstream chart ------------------------------------------------------------------------------------------------

@cache
def src() -> Path:
    return upstream.src(upstream.GPU_OPERATOR)


@cache
def chart_dir() -> Path:
    return src() / "deployments" / "gpu-operator"


@cache
def chart_values() -> dict:
    return yaml.safe_load((chart_dir() / "values.yaml").read_text())


@cache
def crd_schema() -> dict:
    crd = yaml.safe_load((chart_dir() / "crds" / "nvidia.com_clusterpolicies.yaml").read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["storage"]]
    return version["schema"]["openAPIV3Schema"]


def strict(schema: dict) -> dict:
    """A CRD structural schema as JSON Schema the way the API server's strict field validation applies it:
    unknown fields are errors unless the schema preserves them; int-or-string and nullable as Kubernetes means."""
    out = {k: v for k, v in schema.items() if not k.startswith("x-kubernetes-") and k not in ("nullable",)}
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if "properties" in schema:
        out["properties"] = {k: strict(v) for k, v in schema["properties"].items()}
        if not schema.get("x-kubernetes-preserve-unknown-fields") and "additionalProperties" not in schema:
            out["additionalProperties"] = False
    if isinstance(schema.get("additionalProperties"), dict):
        out["additionalProperties"] = strict(schema["additionalProperties"])
    if "items" in schema:
        out["items"] = strict(schema["items"])
    for key in ("anyOf", "allOf", "oneOf"):
        if key in schema:
            out[key] = [strict(s) for s in schema[key]]
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


@cache
def crd_validator() -> jsonschema.Draft7Validator:
    schema = strict(crd_schema())
    # metadata is ObjectMeta, validated by the API server itself, not by the CRD.
    schema["properties"]["metadata"] = {"type": "object"}
    return jsonschema.Draft7Validator(schema)


def crd_errors(obj: dict) -> list[str]:
    return sorted(f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in crd_validator().iter_errors(obj))


# --- values kube-accel generates -------------------------------------------------------------------------------------

def inventory_hosts(name: str) -> dict[str, dict]:
    """host -> merged group_vars of its pool (as tests/charts/test_release_values.py reads an inventory)."""
    base = REPO / "inventories" / name
    groups = yaml.safe_load((base / "hosts.yml").read_text())["all"]["children"]["gpu_pools"]["children"]
    common = yaml.safe_load((base / "group_vars" / "gpu_pools.yml").read_text())
    return {host: {**common, **yaml.safe_load((base / "group_vars" / f"{group}.yml").read_text())}
            for group, body in groups.items() for host in body["hosts"]}


def role_cluster_settings(name: str) -> dict:
    """roles/gpu_operator's gpu_operator_cluster, templated by Ansible with the inventory's group_vars/all.yml."""
    from ansible.parsing.dataloader import DataLoader  # noqa: PLC0415
    from ansible.template import Templar, trust_as_template  # noqa: PLC0415

    defaults = yaml.safe_load((REPO / "roles" / "gpu_operator" / "defaults" / "main.yml").read_text())
    variables = yaml.safe_load((REPO / "inventories" / name / "group_vars" / "all.yml").read_text())
    templar = Templar(loader=DataLoader(), variables=variables)
    # Role defaults are trusted templates, as Ansible treats them when it loads the role.
    return {k: templar.template(trust_as_template(v)) for k, v in defaults["gpu_operator_cluster"].items()}


def inventory_values(name: str) -> dict:
    pools = accel_pools.collect_pools(inventory_hosts(name))
    return opv.gpu_operator_values(pools, role_cluster_settings(name))


# Every case the project generates: both inventories through the role's own settings, and the inputs of
# tests/charts/test_operator_values.py.
CASES = {
    "inventory-example": lambda: inventory_values("example"),
    "inventory-lab": lambda: inventory_values("lab"),
    "lab-pools": lambda: opv.gpu_operator_values(LAB_POOLS, {"service_monitor": False}),
    "registry-nfd-gfd": lambda: opv.gpu_operator_values(LAB_POOLS, {
        "image_registry": "registry.dc1.example.net/mirror", "image_pull_secrets": ["mirror-pull"],
        "service_monitor": True, "nfd": True, "gfd": True, "service_monitor_labels": {"release": "prom"}}),
    "no-mig": lambda: opv.gpu_operator_values([p for p in LAB_POOLS if p is not MIG_POOL]),
    "single-strategy-toggles": lambda: opv.gpu_operator_values(
        [variant(MIG_POOL, pool="mig-single", mig_strategy="single", mig_geometry={"1g.10gb": 7})],
        {"driver_managed_by_kube_accel": False, "toolkit_managed_by_kube_accel": False, "dcgm_exporter": False,
         "service_monitor": True, "mig_with_reboot": True, "cdi": True}),
    "taints": lambda: opv.gpu_operator_values(accel_pools.collect_pools(
        {"lab-mig-0": {"accel_pool": "mig", "accel_mode": "pgpu", "accel_mig_strategy": "mixed",
                       "accel_mig_geometry": {"7g.80gb": 1}, "accel_node_taint": True}})),
    "image-override": lambda: opv.gpu_operator_values(
        [], {"image_overrides": {"dcgmExporter": {"version": "4.6.1-4.8.4-distroless"}}}),
}


@cache
def rendered(case: str) -> tuple[dict, list[dict]]:
    """(values, objects) of ``helm template`` of the upstream chart with one case's values."""
    values = CASES[case]()
    helm = tool("helm")
    assert helm, "helm not installed: scripts/toolchain.sh pins it under ~/.cache/kube-accel/bin"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{case}.yaml"
        path.write_text(yaml.safe_dump(values))
        # The NFD subchart is vendored (charts/node-feature-discovery): no repository is needed. Nothing is
        # written into the chart.
        proc = subprocess.run([helm, "template", "gpu-operator", str(chart_dir()), "--namespace", "gpu-operator",
                               "--kube-version", "1.36.0", "--values", str(path)],
                              capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, f"helm template gpu-operator ({case}) failed:\n{proc.stderr}"
    return values, [d for d in yaml.safe_load_all(proc.stdout) if d]


def cluster_policy(objs: list[dict]) -> dict:
    (cp,) = [o for o in objs if o["kind"] == "ClusterPolicy"]
    return cp


def leaves(tree: dict, prefix: tuple = ()):
    """Paths of every leaf (a scalar, a list, or a dict under a key that takes free-form keys)."""
    for key, value in tree.items():
        path = (*prefix, key)
        free_form = key in ("additionalLabels", "data")
        if isinstance(value, dict) and value and not free_form:
            yield from leaves(value, path)
        else:
            yield path


# --- where the chart reads its values ---------------------------------------------------------------------------------

VALUES_REF = re.compile(r"(toYaml\s+|with\s+)?\.Values\.([A-Za-z0-9_.]+)")


@cache
def value_reads(templates: Path) -> tuple[dict, dict]:
    """(exact, whole): dotted .Values path -> "file:line" of its first read; ``whole`` are the paths read as a
    whole subtree (toYaml or a with-block), which reads every key under them."""
    exact: dict[str, str] = {}
    whole: dict[str, str] = {}
    for path in sorted(templates.glob("*")):
        if path.suffix not in (".yaml", ".tpl"):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for match in VALUES_REF.finditer(line):
                where = f"{path.relative_to(src())}:{number}"
                exact.setdefault(match.group(2), where)
                if match.group(1):
                    whole.setdefault(match.group(2), where)
    return exact, whole


def read_at(path: tuple[str, ...]) -> str | None:
    """Where the chart reads the value at ``path`` ("file:line"), or None when no template reads it."""
    templates = chart_dir() / "templates"
    if path[0] == "node-feature-discovery":  # subchart values: read by the subchart's own templates
        templates, path = chart_dir() / "charts" / "node-feature-discovery" / "templates", path[1:]
    exact, whole = value_reads(templates)
    dotted = ".".join(path)
    if dotted in exact:
        return exact[dotted]
    for i in range(len(path) - 1, 0, -1):
        if ".".join(path[:i]) in whole:
            return whole[".".join(path[:i])]
    return None


# --- 1. conformance: rendered ClusterPolicy and values keys ---------------------------------------------------------

@pytest.mark.parametrize("case", sorted(CASES))
def test_cluster_policy_is_valid_for_the_crd(case):
    """The ClusterPolicy the chart renders from our values passes the CRD's schema, unknown fields included."""
    _, objs = rendered(case)
    assert crd_errors(cluster_policy(objs)) == []


def test_strict_crd_validation_catches_what_the_api_server_refuses():
    """The validator is not vacuous: an unknown field, a bad enum, a wrong type and a missing required field."""
    _, objs = rendered("lab-pools")
    cp = cluster_policy(objs)
    cases = [
        (("spec", "dcgmExporter", "bogus"), True, "Additional properties are not allowed ('bogus' was unexpected)"),
        (("spec", "mig", "strategy"), "per-node", "is not one of"),
        (("spec", "migManager", "config", "default"), "kube-accel-7g.80gb-1", "is not one of"),
        (("spec", "migManager", "enabled"), "yes", "'yes' is not of type 'boolean'"),
        (("spec", "toolkit"), KeyError, "'toolkit' is a required property"),
    ]
    for path, value, message in cases:
        bad = copy.deepcopy(cp)
        node = bad
        for part in path[:-1]:
            node = node[part]
        if value is KeyError:
            del node[path[-1]]
        else:
            node[path[-1]] = value
        assert any(message in e for e in crd_errors(bad)), (path, crd_errors(bad))


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_value_is_read_by_the_chart(case):
    """A key the chart never reads is a silent no-op (14.11: operator.defaultRuntime, gone from v26.7.0's
    templates/clusterpolicy.yaml although its CRD still lists it as deprecated)."""
    values, _ = rendered(case)
    unread = [".".join(p) for p in leaves(values) if read_at(p) is None]
    assert unread == [], f"values no template of gpu-operator v26.7.0 reads: {unread}"


def test_relied_on_values_trace_to_their_template():
    """Each value kube-accel relies on, with the template line that consumes it (printed with -rA)."""
    values, objs = rendered("inventory-example")
    trace = {".".join(p): read_at(p) for p in leaves(values)}
    for key in ("driver.enabled", "toolkit.enabled", "devicePlugin.enabled", "migManager.enabled",
                "migManager.config.name", "migManager.config.data", "migManager.env", "dcgmExporter.enabled",
                "dcgmExporter.serviceMonitor.additionalLabels", "psa.enabled", "validator.image", "mig.strategy",
                "daemonsets.tolerations", "sandboxWorkloads.enabled", "nodeStatusExporter.enabled"):
        assert trace.get(key), key
        print(f"{key:48} {trace[key]}")
    spec = cluster_policy(objs)["spec"]
    assert spec["driver"]["enabled"] is False and spec["toolkit"]["enabled"] is False
    assert spec["devicePlugin"]["enabled"] is False and spec["migManager"]["enabled"] is True
    assert spec["migManager"]["config"] == {"name": opv.MIG_PARTED_CONFIGMAP, "default": "all-disabled"}
    (cm,) = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == opv.MIG_PARTED_CONFIGMAP]
    assert yaml.safe_load(cm["data"]["config.yaml"])["version"] == "v1"


# --- 2. defects -----------------------------------------------------------------------------------------------------

def test_images_follow_the_chart_defaults():
    """14.3: every operand image is the chart's default (values.yaml); the validator and the node-status exporter
    ship in the operator image, whose tag defaults to the chart's appVersion (templates/_helpers.tpl
    validator.fullimage), pinned to the release we target."""
    upstream_values = chart_values()
    for operand, (repository, image, version) in opv.IMAGES.items():
        node = upstream_values
        for part in operand.split("."):
            node = node[part]
        assert (repository, image) == (node["repository"], node["image"]), operand
        assert version == str(node.get("version") or opv.OPERATOR_CHART_VERSION), operand
    _, objs = rendered("lab-pools")
    spec = cluster_policy(objs)["spec"]
    for operand in ("validator", "nodeStatusExporter"):
        assert (spec[operand]["repository"], spec[operand]["image"], spec[operand]["version"]) == (
            "nvcr.io/nvidia", "gpu-operator", opv.OPERATOR_CHART_VERSION)
    (deploy,) = [o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == "gpu-operator"]
    env = {e["name"]: e.get("value") for e in deploy["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["VALIDATOR_IMAGE"] == f"nvcr.io/nvidia/gpu-operator:{opv.OPERATOR_CHART_VERSION}"


def test_service_monitor_labels_reach_the_service_monitor():
    """14.13: accel_gpu_operator_service_monitor_labels -> dcgmExporter.serviceMonitor.additionalLabels, which the
    operator copies onto the ServiceMonitor (controllers/object_controls.go, AdditionalLabels)."""
    inventory = yaml.safe_load((REPO / "inventories" / "example" / "group_vars" / "all.yml").read_text())
    wanted = inventory["accel_gpu_operator_service_monitor_labels"]
    values, objs = rendered("inventory-example")
    assert values["dcgmExporter"]["serviceMonitor"]["additionalLabels"] == wanted
    assert cluster_policy(objs)["spec"]["dcgmExporter"]["serviceMonitor"]["additionalLabels"] == wanted
    monitor_types = (src() / "api" / "nvidia" / "v1" / "clusterpolicy_types.go").read_text()
    assert 'AdditionalLabels map[string]string `json:"additionalLabels,omitempty"`' in monitor_types


def test_operator_labels_its_namespace_for_pod_security():
    """psa.enabled reaches the ClusterPolicy (templates/clusterpolicy.yaml psa block)."""
    for case in ("inventory-example", "inventory-lab"):
        _, objs = rendered(case)
        assert cluster_policy(objs)["spec"]["psa"] == {"enabled": True}, case


# --- 14.4: node labels against the operator's node-labelling controller ----------------------------------------------

def go_source(name: str) -> tuple[str, list[str]]:
    text = (src() / "controllers" / name).read_text()
    return text, text.splitlines()


def go_line(name: str, needle: str) -> str:
    _, lines = go_source(name)
    (number,) = [i for i, line in enumerate(lines, 1) if needle in line]
    return f"controllers/{name}:{number}"


@cache
def go_constants() -> dict[str, str]:
    text, _ = go_source("state_manager.go")
    return dict(re.findall(r'^\s+(\w+)\s*=\s*"([^"]*)"', text, re.M))


def go_function(name: str, signature: str) -> str:
    """The body of a top-level Go function (up to the next line that is a lone closing brace)."""
    text, _ = go_source(name)
    return text.split(signature, 1)[1].split("\n}\n", 1)[0]


def go_map(name: str, opening: str) -> dict[str, str]:
    """A Go map[string]string literal whose block opens with ``opening``; constant keys are resolved."""
    text, _ = go_source(name)
    body = text.split(opening, 1)[1].split("}", 1)[0]
    consts = go_constants()
    out = {}
    for key, value in re.findall(r'^\s*("[^"]+"|\w+)\s*:\s*"([^"]*)"', body, re.M):
        out[key.strip('"') if key.startswith('"') else consts[key]] = value
    assert out, f"no map entries after {opening!r} in {name}"
    return out


@cache
def operator_labels() -> dict:
    """What gpu-operator v26.7.0's node labelling reads and writes, parsed from its source."""
    consts = go_constants()
    return {
        "gpu_node_labels": go_map("state_manager.go", "var gpuNodeLabels = map[string]string{"),
        "container_state": go_map("state_manager.go", "gpuWorkloadConfigContainer: {"),
        "common": (consts["commonGPULabelKey"], consts["commonGPULabelValue"]),
        "operands": consts["commonOperandsLabelKey"],
        "mig_capable": (consts["migCapableLabelKey"], consts["migCapableLabelValue"]),
        "mig_manager": (consts["migManagerLabelKey"], consts["migManagerLabelValue"]),
        "mig_config": (consts["migConfigLabelKey"], consts["migConfigDisabledValue"]),
        "product": consts["gpuProductLabelKey"],
        # Product names hasMIGCapableGPU takes for MIG capable when mig.capable is absent.
        "mig_products": tuple(re.findall(r'strings\.Contains\(strings\.ToLower\(value\), "(\w+)"\)',
                                         go_function("state_manager.go", "func hasMIGCapableGPU("))),
    }


def test_upstream_label_sources_are_where_we_read_them():
    """The model below follows these functions; they must still be there (file:line in the failure)."""
    for name, needle in [("state_manager.go", "var gpuNodeLabels = map[string]string{"),
                         ("state_manager.go", "func hasGPULabels("),
                         ("state_manager.go", "func hasOperandsDisabled("),
                         ("state_manager.go", "func (w *gpuWorkloadConfiguration) addGPUStateLabels("),
                         ("state_manager.go", "func (w *gpuWorkloadConfiguration) removeGPUStateLabels("),
                         ("state_manager.go", "func removeAllGPUStateLabels("),
                         ("nodelabeling_controller.go", "func (nlc *nodeLabelingController) reconcileCommonGPULabel("),
                         ("nodelabeling_controller.go", "func (nlc *nodeLabelingController) updateGPUStateLabels(")]:
        assert go_line(name, needle)
    labels = operator_labels()
    # What kube-accel writes is what the operator reads (docs/inventory.md "Node labels").
    assert accel_constants.UPSTREAM_LABELS["nfd_pci_nvidia"] in labels["gpu_node_labels"]
    assert (accel_constants.UPSTREAM_LABELS["gpu_present"], "true") == labels["common"]
    assert accel_constants.UPSTREAM_LABELS["deploy_operands"] == labels["operands"]
    assert accel_constants.UPSTREAM_LABELS["mig_capable"] == labels["mig_capable"][0]
    assert accel_constants.UPSTREAM_LABELS["mig_config"] == labels["mig_config"][0]
    assert accel_constants.UPSTREAM_LABELS["deploy_device_plugin"] in labels["container_state"]


def mig_capable_gpu(labels: dict[str, str]) -> bool:
    """state_manager.go hasMIGCapableGPU (no vGPU host driver here): mig.capable decides where present, else the
    GPU product label."""
    up = operator_labels()
    key, value = up["mig_capable"]
    if key in labels:
        return labels[key] == value
    return any(p in labels.get(up["product"], "").lower() for p in up["mig_products"])


def operator_reconcile(node: dict[str, str], mig_manager_enabled: bool = True) -> dict[str, str]:
    """A model of one pass of the operator's node labelling with a ClusterPolicy, sandbox workloads off
    (nodelabeling_controller.go reconcileCommonGPULabel, updateGPUStateLabels; state_manager.go
    add/remove/removeAllGPUStateLabels), built on the label keys parsed from the source."""
    up = operator_labels()
    labels = dict(node)
    common_key, common_value = up["common"]
    has_gpu = any(labels.get(k) == v for k, v in up["gpu_node_labels"].items())
    present = labels.get(common_key) == common_value
    if has_gpu and not present:
        labels[common_key] = common_value
    elif present and not has_gpu:
        labels[common_key] = "false"
    state_keys = set(up["container_state"]) | {up["mig_manager"][0]}
    if labels.get(common_key) != common_value or labels.get(up["operands"]) == "false":
        return {k: v for k, v in labels.items() if k not in state_keys}
    for key, value in up["container_state"].items():
        if not labels.get(key):  # a non-empty value is honoured
            labels[key] = value
    mig_capable = mig_capable_gpu(labels)
    if mig_capable and up["mig_manager"][0] not in labels:
        labels[up["mig_manager"][0]] = up["mig_manager"][1]
    if mig_manager_enabled and mig_capable and not labels.get(up["mig_config"][0]):
        labels[up["mig_config"][0]] = up["mig_config"][1]
    return labels


def pool_cases():
    for inventory in ("example", "lab"):
        for pool in accel_pools.collect_pools(inventory_hosts(inventory)):
            yield pytest.param(pool["settings"], id=f"{inventory}-{pool['pool']}")
    for pool in LAB_POOLS:
        yield pytest.param(pool["settings"], id=f"test-{pool['pool']}")
    yield pytest.param(variant(MIG_POOL, pool="mig-host", mig_owner="host")["settings"], id="test-mig-host")


@pytest.mark.parametrize("settings", list(pool_cases()))
def test_node_labels_and_the_operator_agree(settings):
    """14.4: without NFD the operator clears gpu.present and every gpu.deploy.* label on a node lacking NFD's
    NVIDIA PCI label, so mig-manager and the DCGM exporter never ran. kube-accel's labels must survive the
    operator's pass (no fight), and that pass must deploy what kube-accel relies on."""
    up = operator_labels()
    assert up["mig_products"] == ("h100", "a100", "a30"), go_line("state_manager.go", "func hasMIGCapableGPU(")
    desired = accel_pools.node_labels(settings)
    managed = accel_pools.managed_label_keys()
    # The node as GFD (or the lab's stand-in for it) publishes its GPU: a MIG-capable model on every pool, so the
    # operator's product-name fallback is exercised where kube-accel does not want its MIG manager.
    node = {**desired, up["product"]: "NVIDIA-A100-SXM4-80GB"}
    after_operator = operator_reconcile(node)
    patch = accel_labels.node_patch(after_operator, [], desired, managed, [], set())
    assert patch is None, f"the cluster play would undo the operator ({go_line('state_manager.go', 'gpuNodeLabels =')}"
    assert operator_reconcile(after_operator) == after_operator
    common_key, common_value = up["common"]
    assert after_operator[common_key] == common_value
    exporter = accel_constants.UPSTREAM_LABELS["deploy_device_plugin"].replace("device-plugin", "dcgm-exporter")
    mig_manager = up["mig_manager"][0]
    operator_mig = accel_pools.operator_mig(settings)
    if accel_pools.setting_on(settings, "accel_vfio_passthrough"):
        # No driver on vfio-bound GPUs: no operand may land there.
        assert not [k for k in after_operator if k in up["container_state"] or k == mig_manager]
    else:
        assert after_operator[exporter] == "true"
        assert after_operator[accel_constants.UPSTREAM_LABELS["deploy_device_plugin"]] == "false"
        assert (after_operator.get(mig_manager) == up["mig_manager"][1]) is operator_mig
    if operator_mig:
        assert after_operator[up["mig_config"][0]] == accel_pools.mig_config_name(settings)


def test_operator_outputs_kube_accel_also_writes_carry_the_operators_value():
    """A gpu.deploy.* label the operator writes and kube-accel manages (other than device-plugin=false, an input
    the operator honours) must carry the operator's own value wherever kube-accel sets it, or the two alternate."""
    up = operator_labels()
    outputs = {**up["container_state"], up["mig_manager"][0]: up["mig_manager"][1]}
    shared = (set(outputs) & accel_pools.managed_label_keys()) - {accel_constants.UPSTREAM_LABELS[
        "deploy_device_plugin"]}
    for param in pool_cases():
        (settings,) = param.values
        labels = accel_pools.node_labels(settings)
        for key in shared & set(labels):
            assert labels[key] == outputs[key], (param.id, key)


# --- Pod Security and the cluster play --------------------------------------------------------------------------------

def test_cluster_play_checks_pod_security_before_installing():
    """The namespace check runs in pre_tasks (before pool_labels, pool_charts, gpu_operator) and
    covers both namespaces the play installs into; the operator role labels its namespace before helm."""
    (play,) = yaml.safe_load((REPO / "ansible" / "cluster.yml").read_text())
    (task,) = [t for t in play["pre_tasks"] if "kube_accel.gpu.accel_namespaces" in t]
    spec = task["kube_accel.gpu.accel_namespaces"]
    assert "cluster_charts_namespace" in spec["namespaces"] and "cluster_operator_namespace" in spec["namespaces"]
    roles = {r["role"].removeprefix("kube_accel.gpu."): r.get("vars", {}) for r in play["roles"]}
    assert roles["pool_charts"]["pool_charts_namespace"] == "{{ cluster_charts_namespace }}"
    assert roles["gpu_operator"]["gpu_operator_namespace"] == "{{ cluster_operator_namespace }}"
    tasks = yaml.safe_load((REPO / "roles" / "gpu_operator" / "tasks" / "main.yml").read_text())
    (block,) = [t for t in tasks if "block" in t and t["name"] == "Install the GPU Operator"]
    names = [next(k for k in t if k not in ("name", "when")) for t in block["block"]]
    assert names.index("kube_accel.gpu.accel_namespaces") < names.index("kube_accel.gpu.accel_release")


def test_redhat_toolkit_repository_checks_signatures():
    """Packages and metadata are checked against NVIDIA's published key; dnf reads that key
    from the local copy the role wrote after checking its fingerprint (tasks/repo_key.yml, imported first)."""
    tasks = yaml.safe_load((REPO / "roles" / "container_toolkit" / "tasks" / "repo-redhat.yml").read_text())
    assert tasks[0]["ansible.builtin.import_tasks"] == "repo_key.yml"
    (repo,) = [t["ansible.builtin.yum_repository"] for t in tasks if "ansible.builtin.yum_repository" in t]
    assert repo["gpgcheck"] is True and repo["repo_gpgcheck"] is True
    assert repo["gpgkey"] == "file://{{ container_toolkit_keyring }}"
    rh_vars = yaml.safe_load((REPO / "roles" / "container_toolkit" / "vars" / "RedHat.yml").read_text())
    assert rh_vars["container_toolkit_keyring"].startswith("/etc/pki/rpm-gpg/")
    defaults = yaml.safe_load((REPO / "roles" / "container_toolkit" / "defaults" / "main.yml").read_text())
    assert defaults["container_toolkit_repo_key_url"] == "{{ container_toolkit_repo_base_url }}/gpgkey"
    assert defaults["container_toolkit_repo_base_url"] == "https://nvidia.github.io/libnvidia-container"


def test_runtime_class_matches_the_toolkit_role():
    """Operands run with runtimeClassName operator.runtimeClass when CDI is off (object_controls.go
    setRuntimeClassName): the host runtime handler container_toolkit configures must have that name."""
    defaults = yaml.safe_load((REPO / "roles" / "container_toolkit" / "defaults" / "main.yml").read_text())
    _, objs = rendered("inventory-example")
    assert cluster_policy(objs)["spec"]["operator"]["runtimeClass"] == defaults["container_toolkit_runtime_name"]
    assert go_line("object_controls.go", "func setRuntimeClassName(")



# --- the controller as a lab process (scripts/kalab/upstream.py) -----------------------------------------------------

def test_lab_controller_that_cannot_start_stops_lab_up_with_its_own_log_lines(tmp_path):
    """A component that fails to start stops `lab.py up` with its own last log lines. The chart's
    gpu-operator container (rendered with the lab's values) run as the lab runs it, against an API server that does
    not answer: the controller's own error comes back, and no process is left."""
    from kalab.processes import running
    from kalab.upstream import run_gpu_operator

    upstream.binary("gpu-operator")
    _, objs = rendered("inventory-lab")
    (deploy,) = [o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == "gpu-operator"]
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    kubeconfig = tmp_path / "kubeconfig"
    port = upstream.free_ports(1)[0]  # nothing listens there
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "x", "cluster": {"server": f"https://127.0.0.1:{port}"}}],
        "users": [{"name": "x", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}]}))
    with pytest.raises(SystemExit) as exc:
        run_gpu_operator(tmp_path, kubeconfig, container, src(), "gpu-operator")
    message = str(exc.value)
    assert "gpu-operator exited with 1" in message, message
    assert f"127.0.0.1:{port}" in message and "connection refused" in message, message
    assert running(tmp_path) == {}
