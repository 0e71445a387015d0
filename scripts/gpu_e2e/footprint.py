"""Where scripts/gpu-e2e.sh keeps everything it writes (its ``E=``), read from the script: its one definition. The
bundle's build needs it too: the rendered inventories name the cluster's kubeconfig there, and the AnsiballZ
payloads of modules.yml carry their paths under it."""

from __future__ import annotations

import re
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "gpu-e2e.sh"
E2E_ROOT = re.search(r"^E=(/\S+)$", SCRIPT.read_text(), re.M)[1]
