"""helm lint --strict (helm v3 and v4) and checkov over the rendered matrix."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from chartlib import CHARTS, CHARTS_DIR, NAMESPACE, REPO, helm_template, values_files

CHECKOV = REPO / ".venv-checkov" / "bin" / "checkov"


@pytest.mark.parametrize("chart", CHARTS)
@pytest.mark.parametrize("which", ["helm", "helm4"])
def test_lint_strict(request, chart, which):
    binary = request.getfixturevalue(which)
    for values in [None, *values_files(chart)]:
        cmd = [binary, "lint", "--strict", str(CHARTS_DIR / chart), "--namespace", NAMESPACE]
        if values:
            cmd += ["--values", str(values)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=120)
        where = f"{which} lint --strict {chart} {values and values.name}"
        assert proc.returncode == 0, f"{where}:\n{proc.stdout}{proc.stderr}"
        assert "[WARNING]" not in proc.stdout and "[ERROR]" not in proc.stdout, proc.stdout


@pytest.mark.parametrize("chart", CHARTS)
def test_helm4_renders_like_helm3(helm, helm4, chart):
    for values in values_files(chart):
        v3 = helm_template(chart, [values], helm=helm)
        v4 = helm_template(chart, [values], helm=helm4)
        assert v3.returncode == 0 and v4.returncode == 0, v3.stderr + v4.stderr
        # Same objects; the install order of kinds helm does not know (CRs) may differ between versions.
        assert sorted_objs(v3.stdout) == sorted_objs(v4.stdout), values.name


def sorted_objs(text):
    objs = [d for d in yaml.safe_load_all(text) if d]
    return sorted(objs, key=lambda o: (o["kind"], o["metadata"]["name"]))


@pytest.fixture(scope="module")
def rendered_dir(helm, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("rendered")
    for chart in CHARTS:
        for values in values_files(chart):
            proc = helm_template(chart, [values], helm=helm, extra=["--include-crds"])
            assert proc.returncode == 0, proc.stderr
            (out / f"{chart}-{values.stem}.yaml").write_text(proc.stdout)
    return out


def test_checkov_zero_unexplained_failures(rendered_dir):
    if not CHECKOV.exists():
        pytest.skip(f"{CHECKOV} missing: create it with `python3 -m venv .venv-checkov && "
                    ".venv-checkov/bin/pip install 'checkov>=3.2,<4'` (make test does)")
    proc = subprocess.run(
        [str(CHECKOV), "-d", str(rendered_dir), "--framework", "kubernetes", "--skip-download",
         "--compact", "--quiet", "-o", "json"],
        capture_output=True, text=True, check=False, timeout=600,
    )
    report = json.loads(proc.stdout)
    failed = report["results"].get("failed_checks", []) if report.get("results") else []
    details = [f"{f['check_id']} {f['resource']} ({f['file_path']}): {f['check_name']}" for f in failed]
    assert not failed, "checkov failures without a skip reason in the chart:\n" + "\n".join(details)
    assert report["summary"]["passed"] > 100, report["summary"]
    assert report["summary"]["parsing_errors"] == 0


SKIP = re.compile(r"^(CKV2?_K8S_\d+)=(.*)$")


@pytest.mark.parametrize("chart", CHARTS)
def test_every_checkov_skip_has_a_reason(chart):
    found = 0
    for tpl in (CHARTS_DIR / chart / "templates").rglob("*.yaml"):
        for line in tpl.read_text().splitlines():
            if "checkov.io/skip" not in line:
                continue
            found += 1
            value = line.split(":", 1)[1].strip()
            match = SKIP.match(value)
            assert match, f"{tpl.name}: malformed skip {value!r}"
            assert len(match.group(2).split()) >= 3, f"{tpl.name}: {match.group(1)} skipped without a real reason"
    assert found, f"{chart}: no checkov skips at all? the test would not notice a broken annotation format"
