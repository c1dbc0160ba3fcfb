#!/usr/bin/env python3
"""bench/document_layouts.py - how documents go into an instruct model's user turn.

The request API, the server's `sdnpu.documents`, `sdnpu chat --context` and
`sdnpu summarize` each put documents before the user's text. This runs two
tasks through `sdnpu run --chat --temp 0` with each layout named by
--layouts, under the request API's system turn (or, with --system
template, the one the model's chat template puts when none is given:
Qwen's "You are Qwen, ..." since stop 89, no system turn before):

- rag: the evaluation set's 34 questions (datasets/rag.jsonl), each with its
  passages as the documents; scored by the share of the reference answer's
  content words that the reply holds (recall), and the reply's words;
- summary: the summary set's 34 documents and the README's sample, asked
  for "two or three short sentences of your own"; scored as
  bench/summary_prompts.py scores (ran away, words / document's, copied).

Greedy decoding is deterministic, so one run is the measurement.

    python3 bench/document_layouts.py --models default --layouts blank,label,tags
"""
import argparse, json, os, re, statistics, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from summary_prompts import documents, runaway, score  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SYSTEM = "You are a helpful assistant. Answer from the documents the user gives."
SUMMARY = "Summarize the document above in two or three short sentences of your own."

LAYOUTS = {
    # the request API and the server before stop 88: each document, then a blank line
    "blank": lambda docs, text: "".join(d + "\n\n" for d in docs) + text,
    # sdnpu chat --context before stop 88
    "label": lambda docs, text: "Document:\n" + "\n\n".join(docs) + "\n\n" + text,
    # sdnpu summarize since stop 87, every surface since stop 88
    "tags": lambda docs, text: "".join("<document>\n" + d + "\n</document>\n\n" for d in docs) + text,
}

STOP = set("the a an of to in on for and or is are be by with as at from that this it its if not "
           "any all each".split())

def content_words(text):
    return {w for w in re.findall(r"[a-z0-9][a-z0-9'-]*", text.lower()) if len(w) > 2 and w not in STOP}

def run(a, model, prompt, n, stats_path):
    cmd = [a.sdnpu, "run", "-m", model, "--chat", "--temp", "0", "-n", str(n), "--stats-json", stats_path]
    if a.system == "api":
        cmd += ["--system", SYSTEM]
    cmd += ["-p", prompt]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"document_layouts: sdnpu run failed: {out.stderr.strip()[-400:]}")
    with open(stats_path) as f:
        return out.stdout.strip(), json.load(f)["stop_reason"] == 1

def rag(a, model, layout, stats_path):
    rs = []
    with open(os.path.join(ROOT, "datasets", "rag.jsonl")) as f:
        for line in f:
            s = json.loads(line)
            text, eot = run(a, model, LAYOUTS[layout](s["context"], s["instruction"]), 128, stats_path)
            ref = content_words(s["reference"])
            recall = len(ref & content_words(text)) / max(1, len(ref))
            rs.append(dict(id=s["id"], recall=recall, words=len(text.split()), end_of_turn=eot, text=text))
            print(f"  {model} rag {layout} {s['id']}: recall {recall:.2f}, {len(text.split())} words",
                  file=sys.stderr)
    row = dict(recall=statistics.mean(r["recall"] for r in rs), full=sum(r["recall"] == 1 for r in rs),
               words=statistics.median(r["words"] for r in rs), n=len(rs))
    return row, rs

def summary(a, model, layout, stats_path):
    rs = []
    for did, doc in documents():
        text, eot = run(a, model, LAYOUTS[layout]([doc], SUMMARY), 256, stats_path)
        r = dict(id=did, **score(doc, text, eot))
        rs.append(r)
        print(f"  {model} summary {layout} {did}: {r['words']} words, copied {r['copied8']:.2f}", file=sys.stderr)
    row = dict(ran_away=sum(map(runaway, rs)), n=len(rs), ratio=statistics.median(r["ratio"] for r in rs),
               copied8=statistics.mean(r["copied8"] for r in rs), words=statistics.mean(r["words"] for r in rs))
    return row, rs

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="default")
    ap.add_argument("--layouts", default="blank,label,tags")
    ap.add_argument("--tasks", default="rag,summary")
    ap.add_argument("--system", choices=("api", "template"), default="api",
                    help="api: the request API's system turn (default); template: none given, so the "
                         "chat template's own")
    ap.add_argument("--sdnpu", default=os.path.join(ROOT, "build", "sdnpu"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "document_layouts.json"))
    a = ap.parse_args()
    for v in a.layouts.split(","):
        if v not in LAYOUTS:
            sys.exit(f"document_layouts: no layout '{v}' (have: {', '.join(LAYOUTS)})")
    stats_path = os.path.join(tempfile.mkdtemp(prefix="document_layouts."), "stats.json")
    rows, replies = [], {}
    for model in a.models.split(","):
        for task in a.tasks.split(","):
            for v in a.layouts.split(","):
                row, rs = {"rag": rag, "summary": summary}[task](a, model, v, stats_path)
                rows.append(dict(model=model, task=task, layout=v, system=a.system, **row))
                replies[f"{model}/{task}/{v}"] = rs
    for task in a.tasks.split(","):
        if task == "rag":
            print("| model | layout | reference words in the answer (mean) | answers with all | words (median) |")
            print("|---|---|---:|---:|---:|")
            for r in (r for r in rows if r["task"] == "rag"):
                print(f"| {r['model']} | {r['layout']} | {r['recall']:.2f} | {r['full']} of {r['n']} | {r['words']:.0f} |")
        else:
            print("| model | layout | ran away | median words / document's | 8-word runs copied | mean words |")
            print("|---|---|---:|---:|---:|---:|")
            for r in (r for r in rows if r["task"] == "summary"):
                print(f"| {r['model']} | {r['layout']} | {r['ran_away']} of {r['n']} | {r['ratio']:.2f} | "
                      f"{r['copied8']:.2f} | {r['words']:.0f} |")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"layouts": {v: LAYOUTS[v](["DOCUMENT 1", "DOCUMENT 2"], "TEXT") for v in a.layouts.split(",")},
                   "system": SYSTEM, "rows": rows, "replies": replies}, f, indent=1)
    print(f"wrote {a.out}", file=sys.stderr)

if __name__ == "__main__":
    main()
