{{/* Checks that JSON schema cannot express; each message names the field, the value and what is allowed. */}}
{{- define "vgpu.validate" -}}
{{- if eq .Release.Namespace "default" -}}
{{- fail "namespace \"default\" is not allowed: install into the kube-accel namespace (--namespace kube-accel)" -}}
{{- end -}}
{{- if eq .Values.backend "gpu-manager" -}}
{{- $core := int .Values.gpuManager.test.vcudaCore -}}
{{- if and (gt $core 100) (ne (mod $core 100) 0) -}}
{{- fail (printf "gpuManager.test.vcudaCore=%d is invalid: 1..99 asks for a fraction of one GPU, 100 or more must be a multiple of 100 (whole GPUs)" $core) -}}
{{- end -}}
{{- if contains "dockershim" .Values.gpuManager.containerRuntimeEndpoint -}}
{{- fail (printf "gpuManager.containerRuntimeEndpoint=%s: dockershim was removed in Kubernetes 1.24; use the CRI socket, e.g. /run/containerd/containerd.sock" .Values.gpuManager.containerRuntimeEndpoint) -}}
{{- end -}}
{{- range .Values.gpuManager.extraFlags -}}
{{- if or (hasPrefix "--container-runtime-endpoint" .) (hasPrefix "--cgroup-driver" .) -}}
{{- fail (printf "gpuManager.extraFlags has %q: set gpuManager.containerRuntimeEndpoint / gpuManager.cgroupDriver instead" .) -}}
{{- end -}}
{{- /* gpu-manager labels its node with these (cmd/manager/app/app.go:70-79); the node-agent policy allows exactly them. */ -}}
{{- if and (hasPrefix "--node-labels" .) (not (hasPrefix "--node-labels=" .)) -}}
{{- fail (printf "gpuManager.extraFlags has %q: write --node-labels=key=value,... as one entry (the node-agent policy reads the keys from it)" .) -}}
{{- end -}}
{{- if hasPrefix "--node-labels=" . -}}
{{- range (trimPrefix "--node-labels=" .) | splitList "," -}}
{{- $key := . | splitList "=" | first -}}
{{- if and . (or (contains "kubernetes.io/" $key) (contains "k8s.io/" $key) (hasPrefix (printf "%s/" (dir $.Values.poolLabelKey)) $key)) -}}
{{- fail (printf "gpuManager.extraFlags --node-labels has %q: gpu-manager may not set labels under kubernetes.io/, k8s.io/ (NodeRestriction's and the kubelet's) or %s/ (kube-accel's pools); use a key of your own domain" $key (dir $.Values.poolLabelKey)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if eq .Values.backend "hami" -}}
{{- if and .Values.hami.webhook.certManagerIssuer (ne .Values.hami.webhook.certs "cert-manager") -}}
{{- fail (printf "hami.webhook.certManagerIssuer=%q is only used with hami.webhook.certs=cert-manager (now %q)" .Values.hami.webhook.certManagerIssuer .Values.hami.webhook.certs) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Extra node-affinity expressions of node agents: keep off nodes where the GPU Operator runs its device plugin. */}}
{{- define "vgpu.agentAffinity" -}}
{{- $extra := list -}}
{{- if .Values.gpuOperator.disableDevicePlugin -}}
{{- $extra = list (dict "key" .Values.gpuOperator.deployLabel "operator" "NotIn" "values" (list "true")) -}}
{{- end -}}
{{- include "ka.poolAffinity" (dict "root" . "extra" $extra) -}}
{{- end -}}

{{/* kube-scheduler image: the tag follows the cluster version unless set (v1.36.1+k3s1 -> v1.36.1). */}}
{{- define "vgpu.kubeSchedulerImage" -}}
{{- include "ka.image" (dict "root" . "image" (fromYaml (include "vgpu.kubeSchedulerImageSpec" .))) -}}
{{- end -}}

{{/* kubeScheduler.image with its tag resolved (YAML), for ka.image and ka.digestSkips. */}}
{{- define "vgpu.kubeSchedulerImageSpec" -}}
{{- $img := deepCopy .Values.kubeScheduler.image -}}
{{- if not $img.tag -}}
{{- $_ := set $img "tag" (regexFind "^v?[0-9]+\\.[0-9]+\\.[0-9]+" .Capabilities.KubeVersion.Version) -}}
{{- if not (hasPrefix "v" $img.tag) }}{{ $_ := set $img "tag" (printf "v%s" $img.tag) }}{{ end -}}
{{- end -}}
{{- toYaml $img -}}
{{- end -}}

{{/*
RBAC of a second kube-scheduler (both backends). Call with (dict "root" $ "component" "scheduler" "lease" name "leaderElect" bool).
Built-in roles carry the scheduler's usual permissions; only the leader-election Lease of its own name needs a Role.
*/}}
{{- define "vgpu.schedulerRBAC" -}}
{{- $name := include "ka.componentName" (dict "root" .root "component" .component) -}}
{{- $ns := .root.Release.Namespace -}}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ $name }}
  namespace: {{ $ns }}
  labels:
    {{- include "ka.labels" . | nindent 4 }}
automountServiceAccountToken: false
{{- range $role := list "system:kube-scheduler" "system:volume-scheduler" }}
---
# Built-in ClusterRole {{ $role }}: what any kube-scheduler needs (watch pods/nodes/PVs, bind pods, events).
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ printf "%s-%s" $name (trimPrefix "system:" $role) | trunc 63 | trimSuffix "-" }}
  labels:
    {{- include "ka.labels" $ | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ $role }}
subjects:
  - {kind: ServiceAccount, name: {{ $name }}, namespace: {{ $ns }}}
{{- end }}
---
# Reads the API server's client-CA ConfigMap in kube-system to authenticate requests to its own endpoints.
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ printf "%s-auth-reader" $name | trunc 63 | trimSuffix "-" }}
  namespace: kube-system
  labels:
    {{- include "ka.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: extension-apiserver-authentication-reader
subjects:
  - {kind: ServiceAccount, name: {{ $name }}, namespace: {{ $ns }}}
{{- if .leaderElect }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ $name }}
  namespace: {{ $ns }}
  labels:
    {{- include "ka.labels" . | nindent 4 }}
rules:
  # Leader election (client-go's LeaseLock: get, create, update; tests/conformance/test_scheduler_rbac.py keeps
  # the file:line table): system:kube-scheduler only covers the Lease named kube-scheduler.
  - apiGroups: [coordination.k8s.io]
    resources: [leases]
    verbs: [create]
  - apiGroups: [coordination.k8s.io]
    resources: [leases]
    resourceNames: [{{ .lease }}]
    verbs: [get, update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $name }}
  namespace: {{ $ns }}
  labels:
    {{- include "ka.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ $name }}
subjects:
  - {kind: ServiceAccount, name: {{ $name }}, namespace: {{ $ns }}}
{{- end }}
{{- end -}}

{{/* The kube-scheduler container of a second scheduler. */}}
{{- define "vgpu.kubeSchedulerContainer" -}}
- name: kube-scheduler
  image: {{ include "vgpu.kubeSchedulerImage" . }}
  imagePullPolicy: {{ .Values.kubeScheduler.image.pullPolicy }}
  command:
    - kube-scheduler
    - --config=/etc/kube-accel/scheduler/config.yaml
    # Self-signed serving certificates go to an emptyDir: the root filesystem is read-only.
    - --cert-dir=/var/run/kube-scheduler
    - --v=2
  livenessProbe:
    httpGet: {path: /healthz, port: 10259, scheme: HTTPS}
    initialDelaySeconds: 15
  readinessProbe:
    httpGet: {path: /healthz, port: 10259, scheme: HTTPS}
  resources:
    {{- toYaml .Values.kubeScheduler.resources | nindent 4 }}
  securityContext:
    {{- include "ka.restrictedContainerSecurityContext" . | nindent 4 }}
  volumeMounts:
    - {name: scheduler-config, mountPath: /etc/kube-accel/scheduler, readOnly: true}
    - {name: scheduler-certs, mountPath: /var/run/kube-scheduler}
{{- end -}}

{{/*
Ingress-only NetworkPolicy with one rule per entry of .rules: {ports: [..], from: [peers], open: bool}.
A rule with no peers and open=false admits nobody (the port stays closed to the pod network); open=true with no
peers admits any source (metricsFrom: [] keeps metrics open, as documented). Egress stays open (the API
server's address is not portable).
*/}}
{{- define "vgpu.networkPolicy" -}}
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: {{ include "ka.componentName" (dict "root" .root "component" .component) }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "ka.labels" (dict "root" .root "component" .component) | nindent 4 }}
spec:
  podSelector:
    matchLabels:
      {{- include "ka.selectorLabels" (dict "root" .root "component" .component) | nindent 6 }}
  policyTypes: [Ingress]
  {{- $rules := list }}
  {{- range .rules }}{{ if or .from .open }}{{ $rules = append $rules . }}{{ end }}{{ end }}
  {{- if $rules }}
  ingress:
    {{- range $rules }}
    - ports:
        {{- range .ports }}
        - {protocol: TCP, port: {{ . }}}
        {{- end }}
      {{- with .from }}
      from:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    {{- end }}
  {{- else }}
  ingress: []
  {{- end }}
{{- end -}}

{{/*
Placement of the pods that hold cluster-wide tokens (the schedulers with HAMi's extender and webhook, gpu-admission,
the certgen Jobs): never a node of any kube-accel pool (node label poolLabelKey), where privileged node agents and
tenants' GPU pods run and a container escape would reach those tokens; they tolerate the control-plane taint, the
usual home of cluster components. clusterComponents.avoidPoolNodes false lifts the rule (a cluster whose every
node is in a pool). Call with the root context; renders pod-spec keys.
*/}}
{{- define "vgpu.clusterComponentPlacement" -}}
{{- if .Values.clusterComponents.avoidPoolNodes }}
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
        - matchExpressions:
            - {key: {{ .Values.poolLabelKey | quote }}, operator: DoesNotExist}
{{- end }}
{{- with .Values.clusterComponents.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
