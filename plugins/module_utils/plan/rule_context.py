# Copyright: kube-accel contributors
# Apache License 2.0
"""What every plan rule gets: ``Context`` (one host's settings that passed their checks, its facts, where each
setting came from, and ``problem`` to word a finding), and the small readings the rules share (versions, driver
branches, GPU names, which GPUs are older than Volta)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.inventory import MPS_MAX_REPLICAS, default_of
from ansible_collections.kube_accel.gpu.plugins.module_utils.plan.value_text import shown

# MPS client CUDA contexts per GPU by compute capability, newest first (nvidia-cuda-mps-control(1); the limits are
# plan.inventory's). Pre-Volta GPUs are refused for MPS altogether, so the Volta row is the only one kube-accel serves.
MPS_MAX_CLIENTS_BY_CC = (((7, 0), MPS_MAX_REPLICAS),)
MPS_MIN_COMPUTE_CAPABILITY = MPS_MAX_CLIENTS_BY_CC[-1][0]  # Volta: isolated client address spaces


@dataclass
class Context:
    host: str
    settings: dict
    facts: dict = field(default_factory=dict)
    origins: dict = field(default_factory=dict)

    def get(self, name, default=None):
        return self.settings.get(name, default)

    def value(self, name):
        """The variable as the roles will use it: the inventory's value, else its default (plan.inventory)."""
        return self.settings.get(name, default_of(name))

    @property
    def gpus(self) -> list:
        return list((self.facts or {}).get("gpus") or [])

    def problem(self, field_name: str, value, what: str, allowed: str) -> str:
        text = "(not set)" if value is UNSET else shown(value)
        where = f" ({self.origins[field_name]})" if self.origins.get(field_name) else ""
        return f"{self.host}: {field_name} = {text}{where}: {what}; allowed: {allowed}"


UNSET = object()


def gpu_label(gpu: dict) -> str:
    return f"GPU {gpu.get('index')} ({gpu.get('name')})"


def version_triple(text) -> tuple[int, int, int | None] | None:
    """(major, minor, patch or None) of "1.34", "v1.34.2"."""
    match = re.match(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?", str(text))
    if not match:
        return None
    return int(match.group(1)), int(match.group(2)), None if match.group(3) is None else int(match.group(3))


def version_tuple(text) -> tuple[int, int] | None:
    match = re.match(r"^\s*v?(\d+)\.(\d+)", str(text))
    return (int(match.group(1)), int(match.group(2))) if match else None


def branch_number(value) -> int | None:
    """Branch number of ``accel_driver_branch``; names may carry a flavour suffix ("535-server", "550-open")."""
    match = re.match(r"^\s*(\d+)", "" if value is None else str(value))
    return int(match.group(1)) if match else None


def is_off(value) -> bool:
    """A boolean role setting written as false (false, "false", "no", "off", "0")."""
    if isinstance(value, str):
        return value.strip().lower() in ("false", "no", "off", "0", "n")
    return value is False or value == 0


def pre_volta(ctx: Context) -> list[str]:
    """Why MPS cannot serve each of the host's GPUs older than Volta (kube-accel refuses MPS there)."""
    ccs = ((gpu, version_tuple(gpu.get("compute_capability", ""))) for gpu in ctx.gpus)
    older = [gpu for gpu, cc in ccs if cc is not None and cc < MPS_MIN_COMPUTE_CAPABILITY]
    return [f"{gpu_label(gpu)} has compute capability {gpu.get('compute_capability')} (pre-Volta)" for gpu in older]
