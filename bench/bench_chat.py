#!/usr/bin/env python3
"""Sampled chat replies: `sdnpu chat` with its default sampling (temperature
0.8, top-k 40, top-p 0.95, min-p 0.05) under each speculative method, in one
run, interleaved reply by reply:

  sdnpu chat --spec none | sam | sam-tree (the default), one reply per
      process: the message on stdin, then /stats (whose "last request" line
      gives the reply's tokens and decode time, prefill excluded)
  with --native, llama.cpp's own llama-server (bench/peer_native.sh builds
      it once): the same user message through /v1/chat/completions with the
      same sampling parameters, plain decoding, its decode rate from
      timings.predicted_per_second; the server stays up. Both engines
      render the message with the model's template, its own system turn
      included: a message whose prompt tokens differ is warned about and
      counted (prompt_mismatches in the JSON)

The messages: the first --n samples of each evaluation dataset (datasets/,
their context attached with --context, so the user message reads
"<document>\\n<context>\\n</document>\\n\\n<instruction>" as `sdnpu chat` renders it
since stop 88; "Document:\\n<context>\\n\\n<instruction>" before), and
the same number of questions with no document ("open"). Each message is
answered once per seed in --seeds; sampled replies differ between methods
(speculative sampling keeps the distribution, not the draws), so the rates
are totals: tokens over decode time, per dataset and method.

Prints a table (decode tokens/s, speed-up over sdnpu's plain decoding,
tokens per model call) and writes JSON. Usage:
  python3 bench/bench_chat.py [-m MODEL] [--n 4] [--seeds 1,2] [--n-gen 128] [--threads 2]
                              [--methods none,sam,sam-tree] [--native] [--out bench/results/chat.json]
"""
import argparse, json, os, platform, re, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_native  # noqa: E402  (standard library only)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SDNPU = os.path.join(ROOT, "build", "sdnpu")
DATASETS = ["rag", "summary", "tweet", "ui"]
OPEN = ["Write a short poem about rivers.",
        "Explain what a hash table is and when to use one.",
        "Give me three tips for writing a cover letter.",
        "Why is the sky blue? Answer for a ten-year-old.",
        "Write a Python function that checks whether a string is a palindrome.",
        "Plan a one-day walking tour of an old European city.",
        "What should I pack for a week of hiking in the mountains?",
        "Describe how a bill becomes a law, briefly."]
SAMPLING = {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05}

LAST = re.compile(r"^last request: prompt (\d+) tokens.*generated (\d+) tokens in ([0-9.]+) ms", re.M)
SPEC = re.compile(r"speculative: (\S+) \| (\d+) model calls", re.M)


def messages(n):
    """(group, document or None, instruction) for n samples a dataset and n open questions."""
    out = []
    for ds in DATASETS:
        with open(os.path.join(ROOT, "datasets", ds + ".jsonl"), encoding="utf-8") as f:
            for line in f.readlines()[:n]:
                s = json.loads(line)
                doc = "\n\n".join(c if isinstance(c, str) else json.dumps(c) for c in s["context"])
                out.append((ds, doc, " ".join(s["instruction"].split()) or "Reply to this thread."))
    out += [("open", None, q) for q in OPEN[:n]]
    return out


def run_sdnpu(model, method, seed, doc_file, text, n_gen, threads):
    cmd = [SDNPU, "chat", "-m", model, "--spec", method, "--seed", str(seed), "-n", str(n_gen), "-t", str(threads)]
    if doc_file:
        cmd += ["--context", doc_file]
    p = subprocess.run(cmd, input=text + "\n/stats\n", capture_output=True, text=True, timeout=900)
    last, spec = LAST.search(p.stdout + p.stderr), SPEC.search(p.stdout + p.stderr)
    if p.returncode or not last or not spec:
        raise RuntimeError(f"sdnpu chat {method} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    return {"tokens": int(last.group(2)), "ms": float(last.group(3)), "calls": int(spec.group(2)),
            "prompt": int(last.group(1))}


def run_native(server, doc, text, n_gen, seed):
    content = f"<document>\n{doc}\n</document>\n\n{text}" if doc is not None else text
    body = dict(SAMPLING, messages=[{"role": "user", "content": content}], max_tokens=n_gen, seed=seed,
                cache_prompt=False)
    r = server.post("/v1/chat/completions", body, timeout=900)
    t = r["timings"]
    return {"tokens": int(t["predicted_n"]), "ms": float(t["predicted_ms"]), "calls": int(t["predicted_n"]),
            "prompt": int(r["usage"]["prompt_tokens"])}


def add(acc, key, r):
    a = acc.setdefault(key, {"tokens": 0, "ms": 0.0, "calls": 0, "replies": 0})
    for k in ("tokens", "ms", "calls"):
        a[k] += r[k]
    a["replies"] += r.get("replies", 1)


def measure(args, model, bindir):
    msgs, acc, mismatches = messages(args.n), {}, 0
    seeds = [int(s) for s in args.seeds.split(",")]
    server = bench_native.Server(bindir, model, args.threads, "plain") if bindir else None
    with tempfile.TemporaryDirectory() as tmp, (server or _Null()) as srv:
        for i, (group, doc, text) in enumerate(msgs):
            doc_file = None
            if doc is not None:
                doc_file = os.path.join(tmp, f"doc{i}.txt")
                with open(doc_file, "w", encoding="utf-8") as f:
                    f.write(doc)
            for seed in seeds:
                for method in args.methods.split(","):
                    r = run_sdnpu(model, method, seed, doc_file, text, args.n_gen, args.threads)
                    add(acc, (group, method), r)
                if srv:
                    peer = run_native(srv, doc, text, args.n_gen, seed)
                    add(acc, (group, "llama-server"), peer)
                    # Both engines render the message with the template (its own
                    # system turn included); a different prompt would be another task.
                    if peer["prompt"] != r["prompt"]:
                        print(f"bench_chat: warning: message {i + 1}: llama-server's prompt is {peer['prompt']} "
                              f"tokens, sdnpu's {r['prompt']}", file=sys.stderr)
                        mismatches += 1
            print(f"{i + 1}/{len(msgs)} messages", file=sys.stderr)
    return acc, mismatches


class _Null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def report(acc, methods):
    groups = [g for g in DATASETS + ["open", "all"]]
    total = {}
    for (g, m), a in acc.items():
        add(total, ("all", m), a)
    acc = {**acc, **total}
    cols = methods + (["llama-server"] if any(m == "llama-server" for _, m in acc) else [])
    print("\n| messages | " + " | ".join(f"{m} tok/s" for m in cols) + " | " +
          " | ".join(f"{m} / none" for m in cols if m != "none") + " | " +
          " | ".join(f"{m} tokens/call" for m in methods if m != "none") + " |")
    print("|---" + "|---:" * (2 * len(cols) + len(methods) - 2) + "|")
    rows = {}
    for g in groups:
        rate = {m: acc[(g, m)]["tokens"] / acc[(g, m)]["ms"] * 1000.0 for m in cols if (g, m) in acc}
        tpc = {m: acc[(g, m)]["tokens"] / max(1, acc[(g, m)]["calls"]) for m in methods if (g, m) in acc}
        rows[g] = {"tok_s": rate, "tokens_per_call": tpc, "totals": {m: acc[(g, m)] for m in cols if (g, m) in acc}}
        print(f"| {g} | " + " | ".join(f"{rate.get(m, 0):.1f}" for m in cols) + " | " +
              " | ".join(f"{rate.get(m, 0) / rate['none']:.2f}x" for m in cols if m != "none") + " | " +
              " | ".join(f"{tpc.get(m, 0):.2f}" for m in methods if m != "none") + " |")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", default="default")
    ap.add_argument("--n", type=int, default=4, help="messages a dataset (and open questions)")
    ap.add_argument("--seeds", default="1,2")
    ap.add_argument("--n-gen", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--methods", default="none,sam,sam-tree")
    ap.add_argument("--native", action="store_true", help="llama-server's plain sampled replies beside")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "chat.json"))
    args = ap.parse_args()
    if "none" not in args.methods.split(","):
        raise SystemExit("bench_chat: --methods must include none (the speed-ups are over it)")
    model = bench_native.model_path(args.model, "bench_chat")
    bindir = bench_native.peer_bin() if args.native else None
    acc, mismatches = measure(args, model, bindir)
    rows = report(acc, args.methods.split(","))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"model": model, "machine": platform.processor() or platform.machine(), "cpu": bench_native.cpu_name(),
                   "threads": args.threads, "n": args.n, "seeds": args.seeds, "n_gen": args.n_gen,
                   "sampling": SAMPLING, "groups": rows,
                   "prompt_mismatches": mismatches if bindir else None}, f, indent=1)
    print(f"\nwrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
