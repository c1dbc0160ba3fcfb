#!/usr/bin/env python3
"""Replies held to a JSON object or a JSON Schema (response_format
json_object, json_schema), sdnpu beside llama.cpp's llama-server, in one run.

The tasks an app asks a local model for JSON in: the UI dataset's screens
("the next action as {"action", "target", "text"}"), the RAG dataset's
questions ({"answer", "quote"}) and the summary dataset's documents
({"title", "summary", "points"}), the first --per-task (4) of each, as one
user turn holding the documents between <document> lines and then the
instruction (sdnpu_documents_format's layout), sent as POST
/v1/chat/completions, greedy, max_tokens --max-tokens (192), to

  sdnpu serve -t 2 (spec none and sam-tree, chosen per request), and
  llama-server -t 2 -np 1 (bench/peer_native.sh builds it; its
      response_format json_object is a JSON grammar too),

each with no response_format, json_object, json_schema with the task's
schema (SCHEMAS: the same fields, typed; the UI's action an enum, the summary's
points exactly three), and a forced tool call (tools: one function per
task whose parameters are that schema, tool_choice "required"; the call's
arguments are the reply checked; llama-server reads tools through its
Jinja templates, on by default), --formats picking among them, the configurations taking
turns prompt by prompt (both servers stay up; one request runs at a time), in
--rounds (2) rounds. Per configuration: decode tokens/s (generated tokens
over the servers' own decode times: sdnpu's decode_ms, llama-server's
timings.predicted_ms), tokens per model call (sdnpu), and how many replies
are one JSON object (json.loads gives a dict), how many satisfy the task's
schema (the jsonschema package), and how many end by themselves. Checks
that sdnpu's JSON and schema replies are the same under none and sam-tree (lossless)
and prints each config's ratio to its own server's plain text decoding.
Prints a table and writes JSON.

Usage: .venv-test/bin/python bench/bench_json.py [--model qwen2.5-coder-0.5b-instruct] [--formats text,json,schema,tool]
       [--out bench/results/json.json]
"""
import argparse
import json
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_native  # noqa: E402
import jsonschema  # noqa: E402
import bench_serve  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ASK = {
    "ui": 'Answer with a JSON object {"action": "tap" or "type" or "scroll" or "back", "target": the element\'s '
          'number or null, "text": what to type or null} for the next step toward: ',
    "rag": 'Answer with a JSON object {"answer": a short answer, "quote": the words of the document that say so} '
           'to the question: ',
    "summary": 'Answer with a JSON object {"title": a title, "summary": two sentences of your own, "points": '
               'three short key points} for the document above. ',
}


NULLABLE = {"type": ["string", "null"]}
SCHEMAS = {
    "ui": {"type": "object", "properties": {"action": {"enum": ["tap", "type", "scroll", "back"]},
                                            "target": {"type": ["integer", "null"]}, "text": NULLABLE},
           "required": ["action", "target", "text"], "additionalProperties": False},
    "rag": {"type": "object", "properties": {"answer": {"type": "string"}, "quote": {"type": "string"}},
            "required": ["answer", "quote"], "additionalProperties": False},
    "summary": {"type": "object", "properties": {
        "title": {"type": "string"}, "summary": {"type": "string"},
        "points": {"type": "array", "items": {"type": "string"}, "minItems": 3, "maxItems": 3}},
        "required": ["title", "summary", "points"], "additionalProperties": False},
}


def tasks(per_task):
    out = []
    for task in ("ui", "rag", "summary"):
        with open(os.path.join(ROOT, "datasets", task + ".jsonl"), encoding="utf-8") as f:
            items = [json.loads(line) for line in f if line.strip()][:per_task]
        for it in items:
            ctx = it["context"] if isinstance(it["context"], list) else [it["context"]]
            doc = "\n".join(ctx) if task == "ui" else None
            docs = [doc] if doc else ctx
            text = "".join(f"<document>\n{d}\n</document>\n\n" for d in docs)
            instr = it.get("instruction") or ""
            out.append({"id": it["id"], "task": task, "user": text + ASK[task] + instr})
    return out


def post(port, body, timeout=900):
    return json.loads(bench_native._http(port, "/v1/chat/completions", body, timeout=timeout))


TOOL = {"ui": ("next_step", "Take the next step on the screen"), "rag": ("answer", "Answer the question"),
        "summary": ("summarize", "Give the document's title, summary and key points")}


def one(server, who, task, prompt, spec, fmt, max_tokens):
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, "temperature": 0}
    if fmt == "json":
        body["response_format"] = {"type": "json_object"}
    elif fmt == "schema":
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": task, "schema": SCHEMAS[task], "strict": True}}
    elif fmt == "tool":
        name, what = TOOL[task]
        body["tools"] = [{"type": "function", "function": {"name": name, "description": what,
                                                           "parameters": SCHEMAS[task]}}]
        body["tool_choice"] = "required"
    if who == "sdnpu":
        body["sdnpu"] = {"spec": spec}
    else:
        body.update({"cache_prompt": False, "top_k": 1})
    r = post(server.port, body)
    m = r["choices"][0]["message"]
    calls = m.get("tool_calls") or []
    text = calls[0]["function"]["arguments"] if fmt == "tool" and calls else m["content"] or ""
    finish = r["choices"][0]["finish_reason"]
    out = {"text": text, "finish": "stop" if finish == "tool_calls" else finish,
           "tokens": r["usage"]["completion_tokens"]}
    if who == "sdnpu":
        x = r["sdnpu"]
        out.update(decode_ms=x["decode_ms"], calls=x["model_calls"])
    else:
        out.update(decode_ms=r["timings"]["predicted_ms"], calls=None)
    try:
        v = json.loads(text)
        out["object"] = isinstance(v, dict)
        jsonschema.validate(v, SCHEMAS[task])
        out["valid"] = True
    except (ValueError, jsonschema.ValidationError):
        out["valid"] = False
    out.setdefault("object", False)
    return out


FORMATS = ("text", "json", "schema", "tool")


def configs(formats):
    return [(who, spec, fmt) for who, spec in (("sdnpu", "none"), ("sdnpu", "sam-tree"), ("llama-server", "plain"))
            for fmt in formats]


def run(args):
    CONFIGS = configs(args.formats)
    exe = os.path.join(ROOT, "build", "sdnpu")
    model = bench_native.model_path(args.model, "sdnpu")
    bindir = bench_native.peer_bin()
    prompts = tasks(args.per_task)
    res = {c: [] for c in CONFIGS}
    with bench_serve.Sdnpu(exe, model, "sam-tree", args.threads, 1, "--prompt-cache-mem", "0") as sd, \
            bench_native.Server(bindir, model, args.threads, "plain", ctx=8192) as ll:
        servers = {"sdnpu": sd, "llama-server": ll}
        one(sd, "sdnpu", "ui", prompts[0]["user"], "none", "text", 8)  # warm: graphs prepared, weights paged in
        one(ll, "llama-server", "ui", prompts[0]["user"], "plain", "text", 8)
        for rnd in range(args.rounds):
            for i, p in enumerate(prompts):
                order = CONFIGS if (i + rnd) % 2 == 0 else CONFIGS[::-1]
                for c in order:
                    r = one(servers[c[0]], c[0], p["task"], p["user"], c[1], c[2], args.max_tokens)
                    r.update(id=p["id"], task=p["task"], round=rnd)
                    res[c].append(r)
                print(f"round {rnd + 1}/{args.rounds}, prompt {i + 1}/{len(prompts)} ({p['id']})", file=sys.stderr)
    return prompts, res


def summarize(res):
    rows = {}
    for c, rs in res.items():
        toks = sum(r["tokens"] for r in rs)
        ms = sum(r["decode_ms"] for r in rs)
        calls = sum(r["calls"] for r in rs) if c[0] == "sdnpu" else None
        rows[c] = {"server": c[0], "spec": c[1], "format": c[2], "replies": len(rs), "tokens": toks,
                   "decode_tok_s": toks / (ms / 1e3) if ms > 0 else 0.0,
                   "tokens_per_call": toks / calls if calls else None,
                   "json_objects": sum(r["object"] for r in rs), "valid": sum(r["valid"] for r in rs),
                   "ended": sum(r["finish"] == "stop" for r in rs)}
    for c, row in rows.items():
        base = rows[(c[0], "none" if c[0] == "sdnpu" else "plain", "text")]["decode_tok_s"]
        row["vs_own_plain_text"] = row["decode_tok_s"] / base if base else 0.0
    return rows


def lossless(res):
    return [f"{fmt}:{x['id']}" for fmt in ("json", "schema", "tool") if ("sdnpu", "none", fmt) in res
            for x, y in zip(res[("sdnpu", "none", fmt)], res[("sdnpu", "sam-tree", fmt)]) if x["text"] != y["text"]]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--per-task", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=192)
    ap.add_argument("--formats", default=",".join(FORMATS),
                    help="of text, json, schema, tool (text always: the ratios are to it)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "json.json"))
    args = ap.parse_args()
    args.formats = ["text"] + [f for f in args.formats.split(",") if f in FORMATS and f != "text"]
    t0 = time.time()
    prompts, res = run(args)
    rows = summarize(res)
    diff = lossless(res)
    print(f"\nJSON replies: {args.model}, {len(prompts)} prompts x {args.rounds} rounds, greedy, "
          f"max_tokens {args.max_tokens}, {bench_native.cpu_name()}, {args.threads} threads")
    print(f"{'server':13} {'spec':9} {'format':6} {'tok/s':>7} {'x plain':>7} {'tok/call':>8} {'objects':>8} "
          f"{'valid':>7} {'ended':>6}")
    for row in rows.values():
        tpc = f"{row['tokens_per_call']:.2f}" if row["tokens_per_call"] else "-"
        print(f"{row['server']:13} {row['spec']:9} {row['format']:6} {row['decode_tok_s']:7.1f} "
              f"{row['vs_own_plain_text']:7.2f} {tpc:>8} {row['json_objects']:>4}/{row['replies']:<3} "
              f"{row['valid']:>3}/{row['replies']:<3} "
              f"{row['ended']:>3}/{row['replies']}")
    print("lossless (sdnpu json, schema and tool: sam-tree == none): " + ("yes" if not diff else f"NO, differ on {diff}"))
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"model": args.model, "cpu": bench_native.cpu_name(), "machine": platform.machine(),
                   "threads": args.threads, "rounds": args.rounds, "max_tokens": args.max_tokens,
                   "date": time.strftime("%Y-%m-%d"), "seconds": round(time.time() - t0),
                   "rows": list(rows.values()), "lossless_differ": diff,
                   "replies": {"/".join(c): rs for c, rs in res.items()}}, f, indent=1)
    print(f"wrote {args.out}")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
