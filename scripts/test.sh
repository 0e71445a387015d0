#!/usr/bin/env bash
# make test, in two lanes that share nothing but the CPU (BENCHMARKS.md "Test suite"):
#   hosts:   venv -> podman, host and Molecule images -> Molecule scenarios (podman hosts only: no Go toolchain)
#   cluster: the Go toolchain and upstream builds -> lint -> pytest (unit, charts, conformance, lab integration; two
#            workers: the lab tests on one, in order, the rest on the other: tests/conftest.py)
# The Molecule lane starts as soon as its images exist, so its ~25 cold minutes run beside the Go builds and
# pytest instead of after them. Its output goes to a log printed when both lanes have ended; each stage's time
# still goes through scripts/stage.sh. Exit status: non-zero when any stage failed.
# Environment: PYTEST_ARGS (passed to both pytest runs), KA_MOLECULE_REUSE (tests/molecule/scenario_reuse.py).
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
# machine (README, "Test suite budget"); KA_MOLECULE_REUSE=0 runs them all.
scripts/stage.sh molecule "$py" -m pytest tests/molecule -n 2 --dist worksteal --durations=0 "${extra[@]}" \
  >"$mol_log" 2>&1 &
mol_pid=$!

rc=0
scripts/stage.sh toolchain scripts/toolchain.sh all &&
  scripts/stage.sh lint "${make[@]}" lint &&
  scripts/stage.sh pytest "$py" -m pytest tests --ignore=tests/molecule -n 2 --dist loadgroup --durations=25 \
    "${extra[@]}" || rc=1

if kill -0 "$mol_pid" 2>/dev/null; then echo "== waiting for the Molecule lane (log: $mol_log) =="; fi
wait "$mol_pid" || rc=1
echo "== Molecule lane =="
cat "$mol_log"
rm -f "$mol_log"
exit "$rc"
