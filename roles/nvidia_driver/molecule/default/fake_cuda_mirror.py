#!/usr/bin/env python3
"""Build a signed, flat APT repository standing in for a site's mirror of NVIDIA's CUDA repository.

The packages are stand-ins: the names, versions and exact-version dependency shape of the CUDA repository's Debian
packages (cuda-drivers-<branch> -> cuda-drivers (= V) -> nvidia-driver-cuda / nvidia-kernel-dkms (= V) ->
libcuda1 (= V); nvidia-fabricmanager-<branch> with its systemd unit), each holding only a marker file. apt, dpkg and
the role resolve, pin, install, move and verify them exactly as they would NVIDIA's. The repository is signed with
a throw-away key made here (gpg on the controller); its public half is written for the role's inline key and its
fingerprint (key.fpr) for the role's pin.

  fake_cuda_mirror.py OUTDIR
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

VERSIONS = {"550": ["550.144.03-1", "550.163.01-1"], "535": ["535.247.01-1"]}
FM_UNIT = """[Unit]
Description=NVIDIA fabric manager service (kube-accel test stand-in)
After=network-online.target
Requires=network-online.target

[Service]
Type=forking
ExecStart=/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg
LimitCORE=infinity

[Install]
WantedBy=multi-user.target
"""


def packages() -> list[dict]:
    out = []
    for branch, versions in VERSIONS.items():
        for v in versions:
            out += [
                {"Package": f"cuda-drivers-{branch}", "Version": v, "Depends": f"cuda-drivers (= {v})"},
                {"Package": "cuda-drivers", "Version": v,
                 "Depends": f"nvidia-driver-cuda (= {v}), "
                            f"nvidia-kernel-dkms (= {v}) | nvidia-kernel-open-dkms (= {v})"},
                {"Package": "nvidia-driver-cuda", "Version": v, "Depends": f"libcuda1 (= {v})"},
                {"Package": "libcuda1", "Version": v},
                {"Package": "nvidia-kernel-dkms", "Version": v, "Conflicts": "nvidia-kernel-open-dkms",
                 "Provides": "nvidia-kernel-dkms-any"},
                {"Package": "nvidia-kernel-open-dkms", "Version": v, "Conflicts": "nvidia-kernel-dkms",
                 "Provides": "nvidia-kernel-dkms-any"},
                # One Fabric Manager at a time, as Ubuntu's and NVIDIA's packages declare it.
                {"Package": f"nvidia-fabricmanager-{branch}", "Version": v, "Provides": "nvidia-fabricmanager",
                 "Conflicts": "nvidia-fabricmanager", "Replaces": "nvidia-fabricmanager",
                 "files": {"lib/systemd/system/nvidia-fabricmanager.service": FM_UNIT}},
            ]
    return out


def _ar_member(name: str, data: bytes) -> bytes:
    header = f"{name:<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(data):<10}`\n".encode()
    return header + data + (b"\n" if len(data) % 2 else b"")


def _tar_gz(files: dict[str, bytes]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz", format=tarfile.GNU_FORMAT) as tar:
        dirs = sorted({"/".join(p.split("/")[:i]) for p in files for i in range(1, p.count("/") + 1)})
        for d in dirs:
            info = tarfile.TarInfo(f"./{d}")
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for path, data in sorted(files.items()):
            info = tarfile.TarInfo(f"./{path}")
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return raw.getvalue()


def build_deb(pkg: dict) -> tuple[bytes, str]:
    fields = {k: v for k, v in pkg.items() if k != "files"}
    control = "".join(f"{k}: {v}\n" for k, v in {
        "Package": fields.pop("Package"), "Version": fields.pop("Version"), "Architecture": "all",
        "Maintainer": "kube-accel tests <tests@kube-accel.invalid>", **fields,
        "Description": "kube-accel test stand-in for NVIDIA's package of this name"}.items())
    files = {f"usr/share/kube-accel-fake/{pkg['Package']}": f"{pkg['Version']}\n".encode()}
    files.update({p: t.encode() for p, t in pkg.get("files", {}).items()})
    return (b"!<arch>\n" + _ar_member("debian-binary", b"2.0\n")
            + _ar_member("control.tar.gz", _tar_gz({"control": control.encode()}))
            + _ar_member("data.tar.gz", _tar_gz(files))), control


def main(outdir: str) -> int:
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    index = []
    for pkg in packages():
        deb, control = build_deb(pkg)
        name = f"{pkg['Package']}_{pkg['Version']}_all.deb"
        (out / name).write_bytes(deb)
        index.append(control.replace("Description:", f"Filename: ./{name}\nSize: {len(deb)}\n"
                                     f"SHA256: {hashlib.sha256(deb).hexdigest()}\nDescription:", 1))
    packages_text = "\n".join(index).encode()
    (out / "Packages").write_bytes(packages_text)
    (out / "Packages.gz").write_bytes(gzip.compress(packages_text, mtime=0))
    sums = "".join(f" {hashlib.sha256((out / f).read_bytes()).hexdigest()} {(out / f).stat().st_size} {f}\n"
                   for f in ("Packages", "Packages.gz"))
    release = (f"Origin: kube-accel tests\nLabel: fake CUDA mirror\nArchitectures: amd64 arm64 all\n"
               f"Date: {time.strftime('%a, %d %b %Y %H:%M:%S UTC', time.gmtime())}\nSHA256:\n{sums}")
    (out / "Release").write_text(release)
    with tempfile.TemporaryDirectory() as home:
        env = dict(os.environ, GNUPGHOME=home)
        gpg = ["gpg", "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", ""]
        subprocess.run([*gpg, "--quick-gen-key", "kube-accel molecule mirror", "ed25519", "sign", "never"],
                       env=env, check=True)
        subprocess.run([*gpg, "--yes", "--clearsign", "-o", str(out / "InRelease"), str(out / "Release")],
                       env=env, check=True)
        key = subprocess.run([*gpg, "--armor", "--export"], env=env, check=True, capture_output=True, text=True)
        listing = subprocess.run([*gpg, "--list-keys", "--with-colons"], env=env, check=True, capture_output=True,
                                 text=True)
    (out / "key.asc").write_text(key.stdout)
    # The mirror's fingerprint as gpg reports it: the scenario pins it as a site pins its own mirror key.
    (out / "key.fpr").write_text(next(line.split(":")[9] for line in listing.stdout.splitlines()
                                      if line.startswith("fpr:")) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
