"""accel_k8s_names (the preflight's checks of inventory values that become Kubernetes names) agrees with
k8s.io/apimachinery/pkg/util/validation, the code the API server runs: IsValidLabelValue, IsQualifiedName (label
keys), IsDNS1123Label (namespaces) and IsDNS1123Subdomain (Secret names), called through the ka-conform-deviceplugin
harness at the apimachinery version k8s-device-plugin v0.20.0 pins. Evidence: upstream code, on edge cases of each rule
and on every name the example and lab inventories use."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import upstream
import yaml
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import k8s_names as names

REPO = Path(__file__).resolve().parents[2]

EDGES = [
    "", "a", "A", "0", "-", "_", ".", "a-b", "a_b", "a.b", "a..b", "-a", "a-", "_a", "a_", ".a", "a.", "Ab", "aB",
    "a b", "a/b", "ab/cd", "a.b/c", "A.b/c", "a_b/c", "/a", "a/", "a/b/c", "example.com/team", "kube-accel.io/pool",
    "x" * 63, "x" * 64, "a" * 62 + "-", ("a" * 63 + ".") * 3 + "a" * 61, ("a" * 63 + ".") * 4, "é", "a\n",
    "10.0.0.1", "1-2-3", "kube-system", "Kube-Accel", "mirror.example.com:5000",
]


def inventory_names() -> set[str]:
    found = set()
    for inventory in ("example", "lab"):
        for path in (REPO / "inventories" / inventory).rglob("*.yml"):
            data = yaml.safe_load(path.read_text()) or {}
            for key in ("accel_pool", "accel_namespace"):
                if isinstance(data, dict) and isinstance(data.get(key), str):
                    found.add(data[key])
    return found


@pytest.fixture(scope="module")
def upstream_report(tmp_path_factory) -> dict:
    values = sorted(set(EDGES) | inventory_names())
    path = tmp_path_factory.mktemp("names") / "names.json"
    path.write_text(json.dumps({"labelValues": values, "labelKeys": values, "dns1123Labels": values,
                                "dns1123Subdomains": values}))
    proc = upstream.run("ka-conform-deviceplugin", "names", str(path))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize(("kind", "ours"), [("labelValues", names.label_value), ("labelKeys", names.label_key),
                                            ("dns1123Labels", names.dns1123_label),
                                            ("dns1123Subdomains", names.dns1123_subdomain)])
def test_same_verdict_as_apimachinery(upstream_report, kind, ours):
    report = upstream_report[kind]
    assert len(report) == len(set(EDGES) | inventory_names())
    disagree = {value: {"apimachinery": problems, "kube-accel": ours(value)} for value, problems in report.items()
                if bool(problems) != bool(ours(value))}
    assert disagree == {}
    # The edge cases hold both verdicts, so agreement is not agreement on "everything is valid".
    assert any(report.values()) and not all(report.values())
