{{/* gpu-admission's filter, as a KubeSchedulerConfiguration extender (the Policy API it shipped with is gone). */}}
{{- define "gpumanager.extenders" -}}
extenders:
  # Filter only (no prioritize, no bind); it must be the last extender of the profile's scheduler.
  - urlPrefix: {{ printf "http://%s.%s.svc:%d/scheduler" .admission .root.Release.Namespace (int .root.Values.gpuManager.admission.port) }}
    filterVerb: predicates
    enableHTTPS: false
    nodeCacheCapable: false
    ignorable: false
    weight: 1
    managedResources:
      - {name: tencent.com/vcuda-core, ignoredByScheduler: false}
      - {name: tencent.com/vcuda-memory, ignoredByScheduler: false}
{{- end -}}
