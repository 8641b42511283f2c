{{- define "headrace.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "headrace.labels" -}}
app.kubernetes.io/name: headrace
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "headrace.selectorLabels" -}}
app.kubernetes.io/name: headrace
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "headrace.leaseName" -}}
{{- default (include "headrace.fullname" .) .Values.leaderElection.leaseName -}}
{{- end -}}

{{- define "headrace.serviceAccountName" -}}
{{- default (include "headrace.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/*
The namespaces the operator watches, comma-separated: empty in cluster-wide mode (every namespace),
else `watchNamespaces`, else the release namespace alone.
*/}}
{{- define "headrace.watchedNamespaces" -}}
{{- if .Values.clusterWide -}}
{{- if .Values.watchNamespaces -}}
{{- fail "clusterWide=true watches every namespace: leave watchNamespaces empty (or set clusterWide=false to watch only those)" -}}
{{- end -}}
{{- else if .Values.watchNamespaces -}}
{{- join "," .Values.watchNamespaces -}}
{{- else -}}
{{- .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{/* Whether the cluster serves the Prometheus Operator's API (ServiceMonitor, PodMonitor). */}}
{{- define "headrace.hasPrometheusOperator" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" -}}true{{- end -}}
{{- end -}}

{{/*
Rules the operator needs in every namespace it manages, call by call (operator/headrace/adapters/kube.py
and kopf's watches). The operator creates a Role for each app's driver (pods and configmaps: see
render/manifests.py), and Kubernetes lets it grant only what it holds, so those verbs appear here too.
No wildcard, no escalate, bind or impersonate: tests/chart checks that these rules are exactly what the
code needs (no more), and the real API server's authorizer that they suffice.
*/}}
{{- define "headrace.namespacedRules" -}}
- apiGroups: [headrace.dev]
  resources: [streamingapps]
  verbs: [get, list, watch, patch]
- apiGroups: [headrace.dev]
  resources: [streamingsavepoints]
  verbs: [list, watch, create, delete, patch]
- apiGroups: [headrace.dev]
  resources: [streamingapps/status]
  verbs: [update, patch]
- apiGroups: [headrace.dev]
  resources: [streamingsavepoints/status]
  verbs: [patch]
- apiGroups: [""]
  resources: [pods]
  verbs: [create, get, list, watch, delete, deletecollection, patch]
- apiGroups: [""]
  resources: [services]
  verbs: [create, list, delete]
- apiGroups: [""]
  resources: [pods/log]
  verbs: [get]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [create, get, list, delete, update]
- apiGroups: [""]
  resources: [secrets]
  verbs: [create, get, patch]
- apiGroups: [""]
  resources: [serviceaccounts]
  verbs: [create, patch]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [create]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [create, patch]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [create, patch]
- apiGroups: [""]
  resources: [events]
  verbs: [create]
# Every app's driver Lease: created here, read by the fence for lost nodes; update only because the driver's Role
# grants it (on its own Lease by name), and Kubernetes lets the operator grant only what it holds.
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [create, get, update]
{{- end -}}
