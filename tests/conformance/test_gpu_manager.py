"""charts/vgpu (backend gpu-manager) against gpu-manager v1.1.5 and gpu-admission 47d56ae, the code it deploys.

- RBAC: the tables below list every API call of the upstream code with the file:line that makes it; the chart
  grants exactly those, and each cited line must still hold the call.
- gpu-admission: the container runs the binary the image's Dockerfile runs (the image has no ENTRYPOINT), and
  the rendered command line goes through the real gpu-admission (pflag) against a recording fake API server.
- gpu-manager: the flags the chart appends (EXTRA_FLAGS) exist in gpu-manager's own flag set.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest
import upstream
import yaml
from chartlib import container, env, helm_template, one, rules
from fake_apiserver import FakeAPIServer, closed_port_kubeconfig
from vgpu_cases import granted, grants, params, render_case

GM_CASES = params("gpu-manager")

# (component, verb, apiGroup, resource, archive, file, line, text that line holds)
GPU_MANAGER = upstream.GPU_MANAGER
GPU_ADMISSION = upstream.GPU_ADMISSION
CALLS = [
    ("gpu-manager", "get", "", "nodes", GPU_MANAGER, "pkg/services/watchdog/label.go", 122, "Nodes().Get("),
    ("gpu-manager", "update", "", "nodes", GPU_MANAGER, "pkg/services/watchdog/label.go", 138, "Nodes().Update("),
    ("gpu-manager", "list", "", "pods", GPU_MANAGER, "pkg/services/watchdog/watchdog.go", 56, "Core().V1().Pods()"),
    ("gpu-manager", "watch", "", "pods", GPU_MANAGER, "pkg/services/watchdog/watchdog.go", 56, "Core().V1().Pods()"),
    ("gpu-manager", "list", "", "pods", GPU_MANAGER, "pkg/services/watchdog/watchdog.go", 72, "Core().V1().Pods()"),
    ("gpu-manager", "watch", "", "pods", GPU_MANAGER, "pkg/services/watchdog/watchdog.go", 72, "Core().V1().Pods()"),
    # 14.8: a failed allocation marks the pod Failed through the status subresource, then deletes it.
    ("gpu-manager", "update", "", "pods/status", GPU_MANAGER, "pkg/services/allocator/nvidia/allocator.go", 1014,
     ".UpdateStatus(pod)"),
    ("gpu-manager", "get", "", "pods", GPU_MANAGER, "pkg/services/allocator/nvidia/allocator.go", 1020, ".Get("),
    ("gpu-manager", "delete", "", "pods", GPU_MANAGER, "pkg/services/allocator/nvidia/allocator.go", 1054,
     ".Delete("),
    ("gpu-manager", "patch", "", "pods", GPU_MANAGER, "pkg/services/allocator/nvidia/allocator.go", 1089,
     ".Patch("),
    ("gpu-manager", "list", "", "pods", GPU_MANAGER, "pkg/services/allocator/nvidia/allocator.go", 1161, ".List("),
    ("gpu-admission", "list", "", "nodes", GPU_ADMISSION, "pkg/predicate/gpu_predicate.go", 66, "Nodes().Lister()"),
    ("gpu-admission", "watch", "", "nodes", GPU_ADMISSION, "pkg/predicate/gpu_predicate.go", 66, "Nodes().Lister()"),
    ("gpu-admission", "list", "", "pods", GPU_ADMISSION, "pkg/predicate/gpu_predicate.go", 67, "Pods().Lister()"),
    ("gpu-admission", "watch", "", "pods", GPU_ADMISSION, "pkg/predicate/gpu_predicate.go", 67, "Pods().Lister()"),
    ("gpu-admission", "patch", "", "pods", GPU_ADMISSION, "pkg/predicate/gpu_predicate.go", 241, "Patch("),
]


def _line(archive: str, file: str, line: int) -> str:
    return (upstream.src(archive) / file).read_text().splitlines()[line - 1]


@pytest.mark.parametrize("row", CALLS, ids=lambda r: f"{r[0]}-{r[5]}:{r[6]}-{r[1]}")
def test_rbac_table_cites_upstream(row):
    *_, archive, file, line, needle = row
    assert needle in _line(archive, file, line), f"{archive}/{file}:{line} no longer holds {needle!r}"


def _table(component: str) -> set[tuple[str, str, str]]:
    return {(verb, group, res) for comp, verb, group, res, *_ in CALLS if comp == component}


@pytest.mark.parametrize(("name", "release", "values"), GM_CASES)
def test_rbac_is_exactly_what_upstream_calls(tmp_path, name, release, values):
    objs = render_case(tmp_path, release, values)
    for component in ("gpu-manager", "gpu-admission"):
        role = one(objs, "ClusterRole", f"{release}-{component}")
        got = {(verb, group, res) for (group, res), verbs in rules(role).items() for verb in verbs}
        assert got == _table(component), component


def test_admission_command_is_the_dockerfile_binary():
    """14.2: gpu-admission's image has no ENTRYPOINT; its CMD runs /usr/bin/gpu-admission through bash."""
    dockerfile = (upstream.src(GPU_ADMISSION) / "Dockerfile").read_text()
    assert "ENTRYPOINT" not in dockerfile
    (cmd,) = [line for line in dockerfile.splitlines() if line.startswith("CMD ")]
    assert "/usr/bin/gpu-admission --address=0.0.0.0:3456" in cmd


@pytest.mark.parametrize(("name", "release", "values"), GM_CASES)
def test_admission_starts_with_chart_command(tmp_path, name, release, values):
    """The rendered command runs the image's binary; gpu-admission parses the chart's flags, syncs its informers
    against a fake API server and serves its extender route; every call it made is granted."""
    objs = render_case(tmp_path, release, values)
    ctr = container(one(objs, "Deployment", f"{release}-gpu-admission"), "gpu-admission")
    assert ctr.get("command") == ["/usr/bin/gpu-admission"], "args alone would replace the image's CMD"
    with FakeAPIServer() as api:
        port, pprof_port = upstream.free_ports(2)
        # Listen addresses moved only (pflag: the last value wins); the kubeconfig stands in for in-cluster config.
        args = [*ctr["args"], f"--address=127.0.0.1:{port}", f"--pprofAddress=127.0.0.1:{pprof_port}"]
        args.append(f"--kubeconfig={api.kubeconfig(tmp_path / 'kubeconfig')}")
        proc = subprocess.Popen([str(upstream.binary("gpu-admission")), *args], env={"PATH": os.environ["PATH"]},
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            startup = {c for c in _table("gpu-admission") if c[0] in ("list", "watch")}
            seen = api.wait_for(startup)
            status = upstream.http_status(proc, f"http://127.0.0.1:{port}/version", tries=50)
        finally:
            out = upstream.stop(proc)
        requests = list(api.requests)
    assert startup <= seen, f"gpu-admission never made {startup - seen}:\n{out[-3000:]}"
    assert status == 200, f"gpu-admission did not serve with the chart's flags:\n{out[-3000:]}"
    have = grants(objs, f"{release}-gpu-admission")
    missing = sorted({(v, g, r, ns) for v, g, r, ns in requests if not granted(have, v, g, r, ns)})
    assert not missing, f"calls gpu-admission made that the chart does not grant: {missing}"


def test_admission_refuses_unknown_flag(tmp_path):
    proc = upstream.run("gpu-admission", "--no-such-flag=1",
                        f"--kubeconfig={closed_port_kubeconfig(tmp_path / 'kubeconfig')}", timeout=30)
    assert proc.returncode != 0 and "unknown flag: --no-such-flag" in proc.stdout + proc.stderr


@pytest.mark.parametrize(("name", "release", "values"), GM_CASES)
def test_gpu_manager_flags_exist_upstream(tmp_path, name, release, values):
    """Every flag of EXTRA_FLAGS is one gpu-manager v1.1.5 defines (cmd/manager/options/options.go); the image's
    start.sh appends EXTRA_FLAGS to its fixed command line (build/start.sh)."""
    options = (upstream.src(GPU_MANAGER) / "cmd/manager/options/options.go").read_text()
    defined = set(re.findall(r'fs\.\w+Var\(&opt\.\w+, "([a-z-]+)"', options))
    assert {"container-runtime-endpoint", "cgroup-driver", "query-port"} <= defined
    start = (upstream.src(GPU_MANAGER) / "build/start.sh").read_text()
    assert '${EXTRA_FLAGS:-""}' in start
    objs = render_case(tmp_path, release, values)
    flags = env(container(one(objs, "DaemonSet", f"{release}-gpu-manager"), "gpu-manager"))["EXTRA_FLAGS"].split()
    for flag in flags:
        name_ = flag.removeprefix("--").split("=", 1)[0]
        assert name_ in defined, f"EXTRA_FLAGS {flag}: gpu-manager v1.1.5 has no such flag"


# gpu-manager's writes on its node and the pods it allocates, field by field: (kind, how, key, file,
# line, text). Its node labeler writes the GPU model label and those of --node-labels (cmd/manager/app/app.go:70-79,
# parsed from EXTRA_FLAGS); the allocator patches its choice onto the pod and, when an allocation fails, sends the
# pod to pods/status with phase Failed and no annotations at all.
GM_AGENT_WRITES = [
    ("nodes", "label", "gaia.tencent.com/gpu-model", "pkg/services/watchdog/label.go", 34,
     'gpuModelLabel = "gaia.tencent.com/gpu-model"'),
    ("nodes", "label", "", "pkg/services/watchdog/label.go", 135, "node.Labels[k] = l"),
    ("nodes", "label", "", "cmd/manager/app/app.go", 75, "cfg.NodeLabels[kvs[0]] = kvs[1]"),
    ("pods", "prefix", "tencent.com/predicate-gpu-idx-", "pkg/services/allocator/nvidia/allocator.go", 1003,
     "annotationMap[types.PredicateGPUIndexPrefix+strconv.Itoa(i)] = predicateIndexStr"),
    ("pods", "set", "tencent.com/gpu-assigned", "pkg/services/allocator/nvidia/allocator.go", 1005,
     "annotationMap[types.GPUAssigned] = strconv.FormatBool(assigned)"),
    ("pods", "status", "", "pkg/services/allocator/nvidia/allocator.go", 946, "Phase:   v1.PodFailed,"),
    ("pods", "status", "", "pkg/services/allocator/nvidia/allocator.go", 950, "ar.pod.Annotations = nil"),
]
GM_TYPES = [
    ("pkg/types/types.go", 26, 'PredicateGPUIndexPrefix = "tencent.com/predicate-gpu-idx-"'),
    ("pkg/types/types.go", 27, 'GPUAssigned             = "tencent.com/gpu-assigned"'),
]


@pytest.mark.parametrize("row", [r[3:] for r in GM_AGENT_WRITES] + GM_TYPES, ids=lambda r: f"{r[0]}:{r[1]}")
def test_agent_write_table_cites_gpu_manager(row):
    file, line, needle = row
    assert needle in _line(GPU_MANAGER, file, line), f"{file}:{line} no longer holds {needle!r}"


@pytest.mark.parametrize(("name", "release", "values"), GM_CASES)
def test_node_agent_policy_allows_exactly_gpu_managers_writes(tmp_path, name, release, values):
    """The own-node policies give gpu-manager's token its labels (the GPU model and --node-labels keys) and the pod
    annotations above, through pods/status only phase Failed with annotations removed (the lab proves each)."""
    import json  # noqa: PLC0415

    flags = (values.get("gpuManager") or {}).get("extraFlags") or []
    extra = [item.split("=", 1)[0] for f in flags if f.startswith("--node-labels=")
             for item in f.removeprefix("--node-labels=").split(",") if item]
    objs = render_case(tmp_path, release, values)

    def var(kind: str, name: str) -> str:
        spec = one(objs, "ValidatingAdmissionPolicy", f"{release}-own-{kind}")["spec"]
        return next(v["expression"] for v in spec["variables"] if v["name"] == name)

    def lists(expr: str) -> list[list[str]]:
        return [json.loads(m) for m in re.findall(r'\[(?:"[^"]*"(?:,"[^"]*")*)?\]', expr)]

    labels = [k for c, how, k, *_ in GM_AGENT_WRITES if c == "nodes" and how == "label" and k]
    assert lists(var("nodes", "badLabels")) == [labels + extra]
    assert lists(var("nodes", "badAnnotations"))[:2] == [[], []]
    sets = [k for c, how, k, *_ in GM_AGENT_WRITES if c == "pods" and how == "set"]
    prefixes = [k for c, how, k, *_ in GM_AGENT_WRITES if c == "pods" and how == "prefix"]
    assert lists(var("pods", "badAnnotations"))[:2] == [sets, prefixes]
    assert lists(var("pods", "badLabels")) == [[]]
    assert var("pods", "badAnnotations").startswith("variables.status ? variables.setAnnotations :")


def test_node_labels_flag_is_checked(tmp_path):
    """gpu-manager may not be told to set NodeRestriction's or kube-accel's labels through --node-labels."""
    for bad in ("--node-labels=node-role.kubernetes.io/gpu=x", "--node-labels=a.example/x=1,kube-accel.io/pool=p",
                "--node-labels"):
        path = tmp_path / "v.yaml"
        path.write_text(yaml.safe_dump({"backend": "gpu-manager", "pools": ["p"],
                                        "gpuManager": {"extraFlags": [bad]}}))
        proc = helm_template("vgpu", [path])
        assert proc.returncode != 0 and "--node-labels" in proc.stderr, (bad, proc.stderr)
    path.write_text(yaml.safe_dump({"backend": "gpu-manager", "pools": ["p"],
                                    "gpuManager": {"extraFlags": ["--node-labels=example.com/rack=r1"]}}))
    assert helm_template("vgpu", [path]).returncode == 0
