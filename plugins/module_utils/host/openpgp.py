# Copyright: kube-accel contributors
# Apache License 2.0
"""Repository signing keys checked against pinned fingerprints before apt or dnf trusts them.

- ``fingerprints(text)``: the fingerprints of the primary keys an ASCII-armoured OpenPGP key file holds (RFC 9580
  section 5.5.4: v4 = SHA-1 over 0x99, a two-octet length and the public-key packet body; v6 = SHA-256 over 0x9B, a
  four-octet length and the body; v5 drafts likewise with 0x9A). Subkeys are the primary key's (apt and dnf accept a
  subkey only with the primary key's binding signature), so only primary keys are compared.
- ``check_key(text, pinned)``: whether every primary key of the file is pinned (a file that adds a second key would
  let that key sign the repository too) and at least one is.
- ``key_url_problem(url)``: why a key URL may not be downloaded (only https: a key over http or ftp could be swapped
  in transit, and the fingerprint check is then the only guard left).

Pure Python on the controller: the hosts need no gpg (Debian installs only gpgv or sqv). Cross-checked against
``gpg --show-keys --with-colons`` in tests/unit/test_accel_openpgp.py. Kept Python 3.9 compatible like the rest of
module_utils.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re

ARMOR_BEGIN = "-----BEGIN PGP PUBLIC KEY BLOCK-----"
ARMOR_END = "-----END PGP PUBLIC KEY BLOCK-----"
PUBLIC_KEY_TAG = 6
_FINGERPRINT = re.compile(r"^(?:[0-9A-F]{40}|[0-9A-F]{64})$")
# Fingerprint prefix octet and length size per key version (RFC 9580 5.5.4; v5 from draft-ietf-openpgp-crypto-refresh).
_VERSIONS = {4: (0x99, 2, hashlib.sha1), 5: (0x9A, 4, hashlib.sha256), 6: (0x9B, 4, hashlib.sha256)}
_CRC24_INIT, _CRC24_POLY = 0xB704CE, 0x1864CFB


def normalize_fingerprint(value: object) -> str:
    """``'EB69 3B30 ...'`` -> ``'EB693B30...'``; ValueError unless 40 (v4) or 64 (v6) hex digits."""
    text = re.sub(r"\s+", "", str(value)).upper()
    if text.startswith("0X"):
        text = text[2:]
    if not _FINGERPRINT.match(text):
        raise ValueError(f"{value!r} is not an OpenPGP fingerprint (40 or 64 hexadecimal digits; a key ID is not "
                         "enough)")
    return text


def _crc24(data: bytes) -> int:
    crc = _CRC24_INIT
    for octet in data:
        crc ^= octet << 16
        for _bit in range(8):
            crc <<= 1
            if crc & 0x1000000:
                crc ^= _CRC24_POLY
    return crc & 0xFFFFFF


def dearmor(text: str) -> bytes:
    """The packets of every public-key block in ``text`` (armour headers skipped, CRC-24 checked when present)."""
    lines = str(text).replace("\r\n", "\n").split("\n")
    blocks: list[bytes] = []
    i = 0
    while i < len(lines):
        if lines[i].strip() != ARMOR_BEGIN:
            i += 1
            continue
        i += 1
        # Armour headers ("Version: ...", "Comment: ..."; a colon never occurs in base64) precede the data.
        while i < len(lines) and ":" in lines[i]:
            i += 1
        body, checksum = [], None
        while i < len(lines) and lines[i].strip() != ARMOR_END:
            line = lines[i].strip()
            if line.startswith("=") and len(line) == 5:
                checksum = line[1:]
            elif line:
                body.append(line)
            i += 1
        if i == len(lines):
            raise ValueError(f"an armoured block has no {ARMOR_END!r} line")
        try:
            data = base64.b64decode("".join(body), validate=True)
        except (binascii.Error, ValueError) as err:
            raise ValueError(f"the armoured key is not valid base64 ({err})") from None
        if checksum is not None and base64.b64decode(checksum) != _crc24(data).to_bytes(3, "big"):
            raise ValueError("the armoured key's CRC-24 checksum does not match its content (damaged or edited)")
        blocks.append(data)
        i += 1
    if not blocks:
        raise ValueError(f"no {ARMOR_BEGIN!r} block: not an ASCII-armoured OpenPGP public key")
    return b"".join(blocks)


def packets(data: bytes) -> list[tuple[int, bytes]]:
    """(tag, body) of each OpenPGP packet (RFC 9580 section 4.2: old and new packet headers)."""
    out = []
    pos = 0
    while pos < len(data):
        first = data[pos]
        if not first & 0x80:
            raise ValueError(f"octet {pos} is not a packet header: not an OpenPGP key")
        pos += 1
        if first & 0x40:  # new format
            tag = first & 0x3F
            if pos >= len(data):
                raise ValueError("truncated packet header")
            o1 = data[pos]
            if o1 < 192:
                length, pos = o1, pos + 1
            elif o1 < 224:
                length, pos = ((o1 - 192) << 8) + data[pos + 1] + 192, pos + 2
            elif o1 == 255:
                length, pos = int.from_bytes(data[pos + 1:pos + 5], "big"), pos + 5
            else:
                raise ValueError("partial body lengths are not allowed in key packets")
        else:  # old format
            tag, kind = (first >> 2) & 0x0F, first & 0x03
            if kind == 3:
                length = len(data) - pos
            else:
                size = 1 << kind
                length, pos = int.from_bytes(data[pos:pos + size], "big"), pos + size
        if pos + length > len(data):
            raise ValueError("truncated packet: the key file is incomplete")
        out.append((tag, data[pos:pos + length]))
        pos += length
    return out


def fingerprints(text: str) -> list[str]:
    """Fingerprints (upper-case hex) of the primary keys in an armoured key file, in file order."""
    found = []
    for tag, body in packets(dearmor(text)):
        if tag != PUBLIC_KEY_TAG:
            continue
        if not body:
            raise ValueError("an empty public-key packet")
        version = body[0]
        if version not in _VERSIONS:
            raise ValueError(f"a version {version} public key: only v4 and v6 keys are accepted (v3 keys use MD5)")
        prefix, size, digest = _VERSIONS[version]
        found.append(digest(bytes([prefix]) + len(body).to_bytes(size, "big") + body).hexdigest().upper())
    if not found:
        raise ValueError("the armoured block holds no public key")
    return found


def check_key(text: str, pinned: list[str] | tuple[str, ...]) -> dict:
    """Whether ``text`` may be written to a keyring: {ok, fingerprints, unpinned, pinned, msg}.

    ``ok`` when the file holds at least one primary key and every one of them is in ``pinned``; ``msg`` says why not.
    A bad pinned value (not a fingerprint) is a problem of its own, never a silent mismatch.
    """
    result: dict = {"ok": False, "fingerprints": [], "unpinned": [], "pinned": [], "msg": ""}
    try:
        result["pinned"] = [normalize_fingerprint(p) for p in pinned or []]
    except ValueError as err:
        result["msg"] = f"pinned fingerprint {err}"
        return result
    if not result["pinned"]:
        result["msg"] = "no fingerprint is pinned, so no key can be trusted"
        return result
    try:
        result["fingerprints"] = fingerprints(text)
    except ValueError as err:
        result["msg"] = str(err)
        return result
    result["unpinned"] = [f for f in result["fingerprints"] if f not in result["pinned"]]
    if result["unpinned"]:
        result["msg"] = (f"the key file holds {', '.join(result['unpinned'])}, which is not pinned "
                         f"(pinned: {', '.join(result['pinned'])})")
        return result
    result["ok"] = True
    return result


def key_url_problem(url: str) -> str:
    """'' when ``url`` may be downloaded as a repository key, else why not."""
    text = str(url or "")
    if not text:
        return "no key URL"
    if not text.lower().startswith("https://"):
        scheme = text.split("://", 1)[0] if "://" in text else "no scheme"
        return (f"{text!r} is not an https URL ({scheme}): a key fetched over another scheme could be replaced in "
                "transit; give an https URL or the key inline")
    return ""
