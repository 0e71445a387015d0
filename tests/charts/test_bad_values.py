"""Each file under tests/charts/bad/ is refused by helm (schema or validation template) with the message
named on its first line: `# expect: <text>`; the file name starts with the chart: <chart>--<case>.yaml."""

from __future__ import annotations

import subprocess

import pytest
from chartlib import BAD_DIR, CHARTS_DIR, NAMESPACE, helm_template

BAD = sorted(BAD_DIR.glob("*.yaml"))


def expectation(path):
    first = path.read_text().splitlines()[0]
    assert first.startswith("# expect: "), f"{path.name}: first line must be '# expect: <message>'"
    return first.removeprefix("# expect: ").strip()


def test_enough_negative_cases():
    assert len(BAD) >= 15
    assert {p.name.split("--")[0] for p in BAD} >= {"pgpu", "mps", "vgpu"}


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_bad_values_refused(helm, path):
    chart = path.name.split("--")[0]
    message = expectation(path)
    proc = helm_template(chart, [path], helm=helm)
    assert proc.returncode != 0, f"helm template accepted {path.name}"
    assert message in proc.stderr, f"{path.name}: expected {message!r} in:\n{proc.stderr}"


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_bad_values_fail_lint(helm, path):
    chart = path.name.split("--")[0]
    proc = subprocess.run(
        [helm, "lint", "--strict", str(CHARTS_DIR / chart), "--namespace", NAMESPACE, "--values", str(path)],
        capture_output=True, text=True, check=False, timeout=120,
    )
    message = expectation(path)
    assert message in proc.stdout + proc.stderr, f"helm lint did not report {message!r} for {path.name}"
    if message.startswith("at '/") or "additional properties" in message:
        # Schema errors fail lint. The validation template's `fail` is only reported by lint (helm renders in
        # lint mode, where fail() is logged, not fatal); `helm template`/install refuse it (test above).
        assert proc.returncode != 0, f"helm lint accepted {path.name}"
