"""NVIDIA k8s-device-plugin v0.20.0's config-manager (the built binary) against the lab's API server.

The pgpu and mps charts are rendered with the lab's release values (the cluster play's accel_pool_releases). Their
config-manager containers run with exactly their rendered env; only what a pod gets from the kubelet moves:
KUBECONFIG (in-cluster -> the lab's), NODE_NAME (fieldRef), and the ConfigMap mount and config destination
(temporary directories). Changing nvidia.com/device-plugin.config on a lab node makes it write the matching
config, for every named config those charts render; the watching sidecar also signals the plugin it serves.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.lab, pytest.mark.cluster_only]

REPO = Path(__file__).resolve().parents[2]
import upstream  # noqa: E402

NODE = "lab-config-manager-0"  # a node of its own: the pools' labels stay the cluster play's


def lab_releases() -> list[dict]:
    from kalab.site import gpu_hosts, inventory
    from kalab.upstream import releases

    return [r for r in releases(gpu_hosts(inventory()), {"runtime_class": "nvidia"})
            if Path(r["chart"]).name in ("pgpu", "mps")]


def rendered(release: dict, tmp_path: Path) -> list[dict]:
    from kalab.site import versions
    from kalab.upstream import render

    work = tmp_path / release["name"]
    work.mkdir()
    return render(release, "kube-accel", versions()["K8S_VERSION"].lstrip("v"), work)


def config_managers(objs: list[dict]) -> list[tuple[str, dict]]:
    out = []
    for ds in (o for o in objs if o["kind"] == "DaemonSet"):
        spec = ds["spec"]["template"]["spec"]
        for c in spec.get("initContainers", []) + spec["containers"]:
            if c["command"][0] == "config-manager":
                out.append((f"{ds['metadata']['name']}/{c['name']}", c))
    return out


def named_configs(objs: list[dict]) -> dict[str, str]:
    (cm,) = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-configs")]
    return cm["data"]


def env_of(c: dict, srcdir: Path, dst: Path, kubeconfig: Path) -> dict[str, str]:
    from kalab.standins import config_manager_env

    rendered = {e["name"]: e.get("value") for e in c["env"]}
    assert rendered["KUBECONFIG"] == "" and rendered["CONFIG_FILE_SRCDIR"] == "/available-configs"
    assert rendered["CONFIG_FILE_DST"] == "/config/config.yaml"
    return config_manager_env(c, NODE, kubeconfig, srcdir, dst)


@pytest.fixture(scope="module")
def node(lab):
    body = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": NODE, "annotations": {"kwok.x-k8s.io/node": "fake"},
                         "labels": {"type": "kwok", "kubernetes.io/hostname": NODE}}}
    subprocess.run([str(lab.kubectl), "--kubeconfig", str(lab.kubeconfig), "apply", "-f", "-"],
                   input=json.dumps(body), capture_output=True, text=True, check=True)
    yield NODE
    lab.kubectl_run("delete", "node", NODE, "--wait=false", check=False)


def set_label(lab, value: str | None) -> None:
    label = "nvidia.com/device-plugin.config"
    lab.kubectl_run("label", "node", NODE, "--overwrite", f"{label}={value}" if value else f"{label}-")


class Sidecar:
    """One config-manager container with its rendered env, in a PID namespace of its own (the pod's shared process
    namespace), beside a process named like the one it signals: a shell that counts SIGHUPs."""

    def __init__(self, lab, c: dict, configs: dict[str, str], tmp_path: Path):
        assert shutil.which("unshare"), "util-linux unshare is needed for a PID namespace"
        self.srcdir, self.dst, self.hups = tmp_path / "configs", tmp_path / "config.yaml", tmp_path / "hups"
        self.srcdir.mkdir()
        for name, text in configs.items():  # what the ConfigMap volume mounts: one file per key
            (self.srcdir / name).write_text(text)
        self.hups.write_text("")
        env = env_of(c, self.srcdir, self.dst, lab.kubeconfig)
        assert env["ONESHOT"] == "false" and env["SEND_SIGNAL"] == "true" and env["PROCESS_TO_SIGNAL"]
        upstream.binary("config-manager")  # built, or a failure that says how
        from kalab.standins import config_manager_argv

        self.log = tmp_path / "config-manager.log"
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(config_manager_argv(env, self.hups),
                                         env={"PATH": os.environ["PATH"], **env}, stdout=out,
                                         stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def signals(self) -> int:
        return self.hups.read_text().count("HUP")

    def signalled(self, name: str, before: int) -> bool:
        """The plugin process was signalled for ``name``: the counter saw another SIGHUP, or config-manager (the
        upstream binary, whose only match for PROCESS_TO_SIGNAL in its PID namespace is the counter) reports the
        signal sent after updating to ``name``. On a loaded CI machine the counter's own record has come back empty
        while config-manager reported each signal sent: the second is the evidence there."""
        if self.signals() > before:
            return True
        text = self.log.read_text()
        update = text.rfind(f"Updating to config: {name}\n")
        return update >= 0 and "Successfully sent signal" in text[update:]

    def applied(self) -> str | None:
        return Path(os.readlink(self.dst)).name if self.dst.is_symlink() else None

    def wait(self, what: str, check, timeout: float = 30) -> None:
        deadline = time.time() + timeout
        while not check():
            if self.proc.poll() is not None or time.time() > deadline:
                pytest.fail(f"config-manager: {what}; it said:\n{self.stop()[-3000:]}")
            time.sleep(0.1)

    def stop(self) -> str:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
        self.proc.wait(timeout=10)
        return self.log.read_text()


def sidecars(objs: list[dict]) -> list[tuple[str, dict]]:
    return [(w, c) for w, c in config_managers(objs) if {e["name"]: e.get("value") for e in c["env"]}["ONESHOT"]
            == "false"]


def test_every_named_config_is_applied_when_the_node_label_names_it(lab, node, tmp_path):
    """Every config-manager sidecar of the lab's pgpu and mps releases: labelling the node with each named config
    in turn makes it point the plugin's config file at exactly that config and signal the plugin."""
    applied = 0
    for release in lab_releases():
        objs = rendered(release, tmp_path)
        configs = named_configs(objs)
        assert sidecars(objs), f"{release['name']}: no config-manager sidecar rendered"
        for where, c in sidecars(objs):
            set_label(lab, None)
            work = tmp_path / where.replace("/", "-")
            work.mkdir()
            car = Sidecar(lab, c, configs, work)
            try:
                # Started without a label: the chart's DEFAULT_CONFIG.
                default = env_of(c, work, work, lab.kubeconfig)["DEFAULT_CONFIG"]
                car.wait(f"never applied the default config {default}",
                         lambda car=car, default=default: car.applied() == default)
                for name, text in sorted(configs.items()):
                    before, changed = car.signals(), car.applied() != name
                    set_label(lab, name)
                    car.wait(f"{where} never applied {name}", lambda car=car, name=name: car.applied() == name)
                    assert car.dst.read_text() == text
                    if changed:
                        car.wait(f"{where} applied {name} without signalling {c['env']}",
                                 lambda car=car, before=before, name=name: car.signalled(name, before))
                    applied += 1
            finally:
                out = car.stop()
            for name in configs:
                assert f"Updating to config: {name}" in out or name == default, f"{where}:\n{out[-3000:]}"
    assert applied >= 3, "the lab's pgpu and mps releases render at least three named configs"


def test_a_label_naming_no_rendered_config_stops_config_manager(lab, node, tmp_path):
    (release,) = [r for r in lab_releases() if r["key"] == "mps"]
    objs = rendered(release, tmp_path)
    where, c = sidecars(objs)[0]
    set_label(lab, "mps-999")
    car = Sidecar(lab, c, named_configs(objs), tmp_path)
    try:
        car.proc.wait(timeout=30)
    finally:
        out = car.stop()
    assert car.proc.returncode != 0 and "specified config mps-999 does not exist" in out, f"{where}:\n{out[-2000:]}"
