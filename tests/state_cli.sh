#!/bin/sh
# tests/state_cli.sh - `sdnpu run --prompt-cache` end to end on tiny models
# (run by ctest, see tests/state.cmake). Checks: the first run finds no
# file, generates and saves; a second run with the same prompt loads it,
# reuses all of the prompt but its last token and writes the same text as a
# run without the cache; a damaged file and a file of another model are
# reported, skipped and replaced, the output unchanged; a cache that cannot
# be written fails the run; a model that does not load is reported once.
# Usage: state_cli.sh SDNPU MAKE_TINY_MODELS WORKDIR
set -u
NAME=state_cli
. "$(dirname "$0")/tiny_cli.sh"
MODEL=$DIR/tiny-qwen2.gguf OTHER=$DIR/tiny-llama.gguf CACHE=$DIR/cache.bin
PROMPT="the cat sat on the mat"
run() { # run NAME MODEL [flags...]: stdout to NAME.out, stderr to NAME.err
  name=$1 model=$2
  shift 2
  "$SDNPU" run -m "$model" -p "$PROMPT" -n 8 --temp 0 -t 1 --no-stats "$@" >"$DIR/$name.out" 2>"$DIR/$name.err"
}
run plain "$MODEL" || { cat "$DIR/plain.err"; fail "plain run"; }

run first "$MODEL" --prompt-cache "$CACHE" || { cat "$DIR/first.err"; fail "first run"; }
grep -q "prompt cache: 0 of [0-9]* prompt tokens reused (no usable file); saved [0-9]* tokens to $CACHE" \
  "$DIR/first.err" || { cat "$DIR/first.err"; fail "first run: no save reported"; }
grep -q "error" "$DIR/first.err" && { cat "$DIR/first.err"; fail "first run: a missing file is no error"; }
[ -s "$CACHE" ] || fail "no cache file"
cmp -s "$DIR/plain.out" "$DIR/first.out" || fail "first run's output differs from the plain run's"

run second "$MODEL" --prompt-cache "$CACHE" || { cat "$DIR/second.err"; fail "second run"; }
n=$(sed -n 's/^prompt cache: \([0-9]*\) of \([0-9]*\) prompt tokens reused (the file loaded).*/\1 \2/p' "$DIR/second.err")
[ -n "$n" ] || { cat "$DIR/second.err"; fail "second run: the file was not loaded"; }
set -- $n
[ "$1" -eq $(($2 - 1)) ] || fail "second run reused $1 of $2 prompt tokens, expected $(($2 - 1))"
cmp -s "$DIR/plain.out" "$DIR/second.out" || fail "second run's output differs from the plain run's"

# Damage: one byte in the middle of the file.
size=$(wc -c < "$CACHE")
printf '\377' | dd of="$CACHE" bs=1 seek=$((size / 2)) conv=notrunc 2>/dev/null
run damaged "$MODEL" --prompt-cache "$CACHE" || { cat "$DIR/damaged.err"; fail "run on a damaged file"; }
grep -q "warning: not using the prompt cache: SDNPU_ERR_FORMAT: .*checksum mismatch" "$DIR/damaged.err" \
  || { cat "$DIR/damaged.err"; fail "damaged file not reported"; }
cmp -s "$DIR/plain.out" "$DIR/damaged.out" || fail "output after a damaged file differs"
run repaired "$MODEL" --prompt-cache "$CACHE" || fail "run after the damaged file"
grep -q "(the file loaded)" "$DIR/repaired.err" || { cat "$DIR/repaired.err"; fail "the damaged file was not replaced"; }

# Another model's file.
run other "$OTHER" --prompt-cache "$CACHE" || { cat "$DIR/other.err"; fail "run with another model"; }
grep -q "warning: not using the prompt cache: SDNPU_ERR_FORMAT: .*for another model: architecture qwen2" \
  "$DIR/other.err" || { cat "$DIR/other.err"; fail "another model's file not reported"; }

# A cache that cannot be written: the run fails, saying why.
run unwritable "$MODEL" --prompt-cache "$DIR/no/such/dir/cache.bin" && fail "an unwritable cache did not fail the run"
grep -q "cannot save the prompt cache: SDNPU_ERR_IO" "$DIR/unwritable.err" || { cat "$DIR/unwritable.err"; fail "no save error"; }
cmp -s "$DIR/plain.out" "$DIR/unwritable.out" || fail "output with an unwritable cache differs"

# A model that fails to load: the run fails and says why once (the library
# logs the error too; the command keeps only its own line unless SDNPU_LOG
# asks for more).
head -c 100 "$MODEL" > "$DIR/cut.gguf"
run cut "$DIR/cut.gguf" && fail "a truncated model did not fail the run"
[ "$(grep -c "cut.gguf': header" "$DIR/cut.err")" -eq 1 ] || { cat "$DIR/cut.err"; fail "a failed load not reported exactly once"; }
grep -q "cannot load model: SDNPU_ERR_FORMAT: " "$DIR/cut.err" || { cat "$DIR/cut.err"; fail "no load error"; }
SDNPU_LOG=2 run cutlog "$DIR/cut.gguf" && fail "a truncated model did not fail the run"
grep -q "^sdnpu: error: .*cut.gguf': header" "$DIR/cutlog.err" || { cat "$DIR/cutlog.err"; fail "SDNPU_LOG=2 hides the log's error"; }
echo "state_cli: ok"
