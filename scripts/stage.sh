#!/usr/bin/env bash
# Run one stage of `make test` and print its elapsed time, so a slow change shows in the change that made it.
# A report, not a timed test: these machines are noisy. With KA_STAGE_LOG set, each line is also appended there
# (.ci/run prints the table and the total at the end, also when a stage fails).
# Usage: scripts/stage.sh NAME COMMAND [ARGS...]
set -uo pipefail
name=$1; shift
start=$(date +%s)
"$@"
rc=$?
secs=$(( $(date +%s) - start ))
line=$(printf '%-10s %5d s  %s' "$name" "$secs" "$([ "$rc" -eq 0 ] && echo ok || echo "failed (exit $rc)")")
printf '[stage] %s\n' "$line" >&2
[ -z "${KA_STAGE_LOG:-}" ] || printf '%s\n' "$line" >>"$KA_STAGE_LOG"
exit "$rc"
