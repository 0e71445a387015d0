{{- define "hami.tlsSecret" -}}{{ include "ka.componentName" (dict "root" . "component" "webhook-tls") }}{{- end -}}
{{- define "hami.webhookName" -}}{{ include "ka.componentName" (dict "root" . "component" "webhook") }}{{- end -}}
{{- define "hami.schedulerService" -}}{{ include "ka.componentName" (dict "root" . "component" "scheduler") }}{{- end -}}
{{- define "hami.certName" -}}{{ include "ka.componentName" (dict "root" . "component" "webhook-cert") }}{{- end -}}

{{/*
The webhook's failurePolicy as rendered. Fail only from Kubernetes 1.28: its matchConditions let the webhook see
only pods naming an extended resource, so a scheduler that is down refuses GPU pods and nothing else. Without them
(1.25-1.27) Fail would refuse every pod of every namespace the webhook serves while HAMi's scheduler is down:
there hami.webhook.failurePolicy=Fail is rendered as Ignore and NOTES says so. A GPU pod admitted that way keeps
the default scheduler and gets no HAMi allocation (HAMi's device plugin hands devices only to a pod HAMi's
scheduler bound and annotated; the tenant policy keeps those annotations HAMi's own).
*/}}
{{- define "hami.failurePolicy" -}}
{{- if and (eq .Values.hami.webhook.failurePolicy "Fail") (semverCompare ">=1.28-0" .Capabilities.KubeVersion.Version) -}}
Fail
{{- else -}}
Ignore
{{- end -}}
{{- end -}}

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
