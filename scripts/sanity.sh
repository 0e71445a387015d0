#!/usr/bin/env bash
# ansible-test sanity on kube_accel.gpu as users install it: build the artifact, install it into a scratch
# ansible_collections/ tree (ansible-test runs only from inside ansible_collections/<namespace>/<name>, and the
# artifact is what ships), then run every sanity test that applies, each in its own venv of ansible-test's pinned
# requirements from PyPI (cached by ansible-test under ~/.ansible/test/venv).
# ansible-test bootstraps pip in those venvs with a get-pip.py from ci-files.testing.ansible.com, which this network
# cannot reach: scripts/ansible_test_get_pip.py stands in for it (ensurepip, then pip from PyPI).
# Usage: scripts/sanity.sh [ansible-test sanity arguments, e.g. --test validate-modules]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=$repo/.venv/bin
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The pip version ansible-test pins for its venvs names the cached bootstrap script it looks for.
pip_version=$("$bin/python" - <<'EOF'
import inspect, re
from ansible_test._internal import python_requirements as pr
print(re.search(r"pip='([0-9.]+)'", inspect.getsource(pr.get_venv_packages)).group(1))
EOF
)
cache=$HOME/.ansible/test/cache
mkdir -p "$cache"
install -m 0644 "$repo/scripts/ansible_test_get_pip.py" "$cache/get_pip_${pip_version//./_}.py"

# Nothing of the checkout's configuration: the artifact alone.
export -n ANSIBLE_CONFIG
unset ANSIBLE_CONFIG
(cd "$work" && "$bin/ansible-galaxy" collection build --output-path "$work" "$repo" >/dev/null)
(cd "$work" && "$bin/ansible-galaxy" collection install --force --no-deps -p "$work" "$work"/kube_accel-gpu-*.tar.gz >/dev/null)
cd "$work/ansible_collections/kube_accel/gpu"

# What the sanity tests may not hold against kube-accel, by rule (so a new module or template needs no new line):
# the modules are Apache-2.0 (galaxy.yml), not GPLv3; Helm templates are Go templates, not YAML (helm lint and the
# chart tests check them); a Kubernetes example is a multi-document manifest.
core=$("$bin/python" -c 'from ansible.release import __version__ as v; print(".".join(v.split(".")[:2]))')
mkdir -p tests/sanity
{
  for f in plugins/modules/*.py; do echo "$f validate-modules:missing-gplv3-license"; done
  find charts -path '*/templates/*' \( -name '*.yaml' -o -name '*.yml' \) | sort | sed 's/$/ yamllint!skip/'
  for f in $(find docs/examples -name '*.yaml' | sort); do
    docs=$("$bin/python" -c 'import sys, yaml; print(len(list(yaml.safe_load_all(open(sys.argv[1])))))' "$f")
    if [ "$docs" -gt 1 ]; then echo "$f yamllint:multiple-yaml-documents"; fi
  done
} >"tests/sanity/ignore-$core.txt"
# Every Python from 3.9 (RHEL 9 hosts run modules on it) up to the controller's that this machine has: compile and
# import run on each; the other tests on the controller's Python.
# An interpreter counts when it runs (a pyenv shim of a version that is not active exits 127).
interpreter() {
  local v=$1 path
  for path in "$(command -v "python$v" || true)" "$(pyenv root 2>/dev/null || echo /nonexistent)"/versions/"$v".*/bin/python"$v"; do
    [ -n "$path" ] && [ -x "$path" ] && "$path" -c pass 2>/dev/null && { echo "$path"; return; }
  done
}
controller=$("$bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
# ansible-test also calls pythonX.Y by name: a PATH entry that names the interpreters found.
mkdir -p "$work/bin"
export PATH="$work/bin:$PATH"
status=0
for v in 3.9 3.10 3.11 3.12 3.13; do
  path=$(interpreter "$v")
  if [ -z "$path" ]; then echo "sanity: no Python $v on this machine: compile and import not run for it" >&2; continue; fi
  ln -sfn "$path" "$work/bin/python$v"
  if [ "$v" = "$controller" ]; then
    "$bin/ansible-test" sanity --venv --requirements --python "$v" --color no "$@" || status=1
  else
    "$bin/ansible-test" sanity --venv --requirements --python "$v" --python-interpreter "$path" --color no \
      --test compile --test import "$@" || status=1
  fi
done
exit "$status"
