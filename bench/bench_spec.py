#!/usr/bin/env python3
"""Speculative decoding benchmark: summarization of documents of 500-1,500
tokens with the default model, 2 threads, greedy, in one run:

  sdnpu: cpu-vanilla, npu-vanilla, pld, sam, sam-tree, each drafting method
      adaptive (the default) and :fixed   (build/sdnpu run --stats-json)
  llama.cpp (llama-cpp-python): plain, prompt-lookup decoding
      (LlamaPromptLookupDecoding draft model)
  with --native, llama.cpp's own llama-server (bench/bench_native.py builds
      it once): plain and its n-gram speculative types on the same documents,
      each document's turn right after sdnpu's (the servers stay up); the
      ratios are then against native plain and the best native n-gram type

Prints a table (decode tokens/s, acceptance = tokens per model call, ratio to
llama.cpp plain) and writes JSON. Usage:
  .venv-test/bin/python bench/bench_spec.py [--n-docs 10] [--n-gen 128] [--n-verify L2] [--methods LIST]
                                           [--out bench/results/spec.json]
A method "X:fixed" is X with cost-aware drafting off (--no-adaptive).
"""
import argparse, contextlib, json, os, subprocess, sys, tempfile, time

import llama_cpp
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_native  # noqa: E402  (standard library only)


def documents(n, vocab):
    """Real text from the machine: license texts cut to 600 tokens
    (bench_native.license_documents, with llama.cpp's tokenizer here)."""
    return bench_native.license_documents(
        n, lambda text: vocab.tokenize(text.encode(), add_bos=False),
        lambda toks: vocab.detokenize(toks).decode("utf-8", "ignore"))


EXTRA = []


def prompt_for(doc):
    return doc + "\n\nTL;DR:"


def run_sdnpu(exe, model, prompt, method, n_gen, threads):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(prompt)
        pf = f.name
    js = pf + ".json"
    # "X:fixed" is X with cost-aware drafting off (--no-adaptive).
    spec, fixed = (method[:-len(":fixed")], True) if method.endswith(":fixed") else (method, False)
    res = subprocess.run([exe, "run", "-m", model, "-f", pf, "-n", str(n_gen), "--temp", "0", "-t", str(threads),
                          "-c", "4096", "--spec", spec, "--stats-json", js, "--no-stats"] + EXTRA +
                         (["--no-adaptive"] if fixed else []),
                         capture_output=True, text=True)
    os.unlink(pf)
    if res.returncode != 0:
        sys.exit(f"sdnpu failed: {res.stderr[-1000:]}")
    st = json.load(open(js))
    os.unlink(js)
    return st, res.stdout


def run_llama(llm, prompt, n_gen):
    """Greedy generation through llama-cpp-python; prefill is the time to the
    first token, decode the rest."""
    toks = llm.tokenize(prompt.encode(), add_bos=True)
    llm.reset()
    t0 = time.perf_counter()
    t1 = None
    out = []
    for tok in llm.generate(toks, temp=0.0, top_k=1, reset=True):
        if t1 is None:
            t1 = time.perf_counter()
        out.append(tok)
        if len(out) == n_gen or tok == llm.token_eos():
            break
    t2 = time.perf_counter()
    return {"prompt_tokens": len(toks), "generated": len(out) - 1, "prefill_ms": (t1 - t0) * 1e3,
            "decode_ms": (t2 - t1) * 1e3}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "default.gguf"))
    ap.add_argument("--exe", default=os.path.join(ROOT, "build", "sdnpu"))
    ap.add_argument("--n-docs", type=int, default=10)
    ap.add_argument("--n-gen", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-verify", type=int, default=0, help="rows of the verification graph L2 (0: sdnpu's default)")
    ap.add_argument("--methods", default="cpu-vanilla,npu-vanilla,pld,pld:fixed,sam,sam:fixed,sam-tree,sam-tree:fixed",
                    help="comma-separated; METHOD:fixed runs METHOD with --no-adaptive")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "spec.json"))
    ap.add_argument("--native", action="store_true", help="also llama.cpp's llama-server, plain and n-gram types")
    ap.add_argument("--no-python-peer", action="store_true", help="skip llama-cpp-python's plain and prompt lookup")
    ap.add_argument("--stop-on-repeat", action="store_true",
                    help="sdnpu with the degeneration guard (the peers have none: compare tokens per call, not speed)")
    args = ap.parse_args()
    global EXTRA
    EXTRA = (["--n-verify", str(args.n_verify)] if args.n_verify else []) + \
        (["--stop-on-repeat"] if args.stop_on_repeat else [])
    vocab = llama_cpp.Llama(model_path=args.model, vocab_only=True, verbose=False)
    docs = documents(args.n_docs, vocab)
    del vocab
    rows = {}
    methods = args.methods.split(",")
    # With --native, llama-server (plain and each n-gram type) stays up and
    # takes its turn on each document right after sdnpu's methods, so that
    # both engines meet the same minutes of a machine whose speed wanders.
    with contextlib.ExitStack() as stack:
        servers = {}
        if args.native:
            bindir = bench_native.peer_bin()
            servers = {spec: stack.enter_context(bench_native.Server(bindir, args.model, args.threads, spec))
                       for spec in bench_native.SPEC_TYPES}
        for name, doc in docs:
            p = prompt_for(doc)
            for m in methods:
                st, _ = run_sdnpu(args.exe, args.model, p, m, args.n_gen, args.threads)
                rows.setdefault("sdnpu " + m, []).append(st)
            for spec, srv in servers.items():
                r = bench_native.complete(srv, p, args.n_gen)
                rows.setdefault("llama.cpp native " + spec, []).append(
                    {"prompt_tokens": r["prompt_n"], "generated": r["predicted_n"], "decode_ms": r["predicted_ms"],
                     "prefill_ms": r["prompt_n"] / r["prompt_per_second"] * 1e3 if r["prompt_per_second"] else 0,
                     "verify_steps": r["target_calls"], "accepted": r["draft_n_accepted"]})
            print(f"{name}: done", file=sys.stderr)
            os.makedirs(os.path.dirname(args.out), exist_ok=True)
            json.dump(rows, open(args.out + ".partial", "w"))
    peers = () if args.no_python_peer else (
        ("llama.cpp plain", None), ("llama.cpp prompt-lookup", LlamaPromptLookupDecoding(num_pred_tokens=10)))
    for label, draft in peers:
        # The prompt-lookup path of llama-cpp-python needs all logits and a
        # batch as large as the context; plain decoding is run the same way.
        llm = llama_cpp.Llama(model_path=args.model, n_ctx=2048, n_batch=2048, n_ubatch=512, n_threads=args.threads,
                              n_threads_batch=args.threads, verbose=False, logits_all=draft is not None,
                              draft_model=draft)
        for name, doc in docs:
            rows.setdefault(label, []).append(run_llama(llm, prompt_for(doc), args.n_gen))
        del llm
        print(f"{label} done", file=sys.stderr)

    def agg(v):
        gen = sum(r["generated"] for r in v)
        dec = sum(r["decode_ms"] for r in v) / 1e3
        pre_t = sum(r["prompt_tokens"] for r in v)
        pre = sum(r["prefill_ms"] for r in v) / 1e3
        steps = sum(r.get("verify_steps", 0) for r in v)
        grows = sum(r.get("graph_rows", 0) for r in v)
        prows = sum(r.get("pad_rows", 0) for r in v)
        acc = sum(r.get("accepted", 0) for r in v)
        return {"docs": len(v), "generated": gen, "decode_tok_s": gen / dec if dec else 0,
                "prefill_tok_s": pre_t / pre if pre else 0,
                "acceptance": (steps + acc) / steps if steps else None,
                "padding_share": prows / grows if grows else None}
    summary = {k: agg(v) for k, v in rows.items()}
    plain = "llama.cpp native plain" if args.native else "llama.cpp plain"
    base = summary[plain]["decode_tok_s"] if plain in summary else None  # no peer run: no ratio
    ngram = {k: v for k, v in summary.items() if k.startswith("llama.cpp native ngram")}
    best_k = max(ngram, key=lambda k: ngram[k]["decode_tok_s"]) if ngram else None
    best = ngram[best_k]["decode_tok_s"] if best_k else None
    print(f"\n{len(docs)} documents, {args.n_gen} tokens each, {args.threads} threads, greedy")
    print(f"| method | decode tok/s | x {plain} | x best n-gram ({best_k or '-'}) | tokens/call | padding | prefill tok/s |")
    print("|---|---|---|---|---|---|---|")
    for k, v in summary.items():
        acc = f"{v['acceptance']:.2f}" if v["acceptance"] else "-"
        pad = f"{100 * v['padding_share']:.0f}%" if v.get("padding_share") is not None else "-"
        xb = f"{v['decode_tok_s'] / best:.2f}" if best else "-"
        xp = f"{v['decode_tok_s'] / base:.2f}" if base else "-"
        print(f"| {k} | {v['decode_tok_s']:.1f} | {xp} | {xb} | {acc} | {pad} | "
              f"{v['prefill_tok_s']:.1f} |")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    json.dump({"summary": summary, "per_doc": rows, "docs": [d[0] for d in docs], "n_gen": args.n_gen,
               "threads": args.threads}, open(args.out, "w"), indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
