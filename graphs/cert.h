/*
 * graphs/cert.h - a certified argmax for a packed q8_0 or q6_K head: a
 * copy of its rows in a smaller type of the same activation class (q5_0,
 * q4_K) and one margin a row, with which greedy decoding and verification
 * compute most of the head from 31-35% fewer bytes and stay bit-identical.
 *
 * Why: the output projection is the largest weight of a small model (the
 * 0.5B's q8_0 head is 145 MB of the ~400 MB a one-row pass streams), and
 * a greedy pass needs only each row's argmax. For activations x (one row,
 * prepared as graphs/packed.h prepares them: x~ = dx * q per block) the
 * packed kernel's logit E_j of output j and the q5_0 copy's A_j satisfy
 *     |E_j - A_j| <= ||x~|| * c_j,
 *     c_j = (||w_j - w'_j|| + g (||w_j|| + ||w'_j||)) (1 + 2^-10)
 * (w_j the q8_0 row dequantized, w'_j the copy's, g = (nb + 4) 2^-23 for
 * nb blocks): Cauchy-Schwarz for the weights' difference, and for each
 * product's float rounding, which is at most (nb + 1) 2^-24 times
 * sum_b |<w_b, x_b>| <= ||w|| ||x~|| (graphs/packed.h's order: one rounded
 * scale product and one fused multiply-add a block). So every j whose
 * upper bound A_j + m_j is below the best lower bound max_i (A_i - m_i)
 * is below the exact maximum, and the exact argmax (its first index, as
 * base/base.h's sd_amax takes it) is among the others: the candidates,
 * whose rows of the exact head are then computed by the same kernel.
 * Lossless by construction; what it saves depends on how few candidates
 * there are (docs/benchmarks.md: a median of 21 of 151,936 on the 0.5B's
 * own summaries). Where the bound cannot be trusted (a non-finite scale,
 * logit or margin) the caller runs the whole head.
 *
 * A q6_K head (the 1.5B's: 191 MB) has a q4_K copy (131 MB). Its kernels
 * take a block's 256 values in sub-blocks with integer scales, so the
 * rounding term is bounded by the magnitudes of the terms each adds, at
 * its depth (graphs/cert.c's margin_q6): for q6_K ||w_j|| ||x~||, for
 * q4_K (||w+_j|| + ||w-_j||) ||x~||, w+ the copy's scaled values and w-
 * its mins, each exact; and the copy's float dequantization adds its own
 * rounding to ||w_j - w'_j||.
 *
 * A top-k sampler reads no more than each row's k best logits (and the
 * logits of the tokens a repetition penalty changes): a group whose upper
 * bound is below the k-th largest group lower bound holds none of them,
 * so only the others are computed exactly and the rest left at -infinity
 * (graphs/graph.h's sd_graph_run_topk); the sampler draws the same token.
 *
 * Layout of a certificate (sd_cert_bytes): the copy's rows packed as
 * graphs/packed.h packs them (the copy and the head read the same
 * prepared activations), then c_j as floats, one per output of the packed
 * groups.
 */
#ifndef SD_CERT_H
#define SD_CERT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "graphs/quant.h"

/* Heads of at most this many rows use a certificate (sd_cert_max_rows for
 * a type; this the largest). At 8 rows the q5_0 copy's arithmetic has
 * caught up with the bytes it saves where the 8-row q5_0 kernel runs below
 * the VNNI peak (Zen 4: the 0.5B's 8-row head 4.59 ms exact, 4.62
 * certified), and still saves them where it runs at the peak (Emerald
 * Rapids: the 8-row pass 1.2-1.4 ms cheaper, 7%); 16 rows would not pay on
 * either (docs/benchmarks.md). */
#define SD_CERT_MAX_ROWS 8
/* Top-k runs certify k up to this: the k-th best group's lower bound sits
 * lower as k grows, and at 40 (a sampler's default) a quarter of the groups
 * are candidates, which costs what the copy saves (docs/benchmarks.md). */
#define SD_CERT_MAX_TOPK 20

/* The most rows a head of type t certifies: SD_CERT_MAX_ROWS for q8_0, 1
 * for q6_K, whose q4_K copy leaves some 480 candidate groups a row on the
 * 1.5B's summaries (10 MB of exact rows against the 60 MB it saves): a
 * 4-row pass took 40 ms certified against 36.5 exact (docs/benchmarks.md). */
int32_t sd_cert_max_rows(enum sd_type t);
/* Whether a packed head of type t and n_in inputs can have a certificate. */
bool sd_cert_supported(enum sd_type t, int64_t n_in);
/* Bytes of the certificate of an [n_out][n_in] head (0: not supported). */
size_t sd_cert_bytes(enum sd_type t, int64_t n_out, int64_t n_in);
/* Groups [g0, g1) of the certificate (outputs 16 g0 .. 16 g1) from the
 * head's GGUF rows (row o at src + o * row_bytes) into cert, with scratch
 * of sd_cert_scratch_bytes (a pool thread must not allocate): threads may
 * build disjoint ranges at once, each with its own scratch. */
size_t sd_cert_scratch_bytes(enum sd_type t, int64_t n_in);
void sd_cert_build(enum sd_type t, const void *src, size_t row_bytes, int64_t n_out, int64_t n_in, void *cert,
                   int64_t g0, int64_t g1, void *scratch);
/* The margins c [groups * 16]. */
const float *sd_cert_margins(enum sd_type t, const void *cert, int64_t n_out, int64_t n_in);
/* The copy's approximate logits of outputs [out_begin, out_end), as
 * sd_packed_matmul gives the head's (the same prepared activations). */
void sd_cert_matmul(enum sd_type t, const void *cert, int64_t n_out, int64_t n_in, const void *xq,
                    size_t xq_row_bytes, int64_t n_rows, float *y, size_t y_stride, int64_t out_begin,
                    int64_t out_end);
/* ||x~|| of an activation row prepared for type t (sd_packed_quantize_act),
 * rounded up; not finite where a scale is not. */
float sd_cert_act_norm(enum sd_type t, const void *xq, int64_t n_in);

/* n approximate logits a of one row from a group's start (n a whole number
 * of groups but at the head's end), their margins c and the row's norm xn:
 * the largest lower bound so far into *best_lo, each group's largest upper
 * bound into gmax[0 ..] and, where glo is not NULL, its largest lower bound
 * into glo[0 ..]. False where a bound is not finite (the caller runs the
 * whole head then). */
bool sd_cert_scan(const float *a, const float *c, float xn, int64_t n, float *best_lo, float *gmax, float *glo);

#endif /* SD_CERT_H */
