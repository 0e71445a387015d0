"""Session fixture ``lab``: the local lab cluster (scripts/lab.py), started if it is not running.

A lab this fixture started is torn down at the end of the session unless KUBE_ACCEL_KEEP_LAB=1. Its nodes start
without kube-accel labels (a fresh cluster's); the fixture labels them with the cluster play's pool_labels role.
KA_LAB_DIR and KA_LAB_NAME point it at a second lab (`lab.py --dir DIR --name NAME up`), for work on lab processes
beside the shared one; tests that run plays there pass ``-e accel_kubeconfig=<lab.kubeconfig>`` (site_play does). A
second lab has podman hosts of its own only with KA_LAB_HOSTS=1 (containers NAME-HOST, reached through the lab's
hosts-inventory.yml: kalab.hosts; site_play and inventory_args add it) and keeps its own fact cache (lab_env). `make
test` runs the tests marked ``cluster_only`` (no podman host, no state an earlier lab test left) and ``second_lab``
(the upgrade test, with hosts) on such a lab (scripts/test.sh).

A session that runs one of the tests that need a lab kube-accel never touched (tests/conftest.py FIRST) leaves a
fresh lab's nodes unlabelled for them; otherwise the fixture labels them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
BIN = Path(os.environ.get("KA_CACHE", Path.home() / ".cache" / "kube-accel")) / "bin"
LAB_PY = REPO / "scripts" / "lab.py"
LAB_DIR = Path(os.environ.get("KA_LAB_DIR") or REPO / ".lab").resolve()
LAB_NAME = os.environ.get("KA_LAB_NAME") or "kube-accel-lab"
DEFAULT_LAB = (REPO / ".lab").resolve() == LAB_DIR
# The tests that need a lab kube-accel never touched; a session runs them first (tests/conftest.py): on the first lab
# the first site.yml as `make demo` runs it, on the second lab (with hosts) the upgrade from 0.1.0.
FIRST = ("tests/integration/test_first_run_lab.py", "tests/integration/test_upgrade_lab.py")
# kalab.hosts.HOSTS_INVENTORY: where a second lab's hosts are reached.
HOSTS_INVENTORY = LAB_DIR / "hosts-inventory.yml"


@dataclass
class Lab:
    kubeconfig: Path
    helm: Path = BIN / "helm"
    helm4: Path = BIN / "helm4"
    kubectl: Path = BIN / "kubectl"
    nodes_by_pool: dict[str, list[str]] = field(default_factory=dict)

    def kubectl_run(self, *args: str, check: bool = True, stdin: str | None = None,
                    timeout: float | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.kubectl), "--kubeconfig", str(self.kubeconfig), *args], input=stdin,
                              capture_output=True, text=True, check=check, timeout=timeout)

    def releases(self, namespace: str | None = None) -> dict[str, dict]:
        """helm list's rows by release name, in ``namespace`` or all namespaces."""
        scope = ["-n", namespace] if namespace else ["-A"]
        out = subprocess.run([str(self.helm), "list", *scope, "-o", "json", "--kubeconfig", str(self.kubeconfig)],
                             capture_output=True, text=True, check=True).stdout
        return {r["name"]: r for r in json.loads(out)}

    def node(self, name: str) -> dict:
        """The Node object ``name`` as the API server has it now."""
        return json.loads(self.kubectl_run("get", "node", name, "-o", "json").stdout)

    def namespace(self, name: str) -> None:
        """Create a namespace (if missing) and wait for its default ServiceAccount: pods are refused until the
        controller-manager's serviceaccount controller has made it, which takes a while on a loaded machine."""
        self.kubectl_run("create", "namespace", name, check=False)
        wait_for(f"serviceaccount {name}/default",
                 lambda: self.kubectl_run("get", "serviceaccount", "default", "-n", name, check=False).returncode == 0,
                 timeout=120)


def _lab(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(LAB_PY), "--dir", str(LAB_DIR), "--name", LAB_NAME, *args],
                          capture_output=True, text=True, check=False)


def lab_env(helm_dir: Path = BIN) -> dict[str, str]:
    """ansible-playbook's environment for a play on this lab: the repo's config, this venv and the toolchain first on
    PATH, and on a second lab a fact cache of its own (its hosts have the first lab's names)."""
    bin_dir = Path(sys.executable).parent
    return {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
            "PATH": f"{helm_dir}:{bin_dir}:{os.environ['PATH']}",
            **({} if DEFAULT_LAB else {"ANSIBLE_CACHE_PLUGIN_CONNECTION": str(LAB_DIR / "ansible-facts")})}


def container(host: str) -> str:
    """The podman container of the lab's ``host``: its name, or where the lab's hosts-inventory.yml points it."""
    if not HOSTS_INVENTORY.exists():
        return host
    return yaml.safe_load(HOSTS_INVENTORY.read_text())["all"]["hosts"][host]["ansible_host"]


def inventory_args(inventory: Path) -> list[str]:
    """``-i inventory``, and on a second lab with hosts the source that points its hosts at their containers."""
    return ["-i", str(inventory), *(["-i", str(HOSTS_INVENTORY)] if HOSTS_INVENTORY.exists() else [])]


def _up() -> None:
    # The default lab has hosts; a second one only when asked (KA_LAB_HOSTS=1: containers of its own names).
    hosts = DEFAULT_LAB or os.environ.get("KA_LAB_HOSTS") == "1"
    proc = _lab("up", "--skip-toolchain", *([] if hosts else ["--no-hosts"]))
    if proc.returncode != 0:
        pytest.fail(f"lab did not start:\n{proc.stdout}\n{proc.stderr}")


def reset_lab(lab: Lab) -> None:
    """The lab afresh (down, then up): unlabelled nodes and hosts kube-accel never touched, for a test that needs
    them. ``lab`` stays valid (same directory, kubeconfig and addresses); the session still tears it down."""
    _lab("down")
    _up()


def pools_of_inventory() -> dict[str, list[str]]:
    """The lab inventory's pools and their hosts (the lab's node names), as ansible-inventory reads it."""
    out = subprocess.run([str(Path(sys.executable).parent / "ansible-inventory"), "-i",
                          str(REPO / "inventories" / "lab" / "hosts.yml"), "--list"],
                         cwd=REPO, capture_output=True, text=True, check=True, env=lab_env()).stdout
    hostvars = json.loads(out)["_meta"]["hostvars"]
    by_pool: dict[str, list[str]] = {}
    for host, hv in hostvars.items():
        if hv.get("accel_pool"):
            by_pool.setdefault(hv["accel_pool"], []).append(host)
    return {k: sorted(v) for k, v in by_pool.items()}


@pytest.fixture(scope="session")
def lab(request) -> Lab:
    missing = [b for b in ("kube-apiserver", "kwokctl", "etcd", "helm") if not (BIN / b).exists()]
    if missing:
        pytest.fail(f"lab toolchain missing {missing} in {BIN}: run `make toolchain` first")
    started = _lab("status").returncode != 0
    if started:
        _up()
    untouched = started and any(item.nodeid.startswith(FIRST) for item in request.session.items)
    if not untouched:
        # The lab's nodes start unlabelled, as a fresh cluster's: label them with the cluster play's own role.
        label = subprocess.run(
            [str(Path(sys.executable).parent / "ansible-playbook"),
             *inventory_args(REPO / "inventories" / "lab" / "hosts.yml"), str(REPO / "tests" / "lab_label_pools.yml"),
             "-e", f"accel_kubeconfig={LAB_DIR / 'kubeconfig'}"],
            cwd=REPO, capture_output=True, text=True, check=False, timeout=300, env=lab_env())
        if label.returncode != 0:
            pytest.fail(f"labelling the lab's pools failed:\n{label.stdout[-3000:]}\n{label.stderr[-2000:]}")
    yield Lab(kubeconfig=LAB_DIR / "kubeconfig", nodes_by_pool=pools_of_inventory())
    if started and os.environ.get("KUBE_ACCEL_KEEP_LAB") != "1":
        _lab("down")


def converge_cluster(lab: Lab, releases: set[str], namespace: str | None = None) -> None:
    """Run the cluster play on the lab unless helm already lists every release in ``releases`` (in ``namespace``, or
    any). On the first lab an earlier site run (the upgrade test's, test_site_lab.py's) has converged it; on a lab of
    the cluster_only tests' own, the first test that needs the releases runs the play."""
    if releases <= set(lab.releases(namespace)):
        return
    bin_dir = Path(sys.executable).parent
    play = subprocess.run([str(bin_dir / "ansible-playbook"), *inventory_args(LAB_INVENTORY / "hosts.yml"),
                           str(REPO / "ansible" / "cluster.yml"), "-e", f"accel_kubeconfig={lab.kubeconfig}"],
                          cwd=REPO, env=lab_env(lab.helm.parent), capture_output=True, text=True, check=False,
                          timeout=900)
    assert play.returncode == 0, play.stdout[-4000:]


LAB_INVENTORY = REPO / "inventories" / "lab"
# Two levels under the repo like inventories/lab, so the lab's inventory_dir-relative paths resolve.
CHANGED_INVENTORY = REPO / "inventories" / ".tmp-changed"


def site_play(lab: Lab, inventory: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    """ansible/site.yml on ``inventory`` (a hosts.yml) with ``args``, as a user runs it against the lab (on a second
    lab: its hosts' containers, its kubeconfig)."""
    bin_dir = Path(sys.executable).parent
    own = [] if DEFAULT_LAB else ["-e", f"accel_kubeconfig={lab.kubeconfig}"]
    return subprocess.run([str(bin_dir / "ansible-playbook"), *inventory_args(inventory),
                           str(REPO / "ansible" / "site.yml"), *own, *args], cwd=REPO, env=lab_env(lab.helm.parent),
                          capture_output=True, text=True, check=False, timeout=timeout)


def changed_lab_inventory(pool_file: str, change) -> Path:
    """A copy of the lab inventory (CHANGED_INVENTORY) whose group_vars/``pool_file`` went through ``change`` (a
    function that edits the dict in place); its hosts.yml. Remove it with remove_changed_inventory()."""
    path = _lab_inventory_copy() / "group_vars" / pool_file
    pool = yaml.safe_load(path.read_text())
    change(pool)
    path.write_text("---\n" + yaml.safe_dump(pool, sort_keys=False))
    return CHANGED_INVENTORY / "hosts.yml"


def lab_inventory_without(*groups: str) -> Path:
    """A copy of the lab inventory (CHANGED_INVENTORY) whose hosts.yml has none of the pool groups ``groups`` (their
    hosts leave kube-accel); its hosts.yml. Remove it with remove_changed_inventory()."""
    path = _lab_inventory_copy() / "hosts.yml"
    inventory = yaml.safe_load(path.read_text())
    pools = inventory["all"]["children"]["gpu_pools"]["children"]
    for group in groups:
        del pools[group]
        (CHANGED_INVENTORY / "group_vars" / f"{group}.yml").unlink()
    path.write_text("---\n" + yaml.safe_dump(inventory, sort_keys=False))
    return path


def _lab_inventory_copy() -> Path:
    remove_changed_inventory()
    shutil.copytree(LAB_INVENTORY, CHANGED_INVENTORY)
    return CHANGED_INVENTORY


def remove_changed_inventory() -> None:
    shutil.rmtree(CHANGED_INVENTORY, ignore_errors=True)


def run_localhost_playbook(book: list, path: Path, *args: str, env: dict | None = None,
                           timeout: int = 300) -> subprocess.CompletedProcess:
    """Write ``book`` to ``path`` and run it with ansible-playbook on localhost, with this venv's Python."""
    path.write_text(yaml.safe_dump(book, sort_keys=False))
    bin_dir = Path(sys.executable).parent
    full_env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "PATH": f"{bin_dir}:{os.environ['PATH']}", **(env or {})}
    argv = [str(bin_dir / "ansible-playbook"), "-i", "localhost,", str(path),
            "-e", f"ansible_python_interpreter={sys.executable}", *args]
    return subprocess.run(argv, cwd=REPO, env=full_env, capture_output=True, text=True, timeout=timeout,
                          check=False)


def wait_for(what: str, check, timeout: float = 60, every: float = 0.5):
    """Poll ``check`` until it returns something truthy and return it; fail naming ``what`` after ``timeout`` s."""
    deadline = time.time() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.time() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(every)
