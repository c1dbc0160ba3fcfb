#!/usr/bin/env bash
# Builds llama.cpp's own programs (llama-bench, llama-server; nothing else) from
# the pinned llama-cpp-python 0.3.36 sdist (vendor/llama.cpp), the speed peer of
# /work/shared/PEERS.md. Bench only: never part of scripts/setup or the tests.
#
#   bench/peer_native.sh            # prints the bin dir on the last line of stdout
#   bench/peer_native.sh --amx      # llama-bench with ggml's AMX kernels (AMX CPUs only)
#
# Cache: $SDNPU_PEER_DIR (default $HOME/.cache/sdnpu-peer/llama.cpp-0.3.36); each
# step already done is skipped, so a second run is instant. Build jobs:
# $SDNPU_PEER_JOBS (default 2).
#
# Built with GGML_NATIVE=ON for this CPU, except that where the CPU has AMX
# (Intel Sapphire Rapids on: amx_tile in /proc/cpuinfo) the default build
# adds -mno-amx-tile -mno-amx-int8 -mno-amx-bf16 and goes to its own folder
# (build-noamx): as released, ggml's AMX build dies there with SIGILL at its
# first tile load (GCC drops the stores of its tile configuration, so every
# tile has zero rows). --amx builds llama-bench alone with the AMX kernels
# into build-amx, after applying bench/peer_amx_tilecfg.patch (which keeps
# those stores) to the cached source: llama.cpp's own AMX path, the peer of
# sdnpu's tile kernels.
set -euo pipefail

VER=0.3.36
DIR=${SDNPU_PEER_DIR:-$HOME/.cache/sdnpu-peer/llama.cpp-$VER}
JOBS=${SDNPU_PEER_JOBS:-2}
SRC=$DIR/llama_cpp_python-$VER/vendor/llama.cpp
BUILD=$DIR/build
FLAGS=""
TARGETS="llama-bench llama-server"
PATCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/peer_amx_tilecfg.patch
TARBALL=$DIR/llama_cpp_python-$VER.tar.gz

log() { echo "peer_native: $*" >&2; }

AMX=0
case "${1:-}" in
    --amx) AMX=1 ;;
    "") ;;
    *) log "unknown option $1 (usage: bench/peer_native.sh [--amx])"; exit 2 ;;
esac
if [ $AMX = 1 ]; then
    grep -qw amx_int8 /proc/cpuinfo 2>/dev/null || { log "--amx: this CPU has no AMX-INT8"; exit 1; }
    BUILD=$DIR/build-amx
    TARGETS="llama-bench"
elif grep -qw amx_tile /proc/cpuinfo 2>/dev/null; then
    FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    BUILD=$DIR/build-noamx
fi
BIN=$BUILD/bin

built() {
    for t in $TARGETS; do [ -x "$BIN/$t" ] || return 1; done
}

# git apply on the source tree alone (not on a repository above the cache).
apply_in_src() { (cd "$SRC" && GIT_CEILING_DIRECTORIES=$(dirname "$SRC") git apply "$@" "$PATCH"); }
patched() { apply_in_src -R --check 2>/dev/null; }

# A build of AMX from before the patch is built again (make sees the change).
if built && { [ $AMX = 0 ] || patched; }; then
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

if [ $AMX = 1 ] && ! patched; then
    log "applying $(basename "$PATCH") (ggml's tile configuration)"
    apply_in_src >&2
fi

if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    log "configuring"
    cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
        -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DCMAKE_C_FLAGS="$FLAGS" -DCMAKE_CXX_FLAGS="$FLAGS" >&2
fi

log "building $TARGETS (-j$JOBS; about 15 minutes on 2 cores)${FLAGS:+; AMX off: $FLAGS}"
# shellcheck disable=SC2086 # the targets are words
cmake --build "$BUILD" -j"$JOBS" --target $TARGETS >&2

built || { log "build did not produce the programs"; exit 1; }
echo "$BIN"
