# tests/format_cli.sh - `sdnpu run --json` and `--json-schema FILE` end to
# end on a tiny model (run by ctest, see tests/cli.cmake): the reply starts
# an object, the same with and without drafts; a schema outside the subset,
# one that is not JSON and a missing file are refused before a model loads,
# with a message naming what was wrong.
NAME=format_cli
. "$(dirname "$0")/tiny_cli.sh"
MODEL=$DIR/tiny-qwen2.gguf SCHEMA=$DIR/ui.json
cat >"$SCHEMA" <<'JSON'
{"type": "object", "properties": {"action": {"enum": ["open", "close"]}, "n": {"type": "integer"}},
 "required": ["action", "n"], "additionalProperties": false}
JSON
run() { # run NAME [flags...]: stdout to NAME.out, stderr to NAME.err
  name=$1
  shift
  "$SDNPU" run -m "$MODEL" -p '{"action": "open", "n": 3}' -n 24 --temp 0 -t 1 --no-stats "$@" \
    >"$DIR/$name.out" 2>"$DIR/$name.err"
}
run json --json || { cat "$DIR/json.err"; fail "--json"; }
head -c 1 "$DIR/json.out" | grep -q '{' || fail "--json: $(cat "$DIR/json.out")"
run schema --json-schema "$SCHEMA" || { cat "$DIR/schema.err"; fail "--json-schema"; }
# The first name is forced: the schema's order, and no other.
head -c 64 "$DIR/schema.out" | tr -d ' \t\r\n' | grep -q '^{"action"' || fail "--json-schema: $(cat "$DIR/schema.out")"
run schema_spec --json-schema "$SCHEMA" --spec sam-tree || { cat "$DIR/schema_spec.err"; fail "--spec sam-tree"; }
cmp -s "$DIR/schema.out" "$DIR/schema_spec.out" || fail "sam-tree's reply differs from plain decoding's"

refused() { # refused FILE WORDS: --json-schema FILE fails before loading, naming WORDS
  "$SDNPU" run -m "$DIR/no-such-model.gguf" -p x --json-schema "$1" >"$DIR/bad.out" 2>"$DIR/bad.err" &&
    fail "--json-schema $1 was accepted"
  grep -qF "$2" "$DIR/bad.err" || fail "--json-schema $1: $(cat "$DIR/bad.err")"
  grep -q "cannot load model" "$DIR/bad.err" && fail "--json-schema $1: the model was loaded first"
  return 0
}
printf '{"type": "object", "properties": {"a": {"type": "string", "format": "date"}}}' >"$DIR/format.json"
refused "$DIR/format.json" "at '/properties/a': 'format' is not supported"
printf '{"type": "object",' >"$DIR/broken.json"
refused "$DIR/broken.json" "not JSON"
refused "$DIR/missing.json" "cannot open"
echo "format_cli: ok"
