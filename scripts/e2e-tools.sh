#!/usr/bin/env bash
# Builds the Go programs the e2e layer runs beside gfd (test components only; gfd stays pure
# Python), each once, cached by version:
#
#   helm            helm.sh/helm/v3/cmd/helm                      (go install @version)
#   kube-apiserver  k8s.io/kubernetes/cmd/kube-apiserver          (tests/e2e/tools/kube-apiserver)
#   etcd            go.etcd.io/etcd/server/v3/etcdmain             (tests/e2e/tools/etcd)
#   nfd-master      sigs.k8s.io/node-feature-discovery/cmd/...    (tests/e2e/tools/nfd)
#   nfd-worker
#   image-tools     Debian's buildah, podman and debootstrap (apt), to build and run the image
#                   without a Docker engine (scripts/image.sh); installed only when missing
#
# usage: scripts/e2e-tools.sh [all|helm|kube-apiserver|etcd|nfd|image-tools]...  build what is missing
#        scripts/e2e-tools.sh path NAME                                print NAME's cached path
#
# The versions are the ones written in tests/e2e/tools/*/go.mod (and HELM_VERSION below), so
# there is one place to change each. Binaries land in ${XDG_CACHE_HOME:-~/.cache}/gfd-e2e/bin
# named NAME-VERSION; a build happens only when that file is missing. Modules are downloaded
# into a module cache under the same directory. Builds run at the lowest priority.
set -euo pipefail

HELM_VERSION=v3.22.0
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TOOLS=$ROOT/tests/e2e/tools
CACHE=${GFD_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gfd-e2e}
BIN=$CACHE/bin
GO=${GO:-/usr/local/go/bin/go}

export GOMODCACHE=$CACHE/gomod GOCACHE=$CACHE/gobuild GOFLAGS=-mod=mod CGO_ENABLED=0
export GOTOOLCHAIN=local

required_version() {  # module go.mod -> the version the wrapper module requires
    sed -n "s#^[[:space:]]*\(require \)\{0,1\}$1 \(v[^[:space:]]*\).*#\2#p" "$2" | head -n1
}

version_of() {
    case $1 in
        helm) echo "$HELM_VERSION" ;;
        kube-apiserver) required_version k8s.io/kubernetes "$TOOLS/kube-apiserver/go.mod" ;;
        etcd) required_version go.etcd.io/etcd/server/v3 "$TOOLS/etcd/go.mod" ;;
        nfd-master | nfd-worker) required_version sigs.k8s.io/node-feature-discovery "$TOOLS/nfd/go.mod" ;;
        *) echo "unknown tool: $1" >&2; exit 2 ;;
    esac
}

path_of() { echo "$BIN/$1-$(version_of "$1")"; }

# build NAME WRAPPER_DIR PACKAGE LDFLAGS: go build PACKAGE inside a scratch copy of the wrapper
# module (the worktree is never written), then move the binary into place.
build() {
    local name=$1 wrapper=$2 package=$3 ldflags=$4 out scratch started
    out=$(path_of "$name")
    [[ -x $out ]] && return 0
    started=$(date +%s)
    scratch=$(mktemp -d)
    cp "$TOOLS/$wrapper"/* "$scratch/"
    echo "e2e-tools: building $name $(version_of "$name") (once; cached as $out)" >&2
    (cd "$scratch" && nice -n 19 "$GO" mod tidy && nice -n 19 "$GO" build -trimpath -ldflags "$ldflags" -o "$out.tmp" "$package")
    mv "$out.tmp" "$out"
    rm -rf "$scratch"
    echo "e2e-tools: built $name in $(($(date +%s) - started)) s" >&2
}

build_helm() {
    local out started
    out=$(path_of helm)
    [[ -x $out ]] && return 0
    started=$(date +%s)
    echo "e2e-tools: building helm $HELM_VERSION (once; cached as $out)" >&2
    local gobin
    gobin=$(mktemp -d)
    GOBIN=$gobin nice -n 19 "$GO" install -trimpath "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
    mv "$gobin/helm" "$out"
    rm -rf "$gobin"
    echo "e2e-tools: built helm in $(($(date +%s) - started)) s" >&2
}

build_kube_apiserver() {
    local v minor x
    v=$(version_of kube-apiserver)
    minor=${v#v*.}
    minor=${minor%%.*}
    x=k8s.io/component-base/version
    build kube-apiserver kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver \
        "-s -w -X $x.gitVersion=$v -X $x.gitMajor=1 -X $x.gitMinor=$minor -X $x.gitTreeState=clean"
}

build_etcd() { build etcd etcd . "-s -w"; }

build_nfd() {
    local v x=sigs.k8s.io/node-feature-discovery/pkg/version
    v=$(version_of nfd-master)
    build nfd-master nfd sigs.k8s.io/node-feature-discovery/cmd/nfd-master "-s -w -X $x.version=$v"
    build nfd-worker nfd sigs.k8s.io/node-feature-discovery/cmd/nfd-worker "-s -w -X $x.version=$v"
}

install_image_tools() {
    local missing=() tool
    for tool in buildah podman debootstrap; do
        command -v "$tool" >/dev/null || missing+=("$tool")
    done
    [[ ${#missing[@]} -eq 0 ]] && return 0
    if [[ $(id -u) -ne 0 ]]; then
        echo "e2e-tools: missing ${missing[*]}: apt-get install buildah podman debootstrap (as root)" >&2
        return 0
    fi
    echo "e2e-tools: installing ${missing[*]} (Debian packages)" >&2
    apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends buildah podman debootstrap >&2
}

with_lock() {  # one build of a tool at a time on this machine
    local lock=$CACHE/.lock-$1
    shift
    exec {fd}>"$lock"
    flock "$fd"
    "$@"
    flock -u "$fd"
}

mkdir -p "$BIN" "$CACHE"
if [[ ${1:-} == path ]]; then
    path_of "${2:?usage: $0 path NAME}"
    exit 0
fi
[[ $# -eq 0 ]] && set -- all
for what in "$@"; do
    case $what in
        all)
            with_lock helm build_helm
            with_lock etcd build_etcd
            with_lock kube-apiserver build_kube_apiserver
            with_lock nfd build_nfd
            install_image_tools
            ;;
        helm) with_lock helm build_helm ;;
        kube-apiserver) with_lock kube-apiserver build_kube_apiserver ;;
        etcd) with_lock etcd build_etcd ;;
        nfd) with_lock nfd build_nfd ;;
        image-tools) install_image_tools ;;
        *) echo "usage: $0 [all|helm|kube-apiserver|etcd|nfd|image-tools]... | path NAME" >&2; exit 2 ;;
    esac
done
