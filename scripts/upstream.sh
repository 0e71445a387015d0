#!/usr/bin/env bash
# Upstream sources at the exact versions the charts pin, unpacked and built for the conformance tests
# (tests/conformance): the upstream binaries run kube-accel's rendered flags, env and configs through their
# own parsers, and small harnesses (tests/conformance/go/*) call upstream loaders that have no command.
#
# Archives come from $KA_UPSTREAM_SRC (default: ../shared/upstream beside the checkout; its README lists
# tags, commits and licenses) and are unpacked only when their sha256 is the one pinned in
# scripts/upstream.sha256. Where that directory lacks an archive: in CI (CI=true) that is a failure
# naming the file; elsewhere the pinned tag is cloned from the project's public repository and used only when it
# is the pinned commit, or the script says exactly what is missing. Everything is cached by the archive's digest
# and the Go version: a second call builds nothing.
#
# Go modules: checked as scripts/goenv.sh says (sum.golang.org, no exemption whatever the caller's environment says).
#
# `lab` builds only what the local lab runs (LAB_* below), so that `make test` starts the lab tests while the rest
# builds beside them (scripts/test.sh); anything the lab needs later is built on demand under the same per-output lock
# (`proxy NAME`, `harness NAME`), so two lanes never build one output twice.
#
# Usage: scripts/upstream.sh [all|lab|lab-outputs|monitoring|src|bin|proxy [NAME...]|harness [NAME...]|crds|
#                            path ARCHIVE|goenv]
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
# shellcheck source=scripts/goenv.sh
. "$HERE/goenv.sh"
KA_UPSTREAM_SRC=${KA_UPSTREAM_SRC:-$REPO/../shared/upstream}
UP="$KA_CACHE/upstream"
export GOFLAGS="$KA_GOFLAGS -mod=mod"
PINNED_SHA256="$HERE/upstream.sha256"
# go-nvml binds libnvidia-ml through cgo (dlopen at run time): the NVIDIA binaries need cgo to build.
export CGO_ENABLED=1

# archive stem | public repository | tag or commit | binaries: package=output-name ... | commit of the tag
# (the archive's sha256 is in scripts/upstream.sha256; a clone must be at the commit)
ARCHIVES=(
  "k8s-device-plugin-v0.20.0|https://github.com/NVIDIA/k8s-device-plugin|v0.20.0|./cmd/nvidia-device-plugin=nvidia-device-plugin ./cmd/gpu-feature-discovery=gpu-feature-discovery ./cmd/mps-control-daemon=mps-control-daemon ./cmd/config-manager=config-manager|1b826acc6af3079d8923bac395c3124b8861a9a6"
  "mig-parted-v0.15.0|https://github.com/NVIDIA/mig-parted|v0.15.0|./cmd/nvidia-mig-parted=nvidia-mig-parted|e2d5ad1fc72b9d298ea6d04b885cf2d7dbe56941"
  "hami-v2.10.0|https://github.com/Project-HAMi/HAMi|v2.10.0|./cmd/scheduler=hami-scheduler|4707fb02c91c545bc7343ce26dba4c32919f9a3e"
  "gpu-operator-v26.7.0|https://github.com/NVIDIA/gpu-operator|v26.7.0|./cmd/gpu-operator=gpu-operator|10ee5b3638b89e11e949412aafa5ba99279c3721"
  "gpu-admission-47d56ae|https://github.com/tkestack/gpu-admission|47d56ae99ef7f24f2c9c4d33d17567e2e52f3ba2|.=gpu-admission|47d56ae99ef7f24f2c9c4d33d17567e2e52f3ba2"
  "gpu-manager-v1.1.5|https://github.com/tkestack/gpu-manager|v1.1.5||c1a60c1eb71b3fa56d1c289f55cd8c7b2aa64e62"
  "dcgm-exporter-4.5.3-4.8.2|https://github.com/NVIDIA/dcgm-exporter|4.5.3-4.8.2||691c92762eb551313c825f6efe4ceeee20982801"
  # HAMi-core (libvgpu): read, not built, by tests/conformance/test_hami.py (what it enforces in the container).
  "hami-core-8f3a89c|https://github.com/Project-HAMi/HAMi-core|8f3a89c67b037d8fdfe6c4cd4d8c4f0cd6504811||8f3a89c67b037d8fdfe6c4cd4d8c4f0cd6504811"
  # NVIDIA's DRA driver: its chart, and the harnesses tests/conformance/go/dra-* compiled into its kubelet
  # plugin's package with its own vendor/ (the archive carries it: some modules are not on the proxy).
  "dra-driver-nvidia-gpu-v0.4.1|https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu|v0.4.1||764900e7833798a1528bd52a2af3e1b2d5f7a616"
)

# Commands built straight from the Go module proxy (no archive): module/package@version=output-name[=build-tags].
# containerd 2.x validates the drop-ins kube-accel writes (its own `config dump`); nvidia-ctk is NVIDIA's config
# writer, measured against them (tests/conformance/test_containerd.py).
# shellcheck source=versions.env
. "$HERE/versions.env"
# promtool evaluates the monitoring chart's alerts (test_alert_rules.py) at the Prometheus version the PromQL harness
# parses with (tests/conformance/go/promql/go.mod).
PROMETHEUS_VERSION=$(awk '$1 == "require" && $2 == "github.com/prometheus/prometheus" {print $3}' \
  "$REPO/tests/conformance/go/promql/go.mod")
PROXY_BINS=(
  "github.com/containerd/containerd/v2/cmd/containerd@$CONTAINERD2_VERSION=containerd-${CONTAINERD2_VERSION#v}"
  "github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-ctk@$NVIDIA_CTK_VERSION=nvidia-ctk-${NVIDIA_CTK_VERSION#v}"
  # The container_toolkit Molecule scenario's CRI attack: containerd 2.x's shim and ctr of the same release,
  # NVIDIA's runtime, and crictl (the kubelet's side of the CRI).
  "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$CONTAINERD2_VERSION=containerd-shim-runc-v2-${CONTAINERD2_VERSION#v}"
  "github.com/containerd/containerd/v2/cmd/ctr@$CONTAINERD2_VERSION=ctr-${CONTAINERD2_VERSION#v}"
  "github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-container-runtime@$NVIDIA_CTK_VERSION=nvidia-container-runtime-${NVIDIA_CTK_VERSION#v}"
  "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION=crictl-${CRICTL_VERSION#v}"
  # promtool and the lab's monitoring chain (scripts/kalab/monitoring.py): Prometheus without the cloud service
  # discoveries (its README's remove_all_sd tag; static and file SD stay), prometheus-adapter serving
  # custom.metrics.k8s.io. One tag for both: the second build reuses the first one's packages, and neither downloads
  # nor compiles the cloud SDKs (AWS, Azure, GCE, ...), which `test rules` never calls.
  "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_VERSION=promtool-${PROMETHEUS_VERSION#v}=remove_all_sd"
  "github.com/prometheus/prometheus/cmd/prometheus@$PROMETHEUS_VERSION=prometheus-${PROMETHEUS_VERSION#v}=remove_all_sd"
  "sigs.k8s.io/prometheus-adapter/cmd/adapter@$PROMETHEUS_ADAPTER_VERSION=prometheus-adapter-${PROMETHEUS_ADAPTER_VERSION#v}"
  # kube-state-metrics: kube_node_labels, which the dashboard's pool panels and the missing-exporter alert join on.
  "k8s.io/kube-state-metrics/v2@$KUBE_STATE_METRICS_VERSION=kube-state-metrics-${KUBE_STATE_METRICS_VERSION#v}"
)

# What the local lab runs (scripts/kalab): config-manager in the device-plugin stand-in, HAMi's scheduler, the GPU
# Operator's controller and gpu-admission; the harnesses the stand-ins load configs with (deviceplugin, dra-slices)
# and the one test_hami_lab.py decodes HAMi's node annotation with (hami-config). The monitoring chain's Prometheus,
# adapter and kube-state-metrics (LAB_MONITORING: name prefixes in PROXY_BINS) are built on demand by
# scripts/kalab/monitoring.py (`proxy NAME`), and first by `all`: the lab's monitoring test, late in the lab lane, then
# finds them built instead of waiting on builds at background priority (a cold CI timed out there).
LAB_MONITORING=(prometheus kube-state-metrics)
LAB_BINS=(config-manager hami-scheduler gpu-operator gpu-admission)
LAB_HARNESSES=(deviceplugin dra-slices hami-config)
# A name in LAB_* that nothing builds (renamed, removed) fails `lab` by name instead of leaving the lab without it.
check_lab_names() {
  local name e pair outputs=' '
  for e in "${ARCHIVES[@]}"; do for pair in $(field "$e" 3); do outputs+="${pair#*=} "; done; done
  for name in "${LAB_BINS[@]}"; do
    [[ $outputs == *" $name "* ]] || die "LAB_BINS names $name: no archive in ARCHIVES builds it"
  done
  for name in "${LAB_HARNESSES[@]}"; do
    [ -d "$REPO/tests/conformance/go/$name" ] || die "LAB_HARNESSES names $name: there is no tests/conformance/go/$name"
  done
}

log() { printf '[upstream] %s\n' "$*" >&2; }
die() { printf '[upstream] ERROR: %s\n' "$*" >&2; exit 1; }
# "built NAME in N s": a cold run's log then says where the toolchain's time went (BENCHMARKS.md).
built() { log "built $1 in $(( $(date +%s) - $2 )) s"; }
# Is the argument list empty, or does NAME start with one of its words?
wanted() { local name=$1 want; shift; [ $# -eq 0 ] && return 0
           for want in "$@"; do [[ $name == "$want"* ]] && return 0; done; return 1; }
field() { local IFS='|'; read -r -a f <<<"$1"; printf '%s' "${f[$2]:-}"; }
entry() { local e; for e in "${ARCHIVES[@]}"; do [ "$(field "$e" 0)" = "$1" ] && { printf '%s' "$e"; return; }; done; die "unknown archive $1"; }

# The sha256 scripts/upstream.sha256 pins for an archive file name (empty when none is pinned).
pinned_sha256() { awk -v f="$1" '$1 !~ /^#/ && $2 == f {print $1}' "$PINNED_SHA256"; }

# The source tree of one archive, unpacked once per archive digest, and only when that digest is the pinned one.
unpack() {
  local stem=$1 e url ref commit archive dest key want got
  e=$(entry "$stem"); url=$(field "$e" 1); ref=$(field "$e" 2); commit=$(field "$e" 4)
  archive="$KA_UPSTREAM_SRC/$stem.tar.gz"
  dest="$UP/src/$stem"
  if [ -f "$archive" ]; then
    want=$(pinned_sha256 "$stem.tar.gz")
    [ -n "$want" ] || die "$stem.tar.gz has no sha256 in $PINNED_SHA256: pin it before it is built and tested against"
    got=$(sha256sum "$archive" | cut -d' ' -f1)
    [ "$got" = "$want" ] \
      || die "$archive has sha256 $got, but $PINNED_SHA256 pins $want: the archive was replaced or damaged; nothing was unpacked"
    key=${got:0:16}
    [ -f "$dest/.ka-stamp" ] && [ "$(cat "$dest/.ka-stamp")" = "$key" ] && return 0
    log "unpacking $stem"
    rm -rf "$dest" && mkdir -p "$dest"
    tar -xzf "$archive" -C "$dest" --strip-components=1
    printf '%s' "$key" >"$dest/.ka-stamp"
    return 0
  fi
  if [ "${CI:-}" = "true" ]; then
    die "$archive is missing: CI tests kube-accel against the pinned upstream sources in \$KA_UPSTREAM_SRC ($KA_UPSTREAM_SRC); see its README"
  fi
  key="git:$ref"
  [ -f "$dest/.ka-stamp" ] && [ "$(cat "$dest/.ka-stamp")" = "$key" ] && return 0
  log "$archive not found: cloning $url at $ref"
  rm -rf "$dest" && mkdir -p "$dest"
  if ! { git -C "$dest" init -q && git -C "$dest" fetch -q --depth 1 "$url" "$ref" && git -C "$dest" checkout -q FETCH_HEAD; }; then
    rm -rf "$dest"
    die "no $stem: put $stem.tar.gz (git archive of $url at $ref) in $KA_UPSTREAM_SRC, or allow git to reach $url"
  fi
  # A tag can be moved: the clone is used only at the commit the archive was made from.
  got=$(git -C "$dest" rev-parse HEAD)
  if [ "$got" != "$commit" ]; then
    rm -rf "$dest"
    die "$url $ref is commit $got, not the pinned $commit: nothing was unpacked"
  fi
  printf '%s' "$key" >"$dest/.ka-stamp"
}

build_key() { printf '%s %s %s' "$(cat "$1/.ka-stamp")" "$(go env GOVERSION)" "$2" | sha256sum | cut -c1-16; }

# Upstream commands, built from their own module with their own go.mod and go.sum (every one, or those named).
build_bins() {
  local e stem src pair pairs pkg out key t0
  mkdir -p "$UP/bin"
  for e in "${ARCHIVES[@]}"; do
    stem=$(field "$e" 0)
    pairs=()
    for pair in $(field "$e" 3); do wanted "${pair#*=}" "$@" && pairs+=("$pair"); done
    [ ${#pairs[@]} -gt 0 ] || continue
    unpack "$stem"
    src="$UP/src/$stem"
    for pair in "${pairs[@]}"; do
      pkg=${pair%%=*}; out="$UP/bin/${pair#*=}"
      key=$(build_key "$src" "$pkg")
      [ -x "$out" ] && [ -f "$out.stamp" ] && [ "$(cat "$out.stamp")" = "$key" ] && continue
      log "building ${pair#*=} from $stem ($pkg)"
      t0=$(date +%s)
      (cd "$src" && go build -ldflags "-s -w" -o "$out" "$pkg")
      printf '%s' "$key" >"$out.stamp"
      built "${pair#*=}" "$t0"
    done
  done
}

# Every command of PROXY_BINS, or those whose output name starts with one of the arguments. The Molecule lane builds
# the one it needs (containerd) while the toolchain lane builds them all: a lock per command, a scratch dir per build.
build_proxy_bins() {
  local pair spec name rest tags out key fd scratch t0
  mkdir -p "$UP/bin"
  for pair in "${PROXY_BINS[@]}"; do
    spec=${pair%%=*}; rest=${pair#*=}; name=${rest%%=*}; tags=''
    [ "$rest" = "$name" ] || tags=${rest#*=}
    wanted "$name" "$@" || continue
    out="$UP/bin/$name"
    key=$(printf '%s %s%s' "$spec" "$(go env GOVERSION)" "${tags:+ $tags}" | sha256sum | cut -c1-16)
    exec {fd}>"$out.lock"
    flock "$fd"
    if ! { [ -x "$out" ] && [ -f "$out.stamp" ] && [ "$(cat "$out.stamp")" = "$key" ]; }; then
      log "building $name from the module proxy ($spec${tags:+, tags $tags})"
      t0=$(date +%s)
      # A scratch module that requires only the command's module: its go.mod decides every version, as with
      # `go install pkg@version`, which refuses modules whose version list the proxy does not serve
      # (prometheus-adapter: "loading deprecation ... 403").
      scratch=$(mktemp -d "$UP/gobuild.XXXXXX")
      (
        cd "$scratch"
        go mod init ka-build >/dev/null 2>&1
        go get "$spec"
        GOFLAGS="$KA_GOFLAGS" go build -tags "$tags" -ldflags "-s -w" -o "$out" "${spec%@*}"
      ) || { rm -rf "$scratch"; die "building $name failed"; }
      rm -rf "$scratch"
      printf '%s' "$key" >"$out.stamp"
      built "$name" "$t0"
    fi
    exec {fd}>&-
  done
}

# kube-accel's own harnesses (tests/conformance/go/NAME; every one, or those named): each go.mod's first line is
# `// upstream: ARCHIVE MODULE` (or `// upstream: none` for one that needs only the module proxy); the build
# points MODULE at the unpacked ARCHIVE with a replace directive, in a copy under the cache so the
# checkout's go.mod stays free of machine paths. A lock per harness, as for PROXY_BINS.
build_harnesses() {
  local dir name fd
  mkdir -p "$UP/bin"
  for dir in "$REPO"/tests/conformance/go/*/; do
    name=$(basename "$dir")
    wanted "$name" "$@" || continue
    exec {fd}>"$UP/bin/ka-conform-$name.lock"
    flock "$fd"
    if [ -f "$dir/upstream.txt" ]; then build_package_harness "${dir%/}"; else build_module_harness "${dir%/}"; fi
    exec {fd}>&-
  done
}

build_module_harness() {
  local dir=$1 name stem='' mod='' src work out key t0
  name=$(basename "$dir")
  [ -f "$dir/go.mod" ] || return 0
  read -r _ _ stem mod < <(head -1 "$dir/go.mod")
  if [ "$stem" = none ]; then
    src=''
  else
    [ -n "$stem" ] && [ -n "$mod" ] || die "$dir/go.mod: first line must be '// upstream: ARCHIVE MODULE' or '// upstream: none'"
    unpack "$stem"
    src="$UP/src/$stem"
  fi
  out="$UP/bin/ka-conform-$name"
  key=$( { [ -z "$src" ] || cat "$src/.ka-stamp"; go env GOVERSION
           cd "$dir" && find . -type f -print0 | sort -z | xargs -0 sha256sum; } | sha256sum | cut -c1-16)
  [ -x "$out" ] && [ -f "$out.stamp" ] && [ "$(cat "$out.stamp")" = "$key" ] && return 0
  log "building harness ka-conform-$name (upstream: $stem)"
  t0=$(date +%s)
  work="$UP/harness/$name"
  rm -rf "$work" && mkdir -p "$work" && cp -r "$dir/." "$work/"
  (
    cd "$work"
    [ -z "$src" ] || go mod edit -replace "$mod=$src"
    # A harness on the module proxy alone keeps its go.sum in the repo and builds without tidy, which would
    # download the whole module graph (Prometheus: about 3 min cold instead of 1.5).
    if [ -n "$src" ] || [ ! -f go.sum ]; then go mod tidy; fi
    go build -ldflags "-s -w" -o "$out" .
  )
  printf '%s' "$key" >"$out.stamp"
  built "ka-conform-$name" "$t0"
}

# Harnesses compiled into an upstream package (tests/conformance/go/NAME/upstream.txt: `archive ARCHIVE`,
# `package ./PKG`, optional `vendor IMPORT-PATH` lines): for code that is itself in a `package main` (the DRA driver's
# kubelet plugin), so it can be called unmodified. The build tree is a hard-linked copy of the unpacked archive plus
# the harness's *_test.go files in PKG and each `vendor` package (from the module proxy at the version the archive's
# vendor/modules.txt lists for its module, checked against the archive's go.sum); `go test -c -mod=vendor` builds
# the binary from the archive's own vendor/ (the DRA driver's holds modules the proxy does not serve). Files that
# differ from the archive's are new files, never edits of linked ones.
build_package_harness() {
  local dir=$1 name stem pkg src work out key extra=() line mod version moddir modsum pkgdir t0
  name=$(basename "$dir")
  stem=$(awk '$1 == "archive" {print $2}' "$dir/upstream.txt")
  pkg=$(awk '$1 == "package" {print $2}' "$dir/upstream.txt")
  mapfile -t extra < <(awk '$1 == "vendor" {print $2}' "$dir/upstream.txt")
  [ -n "$stem" ] && [ -n "$pkg" ] || die "$dir/upstream.txt: needs 'archive ARCHIVE' and 'package ./PKG' lines"
  unpack "$stem"
  src="$UP/src/$stem"
  out="$UP/bin/ka-conform-$name"
  key=$( { cat "$src/.ka-stamp"; go env GOVERSION; cd "$dir" && find . -type f -print0 | sort -z | xargs -0 sha256sum; } \
         | sha256sum | cut -c1-16)
  [ -x "$out" ] && [ -f "$out.stamp" ] && [ "$(cat "$out.stamp")" = "$key" ] && return 0
  log "building harness ka-conform-$name (upstream: $stem $pkg)"
  t0=$(date +%s)
  work="$UP/harness/$name"
  rm -rf "$work" && mkdir -p "$UP/harness" && cp -al "$src" "$work"
  cp "$dir"/*_test.go "$work/$pkg/"
  if [ ${#extra[@]} -gt 0 ]; then
    # modules.txt gets the packages added: a new file, the link to the archive's copy removed first.
    cp "$work/vendor/modules.txt" "$work/vendor/modules.txt.new"
    for line in "${extra[@]}"; do
      mod=$(awk -v p="$line" '$1 == "#" && index(p "/", $2 "/") == 1 {m = $2} END {print m}' "$src/vendor/modules.txt")
      version=$(awk -v m="$mod" '$1 == "#" && $2 == m {print $3}' "$src/vendor/modules.txt")
      [ -n "$mod" ] && [ -n "$version" ] || die "$dir/upstream.txt: $line is in no module of $stem's vendor/modules.txt"
      modsum=$(awk -v m="$mod" -v v="$version" '$1 == m && $2 == v {print $3}' "$src/go.sum")
      moddir=$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "$mod@$version" \
               | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
      [ -n "$moddir" ] || die "$mod@$version: not downloadable from the module proxy"
      [ "$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "$mod@$version" \
            | sed -n 's/^[[:space:]]*"Sum": "\(.*\)",$/\1/p')" = "$modsum" ] \
        || die "$mod@$version from the module proxy does not have the sum $stem's go.sum pins ($modsum)"
      pkgdir="$work/vendor/$line"
      mkdir -p "$pkgdir"
      find "${moddir}/${line#"$mod"/}" -maxdepth 1 -name '*.go' ! -name '*_test.go' -exec cp {} "$pkgdir/" \;
      awk -v m="$mod" -v p="$line" '{print} $1 == "#" && $2 == m {inmod = 1; next}
        inmod && /^## / {print p; inmod = 0}' "$work/vendor/modules.txt.new" >"$work/vendor/modules.txt.tmp"
      mv "$work/vendor/modules.txt.tmp" "$work/vendor/modules.txt.new"
    done
    rm "$work/vendor/modules.txt" && mv "$work/vendor/modules.txt.new" "$work/vendor/modules.txt"
  fi
  (cd "$work" && GOFLAGS="$KA_GOFLAGS -mod=vendor" go test -c -vet=off -ldflags "-s -w" -o "$out" "$pkg")
  printf '%s' "$key" >"$out.stamp"
  built "ka-conform-$name" "$t0"
}

# The Prometheus Operator's ServiceMonitor and PrometheusRule CRDs, for a lab whose inventory asks for the DCGM
# exporter's ServiceMonitor or kube-accel's alerts: prometheus-operator's own example/prometheus-operator-crd at the
# version of the API types the GPU Operator compiles against (its go.mod), from the module proxy (a Go module; 4 MB,
# once per version).
fetch_crds() {
  local src version dir crd stamp="$UP/crds/prometheus-operator.stamp"
  local crds=(monitoring.coreos.com_servicemonitors.yaml monitoring.coreos.com_prometheusrules.yaml)
  unpack gpu-operator-v26.7.0
  src="$UP/src/gpu-operator-v26.7.0"
  version=$(awk '$1 == "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring" {print $2}' "$src/go.mod")
  [ -n "$version" ] || die "$src/go.mod names no prometheus-operator/pkg/apis/monitoring version"
  [ "$(cat "$stamp" 2>/dev/null)" = "$version" ] && return 0
  log "fetching the ServiceMonitor and PrometheusRule CRDs of prometheus-operator $version"
  dir=$(go mod download -json "github.com/prometheus-operator/prometheus-operator@$version" \
        | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  mkdir -p "$UP/crds"
  for crd in "${crds[@]}"; do
    [ -f "$dir/example/prometheus-operator-crd/$crd" ] \
      || die "prometheus-operator $version from the module proxy has no example/prometheus-operator-crd/$crd"
    install -m 0644 "$dir/example/prometheus-operator-crd/$crd" "$UP/crds/$crd"
  done
  printf '%s' "$version" >"$stamp"
}

case "${1:-all}" in
  src) for e in "${ARCHIVES[@]}"; do unpack "$(field "$e" 0)"; done ;;
  bin) build_bins; build_proxy_bins ;;
  proxy) shift; build_proxy_bins "$@" ;;
  monitoring) build_proxy_bins "${LAB_MONITORING[@]}" ;;
  harness) shift; build_harnesses "$@" ;;
  crds) fetch_crds ;;
  path) unpack "$2" >/dev/null; printf '%s\n' "$UP/src/$2" ;;
  # The module settings every build here runs with (tests/unit/test_upstream_pins.py reads them back).
  goenv) go env GOSUMDB GOPROXY GONOSUMDB GOPRIVATE GONOPROXY GOINSECURE GOFLAGS; exit 0 ;;
  lab-outputs)
    # The binaries `lab` builds, one per line (tests/unit/test_upstream_pins.py checks the lab uses no other).
    check_lab_names
    printf '%s\n' "${LAB_BINS[@]}"
    for name in "${LAB_HARNESSES[@]}"; do printf 'ka-conform-%s\n' "$name"; done
    exit 0
    ;;
  lab)
    check_lab_names
    # Every archive is unpacked here, before the lanes split: tests in both read the sources.
    for e in "${ARCHIVES[@]}"; do unpack "$(field "$e" 0)"; done
    build_bins "${LAB_BINS[@]}"
    build_harnesses "${LAB_HARNESSES[@]}"
    fetch_crds
    ;;
  all)
    for e in "${ARCHIVES[@]}"; do unpack "$(field "$e" 0)"; done
    build_proxy_bins "${LAB_MONITORING[@]}"
    build_bins
    build_proxy_bins
    build_harnesses
    fetch_crds
    ;;
  *) echo "usage: $0 [all|lab|lab-outputs|monitoring|src|bin|proxy [NAME...]|harness [NAME...]|crds|path ARCHIVE|goenv]" >&2; exit 2 ;;
esac
log "ready in $UP"
