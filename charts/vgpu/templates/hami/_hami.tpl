{{- define "hami.tlsSecret" -}}{{ include "ka.componentName" (dict "root" . "component" "webhook-tls") }}{{- end -}}
{{- define "hami.webhookName" -}}{{ include "ka.componentName" (dict "root" . "component" "webhook") }}{{- end -}}
{{- define "hami.schedulerService" -}}{{ include "ka.componentName" (dict "root" . "component" "scheduler") }}{{- end -}}
{{- define "hami.certName" -}}{{ include "ka.componentName" (dict "root" . "component" "webhook-cert") }}{{- end -}}

{{/* HAMi's device config, read by the scheduler extender and the device plugin alike. */}}
{{- define "hami.deviceConfig" -}}
nvidia:
  resourceCountName: {{ .Values.hami.resourceNames.count }}
  resourceMemoryName: {{ .Values.hami.resourceNames.memory }}
  resourceMemoryPercentageName: {{ .Values.hami.resourceNames.memoryPercentage }}
  resourceCoreName: {{ .Values.hami.resourceNames.cores }}
  resourcePriorityName: {{ .Values.hami.resourceNames.priority }}
  overwriteEnv: {{ .Values.hami.overwriteEnv }}
  defaultMemory: 0
  defaultCores: 0
  defaultGPUNum: 1
  memoryFactor: 1
  deviceSplitCount: {{ .Values.hami.deviceSplitCount }}
  deviceMemoryScaling: {{ .Values.hami.deviceMemoryScaling }}
  deviceCoreScaling: {{ .Values.hami.deviceCoreScaling }}
  gpuCorePolicy: {{ .Values.hami.gpuCorePolicy }}
  runtimeClassName: ""
{{- end -}}
