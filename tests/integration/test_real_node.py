"""scripts/gpu-e2e.sh on this machine, without a GPU: the first real kubelet kube-accel meets (issue 32 step 3).

`make gpu-bundle` (fast compression) builds the bundle; gpu-e2e.sh then starts etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and a kubelet on containerd 2.x with kube-accel's NVIDIA drop-in and runtime
settings (kube-accel's modules, as Ansible ships them), and for each pool of scripts/gpu_e2e/pools.yml applies the
node's labels and the releases the cluster play renders. Evidence: real kubelet, containerd, runc, CNI ptp; the only
stand-in is the CDI spec (no GPU: it gives containers none). What must hold here:

- the node registers and is Ready; every release's DaemonSets roll out on it (image, RuntimeClass handler, mounts,
  service account and the API server through the kubernetes Service address, config-manager);
- the device plugin and the MPS daemon load the config kube-accel rendered (their logs print it; the sharing replicas
  are the promised ones) and stop only at NVML, which this machine lacks;
- the hostile tenant's pod (no GPU request, NVIDIA_VISIBLE_DEVICES=all, RuntimeClass nvidia) runs and finds no GPU;
- busybox's ip applet stands in for iproute2 (the lent GPU host has none), and everything started is gone after.
On a GPU host the same script is `make gpu-e2e` (docs/gpu-validation.md).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.realnode


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("gpu-e2e.sh runs a kubelet: root only")
    bundle = tmp_path_factory.mktemp("bundle") / "gpu-bundle"
    env = {**os.environ, "XZ_FAST": "1", "PATH": f"/usr/local/go/bin:{os.environ['PATH']}"}
    subprocess.run([str(REPO / "scripts" / "gpu-bundle.sh"), str(bundle)], env=env, check=True, timeout=1800)
    out = tmp_path_factory.mktemp("e2e")
    proc = subprocess.run(["bash", str(bundle / "gpu-e2e.sh"), str(out)], capture_output=True, text=True, check=False,
                          env={**os.environ, "E2E_NO_GPU": "1", "E2E_BUSYBOX_IP": "1"}, timeout=600)
    yield out, proc
    shutil.rmtree(bundle, ignore_errors=True)


def verdicts(out: Path) -> list[str]:
    return (out / "verdicts.txt").read_text().splitlines()


def test_every_check_passes(run):
    out, proc = run
    lines = verdicts(out)
    assert lines and lines[-1].startswith("RESULT PASS (no GPU"), proc.stdout[-4000:] + "\n".join(lines)
    for pool in ("pgpu", "timeslice", "mps"):
        agents = next(line for line in lines if line.startswith(f"PASS {pool} agents"))
        assert "did NOT load" not in agents and "loaded its config" in agents


def test_agents_stop_only_at_nvml(run):
    out, _ = run
    logs = {p.name: p.read_text() for p in (out / "pools").glob("*/agent-*.log")}
    assert logs
    for name, text in logs.items():
        assert "unable to load config" not in text, name
    assert any("ERROR_LIBRARY_NOT_FOUND" in text for text in logs.values())


def test_tenant_pod_ran_and_got_no_gpu(run):
    out, _ = run
    line = next(line for line in verdicts(out) if " pgpu tenant" in line)
    assert line.startswith("PASS") and "dlopen libcuda.so.1" in line


def test_nothing_left_behind(run):
    out, _ = run
    assert "ip: busybox's applet" in (out / "run.log").read_text()
    mounts = Path("/proc/self/mountinfo").read_text()
    assert "/tmp/kae2e/" not in mounts and " /var/lib/kubelet " not in mounts and "/run/nvidia/mps" not in mounts
    lo = subprocess.run(["ip", "-4", "addr", "show", "dev", "lo"], capture_output=True, text=True, check=True).stdout
    assert "10.96.0.1/" not in lo and "10.99.0.1/" not in lo
    for pid_file in Path("/tmp/kae2e").glob("*.pid"):
        assert not Path("/proc", pid_file.read_text().strip()).exists(), pid_file.name
    assert not list(Path("/sys/fs/cgroup").glob("*/kubepods")) and not Path("/sys/fs/cgroup/kubepods").exists()
