#!/usr/bin/env bash
# make gpu-bundle: everything scripts/gpu-e2e.sh needs on a GPU host that has no network, into build/gpu-bundle
# (the device tool carries it: `carry: [build/gpu-bundle]`), under 60 MiB.
#   payload.tar.xz  bin/: kube (kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kubectl of
#                   K8S_VERSION in one binary: scripts/kube, the lab's own), etcd, containerd + shim, runc (static,
#                   seccomp), nvidia-ctk, nvidia-container-runtime, nvidia-cdi-hook, helm, busybox; cni/: loopback,
#                   ptp, host-local; images/images.tar: the device plugin image built from the pinned
#                   k8s-device-plugin source (nvidia-device-plugin, mps-control-daemon, config-manager), the CUDA probe
#                   and the pause image, one docker-archive that registry.py serves to containerd; modules/:
#                   kube-accel's host modules as Ansible ships them to a host (AnsiballZ, Python stdlib only), their
#                   arguments those of roles/container_toolkit for the e2e's paths (modules.yml); site/: Ansible for
#                   the GPU host's Python (E2E_PYTHON_VERSION, default 3.12: Ubuntu 24.04's) from
#                   PyPI wheels of the versions this venv runs, and the collections site.yml needs (kube_accel.gpu as
#                   `ansible-galaxy collection build` packs it, kubernetes.core); SHA256SUMS.
#   render/         what the cluster play installs for each pool of scripts/gpu_e2e/pools.yml, and the inventory
#                   site.yml runs with there (render.py).
#   gpu-e2e.sh, check.py, registry.py.
# Every build is cached by version under $KA_CACHE/gpu-bundle; a second call only repacks.
# Usage: scripts/gpu-bundle.sh [OUTDIR]
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
# shellcheck source=scripts/versions.env
. "$HERE/versions.env"
OUT=${1:-$REPO/build/gpu-bundle}
# shellcheck source=scripts/goenv.sh
. "$HERE/goenv.sh"
export GOFLAGS="$KA_GOFLAGS"
C=$KA_CACHE/gpu-bundle
UP=$KA_CACHE/upstream/bin
VENV=${VENV:-$REPO/.venv}
mkdir -p "$C"
log() { printf '[gpu-bundle] %s\n' "$*" >&2; }
# scratch DIR MODULE@VERSION: a throwaway module that requires only that module (its go.mod decides the rest).
scratch() { local d=$1; shift; rm -rf "$d" && mkdir -p "$d" && (cd "$d" && go mod init ka-gpu-bundle >/dev/null 2>&1 && go get "$@"); }

# The toolchain's lab binaries and the proxy builds the conformance tests already use.
"$HERE/toolchain.sh" etcd >/dev/null
"$HERE/upstream.sh" bin >/dev/null

"$HERE/toolchain.sh" k8s >/dev/null # the lab's one Kubernetes binary (scripts/kube/main.go), kubelet included
kube=$KA_CACHE/kubernetes-$K8S_VERSION/kube

runc=$C/runc-$RUNC_VERSION
if ! have "$runc" "$RUNC_VERSION"; then
  # runc needs cgo (nsenter); static with Debian's libseccomp.a so it runs on any glibc.
  log "building runc $RUNC_VERSION (static, seccomp)"
  d=$C/debs && mkdir -p "$d" && (cd "$d" && { ls libseccomp-dev_*.deb >/dev/null 2>&1 || apt-get download libseccomp-dev; })
  rm -rf "$d/x" && dpkg-deb -x "$d"/libseccomp-dev_*.deb "$d/x"
  sec=$d/x/usr && mkdir -p "$d/pc"
  sed "s|^prefix=.*|prefix=$sec|; s|^libdir=.*|libdir=$sec/lib/x86_64-linux-gnu|; s|^includedir=.*|includedir=$sec/include|" \
    "$sec/lib/x86_64-linux-gnu/pkgconfig/libseccomp.pc" >"$d/pc/libseccomp.pc"
  scratch "$C/src-runc" "github.com/opencontainers/runc@$RUNC_VERSION"
  (cd "$C/src-runc" && PKG_CONFIG_PATH=$d/pc CGO_ENABLED=1 go build -tags "seccomp urfave_cli_no_docs netgo osusergo" \
    -ldflags "-s -w -X main.version=${RUNC_VERSION#v} -extldflags -static" -o "$runc" github.com/opencontainers/runc)
  stamp "$runc" "$RUNC_VERSION"
fi

hook=$C/nvidia-cdi-hook-$NVIDIA_CTK_VERSION
if ! have "$hook" "$NVIDIA_CTK_VERSION"; then
  # The hooks a generated CDI spec runs (ldcache, symlinks); go-nvml needs cgo.
  log "building nvidia-cdi-hook $NVIDIA_CTK_VERSION"
  scratch "$C/src-hook" "github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-cdi-hook@$NVIDIA_CTK_VERSION"
  (cd "$C/src-hook" && CGO_ENABLED=1 go build -ldflags "-s -w" -o "$hook" \
    github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-cdi-hook)
  stamp "$hook" "$NVIDIA_CTK_VERSION"
fi

cni=$C/cni-$CNI_PLUGINS_VERSION
if ! have "$cni/ptp" "$CNI_PLUGINS_VERSION"; then
  # The pods of the charts' DaemonSets are not hostNetwork: kubelet runs them only with a pod network.
  log "building CNI plugins $CNI_PLUGINS_VERSION (loopback, ptp, host-local)"
  plugins=(main/loopback main/ptp ipam/host-local)
  specs=() && for p in "${plugins[@]}"; do specs+=("github.com/containernetworking/plugins/plugins/$p@$CNI_PLUGINS_VERSION"); done
  scratch "$C/src-cni" "${specs[@]}"
  mkdir -p "$cni"
  (cd "$C/src-cni" && for p in "${plugins[@]}"; do
    CGO_ENABLED=0 go build -ldflags "-s -w" -o "$cni/${p#*/}" "github.com/containernetworking/plugins/plugins/$p"
  done)
  stamp "$cni/ptp" "$CNI_PLUGINS_VERSION"
fi

stage=$C/stage && rm -rf "$stage" && mkdir -p "$stage/bin" "$stage/cni" "$stage/images"
install -m 0755 "$kube" "$stage/bin/kube"
install -m 0755 "$KA_CACHE/bin/etcd" "$stage/bin/etcd"
v=${CONTAINERD2_VERSION#v} n=${NVIDIA_CTK_VERSION#v}
install -m 0755 "$UP/containerd-$v" "$stage/bin/containerd"
install -m 0755 "$UP/containerd-shim-runc-v2-$v" "$stage/bin/containerd-shim-runc-v2"
install -m 0755 "$runc" "$stage/bin/runc"
install -m 0755 "$UP/nvidia-ctk-$n" "$stage/bin/nvidia-ctk"
install -m 0755 "$UP/nvidia-container-runtime-$n" "$stage/bin/nvidia-container-runtime"
install -m 0755 "$hook" "$stage/bin/nvidia-cdi-hook"
install -m 0755 "$cni"/loopback "$cni"/ptp "$cni"/host-local "$stage/cni/"
"$HERE/toolchain.sh" helm >/dev/null
install -m 0755 "$KA_CACHE/bin/helm" "$stage/bin/helm"

# site.yml on the GPU host: Ansible and the kubernetes client for its Python, at the versions this venv runs.
PYV=${E2E_PYTHON_VERSION:-3.12}
reqs=$("$VENV/bin/python" -m pip freeze 2>/dev/null | grep -iE '^(ansible-core|kubernetes|jsonschema|nvidia-ml-py|jinja2|pyyaml)==' | sort)
prune="kubernetes/aio aiohttp* aiohappyeyeballs* aiosignal* frozenlist* multidict* propcache* yarl* ansible_test bin example.py
  cryptography* cffi* _cffi_backend* pycparser* yaml/_yaml.*.so"
py=$C/py-$PYV-$( (echo "$reqs"; echo "$prune") | sha256sum | cut -c1-12)
if [ ! -d "$py" ]; then
  log "Ansible for Python $PYV (wheels: $(echo "$reqs" | tr '\n' ' '))"
  rm -rf "$C"/py-"$PYV"-* && mkdir -p "$py.tmp"
  # shellcheck disable=SC2086 # one requirement per word
  "$VENV/bin/python" -m pip install -q --target "$py.tmp" --python-version "$PYV" --implementation cp \
    --only-binary=:all: --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --no-compile $reqs
  # What site.yml never imports, for the 64 MiB a GPU host takes: the kubernetes client's asyncio half (and its HTTP
  # stack), ansible-test, tests; cryptography (Ansible needs it only for vault) and PyYAML's C parser (pure Python
  # PyYAML reads the same).
  # shellcheck disable=SC2086 # one pattern per word
  (cd "$py.tmp" && rm -rf $prune && find . -depth -type d \( -name tests -o -name __pycache__ \) -exec rm -rf {} +)
  mv "$py.tmp" "$py"
fi
mkdir -p "$stage/site/collections/ansible_collections/kubernetes"
cp -a "$py" "$stage/site/python"
echo "$PYV" >"$stage/site/python-version"
coll=$C/collection && rm -rf "$coll" && mkdir -p "$coll"
"$VENV/bin/ansible-galaxy" collection build "$REPO" --output-path "$coll" >/dev/null
# An installed collection is its build, unpacked (MANIFEST.json and FILES.json included).
mkdir -p "$stage/site/collections/ansible_collections/kube_accel/gpu"
tar -xzf "$coll"/*.tar.gz -C "$stage/site/collections/ansible_collections/kube_accel/gpu"
site_packages=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
cp -a "$site_packages/ansible_collections/kubernetes/core" "$stage/site/collections/ansible_collections/kubernetes/"
find "$stage/site" -depth -type d -name __pycache__ -exec rm -rf {} +

log "building the images"
"$VENV/bin/python" "$HERE/gpu_e2e/images.py" "$C/images" "$stage/images/images.tar"
# Its ip applet where a host has no iproute2; images.py fetches it (it also goes into the images), so after it.
install -m 0755 "$C/images/busybox" "$stage/bin/busybox"

rm -rf "$OUT" && mkdir -p "$OUT"
log "rendering the pools' releases"
"$VENV/bin/python" "$HERE/gpu_e2e/render.py" "$OUT/render" gpu-e2e-node "$KA_CACHE/bin/helm"
# Without a GPU (the lab test), site.yml's preflight reads this NVML stand-in (composed by hand, tests/data/nvml).
cp "$REPO/tests/data/nvml/h100-80gb.json" "$OUT/render/nvml-stand-in.json"
log "packing the host modules (AnsiballZ)"
PATH="$stage/bin:$PATH" "$VENV/bin/python" "$HERE/gpu_e2e/modules.py" "$stage/modules"

(cd "$stage" && find . -type f ! -name SHA256SUMS -printf '%P\n' | sort | xargs sha256sum >SHA256SUMS)
XZ_OPTS=(--x86 --lzma2=preset=9e,dict=256MiB -T1)
[ "${XZ_FAST:-0}" = 1 ] && XZ_OPTS=(-1 -T2) # iterations on this machine only
# The slow compression (minutes) only when the payload changed: keyed by its checksums and the xz options.
payload=$C/payload-$( (cat "$stage/SHA256SUMS"; echo "${XZ_OPTS[*]}") | sha256sum | cut -c1-16).tar.xz
if [ ! -f "$payload" ]; then
  log "compressing (xz, x86 filter, 256 MiB dictionary: the Go binaries share much of their code)"
  rm -f "$C"/payload-*.tar.xz
  tar -C "$stage" --owner=0 --group=0 --sort=name --mtime=@0 -cf - . | xz "${XZ_OPTS[@]}" >"$payload.tmp"
  mv "$payload.tmp" "$payload"
fi
cp "$payload" "$OUT/payload.tar.xz"
cp "$HERE/gpu-e2e.sh" "$HERE/gpu_e2e/check.py" "$HERE/gpu_e2e/registry.py" "$OUT/"
(cd "$OUT" && find . -type f ! -name SHA256SUMS -printf '%P\n' | sort | xargs sha256sum >SHA256SUMS)
size=$(du -sb "$OUT" | cut -f1)
log "$OUT: $((size / 1024 / 1024)) MiB"
[ "$size" -lt $((60 * 1024 * 1024)) ] || [ "${XZ_FAST:-0}" = 1 ] || { log "over 60 MiB: the GPU host takes at most 64 MiB with the checkout"; exit 1; }
