{{/*
The objects' names and labels are the kustomize manifests' own (tests/unit/test_chart.py compares
them): fixed names, one operator per cluster; no Helm-only labels.
*/}}
{{- define "rolloutbatch.operatorLabels" -}}
app.kubernetes.io/name: rolloutbatch
app.kubernetes.io/component: operator
{{- end }}

{{- define "rolloutbatch.subject" -}}
subjects:
  - kind: ServiceAccount
    name: rolloutbatch-operator
    namespace: {{ .Release.Namespace }}
{{- end }}

{{/* Refuse combinations the schema cannot express. */}}
{{- define "rolloutbatch.validate" -}}
{{- if eq (int .Values.metrics.port) (int .Values.livenessPort) }}
{{- fail "metrics.port and livenessPort must differ" }}
{{- end }}
{{- if and .Values.serviceMonitor.enabled (not .Values.metrics.service.enabled) }}
{{- fail "serviceMonitor.enabled needs metrics.service.enabled: the ServiceMonitor scrapes through that Service" }}
{{- end }}
{{- if has .Release.Namespace .Values.watchNamespaces }}
{{- fail "watchNamespaces must not list the operator's own namespace: batches run beside what they watch" }}
{{- end }}
{{- range .Values.extraArgs }}
{{- /* the chart's own flags: a second one would win over the probes', the Role's or the replicas' */}}
{{- if regexMatch "^--(no-)?(leader-elect|leader-election-namespace|metrics-port|metrics-address|liveness-port|watch-namespace)(=|$)" . }}
{{- fail (printf "extraArgs must not set %s: the chart sets it from its values (replicas, metrics.port, livenessPort, watchNamespaces)" .) }}
{{- end }}
{{- end }}
{{- end }}
