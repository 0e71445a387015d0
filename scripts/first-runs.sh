#!/usr/bin/env bash
# The first run, again and again: N times in a row, a lab kube-accel never touched (`lab.py up` on a removed lab) and
# one `ansible-playbook ansible/site.yml` on it, as `make demo` runs them, with no retry. One line per run (its time,
# its exit status, how long verify waited for the node checks, which pools' Jobs needed another attempt); each run's
# output in DIR/run-I.log. Exit status: the number of runs that failed (0 when every first run passed).
# Usage: scripts/first-runs.sh [N] [DIR]   (N default 10, DIR default .lab/first-runs); the lab is removed at the end.
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-10}
logs=${2:-.lab/first-runs}
mkdir -p "$logs"
py=.venv/bin/python
failed=0
for i in $(seq 1 "$runs"); do
  log="$logs/run-$i.log"
  "$py" scripts/lab.py down >"$log" 2>&1
  start=$(date +%s)
  if ! "$py" scripts/lab.py up --skip-toolchain >>"$log" 2>&1; then
    printf 'run %2d: lab up failed (%s)\n' "$i" "$log"
    failed=$((failed + 1))
    continue
  fi
  up=$(( $(date +%s) - start ))
  .venv/bin/ansible-playbook -i inventories/lab/hosts.yml ansible/site.yml >>"$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start - up ))
  # verify's summary, read as the YAML the callback prints (it folds long lines).
  read -r settle attempts < <("$py" - "$log" <<'PY'
import re
import sys

import yaml

out = open(sys.argv[1]).read()
try:
    task = out.index("Print the verification summary")
    lines = yaml.safe_load(out[out.index("msg:", task):out.index("\n\n", task)])["msg"]
except ValueError:
    print("no-summary -")
    sys.exit()
settle = next((re.search(r"after (\d+) s", line)[1] for line in lines if line.startswith("settle:")), "?")
again = sorted({line.split()[0] for line in lines if re.search(r", attempt \d+", line)})
print(f"{settle}s {','.join(again) or 'none'}")
PY
)
  [ "$rc" -eq 0 ] || failed=$((failed + 1))
  printf 'run %2d: lab up %3d s, site.yml %3d s, exit %d; verify waited %s for the nodes; later Job attempts: %s\n' \
    "$i" "$up" "$secs" "$rc" "$settle" "$attempts"
done
"$py" scripts/lab.py down >/dev/null 2>&1
printf '%d of %d first runs passed\n' "$((runs - failed))" "$runs"
exit "$failed"
