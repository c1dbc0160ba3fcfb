#!/bin/sh
# tests/eval_e2e.sh - `sdnpu eval` end to end on a tiny model (run by ctest,
# see tests/eval.cmake): a three-line dataset whose second line is malformed.
# Checks: exit 0, the bad line reported with its line number, the outputs
# written, every available method lossless, methods the engine lacks marked
# "not available" without stopping the run, a rerun resumes, --strict
# fails, and a misspelt or unavailable spec is refused at the edge (eval's
# method list, run's --spec).  Usage: eval_e2e.sh SDNPU MAKE_TINY_MODELS WORKDIR
set -u
NAME=eval_e2e
. "$(dirname "$0")/tiny_cli.sh"
MODEL=$DIR/tiny-gemma3.gguf
DS=$DIR/tiny.jsonl
cat > "$DS" <<'JSONL'
{"id": "t1", "task": "summary", "instruction": "Summarize.", "context": ["the cat sat on the mat. the cat sat on the mat. the dog sat on the log."]}
{"id": "t2", "task": "tweet", "instruction": "Reply as @me.", "context": ["@a: hello there"], "history": ["hello there friend"]
{"id": "t3", "task": "ui", "instruction": "open settings", "context": ["[1] button Settings", "[2] button Mail"], "history": ["tap(1, 'Settings')"], "reference": "tap(2, 'Mail')"}
JSONL
METHODS=cpu-vanilla,npu-vanilla,pld,sam,sam-tree,sam+reuse,sam+calib,sdnpu
OUT=$DIR/out
"$SDNPU" eval -m "$MODEL" --dataset "$DS" --methods $METHODS --out "$OUT" -n 12 -t 1 >"$DIR/stdout" 2>"$DIR/stderr"
rc=$?
cat "$DIR/stdout"
[ $rc -eq 0 ] || { cat "$DIR/stderr"; fail "exit code $rc"; }
grep -q "tiny.jsonl:2: invalid JSON" "$DIR/stderr" || { cat "$DIR/stderr"; fail "malformed line 2 not reported"; }
for f in results.json samples.csv summary.csv chart.svg prompts.jsonl; do
  [ -s "$OUT/$f" ] || fail "$OUT/$f missing"
done
grep -q "<svg" "$OUT/chart.svg" || fail "chart.svg is no SVG"
# The rows the session verifies: 4 without a profile (none beside the tiny
# model), said and recorded; --n-verify's rows below.
grep -q "verification graph of 4 rows" "$DIR/stderr" || { cat "$DIR/stderr"; fail "the verification rows not said"; }
grep -q '"l2": 4,' "$OUT/results.json" || fail "results.json lacks the verification rows"
# One prompt line per sample that loaded (the malformed one is skipped).
[ "$(wc -l < "$OUT/prompts.jsonl")" -eq 2 ] || fail "prompts.jsonl does not hold the 2 samples"
grep -q '"id": "t1", "n_predict": 12, "chat": false, "prompt": "Summarize.\\n\\nthe cat sat' "$OUT/prompts.jsonl" \
  || fail "prompts.jsonl lacks t1's prompt"
grep -q "2 samples, 1 malformed line skipped" "$DIR/stdout" || fail "table lacks the sample count"
# summary.csv: every method that ran is lossless; the rest are unavailable.
tail -n +2 "$OUT/summary.csv" | while IFS= read -r line; do
  case "$line" in
    *,ok,*,yes,) ;;
    *,unavailable,*) ;;
    *) fail "summary.csv row not lossless: $line" ;;
  esac
done || exit 1
grep -q '"cpu-vanilla",ok,2,0,' "$OUT/summary.csv" || fail "cpu-vanilla did not run both samples"
grep -q '"sam",ok,2,0,' "$OUT/summary.csv" || fail "sam did not run both samples"
grep -q '"sam+reuse",ok,2,0,' "$OUT/summary.csv" || fail "sam+reuse did not run both samples"
grep -q '"sam+calib",ok,2,0,' "$OUT/summary.csv" || fail "sam+calib did not run both samples"
grep -q '"sdnpu",ok,2,0,' "$OUT/summary.csv" || fail "sdnpu (sam-tree+reuse+calib+switch) did not run both samples"
# --analyze replays the drafters over the greedy output: its steps and
# accepted tokens equal those of the engine's own runs with every draft
# verified (METHOD:fixed), method by method; without the replies store
# (--no-replies), and sam-tree with it, which then holds the earlier
# samples' replies as the replay's "+ earlier replies" variant does.
FIXED=pld:fixed,sam:fixed,sam-tree:fixed,sam+calib:fixed,sam-tree+calib:fixed
# The replay's variants verify 8 rows. With --costs, a profile in which
# every graph costs the same: cost-aware drafting on graphs of 1 and 8 rows
# then verifies every draft, so its priced replay takes the steps of the
# every-draft-verified one.
"$SDNPU" eval -m "$MODEL" --dataset "$DS" --methods $FIXED --out "$DIR/fixed" -n 24 -t 1 --n-verify 8 --no-replies \
  >/dev/null 2>&1 || fail "the :fixed methods failed"
"$SDNPU" eval -m "$MODEL" --dataset "$DS" --methods sam-tree:fixed --out "$DIR/fixed-replies" -n 24 -t 1 --n-verify 8 \
  >/dev/null 2>&1 || fail "sam-tree:fixed with the replies store failed"
grep -q '"l2": 8,' "$DIR/fixed-replies/results.json" || fail "results.json does not record --n-verify's 8 rows"
python3 - "$DIR/flat.profile.json" <<'PY' || fail "cannot write a profile"
import json, sys
entries = [{"block": b, "l0": 0, "l1": 1, "L": L, "load_ms": 1.0, "compute_ms": 1.0, "bytes": 1}
           for b in (0, -1) for L in (1, 2, 4, 8, 16)]
json.dump({"format": "sdnpu-profile-1", "key": "flat", "entries": entries}, open(sys.argv[1], "w"))
PY
"$SDNPU" eval -m "$MODEL" --dataset "$DS" --analyze --costs "$DIR/flat.profile.json" --out "$DIR/an" -n 24 -t 1 \
  >"$DIR/an.txt" 2>"$DIR/an.err" || { cat "$DIR/an.err"; fail "--analyze failed"; }
grep -q "Tokens per model call, every draft verified" "$DIR/an.txt" || fail "--analyze printed no table"
grep -q "Cost-aware drafting (sam-tree) replayed" "$DIR/an.txt" || fail "--analyze --costs printed no priced table"
if "$SDNPU" eval -m "$MODEL" --dataset "$DS" --analyze --costs "$DIR/none.json" --out "$DIR/an2" -n 24 -t 1 \
  >/dev/null 2>"$DIR/an2.err"; then
  fail "--costs with a missing profile succeeded"
fi
grep -q "none.json" "$DIR/an2.err" || { cat "$DIR/an2.err"; fail "a missing --costs profile not named"; }
python3 - "$DIR/flat.profile.json" "$DIR/three.profile.json" <<'PY' || fail "cannot write a profile"
import json, sys
d = json.load(open(sys.argv[1]))  # its graphs at 3 rows alone, which no replay prices
d["entries"] = [dict(e, L=3) for e in d["entries"] if e["L"] == 1]
json.dump(d, open(sys.argv[2], "w"))
PY
if "$SDNPU" eval -m "$MODEL" --dataset "$DS" --analyze --costs "$DIR/three.profile.json" --out "$DIR/an3" -n 24 -t 1 \
  >/dev/null 2>"$DIR/an3.err"; then
  fail "--costs with a profile of no usable rows succeeded"
fi
grep -q "prices no step" "$DIR/an3.err" || { cat "$DIR/an3.err"; fail "a profile of no usable rows not explained"; }
python3 - "$DIR/fixed/results.json" "$DIR/fixed-replies/results.json" "$DIR/an/analysis.json" <<'PY' \
  || fail "--analyze differs from the engine's runs"
import json, sys
recs = json.load(open(sys.argv[1]))["records"]
sets = {d["dataset"]: d for d in json.load(open(sys.argv[3]))["datasets"]}
bad = 0
for method in ["pld", "sam", "sam-tree", "sam+calib", "sam-tree+calib"]:
    mine = [r for r in recs if r["method"] == method + ":fixed"]
    engine = (sum(r["verify_steps"] for r in mine), sum(r["accepted"] for r in mine))
    v = sets["all"]["variants"][method]
    replay = (v["steps"], v["accepted"])
    print(f"eval_e2e: {method}: engine steps, accepted {engine}, replay {replay}")
    bad += engine != replay or engine[0] == 0
mine = [r for r in json.load(open(sys.argv[2]))["records"] if r["method"] == "sam-tree:fixed"]
engine = (sum(r["verify_steps"] for r in mine), sum(r["accepted"] for r in mine))
v = sets["all"]["variants"]["sam-tree + earlier replies"]
print(f"eval_e2e: sam-tree with the replies store: engine steps, accepted {engine}, replay {(v['steps'], v['accepted'])}")
bad += engine != (v["steps"], v["accepted"])
p = sets["all"]["priced"]["1, 8"]
priced = (p["steps"], p["tokens"] - p["steps"])
print(f"eval_e2e: sam-tree priced on free rows: steps, accepted {priced}, every draft verified {(v['steps'], v['accepted'])}")
bad += priced != (v["steps"], v["accepted"])
# The break-even replays: only pairs whose sets the profile prices (no
# 3-row steps here), and at the ratio 1.00 (8 rows at the price of 4, which
# the flat profile asks too) the grid's replay is the priced one's.
be = sets["all"]["break_even"]
g0 = be["1, 4 -> 1, 8"]["grid"][0] if "1, 4 -> 1, 8" in be else {}
print(f"eval_e2e: break-even pairs {sorted(be)}; 4 -> 8 at 1.00: {g0}")
bad += sorted(be) != ["1, 4 -> 1, 8"] or (g0["steps"], g0["tokens"]) != (p["steps"], p["tokens"])
bad += abs(g0["modelled_ms"] - p["modelled_ms"]) > 1e-6 or len(be["1, 4 -> 1, 8"]["grid"]) != 21
sys.exit(1 if bad else 0)
PY
grep -q '^| 4 -> 8 (graphs 1, 4, then 1, 8) |' "$DIR/an.txt" || fail "--analyze --costs printed no break-even row"
# --draft-model: the model as its own draft model. Prefill's rows equal
# decoding's bit for bit (batch invariance), so its teacher-forced greedy
# tokens are the output's: every token it drafts is accepted, a subset
# head that holds the whole (tiny) vocabulary drafts the same, and on the
# flat profile each step costs its verification (2 ms) and its passes
# (2 ms each). A draft model with another vocabulary is refused, named.
"$SDNPU" eval -m "$MODEL" --dataset "$DS" --analyze --costs "$DIR/flat.profile.json" --draft-model "$MODEL" \
  --draft-costs "$DIR/flat.profile.json" --out "$DIR/dm" -n 24 -t 1 >"$DIR/dm.txt" 2>"$DIR/dm.err" \
  || { cat "$DIR/dm.err"; fail "--analyze --draft-model failed"; }
grep -q "A draft model's greedy drafts" "$DIR/dm.txt" || fail "--draft-model printed no table"
python3 - "$DIR/dm/analysis.json" <<'PY' || fail "the draft model's replay is wrong"
import json, sys
dm = {d["dataset"]: d for d in json.load(open(sys.argv[1]))["datasets"]}["all"]["draft_model"]
bad = 0
for name in ["draft model, 1 token (2 rows)", "draft model, 3 tokens (4 rows)", "draft model, 7 tokens (8 rows)"]:
    v = dm[name]
    print(f"eval_e2e: {name}: drafted {v['drafted']}, accepted {v['accepted_drafted']}, ms {v['modelled_ms']}")
    bad += v["drafted"] == 0 or v["accepted_drafted"] != v["drafted"]
    bad += v["modelled_ms"] != 2.0 * (v["steps"] + v["draft_passes"])
whole = dm["draft model, 3 tokens (4 rows)"]
for name in ["draft model, 3 tokens, head: ids < 8192 + prompt", "draft model, 3 tokens, head: ids < 32768 + prompt"]:
    v = dm[name]
    bad += (v["steps"], v["drafted"], v["accepted_drafted"]) != (whole["steps"], whole["drafted"], whole["accepted_drafted"])
sys.exit(1 if bad else 0)
PY
# A window longer than any prompt is the whole prompt; a short one still runs.
"$SDNPU" eval -m "$MODEL" --dataset "$DS" --analyze --draft-model "$MODEL" --draft-window 100000 --out "$DIR/dmw" \
  -n 24 -t 1 >/dev/null 2>"$DIR/dmw.err" || { cat "$DIR/dmw.err"; fail "--draft-window 100000 failed"; }
"$SDNPU" eval -m "$MODEL" --dataset "$DS" --analyze --draft-model "$MODEL" --draft-window 2 --out "$DIR/dmw2" \
  -n 24 -t 1 >/dev/null 2>"$DIR/dmw2.err" || { cat "$DIR/dmw2.err"; fail "--draft-window 2 failed"; }
python3 - "$DIR/dm/analysis.json" "$DIR/dmw/analysis.json" <<'PY' || fail "a window over the whole prompt changed the draft model's drafts"
import json, sys
a, b = ({d["dataset"]: d for d in json.load(open(p))["datasets"]}["all"]["draft_model"] for p in sys.argv[1:3])
keys = ("steps", "drafted", "accepted_drafted", "accepted_retrieved")
sys.exit(0 if all(tuple(a[k][f] for f in keys) == tuple(b[k][f] for f in keys) for k in a) else 1)
PY
if "$SDNPU" eval -m "$MODEL" --dataset "$DS" --analyze --draft-window 8 --out "$DIR/dm5" -n 24 -t 1 >/dev/null 2>"$DIR/dm5.err"; then
  fail "--draft-window without --draft-model was taken"
fi
grep -q "give --draft-model too" "$DIR/dm5.err" || { cat "$DIR/dm5.err"; fail "--draft-window without --draft-model not explained"; }
if "$SDNPU" eval -m "$MODEL" --dataset "$DS" --analyze --draft-model "$DIR/tiny-qwen2.gguf" --out "$DIR/dm2" -n 24 -t 1 \
  >/dev/null 2>"$DIR/dm2.err"; then
  fail "a draft model with another vocabulary was taken"
fi
grep -q "tiny-qwen2.gguf: token 0 is spelt differently" "$DIR/dm2.err" || { cat "$DIR/dm2.err"; fail "the vocabulary mismatch not explained"; }
if "$SDNPU" eval -m "$MODEL" --dataset "$DS" --analyze --draft-model "$DIR/absent.gguf" --out "$DIR/dm4" -n 24 -t 1 \
  >/dev/null 2>"$DIR/dm4.err"; then
  fail "a missing draft model was taken"
fi
grep -q -- "--draft-model $DIR/absent.gguf" "$DIR/dm4.err" || { cat "$DIR/dm4.err"; fail "a missing draft model not named"; }
if "$SDNPU" eval -m "$MODEL" --dataset "$DS" --draft-model "$MODEL" --out "$DIR/dm3" -n 24 -t 1 >/dev/null 2>"$DIR/dm3.err"; then
  fail "--draft-model without --analyze was taken"
fi
grep -q "go with --analyze" "$DIR/dm3.err" || { cat "$DIR/dm3.err"; fail "--draft-model without --analyze not explained"; }
# A rerun resumes: nothing is generated again.
"$SDNPU" eval -m "$MODEL" --dataset "$DS" --methods $METHODS --out "$OUT" -n 12 -t 1 >"$DIR/stdout2" 2>"$DIR/stderr2" \
  || fail "rerun failed"
grep -q "resuming" "$DIR/stderr2" || { cat "$DIR/stderr2"; fail "rerun did not resume"; }
# Other settings refuse to resume into the same folder.
if "$SDNPU" eval -m "$MODEL" --dataset "$DS" --out "$OUT" -n 7 -t 1 >/dev/null 2>"$DIR/stderr3"; then
  fail "resume with other settings succeeded"
fi
grep -q "n_predict 12 there, 7 here" "$DIR/stderr3" || fail "settings mismatch not explained"
# Results of one summation order are not resumed with the other.
if "$SDNPU" eval -m "$MODEL" --dataset "$DS" --methods $METHODS --out "$OUT" -n 12 -t 1 --kernels ggml \
  >/dev/null 2>"$DIR/stderr5"; then
  fail "resume with other kernels succeeded"
fi
grep -q "kernels fast there, ggml here" "$DIR/stderr5" || fail "kernels mismatch not explained"
if "$SDNPU" eval -m "$MODEL" --dataset "$DS" --out "$DIR/k" --kernels fastest >/dev/null 2>"$DIR/stderr6"; then
  fail "--kernels fastest accepted"
fi
grep -q "expects fast or ggml" "$DIR/stderr6" || fail "bad --kernels not explained"
# The spec text is parsed once, at the edge: a misspelt method stops eval
# before it runs, and run refuses a bad or unavailable --spec with exit 2.
if "$SDNPU" eval -m "$MODEL" --dataset "$DS" --methods sam,sam+resue --out "$DIR/typo" -n 4 -t 1 \
  >/dev/null 2>"$DIR/stderr8"; then
  fail "a misspelt method was accepted"
fi
grep -q "method 'sam+resue': unknown stage 'resue'" "$DIR/stderr8" || { cat "$DIR/stderr8"; fail "the typo not named"; }
"$SDNPU" run -m "$MODEL" -p "the cat" -n 4 -t 1 --spec sam-tree+bogus >/dev/null 2>"$DIR/stderr9"
[ $? -eq 2 ] || fail "run --spec sam-tree+bogus did not exit 2"
grep -q "unknown stage 'bogus'" "$DIR/stderr9" || { cat "$DIR/stderr9"; fail "bad --spec not explained"; }
# calib runs with a drafting drafter; calib
# without a drafter is refused.
"$SDNPU" run -m "$MODEL" -p "the cat sat on the mat. the cat" -n 4 -t 1 --spec sam+calib+reuse >/dev/null \
  2>"$DIR/stderr10" || { cat "$DIR/stderr10"; fail "run --spec sam+calib+reuse failed"; }
# switch runs in every --graph-switch mode with the same output as without it.
P="the cat sat on the mat. the cat sat on the mat. the cat"
"$SDNPU" run -m "$MODEL" -p "$P" -n 12 -t 1 --temp 0 --spec sam-tree >"$DIR/noswitch" 2>/dev/null || fail "run sam-tree failed"
for mode in progressive sync naive-async; do
  "$SDNPU" run -m "$MODEL" -p "$P" -n 12 -t 1 --temp 0 --spec sdnpu --graph-switch $mode >"$DIR/switch.$mode" \
    2>"$DIR/stderr10" || { cat "$DIR/stderr10"; fail "run --spec sdnpu --graph-switch $mode failed"; }
  cmp -s "$DIR/noswitch" "$DIR/switch.$mode" || fail "--graph-switch $mode changed the output"
done
"$SDNPU" run -m "$MODEL" -p "the cat" -n 4 -t 1 --spec sdnpu --graph-switch sideways >/dev/null 2>"$DIR/stderr10"
[ $? -eq 2 ] || fail "run --graph-switch sideways did not exit 2"
"$SDNPU" run -m "$MODEL" -p "the cat" -n 4 -t 1 --spec none+calib >/dev/null 2>"$DIR/stderr10"
[ $? -eq 2 ] || fail "run --spec none+calib did not exit 2"
grep -q "calib needs a drafting drafter" "$DIR/stderr10" || { cat "$DIR/stderr10"; fail "calib without a drafter not explained"; }
"$SDNPU" run -m "$MODEL" -p "the cat" -n 4 -t 1 --spec sam-tree+reuse >/dev/null 2>"$DIR/stderr11" \
  || { cat "$DIR/stderr11"; fail "run --spec sam-tree+reuse failed"; }
# A prompt longer than the context is refused with the way out named.
"$SDNPU" run -m "$MODEL" -c 16 -p "the cat sat on the mat. the cat sat on the mat. the cat sat on the mat." -n 4 -t 1 \
  >/dev/null 2>"$DIR/stderr11"
[ $? -eq 1 ] || fail "run with a prompt longer than the context did not exit 1"
grep -q "SDNPU_ERR_CONTEXT_FULL" "$DIR/stderr11" && grep -q "^sdnpu: -c N gives the session a larger context" "$DIR/stderr11" \
  || { cat "$DIR/stderr11"; fail "a full context is not explained"; }
# Past the model's own context (2,048 tokens here) no -c helps: said so.
awk 'BEGIN { for (i = 0; i < 800; i++) printf "the cat sat on the mat. " }' >"$DIR/long_prompt.txt"
"$SDNPU" run -m "$MODEL" -c 4096 -f "$DIR/long_prompt.txt" -n 4 -t 1 >/dev/null 2>"$DIR/stderr11b"
[ $? -eq 1 ] || fail "run with a prompt longer than the model's context did not exit 1"
grep -q "^sdnpu: the model's context is 2048 tokens; give it a shorter prompt" "$DIR/stderr11b" \
  || { cat "$DIR/stderr11b"; fail "a prompt past the model's context is not explained"; }
# A directory given as the prompt file is refused, not read as empty.
"$SDNPU" run -m "$MODEL" -f "$DIR" -n 4 -t 1 >/dev/null 2>"$DIR/stderr11c"
[ $? -eq 1 ] || fail "run -f DIRECTORY did not exit 1"
grep -q "^sdnpu: cannot read '$DIR': Is a directory" "$DIR/stderr11c" || { cat "$DIR/stderr11c"; fail "run -f DIRECTORY is not explained"; }
# summarize reads standard input for FILE "-", as its usage says.
echo "the cat sat on the mat. the cat sat on the mat." | "$SDNPU" summarize -m "$MODEL" -n 4 -t 1 - \
  >"$DIR/stdout12" 2>"$DIR/stderr12" || { cat "$DIR/stderr12"; fail "summarize - failed"; }
grep -q "^prompt: [1-9]" "$DIR/stderr12" || { cat "$DIR/stderr12"; fail "summarize - read no prompt"; }
# A document of nothing but white space is refused, named, before anything is
# generated (the model would invent a summary of it).
printf ' \n\t\r\n' >"$DIR/blank.txt"
"$SDNPU" summarize -m "$MODEL" -n 4 -t 1 "$DIR/blank.txt" >"$DIR/stdout13" 2>"$DIR/stderr13"
[ $? -eq 1 ] || fail "summarize of a blank document did not exit 1"
[ ! -s "$DIR/stdout13" ] || fail "summarize of a blank document wrote a summary"
grep -q "blank.txt holds no text to summarize" "$DIR/stderr13" || { cat "$DIR/stderr13"; fail "blank document not named"; }
: | "$SDNPU" summarize -m "$MODEL" -n 4 -t 1 - >/dev/null 2>"$DIR/stderr13"
[ $? -eq 1 ] || fail "summarize of empty standard input did not exit 1"
grep -q "standard input holds no text" "$DIR/stderr13" || { cat "$DIR/stderr13"; fail "empty standard input not named"; }
# A document that is not UTF-8 (Latin-1 here) is refused with its own byte
# offset and line, not the offset in the chat turn the session wraps it in.
printf 'first line\ncaf\351 au lait\n' >"$DIR/latin1.txt"
"$SDNPU" summarize -m "$MODEL" -n 4 -t 1 "$DIR/latin1.txt" >"$DIR/stdout14" 2>"$DIR/stderr14"
[ $? -eq 1 ] || fail "summarize of a Latin-1 document did not exit 1"
[ ! -s "$DIR/stdout14" ] || fail "summarize of a Latin-1 document wrote a summary"
grep -q "latin1.txt is not UTF-8 text: byte 14 (line 2) is 0xe9" "$DIR/stderr14" \
  || { cat "$DIR/stderr14"; fail "the invalid byte not named by its place in the file"; }
# A NUL byte is not text: refused, named with its offset.
printf 'first\000second\n' >"$DIR/nul.txt"
"$SDNPU" summarize -m "$MODEL" -n 4 -t 1 "$DIR/nul.txt" >"$DIR/stdout14" 2>"$DIR/stderr14"
[ $? -eq 1 ] && [ ! -s "$DIR/stdout14" ] || fail "summarize of a document with a NUL byte did not exit 1 silently"
grep -q "nul.txt is not a text file (it holds a NUL byte at 5)" "$DIR/stderr14" \
  || { cat "$DIR/stderr14"; fail "the NUL byte not named"; }
# summarize's prompt for a base model is the document, a blank line and the
# cue, --instruction's text in place of "TL;DR:": the same prompt and the
# same summary as run given that text; run's -p and --chat are not
# summarize's options.
printf 'the cat sat on the mat. the dog sat on the log.' >"$DIR/doc15.txt"
ask="Write a short summary of the text above for a busy reader, please:"
for cue in "" "$ask"; do
  set -- "$DIR/doc15.txt"
  [ -n "$cue" ] && set -- --instruction "$cue" "$DIR/doc15.txt"
  "$SDNPU" summarize -m "$MODEL" -n 6 -t 1 --stats-json "$DIR/s15.json" "$@" >"$DIR/stdout15" 2>"$DIR/stderr15" \
    || { cat "$DIR/stderr15"; fail "summarize --instruction '$cue' failed"; }
  printf 'the cat sat on the mat. the dog sat on the log.\n\n%s' "${cue:-TL;DR:}" >"$DIR/prompt15.txt"
  nl='
'
  "$SDNPU" run -m "$MODEL" -n 6 -t 1 --temp 0 --spec sam --stop-on-repeat --stop "$nl$nl" -f "$DIR/prompt15.txt" \
    --stats-json "$DIR/r15.json" >"$DIR/stdout15r" 2>"$DIR/stderr15r" || { cat "$DIR/stderr15r"; fail "run of summarize's prompt failed"; }
  cmp -s "$DIR/stdout15" "$DIR/stdout15r" || fail "summarize '$cue' and run of its prompt wrote different text"
  sp=$(sed -n 's/.*"prompt_tokens": \([0-9]*\).*/\1/p' "$DIR/s15.json")
  rp=$(sed -n 's/.*"prompt_tokens": \([0-9]*\).*/\1/p' "$DIR/r15.json")
  [ -n "$sp" ] && [ "$sp" = "$rp" ] || fail "summarize '$cue' prompted $sp tokens, run of its prompt $rp"
  [ -z "$cue" ] && default_tokens=$sp
done
[ "$sp" -gt "$default_tokens" ] || fail "--instruction's longer text gave no longer prompt ($sp, default $default_tokens)"
for flag in -p --chat; do
  "$SDNPU" summarize -m "$MODEL" "$flag" x "$DIR/doc15.txt" >/dev/null 2>"$DIR/stderr15"
  [ $? -eq 2 ] || fail "summarize $flag did not exit 2"
  grep -q "unknown option '$flag' (see sdnpu summarize -h)" "$DIR/stderr15" || { cat "$DIR/stderr15"; fail "summarize $flag not refused by name"; }
done
"$SDNPU" summarize -h | grep -q '^      --instruction TEXT' || fail "summarize -h lacks --instruction"
! "$SDNPU" summarize -h | grep -q -e '^  -p, --prompt' || fail "summarize -h lists run's -p"
printf 'ok\n\377' | "$SDNPU" run -m "$MODEL" -n 4 -t 1 -f - >/dev/null 2>"$DIR/stderr14"
[ $? -eq 1 ] || fail "run -f of invalid UTF-8 did not exit 1"
grep -q "standard input is not UTF-8 text: byte 3 (line 2) is 0xff" "$DIR/stderr14" \
  || { cat "$DIR/stderr14"; fail "run -f: the invalid byte not named"; }
# --guard: the degeneration guard on every method; still lossless, recorded,
# and not resumed into a run made without it.
"$SDNPU" eval -m "$MODEL" --dataset "$DS" --methods cpu-vanilla,sam,sam-tree:fixed --out "$DIR/guard" -n 24 -t 1 \
  --guard >"$DIR/stdout7" 2>"$DIR/stderr7" || { cat "$DIR/stderr7"; fail "--guard run failed"; }
grep -q '"guard": true' "$DIR/guard/results.json" || fail "results.json lacks the guard setting"
grep -q "guard repeats" "$DIR/stdout7" || fail "the table lacks the guard and repeats columns"
[ "$(tail -n +2 "$DIR/guard/summary.csv" | grep -c ',yes,$')" -eq 3 ] || fail "a --guard method is not lossless"
if "$SDNPU" eval -m "$MODEL" --dataset "$DS" --methods $METHODS --out "$OUT" -n 12 -t 1 --guard \
  >/dev/null 2>"$DIR/stderr8"; then
  fail "resume with the guard on succeeded"
fi
grep -q "guard off there, on here" "$DIR/stderr8" || fail "guard mismatch not explained"
# --strict fails on the malformed line, naming it.
if "$SDNPU" eval -m "$MODEL" --dataset "$DS" --out "$DIR/strict" --strict -n 4 -t 1 >/dev/null 2>"$DIR/stderr4"; then
  fail "--strict succeeded on a malformed dataset"
fi
grep -q "tiny.jsonl:2:" "$DIR/stderr4" || fail "--strict did not name line 2"
[ ! -e "$DIR/strict/results.json" ] || fail "--strict wrote results"
# Endless or huge input is refused with a message, not read without bound.
if "$SDNPU" run -m "$MODEL" -f /dev/zero -n 1 >/dev/null 2>"$DIR/stderr9"; then fail "run -f /dev/zero succeeded"; fi
grep -q "larger than 256 MiB" "$DIR/stderr9" || { cat "$DIR/stderr9"; fail "run -f /dev/zero: no message"; }
{ head -c 17000000 /dev/zero | tr '\0' 'x'; echo; sed -n 1p "$DS"; } > "$DIR/long.jsonl"
"$SDNPU" eval -m "$MODEL" --dataset "$DIR/long.jsonl" --methods cpu-vanilla --out "$DIR/long" -n 4 -t 1 \
  >/dev/null 2>"$DIR/stderr10" || { cat "$DIR/stderr10"; fail "eval on a dataset with a 17 MB line failed"; }
grep -q "long.jsonl:1: a line of 16 MiB or more; skipped" "$DIR/stderr10" || fail "the long line was not reported"
echo "eval_e2e: ok"
