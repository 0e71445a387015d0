#!/usr/bin/python3
"""The lab's nvidia-smi stand-in: the MIG teardown commands roles/mig runs when a pool stops using MIG, acting on the
host's NVML state, a recorded snapshot (tests/data/nvml) kept on the lab host. Lab code, Python stdlib only: the test
that needs it (tests/integration/test_day2_mig_lab.py) copies it into a lab host as /usr/local/bin/nvidia-smi, and
points that host's accel_nvml_snapshot at the state file, so the NVML facts kube-accel reads afterwards are what this
left.

Modelled, for the GPUs of ``-i LIST`` (all when absent), as NVIDIA's MIG user guide describes them:
  mig -dci      destroys every compute instance; its GPU instance stays (an NVML MIG device is a GPU instance with a
                compute instance: the snapshot's mig_devices lose it, the GI is kept under standin_gpu_instances)
  mig -dgi      destroys every GPU instance that has no compute instance; one that still has one is in use
  -mig 0        turns MIG mode off; refused while any GPU instance exists
Messages follow nvidia-smi's ("Successfully destroyed ...", "Disabled MIG Mode for GPU ...", "All done."); exit status
6 when there is nothing to destroy (nvidia-smi: "a query to find an object was unsuccessful"), 255 when something is
in use. Anything else exits 2 naming what is not modelled. Every call is logged to nvidia-smi.log beside the state.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

STATE_DIR = Path(os.environ.get("KA_LAB_NVIDIA_SMI_DIR", "/var/lib/kube-accel-lab"))
STATE = STATE_DIR / "nvml.json"
LOG = STATE_DIR / "nvidia-smi.log"
NOT_FOUND, IN_USE, USAGE = 6, 255, 2


def selected(devices: list[dict], argv: list[str]) -> list[tuple[int, dict]]:
    if "-i" not in argv:
        return list(enumerate(devices))
    wanted = {int(i) for i in argv[argv.index("-i") + 1].split(",")}
    return [(i, d) for i, d in enumerate(devices) if i in wanted]


def destroy_compute_instances(gpus: list[tuple[int, dict]]) -> int:
    found = False
    for index, dev in gpus:
        for mig in dev.get("mig_devices") or []:
            found = True
            print(f"Successfully destroyed compute instance ID {mig['ci_id']:2d} from GPU {index:2d} "
                  f"GPU instance ID {mig['gi_id']:2d}")
            dev.setdefault("standin_gpu_instances", []).append(mig["gi_id"])
        dev["mig_devices"] = []
    if not found:
        print("No compute instances found: Not Found")
        return NOT_FOUND
    return 0


def destroy_gpu_instances(gpus: list[tuple[int, dict]]) -> int:
    rc = NOT_FOUND
    for index, dev in gpus:
        for mig in dev.get("mig_devices") or []:
            print(f"Unable to destroy GPU instance ID {mig['gi_id']:2d} from GPU {index:2d}: In use by another client")
            rc = IN_USE
        for gi in dev.pop("standin_gpu_instances", []):
            print(f"Successfully destroyed GPU instance ID {gi:2d} from GPU {index:2d}")
            rc = 0 if rc == NOT_FOUND else rc
    if rc == NOT_FOUND:
        print("No GPU instances found: Not Found")
    return rc


def mig_mode_off(gpus: list[tuple[int, dict]]) -> int:
    rc = 0
    for _index, dev in gpus:
        if dev.get("mig_devices") or dev.get("standin_gpu_instances"):
            print(f"Unable to disable MIG Mode for GPU {dev['pci_bus_id']}: In use by another client")
            rc = IN_USE
            continue
        if dev.get("mig_mode") is not None:
            dev["mig_mode"] = [0, 0]
            print(f"Disabled MIG Mode for GPU {dev['pci_bus_id']}")
    if rc == 0:
        print("All done.")
    return rc


def main(argv: list[str]) -> int:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with LOG.open("a") as log:
        log.write(f"{time.time():.3f} {' '.join(argv)}\n")
    snapshot = json.loads(STATE.read_text())
    gpus = selected(snapshot["nvml"]["devices"], argv)
    if argv[:1] == ["mig"] and "-dci" in argv:
        rc = destroy_compute_instances(gpus)
    elif argv[:1] == ["mig"] and "-dgi" in argv:
        rc = destroy_gpu_instances(gpus)
    elif "-mig" in argv and argv[argv.index("-mig") + 1] == "0":
        rc = mig_mode_off(gpus)
    else:
        print(f"nvidia-smi {' '.join(argv)}: not modelled by the lab's nvidia-smi stand-in", file=sys.stderr)
        return USAGE
    tmp = STATE.with_suffix(".tmp")
    tmp.write_text(json.dumps(snapshot, indent=1) + "\n")
    tmp.replace(STATE)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
