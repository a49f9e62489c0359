{{- define "ensemble-operator.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ensemble-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "ensemble-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ensemble-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "ensemble-operator.labels" -}}
{{ include "ensemble-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "ensemble-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "ensemble-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "ensemble-operator.webhookService" -}}
{{- printf "%s-webhook" (include "ensemble-operator.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ensemble-operator.controlKeySecret" -}}
{{- printf "%s-control-key" (include "ensemble-operator.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ensemble-operator.webhookSecret" -}}
{{- printf "%s-webhook-tls" (include "ensemble-operator.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Rules shared by the namespaced Roles and the ClusterRole: only what kube.py and kopf use. */}}
{{- define "ensemble-operator.namespacedRules" -}}
- apiGroups: ["serving.ensemble.dev"]
  resources: ["ensembles", "models"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["serving.ensemble.dev"]
  resources: ["ensembles/status", "models/status"]
  verbs: ["get", "patch"]
- apiGroups: [""]
  resources: ["configmaps", "services"]
  verbs: ["get", "list", "watch", "create", "patch"]  # list/watch: an owned object deleted or changed by hand is restored at once
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "patch"]  # list/watch: readiness reaches the status by watch
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "watch", "create", "patch"]
- apiGroups: ["autoscaling"]
  resources: ["horizontalpodautoscalers"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch", "patch"]  # patch: the config-hash annotation that makes the kubelet refresh repository.json
- apiGroups: ["", "events.k8s.io"]
  resources: ["events"]
  verbs: ["create"]
- apiGroups: ["authorization.k8s.io"]
  resources: ["localsubjectaccessreviews"]
  verbs: ["create"]  # admission: may the requesting user use the Secrets / service accounts a spec names
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["create", "patch"]  # each Ensemble's control-token Secret: written, never read (no get/list/watch)
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]  # the runtime pods' NetworkPolicy (networkPolicy.enabled)
{{- end -}}
