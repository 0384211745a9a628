{{/*
The part of kustomize that deploy/ uses, so that the chart renders deploy/'s own files instead of copies of them:
resources (files and nested kustomizations), namespace, labels, configMapGenerator, and components' resources,
strategic-merge patches, JSON 6902 "add" patches and ConfigMap replacement. A field or operation outside that set
fails the render with its name, rather than being dropped: extend this file when deploy/ starts using one.

Every template here works on an accumulator, a dict whose "objects" list collects the rendered objects (maps).
*/}}

{{/* Kinds the namespace setting leaves alone, as kustomize does. */}}
{{- define "gpuadvisor.clusterKinds" -}}
Namespace CustomResourceDefinition ClusterRole ClusterRoleBinding ValidatingAdmissionPolicy ValidatingAdmissionPolicyBinding RuntimeClass PriorityClass
{{- end -}}

{{/* One YAML file's documents appended to .acc.objects. */}}
{{- define "gpuadvisor.file" -}}
{{- $text := .root.Files.Get (printf "files/%s" .path) -}}
{{- if not $text -}}{{- fail (printf "gpuadvisor chart: %s is missing or empty" .path) -}}{{- end -}}
{{- range $doc := regexSplit "(?m)^---[ \t]*$" $text -1 -}}
{{- $obj := fromYaml $doc -}}
{{- if hasKey $obj "Error" -}}{{- fail (printf "gpuadvisor chart: %s: %s" $.path $obj.Error) -}}{{- end -}}
{{- if $obj -}}{{- $_ := set $.acc "objects" (append $.acc.objects $obj) -}}{{- end -}}
{{- end -}}
{{- end -}}

{{/* A ConfigMap generator's ConfigMap (its files relative to .dir) appended to .acc.objects, or, with behavior
replace, its data put in place of the existing ConfigMap's. */}}
{{- define "gpuadvisor.configMap" -}}
{{- $gen := .gen -}}
{{- $data := dict -}}
{{- range $gen.files -}}
{{- $key := base . -}}
{{- $path := . -}}
{{- if contains "=" . -}}{{- $key = first (splitList "=" .) -}}{{- $path = last (splitList "=" .) -}}{{- end -}}
{{- $text := $.root.Files.Get (printf "files/%s" (clean (printf "%s/%s" $.dir $path))) -}}
{{- if not $text -}}{{- fail (printf "gpuadvisor chart: %s/%s is missing or empty" $.dir $path) -}}{{- end -}}
{{- $_ := set $data $key $text -}}
{{- end -}}
{{- $options := merge (dict) ($gen.options | default dict) ($.generatorOptions | default dict) -}}
{{- if not $options.disableNameSuffixHash -}}
{{- fail (printf "gpuadvisor chart: ConfigMap %s in %s: only generators with disableNameSuffixHash are supported" $gen.name $.dir) -}}
{{- end -}}
{{- $behavior := $gen.behavior | default "create" -}}
{{- if eq $behavior "replace" -}}
{{- $found := false -}}
{{- range $.acc.objects -}}
{{- if and (eq .kind "ConfigMap") (eq .metadata.name $gen.name) (eq (.metadata.namespace | default "") ($gen.namespace | default "")) -}}
{{- $_ := set . "data" $data -}}
{{- $found = true -}}
{{- end -}}
{{- end -}}
{{- if not $found -}}{{- fail (printf "gpuadvisor chart: %s replaces ConfigMap %s, which nothing rendered" $.dir $gen.name) -}}{{- end -}}
{{- else if eq $behavior "create" -}}
{{- $meta := dict "name" $gen.name -}}
{{- if $gen.namespace -}}{{- $_ := set $meta "namespace" $gen.namespace -}}{{- end -}}
{{- if $options.labels -}}{{- $_ := set $meta "labels" (deepCopy $options.labels) -}}{{- end -}}
{{- if $options.annotations -}}{{- $_ := set $meta "annotations" (deepCopy $options.annotations) -}}{{- end -}}
{{- $cm := dict "apiVersion" "v1" "kind" "ConfigMap" "metadata" $meta "data" $data -}}
{{- $_ := set $.acc "objects" (append $.acc.objects $cm) -}}
{{- else -}}
{{- fail (printf "gpuadvisor chart: ConfigMap %s in %s: behavior %s is not supported" $gen.name $.dir $behavior) -}}
{{- end -}}
{{- end -}}

{{/* The kustomization in .dir (a path below files/), its objects appended to .acc.objects. .namespaces, when set,
maps a directory to the namespaces it is rendered into instead of its own setting (one copy each). */}}
{{- define "gpuadvisor.kustomization" -}}
{{- $k := .root.Files.Get (printf "files/%s/kustomization.yaml" .dir) | fromYaml -}}
{{- if hasKey $k "Error" -}}{{- fail (printf "gpuadvisor chart: %s/kustomization.yaml: %s" .dir $k.Error) -}}{{- end -}}
{{- range $field, $_ := $k -}}
{{- if not (has $field (list "apiVersion" "kind" "resources" "namespace" "labels" "configMapGenerator" "generatorOptions" "images")) -}}
{{- fail (printf "gpuadvisor chart: %s/kustomization.yaml uses %s, which the chart does not render" $.dir $field) -}}
{{- end -}}
{{- end -}}
{{- $targets := list ($k.namespace | default "") -}}
{{- if hasKey (.namespaces | default dict) .dir -}}{{- $targets = get .namespaces .dir -}}{{- end -}}
{{- range $namespace := $targets -}}
{{- $start := len $.acc.objects -}}
{{- range $k.resources -}}
{{- $path := clean (printf "%s/%s" $.dir .) -}}
{{- if $.root.Files.Get (printf "files/%s/kustomization.yaml" $path) -}}
{{- $_ := include "gpuadvisor.kustomization" (dict "root" $.root "dir" $path "acc" $.acc "namespaces" $.namespaces) -}}
{{- else -}}
{{- $_ := include "gpuadvisor.file" (dict "root" $.root "path" $path "acc" $.acc) -}}
{{- end -}}
{{- end -}}
{{- range $k.configMapGenerator -}}
{{- $_ := include "gpuadvisor.configMap" (dict "root" $.root "dir" $.dir "acc" $.acc "gen" . "generatorOptions" $k.generatorOptions) -}}
{{- end -}}
{{- $mine := slice $.acc.objects $start -}}
{{- if $namespace -}}
{{- $cluster := splitList " " (include "gpuadvisor.clusterKinds" .) -}}
{{- range $mine -}}
{{- if not (has .kind $cluster) -}}{{- $_ := set .metadata "namespace" $namespace -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- range $k.labels -}}
{{- if or .includeSelectors .includeTemplates -}}
{{- fail (printf "gpuadvisor chart: %s/kustomization.yaml: labels with includeSelectors or includeTemplates are not rendered" $.dir) -}}
{{- end -}}
{{- $pairs := .pairs -}}
{{- range $mine -}}
{{- $_ := set .metadata "labels" (mergeOverwrite (.metadata.labels | default dict) $pairs) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Strategic merge of the map .patch into the map .dst, in place: maps merge, lists of maps merge on the
Kubernetes API's patch merge key of their field (items new to the list go first, in the patch's order, as kustomize
puts them), every other value (lists of strings included) is replaced. */}}
{{- define "gpuadvisor.smp" -}}
{{- $mergeKeys := dict "containers" "name" "initContainers" "name" "env" "name" "volumes" "name" "volumeMounts" "mountPath" "ports" "containerPort" "imagePullSecrets" "name" -}}
{{- $dst := .dst -}}
{{- range $key, $value := .patch -}}
{{- if hasPrefix "$" $key -}}{{- fail (printf "gpuadvisor chart: patch directive %s is not supported" $key) -}}{{- end -}}
{{- $current := get $dst $key -}}
{{- if and (kindIs "map" $value) (kindIs "map" $current) -}}
{{- $_ := include "gpuadvisor.smp" (dict "dst" $current "patch" $value) -}}
{{- else if and (kindIs "slice" $value) (kindIs "slice" $current) (hasKey $mergeKeys $key) -}}
{{- $by := get $mergeKeys $key -}}
{{- $added := list -}}
{{- range $item := $value -}}
{{- $found := false -}}
{{- range $existing := $current -}}
{{- if and (not $found) (eq (toString (get $existing $by)) (toString (get $item $by))) -}}
{{- $_ := include "gpuadvisor.smp" (dict "dst" $existing "patch" $item) -}}
{{- $found = true -}}
{{- end -}}
{{- end -}}
{{- if not $found -}}{{- $added = append $added $item -}}{{- end -}}
{{- end -}}
{{- $_ := set $dst $key (concat $added $current) -}}
{{- else -}}
{{- $_ := set $dst $key $value -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* JSON 6902 "add" operations (.ops) applied to the object .obj in place. */}}
{{- define "gpuadvisor.jsonPatch" -}}
{{- $obj := .obj -}}
{{- range $op := .ops -}}
{{- if ne $op.op "add" -}}{{- fail (printf "gpuadvisor chart: JSON patch operation %s is not supported" $op.op) -}}{{- end -}}
{{- $segments := rest (splitList "/" $op.path) -}}
{{- $parent := $obj -}}
{{- $grandparent := dict -}}
{{- $parentKey := "" -}}
{{- range $segment := initial $segments -}}
{{- $grandparent = $parent -}}
{{- $parentKey = $segment -}}
{{- if kindIs "slice" $parent -}}{{- $parent = index $parent (atoi $segment) -}}{{- else -}}{{- $parent = get $parent $segment -}}{{- end -}}
{{- if not (or (kindIs "map" $parent) (kindIs "slice" $parent)) -}}
{{- fail (printf "gpuadvisor chart: JSON patch path %s: %s does not exist" $op.path $segment) -}}
{{- end -}}
{{- end -}}
{{- $last := last $segments -}}
{{- if kindIs "map" $parent -}}
{{- $_ := set $parent $last $op.value -}}
{{- else if and (eq $last "-") (kindIs "map" $grandparent) -}}
{{- $_ := set $grandparent $parentKey (append $parent $op.value) -}}
{{- else -}}
{{- fail (printf "gpuadvisor chart: JSON patch path %s is not supported" $op.path) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The objects of .acc.objects that a patch aims at: .target's kind, name and group, or the patch's own. */}}
{{- define "gpuadvisor.matches" -}}
{{- $names := list -}}
{{- range $i, $obj := .acc.objects -}}
{{- $group := first (splitList "/" $obj.apiVersion) -}}
{{- if not (contains "/" $obj.apiVersion) -}}{{- $group = "" -}}{{- end -}}
{{- if and (eq $obj.kind $.target.kind) (eq $obj.metadata.name $.target.name) (or (not $.target.group) (eq $group $.target.group)) -}}
{{- $names = append $names $i -}}
{{- end -}}
{{- end -}}
{{- toJson $names -}}
{{- end -}}

{{/* The component in .dir applied to .acc.objects. */}}
{{- define "gpuadvisor.component" -}}
{{- $k := .root.Files.Get (printf "files/%s/kustomization.yaml" .dir) | fromYaml -}}
{{- if ne ($k.kind | default "") "Component" -}}{{- fail (printf "gpuadvisor chart: %s is not a kustomize Component" .dir) -}}{{- end -}}
{{- range $field, $_ := $k -}}
{{- if not (has $field (list "apiVersion" "kind" "resources" "patches" "configMapGenerator" "images")) -}}
{{- fail (printf "gpuadvisor chart: %s/kustomization.yaml uses %s, which the chart does not render" $.dir $field) -}}
{{- end -}}
{{- end -}}
{{- range $k.resources -}}
{{- $_ := include "gpuadvisor.file" (dict "root" $.root "path" (clean (printf "%s/%s" $.dir .)) "acc" $.acc) -}}
{{- end -}}
{{- range $entry := $k.patches -}}
{{- if $entry.path -}}
{{- $patches := dict "objects" list -}}
{{- $_ := include "gpuadvisor.file" (dict "root" $.root "path" (clean (printf "%s/%s" $.dir $entry.path)) "acc" $patches) -}}
{{- range $patch := $patches.objects -}}
{{- $target := $entry.target | default (dict "kind" $patch.kind "name" $patch.metadata.name) -}}
{{- $hits := include "gpuadvisor.matches" (dict "acc" $.acc "target" $target) | fromJsonArray -}}
{{- if and (not $hits) (not $entry.target) -}}
{{- fail (printf "gpuadvisor chart: %s/%s patches %s %s, which nothing rendered" $.dir $entry.path $patch.kind $patch.metadata.name) -}}
{{- end -}}
{{- range $hits -}}
{{- $_ := include "gpuadvisor.smp" (dict "dst" (index $.acc.objects (int .)) "patch" (deepCopy $patch)) -}}
{{- end -}}
{{- end -}}
{{- else -}}
{{- $ops := fromYamlArray $entry.patch -}}
{{- $hits := include "gpuadvisor.matches" (dict "acc" $.acc "target" $entry.target) | fromJsonArray -}}
{{- if not $hits -}}{{- fail (printf "gpuadvisor chart: %s: the patch of %s %s matches nothing" $.dir $entry.target.kind $entry.target.name) -}}{{- end -}}
{{- range $hits -}}
{{- $_ := include "gpuadvisor.jsonPatch" (dict "obj" (index $.acc.objects (int .)) "ops" (deepCopy $ops)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $k.configMapGenerator -}}
{{- $_ := include "gpuadvisor.configMap" (dict "root" $.root "dir" $.dir "acc" $.acc "gen" .) -}}
{{- end -}}
{{- end -}}
