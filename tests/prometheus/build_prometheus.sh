#!/usr/bin/env bash
# Builds the Prometheus servers the prometheus test tier runs beside Debian's 2.42 (/usr/bin/prometheus), from the
# official Go modules pinned in tests/prometheus/modules/{prometheus,thanos}/go.mod, each into a git-ignored cache
# keyed by version OUTSIDE the clone (a fresh clone on a warm machine skips the build):
#   ${XDG_CACHE_HOME:-~/.cache}/vllm-stall-watchdog/prometheus-<version>/prometheus   (Prometheus 3.x: module v0.3XX.Y)
#   ${XDG_CACHE_HOME:-~/.cache}/vllm-stall-watchdog/thanos-<version>/thanos           (Thanos Query: the HA pair's dedup)
# Prometheus is built with remove_all_sd (the tier uses static and file targets only) and without the web UI's
# assets (the HTTP API is what the watchdog reads). Idempotent: a binary already built for the version is kept.
# Nothing is fetched from outside the Go module proxy.
#   bash tests/prometheus/build_prometheus.sh                       (or: make prometheus-builds)
#   bash tests/prometheus/build_prometheus.sh --print-dir prometheus|thanos  (prints that cache directory and exits)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
pinned() {  # pinned MODULE_DIR MODULE: the version its go.mod requires
    awk -v m="$2" '$1=="require" && $2==m {print $3}' "$here/modules/$1/go.mod"
}
prometheus_version=$(pinned prometheus github.com/prometheus/prometheus)
thanos_version=$(pinned thanos github.com/thanos-io/thanos)
if [ -z "$prometheus_version" ] || [ -z "$thanos_version" ]; then
    echo "prometheus-builds: cannot read the pinned versions from $here/modules/*/go.mod" >&2; exit 2
fi
cache="${XDG_CACHE_HOME:-$HOME/.cache}/vllm-stall-watchdog"
prometheus_dir="$cache/prometheus-$prometheus_version"
thanos_dir="$cache/thanos-$thanos_version"
if [ "${1:-}" = "--print-dir" ]; then
    case "${2:-}" in
        prometheus) echo "$prometheus_dir" ;;
        thanos) echo "$thanos_dir" ;;
        *) echo "usage: $0 --print-dir prometheus|thanos" >&2; exit 2 ;;
    esac
    exit 0
fi
# shellcheck source=tests/go_build.sh
. "$here/../go_build.sh"
# The version a binary reports (/api/v1/status/buildinfo, --version); a plain `go build` would say nothing.
# Module v0.3XX.Y is Prometheus 3.XX.Y.
v="github.com/prometheus/common/version"
p3="${prometheus_version#v0.}"; p3="3.${p3:1:2}.${p3#*.}"
go_build_name=prometheus go_build_dir="$prometheus_dir"
go_build_need_go
go_build "$here/modules/prometheus" github.com/prometheus/prometheus/cmd/prometheus prometheus \
    "-s -w -X $v.Version=$p3 -X $v.Revision=$prometheus_version -X $v.Branch=module" remove_all_sd
go_build_name=thanos go_build_dir="$thanos_dir"
go_build_need_go
# Thanos' own build tag slicelabels (its .promu.yml; its netgo only picks the DNS resolver): not optional -- its gRPC
# code casts Prometheus' labels as a slice, and without the tag the sidecar crashes on the querier's first Info call.
go_build "$here/modules/thanos" github.com/thanos-io/thanos/cmd/thanos thanos \
    "-s -w -X $v.Version=${thanos_version#v} -X $v.Revision=$thanos_version -X $v.Branch=module" slicelabels
go_build_done
