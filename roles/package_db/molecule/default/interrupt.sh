#!/bin/sh
# Installs PACKAGE with apt-get and kills it mid-way: once dpkg runs the maintainer script that hangs (it writes its
# own PID and dpkg's, its parent, then sleeps while /run/ka-pkgdb-hang exists), apt-get, dpkg and the script are
# killed with SIGKILL, by those PIDs, as a lost host or a killed run would stop them.
set -eu
package=$1
touch /run/ka-pkgdb-hang
rm -f /run/ka-pkgdb-script.pids
setsid apt-get install --yes --no-install-recommends "$package" >/run/ka-pkgdb-apt.log 2>&1 &
apt_pid=$!
tries=0
until [ -s /run/ka-pkgdb-script.pids ]; do
  tries=$((tries + 1))
  if [ "$tries" -gt 600 ]; then
    echo "the maintainer script of $package never started:" >&2
    cat /run/ka-pkgdb-apt.log >&2
    exit 1
  fi
  sleep 0.1
done
read -r script_pid dpkg_pid </run/ka-pkgdb-script.pids
kill -KILL "$apt_pid" "$dpkg_pid" "$script_pid"
wait "$apt_pid" || true
rm -f /run/ka-pkgdb-hang /run/ka-pkgdb-script.pids
echo "killed apt-get $apt_pid, dpkg $dpkg_pid and the maintainer script $script_pid of $package"
# What the next run finds: dpkg's report, its journal, and apt refusing to install.
export LC_ALL=C
dpkg --audit
echo "journal: $(find /var/lib/dpkg/updates -name '[0-9]*' | wc -l) entries"
apt-get install --yes ka-pkgdb-tool 2>&1 || true
