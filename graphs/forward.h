/*
 * graphs/forward.h - the model's forward pass on the CPU, written as
 * functions over a batch of rows so that the static-graph runtime runs these
 * same functions (a graph = a run of layers and a fixed row count).
 *
 * A row is one token at one position. It writes its K/V into one cache slot
 * and attends to a prefix of the cache [0, n_prefix) plus any set of slots of
 * its own batch (its ancestors in a draft tree; itself always). Causal
 * prefill is the special case n_prefix = slot + 1 with no extra slots.
 *
 * Batch invariance: every reduction for a row (norms, dot products,
 * attention) runs in a fixed order that does not depend on the other rows,
 * the row count, or the row's index, so a token's logits are bit-identical
 * whether it is decoded alone, in a prefill chunk, or in a verification tree.
 */
#ifndef SD_FORWARD_H
#define SD_FORWARD_H

#include <stdbool.h>
#include <stdint.h>

#include "base/base.h"
#include "graphs/pool.h"
#include "graphs/kv.h"
#include "graphs/model.h"

struct sd_fwd;

/* Scratch shared by the forward passes of graphs that never run at once
 * (one backend's graphs: runs come from the session's thread one at a
 * time, and a run leaves nothing in its scratch that the next one reads).
 * Passes of the same row count, context and thread count share one set of
 * buffers, freed with the last of them; a static accelerator runtime
 * shares activation memory across the graphs of one context the same way.
 * Thread-safe: a loader thread may create a pass on the share while the
 * session's thread runs or frees others. */
struct sd_fwd_share;
int sd_fwd_share_create(struct sd_fwd_share **out, struct sd_err *err);
/* Every pass on the share must be freed first. */
void sd_fwd_share_free(struct sd_fwd_share *s);
/* Bytes of the buffers the share holds now (NULL: 0). */
size_t sd_fwd_share_bytes(struct sd_fwd_share *s);
/* Bytes creating a pass of this shape on s would allocate now: 0 when s
 * holds buffers of that shape, else sd_fwd_estimate (s NULL: the latter). */
size_t sd_fwd_share_need(struct sd_fwd_share *s, const struct sd_model *m, int32_t max_rows, int32_t n_ctx,
                         int n_threads);

/* A pass for batches of up to max_rows rows and a context of n_ctx slots;
 * all memory of the token loop is allocated here, or taken from share
 * (NULL: the pass's own buffers). */
int sd_fwd_create(const struct sd_model *m, int32_t max_rows, int32_t n_ctx, struct sd_pool *pool,
                  struct sd_fwd_share *share, struct sd_fwd **out, struct sd_err *err);
void sd_fwd_free(struct sd_fwd *f);
/* The bytes of a pass's buffers for these arguments. */
size_t sd_fwd_estimate(const struct sd_model *m, int32_t max_rows, int32_t n_ctx, int n_threads);
/* The bytes the pass holds on its own: its buffers', or 0 on a share. */
size_t sd_fwd_bytes(const struct sd_fwd *f);
/* Attention and RMSNorm in sdnpu's own order (graphs/cpu/attention.h; the fast kernels)
 * instead of ggml's (the default of a new sd_fwd). */
void sd_fwd_set_fast_order(struct sd_fwd *f, bool on);

/* x: [n_rows][d_model], the residual stream, owned by f. */
float *sd_fwd_x(struct sd_fwd *f);

/* Diagnostics: a process-wide hook that sees each intermediate of the
 * forward pass (named as llama.cpp's graph names them, so the two can be
 * compared op by op; tools/trace_dump.c). NULL unless a tool sets it; set it
 * before any session runs. */
typedef void (*sd_fwd_trace_fn)(void *ud, const char *name, int32_t il, const float *data, int32_t n_rows,
                                int32_t width);
void sd_fwd_set_trace(sd_fwd_trace_fn fn, void *ud);

/* Run layers [l0, l1) over the batch; base is the slot of batch-relative
 * ancestor index 0 (see struct sd_row). */
void sd_fwd_layers(struct sd_fwd *f, struct sd_kv_cache *kv, const struct sd_row *rows, int32_t n_rows, int32_t base,
                   int32_t l0, int32_t l1);

/* The host-side attention step of a layer, for backends that run the
 * projections elsewhere: takes the Q/K/V projections (before biases,
 * QK-norm and RoPE) in sd_fwd_q/k/v [n_rows][n_head*head_dim or kv_dim],
 * applies those, writes real rows' K/V into the cache, and leaves the
 * attention output in sd_fwd_h [n_rows][n_head*head_dim]. Call
 * sd_kv_mark_rows once per batch before the first layer. */
void sd_fwd_attention(struct sd_fwd *f, struct sd_kv_cache *kv, const struct sd_row *rows, int32_t n_rows, int32_t base,
                      int32_t il);
float *sd_fwd_q(struct sd_fwd *f);
float *sd_fwd_k(struct sd_fwd *f);
float *sd_fwd_v(struct sd_fwd *f);
float *sd_fwd_h(struct sd_fwd *f);

/* Final norm and output projection for the rows listed in which[0..n_which):
 * logits [n_which][n_vocab], and where argmax is not NULL each row's
 * greedy token argmax[n_which] (base/base.h's sd_amax), taken a piece of
 * SD_FWD_HEAD_PIECE columns at a time while the piece is in cache. With
 * pieces not NULL (sd_fwd_head_piece_bytes of scratch) and a packed output
 * weight, the logits are not kept: each piece is computed into the
 * thread's part of the scratch, and logits is not written. */
#define SD_FWD_HEAD_PIECE 1024
/* With cert_outputs > 0 (the head's outputs) the scratch holds a
 * certified argmax's too (graphs/cert.h): the output weight's cert is then
 * used where the pieces are given. */
size_t sd_fwd_head_piece_bytes(int n_threads, int32_t n_rows, int64_t cert_outputs);
void sd_fwd_logits(struct sd_fwd *f, const int32_t *which, int32_t n_which, float *logits, int32_t *argmax,
                   float *pieces);
/* The same logits for a top-k sampler: exact for every token that can be
 * among a row's k best and for keep[0, n_keep), -infinity for the rest
 * where the output weight has a certificate and pieces are given (its
 * scratch), every logit otherwise. */
void sd_fwd_logits_topk(struct sd_fwd *f, const int32_t *which, int32_t n_which, float *logits, int32_t k,
                        const int32_t *keep, int32_t n_keep, float *pieces);

/* What attention's p.V runs on in the fast order (graphs/cpu/attention.h):
 * the CPU's vdpbf16ps, or the fused multiply-adds that give its bits where
 * the CPU has no AVX512_BF16 or, measured once a process (the first time
 * asked), they are the faster. */
enum sd_pv_path { SD_PV_FMA, SD_PV_BF16, SD_PV_FMA_FASTER };
enum sd_pv_path sd_fwd_pv_path(void);

#endif
