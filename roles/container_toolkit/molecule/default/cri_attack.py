#!/usr/bin/env python3
"""The hostile tenant on a real containerd, through the CRI as the kubelet calls it.

Runs on the Molecule host as root, where the role has written containerd's NVIDIA drop-in and the NVIDIA runtime's
config.toml, and where kube-accel-cdi.service's command has written a CDI spec for nvidia.com/gpu (a stand-in
generator: no GPU here; its devices are device nodes with /dev/null's numbers at /dev/nvidia0 and /dev/nvidia1 and
an environment variable naming the fake GPU). It starts the host's containerd with the host's own configuration,
imports a tiny image built from the host's dash and sleep, and runs one CRI pod per case with crictl: what the
kubelet would send for a pod that asks for no GPU but sets NVIDIA_VISIBLE_DEVICES, and for the allocations the device
plugins hand out (volume-mounts; CDI devices in the CRI request). Each case prints the GPU device nodes and the fake
GPU the container sees. The result is one JSON object on stdout; containerd is stopped by its PID before exit.

  cri_attack.py [--ctk-config PATH]   PATH: the NVIDIA runtime reads this config instead of
                                      /etc/nvidia-container-runtime/config.toml (NVIDIA_CTK_CONFIG_FILE_PATH in
                                      containerd's environment, inherited by the shim and the runtime)
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib

WORK = "/var/tmp/cri-attack"
SOCK = "/run/containerd/containerd.sock"
IMAGE = "localhost/kube-accel/cri-attack:1"
VOLUME_ROOT = "/var/run/nvidia-container-devices"  # where the device plugin's volume-mounts allocation points
# What each container reports: every GPU device node it has, and which fake GPU the CDI spec injected.
PROBE = ('for d in /dev/nvidia*; do [ -c "$d" ] && echo "device $d"; done; '
         'echo "fake-gpu ${KUBE_ACCEL_FAKE_GPU:-none}"; echo "NVIDIA_VISIBLE_DEVICES=${NVIDIA_VISIBLE_DEVICES:-}"')


def case(handler, env=None, mounts=None, cdi=None):
    return {"handler": handler, "env": env or {}, "mounts": mounts or [], "cdi": cdi or []}


# name -> (runtime handler, env, mounts as (host, container), CDI devices). "" is containerd's default runtime.
CASES = {
    # The tenant: no allocation, asks for every GPU by the variable (NVIDIA's CUDA images set it), on the default
    # runtime (nvidia on HAMi pools) and by RuntimeClass nvidia (any pool).
    "attack-default-runtime": case("", {"NVIDIA_VISIBLE_DEVICES": "all"}),
    "attack-runtimeclass-nvidia": case("nvidia", {"NVIDIA_VISIBLE_DEVICES": "all"}),
    "attack-cdi-name-in-env": case("nvidia", {"NVIDIA_VISIBLE_DEVICES": "nvidia.com/gpu=all"}),
    # A volume the tenant may have (an emptyDir is a host directory) mounted where the allocation would be.
    "attack-emptydir-mount": case("nvidia", {"NVIDIA_VISIBLE_DEVICES": VOLUME_ROOT},
                                  [(f"{WORK}/emptydir", f"{VOLUME_ROOT}/all")]),
    # The device plugins' allocations: volume-mounts (NVIDIA's plugin and HAMi's, what kube-accel's charts use) on
    # RuntimeClass nvidia, and a CDI device in the CRI request (cdi-cri) on runc.
    "allocated-volume-mounts": case("nvidia", {"NVIDIA_VISIBLE_DEVICES": VOLUME_ROOT},
                                    [("/dev/null", f"{VOLUME_ROOT}/GPU-fake-0")]),
    "allocated-cdi-cri": case("runc", cdi=["nvidia.com/gpu=GPU-fake-1"]),
    # The charts' agents: every GPU through the same volume-mount channel (hostPath /dev/null at .../all).
    "agent-all-gpus-by-mount": case("nvidia", mounts=[("/dev/null", f"{VOLUME_ROOT}/all")]),
}


def run(*argv, check=True, env=None, timeout=60):
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout}")
    return proc


def layer(files):
    """An uncompressed tar layer of the host files (with their directories)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs = sorted({os.path.dirname(p).lstrip("/") for p in files} | {"dev", "proc", "sys", "tmp", "etc", "run"})
        done = set()
        for d in dirs:
            parts = d.split("/")
            for i in range(1, len(parts) + 1):
                sub = "/".join(parts[:i])
                if sub and sub not in done:
                    info = tarfile.TarInfo(sub)
                    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
                    tar.addfile(info)
                    done.add(sub)
        for path in sorted(files):
            with open(path, "rb") as f:
                data = f.read()
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode, info.mtime = len(data), 0o755, 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def build_image(out, names):
    """OCI image layout tar: the host's dash and sleep with the libraries they load (ldd), one image per name."""
    binaries = ["/bin/dash", "/bin/sleep"]
    files = set(binaries)
    for b in binaries:  # each library under the path the loader asks for (open() follows the host's links)
        files |= {t for line in run("ldd", b).stdout.splitlines() for t in line.split() if t.startswith("/")}
    files = {f for f in files if os.path.isfile(f)}
    layer_data = layer(files)
    # /bin/sh -> dash, so the probe runs as it would in any image.
    extra = io.BytesIO()
    with tarfile.open(fileobj=extra, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("bin/sh")
        info.type, info.linkname, info.mtime = tarfile.SYMTYPE, "dash", 0
        tar.addfile(info)
    blobs = {}

    def blob(data, media):
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return {"mediaType": media, "digest": digest, "size": len(data)}

    layers = [blob(layer_data, "application/vnd.oci.image.layer.v1.tar"),
              blob(extra.getvalue(), "application/vnd.oci.image.layer.v1.tar")]
    manifests = []
    for name, cfg in names.items():
        config = {"architecture": "amd64", "os": "linux",
                  "config": {"Env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"], **cfg},
                  "rootfs": {"type": "layers", "diff_ids": [d["digest"] for d in layers]}}
        cdesc = blob(json.dumps(config, sort_keys=True).encode(), "application/vnd.oci.image.config.v1+json")
        manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "config": cdesc, "layers": layers}
        mdesc = blob(json.dumps(manifest, sort_keys=True).encode(), "application/vnd.oci.image.manifest.v1+json")
        mdesc["platform"] = {"architecture": "amd64", "os": "linux"}
        mdesc["annotations"] = {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name}
        manifests.append(mdesc)
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": manifests}
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        entries = {"oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
                   "index.json": json.dumps(index, sort_keys=True).encode(),
                   **{f"blobs/sha256/{d.split(':', 1)[1]}": data for d, data in blobs.items()}}
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))


def crictl(*args, check=True):
    return run("crictl", "--runtime-endpoint", f"unix://{SOCK}", "--image-endpoint", f"unix://{SOCK}",
               "--timeout", "20s", *args, check=check)


def run_case(name, spec):
    logs = f"{WORK}/pods/{name}"
    os.makedirs(logs, exist_ok=True)
    pod = {"metadata": {"name": name, "namespace": "tenant", "uid": f"{name}-uid", "attempt": 0},
           "log_directory": logs, "linux": {"security_context": {"namespace_options": {"network": 2}}}}
    ctr = {"metadata": {"name": "probe"}, "image": {"image": IMAGE}, "command": ["/bin/sh", "-c", PROBE],
           "log_path": "probe.log",
           "envs": [{"key": k, "value": v} for k, v in spec["env"].items()],
           "mounts": [{"host_path": h, "container_path": c, "readonly": True} for h, c in spec["mounts"]],
           "CDI_devices": [{"name": d} for d in spec["cdi"]],
           # What the restricted Pod Security level leaves a tenant: no capabilities, so not privileged for the
           # NVIDIA runtime (CAP_SYS_ADMIN in the bounding set).
           "linux": {"security_context": {"capabilities": {"drop_capabilities": ["ALL"]}}}}
    pod_file, ctr_file = f"{WORK}/{name}-pod.json", f"{WORK}/{name}-ctr.json"
    with open(pod_file, "w") as f:
        json.dump(pod, f)
    with open(ctr_file, "w") as f:
        json.dump(ctr, f)
    handler = ["--runtime", spec["handler"]] if spec["handler"] else []
    pod_id = crictl("runp", *handler, pod_file).stdout.strip()
    try:
        cid = crictl("create", pod_id, ctr_file, pod_file).stdout.strip()
        crictl("start", cid)
        state = ""
        for _ in range(100):
            state = crictl("inspect", "-o", "go-template", "--template", "{{.status.state}}", cid).stdout.strip()
            if state == "CONTAINER_EXITED":
                break
            time.sleep(0.1)
        code = crictl("inspect", "-o", "go-template", "--template", "{{.status.exitCode}}", cid).stdout.strip()
        out = crictl("logs", cid).stdout
        runtime = crictl("inspectp", "-o", "go-template", "--template", "{{.status.runtimeHandler}}",
                         pod_id).stdout.strip()
    finally:
        crictl("stopp", pod_id, check=False)
        crictl("rmp", "-f", pod_id, check=False)
    lines = out.splitlines()
    return {"state": state, "exit_code": code, "pod_runtime_handler": runtime,
            "devices": sorted(line.split(" ", 1)[1] for line in lines if line.startswith("device ")),
            "fake_gpu": next((line.split(" ", 1)[1] for line in lines if line.startswith("fake-gpu ")), None),
            "output": out}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ctk-config", help="config.toml the NVIDIA runtime reads instead of the host's")
    args = parser.parse_args()
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(f"{WORK}/emptydir")
    env = {**os.environ, "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    if args.ctk_config:
        env["NVIDIA_CTK_CONFIG_FILE_PATH"] = args.ctk_config
    dump = tomllib.loads(run("containerd", "config", "dump").stdout)
    plugins = dump["plugins"]
    sandbox = plugins["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"]
    snapshotter = plugins["io.containerd.cri.v1.images"]["snapshotter"]
    result = {"containerd": run("containerd", "--version").stdout.strip(), "sandbox_image": sandbox,
              "nvidia_runtime_config": args.ctk_config or "/etc/nvidia-container-runtime/config.toml",
              "default_runtime": plugins["io.containerd.cri.v1.runtime"]["containerd"]["default_runtime_name"],
              "cases": {}}
    log = open(f"{WORK}/containerd.log", "w")  # noqa: SIM115 -- open for the daemon's lifetime
    daemon = subprocess.Popen(["containerd"], stdout=log, stderr=subprocess.STDOUT, env=env)
    started = time.monotonic()
    try:
        for _ in range(150):
            if daemon.poll() is not None:
                raise RuntimeError(f"containerd exited ({daemon.returncode}): see {WORK}/containerd.log")
            if run("ctr", "--address", SOCK, "version", check=False).returncode == 0:
                break
            time.sleep(0.1)
        result["containerd_up_s"] = round(time.monotonic() - started, 1)
        build_image(f"{WORK}/image.tar", {IMAGE: {"Cmd": ["/bin/sh"]}, sandbox: {"Entrypoint": ["/bin/sleep", "3600"]}})
        run("ctr", "--address", SOCK, "-n", "k8s.io", "images", "import", "--local", "--snapshotter", snapshotter,
            "--platform", "linux/amd64", f"{WORK}/image.tar")
        for name, spec in CASES.items():
            t0 = time.monotonic()
            try:
                result["cases"][name] = run_case(name, spec)
            except (RuntimeError, subprocess.TimeoutExpired) as e:  # e.g. the runtime refused to start it
                result["cases"][name] = {"error": str(e), "devices": None, "fake_gpu": None, "exit_code": None}
            result["cases"][name]["seconds"] = round(time.monotonic() - t0, 1)
    finally:
        daemon.terminate()
        try:
            daemon.wait(timeout=15)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        log.close()
        # Shims of this containerd outlive it only for running containers; every pod was removed above.
    result["seconds"] = round(time.monotonic() - started, 1)
    with open(f"{WORK}/containerd.log") as f:
        result["containerd_log_tail"] = f.read()[-3000:]
    json.dump(result, sys.stdout, indent=1, sort_keys=True)
    print()


if __name__ == "__main__":
    main()
