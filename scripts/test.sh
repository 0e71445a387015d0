#!/usr/bin/env bash
# make test, in two lanes that share nothing but the CPU (BENCHMARKS.md "Test suite"):
#   hosts:   venv -> podman, host and Molecule images -> Molecule scenarios (podman hosts; the one Go-built command a
#            scenario copies in, containerd 2.x, is built by its test: tests/molecule/test_scenarios.py)
#   cluster: what the lab runs (Go builds) -> pytest (lab integration tests in one process; beside it the lab tests
#            that need no podman host (marker cluster_only) and the upgrade test (marker second_lab) on a second lab
#            and the cluster bench on its own lab,
#            and, at background priority, the rest of the upstream builds beside lint and ansible-test sanity on the
#            built collection, then the unit, chart and conformance tests beside the podman-host tests (marker podman))
# The Molecule lane starts as soon as its images exist, so its ~35 minutes (every scenario run) pass beside the Go
# builds and pytest instead of after them. Its output goes to a log printed when both lanes have ended; each stage's
# time still goes through scripts/stage.sh. Exit status: non-zero when any stage failed.
# Environment: PYTEST_ARGS (passed to every pytest run), KA_MOLECULE_REUSE (tests/molecule/scenario_reuse.py).
set -uo pipefail
cd "$(dirname "$0")/.."
make=(make --no-print-directory)
py=.venv/bin/python
# Shell words, as the Makefile passed them before: PYTEST_ARGS="-k 'a or b'" stays one -k expression.
eval "extra=(${PYTEST_ARGS:-})"

scripts/stage.sh venv "${make[@]}" venv || exit 1
scripts/stage.sh images scripts/toolchain.sh molecule || exit 1

mol_log=$(mktemp -t ka-molecule.XXXXXX)
# Scenarios are independent podman hosts with unique names: two at a time, longest first; worksteal lets the idle
# worker take scenarios queued behind the long DKMS build. An unchanged scenario reuses its last green run on this
# machine (docs/development.md, "Test suite budget and lanes"); KA_MOLECULE_REUSE=0 runs them all.
# At background CPU priority (scripts/background.sh): the Molecule lane has slack, while the Go builds and then the
# lab tests decide the total.
scripts/stage.sh molecule scripts/background.sh "$py" -m pytest tests/molecule -n 2 --dist worksteal --durations=0 \
  "${extra[@]}" >"$mol_log" 2>&1 &
mol_pid=$!

# pytest as two processes side by side: the lab tests in one, in order (they share one lab, started by the first and
# torn down at the end), the unit, chart and conformance tests in the other. (xdist's --dist loadgroup would do this
# in one process, but with pytest 9 and xdist 3.8 it does not keep a group on one worker, so two workers could each
# start the one lab.)
# "No tests collected" (exit 5: PYTEST_ARGS selected none of a lane's tests) is not a failure.
pytest_lane() {
  local name=$1; shift
  scripts/stage.sh "$name" bash -c '"$@"; rc=$?; [ "$rc" -eq 5 ] && exit 0; exit "$rc"' _ \
    "$py" -m pytest tests --ignore=tests/molecule "$@" "${extra[@]}"
}

rc=0
# The lab lane starts on what the lab runs (toolchain.sh lab: Kubernetes, kwok, etcd, helm, the controllers and the
# stand-ins' harnesses); the rest of the upstream builds (conformance-only binaries and harnesses, containerd, crictl,
# promtool, the monitoring chain) go first in the other lane, while the lab tests wait on the API server and pods.
# The lab's monitoring test builds its three binaries itself if it gets there first (a lock per output: built once).
if scripts/stage.sh lab-tools scripts/toolchain.sh lab; then
  # Lint runs in the second lane, not before the lab tests: the lab lane is the longest, and waits on nothing.
  other_log=$(mktemp -t ka-pytest.XXXXXX)
  # At background CPU priority, as Molecule's lane (scripts/background.sh): the lab lane decides the total and waits
  # on pods and the API between its Ansible runs, which this lane's builds and tests fill (BENCHMARKS.md "Test suite").
  { scripts/background.sh --pid "$BASHPID"
    orc=0
    # Lint and sanity need none of the builds below (helm, which helm lint runs, comes with the lab's tools): they run
    # beside them, and the pytest processes start once the builds are done. Run one after the other, they would leave
    # this lane alone on the machine at the end of a cold run, one process at a time (CHANGELOG.md, 0.2.0).
    checks_log=$(mktemp -t ka-checks.XXXXXX)
    { crc=0; scripts/stage.sh lint "${make[@]}" lint || crc=1
      scripts/stage.sh sanity "${make[@]}" sanity || crc=1; exit "$crc"; } >"$checks_log" 2>&1 &
    checks_pid=$!
    scripts/stage.sh toolchain scripts/toolchain.sh all || orc=1
    # Two pytest processes: the podman-host tests (marker podman) beside the rest (unit, chart and conformance tests,
    # the real node, the plan corpus); their times are in BENCHMARKS.md "Cold and warm CI".
    podman_log=$(mktemp -t ka-pytest-podman.XXXXXX)
    pytest_lane pytest-podman -m "podman and not lab and not bench" --durations=10 >"$podman_log" 2>&1 &
    podman_pid=$!
    pytest_lane pytest -m "not lab and not bench and not podman" --durations=30 || orc=1
    wait "$podman_pid" || orc=1
    wait "$checks_pid" || orc=1
    echo "== lint; ansible-test sanity =="; cat "$checks_log"
    echo "== podman-host tests =="; cat "$podman_log"; rm -f "$checks_log" "$podman_log"
    exit "$orc"; } >"$other_log" 2>&1 &
  other_pid=$!
  # The lab tests that need only the lab's cluster, not its podman hosts or what an earlier lab test left
  # (marker cluster_only), run on a second lab of their own (tests/lab_fixture.py: KA_LAB_DIR, KA_LAB_NAME), at the
  # lab lane's priority: the two labs' tests wait on their API servers and pods at different times, so the lab
  # tests, the critical path, run in two lanes that overlap (BENCHMARKS.md "Cold and warm CI"). The second lab has
  # podman hosts of its own (KA_LAB_HOSTS=1, containers kube-accel-lab-second-HOST) for the upgrade from 0.1.0
  # (marker second_lab), which runs first there, as the first site.yml as `make demo` runs it runs first on the
  # first lab: each needs a lab kube-accel never touched (tests/conftest.py).
  # The cluster bench (marker bench, a lab of its own) runs in this lane too: it ends first, the background lane last.
  second_log=$(mktemp -t ka-pytest-lab2.XXXXXX)
  KA_LAB_DIR=$PWD/.lab/second KA_LAB_NAME=kube-accel-lab-second KA_LAB_HOSTS=1 \
    pytest_lane pytest-lab2 -m "(lab and (cluster_only or second_lab)) or bench" --durations=20 >"$second_log" 2>&1 &
  second_pid=$!
  pytest_lane pytest-lab -m "lab and not cluster_only and not second_lab" --durations=40 || rc=1
  wait "$second_pid" || rc=1
  wait "$other_pid" || rc=1
  echo "== lab tests on the second lab (cluster_only) and the cluster bench =="
  cat "$second_log"
  echo "== toolchain; lint; ansible-test sanity; unit, chart and conformance tests =="
  cat "$other_log"
  rm -f "$other_log" "$second_log"
else
  rc=1
fi

if kill -0 "$mol_pid" 2>/dev/null; then echo "== waiting for the Molecule lane (log: $mol_log) =="; fi
wait "$mol_pid" || rc=1
echo "== Molecule lane =="
cat "$mol_log"
rm -f "$mol_log"
exit "$rc"
