#!/usr/bin/env bash
# Builds the node pieces the node test tier runs besides the control plane (kubelet, kube-proxy, kube-scheduler)
# from the official Go module pinned in tests/node/kube/go.mod (the same k8s.io/kubernetes release as
# tests/cluster/controlplane/kube/go.mod: checked), into the control plane's cache directory, keyed by version
# (`tests/cluster/build_control_plane.sh --print-dir`), and the watchdog image archive if there is none. Idempotent;
# builds the control plane first.
#   bash tests/node/build_node.sh              (or: make node)
#   bash tests/node/build_node.sh --print-dir
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
version() { awk '($1=="require" && $2=="k8s.io/kubernetes") {print $3; exit} $1=="k8s.io/kubernetes" {print $2; exit}' "$1"; }
node_version=$(version "$here/kube/go.mod")
plane_version=$(version "$root/tests/cluster/controlplane/kube/go.mod")
if [ -z "$node_version" ] || [ "$node_version" != "$plane_version" ]; then
    echo "node: tests/node/kube/go.mod pins k8s.io/kubernetes '$node_version', the control plane '$plane_version'" >&2
    exit 2
fi
dir=$(bash "$root/tests/cluster/build_control_plane.sh" --print-dir)
if [ "${1:-}" = "--print-dir" ]; then echo "$dir"; exit 0; fi
bash "$root/tests/cluster/build_control_plane.sh"
v="k8s.io/component-base/version"
ldflags="-s -X $v.gitVersion=$node_version -X $v.gitMajor=$(cut -d. -f1 <<<"${node_version#v}")"
ldflags="$ldflags -X $v.gitMinor=$(cut -d. -f2 <<<"$node_version") -X $v.gitTreeState=clean"
start=$(date +%s)
for name in kubelet kube-proxy kube-scheduler; do
    out="$dir/$name"
    if [ -x "$out" ]; then echo "node: $name is built ($out)"; continue; fi
    t0=$(date +%s)
    echo "node: building $name $node_version"
    (cd "$here/kube" && go build -trimpath -ldflags="$ldflags" -o "$out.tmp" "k8s.io/kubernetes/cmd/$name")
    mv "$out.tmp" "$out"
    echo "node: $name built in $(( $(date +%s) - t0 ))s"
done
# The watchdog image's OCI archive (what the chart's Deployment runs on the node): built once if there is none
# (.ci/run builds .cache/image/ before; the node tier rebuilds .cache/node/ when it is older than its inputs).
if [ ! -f "$root/.cache/image/vllm-stall-watchdog.oci.tar" ] && [ ! -f "$root/.cache/node/vllm-stall-watchdog.oci.tar" ]; then
    t0=$(date +%s)
    echo "node: building the watchdog image archive (tests/image/oci_archive.py: mmdebstrap + wheels, needs root)"
    "${PYTHON:-$root/.venv/bin/python}" "$root/tests/image/oci_archive.py" "$root/.cache/node/vllm-stall-watchdog.oci.tar"
    echo "node: watchdog image archive built in $(( $(date +%s) - t0 ))s"
fi
echo "node: ready in $dir ($(( $(date +%s) - start ))s)"
