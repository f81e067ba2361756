{{/*
Chart name, truncated to the 63 characters a label value may have.
*/}}
{{- define "ax.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name prefix of every resource: the release name, plus the chart name unless the release
name already holds it.
*/}}
{{- define "ax.fullname" -}}
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

{{- define "ax.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels selecting every pod of the release, whatever its component (the Service uses them).
*/}}
{{- define "ax.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ax.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "ax.labels" -}}
helm.sh/chart: {{ include "ax.chart" . }}
{{ include "ax.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: ax
{{- end }}

{{- define "ax.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "ax.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "ax.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
The workloads to render, as JSON {"items": [...]}: one "server" running both roles, or, in
split mode, "scheduler" and "worker". Each item: component, name (resource name), roles,
replicaCount, kind, resources, autoscaling.
*/}}
{{- define "ax.components" -}}
{{- $full := include "ax.fullname" . }}
{{- $items := list }}
{{- if .Values.split.enabled }}
{{- $s := .Values.split.scheduler }}
{{- $w := .Values.split.worker }}
{{- $items = append $items (dict "component" "scheduler" "name" (printf "%s-scheduler" $full | trunc 52 | trimSuffix "-") "roles" (list "scheduler") "replicaCount" $s.replicaCount "kind" $s.kind "resources" $s.resources "autoscaling" (dict "enabled" false)) }}
{{- $items = append $items (dict "component" "worker" "name" (printf "%s-worker" $full | trunc 52 | trimSuffix "-") "roles" (list "worker") "replicaCount" $w.replicaCount "kind" $w.kind "resources" $w.resources "autoscaling" $w.autoscaling) }}
{{- else }}
{{- $items = append $items (dict "component" "server" "name" ($full | trunc 52 | trimSuffix "-") "roles" (list "scheduler" "worker") "replicaCount" .Values.replicaCount "kind" .Values.kind "resources" .Values.resources "autoscaling" (dict "enabled" false)) }}
{{- end }}
{{- range $items }}
{{- if not (has .kind (list "StatefulSet" "Deployment")) }}
{{- fail (printf "kind of the %s workload must be StatefulSet or Deployment, not %q" .component .kind) }}
{{- end }}
{{- end }}
{{- toJson (dict "items" $items) }}
{{- end }}

{{/*
Whether any workload is a StatefulSet (which needs the headless Service).
*/}}
{{- define "ax.anyStatefulSet" -}}
{{- range (include "ax.components" . | fromJson).items }}
{{- if eq .kind "StatefulSet" }}true{{ end }}
{{- end }}
{{- end }}

{{/*
Seconds in a humantime duration of the forms "45s", "2m" or "1h"; empty for other forms.
*/}}
{{- define "ax.seconds" -}}
{{- $d := toString . }}
{{- if regexMatch "^[0-9]+s$" $d }}{{ trimSuffix "s" $d }}
{{- else if regexMatch "^[0-9]+m$" $d }}{{ mul (trimSuffix "m" $d | atoi) 60 }}
{{- else if regexMatch "^[0-9]+h$" $d }}{{ mul (trimSuffix "h" $d | atoi) 3600 }}
{{- end }}
{{- end }}

{{/*
Refuses values that would kill running executions on every rollout.
*/}}
{{- define "ax.validate" -}}
{{- $grace := include "ax.seconds" .Values.config.worker.shutdownGrace }}
{{- if and $grace (le (int .Values.terminationGracePeriodSeconds) (atoi $grace)) }}
{{- fail (printf "terminationGracePeriodSeconds (%v) must exceed config.worker.shutdownGrace (%s), or Kubernetes kills executions that are still finishing" .Values.terminationGracePeriodSeconds .Values.config.worker.shutdownGrace) }}
{{- end }}
{{- /* A command stopped at the end of the shutdown grace gets its own kill grace (5s by default). */}}
{{- $killGrace := 0 }}
{{- range $name, $cmd := .Values.config.worker.commands }}
{{- if not (regexMatch "^[A-Za-z0-9._-]+$" $name) }}
{{- fail (printf "config.worker.commands: %q is not a command name: letters, digits, '.', '_' and '-' only" $name) }}
{{- end }}
{{- if not (kindIs "map" $cmd) }}
{{- fail (printf "config.worker.commands.%s must be a map with path, and optionally args, taskArgs, argPatterns, env, allowEnv, workingDir, maxOutputBytes, killGrace" $name) }}
{{- end }}
{{- range $key, $_ := $cmd }}
{{- if not (has $key (list "path" "args" "taskArgs" "argPatterns" "env" "allowEnv" "workingDir" "maxOutputBytes" "killGrace")) }}
{{- fail (printf "config.worker.commands.%s.%s is not a command setting: path, args, taskArgs, argPatterns, env, allowEnv, workingDir, maxOutputBytes, killGrace" $name $key) }}
{{- end }}
{{- end }}
{{- $k := include "ax.seconds" (default "5s" $cmd.killGrace) }}
{{- if and $k (gt (atoi $k) $killGrace) }}{{ $killGrace = atoi $k }}{{ end }}
{{- end }}
{{- if and $grace $killGrace (le (int .Values.terminationGracePeriodSeconds) (add (atoi $grace) $killGrace)) }}
{{- fail (printf "terminationGracePeriodSeconds (%v) must exceed config.worker.shutdownGrace (%s) plus the longest command killGrace (%ds), or Kubernetes kills commands that are still stopping" .Values.terminationGracePeriodSeconds .Values.config.worker.shutdownGrace $killGrace) }}
{{- end }}
{{- if and .Values.secrets.etcdTls.existingSecret (not .Values.secrets.etcdTls.caKey) }}
{{- fail "secrets.etcdTls.caKey must name the CA certificate's key in secrets.etcdTls.existingSecret" }}
{{- end }}
{{- if ne (empty .Values.secrets.etcdTls.certKey) (empty .Values.secrets.etcdTls.keyKey) }}
{{- fail "secrets.etcdTls.certKey and secrets.etcdTls.keyKey must be both set or both empty" }}
{{- end }}
{{- $rtls := .Values.secrets.redisTls }}
{{- if $rtls.existingSecret }}
{{- if not (hasPrefix "rediss://" .Values.config.redis.url) }}
{{- fail "secrets.redisTls is set, so Redis connections use TLS: config.redis.url must be rediss://" }}
{{- end }}
{{- if and (not $rtls.caKey) (not $rtls.certKey) }}
{{- fail "secrets.redisTls names a Secret but neither caKey nor certKey: name the CA's key, the client certificate's, or both" }}
{{- end }}
{{- end }}
{{- if ne (empty $rtls.certKey) (empty $rtls.keyKey) }}
{{- fail "secrets.redisTls.certKey and secrets.redisTls.keyKey must be both set or both empty" }}
{{- end }}
{{- end }}

{{/*
Where the etcd TLS Secret is mounted.
*/}}
{{- define "ax.etcdTlsDir" -}}/etc/ax-etcd-tls{{- end }}

{{/*
Where the Redis TLS Secret is mounted.
*/}}
{{- define "ax.redisTlsDir" -}}/etc/ax-redis-tls{{- end }}

{{/*
Where ax's own secrets are mounted as files, one directory per Secret.
*/}}
{{- define "ax.secretsDir" -}}
/etc/ax-secrets
{{- end }}

{{/*
ax's own secrets to mount, as YAML: {dir: {secretName, items: {file: key}}}; the workload
points the matching *_FILE variables at the files.
*/}}
{{- define "ax.ownSecrets" -}}
{{- $s := .Values.secrets }}
{{- if $s.etcdPassword.existingSecret }}
etcd-password:
  secretName: {{ $s.etcdPassword.existingSecret | quote }}
  items: {password: {{ $s.etcdPassword.key | quote }}}
{{- end }}
{{- if $s.redisPassword.existingSecret }}
redis-password:
  secretName: {{ $s.redisPassword.existingSecret | quote }}
  items: {password: {{ $s.redisPassword.key | quote }}}
{{- end }}
{{- if $s.feishu.existingSecret }}
feishu:
  secretName: {{ $s.feishu.existingSecret | quote }}
  items:
    webhook: {{ $s.feishu.webhookKey | quote }}
    {{- if $s.feishu.secretKey }}
    secret: {{ $s.feishu.secretKey | quote }}
    {{- end }}
{{- end }}
{{- if $s.apiToken.existingSecret }}
api-token:
  secretName: {{ $s.apiToken.existingSecret | quote }}
  items: {token: {{ $s.apiToken.key | quote }}}
{{- end }}
{{- end }}
