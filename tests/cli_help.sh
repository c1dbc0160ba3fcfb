# tests/cli_help.sh - `sdnpu --help` lists every command, and each command
# it lists answers -h with its own usage: the help and the dispatch read one
# table (cli/commands.c), so a command added there shows here. Argument:
# the sdnpu binary.
SDNPU=$1
fail() { echo "cli_help: FAIL: $*" >&2; exit 1; }
help=$("$SDNPU" --help) || fail "sdnpu --help exited $?"
cmds=$(printf '%s\n' "$help" | sed -n 's/^  \([a-z]*\) .*/\1/p')
[ -n "$cmds" ] || fail "no commands in: $help"
# The commands the README and the docs tell users to run.
for want in info run summarize chat serve eval tokenize bench profile version; do
    printf '%s\n' "$cmds" | grep -qx "$want" || fail "'$want' missing from sdnpu --help"
done
for c in $cmds; do
    out=$("$SDNPU" "$c" -h 2>&1) || fail "sdnpu $c -h exited $?"
    first=$(printf '%s\n' "$out" | head -n 1)
    case "$c:$first" in
    "version:sdnpu "*) ;;
    *:"usage: sdnpu $c"*) ;;
    *) fail "sdnpu $c -h began with '$first'" ;;
    esac
done
"$SDNPU" no-such-command >/dev/null 2>"${TMPDIR:-/tmp}/cli_help.$$" && fail "an unknown command succeeded"
rc=$?
msg=$(cat "${TMPDIR:-/tmp}/cli_help.$$"); rm -f "${TMPDIR:-/tmp}/cli_help.$$"
[ "$rc" -eq 2 ] || fail "an unknown command exited $rc, not 2"
printf '%s\n' "$msg" | grep -q "unknown command 'no-such-command'" || fail "no message naming the command: $msg"
printf '%s\n' "$msg" | grep -q '^  serve ' || fail "the usage after an unknown command lacks serve"
echo "cli_help: ok ($(printf '%s\n' "$cmds" | wc -l) commands)"
