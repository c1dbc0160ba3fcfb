#!/usr/bin/env python3
"""Kernel conformance of sdnpu against llama.cpp's CPU kernels.

For every weight type, random weight rows are quantized by ggml itself
(ggml_quantize_chunk) and random activation rows (with outliers, as real
activations have) are quantized by ggml's CPU from_float for the type's
vec_dot type; ggml's vec_dot gives the reference dot product. sdnpu's
tool quantizes the same activations its own way and runs each of its kernel
implementations (scalar, AVX2, AVX-512). Every result must equal ggml's bit
for bit: these are the kernels that llama.cpp's reference CPU path (no
tinyBLAS, no repacking; see logits_conformance.py) uses for every row.

usage: kernel_conformance.py --dump BUILD/tests/vecdot_dump [--trials N]
"""
import argparse, ctypes, os, struct, subprocess, sys

import numpy as np
import llama_cpp

LIB = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
base = ctypes.CDLL(os.path.join(LIB, "libggml-base.so"), mode=ctypes.RTLD_GLOBAL)
cpu = ctypes.CDLL(os.path.join(LIB, "libggml-cpu.so"), mode=ctypes.RTLD_GLOBAL)

FROM_FLOAT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
VEC_DOT = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                           ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)


class TraitsCPU(ctypes.Structure):
    _fields_ = [("from_float", ctypes.c_void_p), ("vec_dot", ctypes.c_void_p), ("vec_dot_type", ctypes.c_int),
                ("nrows", ctypes.c_int64)]


cpu.ggml_cpu_init.restype = None
cpu.ggml_get_type_traits_cpu.restype = ctypes.POINTER(TraitsCPU)
cpu.ggml_get_type_traits_cpu.argtypes = [ctypes.c_int]
base.ggml_quantize_chunk.restype = ctypes.c_size_t
base.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                                     ctypes.c_int64, ctypes.c_void_p]
base.ggml_row_size.restype = ctypes.c_size_t
base.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]

# GGUF / ggml type ids (sdnpu uses the same numbers).
TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "q4_K": 12, "q5_K": 13,
         "q6_K": 14, "bf16": 30}
LENGTHS = [160, 256, 640, 1024, 2048]  # 160: a tail past the last multiple of 64


def peer_dot(t, n, w, x):
    tr = cpu.ggml_get_type_traits_cpu(t).contents
    vdt = tr.vec_dot_type
    xq = ctypes.create_string_buffer(base.ggml_row_size(vdt, n))
    ff = cpu.ggml_get_type_traits_cpu(vdt).contents.from_float
    if vdt == TYPES["f32"]:
        ctypes.memmove(xq, x.ctypes.data, 4 * n)
    else:
        FROM_FLOAT(ff)(x.ctypes.data, ctypes.addressof(xq), n)
    out = ctypes.c_float()
    VEC_DOT(tr.vec_dot)(n, ctypes.byref(out), 0, ctypes.addressof(w), 0, ctypes.addressof(xq), 0, 1)
    return struct.unpack("<I", struct.pack("<f", out.value))[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", required=True)
    ap.add_argument("--trials", type=int, default=40)
    args = ap.parse_args()
    cpu.ggml_cpu_init()
    info = llama_cpp.llama_print_system_info().decode()
    # sdnpu follows ggml as built for AVX-512 (with BF16): on a CPU without
    # them ggml's float dot products sum in another order, so those types
    # cannot be compared there (the integer-block types can).
    skip = set()
    if "AVX512 = 1" not in info:
        skip |= {"f32", "f16", "bf16"}
    if "AVX512_BF16 = 1" not in info:
        skip.add("bf16")
    for name in sorted(skip):
        print(f"[kernels] {name}: not compared, llama.cpp here is built without AVX-512/BF16 ({info.strip()})")
    rng = np.random.default_rng(20261122)
    records, expect, labels = [], [], []
    for name, t in TYPES.items():
        if name in skip:
            continue
        for n in LENGTHS:
            if name.endswith("_K") and n % 256:
                continue
            for trial in range(args.trials):
                wf = (rng.standard_normal(n) * 0.05).astype(np.float32)
                x = rng.standard_normal(n).astype(np.float32)
                # Activations of a transformer: a few large outliers, some exact zeros and ties.
                x[rng.integers(0, n, 4)] *= 40.0
                if trial % 5 == 1:
                    x[: n // 4] = np.round(x[: n // 4] * 4) / 4
                w = ctypes.create_string_buffer(base.ggml_row_size(t, n))
                base.ggml_quantize_chunk(t, wf.ctypes.data, ctypes.addressof(w), 0, 1, n, None)
                expect.append(peer_dot(t, n, w, x))
                records.append(struct.pack("<ii", t, n) + w.raw + x.tobytes())
                labels.append((name, n))
    res = subprocess.run([args.dump], input=b"".join(records), capture_output=True)
    if res.returncode != 0:
        sys.exit(f"vecdot_dump failed ({res.returncode}): {res.stderr.decode()[-2000:]}")
    lines = res.stdout.decode().split("\n")
    impls = ["scalar", "avx2", "avx512"]
    stats, bad = {}, []
    for (name, n), want, line in zip(labels, expect, lines):
        for impl, got in zip(impls, line.split()):
            if got == "-":
                continue
            key = (name, impl)
            ok = int(got, 16) == want
            stats.setdefault(key, [0, 0])
            stats[key][0] += ok
            stats[key][1] += 1
            if not ok and len(bad) < 20:
                g = struct.unpack("<f", struct.pack("<I", int(got, 16)))[0]
                e = struct.unpack("<f", struct.pack("<I", want))[0]
                bad.append(f"{name} n={n} {impl}: got {g!r} ({got}), llama.cpp {e!r} ({want:08x})")
    for name in TYPES:
        if name in skip:
            continue
        row = "  ".join(f"{impl} {stats[(name, impl)][0]}/{stats[(name, impl)][1]}" for impl in impls
                        if (name, impl) in stats)
        print(f"[kernels] {name:5s} bit-identical to ggml's vec_dot: {row}")
    for b in bad:
        print("[kernels]   " + b)
    ok = all(a == b for a, b in stats.values())
    print(f"[kernels] {'PASS' if ok else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
