"""Stand-in for the get-pip.py that `ansible-test --venv` downloads from ci-files.testing.ansible.com, a host this
network cannot reach: pip from the Python's own ensurepip, then `pip install` of what ansible-test asks for (its
pinned pip, setuptools, wheel) from PyPI. scripts/sanity.sh puts it where ansible-test looks for its cached copy.

ansible-test runs this with a reduced environment (no PIP_CERT, SSL_CERT_FILE): the venv's own pip.conf names the
system OpenSSL's CA file, so this and every later pip in that venv trusts what the caller's pip trusts."""

import ensurepip
import os
import ssl
import subprocess
import sys

cafile = os.path.realpath(ssl.get_default_verify_paths().openssl_cafile)
if os.path.isfile(cafile):
    with open(os.path.join(sys.prefix, "pip.conf"), "w") as conf:
        conf.write(f"[global]\ncert = {cafile}\n")
# get-pip.py's own flags; pip does not know them.
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
ensurepip.bootstrap()
# ensurepip turns pip's configuration off for its own run (PIP_CONFIG_FILE=/dev/null); the install below needs it.
os.environ.pop("PIP_CONFIG_FILE", None)
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install", *args]))
