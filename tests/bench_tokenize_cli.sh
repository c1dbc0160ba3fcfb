#!/bin/sh
# tests/bench_tokenize_cli.sh - `sdnpu bench tokenize` end to end on a tiny
# model (run by ctest, see tests/bench.cmake): the text's name and the
# model's path written into the JSON as JSON strings (a quote and a
# backslash in the name), the token count and the round trip there and in
# the table, special tokens parsed a line a call; without
# the peer, and with a peer that fails, the reason said. No timing is
# asserted.
# Usage: bench_tokenize_cli.sh SDNPU MAKE_TINY_MODELS WORKDIR
set -u
NAME=bench_tokenize_cli
. "$(dirname "$0")/tiny_cli.sh"
MODEL=$DIR/tiny-qwen2.gguf
TEXT="$DIR/a \"quoted\" \\ name.txt"
# (words the tiny vocabulary spells, so that decoding gives them back)
printf 'hello, world\nthe second line, and a third\n' >"$TEXT"

"$SDNPU" bench tokenize -m "$MODEL" -f "$TEXT" --repeat 2 --no-peer --json "$DIR/out.json" >"$DIR/out" 2>"$DIR/err" ||
  { cat "$DIR/out" "$DIR/err"; fail "bench tokenize"; }
[ "$(json 'd["text"]')" = "$TEXT" ] || fail "the text's name: $(json 'd["text"]')"
[ "$(json 'd["model"]')" = "$MODEL" ] || fail "the model's path"
json 'd["sdnpu"]["n_tokens"] > 0 and d["sdnpu"]["round_trip"] is True and d["llama_cpp"] is None' | grep -q True ||
  fail "tokens, round trip or the peer's figures"
[ "$(json 'd["bytes"]')" = "$(wc -c <"$TEXT" | tr -d ' ')" ] || fail "bytes"
grep -q '^round trip (decode(encode(text)) == text): yes' "$DIR/out" || { cat "$DIR/out"; fail "the table's round trip"; }
grep -q '^llama.cpp: not run (--no-peer)' "$DIR/out" || fail "the missing peer not said"

# Special tokens parsed, a line a call: no round trip to check (BOS added).
"$SDNPU" bench tokenize -m "$MODEL" -f "$TEXT" --repeat 1 --special --lines --no-peer --json "$DIR/out.json" \
  >"$DIR/out" 2>&1 || { cat "$DIR/out"; fail "--special --lines"; }
grep -q 'BOS + special tokens parsed, line by line' "$DIR/out" || { cat "$DIR/out"; fail "--special --lines"; }
json 'd["special"] is True and d["lines"] is True and d["sdnpu"]["round_trip"] is None' | grep -q True ||
  fail "--special --lines in the JSON"

# A peer that fails: said, and the run still reports sdnpu's figures.
printf '#!/bin/sh\nexit 3\n' >"$DIR/python" && chmod +x "$DIR/python"
SDNPU_PEER_PYTHON="$DIR/python" "$SDNPU" bench tokenize -m "$MODEL" -f "$TEXT" --repeat 1 >"$DIR/out" 2>&1 ||
  { cat "$DIR/out"; fail "a failing peer failed the run"; }
grep -q '^llama.cpp: not run (peer failed (status' "$DIR/out" || { cat "$DIR/out"; fail "the failing peer not said"; }
echo "bench_tokenize_cli: ok"
