#!/usr/bin/env python3
"""Could a cheaper copy of the output head give the greedy token exactly?

The head is the largest single read of a decoding step: the 0.5B's q8_0
output projection is 145 MB of the ~400 MB a one-row pass streams. Greedy
decoding and verification need only its argmax. A smaller copy of the head
(here requantized to q4_0, q5_0 or to 6 bits in 32-value blocks) gives approximate
logits A_j; by Cauchy-Schwarz the exact logit of token j lies within
m_j = ||x|| * (||w_j - w'_j|| + 4e-6 (||w_j|| + ||w'_j||)) * 1.01 of A_j
(x the row's int8-quantized activations, which both kernels share; the
second term covers the float rounding of both sums). Every token whose
A_j + m_j reaches max_i (A_i - m_i) is a candidate; the exact argmax is
always among them, and only their rows of the exact head need reading.

This script measures, on real hidden states, how many candidates that
leaves: the hidden states after the output norm from llama.cpp
(llama-cpp-python, embeddings without pooling) over document text and over
the model's own greedy summaries of it, the head dequantized with gguf-py.
Per approximation and kind of position it prints the mean, median, 90th
percentile and largest candidate count, the bytes a one-row step would read
(the copy plus the candidates' 16-row groups of the exact head) against the
head's, and checks that the exact argmax was a candidate every time.

usage: .venv-ref/bin/python bench/head_certify.py [--model M.gguf] [--docs F ...] [--positions N]
           [--generate N] [--out bench/results/head_certify.json]
"""
import argparse, json, os, sys

import numpy as np
import gguf
import llama_cpp
from gguf import quants

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPT = "<|im_start|>user\nSummarize this document:\n\n{}<|im_end|>\n<|im_start|>assistant\n"


def q8_act(x):
    """sdnpu's activation quantization for 32-value formats (scale amax / 127, ties to even)."""
    xb = x.reshape(-1, 32)
    d = np.abs(xb).max(1, keepdims=True) / 127
    return (np.round(xb / np.where(d == 0, 1, d)) * d).reshape(-1)


def requant(wb, half):
    """Blocks of 32 with ggml's q4_0/q5_0 rule: d = (signed max) / -half, values 0..2 half - 1."""
    mx = np.take_along_axis(wb, np.abs(wb).argmax(2)[..., None], 2)
    d = (mx / -half).astype(np.float16).astype(np.float32)
    inv = np.where(d == 0, 0, 1 / np.where(d == 0, 1, d))
    return (np.clip(np.floor(wb * inv + half + 0.5), 0, 2 * half - 1) - half) * d


def hidden_states(model, docs, positions, generate, threads):
    emb = llama_cpp.Llama(model_path=model, embedding=True, pooling_type=0, n_ctx=4096, n_batch=4096,
                          n_ubatch=4096, n_threads=threads, verbose=False)
    doc_x, gen_x = [], []
    for text in docs:
        doc_x += emb.embed(text, normalize=False)[-(positions // len(docs)):]
    if generate:
        gen = llama_cpp.Llama(model_path=model, n_ctx=4096, n_threads=threads, verbose=False)
        for text in docs:
            out = gen.create_completion(PROMPT.format(text), max_tokens=generate, temperature=0)["choices"][0]["text"]
            n_out = len(gen.tokenize(out.encode(), add_bos=False))
            gen_x += emb.embed(PROMPT.format(text) + out, normalize=False)[-n_out:]
    return np.array(doc_x, dtype=np.float32), np.array(gen_x, dtype=np.float32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "default.gguf"))
    ap.add_argument("--docs", nargs="*", default=[os.path.join(ROOT, "docs", f) for f in
                                                  ("acceptance.md", "api.md", "server.md")] + [os.path.join(ROOT, "README.md")])
    ap.add_argument("--chars", type=int, default=6000, help="each document cut to this many characters")
    ap.add_argument("--positions", type=int, default=200, help="document positions in all (the last of each)")
    ap.add_argument("--generate", type=int, default=48, help="greedy summary tokens a document")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "head_certify.json"))
    a = ap.parse_args()
    r = gguf.GGUFReader(a.model)
    t = next((t for t in r.tensors if t.name == "output.weight"), None) or next(t for t in r.tensors if t.name == "token_embd.weight")
    W = quants.dequantize(t.data, t.tensor_type).astype(np.float32)
    V, d = W.shape
    docs = [open(p, encoding="utf-8").read()[:a.chars] for p in a.docs]
    doc_x, gen_x = hidden_states(a.model, docs, a.positions, a.generate, a.threads)
    wb = W.reshape(V, -1, 32)
    wnorm = np.sqrt((W.astype(np.float64) ** 2).sum(1))
    res = {"model": a.model, "head_type": t.tensor_type.name, "head_mb": t.n_bytes / 1e6, "vocab": V, "rows": {}}
    print(f"{os.path.basename(a.model)}: head {t.tensor_type.name}, {t.n_bytes / 1e6:.0f} MB; "
          f"{len(doc_x)} document positions, {len(gen_x)} generated\n")
    print("| copy | positions | candidates mean | median | p90 | max | MB a step (copy + exact groups) | head MB | argmax a candidate |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for name, half, bits in (("q4_0", 8, 4.5), ("q5_0", 16, 5.5), ("6-bit, blocks of 32", 32, 6.5)):
        A = requant(wb, half).reshape(V, -1)
        m = np.sqrt(((W - A).astype(np.float64) ** 2).sum(1)) + 4e-6 * (wnorm + np.sqrt((A.astype(np.float64) ** 2).sum(1)))
        for kind, X in (("document", doc_x), ("generated", gen_x)):
            if not len(X):
                continue
            Xq = np.array([q8_act(x) for x in X])
            exact = (Xq @ W.T).argmax(1)
            approx = Xq @ A.T
            M = np.sqrt((Xq.astype(np.float64) ** 2).sum(1))[:, None] * m[None, :] * 1.01
            cand = (approx + M) >= (approx - M).max(1, keepdims=True)
            n = cand.sum(1)
            ok = bool(all(cand[i, exact[i]] for i in range(len(X))))
            groups = np.array([len(np.unique(np.nonzero(c)[0] // 16)) for c in cand])
            mb = V * d * bits / 8 / 1e6 + groups.mean() * 16 * t.n_bytes / V / 1e6
            row = {"candidates_mean": float(n.mean()), "p50": float(np.median(n)), "p90": float(np.percentile(n, 90)),
                   "max": int(n.max()), "mb_per_step": mb, "argmax_always_candidate": ok, "positions": len(X)}
            res["rows"][f"{name} / {kind}"] = row
            print(f"| {name} | {kind} | {n.mean():.0f} | {np.median(n):.0f} | {np.percentile(n, 90):.0f} | {n.max()} | "
                  f"{mb:.0f} | {t.n_bytes / 1e6:.0f} | {'yes' if ok else 'NO'} |")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    json.dump(res, open(a.out, "w"), indent=1)
    print(f"\nwrote {a.out}")
    if not all(r["argmax_always_candidate"] for r in res["rows"].values()):
        sys.exit("the exact argmax fell outside the candidates: the bound is wrong")


if __name__ == "__main__":
    main()
