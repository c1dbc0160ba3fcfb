#!/bin/sh
# tests/profile_cli.sh - `sdnpu profile` end to end on a tiny model (run by
# ctest, see tests/profile.cmake): the profile it saves beside the model is
# the one a session of that model then reads (both measured and looked up
# as such a session runs: the same kernels, shared weights and threads), a
# second run shows it without measuring, the head is timed on rows the
# model decoded, and a session of another thread count does not take it. The library's side is tests/test_profile.c.
# Usage: profile_cli.sh SDNPU MAKE_TINY_MODELS WORKDIR
set -u
NAME=profile_cli
. "$(dirname "$0")/tiny_cli.sh"
MODEL=$DIR/tiny-qwen2.gguf

"$SDNPU" profile -m "$MODEL" -t 1 --L 1,2,3,4 --reps 1 >"$DIR/first.out" 2>"$DIR/first.err" \
  || { cat "$DIR/first.err"; fail "profile"; }
grep -q "^measured profile of $MODEL" "$DIR/first.out" || { cat "$DIR/first.out"; fail "no measured profile shown"; }
grep -q "shared weights, 1 threads" "$DIR/first.out" || { cat "$DIR/first.out"; fail "not keyed as a session's backend"; }
[ -s "$MODEL.profile.json" ] || fail "no profile beside the model"
"$SDNPU" profile -m "$MODEL" -t 1 --L 1,2,3,4 --reps 1 >"$DIR/second.out" 2>"$DIR/second.err" \
  || { cat "$DIR/second.err"; fail "second profile"; }
grep -q "^cached profile of $MODEL" "$DIR/second.out" || { cat "$DIR/second.out"; fail "the saved profile measured again"; }
# A measured profile says what the head's rows were decoded as (the
# model's own continuation: a decoding step's first row is its own word).
grep -q '^the head was timed on rows the model decoded itself: ".' "$DIR/first.out" \
  || { cat "$DIR/first.out"; fail "no decoded rows shown"; }
grep -q "decoded itself" "$DIR/second.out" && { cat "$DIR/second.out"; fail "a cached profile claims decoded rows"; }

session() { # session NAME THREADS: a run's debug log in NAME.err
  SDNPU_LOG=3 "$SDNPU" run -m "$MODEL" -p "the cat sat on the mat" -n 4 --temp 0 -t "$2" --no-stats \
    >"$DIR/$1.out" 2>"$DIR/$1.err" || { cat "$DIR/$1.err"; fail "run with $2 threads"; }
}
session one 1
grep -q "using the profile .*tiny-qwen2.gguf.profile.json" "$DIR/one.err" || { cat "$DIR/one.err"; fail "the session did not read the profile"; }
grep -q "not using the profile" "$DIR/one.err" && { cat "$DIR/one.err"; fail "the session refused the profile"; }
# The rows the profile says sessions verify are the rows the session took.
rows=$(sed -n 's/^sessions that read this profile verify \([0-9]*\) rows.*/\1/p' "$DIR/first.out")
[ -n "$rows" ] || { cat "$DIR/first.out"; fail "profile does not say the rows sessions verify"; }
grep -q "^sessions that read this profile verify $rows rows (.*): a step of 4 rows costs [0-9.]* times one of 3 (\(above\|at most\) 1.06)" \
  "$DIR/first.out" || { cat "$DIR/first.out"; fail "profile does not say why sessions verify $rows rows"; }
grep -q "verification graph of $rows rows (the profile's choice)" "$DIR/one.err" \
  || { cat "$DIR/one.err"; fail "the session did not verify the $rows rows the profile said"; }
session two 2
grep -q "not using the profile: .* another model, machine or backend" "$DIR/two.err" \
  || { cat "$DIR/two.err"; fail "a session of 2 threads took a 1-thread profile"; }
grep -q "verification graph of 4 rows (no profile: the default)" "$DIR/two.err" \
  || { cat "$DIR/two.err"; fail "a session without a profile did not verify 4 rows"; }
echo "profile_cli: ok"
