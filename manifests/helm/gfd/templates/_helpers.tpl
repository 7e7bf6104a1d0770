{{/* The release's base name: the release name when it already contains the chart's. */}}
{{- define "gfd.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "gfd.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The namespace of every namespaced object (upstream's namespaceOverride). */}}
{{- define "gfd.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{- define "gfd.serviceAccountName" -}}
{{- default (include "gfd.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* Selector labels: what the kustomize overlays use, plus the release; or, as upstream's
selectorLabelsOverride, exactly those given. */}}
{{- define "gfd.selectorLabels" -}}
{{- if .Values.selectorLabelsOverride -}}
{{ toYaml .Values.selectorLabelsOverride }}
{{- else -}}
{{ include "gfd.defaultSelectorLabels" . }}
{{- end -}}
{{- end -}}

{{- define "gfd.defaultSelectorLabels" -}}
app.kubernetes.io/name: {{ include "gfd.name" . }}
app.kubernetes.io/part-of: nvidia-gpu
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The pods' labels: the selector labels, and the default ones besides an override. */}}
{{- define "gfd.podLabels" -}}
{{- $labels := include "gfd.defaultSelectorLabels" . | fromYaml -}}
{{- with .Values.selectorLabelsOverride }}{{ $labels = merge (deepCopy .) $labels }}{{ end -}}
{{ toYaml $labels }}
{{- end -}}

{{- define "gfd.labels" -}}
{{ include "gfd.selectorLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "gfd.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The ConfigMap gfd reads its config file from ("" for none). */}}
{{- define "gfd.configMapName" -}}
{{- if .Values.config.name -}}
{{- .Values.config.name -}}
{{- else if .Values.config.map -}}
{{- printf "%s-config" (include "gfd.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* "true" when the node label chooses the entry (upstream's config-manager, built in). */}}
{{- define "gfd.nodeConfig" -}}
{{- if and (include "gfd.configMapName" .) .Values.config.selectByNodeLabel }}true{{ end -}}
{{- end -}}

{{/* The entry of that ConfigMap gfd reads when no node label chooses it. */}}
{{- define "gfd.configEntry" -}}
{{- if .Values.config.default -}}
{{- .Values.config.default -}}
{{- else if eq (len .Values.config.map) 1 -}}
{{- keys .Values.config.map | first -}}
{{- else -}}
{{- fail "config.default: name the entry of the config ConfigMap that gfd reads (config.map has several, or config.name is an existing ConfigMap)" -}}
{{- end -}}
{{- end -}}

{{/* Does the pod need its API token? */}}
{{- define "gfd.usesApi" -}}
{{- if or (eq .Values.output "node-feature-api") (eq .Values.output "node-labels") (include "gfd.nodeConfig" .) (eq (toString .Values.deviceDiscoveryStrategy) "dra") (eq (toString .Values.gfd.draDriftCheck) "true") }}true{{ end -}}
{{- end -}}

{{- define "gfd.featuresDir" -}}
/etc/kubernetes/node-feature-discovery/features.d
{{- end -}}

{{/* The init container's script: group 65532 gets write access to features.d (no capability
used: the directory's owner may chgrp it to a group it belongs to, and chmod it). */}}
{{- define "gfd.featuresDirGroupScript" -}}
import os,stat,sys
d=sys.argv[1]
s=os.stat(d)
try:
  s.st_gid==65532 or os.chown(d,-1,65532)
  os.chmod(d,stat.S_IMODE(s.st_mode)|0o070)
except OSError as e:
  sys.exit(f'cannot make {d} writable for group 65532: {e.strerror}')
{{ end -}}

{{/*
The pod spec of the agent, for the DaemonSet and for the Jobs.
Arguments: dict "root" $ "job" ("" | "oneshot" | "cleanup") "node" NODE
*/}}
{{- define "gfd.podSpec" -}}
{{- $root := .root -}}
{{- $v := $root.Values -}}
{{- $job := .job -}}
{{- $featuresFile := eq $v.output "features-file" -}}
{{- $configMap := include "gfd.configMapName" $root -}}
{{- $mig := or (eq (toString $v.migStrategy) "single") (eq (toString $v.migStrategy) "mixed") -}}
{{- /* Per-node configs may turn MIG on (upstream's allPossibleMigStrategiesAreNone): an
external ConfigMap may, an entry of config.map does when its flags say so. */ -}}
{{- if and (not $v.migStrategy) (include "gfd.nodeConfig" $root) -}}
{{- if $v.config.name }}{{ $mig = true }}{{ end -}}
{{- range $entry := $v.config.map -}}
{{- $flags := dig "flags" dict (fromYaml (toString $entry)) -}}
{{- if has (toString (dig "migStrategy" "" $flags)) (list "single" "mixed") }}{{ $mig = true }}{{ end -}}
{{- end -}}
{{- end -}}
{{- $metrics := and (not $job) (gt (int $v.metricsPort) 0) -}}
{{- $koordlet := $v.koordlet.enabled -}}
{{- $privileged := or (eq (toString $v.privileged) "true") (eq (toString (dig "privileged" false (default dict $v.gfd.securityContext))) "true") -}}
{{- $nodeConfig := include "gfd.nodeConfig" $root -}}
{{- if $job }}
nodeName: {{ .node }}
restartPolicy: Never
{{- end }}
serviceAccountName: {{ include "gfd.serviceAccountName" $root }}
automountServiceAccountToken: {{ include "gfd.usesApi" $root | eq "true" }}
enableServiceLinks: false
{{- with $v.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $v.runtimeClassName }}
runtimeClassName: {{ . }}
{{- end }}
{{- with $v.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if $v.gfd.enableHostNetwork }}
hostNetwork: true
dnsPolicy: ClusterFirstWithHostNet
{{- end }}
{{- $podSecurity := dict "runAsNonRoot" true "runAsUser" 65532 "runAsGroup" 65532 "seccompProfile" (dict "type" "RuntimeDefault") }}
securityContext:
  {{- mergeOverwrite $podSecurity (deepCopy $v.podSecurityContext) | toYaml | nindent 2 }}
{{- with $v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- /* A cleanup Job must run wherever gfd left labels, GPU or not. */}}
{{- if ne $job "cleanup" }}
{{- with $v.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
{{- with $v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if or $featuresFile (and $koordlet (not $privileged)) }}
initContainers:
{{- end }}
{{- if and $koordlet (not $privileged) }}
# koordlet's device-info directory (root's, 0755): as features.d below, group 65532 gets
# write, so gfd writes its file there as uid 65532. Any host account in group 65532 may then write
# device infos that koordlet reports.
  - name: koordlet-dir-group
    image: {{ include "gfd.image" $root }}
    imagePullPolicy: {{ $v.image.pullPolicy }}
    command: ["python3", "-c"]
    args:
      - {{ include "gfd.featuresDirGroupScript" $root | quote }}
      - {{ $v.koordlet.deviceInfosDir }}
    securityContext:
      runAsNonRoot: false
      runAsUser: 0
      runAsGroup: 65532
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      capabilities:
        drop: ["ALL"]
      seccompProfile:
        type: RuntimeDefault
    resources:
      requests:
        cpu: 10m
        memory: 32Mi
      limits:
        memory: 64Mi
    volumeMounts:
      - name: koordlet-device-infos
        mountPath: {{ $v.koordlet.deviceInfosDir }}
{{- end }}
{{- if $featuresFile }}
# features.d on the host belongs to root (0755), and nfd-worker reads it as it is. Rather
# than running the long-lived gfd as root, a one-off init container (uid 0, but with no
# capability at all) hands the directory to gfd's group: as the directory's owner it may set
# its group to one it belongs to (65532) and add group write (0755 -> 0775). Nothing else on
# the host is touched, and gfd itself then runs as 65532. Note: any host account in group
# 65532 may then write features.d too.
  - name: features-d-group
    image: {{ include "gfd.image" $root }}
    imagePullPolicy: {{ $v.image.pullPolicy }}
    command: ["python3", "-c"]
    args:
      - {{ include "gfd.featuresDirGroupScript" $root | quote }}
      - {{ include "gfd.featuresDir" $root }}
    securityContext:
      runAsNonRoot: false
      runAsUser: 0
      runAsGroup: 65532
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      capabilities:
        drop: ["ALL"]
      seccompProfile:
        type: RuntimeDefault
    resources:
      requests:
        cpu: 10m
        memory: 32Mi
      limits:
        memory: 64Mi
    volumeMounts:
      - name: features-d
        mountPath: {{ include "gfd.featuresDir" $root }}
{{- end }}
containers:
  - name: gfd
    image: {{ include "gfd.image" $root }}
    imagePullPolicy: {{ $v.image.pullPolicy }}
    {{- $args := $v.extraArgs }}
    {{- if eq $job "oneshot" }}{{ $args = prepend $args "--oneshot" }}{{ end }}
    {{- if eq $job "cleanup" }}{{ $args = prepend $args "--cleanup" }}{{ end }}
    {{- with $args }}
    args:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    env:
      {{- if $metrics }}
      - name: GFD_METRICS_ADDRESS
        value: {{ printf ":%d" (int $v.metricsPort) | quote }}
      {{- end }}
      {{- with $v.migStrategy }}
      - name: MIG_STRATEGY
        value: {{ . | quote }}
      {{- end }}
      {{- if $mig }}
      # NVML lists MIG devices only with the MIG monitor capability, which the NVIDIA
      # container runtime grants to containers whose capability set includes SYS_ADMIN.
      - name: NVIDIA_MIG_MONITOR_DEVICES
        value: all
      {{- end }}
      {{- if kindIs "bool" $v.failOnInitError }}
      - name: GFD_FAIL_ON_INIT_ERROR
        value: {{ $v.failOnInitError | quote }}
      {{- end }}
      {{- with $v.deviceDiscoveryStrategy }}
      - name: DEVICE_DISCOVERY_STRATEGY
        value: {{ . | quote }}
      {{- end }}
      {{- with $v.machineTypeFile }}
      - name: GFD_MACHINE_TYPE_FILE
        value: {{ . | quote }}
      {{- end }}
      {{- with $v.logLevel }}
      - name: GFD_LOG_LEVEL
        value: {{ . | quote }}
      {{- end }}
      {{- with $v.logFormat }}
      - name: GFD_LOG_FORMAT
        value: {{ . | quote }}
      {{- end }}
      {{- $noTimestamp := ternary $v.noTimestamp $v.gfd.noTimestamp (kindIs "invalid" $v.gfd.noTimestamp) }}
      {{- if kindIs "bool" $noTimestamp }}
      - name: GFD_NO_TIMESTAMP
        value: {{ $noTimestamp | quote }}
      {{- end }}
      {{- $sleepInterval := ternary $v.sleepInterval $v.gfd.sleepInterval (kindIs "invalid" $v.gfd.sleepInterval) }}
      {{- if not (kindIs "invalid" $sleepInterval) }}
      - name: GFD_SLEEP_INTERVAL
        value: {{ $sleepInterval | toString | quote }}
      {{- end }}
      {{- if not (kindIs "invalid" $v.gfd.expiryHorizon) }}
      - name: GFD_EXPIRY_HORIZON
        value: {{ $v.gfd.expiryHorizon | toString | quote }}
      {{- end }}
      {{- if kindIs "bool" $v.gfd.topologyLabels }}
      - name: GFD_TOPOLOGY_LABELS
        value: {{ $v.gfd.topologyLabels | quote }}
      {{- end }}
      {{- if kindIs "bool" $v.gfd.draDriftCheck }}
      - name: GFD_DRA_DRIFT_CHECK
        value: {{ $v.gfd.draDriftCheck | quote }}
      {{- end }}
      {{- if $koordlet }}
      - name: GFD_KOORDLET_DEVICE_INFOS_DIR
        value: {{ $v.koordlet.deviceInfosDir | quote }}
      {{- end }}
      {{- if $nodeConfig }}
      # The node label chooses the entry of /config (upstream's config-manager variables).
      - name: CONFIG_FILE_SRCDIR
        value: /config
      - name: NODE_LABEL
        value: nvidia.com/device-plugin.config
      - name: DEFAULT_CONFIG
        value: {{ $v.config.default | quote }}
      - name: FALLBACK_STRATEGIES
        value: {{ join "," $v.config.fallbackStrategies | quote }}
      {{- else if $configMap }}
      - name: GFD_CONFIG_FILE
        value: {{ printf "/config/%s" (include "gfd.configEntry" $root) | quote }}
      {{- end }}
      {{- if $featuresFile }}
      - name: GFD_OUTPUT_FILE
        value: {{ include "gfd.featuresDir" $root }}/gfd
      {{- else if eq $v.output "node-feature-api" }}
      - name: GFD_USE_NODE_FEATURE_API
        value: "true"
      # The object's namespace, and the pod whose owner (this DaemonSet) owns it.
      - name: NAMESPACE
        valueFrom:
          fieldRef:
            fieldPath: metadata.namespace
      - name: POD_NAME
        valueFrom:
          fieldRef:
            fieldPath: metadata.name
      {{- else if eq $v.output "node-labels" }}
      - name: GFD_USE_NODE_LABELS
        value: "true"
      {{- end }}
      - name: NODE_NAME
        valueFrom:
          fieldRef:
            fieldPath: spec.nodeName
      {{- with $v.extraEnv }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
    {{- if $metrics }}
    ports:
      - name: metrics
        containerPort: {{ $v.metricsPort }}
        protocol: TCP
    livenessProbe:
      # 200 while passes keep starting (last pass within 3 x interval + 30 s).
      httpGet:
        path: /healthz
        port: metrics
      initialDelaySeconds: 10
      periodSeconds: 30
      timeoutSeconds: 5
      failureThreshold: 3
    readinessProbe:
      # 200 once the labels have been published.
      httpGet:
        path: /readyz
        port: metrics
      periodSeconds: 10
      timeoutSeconds: 5
      failureThreshold: 3
    {{- end }}
    {{- with $v.resources }}
    resources:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- /* vGPU detection: all of the PCI config space needs CAP_SYS_ADMIN; privileged is
    root with every capability (the API server refuses privileged together with
    allowPrivilegeEscalation: false). gfd.securityContext is merged over the result. */}}
    {{- $capabilities := dict "drop" (list "ALL") }}
    {{- if $mig }}{{ $_ := set $capabilities "add" (list "SYS_ADMIN") }}{{ end }}
    {{- $security := dict "allowPrivilegeEscalation" $privileged "readOnlyRootFilesystem" true "capabilities" $capabilities "runAsNonRoot" (not $privileged) }}
    {{- if $privileged }}
    {{- $_ := set $security "privileged" true }}
    {{- $_ := set $security "runAsUser" 0 }}
    {{- $_ := set $security "runAsGroup" 0 }}
    {{- end }}
    securityContext:
      {{- mergeOverwrite $security (omit (deepCopy (default dict $v.gfd.securityContext)) "privileged") | toYaml | nindent 6 }}
    volumeMounts:
      # PCI devices (vGPU detection, PCI class) and the machine-type file, from the host.
      - name: host-sys
        mountPath: /sys
        readOnly: true
        {{- /* a field of Kubernetes 1.30+: older API servers refuse the object with it */}}
        {{- if semverCompare ">=1.30.0-0" $root.Capabilities.KubeVersion.Version }}
        recursiveReadOnly: IfPossible
        {{- end }}
      {{- if $featuresFile }}
      - name: features-d
        mountPath: {{ include "gfd.featuresDir" $root }}
      {{- end }}
      {{- if $configMap }}
      - name: config
        mountPath: /config
        readOnly: true
      {{- end }}
      {{- if $koordlet }}
      - name: koordlet-device-infos
        mountPath: {{ $v.koordlet.deviceInfosDir }}
      {{- end }}
volumes:
  - name: host-sys
    hostPath:
      path: /sys
      type: Directory
  {{- if $featuresFile }}
  - name: features-d
    hostPath:
      path: {{ include "gfd.featuresDir" $root }}
      type: DirectoryOrCreate
  {{- end }}
  {{- if $configMap }}
  - name: config
    configMap:
      name: {{ $configMap }}
  {{- end }}
  {{- if $koordlet }}
  - name: koordlet-device-infos
    hostPath:
      path: {{ $v.koordlet.deviceInfosDir }}
      type: DirectoryOrCreate
  {{- end }}
{{- end -}}
