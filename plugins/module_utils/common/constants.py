# Copyright: kube-accel contributors
# Apache License 2.0
"""Product constants shared by modules, filters, lab scripts and tests: each defined here once."""

from __future__ import annotations

# Every node label kube-accel sets lives under this prefix (charts receive it through values).
LABEL_PREFIX = "kube-accel.io"

MODES = ("vgpu", "pgpu", "mps", "timeslice", "dra")
VGPU_BACKENDS = ("hami", "gpu-manager")
# rollingUpdate.maxUnavailable of the node agent DaemonSets (charts/{pgpu,mps,vgpu} defaults, the inventory's
# accel_rollout_max_unavailable): restarting an agent leaves running containers' GPUs alone, and one node at a time
# would outlast helm's --wait on hundreds of nodes.
ROLLOUT_MAX_UNAVAILABLE = "10%"
# The NVIDIA DRA driver release kube-accel's dra pools are written for (kubernetes-sigs/dra-driver-nvidia-gpu, archive
# ../shared/upstream/dra-driver-nvidia-gpu-v0.4.1.tar.gz): its chart version, its driver name (DeviceClasses select
# devices by it) and the API group of its opaque configs (api/nvidia.com/resource/v1beta1 register.go).
DRA_DRIVER_VERSION = "0.4.1"
DRA_DRIVER_NAME = "gpu.nvidia.com"
DRA_CONFIG_API_VERSION = "resource.nvidia.com/v1beta1"
# Every feature gate the v0.4.1 driver registers, name -> (default, stage): its own (pkg/featuregates/featuregates.go
# defaultFeatureGates) and the logging gates of k8s.io/component-base it adds (logs/api/v1/kube_features.go,
# logsapi.AddFeatureGates). Any other name makes the driver's components exit at start ("unrecognized feature gate").
DRA_FEATURE_GATES = {
    "TimeSlicingSettings": (False, "Alpha"),
    "MPSSupport": (False, "Alpha"),
    "IMEXDaemonsWithDNSNames": (True, "Beta"),
    "PassthroughSupport": (False, "Alpha"),
    "NVMLDeviceHealthCheck": (False, "Alpha"),
    "DynamicMIG": (False, "Alpha"),
    "ComputeDomainCliques": (True, "Beta"),
    "CrashOnNVLinkFabricErrors": (True, "Beta"),
    "DeviceMetadata": (False, "Alpha"),
    "ContextualLogging": (True, "Beta"),
    "LoggingAlphaOptions": (False, "Alpha"),
    "LoggingBetaOptions": (True, "Beta"),
}
# The driver's checks between gates (featuregates.go ValidateFeatureGates; its components refuse to start otherwise):
# (gate, gate it requires) and (gate, gate it excludes).
DRA_FEATURE_GATE_REQUIRES = (("ComputeDomainCliques", "IMEXDaemonsWithDNSNames"),
                             ("DeviceMetadata", "PassthroughSupport"))
DRA_FEATURE_GATE_EXCLUDES = (("DynamicMIG", "PassthroughSupport"), ("DynamicMIG", "NVMLDeviceHealthCheck"),
                             ("DynamicMIG", "MPSSupport"), ("PassthroughSupport", "NVMLDeviceHealthCheck"))
# The NVIDIA GPU Operator release kube-accel's operator values are written for (helm.operator_values).
GPU_OPERATOR_VERSION = "v26.7.0"
# The oldest Kubernetes kube-accel supports: every chart's kubeVersion floor (charts/*/Chart.yaml; kept equal by
# tests/charts/test_chart_constants.py), checked by the preflight before any host changes.
MIN_KUBERNETES = (1, 25)

# Kubernetes object names kube-accel derives from a pool name (``{pool}``): the preflight refuses a pool name that
# would make any of them invalid (plan.values "pool_name"), so none is truncated or refused by the API server.
POOL_DERIVED_NAMES = {
    "verify Job": "kube-accel-verify-{pool}",
}

# The ConfigMap (in accel_namespace) where the cluster play records the Helm releases kube-accel owns, so that a later
# run (or version) removes those no pool or setting needs any more (helm.ownership).
OWNERSHIP_CONFIGMAP = "kube-accel-owned"

# Product labels, by short name.
LABELS = {
    "pool": f"{LABEL_PREFIX}/pool",
    "mode": f"{LABEL_PREFIX}/mode",
    "vgpu_backend": f"{LABEL_PREFIX}/vgpu-backend",
    "managed": f"{LABEL_PREFIX}/managed",
    # "true" on the nodes of dra pools: the DRA driver's kubelet plugin runs there only (its nodeSelector).
    "dra": f"{LABEL_PREFIX}/dra",
}

# Node annotations kube-accel writes during rolling maintenance (cluster.maintenance): who cordoned the node and why
# (present only while kube-accel's own cordon holds), and what the last maintenance checked before uncordoning.
ANNOTATIONS = {
    "cordoned_by": f"{LABEL_PREFIX}/cordoned-by",
    "last_maintenance": f"{LABEL_PREFIX}/last-maintenance",
}

# Labels that upstream components read; kube-accel writes them, so it also owns their removal.
UPSTREAM_LABELS = {
    "gpu_present": "nvidia.com/gpu.present",
    "device_plugin_config": "nvidia.com/device-plugin.config",
    "mps_capable": "nvidia.com/mps.capable",
    "deploy_device_plugin": "nvidia.com/gpu.deploy.device-plugin",
    "mig_config": "nvidia.com/mig.config",
    # Without NFD, the GPU Operator keeps nvidia.com/gpu.present=true (and its gpu.deploy.* labels) only on nodes
    # that carry one of NFD's NVIDIA PCI labels (gpu-operator v26.7.0 controllers/state_manager.go gpuNodeLabels):
    # kube-accel sets the one NFD itself would set with the operator's NFD settings.
    "nfd_pci_nvidia": "feature.node.kubernetes.io/pci-10de.present",
    # GFD's label: "true" where the operator's MIG manager owns the MIG layout, "false" on every other pool. Absent,
    # the operator takes any node whose nvidia.com/gpu.product names an A100, A30 or H100 for MIG capable
    # (gpu-operator v26.7.0 controllers/state_manager.go hasMIGCapableGPU), deploys its MIG manager there and sets
    # nvidia.com/mig.config=all-disabled (found by running the operator in the lab).
    "mig_capable": "nvidia.com/mig.capable",
    # "true" on the pools whose MIG layout the operator owns, as the operator sets it; removed elsewhere, which the
    # operator never does itself (state_manager.go removeGPUStateLabels keeps it on container nodes).
    "deploy_mig_manager": "nvidia.com/gpu.deploy.mig-manager",
    # "false": the operator runs none of its operands on the node (VM passthrough: the GPUs have no driver).
    "deploy_operands": "nvidia.com/gpu.deploy.operands",
    # GPU Operator mig-manager pauses GPU clients that select on it during a MIG change (charts/pgpu gpuClientLabel).
    "deploy_client": "nvidia.com/gpu.deploy.client",
}
# NFD's OS labels (its system source reads /etc/os-release). Without NFD, a ClusterPolicy whose cluster has GPU
# nodes without them stops at "failed to retrieve GPU node OS info" and deploys no operand at all (gpu-operator
# v26.7.0 controllers/state_manager.go getGPUNodeOSInfo; found by running the operator in the lab). The cluster play
# sets them from the host's os-release as the preflight read it, and never removes them: NFD, where it runs, writes
# the same values from the same file.
NFD_OS_LABELS = {
    "id": "feature.node.kubernetes.io/system-os_release.ID",
    "version_id": "feature.node.kubernetes.io/system-os_release.VERSION_ID",
}
# The value mig-manager gives a deploy label while it reconfigures MIG (mig-parted v0.15.0
# pkg/mig/reconfigure/reconfigure.go:581-586); it restores "true" afterwards, so kube-accel never overwrites it.
MIG_PAUSED_VALUE = "paused-for-mig-change"
# The MIG geometry a kube-accel plan put on a host (either owner), written by roles/mig (mig_record_file): a later plan
# without MIG turns MIG off only where this says kube-accel turned it on, and the preflight accepts GPUs with MIG on
# in a pool without a MIG plan only then (plan.rules rule_mig_left_on); elsewhere MIG was someone else's choice.
MIG_RECORD_FILE = "/etc/kube-accel/mig-geometry"
# RuntimeClass of the NVIDIA container runtime (handler "nvidia", roles/container_toolkit), created by the cluster play.
RUNTIME_CLASS = "nvidia"

# Extended resources each mode advertises.
RESOURCES = {
    "pgpu": "nvidia.com/gpu",
    "mps": "nvidia.com/gpu",
    # Time-slicing with renameByDefault: the plugin appends ".shared" (k8s-device-plugin v0.20.0
    # api/config/v1/consts.go:26, resources.go:89); without it the replicas count as nvidia.com/gpu.
    "timeslice": "nvidia.com/gpu",
    "timeslice_shared": "nvidia.com/gpu.shared",
    "vgpu_core_gpu_manager": "tencent.com/vcuda-core",
    "vgpu_memory_gpu_manager": "tencent.com/vcuda-memory",
    "vgpu_hami": "nvidia.com/gpu",
    "vgpu_hami_memory": "nvidia.com/gpumem",
    "vgpu_hami_cores": "nvidia.com/gpucores",
}

# GPU-Manager's contract: vcuda-memory counts 256 MiB units; vcuda-core counts 1/100 of a GPU.
VCUDA_MEMORY_UNIT_MIB = 256
VCUDA_CORES_PER_GPU = 100


def label(name: str) -> str:
    """Full product label key for a short name, e.g. ``pool`` -> ``kube-accel.io/pool``."""
    try:
        return LABELS[name]
    except KeyError:
        raise KeyError(f"unknown kube-accel label {name!r}; known: {', '.join(sorted(LABELS))}") from None
