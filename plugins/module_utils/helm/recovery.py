# Copyright: kube-accel contributors
# Apache License 2.0
"""A release left pending by a helm that died: when it is provably dead (no other run holds the run lock, the pending
revision is older than the timeout) and how to recover it; a failed release's last good revision."""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from ansible_collections.kube_accel.gpu.plugins.module_utils.helm.errors import HelmError

# Release states helm writes while an operation is in flight; an upgrade on top of them is refused by helm.
PENDING_STATES = ("pending-install", "pending-upgrade", "pending-rollback")


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def last_good(entries: Sequence[dict]) -> int | None:
    """From ``helm history``: the deployed revision, else the newest superseded one."""
    for wanted in ("deployed", "superseded"):
        revisions = [int(e["revision"]) for e in entries if e.get("status") == wanted]
        if revisions:
            return max(revisions)
    return None


# A Go time.Duration as helm's --timeout takes it.
GO_DURATION = re.compile(r"^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$")

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_DURATION_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration_seconds(text: str) -> float:
    """A Go duration (``90s``, ``5m``, ``1h30m``) in seconds."""
    if not GO_DURATION.match(text or ""):
        raise HelmError(f"{text!r} is not a duration helm understands (e.g. 90s, 5m, 1h30m)")
    return sum(float(n) * _DURATION_UNIT[u] for n, u in _DURATION_PART.findall(text))


def parse_helm_time(text: str) -> datetime | None:
    """helm history's ``updated`` (RFC 3339 with nanoseconds) -> aware datetime; None when unreadable."""
    match = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$", (text or "").strip())
    if not match:
        return None
    base, frac, zone = match.groups()
    iso = f"{base}.{(frac or '0')[:6].ljust(6, '0')}{'+00:00' if zone == 'Z' else zone}"
    try:
        return datetime.fromisoformat(iso)
    except ValueError:
        return None


def age_text(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"


@dataclass
class Pending:
    """A release left in a pending state, as ``helm history`` shows it."""

    status: str
    revision: int
    age: float | None  # seconds since helm wrote the pending revision; None when its time is unreadable
    good_revision: int | None  # what a rollback goes back to; None for a first install

    @property
    def action(self) -> str:
        return "reinstall" if self.good_revision is None else "rollback"


def pending_of(entries: Sequence[dict], now: datetime) -> Pending | None:
    """The newest revision when it is pending (helm writes it before the operation and updates it after)."""
    if not entries:
        return None
    newest = max(entries, key=lambda e: int(e.get("revision") or 0))
    if newest.get("status") not in PENDING_STATES:
        return None
    updated = parse_helm_time(str(newest.get("updated") or ""))
    return Pending(
        status=newest["status"],
        revision=int(newest["revision"]),
        age=(now - updated).total_seconds() if updated else None,
        good_revision=last_good([e for e in entries if e is not newest]),
    )


def still_alive(pending: Pending, timeout_s: float, holder: str | None) -> list[str]:
    """Why the operation behind ``pending`` may still be running; empty when it is provably over.

    Provably over: no other kube-accel run holds the run lock, and the pending revision is older than the
    operation's timeout (helm stops waiting then, and an atomic one would have written a rollback revision).
    """
    reasons = []
    if holder:
        reasons.append(f"another kube-accel run holds the run lock: {holder}")
    if pending.age is None:
        reasons.append(f"the time of revision {pending.revision} cannot be read from `helm history`")
    elif pending.age <= timeout_s:
        reasons.append(f"revision {pending.revision} was written {age_text(pending.age)} ago, within the operation's "
                       f"timeout ({age_text(timeout_s)})")
    return reasons


def recovery_text(name: str, recovered: dict) -> str:
    """The recovery in words, for --diff and logs."""
    done = "would" if recovered.get("check_mode") else "did"
    if recovered["action"] == "reinstall":
        what = "uninstall it and install it again"
    else:
        what = f"roll back to revision {recovered['to_revision']}, then upgrade if it still differs"
    return (
        f"release {name}: found {recovered['status']} revision {recovered['revision']}, "
        f"{age_text(recovered['age_s'])} old, older than the timeout ({recovered['timeout']}) and no other run holding "
        f"the run lock: the operation that wrote it is dead. Recovery ({done}): {what}.\n"
        f"  $ {shlex.join(recovered['command'])}\n"
    )
