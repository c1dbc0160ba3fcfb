#!/usr/bin/env python3
"""sdnpu eval against llama.cpp on the evaluation datasets' own prompts, in one run:

  - build/sdnpu eval with the methods given, into a fresh folder; it also
    writes prompts.jsonl (each sample's prompt exactly as the methods get it,
    its stop strings and its token budget);
  - llama.cpp's own llama-server (bench_native.py builds it once, cached):
    plain greedy decoding on every one of those prompts, with the same stop
    strings and budget, with --ngram its n-gram speculative types too, and
    with --draft-model GGUF its draft-model speculation (llama-server -md,
    e.g. Qwen2.5-Coder-0.5B-Instruct drafting for the 1.5B).

The two take turns, one sample of each dataset at a time (sdnpu eval
--limit k resumes and runs only the new samples; the servers stay up), so
that both engines meet the same minutes of a machine whose speed wanders.

Prints decode tokens/s per dataset and over all samples (generated tokens
over decode time, prefill excluded, as both engines time it), each
engine's ratio to sdnpu's cpu-vanilla, to llama.cpp native plain, to the
best native n-gram type and to the draft model where it ran, then tokens
per model call per dataset for both engines, and writes JSON. Usage:
  .venv-test/bin/python bench/bench_eval_peer.py [--limit N] [--methods LIST] [--ngram] [--draft-model GGUF]
                                                [--out bench/results/eval_peer.json]
Standard library only (the peer is the native server, not the Python wrapper).
"""
import argparse, contextlib, csv, json, os, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_native  # noqa: E402

DEFAULT_METHODS = "cpu-vanilla,pld,sam-tree,sdnpu"


def run_eval(exe, model, methods, limit, threads, out_dir):
    """sdnpu eval of the first `limit` samples of each dataset, resuming in out_dir."""
    cmd = [exe, "eval", "-m", model, "--methods", methods, "-t", str(threads), "--out", out_dir, "--resume",
           "--limit", str(limit)]
    res = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if res.returncode != 0:
        sys.exit(f"sdnpu eval failed ({res.returncode}): {res.stderr[-2000:]}")
    return [json.loads(line) for line in open(os.path.join(out_dir, "prompts.jsonl"))]


def complete(srv, p):
    r = srv.post("/completion", {"prompt": p["prompt"], "n_predict": p["n_predict"], "temperature": 0, "top_k": 1,
                                 "stop": p["stops"], "cache_prompt": False}, timeout=900)
    t = r["timings"]
    return {"dataset": p["dataset"], "id": p["id"], "prompt_tokens": t.get("prompt_n"),
            "generated": t["predicted_n"], "decode_ms": t["predicted_ms"],
            "draft_n": t.get("draft_n", 0), "draft_n_accepted": t.get("draft_n_accepted", 0)}


def run_all(args, specs, out_dir):
    """Turns of sdnpu eval and the servers; returns sdnpu's samples.csv rows,
    the prompts and the servers' rows per spec."""
    bindir = bench_native.peer_bin()
    peer, done, limit = {spec: [] for spec in specs}, set(), 0
    with contextlib.ExitStack() as stack:
        servers = {spec: stack.enter_context(bench_native.Server(bindir, args.model, args.threads, spec))
                   for spec in specs}
        while not args.limit or limit < args.limit:
            limit += 1
            prompts = run_eval(args.exe, args.model, args.methods, limit, args.threads, out_dir)
            new = [p for p in prompts if (p["dataset"], p["id"]) not in done]
            if not new:
                break
            for spec, srv in servers.items():
                peer[spec] += [complete(srv, p) for p in new]
            done |= {(p["dataset"], p["id"]) for p in new}
            print(f"sample {limit}: {len(done)} of each engine done", file=sys.stderr)
    rows = list(csv.DictReader(open(os.path.join(out_dir, "samples.csv"))))
    return rows, prompts, peer


def rate(rows):
    gen = sum(int(r["generated"]) for r in rows)
    ms = sum(float(r["decode_ms"]) for r in rows)
    return gen / ms * 1e3 if ms > 0 else 0.0


def calls_rate(gen, calls):
    return gen / calls if calls > 0 else 0.0


def acceptance_table(ok, peer, datasets):
    """Tokens per model call per dataset, pooled over the samples: each call
    yields one token of its own plus the draft tokens it accepted. sdnpu's
    (steps + accepted) over steps, as its eval counts them (a step that
    yields the end of turn counts, though that token is not generated
    text); the servers' generated tokens over their target calls."""
    table = {}
    methods = list(dict.fromkeys(r["method"] for r in ok))
    for m in methods:
        rows = [r for r in ok if r["method"] == m]
        cells = {}
        for ds in datasets:
            pick = [r for r in rows if ds in ("all", r["dataset"])]
            steps = sum(int(r["verify_steps"]) for r in pick)
            cells[ds] = calls_rate(steps + sum(int(r["accepted"]) for r in pick), steps)
        table["sdnpu " + m] = cells
    for spec, rows in peer.items():
        cells = {}
        for ds in datasets:
            pick = [r for r in rows if ds in ("all", r["dataset"])]
            gen = sum(r["generated"] for r in pick)
            cells[ds] = calls_rate(gen, gen - sum(r["draft_n_accepted"] or 0 for r in pick))
        table["llama.cpp native " + spec] = cells
    return table


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "default.gguf"))
    ap.add_argument("--exe", default=os.path.join(ROOT, "build", "sdnpu"))
    ap.add_argument("--methods", default=DEFAULT_METHODS, help="sdnpu eval methods (cpu-vanilla runs first anyway)")
    ap.add_argument("--limit", type=int, default=0, help="samples per dataset (0: all)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ngram", action="store_true", help="also llama-server's n-gram speculative types")
    ap.add_argument("--draft-model", default=None, metavar="GGUF",
                    help="also llama-server with this model drafting (-md), as llama.cpp users run speculation")
    ap.add_argument("--eval-out", default=None, metavar="DIR",
                    help="keep sdnpu eval's own output (tables, samples.csv, chart) in DIR (default: a temporary folder)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "eval_peer.json"))
    args = ap.parse_args()

    specs = ["plain"] + (list(bench_native.SPEC_TYPES[1:]) if args.ngram else [])
    draft = f"draft={os.path.abspath(args.draft_model)}" if args.draft_model else None
    with contextlib.ExitStack() as stack:
        d = args.eval_out or stack.enter_context(tempfile.TemporaryDirectory(prefix="sdnpu-eval-peer-"))
        rows, prompts, peer = run_all(args, specs + ([draft] if draft else []), d)
    if draft:
        peer["draft-model"] = peer.pop(draft)
    ok = [r for r in rows if r["status"] == "ok"]
    methods = list(dict.fromkeys(r["method"] for r in ok))
    lossy = sorted({r["method"] for r in ok if r["lossless"] not in ("yes", "")})

    # Prompts tokenized alike by both engines: the prompt lengths must agree.
    ref = {(r["dataset"], r["id"]): int(r["prompt_tokens"]) for r in ok if r["method"] == "cpu-vanilla"}
    mismatched = [(p["dataset"], p["id"]) for p in peer["plain"] if ref.get((p["dataset"], p["id"])) not in
                  (None, p["prompt_tokens"])]

    datasets = list(dict.fromkeys(p["dataset"] for p in prompts)) + ["all"]
    table = {}
    for ds in datasets:
        pick = (lambda r: True) if ds == "all" else (lambda r, ds=ds: r["dataset"] == ds)
        t = {"sdnpu " + m: rate([r for r in ok if r["method"] == m and pick(r)]) for m in methods}
        for spec in peer:
            t["llama.cpp native " + spec] = rate([r for r in peer[spec] if pick(r)])
        table[ds] = t
    best_ngram = None
    if len(specs) > 1:
        best_ngram = max(specs[1:], key=lambda s: table["all"]["llama.cpp native " + s])

    refs = [("native plain", "plain")]
    if best_ngram:
        refs.append((f"best n-gram ({best_ngram})", best_ngram))
    if "draft-model" in peer:
        refs.append(("draft-model", "draft-model"))
    vanilla = table["all"].get("sdnpu cpu-vanilla", 0)
    print(f"\nsdnpu eval datasets ({len(prompts)} samples), decode tokens/s, greedy, {args.threads} threads")
    print("| engine, method | " + " | ".join(datasets) + " | x sdnpu cpu-vanilla (all) | " +
          " | ".join(f"x {label} (all)" for label, _ in refs) + " |")
    print("|" + "---|" * (len(datasets) + 2 + len(refs)))
    for name in table["all"]:
        cells = [f"{table[ds][name]:.1f}" for ds in datasets]
        v = table["all"][name]
        cells.append(f"{v / vanilla:.2f}" if vanilla else "-")
        for _, spec in refs:
            r = table["all"]["llama.cpp native " + spec]
            cells.append(f"{v / r:.2f}" if r else "-")
        print(f"| {name} | " + " | ".join(cells) + " |")
    accept = acceptance_table(ok, peer, datasets)
    print("\ntokens per model call (sdnpu: steps plus accepted draft tokens over steps; llama.cpp: generated"
          " over target calls, its accepted drafts counted from its timings)")
    print("| engine, method | " + " | ".join(datasets) + " |")
    print("|" + "---|" * (len(datasets) + 1))
    for name, cells in accept.items():
        print(f"| {name} | " + " | ".join(f"{cells[ds]:.2f}" for ds in datasets) + " |")
    if "draft-model" in peer and not sum(r["draft_n"] for r in peer["draft-model"]):
        print("llama-server with the draft model drafted nothing: its speculation was off (check its flags)")
    if lossy:
        print(f"NOT LOSSLESS: {', '.join(lossy)}")
    if mismatched:
        print(f"prompt lengths differ between the engines on {len(mismatched)} samples: {mismatched[:5]}")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    json.dump({"samples": len(prompts), "threads": args.threads, "methods": methods, "peer_specs": specs,
               "decode_tok_s": table, "tokens_per_call": accept, "best_ngram": best_ngram, "lossy_methods": lossy,
               "prompt_length_mismatches": mismatched, "sdnpu_rows": rows, "peer_rows": peer},
              open(args.out, "w"), indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
