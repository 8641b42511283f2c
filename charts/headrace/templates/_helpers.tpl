{{- define "headrace.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
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

{{- define "headrace.serviceAccountName" -}}
{{- default (include "headrace.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* Rules the operator needs in every namespace it manages. It may grant drivers only what it holds. */}}
{{- define "headrace.namespacedRules" -}}
- apiGroups: [headrace.dev]
  resources: [streamingapps, streamingsavepoints]
  verbs: [get, list, watch, patch, update]
- apiGroups: [headrace.dev]
  resources: [streamingapps/status, streamingsavepoints/status]
  verbs: [get, patch, update]
- apiGroups: [""]
  resources: [pods]
  verbs: [create, get, list, watch, delete, deletecollection, patch]
- apiGroups: [""]
  resources: [services, configmaps, secrets, serviceaccounts]
  verbs: [create, get, list, watch, delete]
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [create, get, list, delete, deletecollection]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [create, get, list, delete]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- end -}}
