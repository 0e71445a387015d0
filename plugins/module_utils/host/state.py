# Copyright: kube-accel contributors
# Apache License 2.0
"""Digests behind the host play's fast path: a record of what a host looked like after its last full run.

A full run of the host roles ends by recording three digests on the host: the *inputs* (the host's variables and
facts, computed on the controller), the *code* (kube-accel's host roles, modules and host play) and the *state*
(every file the roles write or read, the package database, the booted kernel and its command line, the loaded
modules, read on the host). A later run whose digests all match has nothing to do, and skips the roles; any
difference, or no record, runs them all. A difference in the code alone is told apart (``probe``): a kube-accel
upgrade changes what the roles *could* do, not what this host was given, so the hosts play first asks the roles in
check mode whether they would change anything here before it drains the node (ansible/hosts.yml). A record an
earlier version wrote is probed too: its digests cannot be compared with this version's.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Iterable
from typing import Any

# 2: the code digest is kept apart from the inputs (version 1 folded it in, so its records cannot tell a
# kube-accel upgrade from an inventory change, and its state watched other paths).
RECORD_VERSION = 2
# Records of these versions were written by an earlier kube-accel's full run: the host was converged then, but the
# digests mean something else, so the roles are asked in check mode (the probe) instead of compared.
EARLIER_VERSIONS = (1,)


def digest(data: Any) -> str:
    """sha256 of a JSON-able value, independent of dict order."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def _file_sha(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _entry(path: str) -> list:
    """[path, kind, mode, uid, gid, content] of one path; content is a sha256, a link target or None."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return [path, "absent"]
    meta = [stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid]
    if stat.S_ISLNK(st.st_mode):
        return [path, "link", *meta, os.readlink(path)]
    if stat.S_ISDIR(st.st_mode):
        return [path, "dir", *meta, None]
    if stat.S_ISREG(st.st_mode):
        # /proc files report size 0 but read fine: hash what reading returns.
        return [path, "file", *meta, _file_sha(path)]
    return [path, "other", *meta, None]


def tree_entries(paths: Iterable[str]) -> list[list]:
    """Entries of every path and, for directories, of everything below them (symlinks are not followed)."""
    out: list[list] = []
    for top in sorted(set(paths)):
        out.append(_entry(top))
        if out[-1][1] != "dir":
            continue
        for root, dirs, files in os.walk(top):
            dirs.sort()
            for name in sorted(dirs + files):
                out.append(_entry(os.path.join(root, name)))
    return out


def listing(paths: Iterable[str]) -> dict[str, list[str] | None]:
    """Entry names of directories whose contents change by themselves (e.g. /sys/module): names only."""
    out: dict[str, list[str] | None] = {}
    for path in sorted(set(paths)):
        try:
            out[path] = sorted(os.listdir(path))
        except FileNotFoundError:
            out[path] = None
    return out


def state(watch: Iterable[str], watch_names: Iterable[str]) -> dict[str, Any]:
    """The host's state as the record keeps it: per-path entries and listings (compared, never shown whole)."""
    return {"entries": tree_entries(watch), "names": listing(watch_names)}


def first_difference(before: dict[str, Any], after: dict[str, Any]) -> str | None:
    """A short, human-readable name of the first thing that differs between two states, None when equal."""
    old = {e[0]: e for e in before.get("entries", [])}
    new = {e[0]: e for e in after.get("entries", [])}
    for path in sorted(set(old) | set(new)):
        if old.get(path) != new.get(path):
            return path
    for path in sorted(set(before.get("names", {})) | set(after.get("names", {}))):
        if before.get("names", {}).get(path) != after.get("names", {}).get(path):
            return f"{path} (entries)"
    return None


def record(inputs: str, current: dict[str, Any], reboot_required: list[str], code: str = "") -> dict[str, Any]:
    return {"version": RECORD_VERSION, "inputs": inputs, "code": code, "state_digest": digest(current),
            "state": current, "reboot_required": list(reboot_required)}


def compare(saved: dict[str, Any] | None, inputs: str, current: dict[str, Any], code: str = "") -> tuple[bool, str]:
    """(whether the host is as its last full run left it, why not)."""
    return check(saved, inputs, current, code)[:2]


def check(saved: dict[str, Any] | None, inputs: str, current: dict[str, Any],
          code: str = "") -> tuple[bool, str, bool]:
    """(current, why, probe): probe when the record cannot decide and the roles should be asked in check mode: it
    differs in kube-accel's code digest alone (same variables, facts and host state), or an earlier kube-accel wrote
    it (EARLIER_VERSIONS). The host state is compared before the code: drift always means a full run. A record of
    an unknown version (a later kube-accel's, before a downgrade) means a full run."""
    if saved and saved.get("version") in EARLIER_VERSIONS:
        return (False, f"the record is an earlier kube-accel's (record version {saved['version']}): its digests "
                "cannot be compared with this version's", True)
    if not saved or saved.get("version") != RECORD_VERSION:
        return False, "no record of a full run", False
    if saved.get("inputs") != inputs:
        return False, "inputs changed (variables or facts)", False
    if saved.get("state_digest") != digest(current):
        return (False, f"host changed since the last full run: {first_difference(saved.get('state', {}), current)}",
                False)
    if saved.get("code", "") != code:
        return False, "the kube-accel code changed (variables, facts and host state did not)", True
    return True, "inputs and host state match the last full run", False


def code_digest(root: str, paths: Iterable[str]) -> str:
    """Digest of the code under ``paths`` (relative to ``root``): file names and contents, nothing else, so two
    checkouts of one commit agree. Byte-compiled caches are skipped."""
    h = hashlib.sha256()
    for rel in sorted(set(paths)):
        top = os.path.join(root, rel)
        files = [top] if os.path.isfile(top) else [
            os.path.join(d, f) for d, dirs, names in os.walk(top) for f in names
            if "__pycache__" not in d and not f.endswith(".pyc")]
        for path in sorted(files):
            h.update(os.path.relpath(path, root).encode() + b"\0" + _file_sha(path).encode() + b"\n")
    return h.hexdigest()
