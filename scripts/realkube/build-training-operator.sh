#!/usr/bin/env bash
# Build Kubeflow's training operator (github.com/kubeflow/training-operator, main package
# cmd/training-operator.v1) as a Go module through the Go module proxy, into the same cache as build.sh,
# keyed by version, and keep beside it the ClusterRole its manifests bind to its ServiceAccount
# (manifests/base/rbac/role.yaml of the same module version, in ../manifests/), which the tests run it as.
# A second run finds both and returns at once. Prints the bin directory on its last line.
#
#   scripts/realkube/build-training-operator.sh
#   TRAINING_OPERATOR_VERSION=v1.8.1 scripts/realkube/build-training-operator.sh
#
# v1.9.2 is the newest v1 tag the proxy resolves (its @v/list shows only v1.8.1, but v1.9.2 resolves); it has
# no replace directives, so `go install module@version` builds it as published. It runs against the
# kube-apiserver 1.37 that build.sh builds.
set -euo pipefail

VERSION=${TRAINING_OPERATOR_VERSION:-v1.9.2}
CACHE=${REALKUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/airflow-provider-training/k8s}
BIN="$CACHE/training-operator-$VERSION/bin"
MANIFESTS="$CACHE/training-operator-$VERSION/manifests"
NAME=training-operator.v1
MODULE=github.com/kubeflow/training-operator

if [ -x "$BIN/$NAME" ] && [ -f "$MANIFESTS/role.yaml" ]; then echo "$BIN"; exit 0; fi

command -v go >/dev/null || { echo "build-training-operator.sh: needs Go (go.dev/dl, or apt-get install golang-go)" >&2; exit 1; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOPROXY=${GOPROXY:-https://proxy.golang.org,direct}
mkdir -p "$BIN" "$MANIFESTS"
if [ ! -x "$BIN/$NAME" ]; then
  start=$(date +%s)
  GOBIN="$BIN" go install -trimpath -ldflags "-s -w" "$MODULE/cmd/$NAME@$VERSION"
  echo "build-training-operator.sh: $NAME $VERSION built in $(( $(date +%s) - start )) s" >&2
fi
source=$(go mod download -json "$MODULE@$VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
cp "$source/manifests/base/rbac/role.yaml" "$MANIFESTS/role.yaml"
echo "$BIN"
