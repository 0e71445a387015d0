"""Every KubeSchedulerConfiguration and extender entry the vgpu chart renders, through kube-scheduler's own code.

Evidence:
- Kubernetes 1.36 (what the lab and the product target): the real kube-scheduler v1.36.3 binary the toolchain
  builds, started with the chart's own container command (config path moved to a temp dir) plus
  `--write-config-to`. It decodes the file strictly (cmd/kube-scheduler/app/options/configfile.go loadConfig),
  validates it (options.go ApplyTo: validation.ValidateKubeSchedulerConfiguration), builds every profile's framework
  and the extenders (server.go Setup: scheduler.New), writes the completed configuration and exits 0
  (configfile.go LogOrWriteConfig). `--master` on a closed port and `--secure-port=0` keep it off any network:
  nothing before the write dials the API server.
- Kubernetes 1.25 (the oldest the charts support): ka-conform-schedcfg125, a harness that runs kube-scheduler
  v1.25.16's own decoder and validation packages on the same files.
An extender-config release renders only an `extenders:` entry for the cluster's scheduler: it is checked inside the
smallest KubeSchedulerConfiguration that holds it, as an administrator would merge it.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import upstream
import yaml
from chartlib import by_kind, containers, pod_spec, tool
from vgpu_cases import CASES, render_case

CONFIG_KIND = "KubeSchedulerConfiguration"
API_VERSION = "kubescheduler.config.k8s.io/v1"


def scheduler_configs(objs: list[dict]) -> list[tuple[str, str, list[str] | None]]:
    """(name, KubeSchedulerConfiguration text, kube-scheduler command or None) for every config the release renders."""
    commands: dict[str, list[str]] = {}
    for obj in objs:
        spec = pod_spec(obj)
        if not spec:
            continue
        for c in containers(spec):
            if c["name"] != "kube-scheduler":
                continue
            mount = {m["name"]: m["mountPath"] for m in c.get("volumeMounts", [])}
            for vol in spec.get("volumes", []):
                if "configMap" in vol and vol["name"] in mount:
                    commands[vol["configMap"]["name"]] = [*c["command"], "@" + mount[vol["name"]]]
    out = []
    for name, cm in by_kind(objs, "ConfigMap").items():
        for key, text in (cm.get("data") or {}).items():
            doc = yaml.safe_load(text) if key.endswith(".yaml") else None
            if not isinstance(doc, dict):
                continue
            if doc.get("kind") == CONFIG_KIND:
                out.append((f"{name}/{key}", text, commands.get(name)))
            elif set(doc) == {"extenders"}:
                out.append((f"{name}/{key}", f"apiVersion: {API_VERSION}\nkind: {CONFIG_KIND}\n{text}", None))
    return out


def kube_scheduler_argv(command: list[str] | None, config: Path, out: Path) -> list[str]:
    """The chart's own command with the mounted config directory moved to the test's; the flags that keep the
    binary off the network and make it write the completed configuration come last (pflag: last one wins)."""
    binary = tool("kube-scheduler")
    if not binary:
        pytest.fail("kube-scheduler v1.36 not built: run `make toolchain`")
    if command is None:  # an extender entry for the cluster's own scheduler
        args = [f"--config={config}"]
    else:
        mount_dir = command[-1][1:]
        args = [a.replace(f"{mount_dir}/", f"{config.parent}/") for a in command[1:-1]]
        args = [re.sub(r"^--cert-dir=.*", f"--cert-dir={out.parent / 'certs'}", a) for a in args]
    return [binary, *args, "--master=https://127.0.0.1:1", "--secure-port=0", f"--write-config-to={out}"]


def cases():
    return [pytest.param(release, values, id=name) for name, release, values in CASES]


@pytest.mark.parametrize(("release", "values"), cases())
def test_kube_scheduler_136_loads_every_rendered_config(tmp_path, release, values):
    configs = scheduler_configs(render_case(tmp_path, release, values))
    assert configs, "every vgpu release renders a scheduler configuration or an extender entry"
    for name, text, command in configs:
        work = tmp_path / name.replace("/", "_")
        work.mkdir()
        config = work / (name.rsplit("/", 1)[1])
        config.write_text(text)
        out = work / "completed.yaml"
        proc = subprocess.run(kube_scheduler_argv(command, config, out), capture_output=True, text=True,
                              timeout=60, check=False)
        assert proc.returncode == 0 and out.exists(), f"kube-scheduler v1.36 refused {name}:\n{proc.stderr[-3000:]}"
        completed = yaml.safe_load(out.read_text())
        rendered = yaml.safe_load(text)
        # What the chart asked for is what the scheduler will run: its profiles and its extenders, in order.
        assert [p["schedulerName"] for p in completed["profiles"]] == \
            [p["schedulerName"] for p in rendered.get("profiles", [{"schedulerName": "default-scheduler"}])]
        assert [e["urlPrefix"] for e in completed.get("extenders", [])] == \
            [e["urlPrefix"] for e in rendered["extenders"]]
        for got, want in zip(completed["extenders"], rendered["extenders"], strict=True):
            for verb in ("filterVerb", "bindVerb", "prioritizeVerb", "preemptVerb"):
                assert got.get(verb, "") == want.get(verb, ""), (name, verb)
            assert [r["name"] for r in got.get("managedResources", [])] == \
                [r["name"] for r in want.get("managedResources", [])]


@pytest.mark.parametrize(("release", "values"), cases())
def test_kube_scheduler_125_loads_every_rendered_config(tmp_path, release, values):
    configs = scheduler_configs(render_case(tmp_path, release, values, kube_version="1.25.0"))
    assert configs
    files = []
    for name, text, _ in configs:
        path = tmp_path / name.replace("/", "_")
        path.write_text(text)
        files.append(str(path))
    proc = upstream.run("ka-conform-schedcfg125", *files)
    assert proc.returncode == 0, f"kube-scheduler v1.25's loader refused:\n{proc.stdout}{proc.stderr}"
    assert proc.stdout.count(": ok\n") == len(files), proc.stdout


BROKEN = {
    # A typo: strict decoding refuses unknown fields (silently ignored would leave the extender unconfigured).
    "unknown field": "extenders:\n  - urlPrefix: https://127.0.0.1:8443\n    filterVerb: filter\n    bindverb: bind\n",
    # Validation: an extender that binds must not be the second binder, and weights must be positive.
    "two binders": ("extenders:\n  - {urlPrefix: 'https://a', bindVerb: bind, weight: 1}\n"
                    "  - {urlPrefix: 'https://b', bindVerb: bind, weight: 1}\n"),
}


@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_both_loaders_refuse_a_broken_config(tmp_path, broken):
    """The checks above can fail: each loader refuses configurations a scheduler would refuse."""
    config = tmp_path / "config.yaml"
    config.write_text(f"apiVersion: {API_VERSION}\nkind: {CONFIG_KIND}\n{BROKEN[broken]}")
    out = tmp_path / "completed.yaml"
    proc = subprocess.run(kube_scheduler_argv(None, config, out), capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode != 0 and not out.exists(), proc.stderr
    assert upstream.run("ka-conform-schedcfg125", str(config)).returncode == 1
