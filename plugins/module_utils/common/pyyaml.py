# Copyright: kube-accel contributors
# Apache License 2.0
"""PyYAML for kube-accel's module_utils, imported in one place: on a managed host it may be missing, and the modules
that need it report that with ``missing_required_lib("PyYAML")`` and ``YAML_IMPORT_ERROR`` instead of a traceback."""

from __future__ import annotations

import traceback

try:
    import yaml
except ImportError:
    yaml = None
    YAML_IMPORT_ERROR = traceback.format_exc()
else:
    YAML_IMPORT_ERROR = None

# libyaml's parser when PyYAML has it (same safe subset): the pure-Python one spends about 0.3 s per release
# reading back and comparing the manifests.
SAFE_LOADER = getattr(yaml, "CSafeLoader", None) or getattr(yaml, "SafeLoader", None)
