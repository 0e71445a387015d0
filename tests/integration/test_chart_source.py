"""roles/chart_source with real helm against a real chart repository: where dra_driver and gpu_operator get a chart.

The repository is kube-accel's own pgpu chart, packaged with `helm package` and indexed with `helm repo index`,
served over HTTP from this process. The play runs the role on localhost (no cluster: finding a chart touches none).
The careless operator: a source that does not answer with no fallback (the install is skipped, the message names the
settings to change), and a fallback that does not exist (the play fails naming it).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from chartlib import tool

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
HELM = tool("helm")  # the toolchain's pinned helm (or KUBE_ACCEL_HELM, else PATH)
CHART = yaml.safe_load((REPO / "charts" / "pgpu" / "Chart.yaml").read_text())

PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
  tasks:
    - ansible.builtin.include_role:
        name: kube_accel.gpu.chart_source
    - ansible.builtin.copy:
        dest: "{{ result_file }}"
        content: "{{ {'kind': chart_source_kind, 'path': chart_source_path} | to_json }}"
        mode: "0644"
      check_mode: false
      changed_when: false
"""


class Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def repo_url(tmp_path_factory):
    if HELM is None:
        pytest.skip("helm missing: `make toolchain` builds it")
    served = tmp_path_factory.mktemp("chart-repo")
    subprocess.run([HELM, "package", str(REPO / "charts" / "pgpu"), "-d", str(served)], check=True,
                   capture_output=True)
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(served)))
    url = f"http://127.0.0.1:{server.server_port}"
    subprocess.run([HELM, "repo", "index", str(served), "--url", url], check=True, capture_output=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield url
    server.shutdown()


def dead_url() -> str:
    """A port nothing listens on (bound, then closed)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    port = server.server_port
    server.server_close()
    return f"http://127.0.0.1:{port}"


def find(tmp_path: Path, chart: str, *args: str, fallback: str = "") -> tuple[subprocess.CompletedProcess, dict]:
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    result = tmp_path / "result.json"
    result.unlink(missing_ok=True)
    extra = {"chart_source_chart": chart, "chart_source_name": CHART["name"], "chart_source_version": CHART["version"],
             "chart_source_archive": f"{CHART['name']}-{CHART['version']}.tgz",
             "chart_source_download_dir": str(tmp_path / "charts"), "chart_source_fallback": fallback,
             "chart_source_helm_binary": HELM, "chart_source_pull_timeout": 30,
             "chart_source_what": "Test chart", "chart_source_settings": "accel_test",
             "chart_source_skipped_means": "Nothing is installed.", "result_file": str(result)}
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", str(play), "-e", json.dumps(extra),
                           *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    return proc, (json.loads(result.read_text()) if result.exists() else {})


def recap_changed(out: str) -> int:
    line = next(line for line in out.splitlines() if line.startswith("localhost") and "changed=" in line)
    return int(line.split("changed=")[1].split()[0])


def test_a_repository_chart_is_pulled_once_also_in_check_mode(tmp_path, repo_url):
    proc, got = find(tmp_path, repo_url, "--check", "--diff")
    assert proc.returncode == 0, proc.stdout[-4000:]
    pulled = tmp_path / "charts" / f"{CHART['name']}-{CHART['version']}.tgz"
    # The pull fills the chart cache even in check mode, so that --check --diff can render the real upgrade.
    assert got == {"kind": "repository", "path": str(pulled)} and pulled.exists(), got
    assert "Download the chart once per version" in proc.stdout
    again, got_again = find(tmp_path, repo_url)
    assert again.returncode == 0 and got_again == got
    assert recap_changed(again.stdout) == 0, again.stdout[-3000:]  # the cached chart: nothing pulled


def test_an_unreachable_source_without_fallback_skips_naming_the_settings(tmp_path):
    url = dead_url()
    proc, got = find(tmp_path, url)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert got == {"kind": "none", "path": ""}, got
    said = " ".join(proc.stdout.split())
    assert f"Test chart skipped: its chart {url} {CHART['version']} is unreachable from localhost" in said, said
    assert "Mirror the chart and set accel_test_chart to it, or set accel_test_chart_fallback." in said
    assert "Nothing is installed." in said
    # Asked again on the next run, and an answer that never came changes nothing (the cache directory stays).
    again, got_again = find(tmp_path, url)
    assert got_again == got and "is unreachable from localhost" in " ".join(again.stdout.split())
    assert recap_changed(again.stdout) == 0, again.stdout[-3000:]


def test_an_unreachable_source_falls_back_to_the_local_chart(tmp_path):
    local = tmp_path / "local-chart"
    shutil.copytree(REPO / "charts" / "pgpu", local)
    proc, got = find(tmp_path, dead_url(), fallback=str(local))
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert got == {"kind": "fallback", "path": str(local)}, got
    assert f"installing the local chart {local} (accel_test_chart_fallback)" in " ".join(proc.stdout.split())


def test_a_fallback_that_does_not_exist_fails_naming_it(tmp_path):
    missing = tmp_path / "no-such-chart"
    proc, got = find(tmp_path, dead_url(), fallback=str(missing))
    assert proc.returncode != 0 and got == {}, proc.stdout[-4000:]
    said = " ".join(proc.stdout.split())
    assert f"accel_test_chart_fallback = {missing}: no such chart on localhost" in said, said
    assert "allowed: a chart directory or .tgz there" in said


def test_a_local_path_is_installed_as_it_is(tmp_path):
    proc, got = find(tmp_path, str(REPO / "charts" / "pgpu"))
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert got == {"kind": "path", "path": str(REPO / "charts" / "pgpu")}, got
    assert not (tmp_path / "charts").exists()  # nothing pulled, no cache directory
