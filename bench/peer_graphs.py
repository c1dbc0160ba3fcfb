"""llama.cpp's side of `sdnpu bench graphs` (run by that command).

usage: peer_graphs.py MODEL TOKENS_FILE THREADS L REPEAT [AT]

Prints one JSON line: prefill tokens/s on the given tokens (best of REPEAT),
one-token decode tokens/s (best of REPEAT rounds of 32 greedy steps), the median time of evaluating
1 and L tokens with logits for every row (a verification batch) after AT
(default 512) tokens of context (the given tokens repeated as far as
needed; one untimed pair first), and the process's peak resident memory.
`sdnpu bench graphs` runs it once a round with REPEAT 1, in turn with its
own measurements.
"""
import json
import resource
import statistics
import sys
import time

import numpy as np
from llama_cpp import Llama


def main():
    model, tok_file, threads, L, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    at = int(sys.argv[6]) if len(sys.argv) > 6 else 512
    toks = [int(x) for x in open(tok_file).read().split()]
    n = len(toks)
    # The wrapper keeps n_batch rows of scores even without logits_all, and
    # indexes them by position: n_batch covers the whole context.
    llm = Llama(model_path=model, n_ctx=2048, n_batch=2048, n_ubatch=1024, n_threads=threads,
                n_threads_batch=threads, logits_all=False, verbose=False)
    best = 1e300
    for _ in range(repeat):
        llm.reset()
        llm._ctx.kv_cache_clear()
        t0 = time.perf_counter()
        llm.eval(toks)
        best = min(best, time.perf_counter() - t0)
    prefill = n / best
    # Best of REPEAT rounds of 32 greedy steps after the prompt, as sdnpu.
    best = 1e300
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(32):
            nxt = int(np.argmax(llm.scores[llm.n_tokens - 1]))
            llm.eval([nxt])
        best = min(best, time.perf_counter() - t0)
        llm._ctx.kv_cache_seq_rm(-1, n - 1, -1)
        llm.n_tokens = n - 1
        llm.eval(toks[n - 1:n])
    decode = 32 / best
    del llm
    # Verification batches need logits for every row.
    vctx = max(2048, (at + L + 255) // 256 * 256)
    vtoks = [toks[i % n] for i in range(at + L)]
    llm = Llama(model_path=model, n_ctx=vctx, n_batch=vctx, n_ubatch=1024, n_threads=threads,
                n_threads_batch=threads, logits_all=True, verbose=False)
    llm.eval(vtoks[:at])
    # A pair untimed first, as sdnpu: the first passes after a prefill find
    # the buffers out of the caches.
    for k in (1, L):
        llm.eval(vtoks[at:at + k])
        llm._ctx.kv_cache_seq_rm(-1, at, -1)
        llm.n_tokens = at
    t1, tl = [], []
    for _ in range(repeat):
        for k, out in ((1, t1), (L, tl)):
            t0 = time.perf_counter()
            llm.eval(vtoks[at:at + k])
            out.append(time.perf_counter() - t0)
            llm._ctx.kv_cache_seq_rm(-1, at, -1)
            llm.n_tokens = at
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"prefill_tok_s": prefill, "decode_tok_s": decode, "verify1_ms": statistics.median(t1) * 1e3,
                      "verifyL_ms": statistics.median(tl) * 1e3, "peak_rss_bytes": rss}))


if __name__ == "__main__":
    main()
