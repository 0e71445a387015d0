"""scripts/kalab: lab processes fail loudly and stop by PID; the fake nodes' capacity; the stand-ins' registration
formats and their entry point as lab processes. (The package's import direction: test_kalab_imports.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from kalab import cluster, nodes, processes, site, standins


def test_a_component_that_dies_stops_up_with_its_own_last_log_lines(tmp_path):
    with pytest.raises(SystemExit) as exc:
        processes.start(tmp_path, "broken", ["/bin/sh", "-c", "echo first; echo 'flag provided but not defined'; "
                                             "exit 3"], {}, lambda: False, timeout=10)
    assert "broken exited with 3" in str(exc.value) and "flag provided but not defined" in str(exc.value)
    assert not (tmp_path / "procs" / "broken.pid").exists()


def test_a_component_that_never_gets_ready_is_stopped(tmp_path):
    with pytest.raises(SystemExit) as exc:
        processes.start(tmp_path, "slow", ["/bin/sh", "-c", "echo waiting; exec sleep 60"], {}, lambda: False,
                        timeout=1)
    assert "not ready after 1 s" in str(exc.value) and "waiting" in str(exc.value)
    assert processes.running(tmp_path) == {}


def test_stop_all_stops_by_pid_only_what_the_lab_started(tmp_path):
    pid = processes.start(tmp_path, "sleeper", ["/bin/sleep", "60"], {}, lambda: True)
    assert processes.running(tmp_path) == {"sleeper": pid}
    # A PID file whose process is now another program is not killed.
    (tmp_path / "procs" / "other.pid").write_text(f"{pid} /not/this/program\n")
    processes.stop_all(tmp_path)
    assert processes.running(tmp_path) == {}
    assert not list((tmp_path / "procs").glob("*.pid"))


def test_registration_is_hamis_json_encoding():
    gpus = [{"uuid": "GPU-a", "name": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559, "numa_node": 0},
            {"uuid": "GPU-b", "name": "Tesla T4", "memory_total_mib": 15360, "numa_node": 1}]
    regs = standins.registration(gpus, {"nvidia": {"deviceSplitCount": 4, "deviceMemoryScaling": 1.5,
                                                   "deviceCoreScaling": 1}})
    # json tags and omitempty of HAMi's DeviceInfo: index 0 and numa 0 are left out.
    assert regs[0] == {"id": "GPU-a", "count": 4, "devmem": 122338, "devcore": 100, "type": "NVIDIA H100 80GB HBM3",
                       "mode": "hami-core", "health": True}
    assert regs[1]["type"] == "NVIDIA-Tesla T4" and regs[1]["index"] == 1 and regs[1]["numa"] == 1
    assert json.loads(json.dumps(regs)) == regs
    # A node's nodeconfig entry overrides what it sets (HAMi plugin/server.go readFromConfigFile, mergo override).
    own = standins.registration(gpus, {"nvidia": {"deviceSplitCount": 4, "deviceMemoryScaling": 1.5}},
                                {"name": "n", "devicesplitcount": 7, "devicememoryscaling": 1.0})
    assert own[0]["count"] == 7 and own[0]["devmem"] == 81559


def test_fresh_lab_nodes_carry_no_kube_accel_labels():
    """The lab's nodes are a fresh cluster's: every kube-accel label comes from the cluster play."""
    hosts = site.gpu_hosts(site.inventory())
    for name, hostvars in hosts.items():
        labels = nodes.node_manifest(name, hostvars)["metadata"]["labels"]
        assert not [k for k in labels if k.startswith("kube-accel.io/")], name
        assert "nvidia.com/device-plugin.config" not in labels and "nvidia.com/gpu.present" not in labels


def test_a_wrapped_component_is_tracked_by_the_program_it_execs(tmp_path):
    """A component started through a wrapper (the GPU Operator's mount namespace) is recorded, found and stopped by
    the program the wrapper execs, not by the wrapper's name."""
    pid = processes.start(tmp_path, "wrapped", ["/bin/sh", "-c", 'exec "$@"', "sh", "/bin/sleep", "60"], {},
                          lambda: True, exe="/bin/sleep")
    assert (tmp_path / "procs" / "wrapped.pid").read_text() == f"{pid} /bin/sleep\n"
    assert processes.running(tmp_path) == {"wrapped": pid}
    processes.stop_all(tmp_path)
    assert processes.running(tmp_path) == {}


def test_nodes_start_without_gpu_capacity_where_a_stand_in_registers_them():
    """Nodes of pools whose device plugin a lab stand-in registers (pgpu, mps, timeslice, vgpu-hami) start with no
    GPU resource, as a fresh node does before its plugin runs; MIG and gpu-manager nodes get the inventory's
    capacity, marked so that verify does not count it; without stand-ins (--no-upstream) every node gets it."""
    from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import pools as accel_pools
    from ansible_collections.kube_accel.gpu.plugins.module_utils.verify.pool_checks import (
        LAB_CAPACITY_ANNOTATION,
        LAB_CAPACITY_FROM_INVENTORY,
    )

    hosts = site.gpu_hosts(site.inventory())
    by_standin = set()
    for name, hostvars in hosts.items():
        settings = accel_pools.pool_settings(hostvars)
        node = nodes.node_manifest(name, hostvars)
        gpu = {k for k in node["status"]["capacity"] if "/" in k}
        marked = node["metadata"]["annotations"].get(LAB_CAPACITY_ANNOTATION) == LAB_CAPACITY_FROM_INVENTORY
        if settings["accel_mode"] == "dra":
            # A dra node advertises no extended resource: its GPUs are ResourceSlices (dra-kubelet-plugin-standin).
            bare = nodes.node_manifest(name, hostvars, standins=False)
            assert not gpu and not {k for k in bare["status"]["capacity"] if "/" in k}, name
            continue
        if nodes.capacity_by_standin(settings):
            by_standin.add(settings["accel_mode"])
            assert not gpu and not marked, name
        else:
            assert gpu and marked, name
        bare = nodes.node_manifest(name, hostvars, standins=False)
        assert {k for k in bare["status"]["capacity"] if "/" in k}
        assert bare["metadata"]["annotations"][LAB_CAPACITY_ANNOTATION] == LAB_CAPACITY_FROM_INVENTORY
    assert by_standin == {"pgpu", "mps", "timeslice", "vgpu"}


def test_plugin_resources_replicate_and_rename_like_the_plugin():
    """The stand-in's registration from a loaded config (shapes as k8s-device-plugin's loader returns them;
    tests/conformance/test_device_plugin.py runs the real loader over every rendered config)."""
    assert standins.plugin_resources({"flags": {"migStrategy": "none"}}, 4) == {"nvidia.com/gpu": 4}
    assert standins.plugin_resources({"flags": {}}, 2) == {"nvidia.com/gpu": 2}
    mps = {"flags": {"migStrategy": "none"},
           "sharing": {"mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 8}]}}}
    assert standins.plugin_resources(mps, 2) == {"nvidia.com/gpu": 16}
    sliced = {"sharing": {"timeSlicing": {"renameByDefault": True, "resources": [
        {"name": "nvidia.com/gpu", "rename": "nvidia.com/gpu.shared", "replicas": 4}]}}}
    assert standins.plugin_resources(sliced, 3) == {"nvidia.com/gpu.shared": 12}
    assert standins.plugin_resources({"flags": {"migStrategy": "mixed"}}, 1) is None


def test_config_manager_env_is_the_rendered_env_with_the_kubelets_parts_moved(tmp_path):
    c = {"env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                 {"name": "KUBECONFIG", "value": ""}, {"name": "ONESHOT", "value": "false"},
                 {"name": "CONFIG_FILE_SRCDIR", "value": "/available-configs"}]}
    env = standins.config_manager_env(c, "n1", tmp_path / "kc", tmp_path / "src", tmp_path / "dst")
    assert env == {"NODE_NAME": "n1", "KUBECONFIG": str(tmp_path / "kc"), "ONESHOT": "false",
                   "CONFIG_FILE_SRCDIR": str(tmp_path / "src"), "CONFIG_FILE_DST": str(tmp_path / "dst")}
    other = {"env": [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}
    with pytest.raises(ValueError, match="metadata.name"):
        standins.config_manager_env(other, "n1", tmp_path, tmp_path, tmp_path)


def test_stand_ins_stop_before_what_they_started(tmp_path, monkeypatch):
    """lab down stops the device-plugin stand-in before the config-manager processes it starts, so none is
    restarted behind stop_all."""
    order = []
    real = processes.stop_one
    (tmp_path / "procs").mkdir()
    for name in ("config-manager-a", "device-plugin-standin", "hami-scheduler"):
        (tmp_path / "procs" / f"{name}.pid").write_text("1 /not/running\n")
    monkeypatch.setattr(processes, "stop_one", lambda d, name: (order.append(name), real(d, name)))
    processes.stop_all(tmp_path)
    assert order[0] == "device-plugin-standin" and set(order) == {"config-manager-a", "hami-scheduler",
                                                                   "device-plugin-standin"}


def test_plugin_pods_pick_one_pod_per_node_and_prefer_the_inventorys_namespace():
    def pod(ns, name, node, phase="Running", image="nvcr.io/nvidia/k8s-device-plugin:v0.20.0"):
        return {"metadata": {"namespace": ns, "name": name, "labels": {"app.kubernetes.io/component": "device-plugin"}},
                "spec": {"nodeName": node, "containers": [{"image": image}]}, "status": {"phase": phase}}

    pods = [pod("kube-accel-chart-tests", "t", "n1"), pod("kube-accel", "k", "n1"), pod("other", "o", "n2"),
            pod("kube-accel", "p", "n3", phase="Pending"), pod("kube-accel", "h", "n4", image="projecthami/hami:v2")]
    chosen = standins.plugin_pods(pods, {"n1", "n2", "n3", "n4"}, "k8s-device-plugin", "kube-accel")
    assert {n: p["metadata"]["name"] for n, p in chosen.items()} == {"n1": "k", "n2": "o"}
    alone = standins.plugin_pods(pods[:1], {"n1"}, "k8s-device-plugin", "kube-accel")
    assert alone["n1"]["metadata"]["name"] == "t"


def test_a_stand_in_runs_as_a_lab_process_from_its_module(tmp_path):
    """start() gives a process PATH and its env only, in the lab directory: the stand-ins' argv and env
    (python -P -m kalab.standins) find the package from there, and each command is known."""
    argv, env = standins.standin_process("--help")
    assert argv[:4] == [sys.executable, "-P", "-m", "kalab.standins"]
    (tmp_path / "kalab").mkdir()  # the lab directory (cwd) is not on the path: this empty one does not shadow it
    proc = subprocess.run(argv, env={"PATH": os.environ["PATH"], **env}, cwd=tmp_path, capture_output=True,
                          text=True, check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "{standin,dp-standin,dra-standin,exporter}" in proc.stdout
    assert env["PYTHONPATH"] == str(site.REPO / "scripts")


def test_lab_clusters_are_created_one_at_a_time(tmp_path, monkeypatch):
    """kwokctl picks free ports counting down from 32767 and binds them later: while one lab's cluster is being
    created, another process (a second lab) cannot take the creation lock, and can once the first is done."""
    monkeypatch.setattr(cluster, "CREATE_LOCK", tmp_path / "locks" / "kwokctl-create.lock")
    try_lock = ("import fcntl, sys\n"
                "with open(sys.argv[1], 'w') as f:\n"
                "    try:\n"
                "        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
                "    except BlockingIOError:\n"
                "        sys.exit(3)\n")

    def other_process() -> int:
        return subprocess.run([sys.executable, "-c", try_lock, str(cluster.CREATE_LOCK)], check=False).returncode

    with cluster.one_creation_at_a_time():
        assert other_process() == 3
    assert other_process() == 0
