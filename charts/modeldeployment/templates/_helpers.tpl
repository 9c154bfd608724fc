{{/* Names are fixed: the webhooks, the CompositeController and the RBAC objects are cluster-wide, so one release per cluster. */}}
{{- define "md.name" -}}modeldeployment-operator{{- end -}}

{{- define "md.namespace" -}}{{ default .Release.Namespace .Values.namespaceOverride }}{{- end -}}

{{- define "md.selectorLabels" -}}
app.kubernetes.io/name: {{ include "md.name" . }}
{{- end -}}

{{/* Every object's labels: the selector label (as in manifests/) and Helm's standard ones. */}}
{{- define "md.labels" -}}
{{ include "md.selectorLabels" . }}
{{ include "md.helmLabels" . }}
{{- end -}}

{{/* Helm's standard labels alone: for the objects manifests/ leaves unlabelled (Issuers, Certificates, the CompositeController). */}}
{{- define "md.helmLabels" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "md.image" -}}{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}{{- end -}}

{{- define "md.certificateName" -}}{{ include "md.name" . }}-webhook{{- end -}}

{{/* The webhooks' clientConfig CA and cert-manager annotation, by certificate mode. */}}
{{- define "md.webhookAnnotations" -}}
{{- if eq .Values.certificate.mode "cert-manager" }}
annotations:
  cert-manager.io/inject-ca-from: {{ include "md.namespace" . }}/{{ include "md.certificateName" . }}
{{- else if ne .Values.certificate.mode "secret" }}
{{- fail "certificate.mode must be cert-manager or secret" }}
{{- end }}
{{- end -}}

{{- define "md.caBundle" -}}
{{- if eq .Values.certificate.mode "secret" }}
caBundle: {{ required "certificate.caBundle (base64 PEM CA) is required with certificate.mode=secret" .Values.certificate.caBundle }}
{{- end }}
{{- end -}}
