#!/usr/bin/env bash
# Build a real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager) and kubectl (for the
# log throughput benchmark's side-by-side figure) from Go modules fetched through the Go module proxy, into a
# cache keyed by version. Only the binaries missing from the cache are built: a second run returns at once, and
# a cache made before kubectl was added builds kubectl alone. Prints the cache's bin directory on its last
# line.
#
#   scripts/realkube/build.sh            # the default versions below
#   K8S_VERSION=v1.36.3 scripts/realkube/build.sh
#
# Why a wrapper module: k8s.io/kubernetes is published as a module, but its go.mod replaces its ~30
# staging modules (k8s.io/api, k8s.io/apiserver, ...) with ./staging/..., and a dependency's replace lines
# are ignored. So the wrapper requires k8s.io/kubernetes vX.Y.Z and replaces every staging module it
# requires at v0.0.0 with that module's own release v0.Y.Z. etcd's server module has the same shape.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.37.2}
ETCD_VERSION=${ETCD_VERSION:-v3.7.3}
CACHE=${REALKUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/airflow-provider-training/k8s}
OUT="$CACHE/$K8S_VERSION-etcd$ETCD_VERSION"
BIN="$OUT/bin"
PROXY=${GOPROXY_URL:-https://proxy.golang.org}
K8S_COMMANDS=(kube-apiserver kube-controller-manager kubectl)

k8s_missing=()
for b in "${K8S_COMMANDS[@]}"; do [ -x "$BIN/$b" ] || k8s_missing+=("k8s.io/kubernetes/cmd/$b"); done
if [ ${#k8s_missing[@]} -eq 0 ] && [ -x "$BIN/etcd" ]; then echo "$BIN"; exit 0; fi

command -v go >/dev/null || { echo "build.sh: needs Go (go.dev/dl, or apt-get install golang-go)" >&2; exit 1; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOPROXY=${GOPROXY:-https://proxy.golang.org,direct}
mkdir -p "$BIN" "$OUT/src"
start=$(date +%s)

# --- kube-apiserver, kube-controller-manager and kubectl: one go build, so they share compiled packages ---
if [ ${#k8s_missing[@]} -gt 0 ]; then
  k8s_mod="$OUT/src/kubernetes"
  mkdir -p "$k8s_mod"
  minor=${K8S_VERSION#v1.}  # 37.2
  staging=$(curl -fsS "$PROXY/k8s.io/kubernetes/@v/$K8S_VERSION.mod" | awk '/^\tk8s\.io\/[^ ]+ v0\.0\.0$/ {print $1}')
  {
    echo "module realkube/kubernetes"
    echo
    echo "go 1.26"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    for m in $staging; do echo "replace $m => $m v0.$minor"; done
  } >"$k8s_mod/go.mod"
  major_minor=${K8S_VERSION%.*}  # v1.37
  ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION \
    -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${major_minor#v1.} \
    -X k8s.io/component-base/version.gitTreeState=clean"
  (cd "$k8s_mod" && go mod download k8s.io/kubernetes && \
    go build -mod=mod -trimpath -ldflags "$ldflags" -o "$BIN/" \
      "${k8s_missing[@]}")
  echo "build.sh: kubernetes $K8S_VERSION (${k8s_missing[*]##*/}) built in $(( $(date +%s) - start )) s" >&2
fi

# --- etcd ---
if [ ! -x "$BIN/etcd" ]; then
  etcd_mod="$OUT/src/etcd"
  mkdir -p "$etcd_mod"
  cat >"$etcd_mod/go.mod" <<MOD
module realkube/etcd

go 1.26

require (
	go.etcd.io/etcd/server/v3 $ETCD_VERSION
	go.etcd.io/etcd/api/v3 $ETCD_VERSION
	go.etcd.io/etcd/client/pkg/v3 $ETCD_VERSION
	go.etcd.io/etcd/client/v3 $ETCD_VERSION
	go.etcd.io/etcd/pkg/v3 $ETCD_VERSION
)
MOD
  (cd "$etcd_mod" && go build -mod=mod -trimpath -ldflags "-s -w" -o "$BIN/etcd" go.etcd.io/etcd/server/v3)
fi
echo "build.sh: done in $(( $(date +%s) - start )) s" >&2
echo "$BIN"
