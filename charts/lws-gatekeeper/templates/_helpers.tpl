{{/*
Names, labels, the two choices the chart resolves against the cluster (how pods get
their gate: webhook or policy; who makes the webhook's certificate) and whether the
node-fit AdmissionCheck controller runs.
*/}}

{{- define "lws-gatekeeper.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "lws-gatekeeper.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The image reference: image.repository, after global.imageRegistry when that is set (with
no repository, <imageRegistry>/lws-gatekeeper); by digest when image.digest is set (what
was pushed, exactly), else by tag (the chart's appVersion unless image.tag says otherwise).
Neither a repository nor a registry: the chart refuses, and says how to get an image.
*/}}
{{- define "lws-gatekeeper.image" -}}
{{- $registry := (.Values.global | default dict).imageRegistry | default "" | trimSuffix "/" }}
{{- $repository := .Values.image.repository }}
{{- if and $registry $repository }}
{{- $repository = printf "%s/%s" $registry $repository }}
{{- else if $registry }}
{{- $repository = printf "%s/lws-gatekeeper" $registry }}
{{- end }}
{{- if not $repository }}
{{- fail "image.repository is not set: the chart names no image of its own. Build the gatekeeper's image (./scripts/image, or the Containerfile with any OCI builder), push it to a registry you own (crane push or skopeo copy), then set image.repository=<registry>/<name> (and image.digest=sha256:...), or global.imageRegistry=<registry> for <registry>/lws-gatekeeper. See docs/install.md, \"The container image\"." }}
{{- end }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" $repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{- define "lws-gatekeeper.selectorLabels" -}}
app.kubernetes.io/name: {{ include "lws-gatekeeper.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end }}

{{- define "lws-gatekeeper.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "lws-gatekeeper.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: lws-gatekeeper
{{- end }}

{{- define "lws-gatekeeper.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "lws-gatekeeper.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The username the API server gives the gatekeeper's ServiceAccount tokens. */}}
{{- define "lws-gatekeeper.serviceAccountUsername" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "lws-gatekeeper.serviceAccountName" .) }}
{{- end }}

{{- define "lws-gatekeeper.leaseName" -}}
{{- default (include "lws-gatekeeper.fullname" .) .Values.manager.leaderElection.leaseName }}
{{- end }}

{{- define "lws-gatekeeper.webhookServiceName" -}}
{{- printf "%s-webhook" (include "lws-gatekeeper.fullname" . | trunc 55 | trimSuffix "-") }}
{{- end }}

{{- define "lws-gatekeeper.metricsServiceName" -}}
{{- printf "%s-metrics" (include "lws-gatekeeper.fullname" . | trunc 55 | trimSuffix "-") }}
{{- end }}

{{/* The MutatingWebhookConfiguration (cluster-scoped). */}}
{{- define "lws-gatekeeper.webhookConfigName" -}}
{{- include "lws-gatekeeper.fullname" . }}
{{- end }}

{{/* The Secret with the webhook's serving certificate (made by cert-manager or by the gatekeeper). */}}
{{- define "lws-gatekeeper.certSecretName" -}}
{{- printf "%s-webhook-cert" (include "lws-gatekeeper.fullname" . | trunc 50 | trimSuffix "-") }}
{{- end }}

{{/*
"webhook" or "policy": gateInjection, with `auto` resolved by whether the cluster serves
MutatingAdmissionPolicy in admissionregistration.k8s.io/v1 (`helm template` sees only
what --api-versions tells it).
*/}}
{{- define "lws-gatekeeper.gateInjection" -}}
{{- if eq .Values.gateInjection "auto" }}
{{- if .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy" }}policy{{ else }}webhook{{ end }}
{{- else }}
{{- .Values.gateInjection }}
{{- end }}
{{- end }}

{{/* "true" on a member cluster (role=member): the gatekeeper admits this cluster's LWSs. */}}
{{- define "lws-gatekeeper.member" -}}
{{- if eq .Values.role "member" }}true{{ end }}
{{- end }}

{{/* "true" on the hub (role=hub): the gatekeeper grants the claims of every member. */}}
{{- define "lws-gatekeeper.onHub" -}}
{{- if eq .Values.role "hub" }}true{{ end }}
{{- end }}

{{/* "true" when the webhook is served (and needs a Service, a configuration and a certificate). */}}
{{- define "lws-gatekeeper.webhookEnabled" -}}
{{- if and (include "lws-gatekeeper.member" .) (eq (include "lws-gatekeeper.gateInjection" .) "webhook") }}true{{ end }}
{{- end }}

{{/*
"cert-manager" or "self-signed": who makes the webhook's certificate, with
certManager.enabled=auto resolved by whether the cluster serves cert-manager.io/v1.
*/}}
{{- define "lws-gatekeeper.certProvider" -}}
{{- $mode := toString .Values.certManager.enabled }}
{{- if eq $mode "true" }}cert-manager
{{- else if eq $mode "false" }}self-signed
{{- else if .Capabilities.APIVersions.Has "cert-manager.io/v1" }}cert-manager
{{- else }}self-signed
{{- end }}
{{- end }}

{{/*
"true" when the gatekeeper runs the controller of Kueue AdmissionChecks
lws-gatekeeper.io/node-fit: nodeFit.enabled, with `auto` resolved by the backend (on with
kueue, off with pools).
*/}}
{{- define "lws-gatekeeper.nodeFit" -}}
{{- $mode := toString .Values.nodeFit.enabled }}
{{- if and (include "lws-gatekeeper.member" .) (or (eq $mode "true") (and (eq $mode "auto") (eq .Values.backend "kueue"))) }}true{{ end }}
{{- end }}

{{/* "true" when the pools backend is given Karpenter's instance types (karpenter.instanceTypes), else empty. */}}
{{/* A hub of shared Reservations: "true" when clusterName and kubeconfigSecret are both set;
one without the other is refused. */}}
{{- define "lws-gatekeeper.hub" -}}
{{- $h := .Values.hub }}
{{- if and $h.clusterName (not $h.kubeconfigSecret) }}
{{- fail "hub.clusterName needs hub.kubeconfigSecret (the Secret with this member's kubeconfig on the hub)" }}
{{- end }}
{{- if and $h.kubeconfigSecret (not $h.clusterName) }}
{{- fail "hub.kubeconfigSecret needs hub.clusterName (this cluster's name on the hub)" }}
{{- end }}
{{- if and $h.sharedReservationCheck (not $h.clusterName) }}
{{- fail "hub.sharedReservationCheck needs hub.clusterName and hub.kubeconfigSecret (it claims on the hub)" }}
{{- end }}
{{- if and $h.clusterName (include "lws-gatekeeper.onHub" .) }}
{{- fail "hub.clusterName and hub.kubeconfigSecret are a member's: with role=hub leave them empty" }}
{{- end }}
{{- if $h.clusterName }}true{{ end }}
{{- end }}

{{- define "lws-gatekeeper.karpenter" -}}
{{- if and (include "lws-gatekeeper.member" .) (eq .Values.backend "pools") .Values.karpenter.instanceTypes }}true{{ end }}
{{- end }}

{{/* The webhook's CA bundle as it is in the cluster (kept across upgrades), else empty. */}}
{{- define "lws-gatekeeper.liveCABundle" -}}
{{- $live := lookup "admissionregistration.k8s.io/v1" "MutatingWebhookConfiguration" "" (include "lws-gatekeeper.webhookConfigName" .) }}
{{- if $live }}
{{- range $live.webhooks }}{{ if .clientConfig.caBundle }}{{ .clientConfig.caBundle }}{{ break }}{{ end }}{{ end }}
{{- end }}
{{- end }}

{{/*
One file of policies/ (shipped in the chart as files/policies, a link to the
repository's folder: one source of truth), each object with the chart's labels.
Arguments: ctx (the root context), file (without .yaml), allowedUsernames (optional: the
CEL list written into the gate-protection policy's `allowedUsernames` variable).
*/}}
{{- define "lws-gatekeeper.policyFile" -}}
{{- $path := printf "files/policies/%s.yaml" .file }}
{{- $text := .ctx.Files.Get $path }}
{{- if not $text }}
{{- fail (printf "%s is missing from the chart: it must be the repository's policies/ folder (a link)" $path) }}
{{- end }}
{{- $labels := include "lws-gatekeeper.labels" .ctx | fromYaml }}
{{- $replaced := false }}
{{- range $doc := regexSplit "(?m)^---[ \\t]*$" $text -1 }}
{{- $obj := fromYaml $doc }}
{{- if $obj.Error }}
{{- fail (printf "%s: %s" $path $obj.Error) }}
{{- end }}
{{- if $obj.kind }}
{{- $_ := set $obj.metadata "labels" (merge (default dict $obj.metadata.labels) $labels) }}
{{- if eq $obj.kind "ValidatingAdmissionPolicy" }}
{{- $lists := default dict $.lists }}
{{- if $.allowedUsernames }}{{ $lists = merge (dict "allowedUsernames" $.allowedUsernames) $lists }}{{ end }}
{{- range $obj.spec.variables }}
{{- $variable := . }}
{{- if hasKey $lists .name }}
{{- $quoted := list }}
{{- range (get $lists .name) }}{{ $quoted = append $quoted (printf "'%s'" .) }}{{ end }}
{{- $_ := set $variable "expression" (printf "[%s]" (join ", " $quoted)) }}
{{- if eq .name "allowedUsernames" }}{{ $replaced = true }}{{ end }}
{{- end }}
{{- end }}
{{- end }}
---
{{ toYaml $obj }}
{{- end }}
{{- end }}
{{- if and .allowedUsernames (not $replaced) }}
{{- fail (printf "%s has no ValidatingAdmissionPolicy variable allowedUsernames to fill" $path) }}
{{- end }}
{{- end }}
