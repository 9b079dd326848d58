#!/usr/bin/env bash
# Build Kubeflow Trainer's controller manager (github.com/kubeflow/trainer/v2, main package
# cmd/trainer-controller-manager) and the JobSet controller it drives (sigs.k8s.io/jobset, main package at the
# module root; v0.12.0 is the version trainer v2.3.0's go.mod requires) through the Go module proxy, into the
# same cache as build.sh, keyed by both versions. Beside the binaries (in ../manifests/) it keeps what the tests
# run them with, copied unchanged from the Go module cache:
#   trainer/  CRDs, rbac/role.yaml, webhook/manifests.yaml, manager/controller_manager_config.yaml,
#             runtimes/*.yaml (the upstream ClusterTrainingRuntimes)
#   jobset/   the JobSet CRD, rbac/role.yaml + manager_secrets_role.yaml, webhook/manifests.yaml,
#             manager/controller_manager_config.yaml
# `go install module@version` is not used: it asks the proxy for the module's version list (its deprecation
# check), which the proxy here refuses; instead each exact version is downloaded (`go mod download`) and built in
# its own module directory with its own go.mod and go.sum (neither module has replace directives, so this is
# the build `go install` would make). A second run finds everything and returns at once. Prints the bin directory on its last line.
#
#   scripts/realkube/build-trainer.sh
#   TRAINER_VERSION=v2.3.0 JOBSET_VERSION=v0.12.0 scripts/realkube/build-trainer.sh
set -euo pipefail

TRAINER_VERSION=${TRAINER_VERSION:-v2.3.0}
JOBSET_VERSION=${JOBSET_VERSION:-v0.12.0}
CACHE=${REALKUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/airflow-provider-training/k8s}
ROOT="$CACHE/trainer-$TRAINER_VERSION-jobset-$JOBSET_VERSION"
BIN="$ROOT/bin"
MANIFESTS="$ROOT/manifests"
TRAINER=github.com/kubeflow/trainer/v2
JOBSET=sigs.k8s.io/jobset

if [ -x "$BIN/trainer-controller-manager" ] && [ -x "$BIN/jobset" ] && [ -f "$MANIFESTS/.complete" ]; then
  echo "$BIN"; exit 0
fi

command -v go >/dev/null || { echo "build-trainer.sh: needs Go (go.dev/dl, or apt-get install golang-go)" >&2; exit 1; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOPROXY=${GOPROXY:-https://proxy.golang.org,direct}
mkdir -p "$BIN"
moddir() { go mod download -json "$1" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p'; }
if [ ! -x "$BIN/jobset" ]; then
  start=$(date +%s)
  (cd "$(moddir "$JOBSET@$JOBSET_VERSION")" && go build -trimpath -ldflags "-s -w" -o "$BIN/jobset" .)
  echo "build-trainer.sh: jobset $JOBSET_VERSION built in $(( $(date +%s) - start )) s" >&2
fi
if [ ! -x "$BIN/trainer-controller-manager" ]; then
  start=$(date +%s)
  (cd "$(moddir "$TRAINER@$TRAINER_VERSION")" &&
    go build -trimpath -ldflags "-s -w" -o "$BIN/trainer-controller-manager" ./cmd/trainer-controller-manager)
  echo "build-trainer.sh: trainer-controller-manager $TRAINER_VERSION built in $(( $(date +%s) - start )) s" >&2
fi

trainer=$(moddir "$TRAINER@$TRAINER_VERSION")
jobset=$(moddir "$JOBSET@$JOBSET_VERSION")
rm -rf "$MANIFESTS"
mkdir -p "$MANIFESTS"/trainer/{crds,rbac,webhook,manager,runtimes} "$MANIFESTS"/jobset/{crds,rbac,webhook,manager}
cp "$trainer"/manifests/base/crds/trainer.kubeflow.org_*.yaml "$MANIFESTS/trainer/crds/"
cp "$trainer/manifests/base/rbac/role.yaml" "$MANIFESTS/trainer/rbac/"
cp "$trainer/manifests/base/webhook/manifests.yaml" "$MANIFESTS/trainer/webhook/"
cp "$trainer/manifests/base/manager/controller_manager_config.yaml" "$MANIFESTS/trainer/manager/"
cp "$trainer"/manifests/base/runtimes/*.yaml "$MANIFESTS/trainer/runtimes/"
rm -f "$MANIFESTS/trainer/runtimes/kustomization.yaml"
cp "$jobset/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml" "$MANIFESTS/jobset/crds/"
cp "$jobset/config/components/rbac/role.yaml" "$jobset/config/components/rbac/manager_secrets_role.yaml" "$MANIFESTS/jobset/rbac/"
cp "$jobset/config/components/webhook/manifests.yaml" "$MANIFESTS/jobset/webhook/"
cp "$jobset/config/components/manager/controller_manager_config.yaml" "$MANIFESTS/jobset/manager/"
chmod -R u+w "$MANIFESTS"
touch "$MANIFESTS/.complete"
echo "$BIN"
