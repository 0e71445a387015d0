{{- define "dra.labels" -}}
{{ include "dra.commonLabels" . }}
{{ .root.Values.poolLabelKey }}: {{ .pool | quote }}
{{- end -}}

{{/* Labels of every object of the release (a pool's objects add the pool label: dra.labels). */}}
{{- define "dra.commonLabels" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/part-of: kube-accel
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
{{- end -}}

{{/*
The CEL selector of one pool's devices: the driver's devices of the pool's type whose GPU is one of the pool's.
A DeviceClass cannot select by node; GPU UUIDs are unique, so the pool's GPUs are its devices. CEL's && is false as
soon as one side is false, so a device of another driver (no gpu.nvidia.com attributes) or of the other type (a MIG
device has no uuid of its GPU, a GPU no parentUUID) is not selected rather than an error.
*/}}
{{- define "dra.selector" -}}
{{- $attrs := printf "device.attributes['%s']" .driver -}}
{{- $uuids := list -}}
{{- range .pool.gpuUUIDs }}{{ $uuids = append $uuids (printf "'%s'" .) }}{{ end -}}
{{- $key := ternary "parentUUID" "uuid" (eq .pool.deviceType "mig") -}}
device.driver == '{{ .driver }}' && {{ $attrs }}.type == '{{ .pool.deviceType }}' && {{ $attrs }}.{{ $key }} in [{{ join ", " $uuids }}]
{{- end -}}
