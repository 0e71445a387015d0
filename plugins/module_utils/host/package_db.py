# Copyright: kube-accel contributors
# Apache License 2.0
"""A package database an interrupted install left behind, found and repaired before the host roles install.

A package manager killed mid-way (the host lost power, the controller's SSH session or the run was killed and took
apt with it) leaves work half done: on Debian, packages half-configured, unpacked or half-installed and entries in
dpkg's journal (/var/lib/dpkg/updates), after which apt refuses everything with "dpkg was interrupted"; on RHEL,
duplicate packages (the new version installed, the old one not yet erased). What is found and what to run is
decided here from the package managers' own reports, so it is unit-tested on outputs recorded from real dpkg/apt;
the module only runs the commands.

Debian (dpkg's enquiry.c prints the audit sections; apt-pkg refuses on journal files whose names are all digits):

1. ``dpkg --configure -a``: completes configuration, trigger processing and the journal;
2. if ``dpkg --audit`` still reports interrupted packages: ``apt-get install --fix-broken``, with ``--reinstall`` of
   the packages dpkg marks for reinstallation (an interrupted unpack) that are still wanted installed;
3. anything still reported stops the run with the report and the commands to run by hand.

RHEL 8/9 (dnf 4; not exercised in CI): ``dnf check --duplicates`` (format of dnf's cli/commands/check.py), repaired
with ``dnf remove --duplicates``, which dnf documents as its answer to yum-complete-transaction.
"""

from __future__ import annotations

import fcntl
import os
import re
import struct
import time
from collections.abc import Callable, Sequence
from typing import Any

DPKG_JOURNAL = "/var/lib/dpkg/updates"
# Locks held while a package manager works (fcntl record locks, and dnf's PID file): a live holder means its journal
# and half states are work in progress, not an interruption, so nothing is judged before they are free.
LOCKS = {
    "apt": ("/var/lib/dpkg/lock-frontend", "/var/lib/dpkg/lock"),
    "dnf": ("/var/lib/rpm/.rpm.lock",),
}
PID_LOCKS = {"apt": (), "dnf": ("/var/lib/dnf/rpmdb_lock.pid",)}

# The section headers of dpkg --audit (dpkg src/main/enquiry.c, badstatinfos), by a phrase of each, and their kind.
AUDIT_KINDS = (
    ("in a mess due to serious problems", "reinstall-required"),
    ("unpacked but not yet configured", "unpacked"),
    ("only half configured", "half-configured"),
    ("only half installed", "half-installed"),
    ("awaiting processing of triggers", "triggers-awaited"),
    ("the trigger processing has not yet been done", "triggers-pending"),
    ("missing the list control file", "missing-list"),
    ("missing the md5sums control file", "missing-md5sums"),
    ("do not have an architecture", "no-architecture"),
    ("have an illegal architecture", "illegal-architecture"),
    ("unknown foreign architecture", "unknown-architecture"),
)
LOCKED_PREFACE = "Another process has locked the database"
# What an interrupted operation leaves and the repair completes. Missing md5sums or architecture problems are
# reported but left alone: they are old damage, not an interruption, and apt works despite them.
INTERRUPTED = {"reinstall-required", "unpacked", "half-configured", "half-installed", "triggers-awaited",
               "triggers-pending", "duplicates"}
REINSTALL = {"reinstall-required", "half-installed"}

NONINTERACTIVE = {"LC_ALL": "C", "DEBIAN_FRONTEND": "noninteractive"}
# Existing configuration files are kept, as the ansible apt module does by default (force-confdef,force-confold).
DPKG_CONFIGURE = ["dpkg", "--force-confdef", "--force-confold", "--configure", "-a"]
APT_FIX = ["apt-get", "install", "--fix-broken", "--yes", "-o", "Dpkg::Options::=--force-confdef",
           "-o", "Dpkg::Options::=--force-confold"]
DPKG_WANTS = ["dpkg-query", "--show", "--showformat",
              "${binary:Package}\\t${db:Status-Want}\\t${db:Status-Eflag}\\t${db:Status-Status}\\n"]
# Installed packages only: no repository metadata needed (or downloaded) to find duplicates.
DNF_CHECK = ["dnf", "--disablerepo=*", "check", "--duplicates"]
DNF_FIX = ["dnf", "remove", "--duplicates", "--assumeyes"]
DUPLICATE = re.compile(r"^(\S+) is a duplicate with (\S+)$")

# run(argv) -> (rc, stdout, stderr), with LC_ALL=C so the reports parse.
Runner = Callable[[Sequence[str]], Any]


class PackageDbError(Exception):
    """A failure meant for the operator (message only)."""


def parse_audit(text: str) -> dict[str, Any]:
    """dpkg --audit output -> {"problems": [{"kind", "packages", "text"}], "locked": bool}.

    Each section is a header (lines starting at column 0, ending with ':') followed by one line per package
    (" name   summary"), then a blank line; a header dpkg adds later is kept with kind "other"."""
    problems: list[dict[str, Any]] = []
    locked = False
    header: list[str] = []
    packages: list[str] = []

    def close() -> None:
        nonlocal locked
        text_ = " ".join(header)
        if text_.startswith(LOCKED_PREFACE):
            locked = True
        elif header or packages:
            kind = next((k for phrase, k in AUDIT_KINDS if phrase in text_), "other")
            problems.append({"kind": kind, "packages": packages[:], "text": text_})
        header.clear()
        packages.clear()

    for line in text.splitlines():
        if not line.strip():
            close()
        elif line.startswith(" "):
            packages.append(line.split()[0])
        else:
            if packages:  # a header right after package lines: a section without its blank line
                close()
            header.append(line.strip())
    close()
    return {"problems": problems, "locked": locked}


def journal_entries(names: Sequence[str]) -> list[str]:
    """dpkg journal files among a directory's entries: names of digits only (apt's test; tmp.i is dpkg's scratch)."""
    return sorted(n for n in names if n.isdigit())


def parse_wants(text: str) -> dict[str, dict[str, str]]:
    """DPKG_WANTS output -> {package: {"want", "eflag", "status"}}."""
    wants = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) == 4:
            wants[parts[0]] = {"want": parts[1], "eflag": parts[2], "status": parts[3]}
    return wants


def parse_dnf_duplicates(text: str) -> list[dict[str, str]]:
    """dnf check --duplicates output -> [{"older", "newer"}] (dnf prints the lower version first)."""
    found = []
    for line in text.splitlines():
        match = DUPLICATE.match(line.strip())
        if match:
            found.append({"older": match.group(1), "newer": match.group(2)})
    return found


def needs_repair(state: dict[str, Any]) -> bool:
    return bool(state["journal"]) or any(p["kind"] in INTERRUPTED for p in state["problems"])


def left_alone(state: dict[str, Any]) -> list[dict[str, Any]]:
    """Findings no repair step touches: not from an interruption, on packages nothing reinstalls or configures (a
    reinstall also brings back the files dpkg misses for its package)."""
    repaired = {n for p in state["problems"] if p["kind"] in INTERRUPTED for n in p["packages"]}
    return [p for p in state["problems"] if p["kind"] not in INTERRUPTED and not set(p["packages"]) <= repaired]


def predicted(state: dict[str, Any]) -> dict[str, Any]:
    """What a complete repair leaves (check mode)."""
    return {"problems": left_alone(state), "journal": [], "report": ""}


def describe(state: dict[str, Any], journal_dir: str = DPKG_JOURNAL) -> list[str]:
    """One line per finding, for messages and --diff."""
    lines = []
    if state["journal"]:
        lines.append(f"dpkg journal: {len(state['journal'])} entries in {journal_dir} (dpkg was interrupted)")
    alone = left_alone(state)
    for p in state["problems"]:
        note = " (not from an interruption: left alone)" if p in alone else ""
        lines.append(f"{p['kind']}: {', '.join(p['packages'])}{note}")
    return lines


def command_line(argv: Sequence[str]) -> str:
    return " ".join(argv)


# --- Debian ---------------------------------------------------------------------------------------------------

def apt_state(run: Runner, journal_dir: str = DPKG_JOURNAL) -> dict[str, Any]:
    rc, out, err = run(["dpkg", "--audit"])
    if rc != 0:
        raise PackageDbError(f"dpkg --audit failed (exit {rc}): {(err or out).strip()}")
    audit = parse_audit(out)
    try:
        names = os.listdir(journal_dir)
    except FileNotFoundError:
        names = []
    return {"problems": audit["problems"], "journal": journal_entries(names), "report": out.strip()}


def reinstall_candidates(run: Runner, state: dict[str, Any]) -> list[str]:
    """Packages dpkg wants reinstalled (an interrupted unpack) that are still wanted installed: apt's --fix-broken
    alone leaves them as they are (recorded from apt 2.6: it fetches the archive and unpacks nothing)."""
    names = sorted({n for p in state["problems"] if p["kind"] in REINSTALL for n in p["packages"]})
    if not names:
        return []
    rc, out, _unused = run([*DPKG_WANTS, *names])
    wants = parse_wants(out) if rc == 0 else {}
    return [n for n in names if wants.get(n, {}).get("want", "install") == "install"]


def apt_fix_command(reinstall: Sequence[str]) -> list[str]:
    return [*APT_FIX, *(["--reinstall", *reinstall] if reinstall else [])]


def apt_manual(state: dict[str, Any]) -> str:
    """The commands an operator runs by hand for what is left."""
    steps = ["dpkg --configure -a", "apt-get install --fix-broken"]
    reinstall = sorted({n for p in state["problems"] if p["kind"] in REINSTALL for n in p["packages"]})
    if reinstall:
        names = " ".join(reinstall)
        steps.append(f"apt-get install --reinstall {names} (from a repository that carries them; or, to drop them, "
                     f"dpkg --remove --force-remove-reinstreq {names})")
    return "; then ".join(steps) + "; dpkg --audit prints nothing once the database is consistent"


def repair_apt(run: Runner, *, check_mode: bool, repair: bool, journal_dir: str = DPKG_JOURNAL) -> dict[str, Any]:
    """Find and repair an interrupted dpkg database. Returns before/after states, the commands run (or planned in
    check mode) and a message; raises PackageDbError when repair is off or the database stays inconsistent."""
    before = apt_state(run, journal_dir)
    result: dict[str, Any] = {"before": before, "after": before, "commands": [], "changed": False}
    if not needs_repair(before):
        return result
    reinstall = reinstall_candidates(run, before)
    planned = [command_line(DPKG_CONFIGURE),
               command_line(apt_fix_command(reinstall)) + " (only if dpkg --audit still reports problems)"]
    found = "; ".join(describe(before, journal_dir))
    if not repair:
        raise PackageDbError(f"The package database was left interrupted ({found}) and package_db_repair is false. "
                             f"Run on the host: {apt_manual(before)}")
    result["changed"] = True
    if check_mode:
        result["commands"] = planned
        result["after"] = predicted(before)
        return result
    outputs = []
    rc, out, err = run(DPKG_CONFIGURE)
    result["commands"].append(command_line(DPKG_CONFIGURE))
    outputs.append((DPKG_CONFIGURE, rc, out, err))
    state = apt_state(run, journal_dir)
    if needs_repair(state):
        fix = apt_fix_command(reinstall_candidates(run, state))
        rc, out, err = run(fix)
        result["commands"].append(command_line(fix))
        outputs.append((fix, rc, out, err))
        state = apt_state(run, journal_dir)
    result["after"] = state
    if needs_repair(state):
        argv, rc, out, err = outputs[-1]
        raise PackageDbError(
            f"The package database was left interrupted ({found}); the repair did not complete it "
            f"({'; '.join(describe(state, journal_dir))}). Last command: {command_line(argv)} (exit {rc}): "
            f"{tail(err or out)}. Run on the host: {apt_manual(state)}")
    return result


# --- RHEL -----------------------------------------------------------------------------------------------------

def dnf_state(run: Runner) -> dict[str, Any]:
    rc, out, err = run(DNF_CHECK)
    # dnf check exits 1 when it found problems (dnf.exceptions.Error), other codes are its own failures.
    if rc not in (0, 1) or (rc == 1 and not parse_dnf_duplicates(out)):
        raise PackageDbError(f"{command_line(DNF_CHECK)} failed (exit {rc}): {tail(err or out)}")
    dups = parse_dnf_duplicates(out)
    problems = [{"kind": "duplicates", "packages": [f"{d['older']} (with {d['newer']})" for d in dups],
                 "text": "installed twice: the older version was not erased"}] if dups else []
    return {"problems": problems, "journal": [], "report": out.strip()}


def repair_dnf(run: Runner, *, check_mode: bool, repair: bool) -> dict[str, Any]:
    before = dnf_state(run)
    result: dict[str, Any] = {"before": before, "after": before, "commands": [], "changed": False}
    if not needs_repair(before):
        return result
    found = "; ".join(describe(before))
    manual = f"{command_line(DNF_FIX)}, then {command_line(DNF_CHECK)} prints nothing"
    if not repair:
        raise PackageDbError(f"The package database was left interrupted ({found}) and package_db_repair is false. "
                             f"Run on the host: {manual}")
    result["changed"] = True
    if check_mode:
        result["commands"] = [command_line(DNF_FIX)]
        result["after"] = predicted(before)
        return result
    rc, out, err = run(DNF_FIX)
    result["commands"].append(command_line(DNF_FIX))
    state = dnf_state(run)
    result["after"] = state
    if needs_repair(state):
        raise PackageDbError(
            f"The package database was left interrupted ({found}); {command_line(DNF_FIX)} (exit {rc}) did not "
            f"complete it ({'; '.join(describe(state))}): {tail(err or out)}. Run on the host: {manual}; where dnf "
            "reports conflicts, dnf shell with remove --duplicates and upgrade")
    return result


# --- Locks ----------------------------------------------------------------------------------------------------

def fcntl_holder(path: str) -> int | None:
    """PID holding a POSIX record lock on path (as dpkg, apt and rpm take theirs), None when free or absent.
    F_GETLK only asks; taking the lock to test it could make a package manager starting now fail."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        # struct flock on 64-bit Linux (x86_64, aarch64: the GPU hosts): short type, short whence, off_t start,
        # off_t len, pid_t pid.
        query = struct.pack("hhqqi", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
        l_type, _unused, _unused, _unused, pid = struct.unpack("hhqqi", fcntl.fcntl(fd, fcntl.F_GETLK, query))
        return None if l_type == fcntl.F_UNLCK else pid
    finally:
        os.close(fd)


def pidfile_holder(path: str, proc: str = "/proc") -> int | None:
    """PID in a PID-file lock (dnf's ProcessLock) when that process lives, else None."""
    try:
        with open(path) as fh:
            pid = int(fh.read(20).strip() or 0)
    except (OSError, ValueError):
        return None
    return pid if pid > 0 and os.path.exists(os.path.join(proc, str(pid))) else None


def process_line(pid: int, proc: str = "/proc") -> str:
    try:
        with open(os.path.join(proc, str(pid), "cmdline"), "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace").strip() or "?"
    except OSError:
        return "?"


def lock_holders(manager: str, locks: dict[str, Sequence[str]] | None = None,
                 pid_locks: dict[str, Sequence[str]] | None = None) -> list[dict[str, Any]]:
    held = []
    for path in (locks or LOCKS)[manager]:
        pid = fcntl_holder(path)
        if pid is not None:
            held.append({"path": path, "pid": pid, "command": process_line(pid)})
    for path in (pid_locks or PID_LOCKS)[manager]:
        pid = pidfile_holder(path)
        if pid is not None:
            held.append({"path": path, "pid": pid, "command": process_line(pid)})
    return held


def wait_for_locks(holders: Callable[[], list[dict[str, Any]]], timeout: int, *, sleep=time.sleep,
                   clock=time.monotonic, interval: float = 2.0) -> dict[str, Any]:
    """Wait until no package manager holds its locks, at most timeout seconds. Returns the holders first seen and
    the seconds waited; raises PackageDbError naming the holder when it is still there."""
    start = clock()
    first = holders()
    current = first
    while current:
        waited = clock() - start
        if waited >= timeout:
            who = ", ".join(f"{h['path']} by PID {h['pid']} ({h['command']})" for h in current)
            raise PackageDbError(
                f"A package manager is still running after {int(waited)} s (lock_timeout {timeout} s): "
                f"{who}. Let it finish, or stop it if it hangs (kill PID), then run again.")
        sleep(min(interval, max(timeout - waited, 0.1)))
        current = holders()
    return {"held_by": first, "waited": round(clock() - start, 1)}


def tail(text: str, lines: int = 8) -> str:
    kept = [line for line in (text or "").strip().splitlines() if line.strip()]
    return " | ".join(kept[-lines:]) or "no output"


def check_timeout(value: int) -> int:
    if value < 0:
        raise PackageDbError(f"lock_timeout must be 0 or more seconds; got {value}")
    return value
