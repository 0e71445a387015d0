"""OpenPGP keys made by GnuPG for tests that check repository keys: (armoured export, fingerprint as gpg reports
it). gpg is the oracle, so the tests never trust kube-accel's own parser for what they expect."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile

GPG = shutil.which("gpg")


@functools.cache
def make_key(uid: str = "kube-accel test key <test@kube-accel.invalid>", algo: str = "ed25519") -> tuple[str, str]:
    if GPG is None:
        raise RuntimeError("gpg (GnuPG) is not installed: these tests need it to make and read keys")
    with tempfile.TemporaryDirectory() as home:
        env = dict(os.environ, GNUPGHOME=home)
        gpg = [GPG, "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", ""]
        subprocess.run([*gpg, "--quick-gen-key", uid, algo, "sign", "never"], env=env, check=True, timeout=120)
        armoured = subprocess.run([*gpg, "--armor", "--export"], env=env, check=True, capture_output=True, text=True,
                                  timeout=60).stdout
        listing = subprocess.run([*gpg, "--list-keys", "--with-colons"], env=env, check=True, capture_output=True,
                                 text=True, timeout=60).stdout
    fpr = next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))
    return armoured, fpr
