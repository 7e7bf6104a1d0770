#!/usr/bin/env bash
# The oldest control plane gfd claims, from Debian's own packages, built once.
#
#   etcd            Debian's binary package etcd-server (3.4), /usr/bin/etcd
#   kube-apiserver  v1.20.2 from Debian's *source* package `kubernetes` (bookworm), built with
#                   Debian's Go 1.19 the way debian/rules does (GOPATH layout, CGO_ENABLED=0,
#                   `make WHAT=cmd/kube-apiserver`), its vendored reflect2 1.0.1 replaced first
#                   by Debian's 1.0.2 (1.0.1 crashes the server under Go >= 1.18: SIGSEGV in
#                   mapiterinit as soon as a CRD is created).
#
# usage: scripts/e2e-apiserver-v1.20.sh          install what is missing, build once
#        scripts/e2e-apiserver-v1.20.sh path     print the cached kube-apiserver's path
#
# The binary lands in ${XDG_CACHE_HOME:-~/.cache}/gfd-e2e/bin/kube-apiserver-v1.20.2 (beside the
# binaries of scripts/e2e-tools.sh, same NAME-VERSION naming); nothing is built when it is there.
# `apt-get source` needs a deb-src entry: it is derived at run time from the machine's own Debian
# source list (each `deb` entry as `deb-src`) and used through a private apt state directory in
# the cache, so the machine's apt configuration is never changed.  Builds run at nice 19.
set -euo pipefail

VERSION=v1.20.2
DEB_VERSION=1.20.5+really1.20.2-1.1+deb12u1
CACHE=${GFD_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gfd-e2e}
OUT=$CACHE/bin/kube-apiserver-$VERSION
WORK=$CACHE/src/kubernetes-$VERSION
GO_ROOT=/usr/lib/go-1.19
PACKAGES=(etcd-server golang-1.19-go rsync jq golang-github-modern-go-reflect2-dev dpkg-dev)
REFLECT2=/usr/share/gocode/src/github.com/modern-go/reflect2

if [[ ${1:-} == path ]]; then
    echo "$OUT"
    exit 0
fi

SUDO=()
[[ $(id -u) -eq 0 ]] || SUDO=(sudo)

missing=()
for package in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' ||
        missing+=("$package")
done
if ((${#missing[@]})); then
    echo "e2e: installing ${missing[*]}" >&2
    "${SUDO[@]}" apt-get -o DPkg::Lock::Timeout=900 update -qq || true
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 \
        install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

[[ -x $OUT ]] && exit 0

started=$(date +%s)
mkdir -p "$CACHE/bin" "$CACHE/apt/sources" "$CACHE/apt/lists/partial" "$CACHE/apt/cache" "$WORK"
exec 9>"$CACHE/.lock-kube-apiserver-$VERSION"
flock 9
[[ -x $OUT ]] && exit 0

# deb-src entries: the machine's enabled Debian entries with Types deb-src (deb822 files), or
# deb-src lines (one-line format).  No host name is written here: it is read from the list.
src_list=$CACHE/apt/sources/debian-src.sources
: >"$src_list"
for file in /etc/apt/sources.list.d/*.sources; do
    [[ -f $file ]] || continue
    awk 'BEGIN { RS = ""; ORS = "\n\n" }
        /(^|\n)Types:[^\n]*deb/ && /debian/ {
            sub(/Types:[^\n]*/, "Types: deb-src"); print }' "$file" >>"$src_list"
done
one_line=$CACHE/apt/debian-src.list
: >"$one_line"
for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f $file ]] || continue
    sed -n 's/^[[:space:]]*deb[[:space:]]\(.*debian.*\)/deb-src \1/p' "$file" >>"$one_line"
done
APT=(apt-get -q
    -o "Dir::Etc::SourceList=$one_line"
    -o "Dir::Etc::SourceParts=$CACHE/apt/sources"
    -o "Dir::State::Lists=$CACHE/apt/lists"
    -o "Dir::Cache=$CACHE/apt/cache"
    -o "APT::Get::Only-Source=true"
    -o "APT::Sandbox::User=root")
echo "e2e: fetching Debian's kubernetes source package (deb-src derived from the machine's list)" >&2
"${APT[@]}" update >&2
cd "$WORK"
tree=$(find "$WORK" -mindepth 1 -maxdepth 1 -type d -name 'kubernetes-*' | head -n1)
if [[ -z $tree ]]; then
    "${APT[@]}" source "kubernetes=$DEB_VERSION" >&2 || "${APT[@]}" source kubernetes >&2
    tree=$(find "$WORK" -mindepth 1 -maxdepth 1 -type d -name 'kubernetes-*' | head -n1)
fi
grep -q "gitVersion.*${VERSION#v}\|${VERSION#v}" "$tree/debian/changelog" ||
    { echo "e2e: $tree is not kubernetes $VERSION" >&2; exit 1; }

echo "e2e: replacing vendored reflect2 by Debian's $(dpkg-query -W -f='${Version}' golang-github-modern-go-reflect2-dev)" >&2
rm -rf "$tree/vendor/github.com/modern-go/reflect2"
mkdir -p "$tree/vendor/github.com/modern-go/reflect2"
cp -r "$REFLECT2"/. "$tree/vendor/github.com/modern-go/reflect2/"

# GOPATH layout, as debian/rules builds it
mkdir -p "$WORK/.go/src/k8s.io"
ln -sfn "$tree" "$WORK/.go/src/k8s.io/kubernetes"
echo "e2e: building kube-apiserver $VERSION with Go 1.19 (once; several minutes; cached as $OUT)" >&2
(
    cd "$WORK/.go/src/k8s.io/kubernetes"
    export PATH=$GO_ROOT/bin:$PATH GOPATH=$WORK/.go CGO_ENABLED=0
    export GOFLAGS= GOTOOLCHAIN=local
    export KUBE_GIT_VERSION=$VERSION KUBE_GIT_TREE_STATE=clean KUBE_GIT_MAJOR=1
    export KUBE_GIT_MINOR=${VERSION#v1.}
    export KUBE_GIT_MINOR=${KUBE_GIT_MINOR%%.*}
    nice -n 19 make WHAT=cmd/kube-apiserver >&2
)
cp "$tree/_output/local/bin/linux/amd64/kube-apiserver" "$OUT.tmp" 2>/dev/null ||
    cp "$(find "$tree/_output" -type f -name kube-apiserver | head -n1)" "$OUT.tmp"
mv "$OUT.tmp" "$OUT"
"$OUT" --version >&2
rm -rf "$WORK"  # 1.8 GB of source and build output; the binary is all that is needed
echo "e2e: built kube-apiserver $VERSION in $(($(date +%s) - started)) s" >&2
