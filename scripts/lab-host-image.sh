#!/usr/bin/env bash
# Podman and the Debian 12 host image that lab GPU hosts and Molecule scenarios run on (lab-toolchain.md §8).
# No registry is reachable here, so the image is built from the machine's own Debian mirror with debootstrap.
# Usage: scripts/lab-host-image.sh [all|podman|image|python|molecule]
#   podman   install podman + runc (+ rootless helpers when not root) and write containers.conf
#   image    (alias python) build the minbase image and the committed $HOST_IMAGE with python3
#   molecule the Molecule host images of scripts/molecule-images.txt, committed from $HOST_IMAGE (Debian 12) or, for
#            a name written trixie:NAME, from $HOST_IMAGE13 (Debian 13, built the same way when a line asks for it)
#   all      all of them
# Idempotent: a second call finds podman configured and the image present and returns in seconds.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/versions.env
. "$HERE/versions.env"

KA_CACHE=${KA_CACHE:-$HOME/.cache/kube-accel}
SUITE=${DEBIAN_SUITE:-bookworm}
# Packages every converge of the host roles needs: python3 for Ansible, python3-apt for ansible.builtin.apt
# (otherwise it installs python3-apt itself on every fresh container), kmod for modprobe checks,
# ca-certificates for https repositories.
IMAGE_PACKAGES=${IMAGE_PACKAGES:-python3 python3-apt ca-certificates kmod}

log() { printf '[lab-host-image] %s\n' "$*" >&2; }
SUDO=()
if [ "$(id -u)" -ne 0 ]; then SUDO=(sudo); fi

apt_install() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing ${missing[*]}"
  "${SUDO[@]}" apt-get update -qq
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

containers_conf_path() {
  if [ "$(id -u)" -eq 0 ]; then
    echo /etc/containers/containers.conf
  else
    echo "${XDG_CONFIG_HOME:-$HOME/.config}/containers/containers.conf"
  fi
}

setup_podman() {
  local pkgs=(podman runc)
  # Rootless podman needs subordinate id mapping and user-mode networking; root needs neither.
  if [ "$(id -u)" -ne 0 ]; then pkgs+=(uidmap slirp4netns); fi
  apt_install "${pkgs[@]}"
  local conf want
  conf=$(containers_conf_path)
  # Without CAP_SYS_RESOURCE podman cannot apply its default ulimits, and crun fails on the hybrid
  # cgroup layout of the lab hosts: both settings are needed for any container to start.
  want=$'# Written by kube-accel scripts/lab-host-image.sh (lab-toolchain.md §8).\n[containers]\ndefault_ulimits = []\n\n[engine]\nruntime = "runc"\n'
  if [ "$(cat "$conf" 2>/dev/null)" != "${want%$'\n'}" ]; then
    log "writing $conf"
    mkdir -p "$(dirname "$conf")"
    printf '%s' "$want" >"$conf"
  fi
}

# First deb URI of the machine's own Debian archive (not the security archive), from deb822 or one-line sources.
debian_mirror() {
  local f uri
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    uri=$(awk 'tolower($1)=="uris:" {for (i=2;i<=NF;i++) print $i}' "$f" | grep -v -- '-security' | grep '/debian/\?$' | head -n1 || true)
    [ -n "$uri" ] && { echo "$uri"; return; }
  done
  for f in /etc/apt/sources.list.d/*.list /etc/apt/sources.list; do
    [ -f "$f" ] || continue
    uri=$(awk '$1=="deb" {for (i=2;i<=NF;i++) if ($i ~ /^[a-z]+:\/\//) {print $i; break}}' "$f" \
      | grep -v -- '-security' | grep '/debian/\?$' | head -n1 || true)
    [ -n "$uri" ] && { echo "$uri"; return; }
  done
  echo http://deb.debian.org/debian
}

# The python-less base a host image is committed from: same repository and tag, "minbase" for "python".
base_of() { printf '%s' "${1/-python:/-minbase:}"; }

# build_base SUITE BASE_IMAGE: debootstrap minbase of SUITE, imported as BASE_IMAGE.
build_base() {
  local SUITE=$1 BASE_IMAGE=$2 ROOTFS="$KA_CACHE/debootstrap/$1-minbase"
  if podman image exists "$BASE_IMAGE"; then return 0; fi
  apt_install debootstrap
  local mirror
  mirror=$(debian_mirror)
  # The stamp marks a complete tree: an interrupted debootstrap leaves a partial one that is redone.
  if [ ! -e "$ROOTFS.stamp" ]; then
    log "debootstrap $SUITE minbase from $mirror into $ROOTFS"
    "${SUDO[@]}" rm -rf "$ROOTFS"
    mkdir -p "$(dirname "$ROOTFS")"
    "${SUDO[@]}" debootstrap --variant=minbase "$SUITE" "$ROOTFS" "$mirror"
    # Like a real host without an init system: package postinsts must not try to start daemons
    # (containerd, docker) inside a container that has no service manager.
    printf '#!/bin/sh\n# kube-accel lab image: no init system, never start services from maintainer scripts.\nexit 101\n' \
      | "${SUDO[@]}" tee "$ROOTFS/usr/sbin/policy-rc.d" >/dev/null
    "${SUDO[@]}" chmod 0755 "$ROOTFS/usr/sbin/policy-rc.d"
    # Smaller and faster package installs (the DKMS scenario installs hundreds of MB): no docs, man pages, locales.
    printf '%s\n' 'path-exclude=/usr/share/doc/*' 'path-include=/usr/share/doc/*/copyright' \
      'path-exclude=/usr/share/man/*' 'path-exclude=/usr/share/locale/*' 'path-include=/usr/share/locale/locale.alias' \
      | "${SUDO[@]}" tee "$ROOTFS/etc/dpkg/dpkg.cfg.d/01-kube-accel-nodoc" >/dev/null
    "${SUDO[@]}" rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
    printf '%s' "$SUITE" >"$ROOTFS.stamp"
  fi
  log "importing $ROOTFS as $BASE_IMAGE"
  "${SUDO[@]}" tar --numeric-owner -C "$ROOTFS" -c . | podman import --change 'CMD ["/bin/bash"]' - "$BASE_IMAGE" >/dev/null
}

# build_host_image [SUITE HOST_IMAGE]: Debian 12 ($DEBIAN_SUITE, $HOST_IMAGE) unless told otherwise.
build_host_image() {
  local SUITE=${1:-$SUITE} HOST_IMAGE=${2:-$HOST_IMAGE} BASE_IMAGE
  BASE_IMAGE=$(base_of "$HOST_IMAGE")
  if podman image exists "$HOST_IMAGE"; then
    log "$HOST_IMAGE present"
    return 0
  fi
  build_base "$SUITE" "$BASE_IMAGE"
  local ctr="kube-accel-image-build-$$"
  log "committing $HOST_IMAGE ($IMAGE_PACKAGES) from $BASE_IMAGE"
  podman rm -f "$ctr" >/dev/null 2>&1 || true
  # shellcheck disable=SC2064
  trap "podman rm -f $ctr >/dev/null 2>&1 || true" EXIT
  podman run --name "$ctr" --network host "$BASE_IMAGE" sh -euc "
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $IMAGE_PACKAGES
    apt-get clean
    rm -rf /var/lib/apt/lists/*"
  podman commit --change 'CMD ["/bin/bash"]' "$ctr" "$HOST_IMAGE" >/dev/null
  podman rm -f "$ctr" >/dev/null
  trap - EXIT
  log "built $HOST_IMAGE"
}

# The key of one line of molecule-images.txt: sha256 of the line and its host image's id (tests/molecule computes
# the same: scenario_reuse.molecule_image_key).
molecule_image_key() {
  printf '%s\n%s\n' "$1" "$(podman image inspect --format '{{.Id}}' "$2")" | sha256sum | cut -c1-16
}

build_molecule_images() {
  local line name pkgs image key have ctr from
  while IFS= read -r line; do
    case "$line" in '' | '#'*) continue ;; esac
    name=${line%% *}
    pkgs=${line#* }
    if [ "${name#trixie:}" != "$name" ]; then
      name=${name#trixie:} from=$HOST_IMAGE13
      build_host_image "$DEBIAN13_SUITE" "$HOST_IMAGE13" </dev/null
      image="${HOST_IMAGE13%/*}/debian13-$name:current"
    else
      from=$HOST_IMAGE
      image="${HOST_IMAGE%/*}/debian12-$name:current"
    fi
    key=$(molecule_image_key "$line" "$from")
    have=$(podman image inspect --format '{{index .Labels "kube-accel.image-key"}}' "$image" 2>/dev/null || true)
    if [ "$have" = "$key" ]; then
      log "$image present ($pkgs)"
      continue
    fi
    ctr="kube-accel-image-build-$name-$$"
    log "committing $image ($pkgs) from $from"
    podman rm -f -t 0 "$ctr" >/dev/null 2>&1 || true
    # shellcheck disable=SC2064
    trap "podman rm -f -t 0 $ctr >/dev/null 2>&1 || true" EXIT
    podman run --name "$ctr" --network host "$from" sh -euc "
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $pkgs >/dev/null
      apt-get clean
      rm -rf /var/lib/apt/lists/*"
    podman commit --change 'CMD ["/bin/bash"]' --change "LABEL kube-accel.image-key=$key" "$ctr" "$image" >/dev/null
    podman rm -f -t 0 "$ctr" >/dev/null
    trap - EXIT
    log "built $image"
  done <"$HERE/molecule-images.txt"
}

case "${1:-all}" in
  podman) setup_podman ;;
  image | python) setup_podman; build_host_image ;;
  molecule) setup_podman; build_host_image; build_molecule_images ;;
  all) setup_podman; build_host_image; build_molecule_images ;;
  *) echo "usage: $0 [all|podman|image|python|molecule]" >&2; exit 2 ;;
esac
