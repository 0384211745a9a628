#!/usr/bin/env bash
# Builds the Kubernetes control plane the tests run (etcd, kube-apiserver, kube-scheduler), helm, gpuadvisor-scheduler
# (kube-scheduler with the GPUAdvisor plugin, cmd/ and plugin/ here) and podresources-standin (the kubelet's
# pod-resources API answered from a file, for the collector's tests: cmd/podresources-standin) from the modules pinned
# in k8s/go.mod, into a cache outside the clone keyed on go.mod, go.sum, this module's own sources, the Go version and
# RECIPE (bump it when the build's flags change), so that a second build (or a second clone) is free. The folder
# holding the binaries is the LAST line printed.
#
#   k8s/build.sh            build or find the binaries
#   k8s/build.sh --cached   only find them: exit 1 (printing nothing) when this key has not been built
#   GPUADVISOR_KUBE_CACHE   the cache's root (default: $XDG_CACHE_HOME or ~/.cache, then gpuadvisor/kube-bin)
#   GO                      the go command (default: go on PATH, else /usr/local/go/bin/go)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
case "${1:-}" in
    "" | --cached) ;;
    *) echo "error: unknown argument '$1' (k8s/build.sh [--cached])" >&2; exit 2 ;;
esac

go_cmd=${GO:-}
if [ -z "$go_cmd" ]; then
    if command -v go >/dev/null 2>&1; then go_cmd=go; else go_cmd=/usr/local/go/bin/go; fi
fi
if ! "$go_cmd" version >/dev/null 2>&1; then
    echo "error: no Go toolchain (looked for '$go_cmd'); install Go 1.26 or set GO=/path/to/go" >&2
    exit 2
fi

RECIPE=2
go_version=$("$go_cmd" env GOVERSION)
# gpuadvisor-scheduler is built from this module's own sources too: they are part of the key.
own_sources() { (cd "$here" && find plugin cmd -name '*.go' -type f 2>/dev/null | LC_ALL=C sort | xargs -r cat); }
key=$( (cat "$here/go.mod" "$here/go.sum"; own_sources; echo "$go_version recipe $RECIPE") | sha256sum | cut -c1-16)
root=${GPUADVISOR_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuadvisor/kube-bin}
out="$root/$key"

if [ -f "$out/.complete" ]; then
    echo "$out"
    exit 0
fi
if [ "${1:-}" = "--cached" ]; then
    exit 1
fi

cd "$here"
# The binaries report the versions pinned in go.mod (`--version`), not the module system's v0.0.0-master default.
module_version() { "$go_cmd" list -m -f '{{.Version}}' "$1"; }
kube_version=$(module_version k8s.io/kubernetes)
kube_major=$(echo "$kube_version" | sed -E 's/^v([0-9]+)\..*/\1/')
kube_minor=$(echo "$kube_version" | sed -E 's/^v[0-9]+\.([0-9]+)\..*/\1/')
build_date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
kube_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    kube_ldflags+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=$kube_major -X $pkg.gitMinor=$kube_minor"
    kube_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
done
# etcd's version is a constant of its api module; only the commit is a variable, and a module build has none.
etcd_version=$(module_version go.etcd.io/etcd/server/v3)
etcd_ldflags="-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=module-$etcd_version"
# helm: its own version, and the Kubernetes version its lint and template assume (that of its client-go, as upstream).
helm_version=$(module_version helm.sh/helm/v3)
helm_ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$helm_version"
helm_ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    helm_ldflags+=" -X $pkg.k8sVersionMajor=$kube_major -X $pkg.k8sVersionMinor=$kube_minor"
done

mkdir -p "$root"
staging=$(mktemp -d "$root/.building-$key.XXXXXX")
chmod 755 "$staging"
trap 'rm -rf "$staging"' EXIT
export CGO_ENABLED=0
echo "building kube-apiserver, kube-scheduler, gpuadvisor-scheduler and podresources-standin $kube_version, etcd $etcd_version, helm $helm_version" \
    "with $go_version into $out" >&2
"$go_cmd" build -trimpath -ldflags "$kube_ldflags" -o "$staging/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler ./cmd/gpuadvisor-scheduler \
    ./cmd/podresources-standin
"$go_cmd" build -trimpath -ldflags "$etcd_ldflags" -o "$staging/etcd" go.etcd.io/etcd/server/v3
"$go_cmd" build -trimpath -ldflags "$helm_ldflags" -o "$staging/helm" helm.sh/helm/v3/cmd/helm
printf 'kubernetes %s\netcd %s\nhelm %s\n%s\n' "$kube_version" "$etcd_version" "$helm_version" "$go_version" \
    >"$staging/VERSIONS"
touch "$staging/.complete"
# Another build of the same key may have finished meanwhile: either copy is good, keep the first.
if mv -T "$staging" "$out" 2>/dev/null; then
    trap - EXIT
fi
echo "$out"
