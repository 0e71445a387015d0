"""scripts/upstream.sh builds and tests against upstream archives only at their pinned sha256 (scripts/upstream.sha256),
and runs Go with the checksum database on whatever the caller's environment says."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "upstream.sh"
PINS = REPO / "scripts" / "upstream.sha256"
UPSTREAM = Path(os.environ.get("KA_UPSTREAM_SRC", REPO.parent / "shared" / "upstream"))


def pinned() -> dict[str, str]:
    out = {}
    for line in PINS.read_text().splitlines():
        if line and not line.startswith("#"):
            digest, name = line.split()
            out[name] = digest
    return out


def archive_stems() -> list[str]:
    return re.findall(r'^  "([^|"]+)\|', SCRIPT.read_text(), flags=re.MULTILINE)


def run(tmp_path, *args, **env):
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "KA_CACHE": str(tmp_path / "cache"), **env})


def test_every_archive_the_script_unpacks_is_pinned():
    stems = archive_stems()
    assert len(stems) >= 7
    assert sorted(f"{s}.tar.gz" for s in stems) == sorted(pinned())
    assert all(re.fullmatch(r"[0-9a-f]{64}", d) for d in pinned().values())


@pytest.mark.skipif(not UPSTREAM.is_dir(), reason=f"{UPSTREAM} (KA_UPSTREAM_SRC) is absent: nothing to compare")
def test_the_archives_here_are_the_pinned_ones():
    for name, digest in pinned().items():
        path = UPSTREAM / name
        if path.exists():
            assert hashlib.sha256(path.read_bytes()).hexdigest() == digest, name


def fake_archive(path: Path) -> None:
    """A tar.gz with one top directory, as git archive makes, whose content is not upstream's."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        data = b"package main\n// not upstream's\n"
        info = tarfile.TarInfo("mig-parted/main.go")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    path.write_bytes(gzip.compress(raw.getvalue()))


def test_a_replaced_archive_is_refused_and_nothing_unpacked(tmp_path):
    """The attack: the shared archive directory holds another archive under a pinned name. Before the pin the
    script unpacked (and the conformance tests built and trusted) whatever was there."""
    src = tmp_path / "upstream"
    src.mkdir()
    fake_archive(src / "mig-parted-v0.15.0.tar.gz")
    proc = run(tmp_path, "path", "mig-parted-v0.15.0", KA_UPSTREAM_SRC=str(src))
    assert proc.returncode != 0
    assert "mig-parted-v0.15.0.tar.gz has sha256" in proc.stderr
    assert pinned()["mig-parted-v0.15.0.tar.gz"] in proc.stderr
    assert not (tmp_path / "cache" / "upstream" / "src" / "mig-parted-v0.15.0" / "main.go").exists()


@pytest.mark.skipif(not (UPSTREAM / "mig-parted-v0.15.0.tar.gz").exists(), reason="the pinned archive is absent")
def test_the_pinned_archive_is_unpacked(tmp_path):
    proc = run(tmp_path, "path", "mig-parted-v0.15.0", KA_UPSTREAM_SRC=str(UPSTREAM))
    assert proc.returncode == 0, proc.stderr
    assert (Path(proc.stdout.strip()) / "go.mod").exists()


@pytest.mark.skipif(shutil.which("go") is None, reason="go is not installed")
def test_go_runs_with_the_checksum_database_whatever_the_caller_says(tmp_path):
    proc = run(tmp_path, "goenv", GOSUMDB="off", GONOSUMDB="*", GOPRIVATE="*", GONOPROXY="*", GOINSECURE="*",
               GOFLAGS="-mod=mod -insecure")
    assert proc.returncode == 0, proc.stderr
    sumdb, _proxy, nosumdb, private, noproxy, insecure, flags = proc.stdout.splitlines()
    assert sumdb == "sum.golang.org"
    assert (nosumdb, private, noproxy, insecure) == ("", "", "", "")
    assert "-insecure" not in flags


# What the lab runs, by name: a binary under UPSTREAM_BIN in scripts/kalab, a harness by its ka-conform-* name, or a
# binary a lab test runs through tests/conformance/upstream.py. (scripts/kalab/monitoring.py's binaries are built on
# demand under the script's lock, by name; they are not in this set.)
LAB_USES = re.compile(r'UPSTREAM_BIN / ["\']([\w.-]+)["\']|["\'](ka-conform-[\w-]+)["\']'
                      r'|upstream\.(?:run|binary)\(["\']([\w.-]+)["\']')


def lab_uses() -> dict[str, set[str]]:
    files = [*sorted((REPO / "scripts" / "kalab").glob("*.py")), REPO / "tests" / "lab_fixture.py",
             *sorted((REPO / "tests" / "integration").glob("*_lab.py"))]
    used: dict[str, set[str]] = {}
    for path in files:
        for match in LAB_USES.finditer(path.read_text()):
            name = next(g for g in match.groups() if g)
            used.setdefault(name, set()).add(str(path.relative_to(REPO)))
    return used


def test_the_lab_lane_builds_everything_the_lab_runs(tmp_path):
    """`make test` starts the lab tests once `upstream.sh lab` has built its set, with the rest still building in the
    other lane (scripts/test.sh). A binary the lab runs that is not in that set would be there or not depending on
    the race: the lab's code and lab tests name only what `lab` builds."""
    proc = run(tmp_path, "lab-outputs")
    assert proc.returncode == 0, proc.stderr
    built = set(proc.stdout.split())
    used = lab_uses()
    # The scan finds what the lab is known to run (else it would pass by finding nothing).
    assert {"config-manager", "hami-scheduler", "gpu-operator", "gpu-admission", "ka-conform-deviceplugin",
            "ka-conform-dra-slices", "ka-conform-hami-config"} <= set(used)
    missing = {name: sorted(files) for name, files in used.items() if name not in built}
    assert not missing, f"the lab runs these, but `scripts/upstream.sh lab` does not build them (LAB_*): {missing}"


@pytest.mark.parametrize(("old", "new", "refusal"), [
    ("LAB_HARNESSES=(deviceplugin ", "LAB_HARNESSES=(no-such-harness ",
     "LAB_HARNESSES names no-such-harness: there is no tests/conformance/go/no-such-harness"),
    ("LAB_BINS=(config-manager ", "LAB_BINS=(config-mgr ",
     "LAB_BINS names config-mgr: no archive in ARCHIVES builds it"),
])
def test_a_lab_name_nothing_builds_is_refused(tmp_path, old, new, refusal):
    """A renamed binary or harness left in LAB_* fails `lab` by name, instead of leaving the lab without it."""
    script = tmp_path / "scripts" / "upstream.sh"
    script.parent.mkdir()
    script.write_text(SCRIPT.read_text().replace(old, new))
    for name in ("goenv.sh", "versions.env", "upstream.sha256"):
        shutil.copy(REPO / "scripts" / name, script.parent / name)
    promql = tmp_path / "tests" / "conformance" / "go" / "promql"  # where the script reads Prometheus's version
    promql.mkdir(parents=True)
    shutil.copy(REPO / "tests" / "conformance" / "go" / "promql" / "go.mod", promql)
    proc = subprocess.run(["bash", str(script), "lab-outputs"], capture_output=True, text=True, timeout=60,
                          check=False, env={**os.environ, "KA_CACHE": str(tmp_path / "cache")})
    assert proc.returncode != 0
    assert refusal in proc.stderr
