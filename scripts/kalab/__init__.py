"""kalab, the kube-accel lab: where a node, a process or a stand-in of the lab lives. scripts/lab.py is its command
line (up, down, status, monitoring, load): argparse and calls into these modules.

  site        where a lab lives and what it is made of: paths (the checkout, .lab, the toolchain cache), Site
              (directory, cluster name, inventory), pinned versions (scripts/versions.env), the lab inventory's GPU
              hosts and their recorded GPUs (tests/data/nvml), the log, run and kubectl apply helpers
  cluster     the control plane: kwokctl --runtime binary with the locally built binaries on 127.0.0.1 (its config,
              client rate limits, node audit log), started or adopted, deleted
  nodes       node kinds: a fake GPU node per GPU host, a fake control-plane node per kube_control_plane host, the GPU
              capacity a node starts with (capacity_by_standin), applied through the API
  hosts       the podman container per GPU host
  dra         what NVIDIA's DRA driver's kubelet plugin publishes for a node of recorded GPUs: its own device
              enumeration and ResourceSlice publishing (ka-conform-dra-slices) over go-nvml's mock
  informer    a watch-backed cache of one kind of object (list, then watch), for the stand-ins
  processes   lab processes: started, waited for, found and stopped by PID (DIR/procs/NAME.pid and NAME.log); free
              ports and readiness probes on 127.0.0.1; the lab's own Python run as a process (python -m)
  standins    the stand-ins for what needs a GPU or a kubelet: HAMi's device plugin, NVIDIA's device plugin (with each
              plugin pod's upstream config-manager), the DCGM exporter; their process entry point
              (`python -m kalab.standins standin|dp-standin|exporter`)
  upstream    upstream controllers as lab processes, configured as the charts configure them: HAMi's scheduler
              extender, webhook and kube-scheduler, gpu-admission and its kube-scheduler, the GPU Operator's
              controller; the releases the cluster play computes, rendered; what `lab.py up` starts for an inventory
              (start_upstream)
  nvidia_smi  the lab host's nvidia-smi stand-in for MIG teardown (copied into a host, Python stdlib only; its
              state is the host's recorded NVML snapshot)
  monitoring  the monitoring chain on what the cluster play deployed (Prometheus, kube-state-metrics,
              prometheus-adapter, with the DCGM exporter stand-in) and the dashboard report

Imports go one way, down these layers: a module imports only from layers below its own, never from its own layer or
above, and never from scripts/lab.py (tests/unit/test_kalab_imports.py checks it; LAYERS there is this list).

  scripts/lab.py
  monitoring
  upstream
  standins
  cluster, nodes, hosts, processes, dra
  site, nvidia_smi, informer

Only the kubernetes client is imported inside the functions that use it (the heaviest import, and only node writes
and the stand-ins need it); everything else is imported at the top of its module.
"""
