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
{{- with .Values.serviceMonitor }}
{{- if and .enabled .interval .scrapeTimeout }}
{{- if gt (int64 (include "rolloutbatch.milliseconds" .scrapeTimeout)) (int64 (include "rolloutbatch.milliseconds" .interval)) }}
{{- fail (printf "serviceMonitor.scrapeTimeout (%s) must not exceed serviceMonitor.interval (%s): the Prometheus Operator skips such a ServiceMonitor" .scrapeTimeout .interval) }}
{{- end }}
{{- end }}
{{- end }}
{{- range .Values.extraArgs }}
{{- /* one argument each: "--metrics-port 9090" is no flag the check below knows, nor one the operator parses */}}
{{- if regexMatch `\s` . }}
{{- fail (printf "extraArgs entry %q holds whitespace: each entry is one argument, a flag and its value as --flag=value" .) }}
{{- end }}
{{- /* the chart's own flags: a second one would win over the probes', the Role's or the replicas' */}}
{{- if regexMatch "^--(no-)?(leader-elect|leader-election-namespace|metrics-port|metrics-address|liveness-port|watch-namespace)(=|$)" . }}
{{- fail (printf "extraArgs must not set %s: the chart sets it from its values (replicas, metrics.port, livenessPort, watchNamespaces)" .) }}
{{- end }}
{{- end }}
{{- end }}

{{/* A Prometheus duration (values.schema.json's "duration": 1m30s, 500ms) in milliseconds. */}}
{{- define "rolloutbatch.milliseconds" -}}
{{- $per := dict "ms" 1 "s" 1000 "m" 60000 "h" 3600000 "d" 86400000 "w" 604800000 "y" 31536000000 }}
{{- $total := 0 }}
{{- range regexFindAll `[0-9]+(ms|s|m|h|d|w|y)` . -1 }}
{{- $digits := regexFind `^[0-9]+` . }}
{{- /* leading zeros stripped: int64 would read "010" as octal */}}
{{- $total = add $total (mul (int64 (regexReplaceAll `^0+([0-9])` $digits "${1}")) (get $per (trimPrefix $digits .))) }}
{{- end }}
{{- $total }}
{{- end }}
