#!/bin/sh
# tests/tools/examples_test.sh - drive the example programs and `sdnpu chat`
# for CTest (tests/examples.cmake). Each check prints what it saw when it
# fails. Usage:
#   examples_test.sh summarize EXAMPLE MODEL DOC N
#   examples_test.sh summarize-stdin EXAMPLE MODEL DOC N
#   examples_test.sh autoreply EXAMPLE MODEL THREAD WORKDIR N
#   examples_test.sh chat SDNPU MODEL WORKDIR
#   examples_test.sh summarize-cli SDNPU MODEL DOC WORD
#   examples_test.sh summarize-long SDNPU MODEL DOC
#   examples_test.sh summarize-long-example EXAMPLE MAKE_TINY_MODELS WORKDIR
set -u

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# has_stats FILE: the stats line is there with numbers in it.
has_stats() {
    grep -Eq '^stats: prompt_tokens=[1-9][0-9]* prefill_ms=[0-9.]+ generated=[0-9]+ tok_s=[0-9.]+ acceptance=[0-9.]+' "$1" ||
        { cat "$1" >&2; fail "no stats line on stderr"; }
}

mode=$1
shift
case "$mode" in
summarize | summarize-stdin)
    ex=$1 model=$2 doc=$3 n=$4
    err=$(mktemp) || exit 1
    if [ "$mode" = summarize ]; then
        "$ex" -m "$model" -n "$n" "$doc" 2>"$err" || { cat "$err" >&2; fail "example_summarize exited $?"; }
    else
        "$ex" -m "$model" -n "$n" - <"$doc" 2>"$err" || { cat "$err" >&2; fail "example_summarize - exited $?"; }
    fi
    has_stats "$err"
    cat "$err"
    rm -f "$err"
    ;;
summarize-cli)
    # The README's first command on an instruction-tuned model: a summary
    # that names what the document is about, ends where the model ends
    # its turn (not at the token limit, not by the repetition guard) and
    # is a summary, under a third of the document's words, not the
    # document again (what the 0.5B wrote when the instruction came first).
    exe=$1 model=$2 doc=$3 word=$4
    # The sanitizer run skips the real model's long runs (CTest: skipped).
    [ -z "${SDNPU_TEST_NO_MODEL:-}" ] || { echo "SDNPU_TEST_NO_MODEL set: skipped"; exit 77; }
    out=$(mktemp) err=$(mktemp) || exit 1
    "$exe" summarize -m "$model" "$doc" >"$out" 2>"$err" || { cat "$err" >&2; fail "sdnpu summarize exited $?"; }
    cat "$out" "$err"
    grep -qi "$word" "$out" || fail "the summary does not mention '$word'"
    grep -q 'stop: end of turn' "$err" || fail "the summary did not end at the end of the model's turn"
    words=$(wc -w <"$out") doc_words=$(wc -w <"$doc")
    [ $((words * 3)) -lt "$doc_words" ] || fail "the summary has $words words of the document's $doc_words"
    rm -f "$out" "$err"
    ;;
summarize-long-example)
    # The example sizes its context to a document past the default 4,096
    # tokens, on a tiny model whose own context is 16,384.
    ex=$1 make_tiny=$2 dir=$3
    mkdir -p "$dir" && "$make_tiny" "$dir" 16384 >/dev/null || fail "make_tiny_models $dir 16384 failed"
    doc=$dir/long.txt err=$dir/err
    awk 'BEGIN { srand(3); for (i = 0; i < 1200; i++) { w = ""; for (j = 0; j < 4; j++) w = w sprintf("%c", 97 + int(rand() * 26)); printf "%s ", w } }' >"$doc"
    "$ex" -m "$dir/tiny-gemma3.gguf" -n 4 "$doc" >/dev/null 2>"$err" || { cat "$err" >&2; fail "example_summarize of a long document exited $?"; }
    has_stats "$err"
    n=$(sed -n 's/^stats: prompt_tokens=\([0-9]*\) .*/\1/p' "$err")
    [ "${n:-0}" -gt 4096 ] || { cat "$err" >&2; fail "the long document's prompt has ${n:-no} tokens, not more than 4,096"; }
    ;;
summarize-long)
    # A document longer than the 4,096-token default context is summarized,
    # not refused: summarize sizes the context to it when -c is not given.
    exe=$1 model=$2 doc=$3
    [ -z "${SDNPU_TEST_NO_MODEL:-}" ] || { echo "SDNPU_TEST_NO_MODEL set: skipped"; exit 77; }
    long=$(mktemp) err=$(mktemp) || exit 1
    head -c 20000 "$doc" >"$long"
    "$exe" summarize -m "$model" -n 8 "$long" >/dev/null 2>"$err" || { cat "$err" >&2; fail "sdnpu summarize exited $?"; }
    n=$(sed -n 's/^prompt: \([0-9]*\) tokens in .*/\1/p' "$err")
    [ "${n:-0}" -gt 4096 ] || { cat "$err" >&2; fail "the long document's prompt has ${n:-no} tokens, not more than 4,096"; }
    "$exe" summarize -m "$model" -n 8 -c 4096 "$long" >/dev/null 2>"$err" && fail "-c 4096 took a longer document"
    grep -q "^sdnpu: -c N gives the session a larger context" "$err" || { cat "$err" >&2; fail "a full context is not explained"; }
    # Ctrl-C during the long prefill stops it (after its chunk), prints
    # what happened and exits 130. The signal goes once the process catches
    # SIGINT (bit 2 of SigCgt in /proc), which it does from the request on:
    # a prefill of thousands of tokens then runs for seconds.
    "$exe" summarize -m "$model" -n 8 "$long" >/dev/null 2>"$err" &
    pid=$!
    for _ in $(seq 600); do
        cgt=$(sed -n 's/^SigCgt:[[:space:]]*//p' "/proc/$pid/status" 2>/dev/null) || break
        [ -n "$cgt" ] && [ $((0x$cgt & 2)) -ne 0 ] && break
        sleep 0.1
    done
    kill -INT "$pid"
    wait "$pid"
    rc=$?
    [ "$rc" -eq 130 ] || { cat "$err" >&2; fail "Ctrl-C during the prefill: exit $rc, not 130"; }
    grep -q "stopped during their prefill" "$err" || { cat "$err" >&2; fail "Ctrl-C during the prefill is not reported"; }
    rm -f "$long" "$err"
    ;;
autoreply)
    ex=$1 model=$2 thread=$3 dir=$4 n=$5
    mkdir -p "$dir" || exit 1
    hist="$dir/autoreply.history"
    err="$dir/autoreply.err"
    rm -f "$hist"
    sizes=""
    for run in 1 2; do
        "$ex" -m "$model" -n "$n" "$thread" "$hist" 2>"$err" || { cat "$err" >&2; fail "run $run exited $?"; }
        has_stats "$err"
        [ -f "$hist" ] || fail "run $run did not create the history file $hist"
        sizes="$sizes $(wc -c <"$hist")"
        cat "$err"
    done
    set -- $sizes
    [ "$1" -gt 0 ] || fail "the history is empty after one run"
    [ "$2" -gt "$1" ] || fail "the history did not grow: $1 then $2 bytes"
    echo "history grew: $1 -> $2 bytes"
    # A malformed thread is an error that names the line.
    printf 'Alice: hi\nno colon here\n' >"$dir/bad_thread.txt"
    if "$ex" -m "$model" -n 2 "$dir/bad_thread.txt" "$hist" 2>"$err"; then fail "a bad thread was accepted"; fi
    grep -q 'bad_thread.txt:2' "$err" || { cat "$err" >&2; fail "the error does not name line 2"; }
    ;;
chat)
    sdnpu=$1 model=$2 dir=$3
    mkdir -p "$dir" || exit 1
    rm -f "$dir/chat.transcript" "$dir/chat.history"
    printf 'The document says hello.\n' >"$dir/chat.doc"
    out="$dir/chat.out"
    err="$dir/chat.err"
    # Scripted input: a message, a continued message, a """ block, commands,
    # an unknown method (refused at the command; the turn after it runs on
    # the method before), save, reset, load, one more.
    printf '%s\n' 'Hello there' '/context '"$dir"'/chat.doc' 'first line\' 'second line' '"""' 'block one' \
        'block two' '"""' "/history $dir/chat.history" '/stats' '/method no-such-method' 'again' '/method sam' \
        'with sam' "/save $dir/chat.transcript" '/reset' "/load $dir/chat.transcript" 'after load' '/bogus' \
        '/quit' 'never read' |
        "$sdnpu" chat -m "$model" -n 6 --temp 0 >"$out" 2>"$err"
    code=$?
    [ $code -eq 0 ] || { cat "$out" "$err" >&2; fail "sdnpu chat exited $code, expected 0 (no failed turn)"; }
    grep -q "/method no-such-method: unknown drafter 'no-such-method'" "$err" || { cat "$err" >&2; fail "no error for the method"; }
    grep -q '^last request: prompt [1-9]' "$out" || { cat "$out" >&2; fail "/stats printed no request"; }
    grep -q "unknown command '/bogus'" "$err" || { cat "$err" >&2; fail "no message for an unknown command"; }
    [ "$(grep -c '^user: ' "$dir/chat.transcript")" -eq 5 ] || { cat "$dir/chat.transcript" >&2; fail "transcript should hold 5 user turns"; }
    grep -q '^user: first line\\nsecond line$' "$dir/chat.transcript" || fail "a \\-continued message was not joined"
    grep -q '^user: block one\\nblock two$' "$dir/chat.transcript" || fail "a \"\"\" block was not joined"
    grep -q '^context: The document says hello.' "$dir/chat.transcript" || fail "the /context document is not in the transcript"
    grep -q 'loaded 5 turns' "$err" || { cat "$err" >&2; fail "/load did not load 5 turns"; }
    # A turn that fails (a message past the context) is said, the next one
    # runs, and the failed turn makes scripted chat exit 1.
    printf '%s\n' 'one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen' \
        'hi' '/stats' '/quit' | "$sdnpu" chat -m "$model" -n 4 --temp 0 -c 64 >"$out" 2>"$err"
    code=$?
    [ $code -eq 1 ] || { cat "$out" "$err" >&2; fail "sdnpu chat exited $code after a failed turn, expected 1"; }
    grep -q 'does not fit the context (64 tokens)' "$err" || { cat "$err" >&2; fail "no message for the failed turn"; }
    grep -q '^last request: prompt [1-9]' "$out" || { cat "$out" >&2; fail "the turn after a failed one did not run"; }
    [ -s "$dir/chat.history" ] || fail "/history did not grow the history file"
    grep -q 'never read' "$out" "$err" && fail "input after /quit was read"
    # A malformed transcript is refused with its line number.
    printf 'user: hi\nwizard: boo\n' >"$dir/bad.transcript"
    printf '/load %s\n' "$dir/bad.transcript" | "$sdnpu" chat -m "$model" -n 2 >"$out" 2>"$err"
    grep -q 'bad.transcript:2: unknown role' "$err" || { cat "$err" >&2; fail "a bad transcript line was not named"; }
    echo "chat ok"
    ;;
*)
    fail "unknown mode '$mode'"
    ;;
esac
exit 0
