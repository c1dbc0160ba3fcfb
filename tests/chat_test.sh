#!/bin/sh
# tests/chat_test.sh - `sdnpu chat` as people use it (tests/chat.cmake), on a
# tiny model whose replies are gibberish: what is checked is the editing,
# the prompts, the signals, and that a saved session continues exactly.
#
#   chat_test.sh tty SDNPU MAKE_TINY_MODELS WORKDIR
#       typed at through tmux: editing in the middle of a line of two-byte
#       characters (the model gets the line as edited), Up recalling earlier
#       lines (in the same run and, from the history file, in the next),
#       Ctrl-C at the prompt and during a reply, Ctrl-D leaving with status
#       0. Exits 77 (skipped) where tmux is not installed.
#   chat_test.sh saved SDNPU MAKE_TINY_MODELS WORKDIR
#       /save and /load through pipes: a chat saved after one turn and
#       loaded in a new one replies to the next message exactly as the chat
#       that never stopped, evaluating only that message; a damaged or
#       missing session falls back to replaying the transcript. The
#       default method (sam-tree) gives plain decoding's greedy replies.
#   chat_test.sh grow SDNPU MAKE_TINY_MODELS WORKDIR
#       without -c, a document longer than the context grows it, and a
#       conversation that outgrows it moves to a larger one without
#       evaluating again what it held (its replies those of a chat with
#       the large context from the start); past the model's own context
#       the turn is refused with the reason.
#   chat_test.sh cache SDNPU MAKE_TINY_MODELS WORKDIR
#       --prompt-cache: written after the first turn, then loaded by the
#       next chat on the same document, which keeps the document's tokens
#       and replies as a fresh chat does; a cache past the default context
#       grows it; a damaged one is reported and costs only the reuse.
#   chat_test.sh system SDNPU MAKE_TINY_MODELS WORKDIR MODEL
#       on an instruct model whose template has a system turn of its own
#       (the default, Qwen2.5-Coder-0.5B-Instruct; exits 77 without it):
#       --system "" sends no system turn at all (the prompt is the user's
#       turn alone, as `sdnpu tokenize` counts it), no --system the
#       template's own, and a /save of the first keeps it so.
#
# Every wait polls with a deadline (WAIT_S seconds), so a hung chat fails
# the test with what the screen showed instead of hanging it.
set -u

WAIT_S=60

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

mode=$1 sdnpu=$2 make_tiny=$3 dir=$4 real_model=${5:-}
if [ "$mode" = tty ] && ! command -v tmux >/dev/null 2>&1; then
    echo "SKIP: tmux is not installed (apt-get install tmux)"
    exit 77
fi
if [ "$mode" = system ] && [ ! -f "$real_model" ]; then
    echo "SKIP: no instruct model at '$real_model' (scripts/setup)"
    exit 77
fi
rm -rf "$dir" && mkdir -p "$dir" || exit 1
# Absolute paths: the chat under tmux runs in $dir.
abs() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
sdnpu=$(abs "$sdnpu") make_tiny=$(abs "$make_tiny") dir=$(abs "$dir")
"$make_tiny" "$dir" >/dev/null || fail "make_tiny_models failed"
model=$dir/tiny-gemma3.gguf

# ------------------------------------------------------------------ tty

# tmux ARGS: the test's own tmux server (its own socket, no user config).
tx() { tmux -u -S "$sock" -f /dev/null "$@"; }

# stop_tmux: end the server and its socket file.
stop_tmux() {
    tx kill-server 2>/dev/null
    rm -f "$sock"
}

# screen: the pane and its scrollback, trailing blank lines dropped.
screen() { tx capture-pane -p -S - -t chat | awk 'NF {last = NR} {line[NR] = $0} END {for (i = 1; i <= last; i++) print line[i]}'; }

last_line() { screen | tail -n 1; }

# wait_for WHAT CMD...: poll until the shell command CMD succeeds.
wait_for() {
    what=$1
    shift
    i=0
    while ! eval "$*"; do
        i=$((i + 1))
        if [ $i -gt $((WAIT_S * 20)) ]; then
            screen >&2
            fail "after ${WAIT_S} s still waiting for $what"
        fi
        sleep 0.05
    done
}

# replied MSG: lines after the message line "> MSG" that show something.
replied() { screen | awk -v m="> $1" '$0 == m {found = 1; n = 0; next} found && NF {n++} END {print n + 0}'; }

pane() { tx display -p -t chat "$1"; }

# exited: the chat has ended (the shell around it wrote its status; tmux's
# own pane_dead_status is not always set when the pane reads as dead).
exited() { [ -s "$dir/status" ]; }
exit_status() { cat "$dir/status"; }

# start ARGS: sdnpu chat ARGS in a fresh 100x30 terminal (a tmux server of
# its own: a new one on the last one's socket can meet it shutting down),
# its history file in the work folder. The shell around it writes its exit
# status to $dir/status; it ignores the Ctrl-C meant for the chat (a
# handler, not SIG_IGN, so the chat starts with the default).
runs=0
start() {
    stop_tmux
    runs=$((runs + 1))
    sock=${TMPDIR:-/tmp}/sdnpu-chat-test-$$-$runs
    rm -f "$dir/status"
    tx new-session -d -s chat -x 100 -y 30 -c "$dir" \
        "trap : INT; env -u SDNPU_CHAT_HISTORY HOME='$dir' XDG_STATE_HOME='$dir/state' $*; echo \"status \$?\" >'$dir/status'" \; \
        set-option -t chat remain-on-exit on || fail "tmux cannot start"
}

tty_test() {
    sock=${TMPDIR:-/tmp}/sdnpu-chat-test-$$-0
    trap stop_tmux EXIT
    cmd="'$sdnpu' chat -m '$model' --temp 0"
    msg='héllo Xwörld' # as edited below: two-byte characters on both sides of the cursor
    start "$cmd -n 8"
    wait_for "the first prompt" '[ "$(last_line)" = ">" ]'
    # Type, go five characters left, insert: the line shows the insertion
    # where the cursor was, and the cursor stays just after it (column 9:
    # characters, not bytes).
    tx send-keys -t chat 'héllo wörld'
    wait_for "the typed line" '[ "$(last_line)" = "> héllo wörld" ]'
    tx send-keys -t chat Left Left Left Left Left X
    wait_for "the edited line" '[ "$(last_line)" = "> $msg" ]'
    [ "$(pane '#{cursor_x}')" = 9 ] || fail "the cursor is at column $(pane '#{cursor_x}'), expected 9"
    tx send-keys -t chat Enter
    wait_for "the reply and the next prompt" '[ "$(last_line)" = ">" ] && [ "$(replied "$msg")" -gt 0 ]'
    # Up recalls the line as edited.
    tx send-keys -t chat Up
    wait_for "the recalled line" '[ "$(last_line)" = "> $msg" ]'
    # Ctrl-C at the prompt drops the line, and the program goes on.
    tx send-keys -t chat C-c
    wait_for "a fresh prompt after Ctrl-C" '[ "$(last_line)" = ">" ]'
    screen | grep -q '(/quit or Ctrl-D to leave)' || { screen >&2; fail "no hint after Ctrl-C at the prompt"; }
    exited && fail "Ctrl-C at the prompt ended the program ($(exit_status))"
    # The message the model got is the line as edited, byte for byte.
    tx send-keys -t chat '/save tty.transcript' Enter
    wait_for "/save" 'screen | grep -q "^saved 1 turns to tty.transcript"'
    grep -qx "user: $msg" "$dir/tty.transcript" || { cat "$dir/tty.transcript" >&2; fail "the message sent is not the line edited"; }
    # Ctrl-D on the empty line leaves, with status 0.
    wait_for "the prompt after /save" '[ "$(last_line)" = ">" ]'
    tx send-keys -t chat C-d
    wait_for "the program to exit after Ctrl-D" exited
    [ "$(exit_status)" = "status 0" ] || fail "Ctrl-D: the chat ended with $(exit_status), expected status 0"
    grep -q 'Xw' "$dir/state/sdnpu/chat_history" 2>/dev/null ||
        fail "the history file $dir/state/sdnpu/chat_history does not hold the line typed"

    # A new run: Up, Up walks back through the last run's lines, from the
    # history file. Sent, the message gets a reply as long as the context
    # allows (-n -1); Ctrl-C as soon as it shows stops that reply only.
    start "$cmd -n -1"
    wait_for "the first prompt (second run)" '[ "$(last_line)" = ">" ]'
    tx send-keys -t chat Up
    wait_for "the last line from the history file" '[ "$(last_line)" = "> /save tty.transcript" ]'
    tx send-keys -t chat Up
    wait_for "the line before it" '[ "$(last_line)" = "> $msg" ]'
    tx send-keys -t chat Enter
    wait_for "the long reply to start" '[ "$(replied "$msg")" -gt 0 ]'
    tx send-keys -t chat C-c
    wait_for "the prompt after Ctrl-C during the reply" '[ "$(last_line)" = ">" ]'
    screen | grep -aq '^\[stopped\]$' || { screen >&2; fail "Ctrl-C did not stop the reply (no [stopped]: it had ended?)"; }
    exited && fail "Ctrl-C during a reply ended the program ($(exit_status))"
    # Still answering commands.
    tx send-keys -t chat '/stats' Enter
    wait_for "/stats after the stopped reply" 'screen | grep -q "^session: 1 requests"'
    tx send-keys -t chat C-d
    wait_for "the program to exit (second run)" exited
    [ "$(exit_status)" = "status 0" ] || fail "second run: the chat ended with $(exit_status), expected status 0"
    echo "chat tty ok"
}

# ---------------------------------------------------------------- saved

# chat OUT ERR LINES...: a pipe-fed chat, greedy, short replies.
chat() {
    out=$1 err=$2
    shift 2
    printf '%s\n' "$@" | "$sdnpu" chat -m "$model" -n 6 --temp 0 >"$out" 2>"$err" ||
        { cat "$out" "$err" >&2; fail "sdnpu chat exited $? on: $*"; }
}

# replies FILE: the replies on stdout, without /stats's lines.
replies() { grep -a -v -e '^last request: ' -e '^  ' -e '^session: ' "$1"; }
prompt_tokens() { grep -a -o '^last request: prompt [0-9]* tokens' "$1"; }

saved_test() {
    s=$dir/saved
    # The reference: one chat, two turns.
    chat "$dir/a.out" "$dir/a.err" 'Hello there' 'again' '/stats'
    # Drafting by default (sam-tree, as the server), lossless: longer
    # replies, which the tiny model fills with runs its drafts copy, the
    # same as plain decoding's (every draft verified: on a model this small
    # cost-aware drafting finds that drafts do not pay).
    for m in default none; do
        flag=--no-adaptive; [ $m = none ] && flag='--spec none'
        printf '%s\n' 'Hello there' 'again' '/stats' | "$sdnpu" chat -m "$model" -n 40 --temp 0 $flag >"$dir/$m.out" 2>"$dir/$m.err" ||
            { cat "$dir/$m.err" >&2; fail "sdnpu chat $flag exited $?"; }
        replies "$dir/$m.out" >"$dir/$m.replies"
    done
    grep -q '^  speculative: sam-tree .* accepted [1-9]' "$dir/default.out" ||
        { cat "$dir/default.out" >&2; fail "chat did not draft with sam-tree by default"; }
    grep -q '^  speculative: none ' "$dir/none.out" || fail "--spec none did not decode plainly"
    cmp -s "$dir/default.replies" "$dir/none.replies" ||
        { diff "$dir/default.replies" "$dir/none.replies" >&2; fail "chat's drafted greedy replies differ from plain decoding's"; }
    # The same, saved after the first turn and loaded in a new chat.
    chat "$dir/b.out" "$dir/b.err" 'Hello there' "/save $s"
    grep -q "saved the session ([1-9][0-9]* tokens) to $s.session" "$dir/b.err" ||
        { cat "$dir/b.err" >&2; fail "/save did not save the session"; }
    grep -q '^held: ' "$s" || fail "the transcript has no held record"
    chat "$dir/c.out" "$dir/c.err" "/load $s" 'again' '/stats'
    grep -q "restored the session ([1-9][0-9]* tokens) from $s.session" "$dir/c.err" ||
        { cat "$dir/c.err" >&2; fail "/load did not restore the session"; }
    grep -q 'replayed' "$dir/c.err" && fail "/load replayed the transcript although the session was restored"
    replies "$dir/a.out" >"$dir/a.replies"
    { replies "$dir/b.out"; replies "$dir/c.out"; } >"$dir/bc.replies"
    cmp -s "$dir/a.replies" "$dir/bc.replies" ||
        { diff "$dir/a.replies" "$dir/bc.replies" >&2; fail "the loaded chat's reply differs from the one that never stopped"; }
    # Only the new message was evaluated, as in the chat that never stopped.
    [ -n "$(prompt_tokens "$dir/a.out")" ] && [ "$(prompt_tokens "$dir/a.out")" = "$(prompt_tokens "$dir/c.out")" ] ||
        fail "after /load the turn evaluated '$(prompt_tokens "$dir/c.out")', the unbroken chat '$(prompt_tokens "$dir/a.out")'"

    # A damaged session is refused with the engine's reason; the chat
    # replays the transcript and goes on.
    printf 'not a session' >"$s.session"
    chat "$dir/d.out" "$dir/d.err" "/load $s" 'again'
    grep -q "cannot restore the session from '$s.session': .*: ..*; replaying the transcript" "$dir/d.err" ||
        { cat "$dir/d.err" >&2; fail "a damaged session was not refused with a reason"; }
    grep -q 'replayed [1-9][0-9]* tokens' "$dir/d.err" || { cat "$dir/d.err" >&2; fail "no replay after the refused session"; }
    [ -s "$dir/d.out" ] || fail "no reply after the refused session"
    # So is a missing one.
    rm -f "$s.session"
    chat "$dir/e.out" "$dir/e.err" "/load $s" 'again'
    grep -q "cannot restore the session from '$s.session'" "$dir/e.err" ||
        { cat "$dir/e.err" >&2; fail "a missing session was not reported"; }
    # A session that cannot be written is said, and the chat goes on.
    chat "$dir/f.out" "$dir/f.err" 'Hello there' "/save $dir/no/such/dir/x" 'again'
    grep -q "cannot save the session to '$dir/no/such/dir/x.session'" "$dir/f.err" ||
        { cat "$dir/f.err" >&2; fail "a failed session save was not reported"; }
    [ "$(replies "$dir/f.out" | wc -l)" -ge 2 ] || { cat "$dir/f.out" >&2; fail "the chat did not go on after a failed /save"; }
    # A document goes before its message between tags, as every surface
    # gives documents (sdnpu_documents_format); the saved held text shows it.
    printf 'the notes' >"$dir/notes.txt"
    printf '%s\n' 'Sum it up.' "/save $dir/doc" | "$sdnpu" chat -m "$model" --context "$dir/notes.txt" -n 4 --temp 0 \
        >"$dir/g.out" 2>"$dir/g.err" || { cat "$dir/g.err" >&2; fail "sdnpu chat --context exited $?"; }
    grep -qF 'held: User: <document>\nthe notes\n</document>\n\nSum it up.\nAssistant:' "$dir/doc" ||
        { cat "$dir/doc" >&2; fail "the document is not in tags before its message"; }
    echo "chat saved ok"
}

# text FILE N: N words of four random lowercase letters (three to four
# tiny-model tokens a word), varied so that the text does not repeat itself.
text() { awk -v n="$2" 'BEGIN { srand(7); for (i = 0; i < n; i++) { w = ""; for (j = 0; j < 4; j++) w = w sprintf("%c", 97 + int(rand() * 26)); printf "%s%s", w, (i % 12 == 11) ? "\n" : " " } }' >"$1"; }

# ctx_of FILE: the context size the last /stats line reports.
ctx_of() { grep -a '^session: ' "$1" | tail -n 1 | sed 's/.* of \([0-9]*\) tokens.*/\1/'; }

# long_model: $long, tiny Gemma written with a 16,384-token context, so that
# a chat can grow past the default 4,096.
long_model() {
    mkdir -p "$dir/long" && "$make_tiny" "$dir/long" 16384 >/dev/null || fail "make_tiny_models DIR 16384 failed"
    long=$dir/long/tiny-gemma3.gguf
}

grow_test() {
    long_model
    text "$dir/small.txt" 600
    text "$dir/big.txt" 1150
    # A document longer than the default 4,096 tokens: the context grows
    # to fit it where -c is not given, and the chat answers.
    printf '%s\n' 'Sum it up.' '/stats' | "$sdnpu" chat -m "$long" --context "$dir/big.txt" -n 8 --temp 0 \
        >"$dir/a.out" 2>"$dir/a.err" || { cat "$dir/a.err" >&2; fail "chat with a long document exited $?"; }
    grep -q 'the context grows from 4096 to [0-9]* tokens (-c sets it)' "$dir/a.err" ||
        { cat "$dir/a.err" >&2; fail "the context did not grow for a long document"; }
    [ "$(ctx_of "$dir/a.out")" -gt 4096 ] || { cat "$dir/a.out" >&2; fail "/stats does not show the larger context"; }
    # /reset forgets the document: the context goes back to 4,096 (not with -c).
    printf '%s\n' 'Sum it up.' '/reset' '/stats' | "$sdnpu" chat -m "$long" --context "$dir/big.txt" -n 8 --temp 0 \
        >"$dir/r.out" 2>"$dir/r.err" || { cat "$dir/r.err" >&2; fail "chat with /reset exited $?"; }
    grep -q 'the context goes back from [0-9]* to 4096 tokens' "$dir/r.err" && [ "$(ctx_of "$dir/r.out")" = 4096 ] ||
        { cat "$dir/r.err" "$dir/r.out" >&2; fail "/reset did not take the context back to 4096"; }
    # A conversation that outgrows the context moves to a larger one, what
    # it holds carried over (sdnpu_session_set_n_ctx), and every reply and
    # every turn's evaluated tokens are those of a chat given the large
    # context from the start: the second turn evaluates its own text alone.
    # (Tiny Gemma's first short reply is ASCII, so the rendered
    # conversation matches what the session holds; replies that are not
    # UTF-8 would make both chats evaluate it again.)
    conv() { printf '%s\n' 'Sum it up.' '/stats' "/context $dir/big.txt" 'And this?' '/stats' |
        "$sdnpu" chat -m "$long" --context "$dir/small.txt" -n 8 --temp 0 "$@"; }
    conv >"$dir/b.out" 2>"$dir/b.err" || { cat "$dir/b.err" >&2; fail "the growing chat exited $?"; }
    conv -c 8192 >"$dir/c.out" 2>"$dir/c.err" || { cat "$dir/c.err" >&2; fail "the chat with -c 8192 exited $?"; }
    grep -q 'the context grows from 4096 to 8192 tokens, what it holds carried over' "$dir/b.err" ||
        { cat "$dir/b.err" >&2; fail "the conversation's context did not grow to 8192"; }
    grep -q 'grows' "$dir/c.err" && fail "the context grew although -c was given"
    replies "$dir/b.out" >"$dir/b.replies"
    replies "$dir/c.out" >"$dir/c.replies"
    cmp -s "$dir/b.replies" "$dir/c.replies" ||
        { diff "$dir/b.replies" "$dir/c.replies" >&2; fail "the grown chat's replies differ from the large context's"; }
    [ "$(prompt_tokens "$dir/b.out")" = "$(prompt_tokens "$dir/c.out")" ] ||
        fail "the grown chat evaluated '$(prompt_tokens "$dir/b.out" | tr '\n' ' ')', the large one '$(prompt_tokens "$dir/c.out" | tr '\n' ' ')'"
    # A session saved from a grown context grows the one that loads it,
    # and a transcript replayed alone grows it too.
    printf '%s\n' 'Sum it up.' "/save $dir/sv" | "$sdnpu" chat -m "$long" --context "$dir/big.txt" -n 8 --temp 0 \
        >"$dir/e.out" 2>"$dir/e.err" || { cat "$dir/e.err" >&2; fail "the grown chat's /save exited $?"; }
    printf '%s\n' "/load $dir/sv" '/stats' | "$sdnpu" chat -m "$long" -n 8 --temp 0 >"$dir/f.out" 2>"$dir/f.err" ||
        { cat "$dir/f.err" >&2; fail "/load of a grown session exited $?"; }
    grep -q 'restored the session ([1-9][0-9]* tokens)' "$dir/f.err" || { cat "$dir/f.err" >&2; fail "a grown session was not restored"; }
    [ "$(ctx_of "$dir/f.out")" -gt 4096 ] || { cat "$dir/f.out" >&2; fail "the loading chat's context did not grow"; }
    rm -f "$dir/sv.session"
    printf '%s\n' "/load $dir/sv" '/stats' | "$sdnpu" chat -m "$long" -n 8 --temp 0 >"$dir/g.out" 2>"$dir/g.err" ||
        { cat "$dir/g.err" >&2; fail "/load of a long transcript exited $?"; }
    grep -q 'replayed [1-9][0-9]* tokens' "$dir/g.err" || { cat "$dir/g.err" >&2; fail "a long transcript was not replayed"; }
    [ "$(ctx_of "$dir/g.out")" -gt 4096 ] || { cat "$dir/g.out" >&2; fail "the replaying chat's context did not grow"; }
    # Past the model's own context (2,048 tokens) it cannot grow: said,
    # and the chat goes on.
    printf '%s\n' 'Sum it up.' 'hi' '/stats' | "$sdnpu" chat -m "$model" --context "$dir/big.txt" -n 8 --temp 0 \
        >"$dir/d.out" 2>"$dir/d.err"
    grep -q "the model's context holds 2048" "$dir/d.err" || { cat "$dir/d.err" >&2; fail "no reason given where the context cannot grow"; }
    grep -q 'does not fit the context (2048 tokens)' "$dir/d.err" || { cat "$dir/d.err" >&2; fail "the turn that cannot fit was not refused"; }
    echo "chat grow ok"
}

# reused FILE: the prompt tokens the prompt cache gave the first turn.
reused() { sed -n 's/^prompt cache: \([0-9]*\) of [0-9]* prompt tokens reused.*/\1/p' "$1"; }

cache_test() {
    long_model
    pc=$dir/prompt.cache
    text "$dir/small.txt" 300
    text "$dir/big.txt" 1150
    ask() { # ask OUT DOC QUESTION [FLAGS...]
        out=$1 doc=$2 q=$3
        shift 3
        printf '%s\n' "$q" '/stats' | "$sdnpu" chat -m "$long" --context "$doc" -n 8 --temp 0 "$@" >"$out" 2>"$out.err" ||
            { cat "$out.err" >&2; fail "sdnpu chat $* exited $?"; }
    }
    # The first chat finds no file and writes one after its first turn.
    ask "$dir/a.out" "$dir/small.txt" 'Sum it up.' --prompt-cache "$pc"
    grep -q "reused (no usable file); saved [1-9][0-9]* tokens to $pc" "$dir/a.out.err" ||
        { cat "$dir/a.out.err" >&2; fail "the prompt cache was not written"; }
    # The next chat on the same document keeps its prefix, and replies as a
    # chat without the cache does.
    ask "$dir/b.out" "$dir/small.txt" 'And the rest?' --prompt-cache "$pc"
    ask "$dir/c.out" "$dir/small.txt" 'And the rest?'
    grep -q "prompt cache: [1-9][0-9]* tokens from $pc" "$dir/b.out.err" || { cat "$dir/b.out.err" >&2; fail "the prompt cache was not loaded"; }
    [ "$(reused "$dir/b.out.err")" -gt 300 ] || { cat "$dir/b.out.err" >&2; fail "the document's tokens were not reused"; }
    replies "$dir/b.out" >"$dir/b.replies"
    replies "$dir/c.out" >"$dir/c.replies"
    cmp -s "$dir/b.replies" "$dir/c.replies" ||
        { diff "$dir/b.replies" "$dir/c.replies" >&2; fail "the reply on the prompt cache differs from a fresh chat's"; }
    # A cache of a document past 4,096 tokens grows the context that loads it.
    ask "$dir/d.out" "$dir/big.txt" 'Sum it up.' --prompt-cache "$pc.big"
    ask "$dir/e.out" "$dir/big.txt" 'And the rest?' --prompt-cache "$pc.big"
    grep -q 'the prompt cache does not fit 4096 tokens: the context grows from 4096 to 8192 tokens' "$dir/e.out.err" ||
        { cat "$dir/e.out.err" >&2; fail "a large prompt cache did not grow the context"; }
    [ "$(reused "$dir/e.out.err")" -gt 4096 ] || { cat "$dir/e.out.err" >&2; fail "the long document's tokens were not reused"; }
    # A damaged cache is said and costs only the reuse.
    printf 'not a session' >"$pc"
    ask "$dir/f.out" "$dir/small.txt" 'And the rest?' --prompt-cache "$pc"
    grep -q 'warning: not using the prompt cache: SDNPU_ERR_FORMAT' "$dir/f.out.err" ||
        { cat "$dir/f.out.err" >&2; fail "a damaged prompt cache was not reported"; }
    replies "$dir/f.out" >"$dir/f.replies"
    cmp -s "$dir/f.replies" "$dir/c.replies" || fail "the reply after a damaged prompt cache differs from a fresh chat's"
    echo "chat cache ok"
}

# ---------------------------------------------------------------- system

# first_prompt SYSTEM_ARGS...: the tokens of the first turn's prompt.
first_prompt() {
    printf '%s\n' 'Hi' '/stats' | "$sdnpu" chat -m "$real_model" -n 2 --temp 0 "$@" >"$dir/p.out" 2>"$dir/p.err" ||
        { cat "$dir/p.err" >&2; fail "sdnpu chat $* exited $?"; }
    prompt_tokens "$dir/p.out" | grep -o '[0-9][0-9]*'
}

system_test() {
    printf '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n' >"$dir/turn.txt"
    bare=$("$sdnpu" tokenize -m "$real_model" --ids -f "$dir/turn.txt" | tr -cd ',' | wc -c)
    bare=$((bare + 1))
    none=$(first_prompt --system "")
    [ "$none" = "$bare" ] || fail "--system \"\" sent $none tokens, the user's turn alone is $bare"
    own=$(first_prompt)
    [ "$own" -gt $((bare + 8)) ] || fail "without --system the prompt had $own tokens: no template system turn"
    brief=$(first_prompt --system "Be brief.")
    [ "$brief" -gt "$bare" ] && [ "$brief" -lt "$own" ] || fail "--system 'Be brief.' sent $brief tokens"
    # The transcript keeps "no system turn": loaded by a chat without
    # --system, its next turn is rendered without one too (the transcript
    # replayed: its session file is removed).
    printf '%s\n' 'Hi' "/save $dir/t" | "$sdnpu" chat -m "$real_model" -n 2 --temp 0 --system "" >/dev/null 2>"$dir/s.err" ||
        { cat "$dir/s.err" >&2; fail "the /save chat exited $?"; }
    grep -qE '^system: ?$' "$dir/t" || { cat "$dir/t" >&2; fail "the transcript has no empty system record"; }
    rm -f "$dir/t.session"
    printf '%s\n' "/load $dir/t" | "$sdnpu" chat -m "$real_model" -n 2 --temp 0 >/dev/null 2>"$dir/l.err" ||
        { cat "$dir/l.err" >&2; fail "the /load chat exited $?"; }
    replayed=$(grep -o 'replayed [0-9]* tokens' "$dir/l.err" | grep -o '[0-9][0-9]*')
    [ -n "$replayed" ] && [ "$replayed" -lt "$own" ] ||
        { cat "$dir/l.err" >&2; fail "the loaded transcript replayed '$replayed' tokens, a system turn's worth"; }
    echo "chat system ok"
}

case "$mode" in
system) system_test ;;
tty) tty_test ;;
saved) saved_test ;;
grow) grow_test ;;
cache) cache_test ;;
*) fail "unknown mode '$mode'" ;;
esac
exit 0
