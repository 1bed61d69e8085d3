#!/usr/bin/env bash
# Builds the real control plane the cluster test tier runs (etcd, kube-apiserver, kube-controller-manager) from
# the official Go modules pinned in tests/cluster/controlplane/{etcd,kube}/go.mod, into a git-ignored cache keyed
# by version OUTSIDE the clone (so a fresh clone on a warm machine skips the build):
# ${XDG_CACHE_HOME:-~/.cache}/vllm-stall-watchdog/control-plane/etcd-<version>+kubernetes-<version>/. Idempotent: a binary already built for
# the pinned versions is kept. Nothing is fetched from outside the Go module proxy.
#   bash tests/cluster/build_control_plane.sh            (or: make control-plane)
#   bash tests/cluster/build_control_plane.sh --print-dir  (prints the cache directory and exits)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
etcd_version=$(awk '$1=="require" && $2=="go.etcd.io/etcd/server/v3" {print $3}' "$here/controlplane/etcd/go.mod")
kube_version=$(awk '($1=="require" && $2=="k8s.io/kubernetes") {print $3; exit} $1=="k8s.io/kubernetes" {print $2; exit}' "$here/controlplane/kube/go.mod")
if [ -z "$etcd_version" ] || [ -z "$kube_version" ]; then  # an empty version would build unusable binaries
    echo "control-plane: cannot read the pinned versions from $here/controlplane/*/go.mod" >&2; exit 2
fi
dir="${CONTROL_PLANE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/vllm-stall-watchdog/control-plane/etcd-$etcd_version+kubernetes-$kube_version}"
if [ "${1:-}" = "--print-dir" ]; then echo "$dir"; exit 0; fi
# shellcheck source=tests/go_build.sh
. "$here/../go_build.sh"
go_build_name=control-plane go_build_dir="$dir"
go_build_need_go
# The version the binaries report (kubectl and helm read it from /version); a plain `go build` would say v0.0.0.
v="k8s.io/component-base/version"
kube_ldflags="-s -X $v.gitVersion=$kube_version -X $v.gitMajor=$(cut -d. -f1 <<<"${kube_version#v}")"
kube_ldflags="$kube_ldflags -X $v.gitMinor=$(cut -d. -f2 <<<"$kube_version") -X $v.gitTreeState=clean"
go_build "$here/controlplane/etcd" go.etcd.io/etcd/server/v3 etcd -s
go_build "$here/controlplane/kube" k8s.io/kubernetes/cmd/kube-apiserver kube-apiserver "$kube_ldflags"
go_build "$here/controlplane/kube" k8s.io/kubernetes/cmd/kube-controller-manager kube-controller-manager "$kube_ldflags"
go_build_done
