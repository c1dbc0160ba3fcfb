# tests/tiny_cli.sh - what the command-line tests on tiny models share
# (eval_e2e.sh, profile_cli.sh, state_cli.sh), sourced after setting NAME
# to the test's name: their arguments (SDNPU MAKE_TINY_MODELS WORKDIR),
# fail, json, and a fresh WORKDIR with the tiny models in it.
SDNPU=$1 MAKE_TINY=$2 DIR=$3
fail() { echo "$NAME: FAIL: $*" >&2; exit 1; }
# A Python expression over the JSON a test wrote to $DIR/out.json, as d.
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {'d': d}))" "$DIR/out.json" "$1"; }
rm -rf "$DIR" && mkdir -p "$DIR" || fail "cannot make $DIR"
"$MAKE_TINY" "$DIR" >/dev/null || fail "make_tiny_models"
