"""Fixtures of the chart test suite (helm binaries; the chart helpers live in chartlib.py)."""

from __future__ import annotations

import pytest
from chartlib import tool


@pytest.fixture(scope="session")
def helm() -> str:
    path = tool("helm")
    if not path:
        pytest.skip("helm v3 not installed: run scripts/toolchain.sh (it pins helm under ~/.cache/kube-accel/bin)")
    return path


@pytest.fixture(scope="session")
def helm4() -> str:
    path = tool("helm4")
    if not path:
        pytest.skip("helm v4 not installed: run scripts/toolchain.sh (it pins helm4 under ~/.cache/kube-accel/bin)")
    return path
