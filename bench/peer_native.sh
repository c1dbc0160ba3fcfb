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
#
# Built with GGML_NATIVE=ON for this CPU, except that where the CPU has AMX
# (Intel Sapphire Rapids on: amx_tile in /proc/cpuinfo) it is built with
# -mno-amx-tile -mno-amx-int8 -mno-amx-bf16: ggml's AMX q8_0 kernel runs
# `tilezero` without ever asking the kernel for tile permission
# (arch_prctl(ARCH_REQ_XCOMP_PERM)), so a native build dies with SIGILL
# there. Such a build goes to its own folder (build-noamx) and says so.
set -euo pipefail

VER=0.3.36
DIR=${SDNPU_PEER_DIR:-$HOME/.cache/sdnpu-peer/llama.cpp-$VER}
JOBS=${SDNPU_PEER_JOBS:-2}
SRC=$DIR/llama_cpp_python-$VER/vendor/llama.cpp
BUILD=$DIR/build
FLAGS=""
if grep -qw amx_tile /proc/cpuinfo 2>/dev/null; then
    FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    BUILD=$DIR/build-noamx
fi
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
        -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DCMAKE_C_FLAGS="$FLAGS" -DCMAKE_CXX_FLAGS="$FLAGS" >&2
fi

log "building llama-bench llama-server (-j$JOBS; about 15 minutes on 2 cores)${FLAGS:+; AMX off: $FLAGS}"
cmake --build "$BUILD" -j"$JOBS" --target llama-bench llama-server >&2

[ -x "$BIN/llama-bench" ] && [ -x "$BIN/llama-server" ] || { log "build did not produce the programs"; exit 1; }
echo "$BIN"
