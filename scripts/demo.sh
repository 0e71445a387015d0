#!/usr/bin/env bash
# make demo: the main job on the local lab, one line per step with its time and what is left; each step's full
# output goes to .lab/demo/STEP.log, and a failed step prints its last lines and stops.
#   python      the Python toolchain (make venv)
#   tools       what the demo runs and nothing else (scripts/toolchain.sh demo: Kubernetes, helm, kwok, etcd, the
#               upstream controllers the lab runs, Prometheus, podman and the host image); cached by version
#   lab         the lab: control plane, fake GPU nodes, podman hosts, upstream controllers (scripts/lab.py up)
#   site        ansible/site.yml on the lab inventory: preflight, hosts, cluster, verify (its summary is printed)
#   monitoring  the monitoring chain on what the cluster play deployed, and the dashboard report
# Environment: INVENTORY (default inventories/lab/hosts.yml), KA_DEMO_LOGS (default .lab/demo).
set -uo pipefail
cd "$(dirname "$0")/.."
logs=${KA_DEMO_LOGS:-.lab/demo}
mkdir -p "$logs"
inventory=${INVENTORY:-inventories/lab/hosts.yml}
steps=(python tools lab site monitoring)
began=$(date +%s)

step() {
  local index=$1 name=$2; shift 2
  local log="$logs/$name.log" start rc secs left
  left=$(( ${#steps[@]} - index ))
  printf '[demo %d/%d] %-10s ... (log: %s)\n' "$index" "${#steps[@]}" "$name" "$log"
  start=$(date +%s)
  "$@" >"$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  if [ "$rc" -ne 0 ]; then
    printf '[demo %d/%d] %-10s failed after %d s (exit %d); the last lines of %s:\n' \
      "$index" "${#steps[@]}" "$name" "$secs" "$rc" "$log"
    tail -n 40 "$log" | sed 's/^/    /'
    exit "$rc"
  fi
  printf '[demo %d/%d] %-10s %4d s ok; %d step(s) left\n' "$index" "${#steps[@]}" "$name" "$secs" "$left"
}

step 1 python make --no-print-directory venv
step 2 tools scripts/toolchain.sh demo
step 3 lab .venv/bin/python scripts/lab.py up --skip-toolchain
step 4 site .venv/bin/ansible-playbook -i "$inventory" ansible/site.yml
# verify's summary (the debug task's msg, YAML the callback folds) and the play recap, from the site log.
.venv/bin/python - "$logs/site.log" <<'PY'
import sys

import yaml

out = open(sys.argv[1]).read()
task = out.index("Print the verification summary")
print("\n".join("    " + line for line in yaml.safe_load(out[out.index("msg:", task):out.index("\n\n", task)])["msg"]))
print("\n".join("    " + line for line in out[out.index("PLAY RECAP"):].strip().splitlines()))
PY
step 5 monitoring .venv/bin/python scripts/lab.py monitoring --report .lab/monitoring/dashboard.html
printf '[demo] done in %d s: the lab runs kube-accel (make lab-status); dashboard: .lab/monitoring/dashboard.html\n' \
  "$(( $(date +%s) - began ))"
