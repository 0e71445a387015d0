#!/bin/bash
# How tests/data/package_db was recorded: run in a Debian 12 container (the Molecule image):
#   podman run --rm -v $PWD/record.sh:/x.sh:ro -v /tmp/out:/out localhost/kube-accel/debian12-python:1 /x.sh
# Real dpkg 1.21.23 and apt 2.6.1 (versions.txt); installs are killed with SIGKILL in a maintainer script.
# apt progress lines ("(Reading database ...") were dropped from the copies kept here.
set -u
export LC_ALL=C
O=/out
mk() { # name version script-kind [depends]
  local d=/tmp/build/$1; rm -rf $d; mkdir -p $d/DEBIAN $d/usr/share/$1
  printf 'Package: %s\nVersion: %s\nArchitecture: all\nMaintainer: kube-accel <noreply@example.net>\n%sDescription: kube-accel package_db probe\n' "$1" "$2" "${4:+Depends: $4
}" > $d/DEBIAN/control
  printf '#!/bin/sh\nif [ -e /run/ka-hang ]; then echo $$ > /run/ka-in-script; exec sleep 600; fi\nexit 0\n' > $d/DEBIAN/$3
  chmod 755 $d/DEBIAN/$3; echo "$1 $2" > $d/usr/share/$1/version
  dpkg-deb --build --root-owner-group $d /srv/repo/${1}_${2}_all.deb >/dev/null
}
mkdir -p /srv/repo
mk ka-post 1.0 postinst
mk ka-pre 1.0 preinst
mk ka-tool 1.0 postinst ka-dep
mk ka-dep 1.0 postinst
cd /srv/repo
for f in *.deb; do dpkg-deb -f $f; echo "Filename: ./$f"; echo "Size: $(stat -c %s $f)"; echo "SHA256: $(sha256sum $f | cut -d' ' -f1)"; echo; done > Packages
echo "deb [trusted=yes] file:/srv/repo ./" > /etc/apt/sources.list.d/ka.list
apt-get update -qq 2>/dev/null
hang() { # command...
  touch /run/ka-hang; rm -f /run/ka-in-script
  setsid "$@" > /tmp/hang.out 2>&1 & local bg=$!
  for i in $(seq 200); do [ -s /run/ka-in-script ] && break; sleep 0.05; done
  kill -9 $bg $(pidof dpkg) $(cat /run/ka-in-script) 2>/dev/null; wait $bg 2>/dev/null; rm -f /run/ka-hang
}
dpkg --audit > $O/audit-clean.txt
hang apt-get install -y ka-post
dpkg --audit > $O/audit-half-configured.txt
ls /var/lib/dpkg/updates > $O/updates-after-kill.txt
apt-get install -y ka-dep > $O/apt-install-interrupted.txt 2>&1; echo "rc=$?" >> $O/apt-install-interrupted.txt
dpkg --force-confdef --force-confold --configure -a > $O/configure-a-half-configured.txt 2>&1; echo "rc=$?" >> $O/configure-a-half-configured.txt
ls /var/lib/dpkg/updates > $O/updates-after-configure.txt
dpkg --audit > $O/audit-after-configure.txt
# Killed in the preinst of a first install: reinstreq half-installed.
hang apt-get install -y ka-pre
dpkg --audit > $O/audit-reinstreq.txt
dpkg-query -W -f '${binary:Package}\t${db:Status-Want}\t${db:Status-Eflag}\t${db:Status-Status}\n' ka-post ka-pre > $O/query-wants.txt
dpkg --force-confdef --force-confold --configure -a > $O/configure-a-reinstreq.txt 2>&1; echo "rc=$?" >> $O/configure-a-reinstreq.txt
dpkg --audit > $O/audit-reinstreq-after-configure.txt
apt-get install -f -y > $O/apt-fix-reinstreq.txt 2>&1; echo "rc=$?" >> $O/apt-fix-reinstreq.txt
apt-get install -f -y --reinstall ka-pre > $O/apt-reinstall.txt 2>&1; echo "rc=$?" >> $O/apt-reinstall.txt
dpkg --audit > $O/audit-after-reinstall.txt
# Unpacked, dependency missing: what an apt killed between unpacking a package and its dependency leaves.
dpkg -i /srv/repo/ka-tool_1.0_all.deb > /dev/null 2>&1
dpkg --audit > $O/audit-unpacked.txt
dpkg --force-confdef --force-confold --configure -a > $O/configure-a-unmet.txt 2>&1; echo "rc=$?" >> $O/configure-a-unmet.txt
apt-get install -f -y > $O/apt-fix.txt 2>&1; echo "rc=$?" >> $O/apt-fix.txt
dpkg --audit > $O/audit-after-fix.txt
# A package the repositories do not carry, left reinstreq: apt cannot reinstall it.
mk ka-gone 1.0 preinst
hang dpkg -i /srv/repo/ka-gone_1.0_all.deb
dpkg --force-confdef --force-confold --configure -a >/dev/null 2>&1
dpkg --audit > $O/audit-gone.txt
apt-get install -f -y --reinstall ka-gone > $O/apt-reinstall-gone.txt 2>&1; echo "rc=$?" >> $O/apt-reinstall-gone.txt
# A live dpkg holding the lock: audit says so.
touch /run/ka-hang; rm -f /run/ka-in-script
mk ka-live 1.0 postinst
setsid dpkg -i /srv/repo/ka-live_1.0_all.deb > /dev/null 2>&1 & bg=$!
for i in $(seq 200); do [ -s /run/ka-in-script ] && break; sleep 0.05; done
dpkg --audit > $O/audit-locked.txt 2>&1
apt-get install -y ka-dep > $O/apt-install-locked.txt 2>&1; echo "rc=$?" >> $O/apt-install-locked.txt
kill -9 $bg $(cat /run/ka-in-script); rm -f /run/ka-hang
dpkg --version | head -1 > $O/versions.txt; apt --version >> $O/versions.txt
