"""helm lint --strict (helm v3 and v4) and checkov over the rendered matrix of every chart (monitoring included):
no failure without a skip, and no skip where its check would pass (a skip claims a failure; one that is not there
is an untrue reason)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from chartlib import CHARTS, CHARTS_DIR, NAMESPACE, REPO, helm_template, values_files

CHECKOV = REPO / ".venv-checkov" / "bin" / "checkov"
# Every chart checkov scans; the monitoring chart's PrometheusRule renders only where its API is served.
CHECKOV_CHARTS = (*CHARTS, "monitoring", "dra-pools")
MONITORING_APIS = ("--api-versions", "monitoring.coreos.com/v1/PrometheusRule")
SKIP_LINE = re.compile(r"^\s*checkov\.io/skip[^:]*:.*\n", re.MULTILINE)


@pytest.mark.parametrize("chart", (*CHARTS, "dra-pools"))
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
    for chart in CHECKOV_CHARTS:
        variants = ([None] if chart == "monitoring" else []) + values_files(chart)
        for values in variants:
            extra = ["--include-crds", *(MONITORING_APIS if chart == "monitoring" else ())]
            release = "kube-accel-monitoring" if chart == "monitoring" else None
            proc = helm_template(chart, [values] if values else [], helm=helm, extra=extra, release=release)
            assert proc.returncode == 0, proc.stderr
            (out / f"{chart}--{values.stem if values else 'default'}.yaml").write_text(proc.stdout)
    assert {p.name.split("--")[0] for p in out.glob("*.yaml")} == set(CHECKOV_CHARTS)
    return out


def checkov(directory: Path) -> dict:
    if not CHECKOV.exists():
        pytest.skip(f"{CHECKOV} missing: create it with `python3 -m venv .venv-checkov && "
                    ".venv-checkov/bin/pip install 'checkov>=3.2,<4'` (make test does)")
    proc = subprocess.run(
        [str(CHECKOV), "-d", str(directory), "--framework", "kubernetes", "--skip-download",
         "--compact", "--quiet", "-o", "json"],
        capture_output=True, text=True, check=False, timeout=600,
    )
    assert proc.stdout.strip(), f"checkov printed no report (a skip reason with a second '='?):\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout)


def test_checkov_zero_unexplained_failures(rendered_dir):
    report = checkov(rendered_dir)
    failed = report["results"].get("failed_checks", []) if report.get("results") else []
    details = [f"{f['check_id']} {f['resource']} ({f['file_path']}): {f['check_name']}" for f in failed]
    assert not failed, "checkov failures without a skip reason in the chart:\n" + "\n".join(details)
    assert report["summary"]["passed"] > 100, report["summary"]
    assert report["summary"]["parsing_errors"] == 0


def test_every_checkov_skip_is_needed(rendered_dir, tmp_path):
    """Each skip rendered on a resource names a check that fails there without it: the same renders with every
    checkov.io/skip annotation removed must fail exactly the skipped checks (a digest-pinned image passes CKV_K8S_43
    and CKV_K8S_15, checkov runs no probe checks on Jobs, a privileged container has no capability list)."""
    bare = tmp_path / "bare"
    bare.mkdir()
    skips: dict[tuple[str, str], set[str]] = {}
    for path in rendered_dir.glob("*.yaml"):
        text = path.read_text()
        (bare / path.name).write_text(SKIP_LINE.sub("", text))
        for doc in yaml.safe_load_all(text):
            annotations = (doc or {}).get("metadata", {}).get("annotations") or {}
            ids = {v.split("=", 1)[0] for k, v in annotations.items() if k.startswith("checkov.io/skip")}
            if ids:
                meta = doc["metadata"]
                skips[(path.name, f"{doc['kind']}.{meta.get('namespace', 'default')}.{meta['name']}")] = ids
    failed: dict[tuple[str, str], set[str]] = {}
    for f in checkov(bare)["results"].get("failed_checks", []):
        failed.setdefault((Path(f["file_path"]).name, f["resource"]), set()).add(f["check_id"])
    unneeded = {key: sorted(ids - failed.get(key, set())) for key, ids in skips.items() if ids - failed.get(key, set())}
    assert skips and not unneeded, f"skips whose check passes without them: {unneeded}"


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
