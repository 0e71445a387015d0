"""scripts/upstream.sh builds and tests against upstream archives only at their pinned sha256 (scripts/upstream.sha256),
and runs Go with the checksum database on whatever the caller's environment says (issue 31.4)."""

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
