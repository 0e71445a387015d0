#!/usr/bin/env python3
"""The images scripts/gpu-e2e.sh imports on a GPU host that reaches no registry, written as one docker-archive
(manifest.json + config + one layer per image) that `ctr images import` reads. Built here, from:

- ``kube-accel.e2e/nvidia/k8s-device-plugin:v0.20.0``: the device plugin image as upstream's Dockerfile
  (k8s-device-plugin v0.20.0 deployments/container/Dockerfile) lays it out: nvidia-device-plugin, mps-control-daemon
  and config-manager in /usr/bin (built from the pinned source by scripts/upstream.sh), busybox in /busybox, /bin/sh,
  its PATH and NVIDIA_* environment, glibc (Debian 12's, as the binaries are cgo). One addition, for the e2e only:
  /usr/local/bin/nvidia-smi (nvidia-smi-shim) so the MPS daemon cannot change the host GPU's compute mode.
- ``kube-accel.e2e/cuda-probe:1``: busybox, glibc and cuda-probe (the workload: its libcuda comes from the runtime).
- ``kube-accel.e2e/pause:1``: the pod sandbox (pause.c).

Usage: images.py WORKDIR OUT.tar
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
KA_CACHE = Path(os.environ.get("KA_CACHE", Path.home() / ".cache" / "kube-accel"))
UPSTREAM_BIN = KA_CACHE / "upstream" / "bin"
REGISTRY = "kube-accel.e2e"
DEVICE_PLUGIN = f"{REGISTRY}/nvidia/k8s-device-plugin:v0.20.0"
PROBE = f"{REGISTRY}/cuda-probe:1"
PAUSE = f"{REGISTRY}/pause:1"
UPSTREAM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/busybox"
GLIBC = ("ld-linux-x86-64.so.2", "libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1",
         "libresolv.so.2", "libgcc_s.so.1")
EPOCH = 0  # reproducible layers


def busybox(work: Path) -> Path:
    """Debian 12's static busybox (downloaded once with apt-get download, cached in WORKDIR)."""
    target = work / "busybox"
    if not target.exists():
        debs = work / "debs"
        debs.mkdir(parents=True, exist_ok=True)
        if not list(debs.glob("busybox-static_*.deb")):
            subprocess.run(["apt-get", "download", "busybox-static"], cwd=debs, check=True)
        x = work / "debs" / "x"
        shutil.rmtree(x, ignore_errors=True)
        subprocess.run(["dpkg-deb", "-x", str(next(debs.glob("busybox-static_*.deb"))), str(x)], check=True)
        shutil.copy2(x / "bin" / "busybox", target)
    return target


def cc(work: Path, source: Path, *flags: str) -> Path:
    out = work / source.stem
    subprocess.run(["gcc", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(out), str(source), *flags], check=True)
    return out


class Layer:
    """An uncompressed layer tar with fixed owners and times."""

    def __init__(self) -> None:
        self.buf = io.BytesIO()
        self.tar = tarfile.open(fileobj=self.buf, mode="w", format=tarfile.PAX_FORMAT)  # noqa: SIM115 (closed by close())
        self.seen: set[str] = set()

    def _info(self, name: str, kind: bytes, mode: int) -> tarfile.TarInfo:
        info = tarfile.TarInfo(name.lstrip("/"))
        info.type, info.mode, info.mtime, info.uid, info.gid = kind, mode, EPOCH, 0, 0
        return info

    def dir(self, name: str, mode: int = 0o755) -> None:
        parts = name.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            path = "/".join(parts[:i])
            if path not in self.seen:
                self.seen.add(path)
                self.tar.addfile(self._info(path, tarfile.DIRTYPE, mode if i == len(parts) else 0o755))

    def file(self, name: str, data: bytes, mode: int = 0o644) -> None:
        self.dir(os.path.dirname(name))
        info = self._info(name, tarfile.REGTYPE, mode)
        info.size = len(data)
        self.tar.addfile(info, io.BytesIO(data))

    def copy(self, name: str, source: Path, mode: int = 0o755) -> None:
        self.file(name, Path(source).read_bytes(), mode)

    def link(self, name: str, target: str) -> None:
        self.dir(os.path.dirname(name))
        info = self._info(name, tarfile.SYMTYPE, 0o777)
        info.linkname = target
        self.tar.addfile(info)

    def close(self) -> bytes:
        self.tar.close()
        return self.buf.getvalue()


def base(layer: Layer, bb: Path, with_glibc: bool = True) -> None:
    for d in ("bin", "etc", "dev", "proc", "sys", "run", "root", "usr/bin", "usr/local/bin", "lib64",
              "lib/x86_64-linux-gnu", "var"):
        layer.dir(d)
    layer.dir("tmp", 0o1777)
    layer.link("var/run", "../run")
    layer.file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\nnonroot:x:65532:65532:nonroot:/:/bin/sh\n")
    layer.file("etc/group", b"root:x:0:\nnonroot:x:65532:\n")
    layer.copy("busybox/busybox", bb)
    applets = subprocess.run([str(bb), "--list"], capture_output=True, text=True, check=True).stdout.split()
    for applet in applets:
        if applet != "busybox":
            layer.link(f"busybox/{applet}", "busybox")
    layer.link("bin/sh", "/busybox/sh")
    if with_glibc:
        for lib in GLIBC:
            layer.copy(f"lib/x86_64-linux-gnu/{lib}", Path("/lib/x86_64-linux-gnu") / lib)
        layer.link("lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")
        # The runtime's ldcache hook adds the driver's library folder to this cache (ldconfig on the container).
        layer.file("etc/ld.so.conf", b"include /etc/ld.so.conf.d/*.conf\n")
        layer.file("etc/ld.so.conf.d/x86_64-linux-gnu.conf", b"/lib/x86_64-linux-gnu\n/usr/lib/x86_64-linux-gnu\n")


def image(name: str, layer: bytes, env: list[str], entrypoint: list[str], labels: dict[str, str]) -> dict:
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = {
        "architecture": "amd64", "os": "linux", "created": "1970-01-01T00:00:00Z",
        "config": {"Env": env, "Entrypoint": entrypoint, "WorkingDir": "/", "Labels": labels},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "scripts/gpu_e2e/images.py"}],
    }
    raw = json.dumps(config, sort_keys=True).encode()
    return {"name": name, "layer": layer, "diff_id": diff_id, "config": raw,
            "config_id": hashlib.sha256(raw).hexdigest()}


def main() -> None:
    work, out = Path(sys.argv[1]), Path(sys.argv[2])
    work.mkdir(parents=True, exist_ok=True)
    bb = busybox(work)
    src = "kube-accel scripts/gpu_e2e/images.py"

    dp = Layer()
    base(dp, bb)
    for binary in ("nvidia-device-plugin", "mps-control-daemon", "config-manager"):
        dp.copy(f"usr/bin/{binary}", UPSTREAM_BIN / binary)
    dp.copy("usr/local/bin/nvidia-smi", HERE / "nvidia-smi-shim")
    device_plugin = image(DEVICE_PLUGIN, dp.close(),
                          [f"PATH={UPSTREAM_PATH}", "NVIDIA_DISABLE_REQUIRE=true", "NVIDIA_VISIBLE_DEVICES=all",
                           "NVIDIA_DRIVER_CAPABILITIES=compute,utility"],
                          ["nvidia-device-plugin"],
                          {"org.opencontainers.image.source": "https://github.com/NVIDIA/k8s-device-plugin.git",
                           "org.opencontainers.image.version": "v0.20.0", "kube-accel.e2e/built-by": src})

    pr = Layer()
    base(pr, bb)
    pr.copy("usr/local/bin/cuda-probe", cc(work, HERE / "cuda-probe.c", "-ldl"))
    probe = image(PROBE, pr.close(), [f"PATH={UPSTREAM_PATH}"], ["cuda-probe"], {"kube-accel.e2e/built-by": src})

    pa = Layer()
    pa.copy("pause", cc(work, HERE / "pause.c", "-static"))
    pause = image(PAUSE, pa.close(), [], ["/pause"], {"kube-accel.e2e/built-by": src})

    images = [device_plugin, probe, pause]
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), EPOCH, 0o644
            tar.addfile(info, io.BytesIO(data))

        manifest = []
        for img in images:
            layer_path = f"{img['diff_id'][7:]}/layer.tar"
            add(layer_path, img["layer"])
            add(f"{img['config_id']}.json", img["config"])
            manifest.append({"Config": f"{img['config_id']}.json", "RepoTags": [img["name"]], "Layers": [layer_path]})
        add("manifest.json", json.dumps(manifest).encode())
    for img in images:
        print(f"{img['name']}  layer {len(img['layer']) // 1024} KiB  {img['diff_id'][:19]}")


if __name__ == "__main__":
    main()
