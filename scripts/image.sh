#!/usr/bin/env bash
# Builds gfd's container image from the Dockerfile (`make image`):
#
#   scripts/image.sh [IMAGE]          default IMAGE: gfd:<version in pyproject.toml>
#   scripts/image.sh --push IMAGE     the same, then pushes IMAGE (`make push IMAGE=...`); IMAGE
#                                     must name its registry: <registry>/gfd:<tag>. Log in
#                                     first (docker login / buildah login <registry>).
#
# With docker where a Docker engine answers; otherwise with buildah (no engine, no registry
# needed). buildah builds FROM a local stand-in for python:3.11-slim-bookworm -- same Debian
# release, same Python 3.11 -- made once from Debian's own packages:
#   debootstrap --variant=minbase bookworm  ->  podman import  ->  + python3, python3-venv,
#   python3-pip (buildah run --isolation chroot)  ->  localhost/gfd-python-base:3.11-bookworm
# PYTHON_IMAGE=... uses another base instead (a local image, for buildah).
# Runs as root (debootstrap, chroot isolation).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/pyproject.toml")
PUSH=
if [[ ${1:-} == --push ]]; then
    PUSH=1
    shift
fi
IMAGE=${1:-gfd:$VERSION}
# A name without a registry (its first part has no '.' or ':' and is not localhost) would be
# pushed to Docker Hub's library: refused before anything is built.
registry=${IMAGE%%/*}
if [[ -n $PUSH && ( $registry == "$IMAGE" || ! ( $registry == *.* || $registry == *:* || $registry == localhost ) ) ]]; then
    echo "push: IMAGE=$IMAGE names no registry; use IMAGE=<registry>/gfd:<tag>, e.g. make push IMAGE=registry.example.com/team/gfd:$VERSION" >&2
    exit 2
fi
LOCAL_BASE=localhost/gfd-python-base:3.11-bookworm
MINBASE=localhost/gfd-debian:bookworm-minbase
CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt

if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
    docker build ${PYTHON_IMAGE:+--build-arg PYTHON_IMAGE="$PYTHON_IMAGE"} -t "$IMAGE" "$ROOT"
    [[ -n $PUSH ]] && docker push "$IMAGE"
    exit 0
fi
for tool in buildah podman debootstrap; do
    command -v "$tool" >/dev/null || {
        echo "image: no Docker engine answers and $tool is missing (apt-get install buildah podman debootstrap)" >&2
        exit 1
    }
done

# The Debian mirror this machine already uses (its apt sources), so no host name is written here.
debian_mirror() {
    local uri
    uri=$(sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null |
        grep -v -- '-security' | head -n1 || true)
    [[ -z $uri ]] && uri=$(awk '$1 == "deb" && $0 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
    echo "$uri"
}

# local_image NAME PACKAGES...: minbase + Debian packages, committed as NAME (once).
local_image() {
    local name=$1 ctr
    shift
    buildah inspect --type image "$name" >/dev/null 2>&1 && return 0
    echo "image: making the local base $name (once)" >&2
    if ! buildah inspect --type image "$MINBASE" >/dev/null 2>&1; then
        local rootfs
        rootfs=$(mktemp -d)
        debootstrap --variant=minbase bookworm "$rootfs" $(debian_mirror) >&2
        # As Debian's "slim" images: no downloaded packages, no package lists, and no
        # documentation, manual pages or translations, now or from later installs.
        rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
            "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* \
            "$rootfs"/usr/share/locale/* "$rootfs"/var/log/*.log
        printf '%s\n' 'path-exclude /usr/share/doc/*' 'path-include /usr/share/doc/*/copyright' \
            'path-exclude /usr/share/man/*' 'path-exclude /usr/share/info/*' \
            'path-exclude /usr/share/locale/*' >"$rootfs/etc/dpkg/dpkg.cfg.d/slim"
        tar -C "$rootfs" -c . | podman import - "$MINBASE" >&2
        rm -rf "$rootfs"
    fi
    ctr=$(buildah from --pull=never "$MINBASE")
    buildah run --isolation chroot "$ctr" -- sh -c \
        "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $* >/dev/null && apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/debconf/*-old /var/log/*.log" >&2
    buildah config --env LANG=C.UTF-8 "$ctr"
    buildah commit --quiet "$ctr" "$name" >/dev/null
    buildah rm "$ctr" >/dev/null
}

if [[ -z ${PYTHON_IMAGE:-} ]]; then
    # pip and venv for the build stages; python-is-python3: the Dockerfile calls `python`,
    # as in the official image.
    local_image "$LOCAL_BASE" python3 python3-venv python3-pip python-is-python3
    PYTHON_IMAGE=$LOCAL_BASE
fi
# pip inside the build verifies TLS with the machine's CA bundle.
buildah bud --isolation chroot --pull=never --layers=false \
    --build-arg PYTHON_IMAGE="$PYTHON_IMAGE" \
    -v "$CA_BUNDLE:$CA_BUNDLE:ro" \
    -t "$IMAGE" "$ROOT" >&2
if [[ -n $PUSH ]]; then
    buildah push "$IMAGE" "docker://$IMAGE" >&2
fi
echo "$IMAGE"
