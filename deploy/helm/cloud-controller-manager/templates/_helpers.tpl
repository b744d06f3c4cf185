{{/* The name of the workload and of its selector label (cloud-provider-aws's chart: nameOverride). */}}
{{- define "ccm.name" -}}
{{- default "cloud-controller-manager" .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "ccm.labels" -}}
app.kubernetes.io/name: cloud-controller-manager
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: "{{ .Chart.Name }}-{{ .Chart.Version }}"
{{- end -}}

{{/* The pods' selector: cloud-provider-aws's chart's, so that an upgrade from it keeps the workload. */}}
{{- define "ccm.selector" -}}
k8s-app: {{ include "ccm.name" . }}
{{- end -}}

{{/* The provider, checked. */}}
{{- define "ccm.provider" -}}
{{- if not (has .Values.provider (list "aws" "digitalocean" "fake")) -}}
{{- fail (printf "provider must be aws, digitalocean or fake, not %q" .Values.provider) -}}
{{- end -}}
{{- .Values.provider -}}
{{- end -}}

{{/* The mode, checked. */}}
{{- define "ccm.mode" -}}
{{- if not (has .Values.mode (list "DaemonSet" "Deployment")) -}}
{{- fail (printf "mode must be DaemonSet or Deployment, not %q" .Values.mode) -}}
{{- end -}}
{{- .Values.mode -}}
{{- end -}}

{{/* The daemon's arguments, one per line of a YAML list: `args` as given, else made from the values. */}}
{{- define "ccm.args" -}}
{{- if .Values.args -}}
{{- range .Values.args }}
- {{ . | quote }}
{{- end -}}
{{- else }}
- {{ printf "--cloud-provider=%s" (include "ccm.provider" .) | quote }}
{{- if .Values.cloudConfig }}
- "--cloud-config=/etc/kubernetes/cloud-config/cloud-config"
{{- end }}
{{- if eq (include "ccm.provider" .) "aws" }}
- "--configure-cloud-routes=false"
{{- end }}
- "--leader-elect=true"
- "--bind-address=0.0.0.0"
- "--secure-port=10258"
- "--v=2"
{{- end -}}
{{- if .Values.webhook.enabled }}
- "--feature-gates=CloudControllerManagerWebhook=true"
- "--webhooks=lb-service"
- {{ printf "--webhook-secure-port=%v" .Values.webhook.port | quote }}
- "--webhook-tls-cert-file=/etc/webhook/tls.crt"
- "--webhook-tls-private-key-file=/etc/webhook/tls.key"
{{- end -}}
{{- end -}}

{{/* The Secret with the webhook's serving certificate. */}}
{{- define "ccm.webhookSecret" -}}
{{- if .Values.webhook.certManager.enabled -}}
{{ include "ccm.name" . }}-webhook-tls
{{- else -}}
{{ required "webhook.tlsSecret is required when webhook.certManager.enabled is false" .Values.webhook.tlsSecret }}
{{- end -}}
{{- end -}}

{{/* The secure port the arguments give (upstream's default 10258). */}}
{{- define "ccm.securePort" -}}
{{- $port := "10258" -}}
{{- range .Values.args -}}
{{- if hasPrefix "--secure-port=" . -}}
{{- $port = trimPrefix "--secure-port=" . -}}
{{- end -}}
{{- end -}}
{{- $port -}}
{{- end -}}

{{/* "true" when the arguments turn --use-service-account-credentials on. */}}
{{- define "ccm.serviceAccountCredentials" -}}
{{- $on := false -}}
{{- range .Values.args -}}
{{- if has . (list "--use-service-account-credentials" "--use-service-account-credentials=true" "--use-service-account-credentials=1" "--use-service-account-credentials=t" "--use-service-account-credentials=T" "--use-service-account-credentials=TRUE" "--use-service-account-credentials=True") -}}
{{- $on = true -}}
{{- else if hasPrefix "--use-service-account-credentials=" . -}}
{{- $on = false -}}
{{- end -}}
{{- end -}}
{{- $on -}}
{{- end -}}

{{/* The image. */}}
{{- define "ccm.image" -}}
{{- printf "%s:%s" .Values.image.repository (default (include "ccm.provider" .) .Values.image.tag) -}}
{{- end -}}

{{/* The defaults of resources, securityContext and podSecurityContext when the values leave them empty. */}}
{{- define "ccm.defaultResources" -}}
requests:
  cpu: 100m
  memory: 64Mi
limits:
  memory: 256Mi
{{- end -}}

{{- define "ccm.defaultSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{- define "ccm.defaultPodSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}
