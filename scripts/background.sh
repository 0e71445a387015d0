#!/usr/bin/env bash
# Run a command at background CPU priority: everything it starts yields the CPU to the rest of the machine.
# `make test` runs its Molecule lane and its unit/chart/conformance lane this way beside the lab tests, which decide
# the total (scripts/test.sh). nice alone does not do it: with autogroups (kernel.sched_autogroup_enabled, Debian's
# default) nice weighs a process only against its own session, and every `setsid` child (ansible's workers, kwok's
# control plane, the tests' own servers) starts a session of its own, with a full share. So the command also goes
# into a CPU cgroup of low weight, which its children inherit whatever session they start: cgroup v1 cpu.shares 128
# (of 1024) or v2 cpu.weight 12 (of 100). Containers podman starts go to podman's own cgroup (the lab's hosts weigh
# more there: scripts/kalab/hosts.py). Where no cgroup can be written (not root, no cpu controller), nice only.
# Usage: scripts/background.sh COMMAND [ARGS...]    run COMMAND so
#        scripts/background.sh --pid PID               move the running process PID (a subshell, say) there
set -uo pipefail
pid=$$
if [ "${1:-}" = --pid ]; then pid=$2; shift 2; fi
group=kube-accel-background
if [ -w /sys/fs/cgroup/cpu/cgroup.procs ] && [ -e /sys/fs/cgroup/cpu/cpu.shares ]; then
  dir=/sys/fs/cgroup/cpu/$group
  mkdir -p "$dir" && echo 128 >"$dir/cpu.shares" && echo "$pid" >"$dir/cgroup.procs" || dir=''
elif [ -w /sys/fs/cgroup/cgroup.procs ] && grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null; then
  dir=/sys/fs/cgroup/$group
  mkdir -p "$dir" && echo 12 >"$dir/cpu.weight" && echo "$pid" >"$dir/cgroup.procs" || dir=''
else
  dir=''
fi
[ -n "$dir" ] || echo "[background] no CPU cgroup to join: nice 10 only" >&2
if [ "$pid" != $$ ]; then exec renice -n 10 -p "$pid" >/dev/null; fi
exec nice -n 10 "$@"
