#!/usr/bin/env python3
"""Accuracy of sdnpu's default (fast) kernels, against a reference without
weight quantization.

The fast kernels sum in an order of sdnpu's own (graphs/packed.h,
graphs/cpu/attention.h), so their logits are not llama.cpp's bit for bit and
a comparison with llama.cpp's quantized run mixes two roundings. Instead both
of sdnpu's orders are measured against the same truth: the model's weights
dequantized to F32 (gguf-py) and run by llama.cpp in its batch-invariant
configuration. The ggml order is bit-identical to llama.cpp's quantized
run, so it stands for llama.cpp's own accuracy; the fast order must be as
good: teacher-forced argmax agreement with the truth at most 0.5 points
below the ggml order's, and mean |log-softmax difference| over the truth's
top-20 tokens at most 5% above it.

usage: fast_accuracy.py --dump BUILD/tests/logits_dump --model M.gguf --work DIR [--limit N] [--every K]
"""
import argparse, json, os, subprocess, sys

import numpy as np

os.environ.setdefault("GGML_CPU_TILED_MM", "0")
import gguf  # noqa: E402
import llama_cpp  # noqa: E402
from gguf import quants  # noqa: E402

TOPN = 20


def write_f32(src, dst):
    """The GGUF at src with every tensor dequantized to F32."""
    r = gguf.GGUFReader(src)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    w = gguf.GGUFWriter(dst + ".tmp", arch=arch)
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture":
            continue
        t = f.types[0]
        if t == gguf.GGUFValueType.ARRAY:
            sub = f.types[1]
            if sub == gguf.GGUFValueType.STRING:
                val = [bytes(f.parts[i]).decode("utf-8", "replace") for i in f.data]
            else:
                val = [f.parts[i].tolist()[0] for i in f.data]
            w.add_key_value(k, val, t, sub_type=sub)
        elif t == gguf.GGUFValueType.STRING:
            w.add_key_value(k, bytes(f.parts[f.data[0]]).decode("utf-8", "replace"), t)
        else:
            w.add_key_value(k, f.parts[f.data[0]].tolist()[0], t)
    for t in r.tensors:
        w.add_tensor(t.name, quants.dequantize(t.data, t.tensor_type).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(dst + ".tmp", dst)


def f32_name(model):
    """The F32 copy's file name: the model's name, size and mtime, so a changed model gets a new copy."""
    st = os.stat(model)
    return f"{os.path.basename(model)}.{st.st_size}.{int(st.st_mtime)}.f32.gguf"


def f32_copy(model, work):
    """The path of the F32 copy of model in work, written first if it is not there."""
    os.makedirs(work, exist_ok=True)
    f32 = os.path.join(work, f32_name(model))
    if not os.path.exists(f32):
        print(f"writing {f32} (the weights dequantized to F32)", flush=True)
        write_f32(model, f32)
    return f32


def logsoftmax_at(sc, top):
    """Log-softmax of the logits sc [n][vocab] at the ids top [n][k] (the sum in float64)."""
    mx = sc.max(axis=1, keepdims=True)
    lse = mx[:, 0] + np.log(np.exp(sc - mx).sum(axis=1, dtype=np.float64))
    return np.take_along_axis(sc, top, axis=1) - lse[:, None]


def truth_run(model, cases, threads):
    """Teacher-forced argmax, top-20 ids and their log-softmax from llama.cpp."""
    p = llama_cpp.llama_cpp.llama_model_default_params
    def ref_params():
        q = p()
        q.use_extra_bufts = False
        return q
    llama_cpp.llama_cpp.llama_model_default_params = ref_params
    n_ctx = max(len(t) for t in cases) + 16
    llm = llama_cpp.Llama(model_path=model, n_ctx=n_ctx, n_batch=512, n_ubatch=512, n_threads=threads,
                          n_threads_batch=threads, logits_all=True, verbose=False, seed=0)
    out = []
    for toks in cases:
        llm.reset()
        llm.eval(toks)
        sc = np.array(llm.scores[:len(toks)], dtype=np.float32)
        top = np.argsort(-sc, axis=1, kind="stable")[:, :TOPN]
        out.append((sc.argmax(axis=1), top, logsoftmax_at(sc, top)))
    return out


def ours_run(dump, model, cases, truth, threads, kernels):
    lines = []
    for toks, (_, top, _) in zip(cases, truth):
        lines.append(f"{len(toks)} " + " ".join(map(str, toks)) + " 0")
        lines += [" ".join(map(str, row.tolist())) for row in top]
    res = subprocess.run([dump, model, str(threads)], input="\n".join(lines) + "\n", capture_output=True, text=True,
                         env=dict(os.environ, SDNPU_TEST_KERNELS=kernels))
    if res.returncode != 0:
        sys.exit(f"logits_dump failed ({res.returncode}): {res.stderr[-2000:]}")
    it = iter(res.stdout.splitlines())
    out = []
    for toks in cases:
        a = np.array(list(map(int, next(it).split()[1:])))
        lp = np.array([list(map(float, next(it).split()[2:])) for _ in toks])
        next(it)  # the (empty) greedy line
        out.append((a, lp))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--work", required=True, help="where the F32 copy of the model is kept")
    ap.add_argument("--prompts", default=os.path.join(os.path.dirname(__file__), "..", "data",
                                                      "conformance_prompts.json"))
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--every", type=int, default=1, help="every K-th prompt (a spread of every kind, for time)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    f32 = f32_copy(args.model, args.work)
    vocab = llama_cpp.Llama(model_path=args.model, vocab_only=True, verbose=False)
    prompts = json.load(open(args.prompts, encoding="utf-8"))
    prompts = prompts[::args.every]
    if args.limit:
        prompts = prompts[:args.limit]
    cases = [vocab.tokenize(p["text"].encode("utf-8"), add_bos=True, special=True)[:1500] for p in prompts]
    del vocab
    truth = truth_run(f32, cases, args.threads)
    n = sum(len(t) for t in cases)
    res = {}
    for k in ("ggml", "fast"):
        ours = ours_run(args.dump, args.model, cases, truth, args.threads, k)
        agree = sum(int((t[0] == o[0]).sum()) for t, o in zip(truth, ours))
        mad = float(np.mean([np.abs(t[2] - o[1]).mean() for t, o in zip(truth, ours)]))
        res[k] = (agree / n, mad)
        print(f"[{k} kernels] against the F32 weights: argmax {agree}/{n} = {100 * agree / n:.2f}%, "
              f"mean |log-softmax difference| over the top-{TOPN}: {mad:.4f} nats")
    ok = res["fast"][0] >= res["ggml"][0] - 0.005 and res["fast"][1] <= res["ggml"][1] * 1.05
    print(f"required: fast argmax >= {100 * (res['ggml'][0] - 0.005):.2f}%, fast difference <= "
          f"{res['ggml'][1] * 1.05:.4f} nats -> {'PASS' if ok else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
