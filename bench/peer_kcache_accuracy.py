#!/usr/bin/env python3
"""How much a narrower K cache costs in accuracy, measured on llama.cpp's own
cache types: why sdnpu keeps K (and V) in fp16.

Attention's scores are the arithmetic an 8-bit K cache would speed up (int8
products on vpdpbusd at four times the float rate). Whether that is allowed
is a question of accuracy, asked here of an independent implementation:
llama.cpp (llama-cpp-python, the pinned test peer) runs the same GGUF with
its K cache in f16 and in q8_0 (blocks of 32 values, one fp16 scale each;
flash attention, which q8_0 K requires, on for both), teacher-forced over
prompts, and each is compared with the truth of fast_accuracy.py: the
model's weights dequantized to F32 and run by llama.cpp. Printed per cache
type: argmax agreement with the truth and the mean |log-softmax difference|
over the truth's top 20 tokens, and the q8_0 / f16 ratio of the latter.
fast_accuracy.py requires sdnpu's fast kernels to stay within 5% of that
difference; the K cache's precision is held to the same bar.

usage: .venv-ref/bin/python bench/peer_kcache_accuracy.py [--model M.gguf] [--work DIR]
           [--prompts P.json] [--every K] [--limit N] [--max-tokens N] [--threads T]
           [--out bench/results/kcache_accuracy.json]
The F32 copy is made once in --work (default: where CTest's fast_accuracy test
made it, build/f32-qwen for the default model, else build/f32-<model file>).
"""
import argparse, glob, json, os, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "conformance"))
import numpy as np  # noqa: E402

import fast_accuracy as fa  # noqa: E402  (sets the batch-invariant llama.cpp options first)
import llama_cpp  # noqa: E402

TYPES = {"f16": 1, "q8_0": 8}  # ggml_type ids


def peer_run(model, cases, truth, threads, type_k):
    n_ctx = max(len(t) for t in cases) + 16
    llm = llama_cpp.Llama(model_path=model, n_ctx=n_ctx, n_batch=512, n_threads=threads, n_threads_batch=threads,
                          logits_all=True, verbose=False, flash_attn=True, type_k=type_k)
    agree, diffs = 0, []
    for toks, (am, top, lp) in zip(cases, truth):
        llm.reset()
        llm.eval(toks)
        sc = np.array(llm.scores[:len(toks)], dtype=np.float32)
        agree += int((sc.argmax(axis=1) == am).sum())
        diffs.append(float(np.abs(fa.logsoftmax_at(sc, top) - lp).mean()))
    return agree, float(np.mean(diffs))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "default.gguf"))
    ap.add_argument("--work", default=None)
    ap.add_argument("--prompts", default=os.path.join(ROOT, "tests", "data", "conformance_prompts.json"))
    ap.add_argument("--every", type=int, default=3)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--max-tokens", type=int, default=1500, help="each prompt cut to this many tokens")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "kcache_accuracy.json"))
    a = ap.parse_args()
    # The copy CTest's fast_accuracy test made (build/f32-qwen, build/f32-gemma) serves, if it is there.
    found = sorted(glob.glob(os.path.join(ROOT, "build", "f32-*", fa.f32_name(a.model))))
    work = a.work or (os.path.dirname(found[0]) if found else os.path.join(ROOT, "build", "f32-" + os.path.basename(a.model)))
    f32 = fa.f32_copy(a.model, work)
    vocab = llama_cpp.Llama(model_path=a.model, vocab_only=True, verbose=False)
    prompts = json.load(open(a.prompts, encoding="utf-8"))[::a.every]
    if a.limit:
        prompts = prompts[:a.limit]
    cases = [vocab.tokenize(p["text"].encode("utf-8"), add_bos=True, special=True)[:a.max_tokens] for p in prompts]
    del vocab
    n = sum(len(t) for t in cases)
    truth = fa.truth_run(f32, cases, a.threads)
    rows = {}
    for name, t in TYPES.items():
        agree, diff = peer_run(a.model, cases, truth, a.threads, t)
        rows[name] = {"argmax_agree": agree / n, "top20_abs_logp_diff": diff}
    print(f"\nllama.cpp's K cache types against the F32 weights ({os.path.basename(a.model)}, {len(cases)} prompts, "
          f"{n} positions, longest {max(map(len, cases))} tokens)\n")
    print("| K cache | argmax agreement | mean abs log-softmax difference, top 20 (nats) | x f16 |")
    print("|---|---:|---:|---:|")
    for name, r in rows.items():
        print(f"| {name} | {100 * r['argmax_agree']:.2f}% | {r['top20_abs_logp_diff']:.4f} | "
              f"{r['top20_abs_logp_diff'] / rows['f16']['top20_abs_logp_diff']:.2f} |")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"model": a.model, "prompts": a.prompts, "n_prompts": len(cases), "positions": n,
                   "threads": a.threads, "types": rows}, f, indent=1)
    print(f"\nwrote {a.out}")


if __name__ == "__main__":
    main()
