#!/usr/bin/env bash
# make gpu-bundle: everything scripts/gpu-e2e.sh needs on a GPU host that has no network, into build/gpu-bundle
# (the device tool carries it: `carry: [build/gpu-bundle]`), under 60 MiB.
#   payload.tar.xz  bin/: kube (kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kubectl of
#                   K8S_VERSION in one binary: scripts/kube, the lab's own), etcd, containerd + shim + ctr, runc (static,
#                   seccomp), nvidia-ctk, nvidia-container-runtime, nvidia-cdi-hook, CNI loopback/ptp/host-local;
#                   images/images.tar: the device plugin image built from the pinned k8s-device-plugin source
#                   (nvidia-device-plugin, mps-control-daemon, config-manager), the CUDA probe and the pause image,
#                   one docker-archive that `ctr images import` reads; SHA256SUMS.
#   render/         what the cluster play installs for each pool of scripts/gpu_e2e/pools.yml (render.py).
#   modules/        kube-accel's host modules as Ansible ships them to a host (AnsiballZ, Python stdlib only), their
#                   arguments those of roles/container_toolkit for the e2e's paths (modules.yml).
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
export GOFLAGS="-trimpath -buildvcs=false"
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
install -m 0755 "$UP/ctr-$v" "$stage/bin/ctr"
install -m 0755 "$runc" "$stage/bin/runc"
install -m 0755 "$UP/nvidia-ctk-$n" "$stage/bin/nvidia-ctk"
install -m 0755 "$UP/nvidia-container-runtime-$n" "$stage/bin/nvidia-container-runtime"
install -m 0755 "$hook" "$stage/bin/nvidia-cdi-hook"
install -m 0755 "$cni"/loopback "$cni"/ptp "$cni"/host-local "$stage/cni/"

log "building the images"
"$VENV/bin/python" "$HERE/gpu_e2e/images.py" "$C/images" "$stage/images/images.tar"

rm -rf "$OUT" && mkdir -p "$OUT"
log "rendering the pools' releases"
"$VENV/bin/python" "$HERE/gpu_e2e/render.py" "$OUT/render" gpu-e2e-node "$KA_CACHE/bin/helm"
log "packing the host modules (AnsiballZ)"
PATH="$stage/bin:$PATH" "$VENV/bin/python" "$HERE/gpu_e2e/modules.py" "$OUT/modules"

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
cp "$HERE/gpu-e2e.sh" "$HERE/gpu_e2e/check.py" "$C/images/busybox" "$OUT/"
(cd "$OUT" && find . -type f ! -name SHA256SUMS -printf '%P\n' | sort | xargs sha256sum >SHA256SUMS)
size=$(du -sb "$OUT" | cut -f1)
log "$OUT: $((size / 1024 / 1024)) MiB"
[ "$size" -lt $((60 * 1024 * 1024)) ] || [ "${XZ_FAST:-0}" = 1 ] || { log "over 60 MiB: the GPU host takes at most 64 MiB with the checkout"; exit 1; }
