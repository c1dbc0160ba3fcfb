#!/usr/bin/env bash
# Builds llama.cpp's own programs (llama-bench, llama-server; nothing else) from
# the pinned llama-cpp-python 0.3.36 sdist (vendor/llama.cpp), the speed peer of
# /work/shared/PEERS.md. Bench only: never part of scripts/setup or the tests.
#
#   bench/peer_native.sh            # prints the bin dir on the last line of stdout
#
# Cache: $SDNPU_PEER_DIR (default $HOME/.cache/sdnpu-peer/llama.cpp-0.3.36); each
# step already done is skipped, so a second run is instant. Build jobs:
# $SDNPU_PEER_JOBS (default 2).
set -euo pipefail

VER=0.3.36
DIR=${SDNPU_PEER_DIR:-$HOME/.cache/sdnpu-peer/llama.cpp-$VER}
JOBS=${SDNPU_PEER_JOBS:-2}
SRC=$DIR/llama_cpp_python-$VER/vendor/llama.cpp
BUILD=$DIR/build
BIN=$BUILD/bin
TARBALL=$DIR/llama_cpp_python-$VER.tar.gz

log() { echo "peer_native: $*" >&2; }

if [ -x "$BIN/llama-bench" ] && [ -x "$BIN/llama-server" ]; then
    echo "$BIN"
    exit 0
fi

mkdir -p "$DIR"

pip_cmd() {
    if python3 -m pip --version >/dev/null 2>&1; then
        python3 -m pip "$@"
    else
        root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
        "$root/.venv/bin/pip" "$@"
    fi
}

if [ ! -f "$TARBALL" ]; then
    log "downloading llama-cpp-python==$VER sdist"
    pip_cmd download --no-deps --no-binary :all: "llama-cpp-python==$VER" -d "$DIR" >&2
fi

if [ ! -f "$SRC/CMakeLists.txt" ]; then
    log "unpacking"
    tar xzf "$TARBALL" -C "$DIR"
fi

if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    log "configuring"
    cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
        -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF >&2
fi

log "building llama-bench llama-server (-j$JOBS; about 15 minutes on 2 cores)"
cmake --build "$BUILD" -j"$JOBS" --target llama-bench llama-server >&2

[ -x "$BIN/llama-bench" ] && [ -x "$BIN/llama-server" ] || { log "build did not produce the programs"; exit 1; }
echo "$BIN"
