{{/*
Helpers shared by the kube-accel charts. Each chart carries an identical copy of this file
(tests/charts/test_charts_static.py keeps them in sync) instead of a library chart, so the charts
need no `helm dependency build` step and install from a plain checkout or an air-gapped mirror.
*/}}

{{- define "ka.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Release names such as kube-accel-pgpu already contain the chart name: do not repeat it. */}}
{{- define "ka.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "ka.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "ka.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* "<fullname>-<suffix>", kept within the 63 characters of a DNS label. */}}
{{- define "ka.componentName" -}}
{{- printf "%s-%s" (include "ka.fullname" .root) .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ka.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels: immutable on DaemonSets/Deployments, so no version in here. Call with (dict "root" $ "component" "x"). */}}
{{- define "ka.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ka.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "ka.labels" -}}
{{ include "ka.selectorLabels" . }}
helm.sh/chart: {{ include "ka.chart" .root }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/part-of: kube-accel
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
{{- end -}}

{{/*
Pod template labels: ka.labels without helm.sh/chart. The chart's own version changes with every kube-accel release;
in a pod template it would roll every DaemonSet (device plugins, MPS control daemons under their clients) on an
upgrade that changes nothing they run. The upstream version (app.kubernetes.io/version) stays: it changes their image.
*/}}
{{- define "ka.podLabels" -}}
{{ include "ka.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/part-of: kube-accel
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
{{- end -}}

{{/*
Image reference from {registry, repository, tag, digest}; global.imageRegistry replaces every registry
so an air-gapped site pulls everything from one mirror. Call with (dict "root" $ "image" .Values.image).
The digest pins the image: global.imageDigests["repository:tag"] (the site's, from the inventory's
accel_image_digests; "" pulls by tag) wins over the image's own digest; no digest pulls by tag.
*/}}
{{- define "ka.image" -}}
{{- $registry := default .image.registry .root.Values.global.imageRegistry -}}
{{- $ref := .image.repository -}}
{{- if $registry -}}{{- $ref = printf "%s/%s" $registry .image.repository -}}{{- end -}}
{{- $digest := include "ka.imageDigest" . -}}
{{- if $digest -}}
{{- printf "%s@%s" $ref $digest -}}
{{- else -}}
{{- printf "%s:%s" $ref (toString .image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The digest ka.image pulls an image by ("": by tag). Same arguments as ka.image. */}}
{{- define "ka.imageDigest" -}}
{{- $digest := .image.digest -}}
{{- $site := .root.Values.global.imageDigests | default dict -}}
{{- $key := printf "%s:%s" .image.repository (toString .image.tag) -}}
{{- if hasKey $site $key -}}{{- $digest = index $site $key -}}{{- end -}}
{{- $digest -}}
{{- end -}}

{{/*
checkov skips CKV_K8S_43 (images by digest) and CKV_K8S_15 (pull policy Always) for a pod with an image pulled by
tag, and nothing when every image is pulled by digest: both checks pass then, and a skip would claim a failure that
is not there (tests/charts/test_lint_and_checkov.py). Call with (dict "root" $ "images" (list image ...)).
*/}}
{{- define "ka.digestSkips" -}}
{{- $tags := list -}}
{{- range .images -}}
{{- if not (include "ka.imageDigest" (dict "root" $.root "image" .)) -}}
{{- $tags = append $tags (printf "%s:%s" .repository (toString .tag)) -}}
{{- end -}}
{{- end -}}
{{- if $tags }}
checkov.io/skip-digest: CKV_K8S_43=pulled by tag ({{ join ", " $tags }}) - no digest is set for it; values.yaml says whether upstream publishes one; pin it with the image's digest or global.imageDigests (accel_image_digests)
checkov.io/skip-pull-policy: CKV_K8S_15=IfNotPresent so an air-gapped mirror is not asked at every start; only a digest pin (see CKV_K8S_43) makes the node's copy the pinned image
{{- end }}
{{- end -}}

{{- define "ka.imagePullSecrets" -}}
{{- with .Values.global.imagePullSecrets }}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
Required node affinity on the product's pool label: a release serves exactly the pools listed in
`pools` (or the list passed as .pools). The label key comes from values (default kube-accel.io/pool,
the same constant as plugins/module_utils/common/constants.py). Extra match expressions (.extra) are ANDed.
*/}}
{{- define "ka.poolAffinity" -}}
nodeAffinity:
  requiredDuringSchedulingIgnoredDuringExecution:
    nodeSelectorTerms:
      - matchExpressions:
          - key: {{ .root.Values.poolLabelKey | quote }}
            operator: In
            values:
              {{- range (default .root.Values.pools .pools) }}
              - {{ . | quote }}
              {{- end }}
          {{- range .extra }}
          - {{ toYaml . | nindent 12 | trim }}
          {{- end }}
{{- end -}}

{{/* Pod-level defaults for components that are not privileged. */}}
{{- define "ka.restrictedContainerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/*
Ingress-only NetworkPolicy for every pod of the release: node agents and tests accept no traffic,
except metric ports named in .ports (from .from, a list of NetworkPolicyPeers). Egress stays open:
components talk to the API server, whose address a NetworkPolicy cannot name portably.
*/}}
{{- define "ka.networkPolicy" -}}
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
  {{- if .ports }}
  ingress:
    - ports:
        {{- range .ports }}
        - {protocol: TCP, port: {{ . }}}
        {{- end }}
      {{- with .from }}
      from:
        {{- toYaml . | nindent 8 }}
      {{- end }}
  {{- else }}
  ingress: []
  {{- end }}
{{- end -}}

{{/*
Fails the install before any pod is refused when runtimeClassName names a RuntimeClass the cluster lacks (the API
server would reject every pod, and helm --wait would only time out). lookup answers only against a live cluster:
offline rendering (helm template, helm lint) has nothing to ask and skips the check.
*/}}
{{- define "ka.requireRuntimeClass" -}}
{{- $name := .Values.runtimeClassName | default "" -}}
{{- if and $name (lookup "v1" "Namespace" "" "kube-system") (not (lookup "node.k8s.io/v1" "RuntimeClass" "" $name)) -}}
{{- fail (printf "runtimeClassName=%q: no such RuntimeClass in the cluster, so every pod of this release would be refused; kube-accel's cluster play creates it (roles/pool_charts), or create a RuntimeClass %q with handler nvidia, or set runtimeClassName=\"\" where nvidia is the default runtime" $name $name) -}}
{{- end -}}
{{- end -}}

{{/*
updateStrategy of a node agent whose restart leaves running containers alone (a device plugin, GFD): rollingUpdate
.maxUnavailable nodes (a count, or a percentage of the DaemonSet's nodes rounded up) restart at once.
*/}}
{{- define "ka.rollingUpdate" -}}
updateStrategy:
  type: RollingUpdate
  rollingUpdate:
    maxUnavailable: {{ .Values.rollingUpdate.maxUnavailable | toJson }}
{{- end -}}
