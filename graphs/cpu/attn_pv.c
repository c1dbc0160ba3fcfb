/* graphs/cpu/attn_pv.c - the fast order's p.V (graphs/cpu/attention.h): p in
 * bf16 times the cache's bf16 V in one f32 sum a value, keys in pairs, by fused
 * multiply-adds (C, AVX2, AVX-512) or vdpbf16ps, whichever is faster here
 * (attn_bf16.c; every path the same bits); one row's heads a pass over the
 * keys, or a tile's (row, head) pairs. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "graphs/cpu/attn_internal.h"

#include <math.h>
#include <string.h>

/* Value d of key i's V row. */
static float v_at(const uint16_t *v, size_t stride, const int32_t *slots, int32_t i, int32_t d) {
    return sd_bf16_to_fp32(v[(size_t)slots[i] * stride + d]);
}

static void pv_scalar(const float *p, int32_t nh, int32_t hd, int32_t d_begin, int32_t d_end,
                      const uint16_t *v, size_t stride, const int32_t *slots, int32_t n, size_t cap,
                      float *out) {
    for (int32_t h = 0; h < nh; h++)
        for (int32_t d = d_begin; d < d_end; d++) {
            const float *ph = p + (size_t)h * cap;
            float acc = out[(size_t)h * hd + d];
            for (int32_t i = 0; i < n; i += 2) {
                if (i + 1 < n) acc = fmaf(ph[i + 1], v_at(v, stride, slots, i + 1, d), acc);
                acc = fmaf(ph[i], v_at(v, stride, slots, i, d), acc);
            }
            out[(size_t)h * hd + d] = acc;
        }
}

#ifdef SD_X86
#define TGT2 __attribute__((target("avx2,fma,f16c")))

/* One row's AVX-512 p.V does some ten cycles of work a key, so sixteen
 * keys ahead is shorter than a trip to memory once the context outgrows
 * the caches; it asks 96 keys ahead. (The one-row pass after 2,048 tokens
 * measured 2-4% faster in alternated runs, near this machine's wander;
 * tiles of rows prefetch a block of keys ahead on their own.) */
enum { PF_KEYS_ONE_ROW = 96 };

/* p.V on AVX2, for one row's heads and for a tile's (row, head) pairs
 * alike: the V rows of a block of keys (PVB_KEYS, at most PVB_FLOATS
 * values on the stack) are converted to f32 once, then passes over the
 * block take G pairs of W vectors of eight values. Each accumulator is a
 * chain of fused multiply-adds that must run in the keys' order, so a
 * pass needs about eight chains or more to keep both FMA units busy past
 * their latency, and G W + W + 1 registers at most: six pairs of sixteen
 * values (twelve chains), and a group's last one or two pairs as many
 * values as make eight chains. One row's seven heads of 64 were two passes
 * of four heads (the eighth a repeat) over sixteen values each, each
 * converting the V rows again: docs/benchmarks.md, "One row's attention
 * on AVX2". Where the pairs are one group (one row's six heads of 128 on
 * the 1.5B), each value takes one pass anyway, so the passes read the
 * cache's bf16 rows themselves, without the staging's stores and reloads:
 * that p.V a quarter to a third faster from cache, the 1.5B's one-row step
 * after 4,000 tokens about 8% (docs/benchmarks.md, "Stop 79"). */
enum { PVB_KEYS = 64, PVB_FLOATS = 8192, PVB_PAIRS = 6 };

/* Eight bf16 values in f32 (exact: the bf16 bits are the f32's high half). */
TGT2 static inline __m256 cvt8(const uint16_t *p) {
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

/* Where a pass reads key i's values: the block's staged f32 rows (vf, ws
 * floats a key, from key i0), or, where v is set, the cache's bf16 row of
 * key run[i] from value d0. */
struct vsrc {
    const float *vf;
    int32_t ws, i0;
    const uint16_t *v;
    size_t stride;
    const int32_t *run;
    int32_t d0;
};

/* Key i's step for G pairs over W vectors of its values at s (half: the
 * cache's bf16 row, a constant where it is inlined). */
static inline __attribute__((always_inline, target("avx2,fma,f16c"))) void
pv_key8(int G, int W, bool half, const float *const *ph, int32_t i, const struct vsrc *s, __m256 (*acc)[8]) {
    __m256 vv[8];
#pragma GCC unroll 8
    for (int j = 0; j < W; j++)
        vv[j] = half ? cvt8(s->v + (size_t)s->run[i] * s->stride + (size_t)s->d0 + 8 * j)
                     : _mm256_loadu_ps(s->vf + (size_t)(i - s->i0) * (size_t)s->ws + 8 * j);
#pragma GCC unroll 6
    for (int g = 0; g < G; g++) {
        const __m256 pb = _mm256_set1_ps(ph[g][i]);
#pragma GCC unroll 8
        for (int j = 0; j < W; j++)
            acc[g][j] = _mm256_fmadd_ps(pb, vv[j], acc[g][j]);
    }
}

/* Keys [i0, i1) in the header's pairs: key i + 1, then key i. */
static inline __attribute__((always_inline, target("avx2,fma,f16c"))) void
pv_keys(int G, int W, bool half, const float *const *ph, const struct vsrc *s, int32_t i0, int32_t i1,
        __m256 (*acc)[8]) {
    int32_t i = i0;
    for (; i + 1 < i1; i += 2) {
        pv_key8(G, W, half, ph, i + 1, s, acc);
        pv_key8(G, W, half, ph, i, s, acc);
    }
    if (i < i1) pv_key8(G, W, half, ph, i, s, acc);
}

/* Keys [i0, i1) (i0 even; i1 - i0 even, or the last key alone) of G pairs
 * over W vectors: pair g's p at ph[g][i], its values at oh[g] (continuing
 * from them), the keys' values at s. */
static inline __attribute__((always_inline, target("avx2,fma,f16c"))) void
pv_chains(int G, int W, const float *const *ph, float *const *oh, const struct vsrc *s, int32_t i0,
          int32_t i1) {
    __m256 acc[PVB_PAIRS][8];
#pragma GCC unroll 6
    for (int g = 0; g < G; g++)
#pragma GCC unroll 8
        for (int j = 0; j < W; j++)
            acc[g][j] = _mm256_loadu_ps(oh[g] + 8 * j);
    if (s->v)
        pv_keys(G, W, true, ph, s, i0, i1, acc);
    else
        pv_keys(G, W, false, ph, s, i0, i1, acc);
#pragma GCC unroll 6
    for (int g = 0; g < G; g++)
#pragma GCC unroll 8
        for (int j = 0; j < W; j++)
            _mm256_storeu_ps(oh[g] + 8 * j, acc[g][j]);
}

/* pv_chains with G and W constants, for the shapes pv_pairs takes. */
TGT2 static void pv_chains_any(int G, int W, const float *const *ph, float *const *oh, const struct vsrc *s,
                               int32_t i0, int32_t i1) {
    switch (G * 16 + W) {
    case 6 * 16 + 2:
        pv_chains(6, 2, ph, oh, s, i0, i1);
        break;
    case 5 * 16 + 2:
        pv_chains(5, 2, ph, oh, s, i0, i1);
        break;
    case 4 * 16 + 2:
        pv_chains(4, 2, ph, oh, s, i0, i1);
        break;
    case 3 * 16 + 2:
        pv_chains(3, 2, ph, oh, s, i0, i1);
        break;
    case 2 * 16 + 4:
        pv_chains(2, 4, ph, oh, s, i0, i1);
        break;
    case 2 * 16 + 2:
        pv_chains(2, 2, ph, oh, s, i0, i1);
        break;
    case 1 * 16 + 8:
        pv_chains(1, 8, ph, oh, s, i0, i1);
        break;
    case 1 * 16 + 4:
        pv_chains(1, 4, ph, oh, s, i0, i1);
        break;
    default:
        pv_chains(1, 2, ph, oh, s, i0, i1);
        break;
    }
}

/* Keys [i0, i1) of np pairs over their values [0, wd) (a multiple of 16):
 * ps[p][i] pair p's p at key i, out[p] its values, at their values' first
 * (wd floats a key where staged). */
TGT2 static void pv_pairs(const float *const *ps, float *const *out, int32_t np, int32_t wd, struct vsrc at,
                          int32_t i0, int32_t i1) {
    for (int32_t p0 = 0; p0 < np; p0 += PVB_PAIRS) {
        const int32_t G = SD_MIN(PVB_PAIRS, np - p0), most = G == 1 ? 8 : G == 2 ? 4 : 2;
        for (int32_t d0 = 0; d0 < wd;) {
            const int32_t rest = (wd - d0) / 8, W = rest >= most ? most : rest >= 4 ? 4 : 2;
            float *oh[PVB_PAIRS];
            for (int32_t g = 0; g < G; g++)
                oh[g] = out[p0 + g] + d0;
            struct vsrc s = at;
            s.vf += d0;
            s.d0 += d0;
            pv_chains_any(G, W, ps + p0, oh, &s, i0, i1);
            d0 += 8 * W;
        }
    }
}

/* The values [d0, d0 + wd) of keys run[i0, i1) in f32 into vf (wd a key),
 * asking for the rows a block ahead (blk keys, of nrun). */
TGT2 static void v_block_f32(const uint16_t *v, size_t stride, const int32_t *run, int32_t i0, int32_t i1,
                             int32_t nrun, int32_t blk, int32_t d0, int32_t wd, float *vf) {
    for (int32_t i = i0; i < i1; i++) {
        const uint16_t *vr = v + (size_t)run[i] * stride + d0;
        sd_attn_pf_row(v, stride, sd_attn_pf_slot(run, i, blk, nrun), (size_t)d0 * 2, (size_t)(d0 + wd) * 2);
        for (int32_t d = 0; d < wd; d += 8)
            _mm256_store_ps(vf + (size_t)(i - i0) * wd + d, cvt8(vr + d));
    }
}

/* np pairs over keys run[0, nrun) (from an even index of every pair's
 * keys), their values [d0, d0 + wd): pair p's p at ps[p][i], its values at
 * out[p] (from d0), a block of keys (an even count) at a time. */
TGT2 static void pv_run_avx2(const float *const *ps, float *const *out, int32_t np, int32_t d0, int32_t wd,
                             const uint16_t *v, size_t stride, const int32_t *run, int32_t nrun) {
    _Alignas(32) float vf[PVB_FLOATS];
    const int32_t blk = SD_MIN(PVB_KEYS, PVB_FLOATS / wd) & ~1;
    const bool direct = np <= PVB_PAIRS; /* one group: each value read once either way */
    for (int32_t i0 = 0; i0 < nrun; i0 += blk) {
        const int32_t i1 = SD_MIN(nrun, i0 + blk);
        if (direct) {
            for (int32_t i = i0; i < i1; i++)
                sd_attn_pf_row(v, stride, sd_attn_pf_slot(run, i, blk, nrun), (size_t)d0 * 2,
                               (size_t)(d0 + wd) * 2);
        } else {
            v_block_f32(v, stride, run, i0, i1, nrun, blk, d0, wd, vf);
        }
        const struct vsrc at = {vf, wd, i0, direct ? v : NULL, stride, run, d0};
        pv_pairs(ps, out, np, wd, at, i0, i1);
    }
}

/* One row's p.V: its heads as pairs, T16_PAIRS at a time. */
TGT2 static void pv_avx2(const float *p, int32_t nh, int32_t hd, int32_t d_begin, int32_t d_end,
                         const uint16_t *v, size_t stride, const int32_t *slots, int32_t n, size_t cap,
                         float *out) {
    for (int32_t h0 = 0; h0 < nh; h0 += T16_PAIRS) {
        const int32_t hn = SD_MIN(T16_PAIRS, nh - h0);
        const float *ps[T16_PAIRS];
        float *po[T16_PAIRS];
        for (int32_t h = 0; h < hn; h++) {
            ps[h] = p + (size_t)(h0 + h) * cap;
            po[h] = out + (size_t)(h0 + h) * hd + d_begin;
        }
        pv_run_avx2(ps, po, hn, d_begin, d_end - d_begin, v, stride, slots, n);
    }
}

#define TGT5 __attribute__((target("avx512f,avx512vl,avx2,fma,f16c")))

/* AVX-512 with AVX512_BF16 (vdpbf16ps), for p.V only. */
#define ISA5B "avx512f,avx512vl,avx512bw,avx512bf16,avx2,fma,f16c"
#define AI5 static inline __attribute__((always_inline, target("avx512f,avx512vl,avx2,fma,f16c")))
#define TGT5B __attribute__((target(ISA5B)))
#define AI5B static inline __attribute__((always_inline, target(ISA5B)))

/* Sixteen bf16 values in f32 (exact). */
AI5 __m512 cvt16(const uint16_t *p) {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}

/* The accumulators of H output rows (or pairs) of W vectors, from and to
 * oh[h] + off + 16 j; the store leaves rows past hn alone. */
AI5 void acc_load(int H, int W, float *const *oh, int32_t off, __m512 (*acc)[4]) {
#pragma GCC unroll 16
    for (int h = 0; h < H; h++)
#pragma GCC unroll 4
        for (int j = 0; j < W; j++)
            acc[h][j] = _mm512_loadu_ps(oh[h] + off + 16 * j);
}

AI5 void acc_store(int H, int hn, int W, float *const *oh, int32_t off, __m512 (*acc)[4]) {
#pragma GCC unroll 16
    for (int h = 0; h < H; h++)
#pragma GCC unroll 4
        for (int j = 0; j < W; j++)
            if (h < hn) _mm512_storeu_ps(oh[h] + off + 16 * j, acc[h][j]);
}

/* Key i's step without vdpbf16ps: its V values [0, 16 W) (at vr) into H
 * heads' accumulators. */
AI5 void pv_key_512(int H, int W, const float *const ph[8], int32_t i, const uint16_t *vr, __m512 acc[8][4]) {
    __m512 vz[4];
#pragma GCC unroll 4
    for (int j = 0; j < W; j++)
        vz[j] = cvt16(vr + 16 * j);
#pragma GCC unroll 8
    for (int h = 0; h < H; h++) {
        const __m512 pb = _mm512_set1_ps(ph[h][i]);
#pragma GCC unroll 4
        for (int j = 0; j < W; j++)
            acc[h][j] = _mm512_fmadd_ps(pb, vz[j], acc[h][j]);
    }
}

/* W vectors of 16 output values of H heads (H W <= 16 accumulators;
 * missing heads repeat the first and are not stored), over every key in
 * the header's pairs, continuing from out's values. */
AI5 void pv_chunk_avx512(int H, int W, const float *const ph[8], int32_t hn, const uint16_t *v, size_t stride,
                         const int32_t *slots, int32_t n, float *const oh[8]) {
    __m512 acc[8][4];
    acc_load(H, W, oh, 0, acc);
    int32_t i = 0;
    for (; i + 1 < n; i += 2) {
        sd_attn_pf_row_l2(v, stride, sd_attn_pf_slot(slots, i, PF_KEYS_ONE_ROW, n), 0, (size_t)W * 32);
        sd_attn_pf_row_l2(v, stride, sd_attn_pf_slot(slots, i + 1, PF_KEYS_ONE_ROW, n), 0, (size_t)W * 32);
        pv_key_512(H, W, ph, i + 1, v + (size_t)slots[i + 1] * stride, acc);
        pv_key_512(H, W, ph, i, v + (size_t)slots[i] * stride, acc);
    }
    if (i < n) pv_key_512(H, W, ph, i, v + (size_t)slots[i] * stride, acc);
    acc_store(H, hn, W, oh, 0, acc);
}

/* vdpbf16ps's operand of two keys' V values [0, 16): dword d holds key 0's
 * value d (low half) and key 1's (high half; zero where solo), the cache's
 * bf16 words interleaved by one vpermt2w. (With fp16 rows each pair took
 * two conversions to f32, one to bf16 and a permutation: one row of six
 * heads of 128 over 4,000 keys 100 -> 94 us; docs/benchmarks.md, "Stop
 * 83".) */
AI5B __m512bh v_pair_bf16(const uint16_t *r0, const uint16_t *r1, bool solo) {
    const __m256i a = _mm256_loadu_si256((const __m256i *)r0);
    if (solo) return (__m512bh)_mm512_cvtepu16_epi32(a);
    const __m512i ilv = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7,
                                         38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    return (__m512bh)_mm512_permutex2var_epi16(
        _mm512_castsi256_si512(a), ilv, _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)r1)));
}

/* acc += the pairs of v times the dword at p broadcast: vdpbf16ps with an
 * embedded-broadcast memory operand (as the scores' dpwssd_bcast), where
 * GCC put a vpbroadcastd beside each one: a 4-row tile of six heads of 128
 * over 4,000 keys 379 -> 360 us on the Zen 4 (docs/benchmarks.md, "Stop
 * 81"). The products and their sum are the same whichever operand is
 * which. */
AI5B __m512 dpbf16_bcast(__m512 acc, __m512bh v, const uint32_t *p) {
#if defined(__OPTIMIZE__) && !defined(__SANITIZE_ADDRESS__)
    __asm__("vdpbf16ps %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(v), "m"(*p));
    return acc;
#else
    return _mm512_dpbf16_ps(acc, (__m512bh)_mm512_set1_epi32((int)*p), v);
#endif
}

/* The header's p of sixteen e: e * (1 / sum), zero below SD_ATTN_P_MIN,
 * as the softmax's scaling pass made them (rowmath.c's p_round before the
 * rounding, which vcvtne2ps2bf16 does the same way: to nearest even, a
 * NaN quiet). */
AI5 __m512 p_of(__m512 e, __m512 inv) { return sd_attn_p_min16(_mm512_mul_ps(e, inv)); }

/* p of 32 keys (e[0, nk) times inv; nk <= 32; keys past nk zero) as
 * vdpbf16ps takes them: dword j holds key 2j's p (low half) and key
 * 2j + 1's (high); a vector's word order is the keys' order: one
 * vcvtne2ps2bf16. */
AI5B __m512 p_pairs_of32(const float *e, int32_t nk, float inv) {
    const __mmask16 lo = (__mmask16)((1u << SD_MIN(16, nk)) - 1u),
                    hi = (__mmask16)((1u << SD_MAX(0, nk - 16)) - 1u);
    const __m512 s = _mm512_set1_ps(inv);
    return (__m512)_mm512_cvtne2ps_pbh(p_of(_mm512_maskz_loadu_ps(hi, e + 16), s),
                                       p_of(_mm512_maskz_loadu_ps(lo, e), s));
}

/* One row's p.V on vdpbf16ps, where it makes more than one pass over the
 * keys (a pass for each 16 W output values), takes them PV_SPAN at a time:
 * a span's p packed once (pack_span) for every pass, where each pass
 * packed its own (four on the 1.5B's heads of 128, two on the 0.5B's of
 * 64); one pass packs each 32 keys' p as it reaches them, which kept one
 * row's half of the 0.5B's values 6% cheaper than packing a span first.
 * 8 KiB of packed p a head group. */
enum { PV_SPAN = 512 };
typedef uint32_t pv_packed[8][PV_SPAN / 2];

/* The p of heads ph[0, H) (e, and 1 / sum at inv[h]) at keys [i, i + 32)
 * (those at or past i1 zero) as p_pairs_of32 gives them, head h's to
 * pk + h st.
 * Taken a pair at a time from the scores (two loads, shifts and a
 * broadcast from a general register), they were most of one row's p.V. */
AI5B void pack32(int H, const float *const ph[8], const float inv[8], int32_t i, int32_t i1, uint32_t *pk,
                 int32_t st) {
#pragma GCC unroll 8
    for (int h = 0; h < H; h++)
        _mm512_store_ps((float *)(pk + (size_t)h * st), p_pairs_of32(ph[h] + i, SD_MIN(32, i1 - i), inv[h]));
}

/* The p of keys [i0, i1) (i1 - i0 <= PV_SPAN), pk[h][j] the pair of keys
 * i0 + 2j and i0 + 2j + 1. */
TGT5B static void pack_span(int H, const float *const ph[8], const float inv[8], int32_t i0, int32_t i1,
                            pv_packed pk) {
    for (int32_t i = i0; i < i1; i += 32)
        pack32(H, ph, inv, i, i1, &pk[0][(i - i0) / 2], PV_SPAN / 2);
}

/* Keys 2j and 2j + 1 of pk's (head h's p at pk + h st; solo: 2j alone, r1
 * not read) on vdpbf16ps: one instruction takes both keys' products, odd
 * first, as the header's pair. */
AI5B void pv_pair_bf16(int H, int W, const uint32_t *pk, int32_t st, int32_t j, const uint16_t *r0,
                       const uint16_t *r1, bool solo, __m512 acc[8][4]) {
    __m512bh vz[4];
#pragma GCC unroll 4
    for (int w = 0; w < W; w++)
        vz[w] = v_pair_bf16(r0 + 16 * w, r1 + 16 * w, solo);
#pragma GCC unroll 8
    for (int h = 0; h < H; h++)
#pragma GCC unroll 4
        for (int w = 0; w < W; w++)
            acc[h][w] = dpbf16_bcast(acc[h][w], vz[w], pk + (size_t)h * st + j);
}

/* W vectors of 16 output values of H heads (oh[h], V from v) over keys
 * [i0, i1) of n, continuing from oh's values; heads past hn repeat the
 * first and are not stored. Their p packed at pk from key i0, or (pack)
 * packed here 32 keys at a time from ph and inv. */
AI5B void pv_keys_bf16(int H, int W, bool pack, const float *const ph[8], const float inv[8], pv_packed pk,
                       int32_t hn, const uint16_t *v, size_t stride, const int32_t *slots, int32_t i0,
                       int32_t i1, int32_t n, float *const oh[8]) {
    _Alignas(64) uint32_t own[8][16];
    uint32_t *const at = pack ? own[0] : pk[0];
    const int32_t st = pack ? 16 : PV_SPAN / 2;
    __m512 acc[8][4];
    acc_load(H, W, oh, 0, acc);
    for (int32_t b = i0; b < i1; b += 32) {
        const int32_t e = SD_MIN(i1, b + 32), j0 = pack ? 0 : (b - i0) / 2;
        if (pack) pack32(H, ph, inv, b, i1, at, st);
        int32_t i = b;
        for (; i + 1 < e; i += 2) {
            sd_attn_pf_row_l2(v, stride, sd_attn_pf_slot(slots, i, PF_KEYS_ONE_ROW, n), 0, (size_t)W * 32);
            sd_attn_pf_row_l2(v, stride, sd_attn_pf_slot(slots, i + 1, PF_KEYS_ONE_ROW, n), 0,
                              (size_t)W * 32);
            pv_pair_bf16(H, W, at, st, j0 + (i - b) / 2, v + (size_t)slots[i] * stride,
                         v + (size_t)slots[i + 1] * stride, false, acc);
        }
        if (i < e) { /* the last key alone: r1 is not read */
            const uint16_t *r0 = v + (size_t)slots[i] * stride;
            pv_pair_bf16(H, W, at, st, j0 + (i - b) / 2, r0, r0, true, acc);
        }
    }
    acc_store(H, hn, W, oh, 0, acc);
}

/* pv_keys_bf16 for the shapes pv_group_bf16 takes. */
TGT5B static void pv_keys_bf16_any(int H, int W, bool pack, const float *const ph[8], const float inv[8],
                                   pv_packed pk, int32_t hn, const uint16_t *v, size_t stride,
                                   const int32_t *slots, int32_t i0, int32_t i1, int32_t n,
                                   float *const oh[8]) {
#define PV_BF16_HW(h, w)                                                                                     \
    (pack ? pv_keys_bf16(h, w, true, ph, inv, pk, hn, v, stride, slots, i0, i1, n, oh)                       \
          : pv_keys_bf16(h, w, false, ph, inv, pk, hn, v, stride, slots, i0, i1, n, oh))
    if (W == 4)
        PV_BF16_HW(4, 4);
    else if (H == 4)
        PV_BF16_HW(4, 1);
    else if (W == 2)
        H == 8 ? PV_BF16_HW(8, 2) : H == 7 ? PV_BF16_HW(7, 2) : H == 6 ? PV_BF16_HW(6, 2) : PV_BF16_HW(5, 2);
    else
        H == 8 ? PV_BF16_HW(8, 1) : H == 7 ? PV_BF16_HW(7, 1) : H == 6 ? PV_BF16_HW(6, 1) : PV_BF16_HW(5, 1);
#undef PV_BF16_HW
}

/* Output values [d_begin, d_end) of heads [h0, h0 + hn) on vdpbf16ps:
 * passes of H heads (hn, five to eight; four with any missing repeating
 * the first) by W vectors as pv_avx512 takes them. */
TGT5B static void pv_group_bf16(int H, const float *p, const float *inv, int32_t h0, int32_t hn, int32_t hd,
                                int32_t d_begin, int32_t d_end, const uint16_t *v, size_t stride,
                                const int32_t *slots, int32_t n, size_t cap, float *out) {
    _Alignas(64) pv_packed pk;
    const float *ph[8];
    float ih[8], *oh[8];
    for (int32_t h = 0; h < H; h++) {
        const int32_t hh = h0 + (h < hn ? h : 0);
        ph[h] = p + (size_t)hh * cap, ih[h] = inv[hh];
    }
    const int wide = H == 4 ? 4 : 2; /* vectors a pass */
    const bool one_pass = d_end - d_begin <= 16 * wide;
    for (int32_t i0 = 0; i0 < n; i0 += one_pass ? n : PV_SPAN) {
        const int32_t i1 = one_pass ? n : SD_MIN(n, i0 + PV_SPAN);
        if (!one_pass) pack_span(H, ph, ih, i0, i1, pk);
        for (int32_t d0 = d_begin; d0 < d_end;) {
            const int W = d0 + 16 * wide <= d_end ? wide : 1;
            for (int32_t h = 0; h < H; h++)
                oh[h] = out + (size_t)(h0 + (h < hn ? h : 0)) * hd + d0;
            pv_keys_bf16_any(H, W, one_pass, ph, ih, pk, hn, v + d0, stride, slots, i0, i1, n, oh);
            d0 += 16 * W;
        }
    }
}

/* Output values [d0, d0 + 16 W) of heads [h0, h0 + hn) (hn <= H), with
 * fused multiply-adds. */
AI5 void pv_heads(int H, int W, const float *p, int32_t h0, int32_t hn, int32_t hd, int32_t d0,
                  const uint16_t *v, size_t stride, const int32_t *slots, int32_t n, size_t cap, float *out) {
    const float *ph[8];
    float *oh[8];
    for (int32_t h = 0; h < H; h++) {
        const int32_t hh = h0 + (h < hn ? h : 0);
        ph[h] = p + (size_t)hh * cap;
        oh[h] = out + (size_t)hh * hd + d0;
    }
    pv_chunk_avx512(H, W, ph, hn, v + d0, stride, slots, n, oh);
}

/* pv_heads for a group of hn heads, five to eight, with hn heads'
 * accumulators: a repeated head's multiply-adds cost a real one's (the
 * 1.5B's six heads, taken as eight, made a third more). */
AI5 void pv_heads_5to8(int W, const float *p, int32_t h0, int32_t hn, int32_t hd, int32_t d0,
                       const uint16_t *v, size_t stride, const int32_t *slots, int32_t n, size_t cap,
                       float *out) {
#define PV_HEADS(h) pv_heads(h, W, p, h0, hn, hd, d0, v, stride, slots, n, cap, out)
    hn == 8 ? PV_HEADS(8) : hn == 7 ? PV_HEADS(7) : hn == 6 ? PV_HEADS(6) : PV_HEADS(5);
#undef PV_HEADS
}

/* One row's p.V. Each pass over the keys reads V and converts it, so a
 * pass serves as many heads as the accumulators allow: up to eight heads
 * of 32 values (a head group of seven or six whole, where the threads
 * split a head's 64 values in two), else four of 64 or of 16. */
TGT5 static void pv_avx512(const float *p, const float *inv, int32_t nh, int32_t hd, int32_t d_begin,
                           int32_t d_end, const uint16_t *v, size_t stride, const int32_t *slots, int32_t n,
                           size_t cap, float *out) {
    const bool hw = sd_attn_bf16_active();
    int32_t h0 = 0;
    for (; nh - h0 > 4; h0 += 8) {
        const int32_t hn = SD_MIN(8, nh - h0);
        if (hw) {
            pv_group_bf16(hn, p, inv, h0, hn, hd, d_begin, d_end, v, stride, slots, n, cap, out);
            continue;
        }
        int32_t d0 = d_begin;
        for (; d0 + 32 <= d_end; d0 += 32)
            pv_heads_5to8(2, p, h0, hn, hd, d0, v, stride, slots, n, cap, out);
        for (; d0 < d_end; d0 += 16)
            pv_heads_5to8(1, p, h0, hn, hd, d0, v, stride, slots, n, cap, out);
    }
    for (; h0 < nh; h0 += 4) {
        const int32_t hn = SD_MIN(4, nh - h0);
        if (hw) {
            pv_group_bf16(4, p, inv, h0, hn, hd, d_begin, d_end, v, stride, slots, n, cap, out);
            continue;
        }
        int32_t d0 = d_begin;
        for (; d0 + 64 <= d_end; d0 += 64)
            pv_heads(4, 4, p, h0, hn, hd, d0, v, stride, slots, n, cap, out);
        for (; d0 < d_end; d0 += 16)
            pv_heads(4, 1, p, h0, hn, hd, d0, v, stride, slots, n, cap, out);
    }
}

/* A tile's rows share the keys of their run (sd_attn_fast_rows): each V
 * row of the run is loaded and converted once for up to sixteen (row, head)
 * pairs, taken in order from the flat list of every row's heads (so seven
 * heads of eight rows make 3.5 tiles, not four of which two are a
 * quarter empty), and each pair's sums take exactly the steps of the one-row
 * kernels above. The pairs' p are copied into tiles first, so that the
 * inner loops address them at fixed offsets from one pointer. */

struct tile {
    int32_t np, hd;
    const float *ps[16]; /* pair p's p (e, on vdpbf16ps) from the run's first key */
    float inv[16];       /* pair p's 1 / sum, on vdpbf16ps */
    float *out[16];      /* pair p's output values [hd] */
};

/* Key i of a block (pv_block): its V values [d0, d0 + 16 W) into the 4 R
 * pairs' accumulators. */
AI5 void pv_tile_key(int R, int W, int32_t i, const float pt[TILE_KEYS][16], const uint16_t *vr,
                     __m512 acc[16][4]) {
    __m512 vz[4];
#pragma GCC unroll 4
    for (int j = 0; j < W; j++)
        vz[j] = cvt16(vr + 16 * j);
#pragma GCC unroll 16
    for (int p = 0; p < 4 * R; p++) {
        const __m512 pb = _mm512_set1_ps(pt[i][p]);
#pragma GCC unroll 4
        for (int j = 0; j < W; j++)
            acc[p][j] = _mm512_fmadd_ps(pb, vz[j], acc[p][j]);
    }
}

/* out += p.V over a block of the run's keys for the tile's pairs, output
 * values [d_begin, d_end) 16 W at a time (4 R pairs, R and W constants:
 * R W <= 4 keeps the accumulators in registers), the keys in the header's
 * pairs (nk even: the run starts at an even index of every row's keys).
 * pt[i][v]: pair v's p at the block's key i. */
AI5 void pv_block(int R, int W, int32_t d_begin, int32_t d_end, float *const oh[16],
                  const float pt[TILE_KEYS][16], const uint16_t *v, size_t stride, const int32_t *run,
                  int32_t nk, int32_t nrun) {
    for (int32_t d0 = d_begin; d0 < d_end; d0 += 16 * W) {
        __m512 acc[16][4];
        acc_load(4 * R, W, oh, d0, acc);
        for (int32_t i = 0; i < nk; i += 2) {
            sd_attn_pf_row_l2(v, stride, sd_attn_pf_slot(run, i, TILE_KEYS, nrun), (size_t)d0 * 2,
                              (size_t)(d0 + 16 * W) * 2);
            sd_attn_pf_row_l2(v, stride, sd_attn_pf_slot(run, i + 1, TILE_KEYS, nrun), (size_t)d0 * 2,
                              (size_t)(d0 + 16 * W) * 2);
            pv_tile_key(R, W, i + 1, pt, v + (size_t)run[i + 1] * stride + d0, acc);
            pv_tile_key(R, W, i, pt, v + (size_t)run[i] * stride + d0, acc);
        }
        acc_store(4 * R, 4 * R, W, oh, d0, acc);
    }
}

/* pv_block on vdpbf16ps: pt2[j][v] is pair v's p at the block's keys 2j
 * and 2j + 1 as p_pairs_of32 packs them. */
AI5B void pv_block_bf16(int R, int W, int32_t d_begin, int32_t d_end, float *const oh[16],
                        const uint32_t pt2[TILE_KEYS / 2][16], const uint16_t *v, size_t stride,
                        const int32_t *run, int32_t nk, int32_t nrun) {
    for (int32_t d0 = d_begin; d0 < d_end; d0 += 16 * W) {
        __m512 acc[16][4];
        acc_load(4 * R, W, oh, d0, acc);
        for (int32_t i = 0; i < nk; i += 2) {
            sd_attn_pf_row_l2(v, stride, sd_attn_pf_slot(run, i, TILE_KEYS, nrun), (size_t)d0 * 2,
                              (size_t)(d0 + 16 * W) * 2);
            sd_attn_pf_row_l2(v, stride, sd_attn_pf_slot(run, i + 1, TILE_KEYS, nrun), (size_t)d0 * 2,
                              (size_t)(d0 + 16 * W) * 2);
            const uint16_t *r0 = v + (size_t)run[i] * stride + d0, *r1 = v + (size_t)run[i + 1] * stride + d0;
            __m512bh vz[4];
#pragma GCC unroll 4
            for (int j = 0; j < W; j++)
                vz[j] = v_pair_bf16(r0 + 16 * j, r1 + 16 * j, false);
#pragma GCC unroll 16
            for (int p = 0; p < 4 * R; p++)
#pragma GCC unroll 4
                for (int j = 0; j < W; j++)
                    acc[p][j] = dpbf16_bcast(acc[p][j], vz[j], &pt2[i / 2][p]);
        }
        acc_store(4 * R, 4 * R, W, oh, d0, acc);
    }
}

/* pt[i][p] = pair p's p at key i0 + i for i < nk (missing pairs and keys
 * 0): sixteen keys of sixteen pairs a sd_attn_transpose16. */
TGT5 static void pair_ps(const struct tile *t, int32_t i0, int32_t nk, float pt[][16]) {
    for (int32_t b = 0; b < nk; b += 16) {
        const __mmask16 mk = (__mmask16)((1u << SD_MIN(16, nk - b)) - 1u);
        __m512 r[16];
#pragma GCC unroll 16
        for (int p = 0; p < 16; p++)
            r[p] = p < t->np ? _mm512_maskz_loadu_ps(mk, t->ps[p] + i0 + b) : _mm512_setzero_ps();
        sd_attn_transpose16(r);
#pragma GCC unroll 16
        for (int e = 0; e < 16; e++)
            _mm512_store_ps(pt[b + e], r[e]);
    }
}

/* pt2[j][p] = pair p's p at keys i0 + 2j, i0 + 2j + 1 for 2j < nk, as
 * p_pairs_of32 makes them: one sd_attn_transpose16 for the block's 32
 * keys. */
TGT5B static void pair_ps_bf16(const struct tile *t, int32_t i0, int32_t nk, uint32_t pt2[][16]) {
    __m512 r[16];
#pragma GCC unroll 16
    for (int p = 0; p < 16; p++)
        r[p] = p < t->np ? p_pairs_of32(t->ps[p] + i0, nk, t->inv[p]) : _mm512_setzero_ps();
    sd_attn_transpose16(r);
#pragma GCC unroll 16
    for (int e = 0; e < 16; e++)
        _mm512_store_ps((float *)pt2[e], r[e]);
}

/* The tile's pairs over keys run[0, m) on vdpbf16ps (pv_tile). */
TGT5B static void pv_tile_bf16(const struct tile *t, float *const oh[16], const uint16_t *v, size_t stride,
                               const int32_t *run, int32_t m) {
    _Alignas(64) uint32_t pt2[TILE_KEYS / 2][16];
    const int32_t R = (t->np + 3) / 4;
    for (int32_t i0 = 0; i0 < m; i0 += TILE_KEYS) {
        const int32_t nk = SD_MIN(TILE_KEYS, m - i0);
        pair_ps_bf16(t, i0, nk, pt2);
        const int32_t *rk = run + i0, hd = t->hd, w32 = hd / 32 * 32, w64 = hd / 64 * 64;
        const int32_t nr = m - i0;
        if (R == 4)
            pv_block_bf16(4, 1, 0, hd, oh, pt2, v, stride, rk, nk, nr);
        else if (R == 3)
            pv_block_bf16(3, 1, 0, hd, oh, pt2, v, stride, rk, nk, nr);
        else if (R == 2)
            pv_block_bf16(2, 2, 0, w32, oh, pt2, v, stride, rk, nk, nr),
                pv_block_bf16(2, 1, w32, hd, oh, pt2, v, stride, rk, nk, nr);
        else
            pv_block_bf16(1, 4, 0, w64, oh, pt2, v, stride, rk, nk, nr),
                pv_block_bf16(1, 1, w64, hd, oh, pt2, v, stride, rk, nk, nr);
    }
}

/* The tile's pairs over keys run[0, m) (m even), in blocks of TILE_KEYS;
 * the smallest R (groups of four pairs) that holds them. */
TGT5 static void pv_tile(const struct tile *t, const uint16_t *v, size_t stride, const int32_t *run,
                         int32_t m) {
    _Alignas(64) float pt[TILE_KEYS][16];
    _Alignas(64) float junk[TILE_HD];
    float *oh[16];
    for (int32_t p = 0; p < 16; p++)
        oh[p] = p < t->np ? t->out[p] : junk;
    if (sd_attn_bf16_active()) {
        pv_tile_bf16(t, oh, v, stride, run, m);
        return;
    }
    const int32_t R = (t->np + 3) / 4;
    for (int32_t i0 = 0; i0 < m; i0 += TILE_KEYS) {
        const int32_t nk = SD_MIN(TILE_KEYS, m - i0);
        pair_ps(t, i0, nk, pt);
        const int32_t *rk = run + i0, hd = t->hd, w32 = hd / 32 * 32, w64 = hd / 64 * 64;
        const int32_t nr = m - i0;
        if (R == 4)
            pv_block(4, 1, 0, hd, oh, pt, v, stride, rk, nk, nr);
        else if (R == 3)
            pv_block(3, 1, 0, hd, oh, pt, v, stride, rk, nk, nr);
        else if (R == 2)
            pv_block(2, 2, 0, w32, oh, pt, v, stride, rk, nk, nr),
                pv_block(2, 1, w32, hd, oh, pt, v, stride, rk, nk, nr);
        else
            pv_block(1, 4, 0, w64, oh, pt, v, stride, rk, nk, nr),
                pv_block(1, 1, w64, hd, oh, pt, v, stride, rk, nk, nr);
    }
}

/* The run's p.V for every (row, head) pair of the rows whose run starts at
 * an index of parity par (sd_attn_pv_run_len's keys): sixteen pairs a tile
 * on AVX-512, six at a time on AVX2 (pv_run_avx2). */
void sd_attn_pv_run(enum sd_attn_impl im, const struct sd_attn_row *rows, int32_t n_rows, int32_t m,
                    int32_t par, int32_t nh, int32_t hd, const uint16_t *v, size_t stride) {
    const int32_t *run = rows[0].slots + rows[0].a + par, len = sd_attn_pv_run_len(m, par);
    int32_t last = -1;
    for (int32_t r = 0; r < n_rows; r++)
        if ((rows[r].a & 1) == par) last = r;
    if (len == 0 || last < 0) return;
    if (im != SD_ATTN_AVX512) {
        const float *ps[T16_PAIRS];
        float *out[T16_PAIRS];
        int32_t np = 0;
        for (int32_t r = 0; r <= last; r++)
            for (int32_t h = 0; h < nh && (rows[r].a & 1) == par; h++, np++) {
                ps[np] = rows[r].scores + (size_t)h * sd_attn_cap(rows[r].n) + (size_t)(rows[r].a + par);
                out[np] = rows[r].out + (size_t)h * hd;
            }
        pv_run_avx2(ps, out, np, 0, hd, v, stride, run, len);
        return;
    }
    struct tile t = {0, hd, {0}, {0}, {0}};
    for (int32_t r = 0; r <= last; r++) {
        if ((rows[r].a & 1) != par) continue;
        const size_t cap = sd_attn_cap(rows[r].n);
        for (int32_t h = 0; h < nh; h++) {
            t.ps[t.np] = rows[r].scores + (size_t)h * cap + (size_t)(rows[r].a + par);
            t.inv[t.np] = rows[r].scores[(size_t)nh * cap + (size_t)h];
            t.out[t.np] = rows[r].out + (size_t)h * hd;
            if (++t.np == 16 || (r == last && h == nh - 1)) {
                pv_tile(&t, v, stride, run, len);
                t.np = 0;
            }
        }
    }
}
#endif

/* out += p.V over keys slots[0, n), p at p[h * cap + i], for output
 * values [d_begin, d_end) of each head (multiples of 16 where im is SIMD). */
void sd_attn_pv_dims(enum sd_attn_impl im, const float *p, const float *inv, int32_t nh, int32_t hd,
                     int32_t d_begin, int32_t d_end, const uint16_t *v, size_t stride, const int32_t *slots,
                     int32_t n, size_t cap, float *out) {
#ifdef SD_X86
    if (im == SD_ATTN_AVX512) {
        pv_avx512(p, inv, nh, hd, d_begin, d_end, v, stride, slots, n, cap, out);
        return;
    }
    if (im == SD_ATTN_AVX2) {
        pv_avx2(p, nh, hd, d_begin, d_end, v, stride, slots, n, cap, out);
        return;
    }
#endif
    (void)im, (void)inv;
    pv_scalar(p, nh, hd, d_begin, d_end, v, stride, slots, n, cap, out);
}
