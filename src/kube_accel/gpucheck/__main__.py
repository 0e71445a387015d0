"""``python -m kube_accel.gpucheck`` runs the same CLI as the ``kube-accel-gpucheck`` console script."""

import sys

from .cli import main

sys.exit(main())
