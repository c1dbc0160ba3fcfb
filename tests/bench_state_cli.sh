#!/bin/sh
# tests/bench_state_cli.sh - `sdnpu bench state` end to end on a tiny model
# (run by ctest, see tests/bench.cmake): every kind timed in every run, the
# state file measured, the continuation after a load the same as after a
# prefill (the command's exit status says so too), the table one row a
# kind, and the state file, when none was named, removed. No timing is
# asserted.
# Usage: bench_state_cli.sh SDNPU MAKE_TINY_MODELS WORKDIR
set -u
NAME=bench_state_cli
. "$(dirname "$0")/tiny_cli.sh"
MODEL=$DIR/tiny-qwen2.gguf

TMPDIR=$DIR "$SDNPU" bench state -m "$MODEL" -t 1 --tokens 96 --n-gen 8 --repeat 2 --json "$DIR/out.json" \
  >"$DIR/out" 2>"$DIR/err" || { cat "$DIR/err" "$DIR/out"; fail "bench state"; }
[ "$(json 'd["tokens"]')" = 96 ] || fail "tokens"
json 'all(len(d[k + "_ms"]) == 2 and min(d[k + "_ms"]) > 0 for k in ("prefill", "load", "load_cold"))' \
  | grep -q True || fail "a kind without two timed runs"
json 'd["file_bytes"] > 0 and d["save_ms"] > 0' | grep -q True || fail "the state file's size or save time"
[ "$(json 'd["identical"]')" = True ] || fail "the continuation after a load differs"
json 'd["n_gen"][0] == d["n_gen"][1] > 0' | grep -q True || fail "the continuations' lengths"
[ "$(grep -c '^| \(prefill\|load\)' "$DIR/out")" = 3 ] || { cat "$DIR/out"; fail "table rows"; }
grep -q "the same text" "$DIR/out" || fail "the table does not say the texts agree"
ls "$DIR"/sdnpu-bench-state-* >/dev/null 2>&1 && fail "the unnamed state file was left behind"

# A state file that cannot be written is said, and fails the command.
"$SDNPU" bench state -m "$MODEL" -t 1 --tokens 96 --n-gen 8 --repeat 1 --state "$DIR/no/such/dir/s.bin" \
  >/dev/null 2>"$DIR/err2" && fail "an unwritable state file accepted"
grep -q "save" "$DIR/err2" || { cat "$DIR/err2"; fail "the failed save not said"; }
echo "bench_state_cli: ok"
