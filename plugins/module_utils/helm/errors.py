# Copyright: kube-accel contributors
# Apache License 2.0
"""What went wrong with a helm command, in words a user can act on (modules return msg, stderr and command)."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: the diff module imports this one
    from ansible_collections.kube_accel.gpu.plugins.module_utils.helm.diff import Deployed


# stderr fragments that mean "the API server could not be reached or refused us", not a chart problem.
UNREACHABLE = (
    "kubernetes cluster unreachable",
    "connection refused",
    "no such host",
    "i/o timeout",
    "tls handshake timeout",
    "x509:",
    "unauthorized",
    "the server has asked for the client to provide credentials",
    "no configuration has been provided",
    "invalid configuration",
)


class HelmError(Exception):
    """A failure with a message meant for the user; ``stderr`` and ``command`` are returned alongside it."""

    def __init__(self, msg: str, stderr: str = "", command: Sequence[str] | None = None, **extra: Any):
        super().__init__(msg)
        self.msg = msg
        self.stderr = stderr
        self.command = list(command) if command else None
        self.extra = extra


def explain_failure(action: str, rc: int, stderr: str, kubeconfig: str | None, context: str | None) -> str:
    """A one-paragraph message for a failed helm call; helm's own last line is always kept."""
    text = (stderr or "").strip()
    low = text.lower()
    last = text.splitlines()[-1] if text else f"helm exited with rc {rc} and no message"
    where = f"kubeconfig {kubeconfig or os.environ.get('KUBECONFIG') or '~/.kube/config'}"
    if context:
        where += f", context {context}"
    match = re.search(r'context "([^"]+)" does not exist', text)
    if match:
        return f"{action}: kube context {match.group(1)!r} does not exist in {where.split(',', maxsplit=1)[0]}: {last}"
    if any(fragment in low for fragment in UNREACHABLE):
        return f"{action}: cannot reach the Kubernetes cluster ({where}): {last}"
    if "another operation (install/upgrade/rollback) is in progress" in low:
        return (
            f"{action}: the release is locked by another helm operation (pending state); wait for it or "
            f"roll it back with `helm rollback`: {last}"
        )
    if "values don't meet the specifications of the schema" in low:
        return f"{action}: helm rejected the values against the chart's schema: {text}"
    return f"{action} failed: {last}"


def explain_rollout_failure(
    name: str, stderr: str, atomic: bool, timeout: str, before: Deployed | None, after: Deployed | None
) -> str:
    """Why an upgrade failed and, with atomic, where the release stands now (read back after the failure)."""
    text = (stderr or "").strip()
    low = text.lower()
    timed_out = any(s in low for s in ("timed out", "context deadline exceeded", "deadline exceeded"))
    cause = f"its resources did not become ready within {timeout}" if timed_out else "helm reported an error"
    verb = "upgrade" if before is not None else "install"
    msg = f"helm {verb} of release {name!r} failed: {cause}"
    if atomic:
        if before is None and after is None:
            msg += "; the failed install was removed automatically"
        elif before is not None and after is not None and after.status == "deployed":
            msg += f"; rolled back automatically, revision {after.revision} is deployed again"
        else:
            status = f"revision {after.revision} is {after.status}" if after else "state unknown"
            msg += f"; automatic rollback did not restore a deployed revision ({status}, see `helm history`)"
    lines = text.splitlines()
    return msg + (f". helm said: {lines[-1]}" if lines else "")
