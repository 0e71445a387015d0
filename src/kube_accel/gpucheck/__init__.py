"""Node-level GPU validation and sharing benchmark (``kube-accel-gpucheck``).

Read-only towards the GPU: it never changes compute mode, MIG mode, persistence mode, clocks or power limits.
MPS runs only as a private user-space daemon that the tool starts and always shuts down.
"""

# Printed when a check cannot run because there is no GPU; tests/gpu uses the same words in its skip reason.
NO_GPU_REASON = "no NVIDIA GPU/driver on this machine"
