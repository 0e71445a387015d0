{{/* Checks that JSON schema cannot express; each message names the field, the value and what is allowed. */}}
{{- define "mps.validate" -}}
{{- include "ka.requireRuntimeClass" . -}}
{{- $list := .Values.deviceListStrategy -}}
{{- if not (or (has "volume-mounts" $list) (has "cdi-annotations" $list) (has "cdi-cri" $list)) -}}
{{- fail (printf "deviceListStrategy=%s: the NVIDIA runtime kube-accel configures ignores NVIDIA_VISIBLE_DEVICES in unprivileged containers (accept-nvidia-visible-devices-envvar-when-unprivileged = false), so allocated GPUs would never reach them; allowed: a list with volume-mounts, cdi-annotations or cdi-cri" (toJson $list)) -}}
{{- end -}}
{{- if not (hasKey .Values.configs .Values.defaultConfig) -}}
{{- fail (printf "defaultConfig=%q is not a key of configs; allowed: %s" .Values.defaultConfig (keys .Values.configs | sortAlpha | join ", ")) -}}
{{- end -}}
{{- if eq .Release.Namespace "default" -}}
{{- fail "namespace \"default\" is not allowed: install into the kube-accel namespace (--namespace kube-accel)" -}}
{{- end -}}
{{- range $name, $c := .Values.configs -}}
{{- if and $c.gpuMemoryMiB (lt (int $c.gpuMemoryMiB) (int $c.replicas)) -}}
{{- fail (printf "configs.%s.gpuMemoryMiB=%d is below replicas=%d: give the GPU's memory in MiB (e.g. 24576 for an A30)" $name (int $c.gpuMemoryMiB) (int $c.replicas)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Resource advertised by a config. */}}
{{- define "mps.resourceName" -}}
{{- if .renameByDefault }}nvidia.com/gpu.shared{{ else }}nvidia.com/gpu{{ end -}}
{{- end -}}

{{/* The device plugin's v1 config file for one named MPS config. Call with (dict "root" $ "config" $c). */}}
{{- define "mps.pluginConfig" -}}
version: v1
flags:
  migStrategy: none
  failOnInitError: {{ .root.Values.failOnInitError }}
  nvidiaDriverRoot: {{ .root.Values.nvidiaDriverRoot | quote }}
  # Given explicitly: the control daemon reads it from here, not from Helm (upstream #1132).
  mpsRoot: {{ .root.Values.mps.root | quote }}
  plugin:
    deviceListStrategy: {{ .root.Values.deviceListStrategy | toJson }}
    deviceIDStrategy: {{ .root.Values.deviceIDStrategy }}
sharing:
  mps:
    renameByDefault: {{ .config.renameByDefault | default false }}
    failRequestsGreaterThanOne: {{ ternary true .config.failRequestsGreaterThanOne (kindIs "invalid" .config.failRequestsGreaterThanOne) }}
    resources:
      - name: nvidia.com/gpu
        replicas: {{ .config.replicas }}
{{- end -}}

{{/* config-manager container env; .oneshot true for the init container, false for the sidecar. */}}
{{- define "mps.configManagerEnv" -}}
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

{{/*
Every GPU of the node for the device plugin through the runtime's volume-mount channel (/dev/null at
/var/run/nvidia-container-devices/all; nvidia-container-toolkit v1.20.2 internal/config/image/cuda_image.go
requestsFromMounts), which needs no capability; only pods allowed hostPath volumes can ask this way. The control
daemon is privileged, which the runtime lets name its GPUs in NVIDIA_VISIBLE_DEVICES.
*/}}
{{- define "mps.allGPUsMount" -}}
- {name: all-gpus, mountPath: /var/run/nvidia-container-devices/all, readOnly: true}
{{- end -}}
{{- define "mps.allGPUsVolume" -}}
- name: all-gpus
  hostPath: {path: /dev/null, type: CharDevice}
{{- end -}}

{{- define "mps.configManagerContainer" -}}
- name: {{ ternary "config-manager-init" "config-manager" .oneshot }}
  image: {{ include "ka.image" (dict "root" .root "image" .root.Values.image) }}
  imagePullPolicy: {{ .root.Values.image.pullPolicy }}
  command: [config-manager]
  env:
    {{- include "mps.configManagerEnv" . | nindent 4 }}
  resources:
    {{- toYaml .root.Values.configManagerResources | nindent 4 }}
  securityContext:
    allowPrivilegeEscalation: false
    readOnlyRootFilesystem: true
    capabilities:
      drop: ["ALL"]
  volumeMounts:
    - {name: available-configs, mountPath: /available-configs, readOnly: true}
    - {name: config, mountPath: /config}
{{- end -}}
