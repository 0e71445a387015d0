"""The run lock and pending releases on a lab of their own (.lab/locks, cluster kube-accel-locks, no hosts), through
ansible-playbook as the plays run them:

* a release left pending-install by a helm that was SIGKILLed while it waited is refused while the operation
  may be alive, recovered by the next accel_release run once provably dead, and the run after changes nothing;
  a pending upgrade is rolled back and upgraded (helm 3 and helm 4);
* the run lock: a second run is refused naming the holder while the renewer keeps the lease past its duration,
  a waiting run gets the lock once the first run ends (the renewer releases it), and a holder whose renewer died
  is taken over once its lease expired.

The lab is started by this module (adopted when it already runs) and removed at its end unless
KUBE_ACCEL_KEEP_LAB=1; the shared default lab is not touched.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml
from lab_fixture import BIN, LAB_PY, Lab, run_localhost_playbook

pytestmark = [pytest.mark.lab, pytest.mark.cluster_only]

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "data" / "charts" / "tiny"
LOCKS_DIR = REPO / ".lab" / "locks"
LOCKS_NAME = "kube-accel-locks"
NAMESPACE = "accel-locks-test"
UNSATISFIABLE = {"kube-accel.io/pool": "no-such-pool"}
PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")


def _lab(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(LAB_PY), "--dir", str(LOCKS_DIR), "--name", LOCKS_NAME, *args],
                          capture_output=True, text=True, check=False, timeout=300)


@pytest.fixture(scope="module")
def locks_lab():
    missing = [b for b in ("kube-apiserver", "kwokctl", "etcd", "helm", "helm4") if not (BIN / b).exists()]
    if missing:
        pytest.fail(f"lab toolchain missing {missing} in {BIN}: run `make toolchain` first")
    proc = _lab("up", "--no-hosts", "--skip-toolchain")
    if proc.returncode != 0:
        pytest.fail(f"locks lab did not start:\n{proc.stdout}\n{proc.stderr}")
    lab = Lab(kubeconfig=LOCKS_DIR / "kubeconfig")
    yield lab
    if os.environ.get("KUBE_ACCEL_KEEP_LAB") != "1":
        _lab("down")


def helm(lab, *args, binary=None):
    argv = [str(binary or lab.helm), "--kubeconfig", str(lab.kubeconfig), "--namespace", NAMESPACE, *args]
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)


def history(lab, name, binary=None):
    proc = helm(lab, "history", name, "--output", "json", binary=binary)
    assert proc.returncode == 0, proc.stderr
    return [(int(h["revision"]), h["status"], h.get("description", "")) for h in json.loads(proc.stdout)]


def kill_while_waiting(lab, binary, *args):
    """Start a helm operation that waits on a pod that can never be scheduled, SIGKILL helm once the release is
    pending: the honest way to get a release stuck the way a dead controller leaves it."""
    argv = [str(binary), *args, "--kubeconfig", str(lab.kubeconfig), "--namespace", NAMESPACE, "--wait",
            "--timeout", "5m", "--set-json", f"nodeSelector={json.dumps(UNSATISFIABLE)}"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    name = args[1]
    try:
        for _ in range(200):
            if helm(lab, "status", name, binary=binary).returncode == 0:
                entries = history(lab, name, binary)
                if entries[-1][1].startswith("pending-"):
                    return entries[-1]
            time.sleep(0.1)
        pytest.fail(f"{name} never became pending")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def test_pending_releases_left_by_a_killed_helm_are_recovered(locks_lab, tmp_path):
    """For helm 3 and helm 4: a pending-install (no deployed revision) and a pending-upgrade, each left by a helm
    SIGKILLed while it waited; one play runs accel_releases as the cluster play does: refused while the operation
    may be alive, recovered (check mode and --diff say how first) once provably dead, unchanged on the next run."""
    lab = locks_lab
    suffix = uuid.uuid4().hex[:5]
    stuck = {}
    for which in ("helm", "helm4"):
        binary = getattr(lab, which)
        first, upgraded = f"pi-{which}-{suffix}", f"pu-{which}-{suffix}"
        proc = helm(lab, "install", upgraded, str(TINY), "--create-namespace", "--wait", "--timeout", "60s",
                    binary=binary)
        assert proc.returncode == 0, proc.stderr
        assert kill_while_waiting(lab, binary, "install", first, str(TINY), "--create-namespace")[:2] == (
            1, "pending-install")
        assert kill_while_waiting(lab, binary, "upgrade", upgraded, str(TINY))[:2] == (2, "pending-upgrade")
        stuck[which] = (binary, first, upgraded)

    def task(name, timeout, **extra):
        return {"name": name, "register": name, "loop": sorted(stuck), **extra, "kube_accel.gpu.accel_releases": {
            "kubeconfig": str(lab.kubeconfig), "namespace": NAMESPACE, "helm_binary": "{{ stuck[item][0] }}",
            "timeout": timeout, "validate_schema": False,
            "releases": [{"name": "{{ stuck[item][1] }}", "chart": str(TINY), "values": {"replicas": 1}},
                         {"name": "{{ stuck[item][2] }}", "chart": str(TINY),
                          "values": {"replicas": 1, "podLabels": {"team": "ml"}}}]}}

    book = [{"name": "recover", "hosts": "localhost", "connection": "local", "gather_facts": False,
             "vars": {"stuck": {k: [str(v[0]), v[1], v[2]] for k, v in stuck.items()}},
             "tasks": [
                 task("refused", "60s", ignore_errors=True),
                 {"name": "older than the 4s timeout", "ansible.builtin.wait_for": {"timeout": 5}},
                 task("planned", "4s", check_mode=True, diff=True),
                 task("fixed", "4s"),
                 task("again", "4s"),
             ]}]
    proc = run_localhost_playbook(book, tmp_path / "recover.yml", env={"ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"})
    try:
        played = json.loads(proc.stdout)["plays"][0]["tasks"]
        tasks = {t["task"]["name"]: t["hosts"]["localhost"]["results"] for t in played
                 if "results" in t["hosts"].get("localhost", {})}
    except (ValueError, KeyError, IndexError):
        pytest.fail(f"no JSON result from ansible-playbook (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    assert proc.returncode == 0, proc.stdout[-3000:]

    for index, which in enumerate(sorted(stuck)):
        binary, first, upgraded = stuck[which]
        refused = tasks["refused"][index]
        assert refused["failed"] and set(refused["failed_releases"]) == {first, upgraded}
        install_err = refused["failed_releases"][first]
        assert f"release '{first}' (namespace {NAMESPACE}) is pending-install at revision 1" in install_err["msg"]
        assert "within the operation's timeout (1m00s)" in install_err["msg"]
        assert f"run: {binary} uninstall {first} --namespace {NAMESPACE}" in install_err["msg"]
        assert install_err["lock_holder"] is None and install_err["revision_age_s"] < 60
        upgrade_err = refused["failed_releases"][upgraded]
        assert "is pending-upgrade at revision 2" in upgrade_err["msg"]
        assert f"run: {binary} rollback {upgraded} 1 --namespace {NAMESPACE}" in upgrade_err["msg"]

        planned = tasks["planned"][index]
        prepared = [d["prepared"] for d in planned["diff"] if "prepared" in d]
        assert any(f"release {first}: found pending-install revision 1" in p and "Recovery (would)" in p
                   for p in prepared), prepared
        assert planned["releases"][upgraded]["recovered"]["check_mode"] is True

        fixed = tasks["fixed"][index]["releases"]
        assert fixed[first]["recovered"]["action"] == "reinstall" and fixed[first]["revision"] == 1
        assert fixed[first]["changes"][0].endswith("uninstalled, installing again")
        assert fixed[upgraded]["recovered"]["action"] == "rollback" and fixed[upgraded]["rolled_back_to"] == 1
        assert fixed[upgraded]["status"] == "deployed" and fixed[upgraded]["revision"] == 4
        assert history(lab, first, binary) == [(1, "deployed", "Install complete")]
        revisions = history(lab, upgraded, binary)
        assert [r[1] for r in revisions] == ["superseded", "pending-upgrade", "superseded", "deployed"], revisions
        assert revisions[2][2] == "Rollback to 1"

        again = tasks["again"][index]
        assert again["changed"] is False, again["releases"]
        assert not any("recovered" in r for r in again["releases"].values())


# ---------------------------------------------------------------------------------------------------------- lock

LOCK_NS = "accel-locks-lock"


def lock_book(lab, path: Path, *, hold_until: Path | None = None, **args) -> Path:
    """A play that takes the run lock, writes its result to a file, and (optionally) waits for a file."""
    tasks = [
        {"name": "lock", "register": "lock",
         "kube_accel.gpu.accel_run_lock": {"kubeconfig": str(lab.kubeconfig), "namespace": LOCK_NS, **args}},
        {"name": "result", "ansible.builtin.copy": {"content": "{{ lock | to_json }}", "dest": f"{path}.json"}},
    ]
    if hold_until:
        tasks.append({"name": "hold", "ansible.builtin.wait_for": {"path": str(hold_until), "timeout": 60}})
    path.write_text(yaml.safe_dump([{"name": "lock", "hosts": "localhost", "connection": "local",
                                     "gather_facts": False, "tasks": tasks}], sort_keys=False))
    return path


def start(path: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"}
    argv = [PLAYBOOK, "-i", "localhost,", str(path), "-e", f"ansible_python_interpreter={sys.executable}", *args]
    return subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def task_result(proc_stdout: str, index=0) -> dict:
    return json.loads(proc_stdout)["plays"][0]["tasks"][index]["hosts"]["localhost"]


def wait_file(path: Path, proc: subprocess.Popen, seconds=30) -> dict:
    for _ in range(int(seconds * 10)):
        if path.exists() and path.stat().st_size:
            return json.loads(path.read_text())
        if proc.poll() is not None:
            pytest.fail(f"playbook ended early:\n{proc.stdout.read()}\n{proc.stderr.read()}")
        time.sleep(0.1)
    pytest.fail(f"{path} never appeared")


def lease(lab) -> dict:
    proc = lab.kubectl_run("get", "lease", "kube-accel-run", "-n", LOCK_NS, "-o", "json", check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else {}


def test_second_run_is_refused_naming_the_holder_and_a_waiting_run_gets_the_lock(locks_lab, tmp_path):
    go = tmp_path / "go"
    first = start(lock_book(locks_lab, tmp_path / "first.yml", hold_until=go, lease_duration=2, renew_interval=1))
    taken = wait_file(tmp_path / "first.yml.json", first)
    assert taken["changed"] and f"pid {first.pid} started" in taken["holder"] and taken["owner_pid"] == first.pid
    time.sleep(3)  # past leaseDurationSeconds: only the renewer keeps the lease alive

    proc = subprocess.run([PLAYBOOK, "-i", "localhost,", str(lock_book(locks_lab, tmp_path / "second.yml")),
                           "-e", f"ansible_python_interpreter={sys.executable}"], cwd=REPO, capture_output=True,
                          text=True, env={**os.environ, "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"}, check=False)
    assert proc.returncode != 0
    refused = task_result(proc.stdout)
    assert refused["failed"] and f"another kube-accel run holds the run lock (Lease {LOCK_NS}/kube-accel-run): " \
        f"{taken['holder']}" in refused["msg"]
    assert "2s (leaseDurationSeconds)" in refused["msg"]

    waiting = start(lock_book(locks_lab, tmp_path / "third.yml", wait=30, lease_duration=2, renew_interval=1))
    time.sleep(2)
    assert waiting.poll() is None  # still waiting for the first run
    go.touch()
    out, err = first.communicate(timeout=60)
    assert first.returncode == 0, out + err
    out, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, out + err
    third = task_result(out)
    assert third["changed"] and third["found"] == "free"  # released by the first run's renewer when it ended
    deadline = time.time() + 10
    while lease(locks_lab)["spec"].get("holderIdentity") and time.time() < deadline:
        time.sleep(0.5)
    assert not lease(locks_lab)["spec"].get("holderIdentity"), "the third run's renewer did not release at its end"


def test_holder_whose_renewer_died_is_taken_over_after_expiry(locks_lab, tmp_path):
    go = tmp_path / "go"
    first = start(lock_book(locks_lab, tmp_path / "first.yml", hold_until=go, lease_duration=2, renew_interval=1))
    try:
        taken = wait_file(tmp_path / "first.yml.json", first)
        os.kill(taken["renewer_pid"], signal.SIGKILL)
        killed = time.time()
        time.sleep(max(0.0, killed + 2.5 - time.time()))
        proc = subprocess.run([PLAYBOOK, "-i", "localhost,",
                               str(lock_book(locks_lab, tmp_path / "second.yml", renew=False)),
                               "-e", f"ansible_python_interpreter={sys.executable}"], cwd=REPO, capture_output=True,
                              text=True, env={**os.environ, "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"},
                              check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        second = task_result(proc.stdout)
        assert second["found"] == "expired" and second["previous_holder"] == taken["holder"]
        assert lease(locks_lab)["spec"]["leaseTransitions"] >= 1
    finally:
        go.touch()
        first.communicate(timeout=60)
    locks_lab.kubectl_run("delete", "namespace", LOCK_NS, "--ignore-not-found", "--wait=false", check=False)
