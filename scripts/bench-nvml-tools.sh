#!/usr/bin/env bash
# Builds what bench/bench_upstream_nvml.py runs gfd against (bench tooling only; gfd stays pure
# Python), each once, cached by version:
#
#   mock-nvml  NVIDIA's mock libnvidia-ml.so (NVIDIA/k8s-test-infra, pkg/gpu/mocknvml): a cgo
#              c-shared library that answers NVML calls for a simulated node (8 x A100 by
#              default, or the YAML profile named by MOCK_NVML_CONFIG)
#   upstream   gpu-feature-discovery from NVIDIA/k8s-device-plugin at its v0.20.0 tag, built
#              with the modules vendored in that tag (go build -mod=vendor, no network)
#
# usage: scripts/bench-nvml-tools.sh                 build what is missing
#        scripts/bench-nvml-tools.sh path NAME       print NAME's cached path (mock-nvml: the
#                                                    directory holding libnvidia-ml.so.1)
#
# Sources are git repositories: GFD_BENCH_TEST_INFRA_GIT and GFD_BENCH_DEVICE_PLUGIN_GIT name
# each one, as a local git directory (used in place, read only) or a URL (cloned bare into the
# cache once); the defaults are the GitHub URLs. Everything lands under
# ${XDG_CACHE_HOME:-~/.cache}/gfd-bench. Builds run at the lowest priority.
set -euo pipefail

TEST_INFRA_REV=v0.3.0 # k8s-test-infra release whose mock NVML is used
DEVICE_PLUGIN_REV=v0.20.0 # the upstream release gfd replaces
CACHE=${GFD_BENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gfd-bench}
GO=${GO:-/usr/local/go/bin/go}

export GOMODCACHE=$CACHE/gomod GOCACHE=$CACHE/gobuild GOTOOLCHAIN=local GOFLAGS=-mod=vendor

path_of() {
    case $1 in
        mock-nvml) echo "$CACHE/mock-nvml-$TEST_INFRA_REV" ;;
        upstream) echo "$CACHE/bin/gpu-feature-discovery-$DEVICE_PLUGIN_REV" ;;
        *) echo "unknown tool: $1" >&2; exit 2 ;;
    esac
}

# git_dir NAME SOURCE: a git directory holding SOURCE's history (SOURCE itself when it is one)
git_dir() {
    local name=$1 source=$2
    if [[ -d $source ]]; then
        echo "$source"
        return 0
    fi
    local bare=$CACHE/src/$name.git
    if [[ ! -d $bare ]]; then
        mkdir -p "$CACHE/src"
        git clone --quiet --bare "$source" "$bare.tmp" >&2
        mv "$bare.tmp" "$bare"
    fi
    echo "$bare"
}

# checkout GIT_DIR REV PATH...: a scratch directory holding those paths of REV's tree (only
# what the build reads: a partial clone may lack the blobs of the rest; the source is never
# written)
checkout() {
    local gitdir=$1 rev=$2 scratch
    shift 2
    scratch=$(mktemp -d)
    git --git-dir="$gitdir" archive "$rev" -- "$@" | tar -x -C "$scratch"
    if [[ ! -f $scratch/go.mod ]]; then
        echo "bench-nvml-tools: cannot check out $rev from $gitdir" >&2
        return 1
    fi
    echo "$scratch"
}

build_mock_nvml() {
    local out gitdir scratch started
    out=$(path_of mock-nvml)
    [[ -e $out/libnvidia-ml.so.1 ]] && return 0
    started=$(date +%s)
    echo "bench-nvml-tools: building the mock NVML of k8s-test-infra $TEST_INFRA_REV (once; cached in $out)" >&2
    gitdir=$(git_dir k8s-test-infra "${GFD_BENCH_TEST_INFRA_GIT:-https://github.com/NVIDIA/k8s-test-infra.git}")
    scratch=$(checkout "$gitdir" "$TEST_INFRA_REV" go.mod go.sum vendor pkg/gpu/mocknvml pkg/fmcoord) || exit 1
    # The library is padded to a real driver's size by default; the padding is inert bytes,
    # left out here to keep the cache small (both programs load the same library).
    (cd "$scratch/pkg/gpu/mocknvml" && PATH="$(dirname "$GO"):$PATH" nice -n 19 make NO_PADDING=1 >&2)
    mkdir -p "$out.tmp"
    cp -a "$scratch"/pkg/gpu/mocknvml/libnvidia-ml.so* "$out.tmp/"
    cp -a "$scratch/pkg/gpu/mocknvml/configs" "$out.tmp/"
    rm -rf "$out" && mv "$out.tmp" "$out"
    rm -rf "$scratch"
    echo "bench-nvml-tools: built the mock NVML in $(($(date +%s) - started)) s" >&2
}

build_upstream() {
    local out gitdir scratch started
    out=$(path_of upstream)
    [[ -x $out ]] && return 0
    started=$(date +%s)
    echo "bench-nvml-tools: building gpu-feature-discovery $DEVICE_PLUGIN_REV (once; cached as $out)" >&2
    gitdir=$(git_dir k8s-device-plugin "${GFD_BENCH_DEVICE_PLUGIN_GIT:-https://github.com/NVIDIA/k8s-device-plugin.git}")
    scratch=$(checkout "$gitdir" "$DEVICE_PLUGIN_REV" go.mod go.sum vendor api cmd internal) || exit 1
    mkdir -p "$(dirname "$out")"
    # cgo: upstream loads libnvidia-ml.so.1 with dlopen through go-nvml.
    (cd "$scratch" && nice -n 19 "$GO" build -mod=vendor -trimpath -o "$out.tmp" ./cmd/gpu-feature-discovery)
    mv "$out.tmp" "$out"
    rm -rf "$scratch"
    echo "bench-nvml-tools: built gpu-feature-discovery in $(($(date +%s) - started)) s" >&2
}

if [[ ${1:-} == path ]]; then
    path_of "${2:?usage: $0 path NAME}"
    exit 0
fi
if [[ ! -x $GO ]]; then
    echo "bench-nvml-tools: no Go toolchain at $GO (set GO=...)" >&2
    exit 3
fi
build_mock_nvml
build_upstream
