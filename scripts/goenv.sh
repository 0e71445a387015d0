# shellcheck shell=bash
# Sourced by scripts/toolchain.sh, scripts/upstream.sh and scripts/gpu-bundle.sh: the one Go environment every build
# runs with (each script adds its own CGO_ENABLED, and to KA_GOFLAGS what its builds need).
# Go modules: GOSUMDB is sum.golang.org and nothing exempts a module from it (GONOSUMDB, GOPRIVATE, GONOPROXY and
# GOINSECURE emptied, whatever the caller's environment says). So every module a build downloads is checked against
# the go.sum of the module being built (an archive's own go.sum, or the go.sum go get writes for a proxy command)
# and every hash not in a go.sum yet against the checksum database's transparency log, fetched through GOPROXY;
# a proxy that serves other content than upstream published fails the build.
# Module and build caches live under $KA_CACHE, keyed by version by the scripts that build into it.
KA_CACHE=${KA_CACHE:-$HOME/.cache/kube-accel}
export GOTOOLCHAIN=local
export GOSUMDB=sum.golang.org GOPROXY=${GOPROXY:-https://proxy.golang.org,direct}
export GONOSUMDB='' GOINSECURE='' GOPRIVATE='' GONOPROXY=''
export GOMODCACHE="$KA_CACHE/go/mod" GOCACHE="$KA_CACHE/go/build"
# Every build links with -s -w (no symbol table, no DWARF), so the compiler need not write DWARF either: 11-13 % less
# CPU for the same binaries (helm v3, empty build cache, twice each: 146-151 -> 132-133 CPU-s; BENCHMARKS.md "Go
# compiler flags").
KA_GOFLAGS="-trimpath -buildvcs=false -gcflags=all=-dwarf=false"
# The compiler collects its garbage less often: 15 % less CPU for 38 % more memory per compile (a second measurement
# in the same hour, helm v3 without DWARF, twice each: GOGC 100 -> 400, 149-153 -> 127-132 CPU-s, largest compile
# 345 -> 478 MB). Sized for a 2-core, 24 GiB machine, where go build runs -p 2.
export GOGC=400

# have FILE KEY: FILE is an executable built for KEY (its FILE.stamp says so); stamp FILE KEY records that.
have() { [ -x "$1" ] && [ -e "$1.stamp" ] && [ "$(cat "$1.stamp")" = "$2" ]; }
stamp() { printf '%s' "$2" >"$1.stamp"; }
