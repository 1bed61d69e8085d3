# Sourced (not run) by the scripts that build a command of a pinned official Go module into a git-ignored cache
# keyed by version OUTSIDE the clone (tests/cluster/build_control_plane.sh, tests/prometheus/build_prometheus.sh):
# one way to build, name, time and skip. The caller sets go_build_name (the log prefix) and go_build_dir (the cache).
# GO_BUILD_JOBS (default 1: the machine has 2 cores shared with others) is `go build -p`; builds run under nice.
go_build_start=$(date +%s)

go_build_need_go() {
    command -v go >/dev/null || { echo "$go_build_name: 'go' is not on PATH (Go >= 1.26 is needed to build it)" >&2; exit 2; }
    mkdir -p "$go_build_dir"
}

go_build() {  # go_build MODULE_DIR PACKAGE BINARY LDFLAGS [TAGS]: builds PACKAGE into $go_build_dir/BINARY once
    local out="$go_build_dir/$3"
    if [ -x "$out" ]; then echo "$go_build_name: $3 is built ($out)"; return; fi
    echo "$go_build_name: building $3 from $2 ($(( $(date +%s) - go_build_start ))s so far; the first build takes many minutes on 2 cores)"
    local t0; t0=$(date +%s)
    (cd "$1" && nice -n 10 go build -p "${GO_BUILD_JOBS:-1}" -trimpath -tags "${5:-}" -ldflags="$4" -o "$out.tmp" "$2")
    mv "$out.tmp" "$out"
    echo "$go_build_name: $3 built in $(( $(date +%s) - t0 ))s"
}

go_build_done() {
    echo "$go_build_name: ready in $go_build_dir ($(( $(date +%s) - go_build_start ))s)"
}
