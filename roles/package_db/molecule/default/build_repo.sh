#!/bin/sh
# Builds the scenario's two packages into a repository on the host and points apt at it alone (no network):
# ka-pkgdb-probe, whose SCRIPT (postinst or preinst) hangs while /run/ka-pkgdb-hang exists and otherwise records
# that it completed, and ka-pkgdb-tool, which depends on the probe.
set -eu
script=$1
repo=/srv/ka-pkgdb
build=$(mktemp -d)
mkdir -p "$build/ka-pkgdb-probe/DEBIAN" "$build/ka-pkgdb-tool/DEBIAN" "$repo"
cat >"$build/ka-pkgdb-probe/DEBIAN/control" <<EOF
Package: ka-pkgdb-probe
Version: 1.0
Architecture: all
Maintainer: kube-accel <noreply@example.net>
Description: kube-accel package_db probe; its $script hangs while /run/ka-pkgdb-hang exists
EOF
cat >"$build/ka-pkgdb-probe/DEBIAN/$script" <<'EOF'
#!/bin/sh
set -e
if [ -e /run/ka-pkgdb-hang ]; then
  echo "$$ $PPID" >/run/ka-pkgdb-script.pids
  exec sleep 600
fi
mkdir -p /var/lib/ka-pkgdb
echo "$0 $*" >>/var/lib/ka-pkgdb/completed
EOF
chmod 0755 "$build/ka-pkgdb-probe/DEBIAN/$script"
cat >"$build/ka-pkgdb-tool/DEBIAN/control" <<EOF
Package: ka-pkgdb-tool
Version: 1.0
Architecture: all
Maintainer: kube-accel <noreply@example.net>
Depends: ka-pkgdb-probe
Description: kube-accel package_db: installed by converge after the repair
EOF
for package in ka-pkgdb-probe ka-pkgdb-tool; do
  dpkg-deb --build --root-owner-group "$build/$package" "$repo/${package}_1.0_all.deb" >/dev/null
done
rm -rf "$build"
cd "$repo"
for deb in *.deb; do
  dpkg-deb --field "$deb"
  echo "Filename: ./$deb"
  echo "Size: $(stat -c %s "$deb")"
  echo "SHA256: $(sha256sum "$deb" | cut -d' ' -f1)"
  echo
done >Packages
# Local and unsigned, hence trusted; the update reads this repository only, apt's other lists stay as they are.
echo "deb [trusted=yes] file:$repo ./" >/etc/apt/sources.list.d/ka-pkgdb.list
apt-get update -qq -o Dir::Etc::SourceList=/etc/apt/sources.list.d/ka-pkgdb.list -o Dir::Etc::SourceParts=- \
  -o APT::Get::List-Cleanup=0
