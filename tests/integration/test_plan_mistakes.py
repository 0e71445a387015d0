"""The preflight against a table of realistic inventory mistakes (tests/data/plan_mistakes.yml): one inventory, one
host per mistake, run through `site.yml --tags preflight` as a user runs it. Every case must be refused with its
field, value and what is allowed named; nothing may change; the good pool passes; docs/plan-checks.md shows what the
preflight really said.

Hosts run with `ansible_connection: local` on recorded NVML snapshots (tests/data/nvml: the snapshot stands in for
NVML, the true edge); everything else (Ansible's inventory loading, templating, the action, the rules) runs for real.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import plan_mistakes as pm
import pytest

# Every class of inventory mistake the preflight refuses, each with cases, the DRA pool mistakes included.
CLASSES = {"unknown names", "YAML types", "ranges", "contradictions", "between hosts", "between files",
           "values reaching files", "values reaching names", "robust reporting", "lab only", "DRA pools"}
# <where>: <field> = <value> (<origin>): <what>; allowed: <what is allowed>
MESSAGE = re.compile(r"^\S.*?: \S+( = .+?)?: .+; allowed: .+$", re.S)


@pytest.fixture(scope="module")
def report():
    with tempfile.TemporaryDirectory(prefix="ka-plan-mistakes-") as tmp:
        yield pm.run_all(Path(tmp))


def test_the_table_covers_every_class():
    cases = pm.cases()
    assert len(cases) >= 40
    assert {c["class"] for c in cases} == CLASSES
    assert len({c["host"] for c in cases}) == len(cases)


@pytest.mark.parametrize("case", pm.cases(), ids=lambda c: c["host"])
def test_every_mistake_is_refused_naming_field_value_and_what_is_allowed(report, case):
    who = pm.REPORTER if case.get("report") == "cluster" else case["host"]
    problems = report["problems"].get(who)
    assert problems, f"{who} was not refused: {report['messages'].get(who)!r}"
    for fragment in case["expect"]:
        assert any(fragment in p for p in problems), (fragment, problems)
    for text in problems:
        assert MESSAGE.match(text), text
        assert len(text) < 900, text  # bounded, however large the value (the alias bomb case)


def test_the_good_pool_passes_and_nothing_changes(report):
    assert report["rc"] != 0
    assert report["messages"][pm.GOOD_HOST] == f"{pm.GOOD_HOST}: plan OK (8 GPU(s); source snapshot:dual-socket-a100x8)"
    assert report["stats"][pm.GOOD_HOST]["failures"] == 0
    assert all(s["changed"] == 0 for s in report["stats"].values()), report["stats"]
    # Nothing ran after the preflight: the hosts play never started.
    assert report["plays"] == ["Find the GPU hosts that can be reached", "Preflight checks on every reachable GPU host"]


def test_every_gpu_host_got_its_own_report(report):
    """One broken value (an unterminated template, an alias bomb) stops nobody else's report."""
    hosts = {c["host"] for c in pm.cases() if c.get("report") != "cluster" and not c.get("outside")}
    assert hosts <= set(report["messages"]), hosts - set(report["messages"])


def test_docs_show_what_the_preflight_said(report):
    assert pm.DOC.read_text() == pm.render_doc(report), (
        "docs/plan-checks.md is out of date: .venv/bin/python tests/plan_mistakes.py --write-docs")
