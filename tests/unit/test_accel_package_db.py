"""accel_package_db: finding and repairing a package database an interrupted install left behind.

Debian outputs are recorded from real dpkg 1.21.23 / apt 2.6.1 in the Debian 12 Molecule image, with installs killed
by SIGKILL in a maintainer script (tests/data/package_db/record.sh). The commands are replayed by a runner that
answers each argv with its recorded output: the command execution is the only thing stood in for. The dnf lines
follow dnf 4's cli/commands/check.py format (no RHEL host or image here to record them from). Locks are real fcntl
locks held by a child process. The whole path on a real host is the package_db Molecule scenario.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from ansible_collections.kube_accel.gpu.plugins.module_utils.host import package_db as pdb

DATA = Path(__file__).resolve().parents[1] / "data" / "package_db"


def recorded(name: str) -> str:
    return (DATA / f"{name}.txt").read_text()


def recorded_run(name: str) -> tuple[int, str, str]:
    """A recorded command output whose last line is rc=N."""
    *lines, rc = recorded(name).rstrip("\n").split("\n")
    assert rc.startswith("rc="), name
    return int(rc[3:]), "\n".join(lines) + "\n", ""


class Replay:
    """Answers commands in order with recorded outputs; keeps every argv asked."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.calls: list[list[str]] = []

    def __call__(self, argv):
        self.calls.append(list(argv))
        expect, answer = self.answers.pop(0)
        assert list(argv)[: len(expect)] == expect, (argv, expect)
        return answer(argv) if callable(answer) else answer

    @property
    def writes(self):
        return [c for c in self.calls if c[0] in ("apt-get", "dnf") or "--configure" in c]


AUDIT = ["dpkg", "--audit"]
WANTS = ["dpkg-query", "--show"]


def audit(name):
    return AUDIT, (0, recorded(name), "")


# --- parsing --------------------------------------------------------------------------------------------------

def test_clean_audit_has_no_problems():
    assert pdb.parse_audit(recorded("audit-clean")) == {"problems": [], "locked": False}


@pytest.mark.parametrize(("name", "kinds"), [
    ("audit-half-configured", [("half-configured", ["ka-post"])]),
    ("audit-unpacked", [("unpacked", ["ka-tool"])]),
    ("audit-reinstreq", [("reinstall-required", ["ka-pre"]), ("missing-list", ["ka-pre"]),
                         ("missing-md5sums", ["ka-pre"])]),
])
def test_audit_sections_and_their_packages(name, kinds):
    parsed = pdb.parse_audit(recorded(name))
    assert [(p["kind"], p["packages"]) for p in parsed["problems"]] == kinds
    assert not parsed["locked"]


def test_audit_while_another_dpkg_runs_says_so():
    parsed = pdb.parse_audit(recorded("audit-locked"))
    assert parsed["locked"]
    assert [(p["kind"], p["packages"]) for p in parsed["problems"]] == [
        ("reinstall-required", ["ka-gone"]), ("half-configured", ["ka-live"]), ("missing-list", ["ka-gone"]),
        ("missing-md5sums", ["ka-gone"])]


def test_every_dpkg_section_has_a_kind_and_an_unknown_one_is_kept():
    text = textwrap.dedent("""\
        The following packages are awaiting processing of triggers that they
        have activated in other packages.  This processing can be requested using
        dselect or dpkg --configure --pending (or dpkg --triggers-only):
         libfoo               foo

        The following packages have been triggered, but the trigger processing
        has not yet been done.  Trigger processing can be requested using
        dselect or dpkg --configure --pending (or dpkg --triggers-only):
         libc-bin:amd64       GNU C Library: Binaries

        The following packages are only half installed, due to problems during
        installation.  The installation can probably be completed by retrying it;
        the packages can be removed using dselect or dpkg --remove:
         bar                  bar

        The following packages have an unknown foreign architecture, which will
        cause dependency issues on front-ends. This can be fixed by registering
        the foreign architecture with dpkg --add-architecture:
         baz:armhf            baz

        Some future dpkg section:
         qux                  qux
        """)
    kinds = [(p["kind"], p["packages"]) for p in pdb.parse_audit(text)["problems"]]
    assert kinds == [("triggers-awaited", ["libfoo"]), ("triggers-pending", ["libc-bin:amd64"]),
                     ("half-installed", ["bar"]), ("unknown-architecture", ["baz:armhf"]), ("other", ["qux"])]


def test_journal_entries_are_the_numbered_files_apt_refuses_on():
    names = recorded("updates-after-kill").split()
    assert names == ["0000", "0001", "tmp.i"]
    assert pdb.journal_entries(names) == ["0000", "0001"]
    assert pdb.journal_entries(["tmp.i"]) == []


def test_wants_from_dpkg_query():
    assert pdb.parse_wants(recorded("query-wants")) == {
        "ka-post": {"want": "install", "eflag": "ok", "status": "installed"},
        "ka-pre": {"want": "install", "eflag": "reinstreq", "status": "half-installed"},
    }


def test_dnf_duplicates():
    out = ("kernel-core-5.14.0-427.el9.x86_64 is a duplicate with kernel-core-5.14.0-503.el9.x86_64\n"
           "nvidia-driver-3:550.54.15-1.el9.x86_64 is a duplicate with nvidia-driver-3:550.90.07-1.el9.x86_64\n")
    assert pdb.parse_dnf_duplicates(out) == [
        {"older": "kernel-core-5.14.0-427.el9.x86_64", "newer": "kernel-core-5.14.0-503.el9.x86_64"},
        {"older": "nvidia-driver-3:550.54.15-1.el9.x86_64", "newer": "nvidia-driver-3:550.90.07-1.el9.x86_64"}]
    assert pdb.parse_dnf_duplicates("") == []


# --- Debian repair --------------------------------------------------------------------------------------------

@pytest.fixture
def journal(tmp_path):
    d = tmp_path / "updates"
    d.mkdir()
    return d


def test_healthy_host_runs_nothing_and_reports_no_change(journal):
    run = Replay([audit("audit-clean")])
    result = pdb.repair_apt(run, check_mode=False, repair=True, journal_dir=str(journal))
    assert result["changed"] is False and result["commands"] == [] and run.writes == []


def test_journal_alone_is_an_interruption(journal):
    """An install killed after its status reached the journal only: audit is clean, apt still refuses."""
    (journal / "0000").write_text("")
    (journal / "tmp.i").write_text("")

    def configure(argv):  # dpkg merges its journal into the status file
        (journal / "0000").unlink()
        return 0, "", ""
    run = Replay([audit("audit-clean"), (pdb.DPKG_CONFIGURE, configure), audit("audit-clean")])
    result = pdb.repair_apt(run, check_mode=False, repair=True, journal_dir=str(journal))
    assert result["changed"] and result["commands"] == ["dpkg --force-confdef --force-confold --configure -a"]
    assert pdb.describe(result["before"], str(journal)) == [
        f"dpkg journal: 1 entries in {journal} (dpkg was interrupted)"]
    assert pdb.describe(result["after"]) == []


def test_half_configured_is_completed_by_configure(journal):
    run = Replay([audit("audit-half-configured"),
                  (pdb.DPKG_CONFIGURE, recorded_run("configure-a-half-configured")),
                  audit("audit-clean")])
    result = pdb.repair_apt(run, check_mode=False, repair=True, journal_dir=str(journal))
    assert result["changed"]
    assert run.writes == [pdb.DPKG_CONFIGURE]
    assert pdb.describe(result["before"]) == ["half-configured: ka-post"]
    assert result["after"]["problems"] == []


def test_unpacked_with_a_missing_dependency_needs_apt_fix_broken(journal):
    run = Replay([audit("audit-unpacked"),
                  (pdb.DPKG_CONFIGURE, recorded_run("configure-a-unmet")),   # dependency problems, exit 1
                  audit("audit-unpacked"),
                  (pdb.APT_FIX, (0, "", "")),
                  audit("audit-clean")])
    result = pdb.repair_apt(run, check_mode=False, repair=True, journal_dir=str(journal))
    assert run.writes == [pdb.DPKG_CONFIGURE, pdb.APT_FIX]
    assert result["commands"][1] == " ".join(pdb.APT_FIX)


def test_interrupted_unpack_is_reinstalled(journal):
    """dpkg --configure -a leaves a reinstreq package as it is, and so does apt-get --fix-broken alone (recorded:
    apt-fix-reinstreq.txt fetches the archive, unpacks nothing and exits 0): only --reinstall completes it."""
    assert "1 not fully installed or removed." in recorded("apt-fix-reinstreq")
    assert "Unpacking" not in recorded("apt-fix-reinstreq")
    run = Replay([audit("audit-reinstreq"),
                  (WANTS, (0, recorded("query-wants"), "")),
                  (pdb.DPKG_CONFIGURE, (0, "", "")),
                  audit("audit-reinstreq"),
                  (WANTS, (0, recorded("query-wants"), "")),
                  ([*pdb.APT_FIX, "--reinstall", "ka-pre"], (0, "", "")),
                  audit("audit-clean")])
    result = pdb.repair_apt(run, check_mode=False, repair=True, journal_dir=str(journal))
    assert run.writes[-1] == [*pdb.APT_FIX, "--reinstall", "ka-pre"]
    assert pdb.describe(result["before"]) == [
        "reinstall-required: ka-pre", "missing-list: ka-pre", "missing-md5sums: ka-pre"]


def test_check_mode_predicts_a_reinstall_leaves_nothing(journal):
    run = Replay([audit("audit-reinstreq"), (WANTS, (0, recorded("query-wants"), ""))])
    result = pdb.repair_apt(run, check_mode=True, repair=True, journal_dir=str(journal))
    assert run.writes == [] and result["changed"]
    assert result["commands"][1].startswith(" ".join([*pdb.APT_FIX, "--reinstall", "ka-pre"]))
    assert pdb.describe(result["after"]) == []


def test_a_package_being_removed_is_not_reinstalled(journal):
    wants = "ka-pre\tdeinstall\treinstreq\thalf-installed\n"
    run = Replay([audit("audit-reinstreq"), (WANTS, (0, wants, ""))])
    result = pdb.repair_apt(run, check_mode=True, repair=True, journal_dir=str(journal))
    assert "--reinstall" not in result["commands"][1]


def test_a_package_no_repository_carries_stops_the_run_with_the_commands(journal):
    run = Replay([audit("audit-gone"),
                  (WANTS, (0, "ka-gone\tinstall\treinstreq\thalf-installed\n", "")),
                  (pdb.DPKG_CONFIGURE, (0, "", "")),
                  audit("audit-gone"),
                  (WANTS, (0, "ka-gone\tinstall\treinstreq\thalf-installed\n", "")),
                  ([*pdb.APT_FIX, "--reinstall", "ka-gone"], recorded_run("apt-reinstall-gone")),
                  audit("audit-gone")])
    with pytest.raises(pdb.PackageDbError) as err:
        pdb.repair_apt(run, check_mode=False, repair=True, journal_dir=str(journal))
    msg = str(err.value)
    assert "reinstall-required: ka-gone" in msg
    assert "(exit 100)" in msg and "can't find an archive for it" in msg
    assert "dpkg --remove --force-remove-reinstreq ka-gone" in msg and "dpkg --configure -a" in msg


def test_check_mode_reads_only_and_says_what_would_run(journal):
    (journal / "0000").write_text("")
    run = Replay([audit("audit-half-configured")])
    result = pdb.repair_apt(run, check_mode=True, repair=True, journal_dir=str(journal))
    assert run.writes == []
    assert result["changed"]
    assert result["commands"][0] == "dpkg --force-confdef --force-confold --configure -a"
    assert result["commands"][1].endswith("(only if dpkg --audit still reports problems)")
    assert pdb.describe(result["after"]) == []


def test_repair_off_fails_naming_what_was_found_and_the_commands(journal):
    run = Replay([audit("audit-half-configured")])
    with pytest.raises(pdb.PackageDbError) as err:
        pdb.repair_apt(run, check_mode=False, repair=False, journal_dir=str(journal))
    assert "half-configured: ka-post" in str(err.value)
    assert "package_db_repair is false" in str(err.value)
    assert "dpkg --configure -a; then apt-get install --fix-broken" in str(err.value)
    assert run.writes == []


def test_old_damage_alone_is_reported_not_repaired(journal):
    text = ("The following packages are missing the md5sums control file in the\n"
            "database, they need to be reinstalled:\n gsfonts-other        Additional fonts\n\n")
    run = Replay([(AUDIT, (0, text, ""))])
    result = pdb.repair_apt(run, check_mode=False, repair=True, journal_dir=str(journal))
    assert not result["changed"] and run.writes == []
    assert pdb.describe(result["before"]) == ["missing-md5sums: gsfonts-other (not from an interruption: left alone)"]


def test_a_failing_audit_is_an_error(journal):
    run = Replay([(AUDIT, (2, "", "dpkg: error: parsing file '/var/lib/dpkg/status' near line 12"))])
    with pytest.raises(pdb.PackageDbError, match="dpkg --audit failed .exit 2.: dpkg: error: parsing"):
        pdb.repair_apt(run, check_mode=False, repair=True, journal_dir=str(journal))


# --- RHEL repair ----------------------------------------------------------------------------------------------

DUPS = "nvidia-driver-3:550.54.15-1.el9.x86_64 is a duplicate with nvidia-driver-3:550.90.07-1.el9.x86_64\n"


def test_dnf_healthy_and_duplicates_repaired():
    run = Replay([(pdb.DNF_CHECK, (0, "", ""))])
    assert pdb.repair_dnf(run, check_mode=False, repair=True)["changed"] is False
    run = Replay([(pdb.DNF_CHECK, (1, DUPS, "Error: Check discovered 1 problem(s)")),
                  (pdb.DNF_FIX, (0, "", "")),
                  (pdb.DNF_CHECK, (0, "", ""))])
    result = pdb.repair_dnf(run, check_mode=False, repair=True)
    assert result["commands"] == ["dnf remove --duplicates --assumeyes"]
    assert pdb.describe(result["before"]) == [
        "duplicates: nvidia-driver-3:550.54.15-1.el9.x86_64 (with nvidia-driver-3:550.90.07-1.el9.x86_64)"]


def test_dnf_check_mode_and_failures():
    run = Replay([(pdb.DNF_CHECK, (1, DUPS, ""))])
    result = pdb.repair_dnf(run, check_mode=True, repair=True)
    assert result["changed"] and result["commands"] == ["dnf remove --duplicates --assumeyes"]
    assert run.calls == [pdb.DNF_CHECK]
    run = Replay([(pdb.DNF_CHECK, (1, DUPS, "")), (pdb.DNF_FIX, (1, "", "Error: file conflicts")),
                  (pdb.DNF_CHECK, (1, DUPS, ""))])
    with pytest.raises(pdb.PackageDbError, match="did not complete it.*Error: file conflicts.*dnf shell"):
        pdb.repair_dnf(run, check_mode=False, repair=True)
    run = Replay([(pdb.DNF_CHECK, (1, "", "Error: rpmdb open failed"))])
    with pytest.raises(pdb.PackageDbError, match="exit 1.*rpmdb open failed"):
        pdb.repair_dnf(run, check_mode=False, repair=True)


# --- locks ----------------------------------------------------------------------------------------------------

HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o640)
fcntl.lockf(fd, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(60)
"""


def test_fcntl_holder_names_the_live_holder_and_frees_on_its_death(tmp_path):
    lock = tmp_path / "lock-frontend"
    lock.write_text("")
    assert pdb.fcntl_holder(str(lock)) is None
    assert pdb.fcntl_holder(str(tmp_path / "absent")) is None
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(lock)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "locked"
        assert pdb.fcntl_holder(str(lock)) == child.pid
        holders = pdb.lock_holders("apt", locks={"apt": [str(lock)]}, pid_locks={"apt": []})
        assert holders == [{"path": str(lock), "pid": child.pid, "command": pdb.process_line(child.pid)}]
        assert "-c" in holders[0]["command"]
    finally:
        child.kill()  # SIGKILL, as a killed apt: the kernel drops its lock
        child.wait()
    assert pdb.fcntl_holder(str(lock)) is None


def test_pidfile_holder_only_while_the_process_lives(tmp_path):
    pidfile = tmp_path / "rpmdb_lock.pid"
    pidfile.write_text(str(os.getpid()))
    assert pdb.pidfile_holder(str(pidfile)) == os.getpid()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    pidfile.write_text(str(dead.pid))
    assert pdb.pidfile_holder(str(pidfile)) is None
    pidfile.write_text("garbage")
    assert pdb.pidfile_holder(str(pidfile)) is None


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_waits_for_a_running_package_manager_then_proceeds():
    clock = Clock()
    holder = {"path": "/var/lib/dpkg/lock-frontend", "pid": 4242, "command": "apt-get install -y foo"}
    answers = [[holder], [holder], []]
    result = pdb.wait_for_locks(lambda: answers.pop(0), 300, sleep=clock.sleep, clock=clock)
    assert result == {"held_by": [holder], "waited": 4.0}


def test_a_package_manager_running_past_the_timeout_fails_naming_it():
    clock = Clock()
    holder = {"path": "/var/lib/dpkg/lock-frontend", "pid": 4242, "command": "apt-get install -y foo"}
    with pytest.raises(pdb.PackageDbError) as err:
        pdb.wait_for_locks(lambda: [holder], 5, sleep=clock.sleep, clock=clock)
    assert "after 5 s (lock_timeout 5 s)" in str(err.value)
    assert "/var/lib/dpkg/lock-frontend by PID 4242 (apt-get install -y foo)" in str(err.value)
    assert pdb.wait_for_locks(lambda: [], 0) == {"held_by": [], "waited": 0.0}


def test_negative_lock_timeout_is_refused():
    with pytest.raises(pdb.PackageDbError, match="lock_timeout must be 0 or more seconds; got -1"):
        pdb.check_timeout(-1)
