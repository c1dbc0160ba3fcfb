#!/usr/bin/env python3
"""The llama.cpp side of `sdnpu bench tokenize`.

Loads the model's vocabulary with llama.cpp (through llama-cpp-python's
low-level C bindings, so Python adds one call per repetition, not per token),
encodes and decodes the file's bytes as one text, and prints one JSON line:

  {"peer": "llama.cpp", "version": "...", "load_ms": ..., "bytes": ...,
   "n_tokens": ..., "encode_mb_s": ..., "decode_mb_s": ...,
   "encode_s": [...], "decode_s": [...]}

MB/s are 10^6 bytes of input text per second for encoding and of output text
for decoding, best of --repeat runs, as sdnpu reports them. With --ids-out
the ids are also written there as little-endian int32, so the caller can
check that both engines produced the same tokens.

    peer_tokenize.py --model GGUF --file TEXT [--repeat N] [--special] [--ids-out FILE]
"""
import argparse
import ctypes
import json
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--file", required=True)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--max-seconds", type=float, default=15.0,
                    help="stop repeating a measurement once it has taken this long (at least one run)")
    ap.add_argument("--special", action="store_true", help="add BOS and parse special-token text")
    ap.add_argument("--ids-out", help="write the ids here as little-endian int32")
    ap.add_argument("--lines", action="store_true",
                    help="encode each line (with its newline) in its own call, as a chat or a log would")
    args = ap.parse_args()

    import llama_cpp

    @llama_cpp.llama_log_callback
    def _quiet(level, text, user_data):
        pass

    llama_cpp.llama_log_set(_quiet, ctypes.c_void_p())
    llama_cpp.llama_backend_init()

    with open(args.file, "rb") as f:
        text = f.read()

    t0 = time.perf_counter()
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(args.model.encode(), params)
    if not model:
        sys.exit(f"peer: llama.cpp could not load {args.model}")
    vocab = llama_cpp.llama_model_get_vocab(model)
    load_ms = (time.perf_counter() - t0) * 1e3

    cap = len(text) + 16
    buf = (llama_cpp.llama_token * cap)()
    if args.lines:
        parts = text.split(b"\n")
        pieces = [p + b"\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
    else:
        pieces = [text]
    tok = llama_cpp.llama_tokenize
    enc = []
    n = 0
    for _ in range(args.repeat):
        t = time.perf_counter()
        n = 0
        for piece in pieces:
            ptr = ctypes.cast(ctypes.byref(buf, n * 4), ctypes.POINTER(llama_cpp.llama_token))
            k = tok(vocab, piece, len(piece), ptr, cap - n, args.special, args.special)
            if k < 0:
                sys.exit(f"peer: llama_tokenize needs {-k} tokens")
            n += k
        enc.append(time.perf_counter() - t)
        if sum(enc) > args.max_seconds:
            break

    out_cap = len(text) * 2 + 64
    out = ctypes.create_string_buffer(out_cap)
    dec = []
    m = 0
    for _ in range(args.repeat):
        t = time.perf_counter()
        m = llama_cpp.llama_detokenize(vocab, buf, n, out, out_cap, False, args.special)
        dec.append(time.perf_counter() - t)
        if m < 0:
            sys.exit(f"peer: llama_detokenize needs {-m} bytes")
        if sum(dec) > args.max_seconds:
            break

    if args.ids_out:
        with open(args.ids_out, "wb") as f:
            f.write(memoryview(buf).cast("B")[: n * 4])  # llama_token is int32, host order (little-endian here)
    print(json.dumps({
        "peer": "llama.cpp",
        "version": getattr(llama_cpp, "__version__", "?"),
        "load_ms": round(load_ms, 2),
        "bytes": len(text),
        "n_tokens": n,
        "decoded_bytes": m,
        "encode_mb_s": round(len(text) / min(enc) / 1e6, 3),
        "decode_mb_s": round(m / min(dec) / 1e6, 3),
        "encode_s": [round(x, 5) for x in enc],
        "decode_s": [round(x, 5) for x in dec],
    }))
    llama_cpp.llama_model_free(model)


if __name__ == "__main__":
    main()
