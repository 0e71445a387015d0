#!/usr/bin/env python3
"""Keep the AnsiballZ payloads of modules.yml (kube-accel's container_toolkit tasks for gpu-e2e.sh's paths): Ansible
runs them here against a scratch copy of those paths (containerd's own default config; an empty NVIDIA runtime
config), with ANSIBLE_KEEP_REMOTE_FILES, and the payload of each module is copied to OUTDIR/AnsiballZ_<module>.py.

Usage: modules.py OUTDIR   (containerd on PATH: the module validates its drop-in with `containerd config dump`)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from footprint import E2E_ROOT

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
ROOT = Path(E2E_ROOT)
MODULES = ("containerd_nvidia_dropin", "nvidia_runtime_config")


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for pid_file in ROOT.glob("*.pid"):
        # Alive and one of gpu-e2e.sh's (its command line names ROOT, as gpu-e2e.sh checks): a PID file left by an
        # earlier run may name a PID the system has since given to another process.
        try:
            cmdline = Path("/proc", pid_file.read_text().strip(), "cmdline").read_bytes()
        except OSError:
            continue
        if str(ROOT).encode() in cmdline:
            raise SystemExit(f"{ROOT} belongs to a running gpu-e2e.sh ({pid_file.name}): stop it first")
    shutil.rmtree(ROOT, ignore_errors=True)
    config = ROOT / "etc" / "containerd" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(subprocess.run(["containerd", "config", "default"], capture_output=True, text=True,
                                     check=True).stdout)
    (ROOT / "nvidia-container-runtime").mkdir()
    (ROOT / "nvidia-container-runtime" / "config.toml").write_text("")
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "ANSIBLE_KEEP_REMOTE_FILES": "1", "ANSIBLE_REMOTE_TMP": f"{tmp}/remote",
               "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0"}
        run = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,",
                              str(HERE / "modules.yml"), "-e", f"e2e_root={ROOT}"], cwd=REPO, env=env,
                             capture_output=True, text=True, check=False)
        (out / "ansible-playbook.log").write_text(run.stdout + run.stderr)
        if run.returncode:
            raise SystemExit(f"modules.yml failed (rc {run.returncode}): {out / 'ansible-playbook.log'}")
        for module in MODULES:
            found = sorted(Path(tmp, "remote").glob(f"*/AnsiballZ_{module}.py"))
            if not found:
                raise SystemExit(f"no AnsiballZ payload of {module} kept")
            shutil.copy2(found[-1], out / f"AnsiballZ_{module}.py")
    shutil.rmtree(ROOT, ignore_errors=True)
    print("\n".join(sorted(p.name for p in out.glob("AnsiballZ_*.py"))))


if __name__ == "__main__":
    main()
