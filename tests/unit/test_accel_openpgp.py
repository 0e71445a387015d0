"""Repository keys against pinned fingerprints (module_utils/host/openpgp.py). The oracle is GnuPG itself: keys are
made by gpg in a throw-away home and their fingerprints read back with ``gpg --show-keys --with-colons``, the command
a person would use to check a downloaded key by hand."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess

import pytest
from ansible_collections.kube_accel.gpu.plugins.module_utils.host import openpgp as accel_openpgp

GPG = shutil.which("gpg")
pytestmark = pytest.mark.skipif(GPG is None, reason="gpg (GnuPG) is not installed: the tests need it as the oracle")


def _gpg(home, *args, text=True):
    env = dict(os.environ, GNUPGHOME=str(home))
    return subprocess.run([GPG, "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", "", *args],
                          env=env, check=True, capture_output=True, text=text, timeout=120).stdout


def gpg_primary_fingerprints(home, armoured: str) -> list[str]:
    """What ``gpg --show-keys --with-colons`` reports as each primary key's fingerprint (the fpr after a pub)."""
    path = home / "shown.asc"
    path.write_text(armoured)
    out, want = [], False
    for line in _gpg(home, "--show-keys", "--with-colons", str(path)).splitlines():
        fields = line.split(":")
        if fields[0] in ("pub", "sub"):
            want = fields[0] == "pub"
        elif fields[0] == "fpr" and want:
            out.append(fields[9])
            want = False
    return out


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """Armoured exports from GnuPG: an RSA key, an ed25519 key with an encryption subkey, and both in one file."""
    home = tmp_path_factory.mktemp("gnupg")
    home.chmod(0o700)
    _gpg(home, "--quick-gen-key", "kube-accel test rsa <rsa@kube-accel.invalid>", "rsa2048", "sign", "never")
    _gpg(home, "--quick-gen-key", "kube-accel test ed25519 <ed@kube-accel.invalid>", "ed25519", "sign", "never")
    ed = _gpg(home, "--list-keys", "--with-colons", "ed@kube-accel.invalid").split("fpr:::::::::")[1].split(":")[0]
    _gpg(home, "--quick-add-key", ed, "cv25519", "encr", "never")
    return {
        "home": home,
        "rsa": _gpg(home, "--armor", "--export", "rsa@kube-accel.invalid"),
        "ed25519": _gpg(home, "--armor", "--export", "ed@kube-accel.invalid"),
        "both": _gpg(home, "--armor", "--export"),
        "binary": _gpg(home, "--export", "rsa@kube-accel.invalid", text=False),
    }


@pytest.mark.parametrize("name", ["rsa", "ed25519", "both"])
def test_fingerprints_are_gpgs(keys, name):
    want = gpg_primary_fingerprints(keys["home"], keys[name])
    assert len(want) == (2 if name == "both" else 1)
    assert accel_openpgp.fingerprints(keys[name]) == want


def test_subkeys_are_not_primary_keys(keys):
    # The ed25519 export carries a cv25519 subkey: gpg lists two fpr lines, only the primary one is compared.
    assert len(accel_openpgp.fingerprints(keys["ed25519"])) == 1


def test_the_pinned_key_passes_in_any_spelling(keys):
    (fpr,) = gpg_primary_fingerprints(keys["home"], keys["rsa"])
    spaced = " ".join(fpr[i:i + 4] for i in range(0, 40, 4)).lower()
    result = accel_openpgp.check_key(keys["rsa"], [spaced])
    assert result["ok"] and result["fingerprints"] == [fpr] and result["msg"] == ""


def test_a_key_that_is_not_pinned_is_refused_and_named(keys):
    rsa = gpg_primary_fingerprints(keys["home"], keys["rsa"])
    ed = gpg_primary_fingerprints(keys["home"], keys["ed25519"])
    result = accel_openpgp.check_key(keys["ed25519"], rsa)
    assert not result["ok"]
    assert result["unpinned"] == ed and ed[0] in result["msg"] and rsa[0] in result["msg"]


def test_a_second_key_beside_the_pinned_one_is_refused(keys):
    # A file holding the pinned key plus another would let the other key sign the repository (Signed-By trusts all).
    rsa = gpg_primary_fingerprints(keys["home"], keys["rsa"])
    result = accel_openpgp.check_key(keys["both"], rsa)
    assert not result["ok"] and len(result["unpinned"]) == 1 and result["unpinned"] != rsa


def test_both_keys_pinned_pass(keys):
    both = gpg_primary_fingerprints(keys["home"], keys["both"])
    assert accel_openpgp.check_key(keys["both"], both)["ok"]


def test_an_edited_armour_fails_its_checksum(keys):
    lines = keys["rsa"].splitlines()
    body = next(i for i, line in enumerate(lines) if len(line) == 64)
    swapped = "B" if lines[body][10] != "B" else "C"
    lines[body] = lines[body][:10] + swapped + lines[body][11:]
    result = accel_openpgp.check_key("\n".join(lines) + "\n", accel_openpgp.fingerprints(keys["rsa"]))
    assert not result["ok"] and "CRC-24" in result["msg"]


@pytest.mark.parametrize(("text", "message"), [
    ("<html>404 Not Found</html>", "not an ASCII-armoured OpenPGP public key"),
    ("", "not an ASCII-armoured OpenPGP public key"),
    ("-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nAAAA\n", "no '-----END PGP PUBLIC KEY BLOCK-----' line"),
])
def test_what_is_not_a_key_is_refused(text, message):
    result = accel_openpgp.check_key(text, ["EB693B3035CD5710E231E123A4B469963BF863CC"])
    assert not result["ok"] and message in result["msg"]


def test_a_binary_key_is_refused_with_a_reason(keys):
    # apt's Signed-By takes binary keyrings too, but the roles write armoured text: a binary download is refused.
    result = accel_openpgp.check_key(keys["binary"].decode("latin-1"), accel_openpgp.fingerprints(keys["rsa"]))
    assert not result["ok"] and "not an ASCII-armoured" in result["msg"]


def test_a_v3_key_is_refused():
    packet = bytes([0x99, 0x00, 0x03, 3, 0, 0])  # old-format tag 6, length 3, version 3
    armoured = ("-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n" + base64.b64encode(packet).decode()
                + "\n-----END PGP PUBLIC KEY BLOCK-----\n")
    result = accel_openpgp.check_key(armoured, ["EB693B3035CD5710E231E123A4B469963BF863CC"])
    assert not result["ok"] and "version 3" in result["msg"]


@pytest.mark.parametrize("pinned", [[], ["3BF863CC"], ["A4B469963BF863CC"], ["not hex at all, forty characters long!"]])
def test_a_key_id_or_nothing_pinned_is_a_problem_of_its_own(keys, pinned):
    result = accel_openpgp.check_key(keys["rsa"], pinned)
    assert not result["ok"]
    assert ("not an OpenPGP fingerprint" in result["msg"]) if pinned else ("no fingerprint is pinned" in result["msg"])


@pytest.mark.parametrize(("url", "ok"), [
    ("https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/3bf863cc.pub", True),
    ("HTTPS://nvidia.github.io/libnvidia-container/gpgkey", True),
    ("http://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/3bf863cc.pub", False),
    ("ftp://mirror.example/key", False),
    ("file:///srv/mirror/key.asc", False),
    ("mirror.example/key", False),
    ("", False),
])
def test_only_https_key_urls_are_downloaded(url, ok):
    problem = accel_openpgp.key_url_problem(url)
    assert (problem == "") is ok
    if not ok and url:
        assert "inline" in problem
