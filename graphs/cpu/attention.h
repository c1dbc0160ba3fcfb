/*
 * graphs/cpu/attention.h - attention kernels of the CPU forward pass
 * (internal to graphs/cpu/).
 *
 * ggml's exp (the ggml order's attention and SiLU), and the fast-order
 * attention of one row (the default kernels, SD_KERNELS_FAST): for the nh
 * query heads that share one K/V head, over the keys the row sees, given in
 * position order. The order, fixed per output whatever the batch (so
 * speculative verification stays bit-identical to one-row decoding), and
 * the same in the scalar, AVX2 and AVX-512 code:
 *   - the keys are the cache's integer keys (graphs/kv.h, SD_KV_KEYS_I16):
 *     key i's levels k_i (at most 8,191) and scale ks_i; each head's q is
 *     quantized the same way (levels round(q * Q / amax) to nearest even,
 *     a NaN -Q; scale qs = amax / Q), Q = min(2,047, (2^31 - 1) /
 *     (8,191 head_dim)) so that no sum can overflow; then
 *     score_i = (float)(q' . k_i) * (ks_i * (qs * kscale)), the dot product
 *     an exact int32 sum (so its order is free);
 *   - reduce16 (used below) is t8[j] = l[j] + l[j+8], t4[j] = t8[j] + t8[j+4],
 *     t2[j] = t4[j] + t4[j+2], t2[0] + t2[1];
 *   - e_i = sd_attn_expf(score_i - max) (a degree-4 polynomial, not
 *     ggml's exponential: the p are rounded to bf16 below), their sum in 16
 *     lanes (lane i % 16, position ascending) and reduce16;
 *     p_i = e_i * (1 / sum);
 *   - p.V in bf16, as vdpbf16ps computes it: p_i rounded to bf16 (to
 *     nearest even; 0 below 2^-64), V the cache's bf16 values, each exact
 *     in fp16 too (graphs/kv.h, sd_kv_fast_v), and per
 *     output value d one f32 accumulator over the keys in pairs (i, i + 1)
 *     for even i, counted from the row's first key:
 *     acc = fma(p_{i+1}, v_{i+1}[d], acc), then fma(p_i, v_i[d], acc); a last
 *     key without a partner alone. Every product is exact in f32, and with p
 *     at least 2^-64 and V at least 2^-24 (fp16's least) every nonzero
 *     partial sum is a multiple of 2^-102: no step meets a denormal, so
 *     vdpbf16ps's flushes never act and plain fused multiply-adds give its
 *     bits where the CPU lacks it, at their old cost. (fast_accuracy
 *     measures it as accurate as p in f32 and V in fp16 on the Qwen
 *     models; docs/benchmarks.md, "p.V in bf16". Normalising after p.V
 *     instead, e_i rounded to bf16 and the sums divided by the sum, was
 *     less so: "Stop 84".)
 * Keys of 14 bits and queries of 12 are as accurate as fp16 keys and f32
 * queries on the Qwen models, where 8-bit keys are not (docs/benchmarks.md,
 * "Two routes measured", and "Integer keys").
 */
#ifndef SD_CPU_ATTENTION_H
#define SD_CPU_ATTENTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ggml_v_expf's AVX-512 form, one lane (bit for bit). */
float sd_expf(float x);
/* The fast order's softmax exponential of x <= 0 (rowmath.c says how):
 * within 3e-6 of exp(x) relatively down to x = -44, 0 below it, a NaN
 * a NaN. */
float sd_attn_expf(float x);
/* v[i] = sd_expf(v[i] - m) for i < n, eight lanes at a time where the
 * implementation is AVX2 (same bits). */
void sd_expf_sub(float *v, int32_t n, float m);
/* gate[i] = gate[i] / (1 + sd_expf(-gate[i])) * up[i] for i < n (SiLU as
 * ggml's SwiGLU computes it on whole vectors), eight lanes at a time where
 * the implementation is AVX2 (same bits: without it each fmaf of sd_expf
 * is a library call, a third of a prefill's time on the instruct models). */
void sd_silu_mul(float *gate, const float *up, int64_t n);

/* Whether p.V runs on the CPU's vdpbf16ps (AVX512_BF16, with the AVX-512
 * kernels) or on fused multiply-adds that give its bits: the former where
 * the CPU has it and, measured once a process (the first time asked), it
 * does more multiply-adds a second than they do; set either way by
 * sd_attn_set_bf16 (tests take both). Returns whether it is on. */
bool sd_attn_set_bf16(bool on);
bool sd_attn_bf16_active(void);
/* Whether the CPU and the AVX-512 kernels in use could run it. */
bool sd_attn_bf16_supported(void);

/* RMSNorm in the fast order: the squares fused into 16 lanes (lane i % 16,
 * i ascending), reduce16, scale = 1 / sqrtf(sum / n + eps), then
 * out[i] = in[i] * scale * w[i]. out may be in. */
void sd_rmsnorm_fast(float *out, const float *in, const float *w, int64_t n, float eps);

/* One row's attention for nh heads sharing a K/V head (see above).
 *   q:      [nh][hd] f32 (q scale already applied)
 *   k:      the layer's K/V head's key blocks (graphs/kv.h: the levels of
 *           the fast order's integer keys), their scales at ks[s]
 *   v:      slot s's V row (bf16) at v + s * stride
 *   slots:  [n] visible slots, position ascending (n >= 1)
 *   scores: scratch of nh * round_up(n, 16) + nh floats (each head's
 *           1 / sum follows the scores)
 *   out:    [nh][hd] */
void sd_attn_fast(const float *q, int32_t nh, int32_t hd, const int16_t *k, const float *ks,
                  const uint16_t *v, size_t stride, const int32_t *slots, int32_t n, float kscale,
                  float *scores, float *out);

/* sd_attn_fast in three steps, for threads that share one row: the scores
 * of keys [i0, i1) (any split: a key's score is its own), the softmax of
 * all n (one thread, after every score; p, or e and 1 / sum where the p.V
 * of heads of hd values makes p itself), then the output values [d0, d1)
 * of every head (multiples of 16: each value's sum is its own), into
 * out[h * hd + d]. Together they give sd_attn_fast's bits. */
void sd_attn_fast_scores(const float *q, int32_t nh, int32_t hd, const int16_t *k, const float *ks,
                         size_t stride, const int32_t *slots, int32_t n, int32_t i0, int32_t i1, float kscale,
                         float *scores);
void sd_attn_fast_softmax(float *scores, int32_t nh, int32_t hd, int32_t n);
void sd_attn_fast_pv(int32_t nh, int32_t hd, const uint16_t *v, size_t stride, const int32_t *slots, int32_t n,
                     const float *scores, int32_t d0, int32_t d1, float *out);

/* Rows that share a run of keys (a tile of a prefill chunk or of a
 * verification batch): row r's keys slots[a, a + m) are the same m slots
 * for every row. Each row's result is sd_attn_fast's, bit for bit; the
 * run's K and V rows are loaded and converted once for up to four rows. */
struct sd_attn_row {
    const float *q;         /* [nh][hd] */
    const int32_t *slots;   /* [n] visible slots, position ascending (n >= 1) */
    int32_t n, a;           /* the run is slots[a, a + m) */
    float *scores;          /* nh * round_up(n, 16) + nh floats */
    float *out;             /* [nh][hd] */
};
void sd_attn_fast_rows(const struct sd_attn_row *rows, int32_t n_rows, int32_t m, int32_t nh, int32_t hd,
                       const int16_t *k, const float *ks, const uint16_t *v, size_t stride, float kscale);

/* Whether a verification batch of a few rows is attended as one tile a K/V
 * head (sd_attn_fast_rows) rather than row by row: wherever the kernels
 * are vectorised (AVX2 and AVX-512), whose tile reads each key's K and V
 * rows once for all its rows and scores keys in lanes for all its pairs
 * (docs/benchmarks.md, "Attention in tiles on AVX2"; on AVX-512 since
 * "Stop 81": 3 rows over 4,000 keys of seven heads of 64 in 234 us as a
 * tile against 285 row by row, 4 rows 266 against 381). */
bool sd_attn_few_rows_tiled(int32_t hd);

#endif
