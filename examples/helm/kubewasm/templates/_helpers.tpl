{{/* The release's full name: the release name, cut to 63 characters. */}}
{{- define "kubewasm.fullname" -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The service account the host runs as. */}}
{{- define "kubewasm.serviceAccount" -}}
{{- default (include "kubewasm.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "kubewasm.labels" -}}
app.kubernetes.io/name: kubewasm
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The pod selector. */}}
{{- define "kubewasm.selector" -}}
app.kubernetes.io/name: kubewasm
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The Service in front of the webhook port, and the Secret with its certificate. */}}
{{- define "kubewasm.webhookService" -}}
{{- printf "%s-webhooks" (include "kubewasm.fullname" .) -}}
{{- end -}}
{{- define "kubewasm.webhookSecret" -}}
{{- default (printf "%s-webhooks-tls" (include "kubewasm.fullname" .)) .Values.admission.secretName -}}
{{- end -}}
