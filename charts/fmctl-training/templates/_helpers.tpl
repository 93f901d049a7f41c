{{- define "fmctl-training.labels" -}}
app.kubernetes.io/name: fmctl-training
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "fmctl-training.resources" -}}
nvidia.com/gpu: {{ .Values.gpusPerNode }}
{{- if gt (int .Values.efaPerNode) 0 }}
vpc.amazonaws.com/efa: {{ .Values.efaPerNode }}
{{- end }}
hugepages-2Mi: {{ .Values.hugepages2Mi }}
memory: {{ .Values.memory }}
{{- end -}}
