#!/bin/sh
# tests/bench_graphs_cli.sh - `sdnpu bench graphs` end to end on a tiny
# model (run by ctest, see tests/bench.cmake), with a stand-in for
# llama.cpp's side (bench/peer_graphs.py's one JSON line, through
# $SDNPU_PEER_PYTHON) that reports a prefill of 100 tokens/s in its first
# round and 50 in its second: the engines take turns round by round, the
# peer's best round is the one shown, the range of the rounds' own ratios
# is each round's sdnpu figure over that round's peer figure, and sdnpu's
# peak memory is its own (not the roofline's read buffer, 768 MiB). Then
# with --native-amx and stand-ins for llama-bench built without AMX and
# with it: each runs once a round, and each figure lands in its own place.
# Usage: bench_graphs_cli.sh SDNPU MAKE_TINY_MODELS WORKDIR
set -u
NAME=bench_graphs_cli
. "$(dirname "$0")/tiny_cli.sh"
MODEL=$DIR/tiny-qwen2.gguf

cat >"$DIR/peer" <<'PEER'
#!/bin/sh
n=$(cat "$PEER_DIR/rounds" 2>/dev/null || echo 0)
n=$((n + 1))
echo $n >"$PEER_DIR/rounds"
echo "round $n" >>"$PEER_DIR/order"
echo "{\"prefill_tok_s\": $((100 / n)), \"decode_tok_s\": 10, \"verify1_ms\": 5, \"verifyL_ms\": 9, \"peak_rss_bytes\": 1048576}"
PEER
chmod +x "$DIR/peer"

PEER_DIR=$DIR SDNPU_PEER_PYTHON=$DIR/peer "$SDNPU" bench graphs -m "$MODEL" -t 1 --n-verify 4 --verify-at 16 \
  --repeat 2 --json "$DIR/out.json" >"$DIR/out" 2>"$DIR/err" || { cat "$DIR/err"; fail "bench graphs"; }
[ "$(cat "$DIR/rounds")" = 2 ] || fail "the peer ran $(cat "$DIR/rounds") times, not once a round"
# stderr in order: each sdnpu round, then the peer's.
grep -E "^(round [0-9] of 2: sdnpu|running llama.cpp)" "$DIR/err" | tr '\n' '|' >"$DIR/turns"
[ "$(cat "$DIR/turns")" = "round 1 of 2: sdnpu...|running llama.cpp (llama-cpp-python)...|round 2 of 2: sdnpu...|running llama.cpp (llama-cpp-python)...|" ] \
  || { cat "$DIR/turns"; fail "the engines did not take turns"; }
grep -q "context (2048 tokens) is too short for the 4096-token prefill" "$DIR/err" \
  || { cat "$DIR/err"; fail "the 4,096-token prefill not said to be skipped"; }

# The JSON: the peer's best round, and the rounds' ratios against it.
[ "$(json 'd["llama_cpp"]["prefill_tok_s"]')" = 100.0 ] || fail "the peer's prefill is not its best round's"
[ "$(json 'd["rounds"]')" = 2 ] || fail "rounds not 2"
# Each round's ratio is that round's sdnpu figure over the peer's of the
# same round (100, then 50): the range is the smallest and largest.
json 'd["rounds_llama_cpp"]["prefill_tok_s"] == [100, 50]' | grep -q True || fail "the peer's rounds"
json 'abs(max(d["rounds_sdnpu"]["prefill_tok_s"]) - d["sdnpu"]["prefill_tok_s"]) < 0.01' \
  | grep -q True || fail "sdnpu's prefill is not its best round's"
json 'all(abs(v - f(a / b for a, b in zip(d["rounds_sdnpu"]["prefill_tok_s"], (100, 50)))) < 1e-3 * v for v, f in zip(d["round_ratios"]["prefill"], (min, max)))' \
  | grep -q True || fail "the round ratios are not each round's sdnpu over its peer"
rss=$(json 'd["sdnpu"]["peak_rss_bytes"] // 1048576')
if grep -q "with the roofline's buffer" "$DIR/out"; then # /proc/self/clear_refs refused here: said, not hidden
  echo "bench_graphs_cli: the peak RSS could not be set back on this machine ($rss MiB said to include the buffer)"
else
  [ "$rss" -lt 512 ] || fail "peak RSS $rss MiB on a tiny model: the roofline's buffer counted"
fi
grep -q "^| prefill, 1,024-token prompt (tok/s) | .* | 100.0 | .*x (rounds " "$DIR/out" || { cat "$DIR/out"; fail "table row"; }

# --native-amx: llama-bench built without AMX and with it, both in every
# round after sdnpu, each from the bin dir bench/peer_native.sh (without,
# then with --amx) names; here stand-ins, found first in the working
# directory, whose llama-bench prints llama-bench's JSON lines.
NAT=$DIR/native
mkdir -p "$NAT/bench" "$NAT/plain" "$NAT/amx" || fail "mkdir"
cat >"$NAT/bench/peer_native.sh" <<NATIVE
#!/bin/sh
[ "\${1:-}" = --amx ] && echo "$NAT/amx" || echo "$NAT/plain"
NATIVE
for b in plain amx; do
  [ $b = plain ] && pp=40 || pp=80
  cat >"$NAT/$b/llama-bench" <<BENCH
#!/bin/sh
echo "llama-bench $b" >>"$NAT/order"
echo '{"n_prompt": 1024, "n_gen": 0, "avg_ts": $pp.5}'
echo '{"n_prompt": 0, "n_gen": 64, "avg_ts": 7.5}'
BENCH
  chmod +x "$NAT/$b/llama-bench"
done
(cd "$NAT" && "$SDNPU" bench graphs -m "$MODEL" -t 1 --n-verify 4 --verify-at 16 --repeat 2 --no-peer \
  --native-amx --json "$DIR/out.json" >"$DIR/out" 2>"$DIR/err") || { cat "$DIR/err"; fail "bench graphs --native-amx"; }
[ "$(tr '\n' '|' <"$NAT/order")" = "llama-bench plain|llama-bench amx|llama-bench plain|llama-bench amx|" ] \
  || { cat "$NAT/order"; fail "the two llama-bench builds did not run once a round, without AMX first"; }
[ "$(json 'd["llama_bench"]["pp1024"]')" = 40.5 ] || fail "llama-bench's pp1024 is not the build without AMX's"
[ "$(json 'd["llama_bench_amx"]["pp1024"]')" = 80.5 ] || fail "llama-bench with AMX's pp1024"
[ "$(json 'd["llama_bench_amx"]["tg64"]')" = 7.5 ] || fail "llama-bench with AMX's tg64"
json 'd["rounds_llama_cpp"]["amx_pp1024"] == [80.5, 80.5]' | grep -q True || fail "the AMX build's rounds"
grep -q "^| prefill, 1,024 tokens, llama-bench with AMX (tok/s) | .* | 80.5 | .*x (rounds " "$DIR/out" \
  || { cat "$DIR/out"; fail "the AMX row of the table"; }
echo "bench_graphs_cli: ok"
