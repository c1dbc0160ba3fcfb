#!/usr/bin/env python3
"""bench/summary_prompts.py - how `sdnpu summarize` should ask an instruct model.

Runs the summary evaluation set's documents (datasets/summary.jsonl) and the
README's sample document through `sdnpu run --chat --temp 0 -n 256` with each
prompt layout named by --variants, and prints per model and layout: how many
replies ran away (hit the token limit, or wrote more than 80 words of which
over 80% of the 8-word runs are the document's own), the median ratio of the
reply's words to the document's, the mean share of the reply's 8-word runs
found in the document, and the mean words. Greedy decoding is deterministic,
so one run is the measurement. The JSON (--out) keeps every reply.

    python3 bench/summary_prompts.py --models default,qwen2.5-coder-1.5b-instruct --variants first,own
"""
import argparse, json, os, statistics, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

def tagged(ask):
    return lambda d: "<document>\n" + d + "\n</document>\n\n" + ask

# name: (prompt from the document, system turn or None)
VARIANTS = {
    # before stop 87: the instruction, then the document (as datasets/summary.jsonl asks)
    "first": (lambda d: "Summarize the following document in a few sentences.\n\n" + d, None),
    "after": (lambda d: d + "\n\nSummarize the text above in a few sentences.", None),
    "both": (lambda d: "Summarize the following document in two or three sentences.\n\n<document>\n" + d +
             "\n</document>\n\nWrite the summary now, in two or three sentences.", None),
    "tags": (tagged("Summarize the document above in a few sentences."), None),
    "tags23": (tagged("Summarize the document above in two or three sentences."), None),
    "tags23-system": (tagged("Summarize the document above in two or three sentences."),
                      "You are a helpful assistant. Answer from the documents the user gives."),
    "write": (tagged("Write a summary of the document above in two or three sentences."), None),
    "words": (tagged("Summarize the document above in two or three sentences of your own words."), None),
    # examples/summarize.c through the request API: documents, then its instruction, the API's system turn
    "request": (lambda d: d + "\n\nSummarize the text above in two or three sentences.",
                "You are a helpful assistant. Answer from the documents the user gives."),
    "request-own": (lambda d: d + "\n\nSummarize the text above in two or three short sentences of your own.",
                    "You are a helpful assistant. Answer from the documents the user gives."),
    "request-tags": (tagged("Summarize the text above in two or three sentences."),
                     "You are a helpful assistant. Answer from the documents the user gives."),
    # since stop 87: `sdnpu summarize`'s prompt (cli/run.c)
    "own": (tagged("Summarize the document above in two or three short sentences of your own."), None),
}

def grams8(words):
    return [tuple(words[i:i + 8]) for i in range(len(words) - 7)]

def one(sdnpu, model, variant, doc, stats_path):
    prompt, system = VARIANTS[variant]
    cmd = [sdnpu, "run", "-m", model, "--chat", "--temp", "0", "-n", "256", "--stats-json", stats_path]
    if system:
        cmd += ["--system", system]
    out = subprocess.run(cmd + ["-p", prompt(doc)], capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"summary_prompts: {' '.join(cmd[:4])} failed: {out.stderr.strip()[-400:]}")
    with open(stats_path) as f:
        st = json.load(f)
    return score(doc, out.stdout.strip(), st["stop_reason"] == 1)  # SDNPU_STOP_EOG: the model ended its turn

def score(doc, text, end_of_turn):
    """A summary's words, their ratio to the document's, and the share of its 8-word runs the document holds."""
    dw, sw = doc.split(), text.split()
    have = set(grams8(dw))
    g = grams8(sw)
    copied = sum(x in have for x in g) / max(1, len(g))
    return dict(doc_words=len(dw), words=len(sw), ratio=len(sw) / max(1, len(dw)), copied8=copied,
                end_of_turn=end_of_turn, text=text)

def documents(limit=34):
    """The README's sample and the summary set's documents, as (id, text)."""
    with open(os.path.join(ROOT, "examples", "data", "sample.txt")) as f:
        docs = [("sample", f.read())]
    with open(os.path.join(ROOT, "datasets", "summary.jsonl")) as f:
        for line in list(f)[:limit]:
            s = json.loads(line)
            docs.append((s["id"], "\n\n".join(s["context"])))
    return docs

def runaway(r):
    return not r["end_of_turn"] or (r["copied8"] > 0.8 and r["words"] > 80)

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="default")
    ap.add_argument("--variants", default="first,own")
    ap.add_argument("--limit", type=int, default=34, help="documents of the summary set (default: all 34)")
    ap.add_argument("--sdnpu", default=os.path.join(ROOT, "build", "sdnpu"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "summary_prompts.json"))
    a = ap.parse_args()
    for v in a.variants.split(","):
        if v not in VARIANTS:
            sys.exit(f"summary_prompts: no variant '{v}' (have: {', '.join(VARIANTS)})")
    docs = documents(a.limit)
    results, rows = {}, []
    stats_path = os.path.join(tempfile.mkdtemp(prefix="summary_prompts."), "stats.json")
    for model in a.models.split(","):
        for v in a.variants.split(","):
            rs = []
            for did, doc in docs:
                r = one(a.sdnpu, model, v, doc, stats_path)
                r["id"] = did
                rs.append(r)
                print(f"  {model} {v} {did}: {r['words']} words of {r['doc_words']}, "
                      f"copied {r['copied8']:.2f}{'' if r['end_of_turn'] else ', token limit'}", file=sys.stderr)
            results[f"{model}/{v}"] = rs
            rows.append((model, v, sum(map(runaway, rs)), len(rs), statistics.median(r["ratio"] for r in rs),
                         statistics.mean(r["copied8"] for r in rs), statistics.mean(r["words"] for r in rs)))
    print("| model | prompt | ran away | median words / document's | 8-word runs copied | mean words |")
    print("|---|---|---:|---:|---:|---:|")
    for m, v, n_run, n, ratio, copied, words in rows:
        print(f"| {m} | {v} | {n_run} of {n} | {ratio:.2f} | {copied:.2f} | {words:.0f} |")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"variants": {v: VARIANTS[v][0]("DOCUMENT") for v in a.variants.split(",")},
                   "rows": [dict(zip(("model", "variant", "ran_away", "n", "median_ratio", "copied8", "words"), r))
                            for r in rows], "replies": results}, f, indent=1)
    print(f"wrote {a.out}", file=sys.stderr)

if __name__ == "__main__":
    main()
