# Copyright: kube-accel contributors
# Apache License 2.0
"""The inventory model: every ``accel_*`` variable kube-accel reads, with its scope, type and meaning.

``VARIABLES`` is the one list of known variables. The preflight reports any other ``accel_*`` name as a typo (with
a "did you mean"), the preflight role's ``meta/argument_specs.yml`` is checked against ``argument_spec()`` by the
unit tests, and the variable table of docs/inventory.md can be rendered from ``VARIABLES``.

Each entry: ``scope`` (``cluster``: group_vars/all, read by the cluster play on ``kube_control_plane[0]`` and the
same on every host; ``pool``: a pool group under ``gpu_pools``, the same on every host of the pool unless
``per_host``; ``lab``: lab and test hosts only), ``type`` (``str``, ``int``, ``float``, ``bool``, ``list``, ``dict``,
``path`` or ``raw``, enforced on the value as written: ``plan.values``), optional ``choices`` / ``elements`` /
``minimum`` / ``maximum`` / ``exclusive_minimum``, ``grammar`` (the exact grammar of the file, command line, URL or
Kubernetes name the value reaches: ``plan.values.GRAMMARS``), ``applies`` (the pool settings under which the
variable is used: set anywhere else it is refused as ignored), ``description`` and ``default``.

A variable's default and limits are defined here only: the pool model (``plan.pools.pool_settings``) and the
preflight read them from here, docs/inventory.md's variable table and the argument specs are rendered from here, and
the roles' ``| default(...)`` fallbacks are checked against them (tests/unit/test_inventory_defaults.py). A variable
without a default is required where it applies (the preflight says when) or optional with no value.
"""

from __future__ import annotations

import difflib

from ansible_collections.kube_accel.gpu.plugins.module_utils.common.constants import (
    DRA_DRIVER_VERSION,
    GPU_OPERATOR_VERSION,
    MODES,
    ROLLOUT_MAX_UNAVAILABLE,
    VGPU_BACKENDS,
)

# MPS clients per GPU. The device plugin refuses fewer than 2 replicas; NVIDIA's nvidia-cuda-mps-control(1): "For
# compute capability SM 3.5 through SM 6.0 the limit is 16 clients per GPU at a time. Compute capability SM 7.0 has a
# limit of 48." Pre-Volta GPUs are refused for MPS altogether (plan.rules), so 48 is the limit kube-accel serves.
MPS_MIN_REPLICAS = 2
MPS_MAX_REPLICAS = 48
# Time-slicing replicas per GPU. The plugin needs at least 2 (k8s-device-plugin v0.20.0 api/config/v1/replicas.go:251)
# and sets no maximum; every replica is one more pod whose CUDA context (a few hundred MiB) shares the GPU's memory
# without isolation, so kube-accel stops at 64, beyond which a pod's turn and memory share stop being useful.
TIMESLICE_MIN_REPLICAS = 2
TIMESLICE_MAX_REPLICAS = 64
# HAMi's limits as the vgpu chart's values.schema.json enforces them (hami.deviceSplitCount, deviceMemoryScaling,
# deviceCoreScaling; tests/unit/test_inventory_model.py keeps the two equal): a value the preflight passes never
# fails in Helm after the hosts changed.
HAMI_MAX_SPLIT_COUNT = 100
HAMI_MAX_SCALING = 10
# Where a pool setting is used (``applies``): set for a pool of another mode or backend it would be ignored.
PGPU = {"accel_mode": ("pgpu",)}
# MIG geometry and owner: whole-GPU pools of either kind (the device plugin's, or the DRA driver's MIG devices).
MIG_POOLS = {"accel_mode": ("pgpu", "dra")}
DRA = {"accel_mode": ("dra",)}
DRA_TIMESLICE = {"accel_mode": ("dra",), "accel_dra_sharing": ("timeslice",)}
DRA_MPS = {"accel_mode": ("dra",), "accel_dra_sharing": ("mps",)}
# The time-slice intervals of the DRA driver's TimeSlicingConfig (v0.4.1 api/nvidia.com/resource/v1beta1/sharing.go
# TimeSliceInterval: Default, Short, Medium, Long; nvidia-smi compute-policy --set-timeslice 0..3).
DRA_TIMESLICE_INTERVALS = ("Default", "Short", "Medium", "Long")
DRA_SHARINGS = ("exclusive", "timeslice", "mps")
# MPS active thread percentage of a DRA claim's clients. The driver's MpsConfig.Validate takes 0..100
# (validate.go); 0 leaves a client no SM to run on, so kube-accel asks for at least 1.
DRA_MPS_MIN_THREAD_PERCENTAGE = 1
DRA_MPS_MAX_THREAD_PERCENTAGE = 100
TIMESLICE = {"accel_mode": ("timeslice",)}
HAMI = {"accel_mode": ("vgpu",), "accel_vgpu_backend": ("hami",)}
OPERATOR = {"accel_gpu_operator_enabled": (True,)}
MONITORING = {"accel_monitoring_enabled": (True,)}


def _var(scope, type_, description, **extra):
    entry = {"scope": scope, "type": type_, "description": description}
    entry.update(extra)
    return entry


VARIABLES: dict[str, dict] = {
    # Cluster-wide (group_vars/all).
    "accel_kubeconfig": _var("cluster", "path", "Kubeconfig used to reach the cluster's API server.", grammar="path"),
    "accel_kube_context": _var("cluster", "str", "Kubeconfig context; empty uses the current context.", grammar="line"),
    "accel_kubernetes_version": _var("cluster", "str",
                                     "Kubernetes minor version of the cluster (e.g. \"1.36\"); pGPU NUMA "
                                     "alignment needs 1.30 or newer (kubelet --config-dir).",
                                     grammar="kubernetes_version"),
    "accel_kubernetes_distribution": _var("cluster", "str", "Who runs containerd on the nodes: kubeadm (a "
                                          "containerd service reading /etc/containerd, as kubeadm and kubespray "
                                          "set up) or the k3s or RKE2 service (config rendered under "
                                          "/var/lib/rancher/k3s or /var/lib/rancher/rke2): where container_toolkit "
                                          "puts the nvidia runtime and which service it restarts.",
                                          choices=["kubeadm", "k3s", "rke2"], default="kubeadm"),
    "accel_namespace": _var("cluster", "str", "Namespace for kube-accel's charts.", default="kube-accel",
                            grammar="namespace"),
    "accel_run_lock_wait": _var("cluster", "int", "Seconds a run waits for another run's lock (Lease "
                                "kube-accel-run in accel_namespace) before failing; 0 fails at once.", default=0,
                                minimum=0),
    "accel_image_registry": _var("cluster", "str", "Registry mirror prefix for every image; empty = upstream.",
                                 grammar="registry_prefix"),
    "accel_image_pull_secrets": _var("cluster", "list", "Image pull secret names for the charts.",
                                     elements="str", grammar="secret_name"),
    "accel_control_plane_cidrs": _var("cluster", "list", "Addresses (CIDRs) of the API servers and any cluster "
                                      "kube-scheduler that calls an extender: the only pod-network sources the HAMi "
                                      "webhook/extender and gpu-admission ports accept where NetworkPolicies are "
                                      "enforced.", elements="str", grammar="cidr"),
    "accel_metrics_cidrs": _var("cluster", "list", "Addresses (CIDRs) allowed to scrape the vGPU agents' metrics "
                                "ports (HAMi 9394/9395, gpu-manager's, which also serves /debug/pprof/) where "
                                "NetworkPolicies are enforced; with accel_metrics_namespaces empty too: none.",
                                elements="str",
                                grammar="cidr", default=[]),
    "accel_metrics_namespaces": _var("cluster", "list", "Namespaces whose pods may scrape those metrics ports (e.g. "
                                     "your Prometheus's), matched by their kubernetes.io/metadata.name label.",
                                     elements="str", grammar="namespace", default=[]),
    "accel_image_digests": _var("cluster", "dict", "Pull these images by digest (charts and GPU Operator operands): "
                                "\"repository:tag\" (no registry host) -> \"sha256:<64 hex>\", or \"\" to pull by "
                                "tag; wins over the shipped digests.", grammar="image_digests", default={}),
    "accel_cluster_components_on_pool_nodes": _var(
        "cluster", "bool", "Let pods holding cluster-wide tokens (schedulers, extenders, gpu-admission, certgen) run "
        "on pool nodes; only for clusters whose every node is in a pool (they then run next to privileged node "
        "agents and tenants' GPU pods).", default=False),
    "accel_rollout_max_unavailable": _var("cluster", "raw", "Node agents a device-plugin or vGPU DaemonSet restarts "
                                          "at once when its release changes (rollingUpdate.maxUnavailable): a node "
                                          "count or a percentage; running containers keep their GPUs meanwhile.",
                                          default=ROLLOUT_MAX_UNAVAILABLE, grammar="max_unavailable"),
    "accel_reboot_policy": _var("cluster", "str", "\"auto\" cordons, drains, reboots and uncordons in batches; "
                                "\"defer\" only reports hosts that need a reboot.", choices=["auto", "defer"],
                                default="defer"),
    "accel_reboot_serial": _var("cluster", "raw", "Maintenance batch size (cluster nodes that change or reboot): a "
                                "host count or a percentage (\"20%\").", default="20%",
                                grammar="reboot_serial"),
    "accel_reboot_max_fail_percentage": _var("cluster", "int", "Stop the maintenance (no further batch is "
                                             "cordoned) when more than this share of a batch fails.", default=0,
                                             minimum=0, maximum=100),
    "accel_gpu_operator_enabled": _var("cluster", "bool", "Deploy the NVIDIA GPU Operator (MIG manager, DCGM "
                                       "exporter).", default=False),
    "accel_gpu_operator_chart": _var("cluster", "str", "GPU Operator chart: an https:// repository, an oci:// "
                                     "reference or a local chart path.",
                                     default="https://helm.ngc.nvidia.com/nvidia", grammar="chart_source",
                                     applies=OPERATOR),
    "accel_gpu_operator_chart_version": _var("cluster", "str", "GPU Operator chart version.",
                                             default=GPU_OPERATOR_VERSION, grammar="chart_version", applies=OPERATOR),
    "accel_gpu_operator_chart_fallback": _var("cluster", "str", "Local GPU Operator chart (directory or .tgz on "
                                              "the cluster host) installed when accel_gpu_operator_chart "
                                              "does not answer; empty skips the install then, with a "
                                              "message.", grammar="path", applies=OPERATOR),
    "accel_gpu_operator_service_monitor": _var("cluster", "bool", "Create a Prometheus ServiceMonitor for the "
                                               "DCGM exporter (it drops the target's namespace/pod/container "
                                               "labels so that the exporter's own labels name the pod using each GPU).",
                                               default=False, applies=OPERATOR),
    "accel_gpu_operator_service_monitor_labels": _var("cluster", "dict", "Labels on the DCGM exporter's "
                                                      "ServiceMonitor, for a Prometheus that selects "
                                                      "ServiceMonitors by label (e.g. release: "
                                                      "kube-prometheus-stack).", grammar="labels", applies=OPERATOR),
    "accel_dra_driver_chart": _var("cluster", "str", "NVIDIA DRA driver chart (dra-driver-nvidia-gpu) for dra pools: "
                                   "an oci:// reference, an https:// repository or a local chart path.",
                                   default="oci://registry.k8s.io/dra-driver-nvidia/charts/dra-driver-nvidia-gpu",
                                   grammar="chart_source"),
    "accel_dra_driver_chart_version": _var("cluster", "str", "NVIDIA DRA driver chart version.",
                                           default=DRA_DRIVER_VERSION, grammar="chart_version"),
    "accel_dra_driver_chart_fallback": _var("cluster", "str", "Local DRA driver chart (directory or .tgz on the "
                                            "cluster host) installed when accel_dra_driver_chart does not answer; "
                                            "empty skips the install then, with a message.", grammar="path"),
    "accel_dra_feature_gates": _var("cluster", "dict", "The DRA driver's feature gates (name -> true/false), passed "
                                    "to its chart's featureGates. kube-accel turns no alpha gate on by itself: a dra "
                                    "pool with sharing timeslice needs TimeSlicingSettings: true, with mps "
                                    "MPSSupport: true (both alpha in v0.4.1).", grammar="dra_feature_gates",
                                    default={}),
    "accel_dra_claim_namespaces": _var("cluster", "list", "Namespaces that get each dra pool's "
                                       "ResourceClaimTemplates (a pod names a template of its own namespace only); "
                                       "empty: accel_namespace alone.", elements="str", grammar="namespace",
                                       default=[]),
    "accel_monitoring_enabled": _var("cluster", "bool", "Install charts/monitoring: Grafana dashboard, PrometheusRule "
                                     "alerts (where the Prometheus Operator's CRD exists) (docs/monitoring.md).",
                                     default=False),
    "accel_monitoring_rule_labels": _var("cluster", "dict", "Labels on the PrometheusRule, for a Prometheus that "
                                         "selects rules by label (e.g. release: kube-prometheus-stack).",
                                         grammar="labels", applies=MONITORING),
    "accel_monitoring_dashboards_namespace": _var("cluster", "str", "Namespace of the dashboard ConfigMap (one "
                                                  "Grafana's sidecar watches); empty = accel_namespace.",
                                                  grammar="namespace_or_empty", applies=MONITORING),
    "accel_monitoring_hpa_adapter_namespace": _var("cluster", "str", "prometheus-adapter's namespace: writes its "
                                                   "rules there (GPU metrics per pod for HPAs); empty = none.",
                                                   grammar="namespace_or_empty", applies=MONITORING),
    # Per pool (group_vars of a group under gpu_pools).
    "accel_pool": _var("pool", "str", "Pool name; becomes the kube-accel.io/pool node label and part of the names of "
                       "the objects kube-accel creates for the pool; required on every GPU host.", grammar="pool_name"),
    "accel_mode": _var("pool", "str", "GPU sharing mode of the pool's nodes: a device plugin's (vgpu, pgpu, mps, "
                       "timeslice) or dra (GPUs by ResourceClaim through NVIDIA's DRA driver).", choices=list(MODES),
                       choice_noun="a kube-accel mode",
                       note="MIG slices are mode pgpu or dra with accel_mig_geometry"),
    "accel_vgpu_backend": _var("pool", "str", "vGPU implementation (mode vgpu). gpu-manager needs a CUDA 11.x "
                               "driver.", choices=list(VGPU_BACKENDS), applies={"accel_mode": ("vgpu",)}),
    "accel_vgpu_split_count": _var("pool", "int", "HAMi: tasks that may share one GPU.", default=10,
                                   minimum=1, maximum=HAMI_MAX_SPLIT_COUNT, applies=HAMI),
    "accel_vgpu_memory_scaling": _var("pool", "float", "HAMi: device memory oversubscription factor.", default=1.0,
                                      exclusive_minimum=0, maximum=HAMI_MAX_SCALING, applies=HAMI),
    "accel_vgpu_core_scaling": _var("pool", "float", "HAMi: core oversubscription factor.", default=1.0,
                                    exclusive_minimum=0, maximum=HAMI_MAX_SCALING, applies=HAMI),
    "accel_vgpu_hami_unverified_driver": _var("pool", "bool", "HAMi: run on a driver branch newer than the newest "
                                              "HAMi-core's limits were verified on (docs/modes/vgpu.md \"What a HAMi "
                                              "pool promises\"); its limits may not hold.",
                                              default=False, applies=HAMI),
    "accel_vgpu_scheduler_policy": _var("pool", "str", "HAMi GPU scheduling policy.",
                                        choices=["binpack", "spread"], default="binpack", applies=HAMI),
    "accel_mps_replicas": _var("pool", "int", f"MPS: clients per GPU ({MPS_MIN_REPLICAS}..{MPS_MAX_REPLICAS}, Volta or "
                               "newer); required with accel_mode mps.", minimum=MPS_MIN_REPLICAS,
                               maximum=MPS_MAX_REPLICAS, applies={"accel_mode": ("mps",)}),
    "accel_timeslice_replicas": _var("pool", "int", "Time-slicing: pods sharing each GPU in turns "
                                     f"({TIMESLICE_MIN_REPLICAS}..{TIMESLICE_MAX_REPLICAS}); required with "
                                     "accel_mode timeslice.", minimum=TIMESLICE_MIN_REPLICAS,
                                     maximum=TIMESLICE_MAX_REPLICAS, applies=TIMESLICE),
    "accel_timeslice_rename_by_default": _var("pool", "bool", "Time-slicing: advertise the replicas as "
                                              "nvidia.com/gpu.shared (true) rather than nvidia.com/gpu.",
                                              default=True, applies=TIMESLICE),
    "accel_timeslice_fail_requests_greater_than_one": _var("pool", "bool", "Time-slicing: refuse pods asking for "
                                                           "more than one replica (true: one GPU per pod "
                                                           "in turns); false lets a pod take several "
                                                           "(oversubscription).", default=True,
                                                           applies=TIMESLICE),
    "accel_mig_strategy": _var("pool", "str", "MIG strategy (modes pgpu and dra): how the device plugin advertises "
                               "MIG devices; on dra pools (whose driver publishes each MIG device itself) single or "
                               "mixed only turns the geometry on, with the same rules.",
                               choices=["none", "single", "mixed"], default="none", applies=MIG_POOLS),
    "accel_mig_owner": _var("pool", "str", "Who applies the MIG geometry: the GPU Operator's mig-manager or the "
                            "host (systemd + mig-parted); dra pools: host.", choices=["operator", "host"],
                            default="operator", applies=MIG_POOLS),
    "accel_mig_geometry": _var("pool", "dict", "MIG profile -> count, per GPU; checked against the GPU model's "
                               "placement rules.", grammar="mig_geometry", applies=MIG_POOLS),
    "accel_dra_sharing": _var("pool", "str", "DRA: how one claim's GPU (or MIG device) is shared by the claim's "
                              "containers: exclusive, timeslice (CUDA time-slicing) or mps (an MPS control daemon "
                              "per claim); timeslice and mps need the driver's alpha gates TimeSlicingSettings and "
                              "MPSSupport in accel_dra_feature_gates.", choices=list(DRA_SHARINGS),
                              default="exclusive", applies=DRA),
    "accel_dra_timeslice_interval": _var("pool", "str", "DRA time-slicing: the time slice of each context "
                                         "(NVIDIA's names; full GPUs only, MIG devices keep the default).",
                                         choices=list(DRA_TIMESLICE_INTERVALS), default="Default",
                                         applies=DRA_TIMESLICE),
    "accel_dra_mps_active_thread_percentage": _var("pool", "int", "DRA MPS: share of the GPU's SMs each client of a "
                                                   "claim may use (percent); unset: the driver's default (100).",
                                                   minimum=DRA_MPS_MIN_THREAD_PERCENTAGE,
                                                   maximum=DRA_MPS_MAX_THREAD_PERCENTAGE, applies=DRA_MPS),
    "accel_dra_mps_pinned_memory_limit": _var("pool", "str", "DRA MPS: device memory each client of a claim may pin, "
                                              "a Kubernetes quantity such as \"10Gi\" (at least 1Mi); unset: no "
                                              "limit.", grammar="memory_quantity", applies=DRA_MPS),
    "accel_driver_branch": _var("pool", "str", "NVIDIA driver branch, e.g. \"550\" (three digits; the flavour is "
                                "accel_driver_flavor's).", default="535", grammar="driver_branch"),
    "accel_driver_source": _var("pool", "str", "Where the driver comes from: the distribution's packages, NVIDIA's "
                                "CUDA repository, or preinstalled by the host's image (DGX OS, cloud GPU images, "
                                "Packer): checked against the plan, nothing installed.",
                                choices=["distro", "cuda-repo", "preinstalled"], default="distro"),
    "accel_driver_repo_url": _var("pool", "str", "CUDA repository (or mirror) URL for driver_source cuda-repo "
                                  "(https).", grammar="https_url", applies={"accel_driver_source": ("cuda-repo",)}),
    "accel_driver_flavor": _var("pool", "str", "NVIDIA kernel modules: open (Turing and newer; the only ones "
                                "Blackwell and Grace Hopper run with) or proprietary; unset: open only where a GPU "
                                "needs them.", choices=["open", "proprietary"],
                                applies={"accel_driver_source": ("distro", "cuda-repo")}),
    "accel_container_runtime": _var("pool", "str", "Container runtime configured for the NVIDIA runtime.",
                                    choices=["containerd", "crio", "docker"], default="containerd"),
    "accel_iommu": _var("pool", "bool", "Enable the IOMMU on the kernel command line.", default=False),
    "accel_sriov_numvfs": _var("pool", "int", "SR-IOV virtual functions per GPU (0 = off); at most the GPU's "
                               "sriov_totalvfs.", default=0, minimum=0),
    "accel_sriov_method": _var("pool", "str", "How SR-IOV virtual functions are created: sriov-manage (NVIDIA's "
                               "tool, vGPU on Ampere and newer), sysfs (the kernel's sriov_numvfs); auto "
                               "picks by the GPUs' architecture.", choices=["auto", "sysfs", "sriov-manage"],
                               default="auto", applies={"accel_sriov_numvfs": "nonzero"}),
    "accel_vfio_passthrough": _var("pool", "bool", "Bind the GPUs to vfio-pci for VM passthrough (needs the "
                                   "IOMMU).", default=False),
    "accel_vfio_pci_ids": _var("pool", "list", "PCI vendor:device IDs bound to vfio-pci, \"vvvv:dddd\".",
                               elements="str", grammar="pci_id", applies={"accel_vfio_passthrough": (True,)}),
    "accel_numa_policy": _var("pool", "str", "kubelet Topology Manager policy for the pool's nodes.",
                              choices=["none", "single-numa-node", "restricted", "best-effort"], default="none"),
    "accel_node_taint": _var("pool", "bool", "Taint the pool's nodes so only GPU workloads land there.", default=False),
    "accel_hosts_fast_path": _var("pool", "bool", "Skip the host roles on a host that matches the record of its "
                                  "last full run (roles/host_state); false runs them every time.", default=True,
                                  per_host=True),
    # Lab only.
    "accel_lab": _var("lab", "bool", "The hosts are lab containers without GPUs.", default=False, per_host=True),
    "accel_lab_gpu": _var("lab", "str", "Name of the NVML snapshot (tests/data/nvml/<name>.json) a lab host "
                          "pretends to have.", grammar="file_name", per_host=True),
    "accel_nvml_snapshot": _var("lab", "path", "Path of an NVML snapshot JSON used instead of real NVML "
                                "(GPU-less lab and test hosts).", grammar="path", per_host=True),
    "accel_lab_host_runtime": _var("lab", "dict", "Stand-in for the host's cgroup_version and containerd_version, "
                                   "read instead of the host (lab containers share the lab machine's cgroup v2 and "
                                   "run no containerd).", grammar="host_runtime", per_host=True),
}

# Facts kube-accel's roles set at run time under the accel_ prefix: not inventory settings, never typos.
RUNTIME_FACTS: dict[str, str] = {
    "accel_reboot_required": "Reasons a host needs a reboot, appended by the host roles; node_reboot acts on it.",
}


def argument_spec(scopes=("cluster", "pool", "lab")) -> dict:
    """Ansible argument-spec options for the variables of the given scopes (none required)."""
    spec = {}
    for name, entry in VARIABLES.items():
        if entry["scope"] not in scopes:
            continue
        option = {"type": entry["type"], "required": False, "description": entry["description"]}
        for key in ("choices", "elements", "default"):
            if key in entry:
                option[key] = entry[key]
        spec[name] = option
    return spec


def default_of(name: str):
    """The default of a known variable; ``None`` when it has none."""
    return VARIABLES[name].get("default")


def defaults(scope: str) -> dict:
    """name -> default of every variable of one scope that has a default."""
    return {name: entry["default"] for name, entry in VARIABLES.items()
            if entry["scope"] == scope and "default" in entry}


def did_you_mean(name: str, candidates=None) -> str | None:
    """Closest known variable to a misspelt one, or ``None``."""
    pool = list(candidates if candidates is not None else VARIABLES)
    # Compare without the shared prefix, which would make every accel_* name look alike. A name without the
    # prefix is only taken for a typo when it is very close to a known name.
    bare = {known.removeprefix("accel_"): known for known in pool}
    prefixed = name.startswith("accel_")
    match = difflib.get_close_matches(name.removeprefix("accel_"), list(bare), n=1, cutoff=0.6 if prefixed else 0.85)
    return bare[match[0]] if match else None


def variables_markdown(scopes=("cluster", "pool", "lab")) -> str:
    """The variable table of docs/inventory.md and roles/preflight/README.md:
    | Variable | Scope | Type | Allowed | Default | Description |."""
    rows = ["| Variable | Scope | Type | Allowed | Default | Description |", "|---|---|---|---|---|---|"]
    for name, entry in VARIABLES.items():
        if entry["scope"] not in scopes:
            continue
        kind = entry["type"] + (f" of {entry['elements']}" if "elements" in entry else "")
        allowed = ", ".join(f"`{c}`" for c in entry.get("choices", []))
        default = f"`{_yaml_scalar(entry['default'])}`" if "default" in entry else ""
        rows.append(f"| `{name}` | {entry['scope']} | {kind} | {allowed} | {default} | {entry['description']} |")
    return "\n".join(rows) + "\n"


def _yaml_scalar(value) -> str:
    """A default as an inventory would write it (true, 0, "20%")."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return f'"{value}"' if isinstance(value, str) else str(value)
