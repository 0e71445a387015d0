#!/usr/bin/env bash
# kube-accel end to end on one GPU host that has no network: a real single-node Kubernetes (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet of K8S_VERSION) on containerd 2.x with kube-accel's NVIDIA drop-in
# and runtime settings (written by kube-accel's modules, as Ansible ships them), then for each pool of
# scripts/gpu_e2e/pools.yml (pgpu, timeslice, mps): `ansible-playbook site.yml --tags preflight,cluster,verify` with
# the bundle's Ansible (the node's labels, the releases, the switch from the previous pool, the verify Jobs), the
# upstream device plugin registering with the real kubelet, and CUDA pods (cuda-probe) reporting what they got. Where
# the bundle's Ansible does not fit this host's Python, or site.yml fails, the pool's labels and the releases
# render.py rendered at bundle time are applied directly, so the pool is still checked (the failure is a verdict).
# The hosts play is not run: this script owns containerd and the kubelet (started by PID, on a machine whose init may
# not be systemd); the host side is kube-accel's modules, as Ansible ships them, above.
# Day 2, with site.yml: each switch happens while a tenant of the previous pool holds its share (it must leave before
# the node is relabelled: logs/timeline.log), and the last pool gets site.yml once more, with a tenant running, which
# must change, drain and restart nothing.
# check.py turns what was seen into the verdicts (OUTDIR/summary.txt). Everything it started is stopped by PID.
#
# Usage (root): bash gpu-e2e.sh OUTDIR   (from the bundle folder `make gpu-bundle` writes: build/gpu-bundle)
# Env: E2E_DRIVER_ROOT (where the driver lives: /usr/local/nvidia when it has bin/nvidia-smi, else /);
#      E2E_NO_GPU=1 (a machine without a GPU: a stand-in CDI spec, no GPU resources expected; the lab test);
#      E2E_POOLS (default: every pool the bundle rendered); E2E_SITE=0 (apply the rendered releases, no site.yml); E2E_BUSYBOX_IP=1 (busybox's ip even where iproute2 is); E2E_DEADLINE_S (default 480: no step starts later, none runs
#      past it + 30 s; then the cleanup).
# Footprint: /tmp/kae2e (everything it writes), /var/lib/kubelet (the device-plugin socket folder is fixed there by
# the plugin; removed when this run created it), /run/nvidia/mps (the MPS chart's hostPath, a shared bind mount),
# 10.96.0.1/32 and 10.99.0.1/32 on lo (the kubernetes Service address the pods reach the API server on: there is no
# kube-proxy; the node's address), veths of the pods (10.88.0.0/16), 127.0.0.1:5055 (the bundle's images as a
# registry; E2E_REGISTRY_PORT).
# No GPU setting is touched: the MPS daemon's compute-mode call is answered by the image's nvidia-smi shim.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT=${1:?usage: bash gpu-e2e.sh OUTDIR}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
E=/tmp/kae2e
BIN=$E/bin
NODE=gpu-e2e-node
NS=kube-accel-e2e
API_IP=10.96.0.1
NODE_IP=10.99.0.1
REGISTRY_PORT=${E2E_REGISTRY_PORT:-5055}
DEADLINE=${E2E_DEADLINE_S:-480}
NO_GPU=${E2E_NO_GPU:-0}
if [ -n "${E2E_DRIVER_ROOT:-}" ]; then DRIVER_ROOT=$E2E_DRIVER_ROOT
elif [ -x /usr/local/nvidia/bin/nvidia-smi ]; then DRIVER_ROOT=/usr/local/nvidia
else DRIVER_ROOT=/; fi
T0=$(date +%s)
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
mkdir -p "$OUT/logs" "$OUT/pools"
exec > >(tee -a "$OUT/run.log") 2>&1
TEE_PID=$!

elapsed() { echo $(($(date +%s) - T0)); }
note() { echo "[$(elapsed)s] $*"; }
record() { printf '%-28s %s\n' "$1" "$2" | tee -a "$SUMMARY"; }
late() { [ "$(elapsed)" -ge "$DEADLINE" ]; }
# step NAME LIMIT CMD...: output in $OUT/logs/NAME.txt (rc on its last line), rc in the summary.
step() {
  local name=$1 limit=$2 rc
  shift 2
  if late; then record "$name" "SKIPPED (deadline ${DEADLINE}s)"; return 99; fi
  local left=$((DEADLINE + 30 - $(elapsed)))
  [ "$limit" -gt "$left" ] && limit=$left
  note "$name (limit ${limit}s)"
  if declare -F "$1" >/dev/null; then
    timeout -k 3 "$limit" bash -c "$(declare -f); $(declare -p E BIN NODE NS API_IP DRIVER_ROOT NO_GPU OUT HERE GPUS MEM_MIB SITE_ARGS APPLIED REGISTRY_PORT 2>/dev/null); export PATH KUBECONFIG; \"\$@\"" _ "$@" >"$OUT/logs/$name.txt" 2>&1
  else
    timeout -k 3 "$limit" "$@" >"$OUT/logs/$name.txt" 2>&1
  fi
  rc=$?
  [ $rc -eq 124 ] && echo "TIMED OUT after ${limit}s" >>"$OUT/logs/$name.txt"
  tail -n 6 "$OUT/logs/$name.txt" | cut -c1-220 | sed 's/^/    | /'
  echo "rc=$rc" >>"$OUT/logs/$name.txt"
  record "$name" "rc=$rc"
  return $rc
}

PIDS=()
CREATED_KUBELET_DIR=0
CREATED_MPS_DIR=0
ADDED_IPS=""
start() { # start NAME CMD...: in the background, log in $OUT/logs/NAME.log, PID kept for the cleanup
  local name=$1
  shift
  note "starting $name"
  "$@" >"$OUT/logs/$name.log" 2>&1 &
  PIDS+=("$!:$name")
  echo "$!" >"$E/$name.pid"
}
cleanup() {
  set +e
  note "cleanup"
  if [ -x "$BIN/kubectl" ] && [ -f "$E/admin.kubeconfig" ]; then
    # Pods first, while the kubelet still runs: their containers, mounts and veths go with them.
    timeout 40 "$BIN/kubectl" delete ns "$NS" kube-accel --wait=true --timeout=35s >/dev/null 2>&1
  fi
  local i entry pid
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do # reverse order: kubelet before containerd before etcd
    entry=${PIDS[$i]}
    pid=${entry%%:*}
    kill -0 "$pid" 2>/dev/null || continue
    note "stopping ${entry#*:} ($pid)"
    kill -TERM "$pid"
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  done
  # Shims of this run's containerd (their command line names its socket), and their containers.
  for p in /proc/[0-9]*; do
    if { tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null | grep -q -- "-address $E/containerd.sock"; then
      kill -KILL "${p#/proc/}" 2>/dev/null
    fi
  done
  sleep 1
  findmnt -rn -o TARGET 2>/dev/null | grep -E "^($E/|/var/lib/kubelet(/|$)|/run/netns/cni-|/run/nvidia/mps(/|$))" | sort -r |
    while read -r m; do umount -l "$m" 2>/dev/null; done
  ip -o link 2>/dev/null | awk -F': ' '/veth/ {print $2}' | cut -d@ -f1 | while read -r l; do
    # ptp's host ends carry the pod network's addresses; leave any other veth alone.
    ip -4 addr show dev "$l" 2>/dev/null | grep -q ' 10\.88\.' && ip link del "$l" 2>/dev/null
  done
  for ip in $ADDED_IPS; do ip addr del "$ip/32" dev lo 2>/dev/null; done
  # The kubelet's pod cgroups (cgroupfs driver: kubepods under the root of each hierarchy), emptied with its pods.
  find /sys/fs/cgroup -maxdepth 2 -type d -name kubepods 2>/dev/null | while read -r d; do
    find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
  done
  [ "$CREATED_KUBELET_DIR" = 1 ] && rm -rf /var/lib/kubelet
  [ "$CREATED_MPS_DIR" = 1 ] && rm -rf /run/nvidia/mps && rmdir /run/nvidia 2>/dev/null
  for f in "$E"/etc/containerd/conf.d/99-nvidia.toml "$E"/etc/containerd/config.toml "$E"/nvidia-container-runtime/config.toml \
    "$E"/cdi/nvidia.yaml "$E"/kubelet-config.yaml "$E"/cni/net.d/10-e2e.conflist; do
    [ -f "$f" ] && cp "$f" "$OUT/logs/file_$(echo "${f#"$E"/}" | tr / _)"
  done
  note "done in $(elapsed)s"
  python3 "$HERE/check.py" "$OUT" | tee "$OUT/verdicts.txt"
  cat "$OUT/verdicts.txt" >>"$SUMMARY"
  exec 1>&- 2>&-
  wait "$TEE_PID" 2>/dev/null
}
trap cleanup EXIT

note "kube-accel e2e -> $OUT (driver root $DRIVER_ROOT, no GPU: $NO_GPU)"
[ "$(id -u)" = 0 ] || { record precondition "FAIL: run as root"; exit 1; }
# A previous run killed before its cleanup: stop what its PID files name, by PID, and start clean.
for f in "$E"/*.pid; do
  [ -f "$f" ] || continue
  pid=$(cat "$f")
  if { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null | grep -q "$E"; then kill -KILL "$pid" 2>/dev/null; fi
done
findmnt -rn -o TARGET 2>/dev/null | grep -E "^$E/" | sort -r | while read -r m; do umount -l "$m"; done
rm -rf "$E" && mkdir -p "$E"/{cdi,cni/net.d,cni/bin,etcd,pki,etc/containerd/conf.d,nvidia-container-runtime,state,root}
[ -e /var/lib/kubelet ] || CREATED_KUBELET_DIR=1
[ -e /run/nvidia/mps ] || CREATED_MPS_DIR=1

# --- 1. The machine (read only) and the bundle ------------------------------------------------------------------
machine() {
  uname -a; head -2 /etc/os-release; nproc; free -m | head -2
  stat -fc '%T' /sys/fs/cgroup; cat /proc/self/cgroup; cat /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null
  ls -la /dev/nvidia* 2>&1 | head; cat /proc/driver/nvidia/version 2>&1; python3 --version; command -v openssl ip
}
step machine 20 machine
if [ "$NO_GPU" != 1 ]; then
  step host-gpus 30 bash -c "PATH=\$PATH:$DRIVER_ROOT/bin nvidia-smi --query-gpu=index,uuid,name,memory.total,driver_version,compute_mode,mig.mode.current --format=csv,noheader,nounits > $OUT/host-gpus.csv; cat $OUT/host-gpus.csv"
fi
unpack() {
  (cd "$HERE" && sha256sum -c --quiet SHA256SUMS) || return 1
  xz -dc "$HERE/payload.tar.xz" | tar -x -C "$E" || return 1
  (cd "$E" && sha256sum -c --quiet SHA256SUMS) || return 1
  cp "$E"/cni/* "$E/cni/bin/" 2>/dev/null
  for c in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do ln -s kube "$BIN/$c"; done
  ls -la "$BIN"
}
step unpack 60 unpack || exit 1
export PATH=$BIN:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export KUBECONFIG=$E/admin.kubeconfig
# Some GPU hosts have no iproute2 (docs/gpu-validation.md's H100 host has none): busybox's ip applet does what this
# script needs.
if [ "${E2E_BUSYBOX_IP:-0}" = 1 ] || ! command -v ip >/dev/null; then
  ip() { "$BIN/busybox" ip "$@"; }
  note "ip: busybox's applet"
fi
step versions 20 bash -c 'kube kubelet --version; etcd --version | head -1; containerd --version; runc --version | head -1; nvidia-ctk --version | head -1'

# --- 2. containerd with kube-accel's drop-in; the NVIDIA runtime with kube-accel's settings ---------------------
# Lowering oom_score_adj needs CAP_SYS_RESOURCE, which some sandboxed roots lack: then CRI must not ask for it.
if sh -c 'echo -1 >/proc/self/oom_score_adj' 2>/dev/null; then OOM_RESTRICT=false; else OOM_RESTRICT=true; fi
if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then CGROUP_V1=false; else CGROUP_V1=true; fi
# overlayfs where the kernel and this filesystem allow it (containerd's own check), else the native snapshotter.
probe_overlay() {
  local d=$E/ovl
  mkdir -p "$d"/{l,u,w,m} && mount -t overlay overlay -o "lowerdir=$d/l,upperdir=$d/u,workdir=$d/w" "$d/m" && umount "$d/m"
}
if step overlay-probe 10 probe_overlay; then SNAP=overlayfs; else SNAP=native; fi
main_config() { # containerd's own default config (version 3 of 2.x), every host path moved under $E
  containerd config default | sed \
    -e "s|^root = .*|root = '$E/root'|" -e "s|^state = .*|state = '$E/state'|" \
    -e "s|'/etc/containerd/conf.d/\*.toml'|'$E/etc/containerd/conf.d/*.toml'|" \
    -e "s|^\(  *\)snapshotter = 'overlayfs'|\1snapshotter = '$1'|" \
    -e "s|^\(  *\)sandbox = '.*'|\1sandbox = 'kube-accel.e2e/pause:1'|" \
    -e "s|cdi_spec_dirs = .*|cdi_spec_dirs = ['$E/cdi']|" \
    -e "s|disable_apparmor = false|disable_apparmor = true|" \
    -e "s|restrict_oom_score_adj = false|restrict_oom_score_adj = $2|" \
    -e "s|bin_dirs = \['/opt/cni/bin'\]|bin_dirs = ['$E/cni/bin']|" \
    -e "s|conf_dir = '/etc/cni/net.d'|conf_dir = '$E/cni/net.d'|" \
    -e "s|'/opt/containerd/image-verifier/bin'|'$E/opt/image-verifier/bin'|" \
    -e "s|path = '/opt/containerd'|path = '$E/opt'|" \
    -e "s|'/var/run/nri/nri.sock'|'$E/nri.sock'|" -e "s|'/opt/nri/plugins'|'$E/nri/plugins'|" \
    -e "s|'/etc/nri/conf.d'|'$E/nri/conf.d'|" \
    -e "s|'/run/containerd/containerd.sock'|'$E/containerd.sock'|" \
    -e "s|'/run/containerd/containerd.sock.ttrpc'|'$E/containerd.sock.ttrpc'|" \
    -e "s|^\(  *\)config_path = ''|\1config_path = '$E/certs.d'|" \
    >"$E/etc/containerd/config.toml"
  ! grep -nE "'(/var/lib/containerd|/run/containerd|/etc/cni|/opt/cni|/etc/cdi|/var/run/cdi|/opt/containerd)" \
    "$E/etc/containerd/config.toml"
}
step containerd-config 20 main_config "$SNAP" "$OOM_RESTRICT" || exit 1
# kube-accel's modules exactly as Ansible ships them to a host (AnsiballZ payloads, arguments embedded: those of
# roles/container_toolkit for this run's paths; modules.yml in the bundle says which).
run_module() { python3 "$E/modules/AnsiballZ_$1.py" | tee "$OUT/logs/module-$1.json"; python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
print({k: r.get(k) for k in ("changed", "failed", "msg", "validated")})
sys.exit(1 if r.get("failed") else 0)' "$OUT/logs/module-$1.json"; }
step module-containerd-dropin 60 run_module containerd_nvidia_dropin || exit 1
export NVIDIA_CTK_CONFIG_FILE_PATH=$E/nvidia-container-runtime/config.toml
ctk_config() { # NVIDIA's own writer for its defaults and this machine's paths; kube-accel's module for its settings
  nvidia-ctk config default --output "$NVIDIA_CTK_CONFIG_FILE_PATH" &&
    nvidia-ctk config --config-file "$NVIDIA_CTK_CONFIG_FILE_PATH" --in-place \
      --set nvidia-container-runtime.mode=cdi \
      --set nvidia-container-runtime.modes.cdi.spec-dirs="$E/cdi" \
      --set nvidia-container-runtime.runtimes="$BIN/runc" \
      --set nvidia-container-runtime.debug="$E/nvidia-container-runtime.log" \
      --set nvidia-container-cli.root="$DRIVER_ROOT" \
      --set nvidia-ctk.path="$BIN/nvidia-ctk" &&
    run_module nvidia_runtime_config && cat "$NVIDIA_CTK_CONFIG_FILE_PATH"
}
step nvidia-runtime-config 30 ctk_config || exit 1
fake_cdi() { # E2E_NO_GPU: a stand-in spec so the runtime's CDI path runs; it gives containers no GPU
  cat >"$E/cdi/nvidia.yaml" <<EOF
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
  - name: all
    containerEdits:
      env: [KUBE_ACCEL_E2E_STAND_IN_CDI=1]
EOF
}
if [ "$NO_GPU" = 1 ]; then
  step cdi-spec 10 fake_cdi
else
  step cdi-spec 60 nvidia-ctk cdi generate --driver-root="$DRIVER_ROOT" --dev-root=/ \
    --nvidia-cdi-hook-path="$BIN/nvidia-cdi-hook" --output="$E/cdi/nvidia.yaml" || exit 1
fi
cat >"$E/cni/net.d/10-e2e.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "kube-accel-e2e", "plugins": [
  {"type": "ptp", "ipMasq": false, "mtu": 1500,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/16"}]], "routes": [{"dst": "0.0.0.0/0"}],
            "dataDir": "$E/cni/ipam"}}]}
EOF
start registry python3 "$HERE/registry.py" "$E/images/images.tar" "$REGISTRY_PORT"
start containerd env NVIDIA_CTK_CONFIG_FILE_PATH="$NVIDIA_CTK_CONFIG_FILE_PATH" \
  containerd --config "$E/etc/containerd/config.toml" --log-level info
wait_for() { # wait_for SECONDS CMD...: until CMD succeeds
  local until=$(($(date +%s) + $1)); shift
  until "$@" >/dev/null 2>&1; do [ "$(date +%s)" -ge "$until" ] && return 1; sleep 0.5; done
}
wait_for 30 test -S "$E/containerd.sock" || { record containerd "FAIL: not up in 30 s"; exit 1; }
step containerd-dump 20 bash -c "containerd --config $E/etc/containerd/config.toml config dump | grep -A8 'runtimes.nvidia\]'"
# The images: pulled by containerd itself (the kubelet's path), from the bundle's archive served on 127.0.0.1 as the
# registry kube-accel.e2e (hosts.toml, as a site's mirror is configured).
mkdir -p "$E/certs.d/kube-accel.e2e"
cat >"$E/certs.d/kube-accel.e2e/hosts.toml" <<EOF
server = "http://127.0.0.1:$REGISTRY_PORT"
[host."http://127.0.0.1:$REGISTRY_PORT"]
  capabilities = ["pull", "resolve"]
EOF
registry_up() {
  wait_for 60 grep -q '^ready' "$OUT/logs/registry.log" && cat "$OUT/logs/registry.log" &&
    python3 -c 'import sys, urllib.request as u; [print(t, u.urlopen("http://127.0.0.1:%s/v2/%s" % (sys.argv[1], t.replace(":", "/manifests/"))).status) for t in sys.argv[2:]]' \
      "$REGISTRY_PORT" nvidia/k8s-device-plugin:v0.20.0 cuda-probe:1 pause:1
}
step images 70 registry_up || exit 1

# The MPS chart mounts its root with Bidirectional propagation, which needs the host path on a shared mount; systemd
# makes / shared at boot, this machine's init may not: a shared bind of the MPS root alone, undone by the cleanup.
mps_root() {
  mkdir -p /run/nvidia/mps && if [ "$(findmnt -no PROPAGATION --target /run/nvidia/mps)" != shared ]; then
    mount --bind /run/nvidia/mps /run/nvidia/mps && mount --make-shared /run/nvidia/mps
  fi
  findmnt -o TARGET,PROPAGATION --target /run/nvidia/mps
}
step mps-root 10 mps_root

# --- 3. The control plane and the kubelet ------------------------------------------------------------------------
pki() { # a CA, the API server's certificate (its Service address and 127.0.0.1), the service-account key, tokens
  cd "$E/pki" &&
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj /CN=kube-accel-e2e-ca &&
    openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj /CN=kube-apiserver &&
    printf 'subjectAltName=IP:%s,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc\n' "$API_IP" >san.ext &&
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out apiserver.crt -days 2 -extfile san.ext &&
    openssl genrsa -out sa.key 2048 && openssl rsa -in sa.key -pubout -out sa.pub &&
    printf '%s,admin,admin,system:masters\n%s,system:node:%s,system:node:%s,system:nodes\n' \
      "$(openssl rand -hex 16)" "$(openssl rand -hex 16)" "$NODE" "$NODE" >tokens.csv
}
step pki 30 pki || exit 1
kubeconfig() { # kubeconfig FILE TOKEN
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: e2e, cluster: {server: "https://$API_IP:443", certificate-authority: "$E/pki/ca.crt"}}]
users: [{name: u, user: {token: "$2"}}]
contexts: [{name: e2e, context: {cluster: e2e, user: u}}]
current-context: e2e
EOF
}
kubeconfig "$E/admin.kubeconfig" "$(sed -n 1p "$E/pki/tokens.csv" | cut -d, -f1)"
kubeconfig "$E/kubelet.kubeconfig" "$(sed -n 2p "$E/pki/tokens.csv" | cut -d, -f1)"
# The kubernetes Service's address, on this host: pods reach the API server there without kube-proxy (ptp routes
# their traffic to the host, which owns the address). The node's address likewise (the kubelet refuses a loopback one).
for ip in "$API_IP" "$NODE_IP"; do
  if ! ip -4 addr show dev lo | grep -q " $ip/"; then ip addr add "$ip/32" dev lo && ADDED_IPS+=" $ip"; fi
done
start etcd etcd --data-dir "$E/etcd" --listen-client-urls http://127.0.0.1:23790 \
  --advertise-client-urls http://127.0.0.1:23790 --listen-peer-urls http://127.0.0.1:23800 \
  --initial-advertise-peer-urls http://127.0.0.1:23800 --initial-cluster default=http://127.0.0.1:23800
start kube-apiserver kube-apiserver --etcd-servers http://127.0.0.1:23790 --bind-address "$API_IP" --secure-port 443 \
  --advertise-address "$API_IP" --service-cluster-ip-range 10.96.0.0/24 --tls-cert-file "$E/pki/apiserver.crt" \
  --tls-private-key-file "$E/pki/apiserver.key" --client-ca-file "$E/pki/ca.crt" --token-auth-file "$E/pki/tokens.csv" \
  --service-account-issuer https://kubernetes.default.svc --service-account-key-file "$E/pki/sa.pub" \
  --service-account-signing-key-file "$E/pki/sa.key" --authorization-mode Node,RBAC \
  --enable-admission-plugins NodeRestriction --allow-privileged=true --endpoint-reconciler-type none \
  --kubelet-preferred-address-types InternalIP
wait_for 60 kubectl get --raw /readyz || { record kube-apiserver "FAIL: not ready in 60 s"; exit 1; }
start kube-controller-manager kube-controller-manager --kubeconfig "$KUBECONFIG" \
  --service-account-private-key-file "$E/pki/sa.key" --root-ca-file "$E/pki/ca.crt" --leader-elect=false \
  --controllers '*,-nodeipam' --bind-address 127.0.0.1 --secure-port 10457
start kube-scheduler kube-scheduler --kubeconfig "$KUBECONFIG" --leader-elect=false --bind-address 127.0.0.1 \
  --secure-port 10459
cat >"$E/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://$E/containerd.sock
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
evictionHard: {memory.available: 100Mi, nodefs.available: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
serializeImagePulls: false
resolvConf: ""
EOF
[ "$CGROUP_V1" = true ] || sed -i '/failCgroupV1/d' "$E/kubelet-config.yaml"
start kubelet kubelet --config "$E/kubelet-config.yaml" --kubeconfig "$E/kubelet.kubeconfig" \
  --hostname-override "$NODE" --node-ip "$NODE_IP" --v 2
node_ready() { kubectl get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' | grep -q True; }
if ! wait_for 90 node_ready; then
  record kubelet "FAIL: node not Ready in 90 s"
  kubectl describe node "$NODE" >"$OUT/logs/node-describe.txt" 2>&1
  exit 1
fi
record node "Ready after $(elapsed)s: real kubelet $(kube kubelet --version | cut -d' ' -f2), containerd, runc"
kubectl create namespace "$NS" >/dev/null

# --- 4. One pool at a time: labels, releases, plugin registration, CUDA pods --------------------------------------
POOLS=${E2E_POOLS:-$(cat "$HERE/render/pools.txt")}
MEM_MIB=$(cut -d, -f4 "$OUT/host-gpus.csv" 2>/dev/null | head -1 | tr -d ' ')
GPUS=$(grep -c . "$OUT/host-gpus.csv" 2>/dev/null || echo 0)
probe_pod() { # probe_pod NAME POOL RESOURCE ARGS... -> a pod that runs cuda-probe with one RESOURCE (none if "-")
  local name=$1 pool=$2 res=$3 args="" a
  shift 3
  for a in "$@"; do args+="\"$a\", "; done
  local limits="{}"
  [ "$res" != - ] && limits="{\"$res\": 1}"
  kubectl apply -f - <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $name, namespace: $NS, labels: {kube-accel.e2e/pool: $pool}}
spec:
  restartPolicy: Never
  runtimeClassName: nvidia
  nodeSelector: {kube-accel.io/pool: $pool}
  automountServiceAccountToken: false
  securityContext: {runAsNonRoot: ${PROBE_NONROOT:-true}, runAsUser: ${PROBE_UID:-65532}, seccompProfile: {type: RuntimeDefault}}
  containers:
    - name: probe
      image: kube-accel.e2e/cuda-probe:1
      args: [${args%, }]
      env: ${PROBE_ENV:-[]}
      resources: {limits: $limits}
      securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
EOF
}
ds_ready() { # ds_ready daemonset/NAME: it has pods scheduled and every one is Ready
  local n
  read -r -a n < <(kubectl -n kube-accel get "$1" -o jsonpath='{.status.desiredNumberScheduled} {.status.numberReady}')
  [ "${n[0]:-0}" -gt 0 ] && [ "${n[0]}" = "${n[1]:-}" ]
}
ds_rolled_out() { # ds_rolled_out daemonset/NAME: its pods are the current template's and Ready, by its strategy
  # Without a GPU the MPS pool's agents stop at NVML and restart in a loop, Ready for moments only (a wait for Ready
  # can miss them for 120 s): every scheduled pod current and its containers started instead (check.py ds_started).
  if [ "$NO_GPU" = 1 ]; then
    if wait_for 120 ds_started "$1"; then
      echo "daemon set \"${1#*/}\" successfully rolled out (no GPU: every scheduled pod current, its containers started)"
    else
      echo "daemon set \"${1#*/}\": not every scheduled pod current with its containers started in 120 s"; return 1
    fi
  elif [ "$(kubectl -n kube-accel get "$1" -o jsonpath='{.spec.updateStrategy.type}')" != OnDelete ]; then
    kubectl -n kube-accel rollout status "$1" --timeout=120s
  # `rollout status` refuses OnDelete DaemonSets (the MPS control daemon): every scheduled pod Ready instead.
  elif wait_for 120 ds_ready "$1"; then
    echo "daemon set \"${1#*/}\" successfully rolled out (OnDelete: every scheduled pod Ready)"
  else
    echo "daemon set \"${1#*/}\": not every scheduled pod Ready in 120 s"; return 1
  fi
}
ds_started() { # ds_started daemonset/NAME: its scheduled pods ran their init containers and started their containers
  local d
  d=$(mktemp -d)
  kubectl -n kube-accel get "$1" -o json >"$d/ds.json" && kubectl -n kube-accel get pods -o json >"$d/pods.json" &&
    python3 "$HERE/check.py" --ds-started "$d/ds.json" "$d/pods.json"
  local rc=$?
  rm -rf "$d"
  return $rc
}
pod_done() { local p; p=$(kubectl -n "$NS" get pod "$1" -o jsonpath='{.status.phase}'); [ "$p" = Succeeded ] || [ "$p" = Failed ]; }
collect_pod() { # collect_pod NAME DIR: its log (the probe's JSON), its status, its events
  kubectl -n "$NS" logs "$1" >"$2/$1.json" 2>"$2/$1.log-error"
  kubectl -n "$NS" get pod "$1" -o json >"$2/$1.pod.json"
}
allocatable() { # allocatable RESOURCE: the node's allocatable count of it ("" when it has none)
  kubectl get node "$NODE" -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["status"]["allocatable"].get(sys.argv[1], ""))' "$1"
}
label_node() { # label_node POOL [PREVIOUS_POOL]: the pool's labels as the cluster play sets them, the previous pool's gone
  local args=() k
  if [ -n "${2:-}" ]; then
    for k in $(python3 -c 'import json,sys; print(" ".join(json.load(open(sys.argv[1]))["labels"]))' "$HERE/render/$2/node.json"); do
      args+=("$k-")
    done
    kubectl label node "$NODE" "${args[@]}" >/dev/null
  fi
  mapfile -t args < <(python3 -c 'import json,sys; [print(f"{k}={v}") for k, v in json.load(open(sys.argv[1]))["labels"].items()]' "$HERE/render/$1/node.json")
  kubectl label node "$NODE" --overwrite "${args[@]}"
}
agent_logs() { # agent_logs DIR: keep every kube-accel pod's log in DIR; true once each agent printed its config
  local r
  rm -f "$1"/agent-*.log
  for r in $(kubectl -n kube-accel get pods -o name); do
    kubectl -n kube-accel logs "$r" --all-containers --prefix >"$1/agent-${r#pod/}.log" 2>&1
  done
  python3 "$HERE/check.py" --agents-loaded "$1"
}
hold_resource() { # hold_resource POOL: the resource its pods request (render.py's expect.json)
  python3 -c 'import json,sys; print(next(iter(json.load(open(sys.argv[1]))["request"])))' "$HERE/render/$1/expect.json"
}
run_pool() {
  local pool=$1 dir=$OUT/pools/$1 r
  mkdir -p "$dir"
  cp "$HERE/render/$pool/expect.json" "$HERE/render/$pool/node.json" "$dir/"
  if [ "${APPLIED:-0}" = 1 ]; then
    kubectl -n kube-accel get ds -o wide >"$dir/apply.txt" 2>&1 # site.yml installed the releases
  else
    kubectl apply --server-side --force-conflicts -f "$HERE/render/$pool/manifests.yaml" >"$dir/apply.txt" 2>&1 || return 1
  fi
  local res per
  res=$(python3 -c 'import json,sys; print(next(iter(json.load(open(sys.argv[1]))["request"])))' "$dir/expect.json")
  per=$(python3 -c 'import json,sys; print(next(iter(json.load(open(sys.argv[1]))["per_gpu"].values())))' "$dir/expect.json")
  # The releases' DaemonSets roll out on the real kubelet (image, RuntimeClass, mounts, service account, API).
  for r in $(kubectl -n kube-accel get ds -o name); do
    ds_rolled_out "$r" >>"$dir/rollout.txt" 2>&1 || {
      kubectl -n kube-accel describe pods >"$dir/pods-describe.txt" 2>&1
      kubectl -n kube-accel get pods -o json >"$dir/agents.json"
      agent_logs "$dir" >/dev/null 2>&1; return 1; }
  done
  # The plugin registers with the kubelet: the node advertises what kube-accel promised.
  local want=$((per * GPUS))
  [ "$NO_GPU" = 1 ] || wait_for 90 eval '[ "$(allocatable "$res")" = "$want" ]'
  kubectl get node "$NODE" -o json >"$dir/node-status.json"
  kubectl -n kube-accel get pods -o wide >"$dir/agents.txt"
  kubectl -n kube-accel get pods -o json >"$dir/agents.json"
  # The agents print the config they loaded soon after they start; a rolled-out pod on a loaded machine may not have
  # yet (an MPS pool's logs can still be empty). Wait a while for it; check.py judges what was kept.
  wait_for 60 agent_logs "$dir" || true
  # Workloads: every share the pool promises at once, holding the GPU while the others run; then one more.
  local n=1 i alloc=(--alloc-mib 1024)
  [ "$pool" != pgpu ] && n=$per
  if [ "$pool" = mps ] && [ -n "$MEM_MIB" ]; then alloc=(--alloc-mib "1024,$((MEM_MIB / per + 2048))"); fi
  [ "$NO_GPU" = 1 ] && n=0 # nothing to run on: only the tenant's pod below
  # MPS serves one user at a time per GPU (a client of another user waits for the server to go): the promised
  # clients run as one user, root as the control daemon; a non-root client is tried alone afterwards.
  local uid=65532 nonroot=true
  [ "$pool" = mps ] && uid=0 nonroot=false
  for i in $(seq 1 "$n"); do
    PROBE_UID=$uid PROBE_NONROOT=$nonroot probe_pod "$pool-$i" "$pool" "$res" --hold-s 15 "${alloc[@]}" >/dev/null
  done
  if [ "$NO_GPU" != 1 ]; then
    probe_pod "$pool-extra" "$pool" "$res" >/dev/null
    sleep 8
    kubectl -n "$NS" get pod "$pool-extra" -o json >"$dir/extra.pod.json"
    kubectl -n "$NS" get events --field-selector involvedObject.name="$pool-extra" -o json >"$dir/extra.events.json"
    kubectl -n "$NS" delete pod "$pool-extra" --wait=false >/dev/null
  fi
  for i in $(seq 1 "$n"); do wait_for 120 pod_done "$pool-$i"; collect_pod "$pool-$i" "$dir"; done
  if [ "$pool" = mps ] && [ "$n" -gt 0 ]; then
    probe_pod mps-nonroot "$pool" "$res" "${alloc[@]}" >/dev/null
    wait_for 60 pod_done mps-nonroot
    collect_pod mps-nonroot "$dir"
  fi
  if [ "$pool" = pgpu ]; then
    # The hostile tenant: no GPU requested, the NVIDIA runtime's RuntimeClass, NVIDIA_VISIBLE_DEVICES=all.
    PROBE_ENV='[{name: NVIDIA_VISIBLE_DEVICES, value: all}]' probe_pod attack-envvar "$pool" - >/dev/null
    wait_for 60 pod_done attack-envvar
    collect_pod attack-envvar "$dir"
  fi
  kubectl -n "$NS" delete pods -l kube-accel.e2e/pool="$pool" --wait=true --timeout=60s >/dev/null 2>&1
}
# site.yml with the bundle's Ansible (wheels for one Python version: the GPU hosts').
SITE=0
SITE_ARGS=()
if [ "${E2E_SITE:-1}" = 1 ] && [ -f "$E/site/python-version" ]; then
  host_py=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  if [ "$host_py" = "$(cat "$E/site/python-version")" ]; then
    SITE=1
    mkdir -p "$E/ansible/tmp"
    # Bytecode once for every ansible-playbook and module process after it (the bundle ships none; with
    # PYTHONDONTWRITEBYTECODE set each one would compile Ansible and the kubernetes client again).
    python3 -m compileall -q -j 0 "$E/site/python" >/dev/null || echo "compileall of the bundle's Ansible failed: it runs from source" >&2
    cat >"$E/ansible/ansible.cfg" <<EOF
[defaults]
collections_path = $E/site/collections
interpreter_python = auto_silent
local_tmp = $E/ansible/tmp
remote_tmp = $E/ansible/tmp
retry_files_enabled = false
stdout_callback = default
callback_result_format = yaml
nocows = true
EOF
    # The plan's driver is the host's: its branch from nvidia-smi; without a GPU, the named NVML stand-in's.
    if [ "$NO_GPU" = 1 ]; then
      SITE_ARGS=(-e "accel_nvml_snapshot=$HERE/render/nvml-stand-in.json")
      branch=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["nvml"]["driver_version"].split(".")[0])' "$HERE/render/nvml-stand-in.json")
    else
      branch=$(cut -d, -f5 "$OUT/host-gpus.csv" | head -1 | tr -d ' ' | cut -d. -f1)
    fi
    SITE_ARGS+=(-e "accel_driver_branch=$branch")
  else
    record site "SKIPPED: the bundle's Ansible is for Python $(cat "$E/site/python-version"), this host runs $host_py"
  fi
fi
site_pool() { # site_pool POOL: kube-accel's own play for the node in POOL (the previous pool's release goes with it)
  local tags=preflight,cluster,verify
  [ "$NO_GPU" = 1 ] && tags=preflight,cluster # verify fails without a GPU: the node advertises none
  # NVML for the facts module where the driver lives outside the loader's paths (/usr/local/nvidia, E2E_DRIVER_ROOT).
  local libs=""
  [ "$DRIVER_ROOT" != / ] && libs=$DRIVER_ROOT/lib64:$DRIVER_ROOT/lib
  ANSIBLE_CONFIG=$E/ansible/ansible.cfg PYTHONPATH=$E/site/python ANSIBLE_FORCE_COLOR=0 \
    LD_LIBRARY_PATH=${libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} PATH=$PATH:$DRIVER_ROOT/bin \
    python3 -m ansible.cli.playbook -i "$HERE/render/$1/inventory.yml" \
    "$E/site/collections/ansible_collections/kube_accel/gpu/ansible/site.yml" --tags "$tags" "${SITE_ARGS[@]}"
}
# --- 5. Day 2 on the real node: a tenant's running work while site.yml changes the node or changes nothing -------
# A tenant's Deployment of one client in POOL, holding its share (cuda-probe --hold-s; without a GPU, the pause image
# and no resource: the pod still runs on the pool's node, which is what the drain must move).
hold_start() { # hold_start NAME POOL RESOURCE UID: until its pod runs; then its pods' JSON on stdout
  local img=kube-accel.e2e/cuda-probe:1 args='["--hold-s", "3600"]' limits="{\"$3\": 1}"
  [ "$NO_GPU" = 1 ] && img=kube-accel.e2e/pause:1 args='[]' limits='{}'
  kubectl apply -f - <<EOF2 >&2
apiVersion: apps/v1
kind: Deployment
metadata: {name: $1, namespace: $NS}
spec:
  replicas: 1
  selector: {matchLabels: {kube-accel.e2e/hold: $1}}
  template:
    metadata: {labels: {kube-accel.e2e/hold: $1}}
    spec:
      runtimeClassName: nvidia
      terminationGracePeriodSeconds: 5
      nodeSelector: {kube-accel.io/pool: $2}
      automountServiceAccountToken: false
      securityContext: {runAsNonRoot: true, runAsUser: $4, seccompProfile: {type: RuntimeDefault}}
      containers:
        - name: client
          image: $img
          args: $args
          resources: {limits: $limits}
          securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
EOF2
  wait_for 90 eval "[ \"\$(kubectl -n $NS get pods -l kube-accel.e2e/hold=$1 -o jsonpath='{.items[*].status.phase}')\" = Running ]" || return 1
  kubectl -n "$NS" get pods -l "kube-accel.e2e/hold=$1" -o json
}
hold_state() { # hold_state NAME FILE: the Deployment's pods now
  kubectl -n "$NS" get pods -l "kube-accel.e2e/hold=$1" -o json >"$2"
}
# Every half second: epoch|the node's pool label|unschedulable|the tenants' pods (uid:phase:deleting), for check.py
# to show the order in which the node was cordoned, emptied and relabelled.
timeline() {
  local node pods
  while :; do
    node=$(kubectl get node "$NODE" -o jsonpath='{.metadata.labels.kube-accel\.io/pool}|{.spec.unschedulable}' 2>/dev/null)
    pods=$(kubectl -n "$NS" get pods -l kube-accel.e2e/hold -o jsonpath='{range .items[*]}{.metadata.uid}:{.status.phase}:{.metadata.deletionTimestamp} {end}' 2>/dev/null)
    echo "$(date +%s.%N)|$node|$pods"
    sleep 0.5
  done
}
[ "$SITE" = 1 ] && start timeline timeline
# The tenants run as the verify Job does (uid 65534): an MPS server serves one user at a time.
HOLD_UID=65534

PREV=""
for pool in $POOLS; do
  mkdir -p "$OUT/pools/$pool"
  APPLIED=0
  if [ "$SITE" = 1 ] && [ -n "$PREV" ]; then
    # The previous pool's tenant is running when site.yml moves the node: it must be gone before the node's labels
    # change, and its replacement must not land in the new pool.
    if step "hold-$PREV" 100 hold_start "hold-$PREV" "$PREV" "$(hold_resource "$PREV")" "$HOLD_UID"; then
      sed -n '/^{/,/^}/p' "$OUT/logs/hold-$PREV.txt" >"$OUT/pools/$pool/hold-before.json"
    fi
  fi
  if [ "$SITE" = 1 ] && step "site-$pool" 200 site_pool "$pool"; then
    APPLIED=1
  else
    [ "$SITE" = 1 ] && note "site.yml failed for $pool: applying the rendered releases instead (the failure is a verdict)"
    step "label-$pool" 20 label_node "$pool" "$PREV"
  fi
  if [ -n "$PREV" ] && [ -f "$OUT/pools/$pool/hold-before.json" ]; then
    hold_state "hold-$PREV" "$OUT/pools/$pool/hold-after.json"
    kubectl -n "$NS" delete deployment "hold-$PREV" --wait=false >/dev/null
  fi
  PREV=$pool
  step "pool-$pool" 240 run_pool "$pool"
  # Without site.yml, the next pool starts from an empty namespace, as a node leaving one pool for another would
  # (drained first); with it, the next site.yml run switches the node (drain, labels, releases).
  if [ "$APPLIED" = 0 ]; then
    kubectl delete -f "$HERE/render/$pool/manifests.yaml" --ignore-not-found --wait=true --timeout=90s \
      >"$OUT/pools/$pool/delete.txt" 2>&1
  fi
done
# site.yml once more for the last pool, with nothing to change, while a tenant holds a share (an MPS client on the MPS
# pool): nothing changed, nothing drained, no agent restarted (the MPS control daemon included), the tenant untouched.
if [ "$SITE" = 1 ] && [ -n "$PREV" ] && [ "$APPLIED" = 1 ]; then
  R=$OUT/rerun && mkdir -p "$R" && echo "$PREV" >"$R/pool"
  if step "hold-again-$PREV" 100 hold_start "again-$PREV" "$PREV" "$(hold_resource "$PREV")" "$HOLD_UID"; then
    sed -n '/^{/,/^}/p' "$OUT/logs/hold-again-$PREV.txt" >"$R/hold-before.json"
    kubectl -n kube-accel get pods -o json >"$R/agents-before.json"
    date +%s.%N >"$R/t0"
    step "site-again-$PREV" 200 site_pool "$PREV"
    date +%s.%N >"$R/t1"
    kubectl -n kube-accel get pods -o json >"$R/agents-after.json"
    hold_state "again-$PREV" "$R/hold-after.json"
  fi
fi
record RESULT "see the verdicts below"
