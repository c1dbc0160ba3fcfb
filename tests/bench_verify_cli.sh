#!/bin/sh
# tests/bench_verify_cli.sh - `sdnpu bench verify` end to end on a tiny
# model (run by ctest, see tests/bench.cmake): contexts in the order given
# and repeated (a longer one after a shorter one prefilled on top of it,
# a shorter one after a longer one from an empty session), the context
# sized for the longest wherever it sits in the list, both kinds of pass
# timed at every context. No timing is asserted.
# Usage: bench_verify_cli.sh SDNPU MAKE_TINY_MODELS WORKDIR
set -u
NAME=bench_verify_cli
. "$(dirname "$0")/tiny_cli.sh"
MODEL=$DIR/tiny-qwen2.gguf

"$SDNPU" bench verify -m "$MODEL" -t 1 --n-verify 3 --at 48,16,100,48 --seconds 0.2 --json "$DIR/out.json" \
  >"$DIR/out" 2>"$DIR/err" || { cat "$DIR/err"; fail "bench verify"; }
[ "$(json '[c["at"] for c in d["contexts"]]')" = "[48, 16, 100, 48]" ] || fail "contexts not in the order given"
json 'all(c["passes"][0] > 0 and c["passes"][1] > 0 and c["L1_median_ms"] > 0 and c["L_median_ms"] > 0 for c in d["contexts"])' \
  | grep -q True || fail "a context without timed passes of both kinds"
[ "$(json 'd["n_verify"]')" = 3 ] || fail "n_verify"
# The table: one row a context, in the same order.
grep -E '^\| [0-9]+ \|' "$DIR/out" | cut -d'|' -f2 | tr -d ' ' | tr '\n' ',' >"$DIR/rows"
[ "$(cat "$DIR/rows")" = "48,16,100,48," ] || { cat "$DIR/out"; fail "table rows $(cat "$DIR/rows")"; }

# Bad lists are refused and named.
"$SDNPU" bench verify -m "$MODEL" --at 16,8 --seconds 0.1 >/dev/null 2>"$DIR/err2" && fail "--at 16,8 accepted"
grep -q -- "--at" "$DIR/err2" || { cat "$DIR/err2"; fail "--at 16,8 not named"; }
echo "bench_verify_cli: ok"
