# Copyright: kube-accel contributors
# Apache License 2.0
"""Values the host roles write into configuration files that have no quoting of their own.

- ``apt_field(value, field, words)``: a value for an apt deb822 sources file (sources.list.d/*.sources) or an apt
  preferences file. Both are RFC 822 style: a line break followed by anything but a space starts another field (a
  second ``Signed-By``, ``Trusted: yes``, another ``Pin``), a space separates the items of ``URIs``, ``Suites`` and
  ``Package``. There is no escape, so a value that would change the file's structure is refused, never rewritten.
- ``kernel_arg_problem(arg)``: why a kernel argument may not go on the GRUB command line. The GRUB drop-in is a shell
  script that update-grub sources as root and whose variable then lands in grub.cfg; the template single-quotes each
  argument for the shell, and this check keeps to the characters kernel parameters use, so neither the shell nor
  GRUB's own script parser ever sees a metacharacter.

Kept Python 3.9 compatible like the rest of module_utils.
"""

from __future__ import annotations

import re

# Any C0 control character (line breaks, tab) or DEL: each can end a field or hide one.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Kernel parameters as the kernel documents them (name[=value], values with commas, ranges, PCI IDs, paths).
_KERNEL_ARG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.,:/=+@%-]*$")


def apt_field(value: object, field: str, words: bool = False) -> str:
    """``value`` as text for the apt field ``field``; ValueError when it would add a field or (unless ``words``)
    another item."""
    text = str(value)
    if _CONTROL.search(text):
        raise ValueError(f"{field}: {text!r} holds a line break or control character; apt would read what follows as "
                         "another field of the file (allowed: printable characters on one line)")
    if not words and re.search(r"\s", text):
        raise ValueError(f"{field}: {text!r} holds a space; apt would read it as several items (allowed: one item "
                         "without spaces)")
    if not text.strip():
        raise ValueError(f"{field}: empty value")
    return text


def kernel_arg_problem(arg: object) -> str:
    """'' when ``arg`` may be added to the kernel command line, else why not."""
    text = str(arg)
    if _KERNEL_ARG.match(text):
        return ""
    return (f"{text!r} is not a plain kernel parameter (allowed: name[=value] of letters, digits and _ . , : / = + @ %"
            " -; no spaces, quotes or shell characters)")
