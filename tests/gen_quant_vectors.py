#!/usr/bin/env python3
"""Write tests/data/quant_vectors.bin: independent test vectors for graphs/quant.c.

The reference is gguf-py (the `gguf` package that ships with llama.cpp):
`gguf.quants.dequantize` for every type we read and `gguf.quants.quantize`
where gguf-py has a quantizer (F16 via numpy, BF16, Q4_0, Q4_1, Q5_0, Q5_1,
Q8_0; gguf-py documents its Q8_0 as bit-exact with ggml's reference).
gguf-py has no Q8_1 or Q8_K (the activation types); for those this script
carries a small numpy port of ggml's quantize_row_q8_1_ref and
quantize_row_q8_K_ref, written from the C, and says so in the record source.

Run with the test virtual environment:
    /work/testvenv/bin/python tests/gen_quant_vectors.py
(any Python with numpy and gguf works: `pip install gguf numpy`).

File format (little-endian):
    char     magic[4] = "SDQV"
    uint32   version  = 1
    uint32   n_records
    n_records times:
        uint32 kind      1 = DEQUANT: dequantize(bytes) must equal floats
                         2 = QUANT:   quantize(floats) must equal bytes
        uint32 type      ggml type id (same numbering as enum sd_type)
        uint32 n         number of elements
        uint32 n_bytes   size of the encoded row
        uint32 source    0 = gguf-py, 1 = numpy port of ggml's reference (here)
        uint8  bytes[n_bytes]
        float  floats[n]
The floats of a DEQUANT record are compared by bit pattern (NaNs included).
"""
import struct
import sys
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

DEQUANT, QUANT = 1, 2
SRC_GGUF, SRC_PORT = 0, 1

rng = np.random.default_rng(20240611)
records = []


def add(kind, qtype, floats, data, source=SRC_GGUF):
    floats = np.ascontiguousarray(floats, dtype=np.float32).ravel()
    data = np.ascontiguousarray(data, dtype=np.uint8).ravel()
    records.append((kind, int(qtype), floats, data, source))


def half_bytes(values):
    return np.asarray(values, dtype=np.float16).view(np.uint8)


def test_floats(n_blocks, block):
    """Random blocks with a spread of magnitudes, plus awkward blocks."""
    x = rng.standard_normal((n_blocks, block)).astype(np.float32)
    x *= np.float32(10.0) ** rng.integers(-3, 3, size=(n_blocks, 1)).astype(np.float32)
    x[0] = 0.0                                   # all zero: d = 0, id = 0
    x[1] = np.linspace(-1, 1, block)             # exact ties after scaling
    x[2, :] = -0.25
    x[2, 3] = -4.0                               # negative extreme
    x[3, :] = rng.integers(-127, 128, block)     # already integral
    x[4] = np.abs(x[4])                          # min > 0 (the _1 formats)
    x[5, 7] = -x[5].max() * 2                    # a tie in magnitude...
    x[5, 9] = -x[5, 7]                           # ...positive later: first wins
    return x


def raw_blocks(qtype, n_blocks):
    """Random bytes with the half-precision scale fields set to sane values."""
    block, size = quants.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    def halves(lo, hi):
        mag = np.float32(2.0) ** rng.uniform(lo, hi, n_blocks).astype(np.float32)
        sign = np.where(rng.random(n_blocks) < 0.5, -1, 1).astype(np.float32)
        return half_bytes(mag * sign).reshape(n_blocks, 2)
    if qtype in (T.Q4_0, T.Q5_0, T.Q8_0):
        raw[:, 0:2] = halves(-12, 0)
    elif qtype in (T.Q4_1, T.Q5_1):
        raw[:, 0:2] = halves(-12, 0)
        raw[:, 2:4] = halves(-8, 2)
    elif qtype in (T.Q4_K, T.Q5_K):
        raw[:, 0:2] = halves(-14, -2)
        raw[:, 2:4] = halves(-14, -2)
    elif qtype == T.Q6_K:
        raw[:, 208:210] = halves(-14, -4)
    return raw


# ---------------------------------------------------------------- F16 / BF16

bits = np.concatenate([
    rng.integers(0, 65536, 900, dtype=np.uint32),
    np.array([0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x7bff, 0x7c00, 0xfc00,
              0x7c01, 0x7e00, 0xfe00, 0x7fff, 0x3c00, 0xbc00, 0x3555], dtype=np.uint32),
]).astype(np.uint16)
add(DEQUANT, T.F16, quants.dequantize(bits.view(np.uint8), T.F16), bits.view(np.uint8))

f = np.concatenate([
    (rng.standard_normal(700) * np.float32(2.0) ** rng.integers(-30, 20, 700)).astype(np.float32),
    np.array([0.0, -0.0, 1.0, 65504.0, 65519.99, 65520.0, 1e9, -1e9, np.inf, -np.inf,
              2.0 ** -24, 2.0 ** -25, 2.0 ** -25 * 1.0000001, 3 * 2.0 ** -25, 2.0 ** -14,
              2.0 ** -14 - 2.0 ** -25, 1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, 1e-10],
             dtype=np.float32),
])
# numpy rounds to nearest even like F16C; NaNs are left out because numpy keeps
# a NaN's payload without setting the quiet bit, which F16C (and we) set.
with np.errstate(over="ignore"):  # 1e9 -> inf is one of the cases
    add(QUANT, T.F16, f, quants.quantize(f, T.F16).view(np.uint8))

bbits = rng.integers(0, 65536, 600, dtype=np.uint32).astype(np.uint16)
bbits[:6] = [0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x0001]
add(DEQUANT, T.BF16, quants.dequantize(bbits.view(np.uint8), T.BF16), bbits.view(np.uint8))
fb = np.concatenate([f, np.array([np.nan], dtype=np.float32),
                     np.array([0x7f800001, 0xffa00000, 0x3f808000, 0x3f818000], dtype=np.uint32).view(np.float32)])
add(QUANT, T.BF16, fb, quants.quantize(fb, T.BF16).view(np.uint8))

# ------------------------------------------------------- 32-element formats

for qt in (T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0):
    x = test_floats(16, 32)
    q = quants.quantize(x.reshape(1, -1), qt).view(np.uint8)
    add(QUANT, qt, x, q)
    add(DEQUANT, qt, quants.dequantize(q, qt), q)
    raw = raw_blocks(qt, 16).reshape(1, -1)
    add(DEQUANT, qt, quants.dequantize(raw, qt), raw)

# ---------------------------------------------------------------- K formats

for qt in (T.Q4_K, T.Q5_K, T.Q6_K):
    raw = raw_blocks(qt, 6).reshape(1, -1)
    add(DEQUANT, qt, quants.dequantize(raw, qt), raw)

# ------------------------------ activation formats: numpy port of ggml's _ref


def roundf(v):
    """C roundf: halves away from zero (exact on float32 input)."""
    a = np.abs(v)
    fl = np.floor(a)
    return np.sign(v) * (fl + (a - fl >= np.float32(0.5)))


def q8_1_ref(x):
    out = bytearray()
    for blk in x.reshape(-1, 32).astype(np.float32):
        amax = np.max(np.abs(blk))
        d = np.float32(amax / np.float32(127))
        idv = np.float32(1) / d if d != 0 else np.float32(0)
        qs = roundf(blk * idv).astype(np.int8)
        s = np.float32(np.float32(int(qs.astype(np.int32).sum())) * d)
        out += half_bytes([d]).tobytes() + half_bytes([s]).tobytes() + qs.tobytes()
    return np.frombuffer(bytes(out), dtype=np.uint8)


def q8_K_ref(x):
    out = bytearray()
    for blk in x.reshape(-1, 256).astype(np.float32):
        ax = np.abs(blk)
        amax = ax.max()
        if amax == 0:
            out += bytes(292)
            continue
        mx = blk[int(np.argmax(ax))]              # first index of the largest |x|
        iscale = np.float32(np.float32(-127) / mx)
        v = np.rint(iscale * blk)                 # nearest_int: ties to even
        qs = np.minimum(v, 127).astype(np.int8)
        bsums = qs.astype(np.int32).reshape(16, 16).sum(axis=1).astype(np.int16)
        d = np.float32(np.float32(1) / iscale)
        out += struct.pack("<f", d) + qs.tobytes() + bsums.tobytes()
    return np.frombuffer(bytes(out), dtype=np.uint8)


x = test_floats(16, 32)
add(QUANT, T.Q8_1, x, q8_1_ref(x), SRC_PORT)
xk = test_floats(6, 256)
add(QUANT, T.Q8_K, xk, q8_K_ref(xk), SRC_PORT)

# ------------------------------------------------------------------- write

out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "data" / "quant_vectors.bin"
out.parent.mkdir(parents=True, exist_ok=True)
with open(out, "wb") as fh:
    fh.write(b"SDQV" + struct.pack("<II", 1, len(records)))
    for kind, qtype, floats, data, source in records:
        fh.write(struct.pack("<5I", kind, qtype, floats.size, data.size, source))
        fh.write(data.tobytes())
        fh.write(floats.astype("<f4").tobytes())
print(f"{out}: {len(records)} records, {out.stat().st_size} bytes")
