"""The table of realistic inventory mistakes (tests/data/plan_mistakes.yml) as one inventory, and the preflight's
report on it. Used by tests/integration/test_plan_mistakes.py and to render docs/plan-checks.md:

    .venv/bin/python tests/plan_mistakes.py --write-docs    # runs the preflight on the table, rewrites the doc

Every case is its own pool group (``pool_<host>``, its ``group_vars`` text written as a file, so YAML's own typing
applies) holding its own host; the good pool ``pool_ok_pgpu`` must pass. Hosts run with ``ansible_connection:
local`` on the recorded NVML snapshots of tests/data/nvml (no GPU here: the snapshot stands in for NVML, the true
edge). ``kube_control_plane`` holds ``plan-cp-0``, which reports the cluster's and the inventory's own problems.

A case with ``cluster_vars`` (text added to ``group_vars/all.yml``: a cluster setting every host shares, such as the
Kubernetes version) cannot share the one inventory: those cases get a second inventory of their own, without the good
pool, and ``run_all`` merges both reports.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
TABLE = REPO / "tests" / "data" / "plan_mistakes.yml"
DOC = REPO / "docs" / "plan-checks.md"
GOOD_HOST = "ok-pgpu-0"
REPORTER = "plan-cp-0"


def cases() -> list[dict]:
    return yaml.safe_load(TABLE.read_text())


def group_of(case: dict) -> str:
    return "pool_" + case["host"].lower().replace("-", "_").replace(".", "_")


def build(root: Path, table: list[dict] | None = None, good: bool = True, cluster_vars: str = "") -> Path:
    """Write the inventory of the cases (default: every case without ``cluster_vars``) under ``root``, with the good
    pool unless ``good`` is false and ``cluster_vars`` added to group_vars/all.yml; returns its hosts.yml."""
    (root / "group_vars").mkdir(parents=True, exist_ok=True)
    (root / "host_vars").mkdir(exist_ok=True)
    pools: dict = {"pool_ok_pgpu": {"hosts": {GOOD_HOST: None}}} if good else {}
    direct: dict = {}
    top: dict = {}
    table = [c for c in cases() if not c.get("cluster_vars")] if table is None else table
    for case in table:
        host, group = case["host"], group_of(case)
        members = {host: None}
        if case.get("partner"):
            members[case["partner"]["host"]] = None
            (root / "host_vars" / f"{case['partner']['host']}.yml").write_text(case["partner"]["host_vars"])
        if case.get("direct"):
            direct[host] = None
        elif case.get("outside"):
            top[group] = {"hosts": members}
        else:
            pools[group] = {"hosts": members}
        if case.get("group_vars"):
            lab_gpu = f"accel_lab_gpu: {json.dumps(case['gpu'])}\n" if case.get("gpu") else ""
            (root / "group_vars" / f"{group}.yml").write_text(case["group_vars"] + lab_gpu)
        host_vars = case.get("host_vars") or ""
        if case.get("direct"):
            host_vars += f"accel_lab_gpu: {json.dumps(case['gpu'])}\n"
        if host_vars:
            (root / "host_vars" / f"{host}.yml").write_text(host_vars)
        for path, text in (case.get("files") or {}).items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(text)
    for case in table:
        for other in case.get("also_in") or []:
            pools[other]["hosts"][case["host"]] = None
    local = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}
    inventory = {"all": {"children": {
        "kube_control_plane": {"hosts": {REPORTER: None}, "vars": local},
        "gpu_pools": {"vars": local, "hosts": direct, "children": pools},
        **top,
    }}}
    (root / "hosts.yml").write_text("---\n" + yaml.safe_dump(inventory, sort_keys=False))
    if good:
        (root / "group_vars" / "pool_ok_pgpu.yml").write_text(
            "accel_pool: ok-pgpu\naccel_mode: pgpu\naccel_lab_gpu: dual-socket-a100x8\n"
            "accel_numa_policy: single-numa-node\n")
    (root / "group_vars" / "all.yml").write_text(
        "---\n"
        'accel_kubernetes_version: "1.36"\n'
        "accel_namespace: kube-accel\n"
        "accel_control_plane_cidrs: [10.0.0.10/32]\n"
        'accel_driver_branch: "535"\n'
        f'accel_nvml_snapshot: "{REPO}/tests/data/nvml/{{{{ accel_lab_gpu }}}}.json"\n' + cluster_vars)
    return root / "hosts.yml"


def run_all(root: Path) -> dict:
    """The preflight on the main inventory and, for the cases with ``cluster_vars``, on a second one: one report
    (problems and messages of both, the reporter's joined; the plays of the main run; the stats of both)."""
    report = run(build(root / "main"))
    variant = [c for c in cases() if c.get("cluster_vars")]
    if not variant:
        return report
    names = [name for c in variant for name in yaml.safe_load(c["cluster_vars"])]
    assert len(names) == len(set(names)), f"cases with cluster_vars set one variable twice: {names}"
    other = run(build(root / "cluster", variant, good=False, cluster_vars="".join(c["cluster_vars"] for c in variant)))
    for key in ("problems", "messages"):
        for host, found in other[key].items():
            mine = report[key].get(host)
            report[key][host] = found if mine is None else (mine + found if key == "problems" else f"{mine}\n{found}")
    report["stats"].update({(f"{host} (cluster_vars inventory)" if host in report["stats"] else host): stats
                            for host, stats in other["stats"].items()})
    report["rc"] = report["rc"] or other["rc"]
    return report


def run(inventory: Path, playbook: str = "ansible/site.yml") -> dict:
    """``<playbook> --tags preflight`` on the inventory with the json callback: ``{"rc", "plays", "stats",
    "messages": {host: text of its report}, "problems": {host: [problem lines]}}``."""
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_NOCOLOR="1",
               ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), playbook, "--tags", "preflight",
                           "-i", str(inventory)], cwd=REPO, env=env, capture_output=True, text=True, check=False,
                          timeout=600)
    try:
        out = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(f"no JSON from ansible-playbook (rc {proc.returncode}):\n{proc.stdout[-3000:]}"
                             f"\n{proc.stderr[-3000:]}") from None
    root = str(inventory.parent)
    messages, problems = {}, {}
    for play in out["plays"]:
        for task in play["tasks"]:
            if not task["task"]["name"].endswith("Refuse a bad plan before anything changes"):
                continue
            for host, result in task["hosts"].items():
                # The inventory lives in a temporary directory: name it INVENTORY, so reports compare across runs.
                # The checkout's own path (a snapshot path names it) likewise: REPO.
                text = str(result.get("msg", "")).replace(root, "INVENTORY").replace(str(REPO), "REPO")
                messages[host] = text
                lines = text.split("\n- ")
                problems[host] = lines[1:] if result.get("failed") else []
    return {"rc": proc.returncode, "plays": [p["play"]["name"] for p in out["plays"]], "stats": out["stats"],
            "messages": messages, "problems": problems, "stderr": proc.stderr}


def render_doc(report: dict) -> str:
    """docs/plan-checks.md: every check of the preflight with the message it gave on the table's case."""
    from ansible_collections.kube_accel.gpu.plugins.module_utils.plan import rules as accel_plan

    lines = [
        "# Plan checks",
        "",
        "What the preflight (`ansible/preflight.yml`, role `preflight`) refuses before anything changes, with the",
        "message each check gave on a realistic mistake. The examples are real output: they are the problems the",
        "preflight reported on `tests/data/plan_mistakes.yml` (one inventory, one host per mistake, built by",
        "`tests/plan_mistakes.py`), and `tests/integration/test_plan_mistakes.py` fails when this page no longer",
        "matches them (regenerate with `.venv/bin/python tests/plan_mistakes.py --write-docs`).",
        "",
        "## How a plan is checked",
        "",
        "1. **The inventory model** (`plugins/module_utils/plan/inventory.py`, one definition per variable: scope,",
        "   type, allowed values, range, default, the grammar of what the value reaches). The `accel_plan` action",
        "   reads the inventory on the controller as Ansible does: every group's and host's own variables and extra",
        "   vars (unknown names, with and without the `accel_` prefix, and role variables, with \"did you mean\"), and",
        "   each",
        "   GPU host's effective values, each templated on its own (a broken template is that value's problem only),",
        "   checked as written: a boolean is a YAML boolean, an integer is no `4.0` or `\"7\"`, a list is no string",
        "   (`plugins/module_utils/plan/values.py`). Cluster settings are checked once, where the cluster play reads",
        "   them (`kube_control_plane[0]`), and every GPU host must see the same; the hosts of one pool must agree on",
        "   every pool setting; settings a pool's mode or backend ignores are refused when set for that pool (defaults",
        "   for every pool belong in `group_vars/all` or `gpu_pools`); pool settings that reach no GPU host, and",
        "   `group_vars`/`host_vars` files that name no group or host, are reported",
        "   (`plugins/module_utils/plan/inventory_check.py`).",
        "2. **The plan rules** (`plugins/module_utils/plan/rules.py`) on each GPU host's settings that passed and its",
        "   GPU facts (NVML, or a recorded snapshot): " + ", ".join(f"`{r.__name__}`" for r in accel_plan.RULES) + ".",
        "3. **One report per host**, every problem at once; the reporter (`kube_control_plane[0]`, or localhost) lists",
        "   the cluster's and the inventory's own problems and those of GPU hosts the run does not reach. Any problem",
        "   stops the run before the hosts play (`any_errors_fatal`).",
        "",
        "Every message reads `<where>: <field> = <value> (<file:line>): <what is wrong>; allowed: <what is allowed>`.",
        "",
    ]
    by_class: dict[str, list[dict]] = {}
    for case in cases():
        by_class.setdefault(case["class"], []).append(case)
    for klass, members in by_class.items():
        lines += [f"## {klass[0].upper()}{klass[1:]}", ""]
        for case in members:
            who = REPORTER if case.get("report") == "cluster" else case["host"]
            found = [p for p in report["problems"].get(who, []) if all(f in p for f in case["expect"][:1])]
            lines.append(f"- **{case['mistake']}** (`{case['host']}`)")
            for text in found[:2]:
                lines.append(f"  - `{text}`")
            lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write-docs", action="store_true", help="rewrite docs/plan-checks.md from a real run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ka-plan-mistakes-") as tmp:
        report = run_all(Path(tmp))
    if args.write_docs:
        DOC.write_text(render_doc(report))
        print(f"wrote {DOC.relative_to(REPO)}")
    else:
        print(json.dumps(report["problems"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
