"""The opaque configs of kube-accel's dra pools against NVIDIA's DRA driver v0.4.1's own code: every sharing setting
kube-accel accepts, and a set it refuses, rendered by the pool model (plan.pools.dra_opaque_config) and run through
the driver's strict decoding, Normalize and Validate as its kubelet plugin runs them when it prepares a claim
(ka-conform-dra-config: tests/conformance/go/dra-config, built into the plugin's package by scripts/upstream.sh from
../shared/upstream/dra-driver-nvidia-gpu-v0.4.1.tar.gz), with the feature gates the inventory sets, through the
driver's own gate registry. The preflight (accel_plan.host_problems on the recorded snapshot of the pool's GPU) must
accept exactly what the driver accepts; where kube-accel is stricter on purpose (STRICTER), the test shows that the
driver's decoding and validation take the value and names why kube-accel does not.

The feature gates themselves: every name kube-accel knows (common.constants.DRA_FEATURE_GATES) is one the driver
registers, and kube-accel's check of a gate mapping (plan.values, dra_feature_gates) refuses exactly the mappings the
driver's --feature-gates parsing and ValidateFeatureGates refuse.
"""

from __future__ import annotations

import itertools
import json
import subprocess
from dataclasses import dataclass

import pytest
import upstream
from ansible_collections.kube_accel.gpu.plugins.module_utils.common.constants import DRA_FEATURE_GATES
from ansible_collections.kube_accel.gpu.plugins.module_utils.host import gpu_facts as accel_gpu_facts
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import pools as ap
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import rules as plan
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.grammars import quantity_bytes
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.values import value_problems
from chartlib import REPO

HARNESS = "ka-conform-dra-config"
SNAPSHOTS = REPO / "tests" / "data" / "nvml"
ON = {"MPSSupport": True, "TimeSlicingSettings": True}
MIG = {"mig_strategy": "mixed", "mig_owner": "host", "mig_geometry": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}}


@dataclass(frozen=True)
class Case:
    id: str
    values: dict
    snapshot: str
    asks: object

    def __hash__(self):
        return hash(self.id)


def case(title, gates=None, snapshot="h100-80gb", asks=None, **settings):
    """A dra pool: its inventory settings (accel_ + keyword), the cluster's gates, the GPU it runs on. ``asks``:
    the config the setting asks the driver for where the pool model writes none (a field the driver lacks)."""
    values = {"accel_kubernetes_version": "1.36", "accel_driver_branch": "580", "accel_pool": "d",
              "accel_mode": "dra", "accel_dra_feature_gates": dict(ON if gates is None else gates),
              **{f"accel_{k}": v for k, v in settings.items()}}
    return Case(title, values, snapshot, asks)


def with_interval(config):
    return {**config, "sharing": {**config["sharing"], "timeSlicingConfig": {"interval": "Long"}}}


CASES = [
    # Accepted by both.
    case("exclusive, no gates", gates={}),
    case("exclusive, gates on"),
    *[case(f"timeslice {i}", dra_sharing="timeslice", dra_timeslice_interval=i)
      for i in ("Default", "Short", "Medium", "Long")],
    case("timeslice interval unset", dra_sharing="timeslice"),
    case("mps, driver defaults", dra_sharing="mps"),
    *[case(f"mps threads {n}", dra_sharing="mps", dra_mps_active_thread_percentage=n) for n in (1, 25, 100)],
    *[case(f"mps pinned {q}", dra_sharing="mps", dra_mps_pinned_memory_limit=q)
      for q in ("1Mi", "512Mi", "10Gi", "1.5Gi", "2G", "1e9", "1048576000m", "80Gi")],
    case("mps 25% and 10Gi", dra_sharing="mps", dra_mps_active_thread_percentage=25,
         dra_mps_pinned_memory_limit="10Gi"),
    case("MIG exclusive", snapshot="a100-80gb", **MIG),
    case("MIG timeslice", snapshot="a100-80gb", dra_sharing="timeslice", **MIG),
    case("MIG mps with limits", snapshot="a100-80gb", dra_sharing="mps", dra_mps_active_thread_percentage=50,
         dra_mps_pinned_memory_limit="4Gi", **MIG),
    case("MIG single", snapshot="a100-80gb", dra_sharing="mps", mig_strategy="single", mig_owner="host",
         mig_geometry={"1g.10gb": 7}),
    # Refused by both.
    case("timeslice without its gate", gates={"MPSSupport": True}, dra_sharing="timeslice"),
    case("mps without its gate", gates={"TimeSlicingSettings": True}, dra_sharing="mps"),
    case("mps with the gate off", gates={"MPSSupport": False}, dra_sharing="mps", dra_mps_active_thread_percentage=25),
    case("MIG timeslice without its gate", gates={}, snapshot="a100-80gb", dra_sharing="timeslice", **MIG),
    case("MIG mps without its gate", gates={}, snapshot="a100-80gb", dra_sharing="mps", **MIG),
    *[case(f"interval {i!r}", dra_sharing="timeslice", dra_timeslice_interval=i) for i in ("short", "Longest", "")],
    *[case(f"mps threads {n}", dra_sharing="mps", dra_mps_active_thread_percentage=n) for n in (101, -1, 1000)],
    *[case(f"mps pinned {q!r}", dra_sharing="mps", dra_mps_pinned_memory_limit=q)
      for q in ("10GB", "10 Gi", "ten", "", "1Gi2")],
    case("MIG interval", snapshot="a100-80gb", asks=with_interval, dra_sharing="timeslice",
         dra_timeslice_interval="Long", **MIG),
]

# Values the driver's decoding and Validate take that the preflight refuses, and why.
STRICTER = [
    (case("mps threads 0", dra_sharing="mps", dra_mps_active_thread_percentage=0),
     "validate.go takes 0..100; 0 % of the SMs leaves a client nothing to run on"),
    *[(case(f"mps pinned {q!r}", dra_sharing="mps", dra_mps_pinned_memory_limit=q),
       "Validate does not look at the limit; preparing a claim turns it into whole MiB (sharing.go limit.Megabyte) and "
       "fails on 0 or less, after the claim was allocated") for q in ("512Ki", "1M", "10", "-1Gi", "0")],
    (case("mps pinned ' 10Gi'", dra_sharing="mps", dra_mps_pinned_memory_limit=" 10Gi"),
     "Quantity.UnmarshalJSON trims spaces; kube-accel takes the value as written"),
]


def gpus(name):
    return accel_gpu_facts.gather(accel_gpu_facts.RecordedSource.from_file(str(SNAPSHOTS / f"{name}.json")))


def flag(gates: dict) -> list[str]:
    return [f"--feature-gates={','.join(f'{k}={str(v).lower()}' for k, v in sorted(gates.items()))}"] if gates else []


def harness(*args: str, stdin: str = "[]") -> subprocess.CompletedProcess:
    return subprocess.run([str(upstream.binary(HARNESS)), *args], input=stdin, capture_output=True, text=True,
                          check=False, timeout=60)


def driver(configs: list[dict], gates: dict) -> list[dict]:
    """The driver's verdict on each config: [{"ok", "error", "normalized"}], same order."""
    proc = harness(*flag(gates), stdin=json.dumps(configs))
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)
    assert len(results) == len(configs)
    return results


def verdicts(params):
    """(preflight problems, driver result, config) per case, the driver run once per set of gates."""
    rendered = []
    for param in params:
        values, snapshot, asks = param.values, param.snapshot, param.asks
        config = ap.dra_opaque_config(ap.pool_settings(values))
        rendered.append((plan.host_problems("dra-0", values, gpus(snapshot)), asks(config) if asks else config,
                         values["accel_dra_feature_gates"]))
    out = [None] * len(rendered)
    for gates in {json.dumps(g, sort_keys=True) for _p, _c, g in rendered}:
        index = [i for i, (_p, _c, g) in enumerate(rendered) if json.dumps(g, sort_keys=True) == gates]
        for i, result in zip(index, driver([rendered[i][1] for i in index], json.loads(gates)), strict=True):
            out[i] = (rendered[i][0], result, rendered[i][1])
    return out


@pytest.fixture(scope="module")
def results():
    return {p.id: found for p, found in zip(CASES, verdicts(CASES), strict=True)}


@pytest.mark.parametrize("param", CASES, ids=[p.id for p in CASES])
def test_the_preflight_accepts_exactly_what_the_driver_accepts(results, param):
    problems, result, config = results[param.id]
    assert (not problems) == result["ok"], (
        f"preflight {'accepts' if not problems else 'refuses'} and the driver "
        f"{'accepts' if result['ok'] else 'refuses'} {json.dumps(config)}: {problems or result['error']}")


def test_the_table_has_both_verdicts_of_every_sharing(results):
    seen = {(p.values.get("accel_dra_sharing", "exclusive"), bool(p.values.get("accel_mig_geometry")),
             results[p.id][1]["ok"]) for p in CASES}
    for sharing in ("timeslice", "mps"):
        for mig in (False, True):
            assert {(sharing, mig, True), (sharing, mig, False)} <= seen, (sharing, mig)
    assert ("exclusive", False, True) in seen and ("exclusive", True, True) in seen


def test_what_the_driver_normalizes_is_what_kube_accel_wrote(results):
    """An accepted config comes back from Normalize as written: kube-accel writes the driver's defaults out (the
    interval) and nothing the driver would drop; a pinned-memory limit may come back in the Quantity's canonical
    spelling ("1.5Gi" as "1536Mi"), the same number of bytes."""
    for param in CASES:
        problems, result, config = results[param.id]
        if not (result["ok"] and not problems):
            continue
        back, mine = json.loads(json.dumps(result["normalized"])), json.loads(json.dumps(config))
        limits = [(c.get("sharing") or {}).get("mpsConfig", {}).pop("defaultPinnedDeviceMemoryLimit", None)
                  for c in (back, mine)]
        assert back == mine, param.id
        assert (limits[0] is None) == (limits[1] is None), param.id
        if limits[0] is not None:
            assert quantity_bytes(limits[0]) == quantity_bytes(limits[1]), (param.id, limits)


@pytest.mark.parametrize(("param", "why"), STRICTER, ids=[p.id for p, _why in STRICTER])
def test_where_kube_accel_is_stricter_than_the_drivers_validation(param, why):
    ((problems, result, config),) = verdicts([param])
    assert result["ok"], (why, config, result["error"])
    assert problems, (why, config)


def test_every_gate_kube_accel_knows_is_registered_by_the_driver_and_no_other():
    for gate, (default, _stage) in DRA_FEATURE_GATES.items():
        proc = harness(f"--feature-gates={gate}={str(default).lower()}")
        assert proc.returncode == 0, (gate, proc.stderr)
    for unknown in ("MpsSupport", "LoggingStableOptions", "DynamicResourceAllocation"):
        assert unknown not in DRA_FEATURE_GATES
        proc = harness(f"--feature-gates={unknown}=true")
        assert proc.returncode == 2 and "unrecognized feature gate" in proc.stderr, (unknown, proc.stderr)


def test_gate_mappings_kube_accel_refuses_are_those_the_driver_refuses():
    names = ["MPSSupport", "DynamicMIG", "PassthroughSupport", "NVMLDeviceHealthCheck", "DeviceMetadata",
             "IMEXDaemonsWithDNSNames", "ComputeDomainCliques"]
    checked = 0
    for values in itertools.product((None, True, False), repeat=len(names)):
        gates = {n: v for n, v in zip(names, values, strict=True) if v is not None}
        if len(gates) > 2:
            continue  # every single setting and pair: each of the driver's rules relates two gates
        proc = harness(*flag(gates))
        assert proc.returncode in (0, 2), proc.stderr
        assert (proc.returncode == 0) == (value_problems("accel_dra_feature_gates", gates) == []), (gates,
                                                                                                   proc.stderr)
        checked += 1
    assert checked == 1 + 7 * 2 + 21 * 4  # none, one or two of the seven gates set, each on or off
