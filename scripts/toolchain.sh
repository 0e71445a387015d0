#!/usr/bin/env bash
# Build and cache kube-accel's lab toolchain from the Go module proxy and Debian.
# Everything is keyed by version under $KA_CACHE; a second call finds every stamp and returns in seconds.
# Usage: scripts/toolchain.sh [all|demo|lab|go|helm|kwok|etcd|k8s|podman|image|molecule|python|upstream]
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/versions.env
. "$HERE/versions.env"

# shellcheck source=scripts/goenv.sh
. "$HERE/goenv.sh"
BIN="$KA_CACHE/bin"
export CGO_ENABLED=0 GOFLAGS="$KA_GOFLAGS"
mkdir -p "$BIN"

log() { printf '[toolchain] %s\n' "$*" >&2; }
# Link the versioned binary to the unversioned name the rest of the repo uses.
link() { ln -sfn "$1" "$BIN/$2"; }

build_helm() { build_helm3; build_helm4; }

build_helm3() {
  local out="$KA_CACHE/helm-$HELM_VERSION/helm" pkg=helm.sh/helm/v3
  if ! have "$out" "$HELM_VERSION"; then
    log "building helm $HELM_VERSION"
    mkdir -p "$(dirname "$out")"
    # helm v3 renders offline templates for Kubernetes 1.20 unless told otherwise (lab-toolchain.md §1).
    local ld="-s -w -X $pkg/internal/version.version=$HELM_VERSION -X $pkg/internal/version.gitTreeState=clean"
    ld+=" -X $pkg/pkg/chartutil.k8sVersionMajor=1 -X $pkg/pkg/chartutil.k8sVersionMinor=$K8S_MINOR"
    ld+=" -X $pkg/pkg/lint/rules.k8sVersionMajor=1 -X $pkg/pkg/lint/rules.k8sVersionMinor=$K8S_MINOR"
    GOBIN=$(dirname "$out") go install -ldflags "$ld" "$pkg/cmd/helm@$HELM_VERSION"
    stamp "$out" "$HELM_VERSION"
  fi
  link "$out" helm
}

# helm v4: the charts are also tested with it (tests/charts); the demo and the playbooks use v3.
build_helm4() {
  local out4="$KA_CACHE/helm-$HELM4_VERSION/helm" pkg4=helm.sh/helm/v4
  if ! have "$out4" "$HELM4_VERSION"; then
    log "building helm $HELM4_VERSION"
    mkdir -p "$(dirname "$out4")"
    GOBIN=$(dirname "$out4") go install \
      -ldflags "-s -w -X $pkg4/internal/version.version=$HELM4_VERSION -X $pkg4/internal/version.gitTreeState=clean" \
      "$pkg4/cmd/helm@$HELM4_VERSION"
    stamp "$out4" "$HELM4_VERSION"
  fi
  link "$out4" helm4
}

build_kwok() {
  local dir="$KA_CACHE/kwok-$KWOK_VERSION"
  if ! have "$dir/kwokctl" "$KWOK_VERSION"; then
    log "building kwok/kwokctl $KWOK_VERSION"
    GOBIN=$dir go install -ldflags "-s -w" \
      "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" "sigs.k8s.io/kwok/cmd/kwokctl@$KWOK_VERSION"
    stamp "$dir/kwokctl" "$KWOK_VERSION"
  fi
  link "$dir/kwok" kwok
  link "$dir/kwokctl" kwokctl
}

# A throwaway module that depends on upstream and builds its main package (lab-toolchain.md §2, §3).
wrapper_dir() { local d="$KA_CACHE/src/$1"; mkdir -p "$d"; printf '%s' "$d"; }

build_etcd() {
  local dir="$KA_CACHE/etcd-$ETCD_VERSION"
  if ! have "$dir/etcd" "$ETCD_VERSION"; then
    log "building etcd $ETCD_VERSION"
    local w; w=$(wrapper_dir "etcd-$ETCD_VERSION")
    (
      cd "$w"
      cat >go.mod <<GOMOD
module kube-accel.local/etcdbin

go $GO_MIN
GOMOD
      printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' >tools.go
      go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
      go mod tidy
      go build -ldflags "-s -w" -o "$dir/etcd" go.etcd.io/etcd/server/v3
    )
    stamp "$dir/etcd" "$ETCD_VERSION"
  fi
  link "$dir/etcd" etcd
}

build_k8s() {
  local dir="$KA_CACHE/kubernetes-$K8S_VERSION" v=${K8S_VERSION#v}
  local staging="v0.${v#*.}" key
  # The one binary of scripts/kube/main.go (kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and
  # kubectl, chosen by the name it is called by): one link instead of four, and the GPU bundle's kubelet with it.
  key="$K8S_VERSION $(sha256sum "$HERE/kube/main.go" | cut -c1-16)"
  if ! have "$dir/kube" "$key"; then
    log "building kube-apiserver/controller-manager/scheduler/kubelet/kubectl $K8S_VERSION (long on a cold cache)"
    local w; w=$(wrapper_dir "kubernetes-$K8S_VERSION")
    (
      cd "$w"
      rm -f tools.go
      cat >go.mod <<GOMOD
module kube-accel.local/kube

go $GO_MIN

godebug default=go1.26
GOMOD
      # Every staging module k8s.io/kubernetes replaces into ./staging/src goes to its published v0.X.Y.
      local gomod
      gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
      local mods
      mods=$(sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\1#p' "$gomod" | sort -u)
      [ -n "$mods" ] || { log "no staging modules found in $gomod"; exit 1; }
      for m in $mods; do go mod edit -replace "$m=$m@$staging"; done
      go mod edit -require "k8s.io/kubernetes@$K8S_VERSION"
      cp "$HERE/kube/main.go" main.go
      go mod tidy
      local date; date=$(date -u +%FT%TZ)
      local ld="-s -w" p
      for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$K8S_MINOR"
        ld+=" -X $p.gitTreeState=clean -X $p.buildDate=$date"
      done
      mkdir -p "$dir"
      go build -p "$(nproc)" -tags selinux,notest -ldflags "$ld" -o "$dir/kube" .
    )
    stamp "$dir/kube" "$key"
    rm -f "$dir/kube-apiserver.stamp" # the stamp of the four separate binaries this one replaced
  fi
  local b
  for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do
    ln -sfn kube "$dir/$b"
    link "$dir/$b" "$b"
  done
}

# Run lanes side by side, each line prefixed with its lane's name; fails when any lane failed, after all ended.
# Usage: lanes NAME 'COMMANDS' [NAME 'COMMANDS' ...]. The Go builds alone keep 2 cores only ~40 % busy (module
# downloads, single-threaded links; BENCHMARKS.md "Toolchain (Go builds)"), so independent builds overlap.
lanes() {
  local pids=() names=() i rc=0
  while [ $# -gt 0 ]; do
    (set -o pipefail; eval "$2" 2>&1 | sed -u "s/^/[$1] /") &
    pids+=($!) names+=("$1")
    shift 2
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || { log "lane ${names[$i]} failed"; rc=1; }
  done
  return "$rc"
}

case "${1:-all}" in
  helm) build_helm ;;
  kwok) build_kwok ;;
  etcd) build_etcd ;;
  k8s) build_k8s ;;
  go) lanes k8s build_k8s helm build_helm tools 'build_kwok; build_etcd' ;;
  podman | image | python | molecule) "$HERE/lab-host-image.sh" "$1" ;;
  upstream) "$HERE/upstream.sh" all ;;
  demo)
    # What `make demo` runs, no more (scripts/demo.sh): the lab (below, without helm v4) and the monitoring chain's
    # Prometheus and kube-state-metrics; no test harness, Molecule image or conformance binary.
    lanes k8s build_k8s helm build_helm3 tools 'build_kwok; build_etcd' \
      upstream "'$HERE/upstream.sh' lab && '$HERE/upstream.sh' monitoring" hosts "'$HERE/lab-host-image.sh' image"
    ;;
  lab)
    # What the local lab runs, no more (scripts/upstream.sh lab): `make test` starts the lab tests on it and builds
    # the rest (`all`) in its other lane (scripts/test.sh); Molecule's images come from its own stage before.
    lanes k8s build_k8s helm build_helm tools 'build_kwok; build_etcd' upstream "'$HERE/upstream.sh' lab" \
      hosts "'$HERE/lab-host-image.sh' image"
    ;;
  all)
    # Four lanes: Kubernetes; helm v3/v4; kwok and etcd; the pinned upstream components the lab and the conformance
    # tests run (tests/conformance). The host and Molecule images (apt, debootstrap: network and disk) go beside them.
    lanes k8s build_k8s helm build_helm tools 'build_kwok; build_etcd' upstream "'$HERE/upstream.sh' all" \
      hosts "'$HERE/lab-host-image.sh' all"
    ;;
  *) echo "usage: $0 [all|demo|lab|go|helm|kwok|etcd|k8s|podman|image|molecule|upstream]" >&2; exit 2 ;;
esac
log "ready in $BIN"
