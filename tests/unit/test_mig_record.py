"""The record of a MIG geometry kube-accel put on a host is one path: roles/mig writes it, the preflight reads it
(with a host-owned geometry's mig-parted config), accel_plan names it (common.constants MIG_RECORD_FILE)."""

from __future__ import annotations

from pathlib import Path

import yaml
from ansible_collections.kube_accel.gpu.plugins.module_utils.common.constants import MIG_RECORD_FILE

ROLES = Path(__file__).resolve().parents[2] / "roles"


def defaults(role: str) -> dict:
    return yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text())


def test_the_mig_role_writes_and_the_preflight_reads_the_same_record():
    mig = defaults("mig")
    assert mig["mig_record_file"] == MIG_RECORD_FILE
    assert defaults("preflight")["preflight_mig_records"] == [MIG_RECORD_FILE, mig["mig_config_file"]]
    spec = yaml.safe_load((ROLES / "mig" / "meta" / "argument_specs.yml").read_text())
    assert spec["argument_specs"]["main"]["options"]["mig_record_file"]["default"] == MIG_RECORD_FILE
    spec = yaml.safe_load((ROLES / "preflight" / "meta" / "argument_specs.yml").read_text())
    assert spec["argument_specs"]["main"]["options"]["preflight_mig_records"]["default"] == \
        defaults("preflight")["preflight_mig_records"]
