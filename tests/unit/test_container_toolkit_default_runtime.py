"""Where container_toolkit makes nvidia the default runtime: only where the pool's backend needs it (HAMi pools;
docs/security.md "GPUs reach a container only through its device plugin's allocation"). gpu-manager hands its device
nodes and libraries to runc containers itself; pgpu, mps and timeslice workloads name RuntimeClass nvidia."""

from __future__ import annotations

from pathlib import Path

import jinja2
import pytest
import yaml

DEFAULTS = yaml.safe_load((Path(__file__).resolve().parents[2] / "roles" / "container_toolkit" / "defaults" /
                           "main.yml").read_text())


@pytest.mark.parametrize(("pool", "expected"), [
    ({"accel_mode": "vgpu", "accel_vgpu_backend": "hami"}, True),
    ({"accel_mode": "vgpu", "accel_vgpu_backend": "gpu-manager"}, False),
    ({"accel_mode": "pgpu"}, False),
    ({"accel_mode": "mps"}, False),
    ({"accel_mode": "timeslice"}, False),
    ({}, False),  # the role outside kube-accel's plays acts as on a whole-GPU pool
])
def test_nvidia_is_the_default_runtime_only_on_hami_pools(pool, expected):
    text = jinja2.Environment().from_string(DEFAULTS["container_toolkit_set_as_default"]).render(**pool)
    assert text.strip() == str(expected)
