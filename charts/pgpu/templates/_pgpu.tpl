{{/* Checks that JSON schema cannot express; each message names the field, the value and what is allowed. */}}
{{- define "pgpu.validate" -}}
{{- include "ka.requireRuntimeClass" . -}}
{{- if not (hasKey .Values.configs .Values.defaultConfig) -}}
{{- fail (printf "defaultConfig=%q is not a key of configs; allowed: %s" .Values.defaultConfig (keys .Values.configs | sortAlpha | join ", ")) -}}
{{- end -}}
{{- if and (not .Values.pools) (not .Values.passthrough.enabled) -}}
{{- fail "pools is empty: list the pgpu pools this release serves (it may be empty only with passthrough.enabled=true)" -}}
{{- end -}}
{{- if .Values.passthrough.enabled -}}
{{- if not .Values.passthrough.pools -}}
{{- fail "passthrough.enabled=true needs passthrough.pools: the pools whose GPUs are bound to vfio-pci" -}}
{{- end -}}
{{- range .Values.passthrough.pools -}}
{{- if has . $.Values.pools -}}
{{- fail (printf "passthrough.pools lists %q, which is also in pools: a pool's GPUs are either vfio-bound for VMs or driven by the NVIDIA driver, not both" .) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- include "pgpu.checkListStrategy" (dict "field" "deviceListStrategy" "value" .Values.deviceListStrategy) -}}
{{- range $name, $c := .Values.configs -}}
{{- if and $c $c.deviceListStrategy -}}
{{- include "pgpu.checkListStrategy" (dict "field" (printf "configs.%s.deviceListStrategy" $name) "value" $c.deviceListStrategy) -}}
{{- end -}}
{{- if and $c $c.timeSlicing (ne $c.migStrategy "none") -}}
{{- fail (printf "configs.%s.migStrategy=%q with timeSlicing: kube-accel time-slices whole GPUs only; allowed: migStrategy none with timeSlicing" $name $c.migStrategy) -}}
{{- end -}}
{{- end -}}
{{- if eq .Release.Namespace "default" -}}
{{- fail "namespace \"default\" is not allowed: install into the kube-accel namespace (--namespace kube-accel)" -}}
{{- end -}}
{{- end -}}

{{/*
A device-list strategy the NVIDIA runtime kube-accel configures accepts: roles/container_toolkit refuses
NVIDIA_VISIBLE_DEVICES from unprivileged containers, so a list of envvar alone hands allocated containers no GPU.
*/}}
{{- define "pgpu.checkListStrategy" -}}
{{- if not (or (has "volume-mounts" .value) (has "cdi-annotations" .value) (has "cdi-cri" .value)) -}}
{{- fail (printf "%s=%s: the NVIDIA runtime kube-accel configures ignores NVIDIA_VISIBLE_DEVICES in unprivileged containers (accept-nvidia-visible-devices-envvar-when-unprivileged = false), so allocated GPUs would never reach them; allowed: a list with volume-mounts, cdi-annotations or cdi-cri" .field (toJson .value)) -}}
{{- end -}}
{{- end -}}

{{/*
True when some config needs CAP_SYS_ADMIN: MIG management (nvidia-caps, and NVIDIA_MIG_MONITOR_DEVICES, which the
runtime honours in privileged containers only). Upstream's chart also adds it for volume-mounts, so that the agents'
NVIDIA_VISIBLE_DEVICES=all counts as privileged (k8s-device-plugin #856); kube-accel's agents ask for every GPU through
the volume-mount channel instead ("pgpu.allGPUsMount"), which needs no capability.
*/}}
{{- define "pgpu.needsSysAdmin" -}}
{{- $need := false -}}
{{- range $name, $c := .Values.configs -}}
{{- if ne $c.migStrategy "none" -}}{{- $need = true -}}{{- end -}}
{{- end -}}
{{- if $need }}true{{ end -}}
{{- end -}}

{{/*
Every GPU of the node for an agent (device plugin, GFD), the way the runtime reads a volume-mounts allocation: /dev/null
bind-mounted at /var/run/nvidia-container-devices/all (nvidia-container-toolkit v1.20.2 internal/config/image/
cuda_image.go requestsFromMounts; upstream's kind demo mounts the same). Only pods allowed hostPath volumes can make
this request, which Pod Security baseline refuses to tenants. NVIDIA_VISIBLE_DEVICES=all stays for runtimes that
still accept the variable.
*/}}
{{- define "pgpu.allGPUsMount" -}}
- {name: all-gpus, mountPath: /var/run/nvidia-container-devices/all, readOnly: true}
{{- end -}}
{{- define "pgpu.allGPUsVolume" -}}
- name: all-gpus
  hostPath: {path: /dev/null, type: CharDevice}
{{- end -}}

{{/*
Pod fields of the GPU agents: the NVIDIA runtime by RuntimeClass (GFD loads NVML from what the runtime injects), and
the node label the GPU Operator's mig-manager pauses during a MIG change: it waits for DaemonSet pods whose
nodeSelector has that key (mig-parted v0.15.0 pkg/mig/reconfigure/reconfigure.go:648-672).
*/}}
{{- define "pgpu.runtimeAndClientSelector" -}}
{{- with .Values.runtimeClassName }}
runtimeClassName: {{ . | quote }}
{{- end }}
{{- with .Values.gpuClientLabel }}
nodeSelector:
  {{ . }}: "true"
{{- end }}
{{- end -}}

{{/* The device plugin's v1 config file for one named config. Call with (dict "root" $ "config" $c). */}}
{{- define "pgpu.pluginConfig" -}}
version: v1
flags:
  migStrategy: {{ .config.migStrategy }}
  failOnInitError: {{ .root.Values.failOnInitError }}
  nvidiaDriverRoot: {{ .root.Values.nvidiaDriverRoot | quote }}
  plugin:
    passDeviceSpecs: {{ .root.Values.compatWithCPUManager }}
    deviceListStrategy: {{ default .root.Values.deviceListStrategy .config.deviceListStrategy | toJson }}
    deviceIDStrategy: {{ default .root.Values.deviceIDStrategy .config.deviceIDStrategy }}
{{- with .config.timeSlicing }}
sharing:
  timeSlicing:
    renameByDefault: {{ .renameByDefault | default false }}
    failRequestsGreaterThanOne: {{ .failRequestsGreaterThanOne | default false }}
    resources:
      - name: nvidia.com/gpu
        replicas: {{ .replicas }}
{{- end }}
{{- end -}}

{{/* config-manager container env; .oneshot true for the init container, false for the sidecar. */}}
{{- define "pgpu.configManagerEnv" -}}
- name: ONESHOT
  value: {{ .oneshot | quote }}
- name: KUBECONFIG
  value: ""
- name: NODE_NAME
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
- name: NODE_LABEL
  value: {{ .root.Values.configLabel | quote }}
- name: CONFIG_FILE_SRCDIR
  value: /available-configs
- name: CONFIG_FILE_DST
  value: /config/config.yaml
- name: DEFAULT_CONFIG
  value: {{ .root.Values.defaultConfig | quote }}
- name: FALLBACK_STRATEGIES
  value: named
- name: SEND_SIGNAL
  value: {{ not .oneshot | quote }}
- name: SIGNAL
  value: {{ ternary "" "1" .oneshot | quote }}
- name: PROCESS_TO_SIGNAL
  value: {{ ternary "" .process .oneshot | quote }}
{{- end -}}

{{/* True when some config time-slices its GPUs. */}}
{{- define "pgpu.timeSliced" -}}
{{- range $name, $c := .Values.configs -}}
{{- if and $c $c.timeSlicing }}true{{ end -}}
{{- end -}}
{{- end -}}
