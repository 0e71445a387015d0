"""charts/pgpu and charts/mps against the NVIDIA k8s-device-plugin v0.20.0 code they deploy.

Every rendered container of the device plugin, GFD, the MPS control daemon and config-manager is run through the
real binary with exactly its rendered env and args (plus temp paths for files the kubelet or config-manager would
provide): it must get past flag parsing and config loading and stop only where NVML or the API server is needed.
Named configs go through the plugin's own loader and a strict decode (ka-conform-deviceplugin); RBAC is compared
with the API calls the upstream code makes (RBAC_CALLS, each line re-checked in the source). The device-list
strategy each config loads with, and the way each agent gets its own GPUs, must work with the NVIDIA runtime as
roles/container_toolkit configures it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import upstream
import yaml
from ansible_collections.kube_accel.gpu.plugins.filter import accel_pool_filters
from ansible_collections.kube_accel.gpu.plugins.module_utils.common import constants as accel_constants
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm import pool_charts as accel_chart_values
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import inventory as accel_inventory
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import mig as accel_mig
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import pools as accel_pools
from chartlib import REPO, containers, one, play_cluster, pod_spec, render, rules, values_files
from kalab.standins import plugin_resources

NODE = "conformance-node"
NVML_ABSENT = "ERROR_LIBRARY_NOT_FOUND"

# Env vars the NVIDIA container runtime reads (nvidia-container-toolkit), not the binaries: allowed with a reason.
# The NVIDIA runtime's settings roles/container_toolkit writes (tasks/runtime_config.yml).
RUNTIME_SETTINGS = next(t["kube_accel.gpu.nvidia_runtime_config"]["settings"] for t in yaml.safe_load(
    (REPO / "roles" / "container_toolkit" / "tasks" / "runtime_config.yml").read_text())
    if "kube_accel.gpu.nvidia_runtime_config" in t)
# Where the plugin's volume-mounts allocation points (internal/plugin/server.go) and the toolkit reads it.
VOLUME_MOUNT_REQUEST = ("internal/plugin/server.go:47", 'deviceListAsVolumeMountsHostPath          = "/dev/null"')
VOLUME_MOUNT_ROOT = ("internal/plugin/server.go:48",
                     'deviceListAsVolumeMountsContainerPathRoot = "/var/run/nvidia-container-devices"')


def runtime_accepts(strategy: str) -> bool:
    """Whether an unprivileged container gets the GPUs a strategy allocates from the NVIDIA runtime as kube-accel
    configures it (CDI devices are injected by the container engine itself, whatever the runtime)."""
    if strategy == "envvar":
        return RUNTIME_SETTINGS["accept-nvidia-visible-devices-envvar-when-unprivileged"]
    if strategy == "volume-mounts":
        return RUNTIME_SETTINGS["accept-nvidia-visible-devices-as-volume-mounts"]
    return strategy in ("cdi-annotations", "cdi-cri")


RUNTIME_ENV = {
    "NVIDIA_VISIBLE_DEVICES": "container toolkit: which GPUs the runtime injects (all: the agent sees every GPU)",
    "NVIDIA_DRIVER_CAPABILITIES": "container toolkit: driver libraries to inject (compute,utility for NVML)",
    "NVIDIA_MIG_MONITOR_DEVICES": "container toolkit: injects the MIG monitor caps (nvidia-caps) for MIG enumeration",
}

# Where each binary stops without a GPU: the text it must print, and the upstream lines producing it
# (file:line, text that line must still contain).
STOPS = {
    "nvidia-device-plugin": (f"failed to construct resource managers: nvml init failed: {NVML_ABSENT}",
                             [("internal/plugin/factory.go:76", "failed to construct resource managers: %w"),
                              ("internal/plugin/factory.go:105", "nvml init failed: %v")]),
    "gpu-feature-discovery": ("failed to create resource manager: unsupported strategy auto",
                              [("internal/resource/factory.go:67", "unsupported strategy %v")]),
    "mps-control-daemon": (f"error getting daemons: failed to initialize NVML: {NVML_ABSENT}",
                           [("cmd/mps-control-daemon/main.go:201", "error getting daemons: %v"),
                            ("internal/rm/nvml_manager.go:42", "failed to initialize NVML: %v")]),
    "config-manager": ("error building kubernetes clientcmd config:",
                       [("cmd/config-manager/main.go:233", "error building kubernetes clientcmd config")]),
}
# A config with a CDI device-list strategy stops earlier, at the plugin's NVML check of its flags.
STOP_CDI = ("unable to validate flags: CDI --device-list-strategy options are only supported on NVML-based systems",
            [("cmd/nvidia-device-plugin/main.go:373", "unable to validate flags: %v"),
             ("cmd/nvidia-device-plugin/main.go:211", "CDI --device-list-strategy options are only supported")])


def stop_for(binary: str, config_text: str | None):
    if binary == "nvidia-device-plugin" and config_text:
        strategies = ((yaml.safe_load(config_text).get("flags") or {}).get("plugin") or {}).get("deviceListStrategy")
        if any(str(s).startswith("cdi-") for s in ([strategies] if isinstance(strategies, str) else strategies or [])):
            return STOP_CDI
    return STOPS[binary]

# Kubernetes API calls of the components these charts run, as (component, apiGroup, resource, verb,
# upstream file:line, text that line must still contain). GFD calls the API only with the NodeFeature API
# (cmd/gpu-feature-discovery/main.go:197), which the chart turns off; the device plugin and the MPS control
# daemon import no Kubernetes client (test_no_kubernetes_client_in_agents).
RBAC_CALLS = [
    ("config-manager", "", "nodes", "list", "cmd/config-manager/main.go:258", "cache.NewListWatchFromClient("),
    ("config-manager", "", "nodes", "watch", "cmd/config-manager/main.go:258", "cache.NewListWatchFromClient("),
    ("config-manager", "", "nodes", "list", "cmd/config-manager/main.go:260", "ResourceNodes"),
    ("config-manager", "", "nodes", "watch", "cmd/config-manager/main.go:292", "controller.Run(stop)"),
]
NODE_FEATURE_API_GATE = ("cmd/gpu-feature-discovery/main.go:197", "config.Flags.UseNodeFeatureAPI")


def dp_src() -> Path:
    return upstream.src(upstream.DEVICE_PLUGIN)


def cited(ref: str) -> str:
    path, line = ref.rsplit(":", 1)
    return (dp_src() / path).read_text().splitlines()[int(line) - 1]


# --- what gets rendered: the chart's test values and the cluster play's release values ----------------------


def _inventory_hosts(name: str) -> dict[str, dict]:
    base = REPO / "inventories" / name
    groups = yaml.safe_load((base / "hosts.yml").read_text())["all"]["children"]["gpu_pools"]["children"]
    common = yaml.safe_load((base / "group_vars" / "gpu_pools.yml").read_text())
    return {host: {**common, **yaml.safe_load((base / "group_vars" / f"{group}.yml").read_text())}
            for group, body in groups.items() for host in body["hosts"]}


def _play_cluster(name: str) -> dict:
    """pool_charts_cluster as the role computes it from the inventory (chartlib.play_cluster)."""
    return play_cluster(name)


def _cases():
    cases = []
    for chart in ("pgpu", "mps"):
        cases += [pytest.param(chart, path, id=f"{chart}-{path.stem}") for path in values_files(chart)]
    for inventory in ("lab", "example"):
        for release in _releases(inventory):
            if release["chart"] in ("pgpu", "mps"):
                cases.append(pytest.param(release["chart"], release["values"], id=f"{inventory}-{release['key']}"))
    return cases


def _releases(inventory: str) -> list[dict]:
    pools = accel_pools.collect_pools(_inventory_hosts(inventory))
    return accel_pool_filters.accel_pool_releases(pools, _play_cluster(inventory))


CASES = _cases()


def rendered(chart: str, values, tmp_path: Path) -> list[dict]:
    if isinstance(values, dict):
        path = tmp_path / "values.yaml"
        path.write_text(yaml.safe_dump(values))
        values = path
    return render(chart, [values], release=f"kube-accel-{chart}")


def named_configs(objs: list[dict]) -> dict[str, str]:
    return one(objs, "ConfigMap", "-configs")["data"]


def agent_containers(objs: list[dict]):
    """(workload, container) for every container of the chart's DaemonSets."""
    for obj in objs:
        if obj["kind"] == "DaemonSet" and not obj["metadata"]["name"].endswith("-sandbox-device-plugin"):
            for c in containers(pod_spec(obj)):
                yield obj, c


def container_env(c: dict) -> dict[str, str]:
    out = {}
    for e in c.get("env", []):
        if "value" in e:
            out[e["name"]] = e["value"]
        elif e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "spec.nodeName":
            out[e["name"]] = NODE
        else:
            raise AssertionError(f"{c['name']}: env {e['name']} has a source this test cannot resolve: {e}")
    return out


# --- the binaries' own flag parsing ------------------------------------------------------------------------


def help_env(binary: str, *sub: str) -> set[str]:
    proc = upstream.run(binary, *sub, "--help")
    assert proc.returncode == 0, proc.stderr
    return set(re.findall(r"\$([A-Z0-9_]+)", proc.stdout))


def run_agent(c: dict, config_text: str | None, tmp_path: Path):
    """Run the container's command with its rendered env; CONFIG_FILE points at the named config."""
    env = container_env(c)
    command = c["command"] + c.get("args", [])
    binary, args = Path(command[0]).name, command[1:]
    extra: list[str] = []
    if config_text is not None:
        path = tmp_path / "config.yaml"
        path.write_text(config_text)
        assert env.get("CONFIG_FILE") == "/config/config.yaml"
        env["CONFIG_FILE"] = str(path)
    if binary == "nvidia-device-plugin":
        env["KUBELET_SOCKET"] = str(tmp_path / "kubelet.sock")
    if binary == "gpu-feature-discovery":
        extra = ["--output-file", str(tmp_path / "gfd")]  # never the host's features.d
    if binary == "config-manager":
        env["CONFIG_FILE_SRCDIR"] = str(tmp_path)
        env["CONFIG_FILE_DST"] = str(tmp_path / "dst.yaml")
    return binary, upstream.run(binary, *args, *extra, env=env, timeout=60)


def loaded_config(stderr: str) -> dict:
    """The config the binary logs after loading it ("Running with config:" and its JSON)."""
    match = re.search(r"Running with config:\n(\{.*?\n\})", stderr, re.S)
    assert match, f"no 'Running with config' in the output:\n{stderr[-3000:]}"
    return json.loads(match.group(1))


@pytest.mark.parametrize(("chart", "values"), CASES)
def test_agents_pass_flag_and_config_parsing(chart, values, tmp_path):
    objs = rendered(chart, values, tmp_path)
    configs = named_configs(objs)
    seen = set()
    for ds, c in agent_containers(objs):
        command = c["command"] + c.get("args", [])
        binary = Path(command[0]).name
        if command[1:] == ["mount-shm"]:
            # mount-shm mounts a tmpfs on the host: only its parsing is run (urfave resolves the subcommand).
            proc = upstream.run(binary, "mount-shm", "--help")
            assert proc.returncode == 0 and "mount-shm" in proc.stdout, proc.stderr
            continue
        assert binary in STOPS, f"{ds['metadata']['name']}/{c['name']} runs {binary}, unknown to this test"
        # Every env var is read by the binary (its --help lists [$ENV]) or by the NVIDIA container runtime.
        unknown = set(container_env(c)) - help_env(binary) - set(RUNTIME_ENV)
        assert not unknown, f"{ds['metadata']['name']}/{c['name']}: {binary} reads no {sorted(unknown)}"
        for name, text in sorted(configs.items()) if binary != "config-manager" else [(None, None)]:
            expected, lines = stop_for(binary, text)
            for ref, line in lines:
                assert line in cited(ref), f"{ref} no longer contains {line!r}: re-read the upstream code"
            where = ", ".join(ref for ref, _ in lines)
            _, proc = run_agent(c, text, tmp_path)
            out = proc.stderr + proc.stdout
            assert proc.returncode == 1 and expected in out, (
                f"{ds['metadata']['name']}/{c['name']} with config {name}: {binary} must stop only at NVML / the "
                f"API server ({where}: {expected!r}); it said:\n{out[-4000:]}")
            if name is not None and (binary, expected) != ("nvidia-device-plugin", STOP_CDI[0]):
                config = loaded_config(proc.stderr)
                assert config["version"] == "v1"
                if binary == "nvidia-device-plugin":
                    # The plugin finds NVML under the driver root mounted at containerDriverRoot.
                    mounts = {m["mountPath"] for m in c["volumeMounts"]}
                    assert config["flags"]["plugin"]["containerDriverRoot"] in mounts
                    # What it loaded hands allocated GPUs over in a way the runtime kube-accel configures accepts.
                    strategies = config["flags"]["plugin"]["deviceListStrategy"]
                    assert any(runtime_accepts(s) for s in strategies), (name, strategies)
            seen.add(binary)
    assert "nvidia-device-plugin" in seen and "config-manager" in seen


def privileged_for_the_runtime(c: dict) -> bool:
    """CAP_SYS_ADMIN in the bounding set: what the toolkit calls privileged (internal/config/image/privileged.go)."""
    ctx = c.get("securityContext") or {}
    return bool(ctx.get("privileged")) or "SYS_ADMIN" in (ctx.get("capabilities") or {}).get("add", [])


@pytest.mark.parametrize(("chart", "values"), CASES)
def test_agents_get_their_gpus_from_the_runtime_as_kube_accel_configures_it(chart, values, tmp_path):
    """An agent that asks for every GPU (NVIDIA_VISIBLE_DEVICES=all) gets them only if privileged for the runtime, or
    through the volume-mount request the plugin's own volume-mounts allocation makes: /dev/null bind-mounted under
    /var/run/nvidia-container-devices (here .../all), which only pods allowed hostPath volumes can ask for."""
    for ref, text in (VOLUME_MOUNT_REQUEST, VOLUME_MOUNT_ROOT):
        assert text in cited(ref), f"{ref} no longer holds {text!r}"
    root = VOLUME_MOUNT_ROOT[1].split('"')[1]
    checked = 0
    for ds, c in agent_containers(rendered(chart, values, tmp_path)):
        if container_env(c).get("NVIDIA_VISIBLE_DEVICES") != "all":
            continue
        volumes = {v["name"]: v for v in pod_spec(ds).get("volumes", [])}
        requests = [m for m in c.get("volumeMounts", []) if m["mountPath"] == f"{root}/all"
                    and volumes[m["name"]].get("hostPath", {}).get("path") == VOLUME_MOUNT_REQUEST[1].split('"')[1]]
        by_mount = bool(requests) and RUNTIME_SETTINGS["accept-nvidia-visible-devices-as-volume-mounts"]
        assert privileged_for_the_runtime(c) or by_mount, (
            f"{ds['metadata']['name']}/{c['name']}: NVIDIA_VISIBLE_DEVICES=all in an unprivileged container, which "
            "the NVIDIA runtime kube-accel configures ignores; it would see no GPU")
        checked += 1
    assert checked, "no agent asks for GPUs"


@pytest.mark.parametrize(("chart", "values"), CASES)
def test_kubelet_socket_directory_is_mounted(chart, values, tmp_path):
    # The plugin's --kubelet-socket default (cmd/nvidia-device-plugin/main.go, pluginapi.KubeletSocket) is
    # /var/lib/kubelet/device-plugins/kubelet.sock; the chart sets no KUBELET_SOCKET, so that dir must be mounted.
    default = re.search(r"--kubelet-socket value .*\(default: \"([^\"]+)\"\)",
                        upstream.run("nvidia-device-plugin", "--help").stdout)
    assert default, "nvidia-device-plugin --help shows no kubelet-socket default"
    for ds, c in agent_containers(rendered(chart, values, tmp_path)):
        if c["command"][0] == "nvidia-device-plugin":
            mounts = {m["mountPath"] for m in c["volumeMounts"]}
            assert str(Path(default.group(1)).parent) in mounts, ds["metadata"]["name"]


@pytest.mark.parametrize(("chart", "values"), CASES)
def test_config_manager_signals_a_process_that_exists(chart, values, tmp_path):
    # config-manager finds the process to signal by comparing /proc/PID/cmdline[0] with PROCESS_TO_SIGNAL
    # (cmd/config-manager/main.go:459); the runtime keeps the pod's command[0] as argv[0].
    assert "cmdline[0] == f.ProcessToSignal" in cited("cmd/config-manager/main.go:459")
    for ds, c in agent_containers(rendered(chart, values, tmp_path)):
        env = container_env(c)
        if c["command"][0] != "config-manager" or env["SEND_SIGNAL"] != "true":
            continue
        argv0 = {o["command"][0] for o in containers(pod_spec(ds)) if o is not c}
        assert env["PROCESS_TO_SIGNAL"] in argv0, (
            f"{ds['metadata']['name']}/{c['name']}: PROCESS_TO_SIGNAL={env['PROCESS_TO_SIGNAL']!r} matches no "
            f"container command[0] of the pod ({sorted(argv0)}): the config change would never reach it")


# --- named configs through the plugin's own loader ---------------------------------------------------------


def harness_config(text: str, tmp_path: Path) -> dict:
    path = tmp_path / "named.yaml"
    path.write_text(text)
    proc = upstream.run("ka-conform-deviceplugin", "config", str(path))
    assert proc.returncode == 0, f"the plugin's config loader refuses it: {proc.stderr}"
    return json.loads(proc.stdout)


@pytest.mark.parametrize(("chart", "values"), CASES)
def test_named_configs_load_strictly(chart, values, tmp_path):
    for name, text in named_configs(rendered(chart, values, tmp_path)).items():
        report = harness_config(text, tmp_path)
        assert not report["strict"], f"config {name}: {report['strict']}"
        flags = report["config"]["flags"]
        assert flags["failOnInitError"] is True
        if chart == "mps":
            assert flags["mpsRoot"], f"config {name}: MPS needs flags.mpsRoot (cmd/nvidia-device-plugin main.go)"


def test_strict_decode_catches_what_the_plugin_drops(tmp_path):
    text = "version: v1\nflags: {migStrategy: none, failOnInitError: true, migStrategyy: x}\n" \
           "sharing: {mps: {resources: [{name: nvidia.com/gpu, replicas: 4, replica: 2}]}}\n"
    report = harness_config(text, tmp_path)
    assert any("migStrategyy" in p for p in report["strict"]), report
    assert any('"replica"' in p for p in report["strict"]), report


@pytest.mark.parametrize("inventory", ["lab", "example"])
def test_mps_configs_advertise_what_kube_accel_promises(inventory, tmp_path):
    """Replicas and resource names as the plugin loads them equal accel_pools' promise for every MPS pool."""
    releases = {r["key"]: r for r in _releases(inventory)}
    if "mps" not in releases:
        pytest.fail(f"inventories/{inventory} has no mps pool")
    objs = rendered("mps", releases["mps"]["values"], tmp_path)
    configs = named_configs(objs)
    for pool in accel_pools.collect_pools(_inventory_hosts(inventory)):
        settings = pool["settings"]
        if settings["accel_mode"] != "mps":
            continue
        loaded = harness_config(configs[accel_pools.device_plugin_config(settings)], tmp_path)["config"]
        (resource,) = loaded["sharing"]["mps"]["resources"]
        assert resource["name"] == "nvidia.com/gpu" and resource["replicas"] > 1, resource
        # The lab's device-plugin stand-in registers exactly this (scripts/kalab/standins.py plugin_resources).
        promise = accel_pools.advertised_resources(settings, 2, 24576)
        assert plugin_resources(loaded, 2) == promise, (pool["pool"], loaded["sharing"])


@pytest.mark.parametrize("inventory", ["lab", "example"])
def test_whole_gpu_configs_advertise_what_kube_accel_promises(inventory, tmp_path):
    """Every pgpu pool's named config as the plugin loads it: whole GPUs register as nvidia.com/gpu, one per GPU,
    which is what accel_pools promises and what the lab's device-plugin stand-in writes; under a MIG strategy the
    stand-in writes nothing (MIG devices need a GPU) and the lab keeps the inventory's capacity."""
    releases = {r["key"]: r for r in _releases(inventory)}
    objs = rendered("pgpu", releases["pgpu"]["values"], tmp_path)
    configs = named_configs(objs)
    pools = [p for p in accel_pools.collect_pools(_inventory_hosts(inventory))
             if p["settings"]["accel_mode"] == "pgpu"]
    assert pools and {accel_pools.device_plugin_config(p["settings"]) for p in pools} <= set(configs)
    for pool in pools:
        settings = pool["settings"]
        loaded = harness_config(configs[accel_pools.device_plugin_config(settings)], tmp_path)["config"]
        if accel_pools.mig_enabled(settings):
            assert loaded["flags"]["migStrategy"] in ("single", "mixed"), loaded["flags"]
            assert plugin_resources(loaded, 4) is None
        else:
            assert plugin_resources(loaded, 4) == accel_pools.advertised_resources(settings, 4, 81920)


@pytest.mark.parametrize("inventory", ["lab", "example"])
def test_timeslice_configs_advertise_what_kube_accel_promises(inventory, tmp_path):
    """Time-slicing as the plugin loads each timeslice pool's named config: the resource it advertises (renamed
    <name>.shared with renameByDefault, api/config/v1/replicas.go:205-206 and consts.go:26), the replicas, and the
    one-replica-per-pod switch the plugin's Allocate checks (internal/rm/rm.go:95-98) equal accel_pools' promise."""
    assert "s.Resources[i].Rename = r.Name.DefaultSharedRename()" in cited("api/config/v1/replicas.go:206")
    assert 'DefaultSharedResourceNameSuffix = ".shared"' in cited("api/config/v1/consts.go:26")
    assert "failRequestsGTOne := r.config.Sharing.ReplicatedResources().FailRequestsGreaterThanOne" in \
        cited("internal/rm/rm.go:95")
    assert "case spec.SharingStrategyTimeSlicing:" in cited("internal/rm/rm.go:97")
    releases = {r["key"]: r for r in _releases(inventory)}
    if "timeslice" not in releases:
        pytest.fail(f"inventories/{inventory} has no timeslice pool")
    assert releases["timeslice"]["chart"] == "pgpu"
    objs = rendered("pgpu", releases["timeslice"]["values"], tmp_path)
    configs = named_configs(objs)
    pools = [p for p in accel_pools.collect_pools(_inventory_hosts(inventory))
             if p["settings"]["accel_mode"] == "timeslice"]
    assert set(configs) == {accel_pools.device_plugin_config(p["settings"]) for p in pools}
    for pool in pools:
        settings = pool["settings"]
        loaded = harness_config(configs[accel_pools.device_plugin_config(settings)], tmp_path)["config"]
        assert "mps" not in (loaded.get("sharing") or {}) or not loaded["sharing"]["mps"], loaded["sharing"]
        sliced = loaded["sharing"]["timeSlicing"]
        (resource,) = sliced["resources"]
        assert resource["name"] == "nvidia.com/gpu" and resource["replicas"] > 1, resource
        promise = accel_pools.advertised_resources(settings, 3, 15360)
        assert plugin_resources(loaded, 3) == promise, (pool["pool"], sliced)
        assert sliced.get("failRequestsGreaterThanOne", False) == \
            accel_pools.time_slicing(settings)["failRequestsGreaterThanOne"]
    # helm test asks for a resource the release's default config advertises.
    job = one(objs, "Job", "-test")
    limits = next(containers(pod_spec(job)))["resources"]["limits"]
    default = next(p for p in pools if accel_pools.device_plugin_config(p["settings"]) ==
                   releases["timeslice"]["values"]["defaultConfig"])
    assert set(accel_pools.advertised_resources(default["settings"], 1, 0)) <= set(limits)


def test_timeslice_replicas_below_two_are_refused_by_the_plugin(tmp_path):
    # The plugin's own floor (api/config/v1/replicas.go:251) is the preflight's and the chart schema's minimum.
    assert "if s.Replicas < 2 {" in cited("api/config/v1/replicas.go:251")
    assert accel_inventory.TIMESLICE_MIN_REPLICAS == 2
    schema = json.loads((REPO / "charts" / "pgpu" / "values.schema.json").read_text())
    sliced = schema["properties"]["configs"]["additionalProperties"]["properties"]["timeSlicing"]
    assert sliced["properties"]["replicas"]["minimum"] == accel_inventory.TIMESLICE_MIN_REPLICAS
    assert sliced["properties"]["replicas"]["maximum"] == accel_inventory.TIMESLICE_MAX_REPLICAS
    path = tmp_path / "one.yaml"
    path.write_text("version: v1\nflags: {migStrategy: none}\n"
                    "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 1}]}}\n")
    proc = upstream.run("ka-conform-deviceplugin", "config", str(path))
    assert proc.returncode == 1 and "number of replicas must be >= 2" in proc.stderr, proc.stderr


# --- names Kubernetes must accept ---------------------------------------------------------------------------


def check_names(tmp_path: Path, label_values=(), resource_names=()) -> dict:
    path = tmp_path / "names.json"
    names = {"labelValues": sorted(set(label_values)), "resourceNames": sorted(set(resource_names))}
    path.write_text(json.dumps(names))
    proc = upstream.run("ka-conform-deviceplugin", "names", str(path))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _settings(**kw):
    """A pool's settings as the play reads them: inventory names (accel_ + keyword), the model's defaults filled."""
    return accel_pools.pool_settings({"accel_pool": "p", **{f"accel_{k}": v for k, v in kw.items()}})


def every_pool_settings():
    """Pool settings for every mode kube-accel plans: pgpu whole GPUs, every MIG geometry of every model under
    both strategies it allows, MPS at every replica count, time-slicing at every replica count and both switches."""
    yield _settings(mode="pgpu")
    for geometry in every_geometry():
        yield _settings(mode="pgpu", mig_strategy="mixed", mig_geometry=geometry)
        if len(geometry) == 1:
            yield _settings(mode="pgpu", mig_strategy="single", mig_geometry=geometry)
    for replicas in range(accel_inventory.MPS_MIN_REPLICAS, accel_inventory.MPS_MAX_REPLICAS + 1):
        yield _settings(mode="mps", mps_replicas=replicas)
    for replicas in range(accel_inventory.TIMESLICE_MIN_REPLICAS, accel_inventory.TIMESLICE_MAX_REPLICAS + 1):
        for rename in (True, False):
            for one_per_pod in (True, False):
                yield _settings(mode="timeslice", timeslice_replicas=replicas, timeslice_rename_by_default=rename,
                                timeslice_fail_requests_greater_than_one=one_per_pod)


def every_geometry():
    for model in accel_mig.MODELS.values():
        by_class = {p.cls.name: p.name for p in model.profiles.values()}
        for combo in accel_mig.valid_combinations(model.family, include_2x="1g.2x" in by_class, include_me=True):
            if all(c in by_class for c in combo):
                yield {by_class[c]: n for c, n in combo.items()}


def test_labels_and_resources_are_valid_kubernetes_names(tmp_path):
    labels, resources = set(), set()
    for settings in every_pool_settings():
        labels |= set(accel_pools.node_labels(settings).values())
        resources |= set(accel_pools.advertised_resources(settings, 1, 16384))
    report = check_names(tmp_path, labels, resources)
    bad = {k: v for kind in ("labelValues", "resourceNames") for k, v in report[kind].items() if v}
    assert not bad, bad
    assert len(report["resourceNames"]) == len(resources)


def test_mig_resources_are_named_as_the_plugin_names_them():
    # mixed strategy: the plugin advertises nvidia.com/mig-<profile> with "+" written "." (internal/rm/rm.go:145).
    assert cited("internal/rm/rm.go:145").strip() == \
        'resourceName := strings.ReplaceAll("mig-"+p.String(), "+", ".")'
    for geometry in every_geometry():
        settings = _settings(mode="pgpu", mig_strategy="mixed", mig_geometry=geometry)
        want = {f"nvidia.com/mig-{profile}".replace("+", "."): count for profile, count in geometry.items()}
        assert accel_pools.advertised_resources(settings, 1, 16384) == want


# --- RBAC -------------------------------------------------------------------------------------------------


def test_rbac_table_still_matches_the_upstream_code():
    for component, _group, _resource, _verb, ref, text in RBAC_CALLS:
        assert text in cited(ref), f"{component}: {ref} no longer contains {text!r}; re-read the upstream code"
    ref, text = NODE_FEATURE_API_GATE
    assert text in cited(ref)


def test_no_kubernetes_client_in_agents():
    for package in ("cmd/nvidia-device-plugin", "cmd/mps-control-daemon", "internal/plugin", "internal/rm"):
        users = [p for p in (dp_src() / package).rglob("*.go")
                 if not p.name.endswith("_test.go") and "k8s.io/client-go" in p.read_text()]
        assert not users, f"{package} now talks to the API server: {users}; extend RBAC_CALLS"


@pytest.mark.parametrize(("chart", "values"), CASES)
def test_rbac_grants_exactly_the_upstream_calls(chart, values, tmp_path):
    objs = rendered(chart, values, tmp_path)
    for _, c in agent_containers(objs):
        if c["command"][0] == "gpu-feature-discovery":
            assert container_env(c).get("GFD_USE_NODE_FEATURE_API") == "false", "GFD would call the NodeFeature API"
    want: dict[tuple[str, str], set[str]] = {}
    for _component, group, resource, verb, _ref, _text in RBAC_CALLS:
        want.setdefault((group, resource), set()).add(verb)
    granted: dict[tuple[str, str], set[str]] = {}
    for role in [o for o in objs if o["kind"] in ("Role", "ClusterRole")]:
        for r in role["rules"]:
            assert "*" not in r.get("verbs", []) + r.get("resources", []) + r.get("apiGroups", []), role
        for key, verbs in rules(role).items():
            granted.setdefault(key, set()).update(verbs)
    assert granted == want


# --- the NVIDIA runtime, GFD privileges, the configs a release carries -------------------------------------


def needs_runtime(ds_or_job: dict) -> bool:
    """Pods whose containers load NVML or hand GPUs over through the runtime: every agent but the sandbox plugin."""
    return not ds_or_job["metadata"]["name"].endswith("-sandbox-device-plugin")


@pytest.mark.parametrize(("chart", "values"), CASES)
def test_pods_that_need_the_nvidia_runtime_select_it(chart, values, tmp_path):
    # GFD and the MPS daemon load NVML without a path (cmd/gpu-feature-discovery/main.go:182,
    # cmd/mps-control-daemon/main.go:173): only the NVIDIA runtime puts libnvidia-ml and /dev/nvidia* there, and
    # it is not the default runtime on pgpu/mps pools (roles/container_toolkit).
    assert "nvml.New()" in cited("cmd/gpu-feature-discovery/main.go:182")
    assert "nvml.New()" in cited("cmd/mps-control-daemon/main.go:173")
    objs = rendered(chart, values, tmp_path)
    pods = [o for o in objs if o["kind"] in ("DaemonSet", "Job") and needs_runtime(o)]
    assert pods
    for obj in pods:
        assert pod_spec(obj).get("runtimeClassName") == accel_constants.RUNTIME_CLASS, obj["metadata"]["name"]
    tasks = yaml.safe_load((REPO / "roles" / "pool_charts" / "tasks" / "main.yml").read_text())
    created = [t["kubernetes.core.k8s"]["definition"] for t in tasks if "kubernetes.core.k8s" in t]
    defaults = yaml.safe_load((REPO / "roles" / "pool_charts" / "defaults" / "main.yml").read_text())
    toolkit = yaml.safe_load((REPO / "roles" / "container_toolkit" / "defaults" / "main.yml").read_text())
    assert [d["kind"] for d in created] == ["RuntimeClass"]
    assert defaults["pool_charts_runtime_class"] == accel_constants.RUNTIME_CLASS
    assert defaults["pool_charts_runtime_handler"] == toolkit["container_toolkit_runtime_name"]


def test_runtime_class_can_be_turned_off(tmp_path):
    for chart in ("pgpu", "mps"):
        objs = rendered(chart, {"pools": ["p"], "runtimeClassName": "", "gfd": {"enabled": True}}
                        if chart == "pgpu" else {"pools": ["p"], "runtimeClassName": ""}, tmp_path)
        assert all("runtimeClassName" not in (pod_spec(o) or {}) for o in objs if pod_spec(o))


def upstream_gfd_security() -> tuple[str, str]:
    """Upstream chart v0.20.0: GFD gets SYS_ADMIN only when a MIG strategy (or volume-mounts) is possible and
    otherwise drops every capability (deployments/helm/nvidia-device-plugin/templates/_helpers.tpl)."""
    helpers = (dp_src() / "deployments/helm/nvidia-device-plugin/templates/_helpers.tpl").read_text()
    block = re.search(r'define "gpu-feature-discovery.securityContext".*?\{\{- end -\}\}\n\{\{- end -\}\}', helpers,
                      re.S).group(0)
    assert 'requiresCapSysAdmin" .) "true"' in block and "SYS_ADMIN" in block and 'drop: ["ALL"]' in block
    return block, helpers


@pytest.mark.parametrize("mig", [False, True])
def test_gfd_security_follows_upstream(mig, tmp_path):
    upstream_gfd_security()
    configs = {"exclusive": {"migStrategy": "none"}, "mig-mixed": {"migStrategy": "mixed"} if mig else None,
               "mig-single": None}
    objs = rendered("pgpu", {"pools": ["p"], "gfd": {"enabled": True}, "configs": configs}, tmp_path)
    gfd = one(objs, "DaemonSet", "-gpu-feature-discovery")
    ctx = next(c for c in containers(pod_spec(gfd)) if c["name"] == "gpu-feature-discovery")["securityContext"]
    assert "privileged" not in ctx
    assert ctx["capabilities"] == ({"drop": ["ALL"], "add": ["SYS_ADMIN"]} if mig else {"drop": ["ALL"]})
    skips = " ".join(v for k, v in gfd["metadata"]["annotations"].items() if k.startswith("checkov.io/skip"))
    assert "CKV_K8S_16" not in skips and "CKV_K8S_20" not in skips  # nothing privileged left to excuse
    assert ("CKV_K8S_37" in skips) is mig


@pytest.mark.parametrize("inventory", ["lab", "example"])
def test_play_release_carries_only_the_configs_its_pools_use(inventory, tmp_path):
    releases = {r["key"]: r for r in _releases(inventory)}
    values = releases["pgpu"]["values"]
    objs = rendered("pgpu", {**values, "gfd": {"enabled": True}}, tmp_path)
    used = {accel_pools.device_plugin_config(p["settings"])
            for p in accel_pools.collect_pools(_inventory_hosts(inventory)) if p["pool"] in values["pools"]}
    assert set(named_configs(objs)) == used
    gfd = one(objs, "DaemonSet", "-gpu-feature-discovery")
    sys_admin = any(c["securityContext"].get("capabilities", {}).get("add") == ["SYS_ADMIN"]
                    for c in containers(pod_spec(gfd)))
    assert sys_admin == any(name.startswith("mig-") for name in used)


def test_pgpu_release_without_mig_pools_adds_no_sys_admin(tmp_path):
    pools = [{"pool": "plain", "settings": _settings(pool="plain", mode="pgpu"), "hosts": ["n"]}]
    values = accel_chart_values.release_values("pgpu", pools, {})
    objs = rendered("pgpu", {**values, "gfd": {"enabled": True}}, tmp_path)
    assert set(named_configs(objs)) == {"exclusive"}
    for _, c in agent_containers(objs):
        assert "add" not in c.get("securityContext", {}).get("capabilities", {}), c["name"]
