/*
 * graphs/cpu/forward_internal.h - what the files of the CPU forward pass
 * share (internal to graphs/cpu/; graphs/forward.h is the face).
 *
 * The pass is split by idea: forward.c creates a pass and runs its entry
 * points; scratch.c owns the buffers and their sharing between graphs;
 * matjobs.c prepares activations and runs the projections; rowjobs.c runs
 * the per-row work between them (norms, RoPE, residuals, activation);
 * attnjobs.c deals the batch's attention out to the threads; kernels.c
 * holds the row kernels they call, in ggml's order where the conformance
 * tests compare against ggml.
 */
#ifndef SD_CPU_FORWARD_INTERNAL_H
#define SD_CPU_FORWARD_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "graphs/forward.h"

/* Activation buffers, one per form that weights ask for: quantized to the
 * weight type's vec_dot type, or (F16/BF16 weights) floats rounded to the
 * weight's precision, as ggml converts activations for half-precision
 * weights; F32 weights read the floats directly. Packed weights
 * (graphs/packed.h) read their own three classes. */
enum { XQ_Q8_0, XQ_Q8_1, XQ_Q8_K, XQ_F16, XQ_BF16, XQ_P32, XQ_PK, XQ_PF, XQ_N };

/* RoPE's rotations of a batch's rows for one base (sd_rope_table's values),
 * kept from the layer that computed them for the later layers of the pass
 * with the same base, and for the pass's later blocks (whose graphs share
 * these buffers): Gemma 3 has two bases, and a pass of 18 layers computed
 * the same tables 18 times. A run reads them only when everything
 * sd_rope_table reads is the same. */
enum { ROPE_TABLES = 2 };
struct rope_tables {
    bool valid;
    float base, scale;
    const float *factors;
    int32_t n;
    int32_t *pos; /* [max_rows] */
    float *cs;    /* [max_rows][hd] */
};

/* The buffers a forward pass writes: everything of a run but the weights.
 * A run leaves nothing in them that the next run reads (the backends copy
 * the residual stream in and out; the RoPE tables are read only where
 * their key matches), so graphs that never run at once can share one:
 * those of one backend with the same row count and context do, through
 * struct sd_fwd_share. */
struct sd_fwd_buf {
    int32_t max_rows, n_ctx, n_threads;
    int refs;
    float *x;      /* [max_rows][d] residual stream */
    float *h;      /* [max_rows][max(d, nq)] normed input, attention output */
    float *q;      /* [max_rows][nq] */
    float *k;      /* [max_rows][nkv] */
    float *v;      /* [max_rows][nkv] */
    float *o;      /* [max_rows][d] projection output */
    float *gate;   /* [max_rows][n_ff] */
    float *up;     /* [max_rows][n_ff] */
    void *xq[XQ_N]; /* [max_rows][row bytes of max(d, nq, n_ff) in that type] */
    size_t xq_row[XQ_N];
    float *scores; /* [n_threads][sd_attn_scratch(...)]: see sd_attn_run */
    float *rope_mem; /* the tables' floats: [ROPE_TABLES][max_rows][hd + 1] */
    struct rope_tables rope[ROPE_TABLES];
    int rope_next; /* the table a new key takes */
    size_t bytes;
    struct sd_fwd_buf *next; /* on its share's list */
};

/* A graph's forward pass: its model (weights) bound to a set of buffers,
 * whose pointers it copies so that the kernels read them in one step. */
struct sd_fwd {
    const struct sd_model *m;
    struct sd_pool *pool;
    int32_t max_rows, n_ctx, n_threads;
    int32_t d, nq, nkv, n_ff, hd;
    float *x, *h, *q, *k, *v, *o, *gate, *up, *scores; /* buf's, as in struct sd_fwd_buf */
    void *xq[XQ_N];
    size_t xq_row[XQ_N];
    struct sd_fwd_buf *buf;
    struct sd_fwd_share *share; /* NULL: buf is this pass's own */
    bool fast_order; /* attention and RMSNorm in graphs/cpu/attention.h's order, not ggml's */
    struct sd_amax *amax; /* [n_threads][max_rows]: each thread's part of the head's argmax */
    struct sd_ranges *ranges; /* [n_threads]: how columns are dealt (graphs/pool.h) */
};

/* Up to three projections of the same input, run as one pool job whose
 * output columns are split across the threads. */
struct mm_job {
    int n;
    int32_t n_rows;
    struct sd_ranges *ranges; /* the pass's: units of 16 columns, dealt (graphs/pool.h) */
    const struct sd_weight *w[3];
    const void *xq[3];
    size_t xq_row[3];
    float *y[3]; /* [n_rows][w->n_out] */
};

/* The head with each row's argmax (base/base.h) taken as its logits are
 * written: a thread's columns in pieces, each scanned while it is still in
 * cache. Scanned afterwards, 8 rows of 262,144 logits would come back from
 * memory, a visible part of a verification pass. Where no one reads the
 * logits (greedy verification), a piece goes to the thread's scratch
 * instead, which spares the pass writing them (8 MB at 8 rows). */
struct head_job {
    struct mm_job mm;
    struct sd_amax *amax; /* [nth][n_rows] */
    float *pieces;        /* NULL, or [nth][n_rows][PIECE_STRIDE] (matjobs.c) */
};

/* One layer's row jobs over a batch (rowjobs.c, attnjobs.c): the pass, the
 * cache, the rows, and what the jobs hand on. */
struct layer_job {
    struct sd_fwd *f;
    struct sd_kv_cache *kv;
    const struct sd_row *rows;
    int32_t n_rows, base, il;
    float *rope;    /* sd_qkv_post_run: the rows' RoPE tables, [n_rows][hd] */
    bool rope_fill; /* ... which it computes first */
    /* Row jobs that write the next projection's input prepare it for
     * these weights too (sd_prep_rows); sd_ffn_residual_run norms into h with
     * next_norm, the next layer's input norm, where given. */
    const struct sd_weight *const *next_w;
    int n_next;
    const struct sd_vec *next_norm;
    /* Attention: slots [0, contig) hold positions 0 .. contig - 1, so a
     * row's visible keys there are a range (sd_fwd_attention sets it). */
    int32_t contig;
};

/* ---------------------------------------------------- kernels.c */

/* The widest head a pass takes (sd_fwd_create refuses wider ones). */
#define SD_ROPE_MAX_HD 1024

/* Fills the GELU table once per process; before any pass runs. */
void sd_gelu_init(void);
/* The model's RMSNorm in the order of the pass's kernels. out may be in. */
void sd_norm(const struct sd_fwd *f, float *out, const float *in, const float *w, int64_t n);
/* RoPE's rotations for one position: cs [hd] (cos of pair i at i, sin at
 * hd / 2 + i); then one head of hd values rotated by them. */
void sd_rope_table(float *cs, int32_t hd, int32_t pos, float base, float freq_scale,
                   const float *freq_factors);
void sd_rope_head(float *x, int32_t hd, const float *cs, enum sd_rope_kind kind);
/* gate[i] = act(gate[i]) * up[i] for i in [b, e) of the batch's values. */
void sd_act_span(struct sd_fwd *f, int64_t b, int64_t e);

/* ggml's order of attention (kernels.c says how): sixteen lanes
 * a[i * stride] reduced; sixteen values replaced by ggml_expf(v - mx);
 * q . k over n values; out += p * v; the 64-lane accumulators
 * acc [64][n] folded into out [n]. */
float sd_reduce16(const float *a, size_t stride);
void sd_expf16(float *v, float mx);
float sd_dot64(const float *q, const float *k, int32_t n);
void sd_axpy(float *out, float p, const float *v, int32_t n);
void sd_fold64_rows(const float *acc, int32_t n, float *out);
/* Rows converted: dst[i] = fp16 rounding of src[i] * scale (dst may be
 * src); fp16 to f32; f32 to fp16, rounding to nearest even. */
void sd_fp16_round_scaled(float *dst, const float *src, float scale, int32_t n);
void sd_f16_to_f32_row(const uint16_t *src, float *dst, int32_t n);
void sd_f32_to_f16_row(const float *src, uint16_t *dst, int32_t n);

/* ---------------------------------------------------- scratch.c */

/* Buffers for f: its share's of that shape (one more user), new ones added
 * to the share, or, without a share, f's own. NULL when out of memory. */
struct sd_fwd_buf *sd_fwd_buf_get(struct sd_fwd *f, const struct sd_model_config *c);
/* One user fewer (share NULL: b is a pass's own); the last frees them. */
void sd_fwd_buf_put(struct sd_fwd_share *s, struct sd_fwd_buf *b);

/* ---------------------------------------------------- matjobs.c */

/* Bytes of one row of activation buffer i (XQ_*) for inputs of up to wmax
 * values (a whole number of 256). */
size_t sd_xq_row_bytes(int i, int64_t wmax);
/* x [n_rows][w->n_in] prepared for weight w unless *done_mask holds its
 * buffer already; returns the rows to hand to the matmul, *row_bytes apart. */
const void *sd_prep_input(struct sd_fwd *f, const struct sd_weight *w, const float *x, int32_t n_rows,
                          size_t *row_bytes, unsigned *done_mask);
/* Rows [rb, re) of x prepared for the weights w[0, n), by the row job that
 * wrote them; sd_prep_mask says which buffers that fills. */
void sd_prep_rows(const struct sd_fwd *f, const struct sd_weight *const *w, int n, const float *x,
                  int32_t n_rows, int64_t rb, int64_t re);
unsigned sd_prep_mask(const struct sd_weight *const *w, int n);
/* y_i = W_i x for up to three weights sharing the input x; the buffers in
 * done hold x prepared already. */
void sd_project(struct sd_fwd *f, const float *x, int32_t n_rows, int n, const struct sd_weight *const *w,
                float *const *y, unsigned done);
/* The whole head of h on the pool: each thread's argmax of the columns
 * it took into h->amax (and the logits into h->mm.y where h has no
 * pieces). */
void sd_head_run(struct head_job *h, struct sd_pool *pool);
/* The head's argmax into h->amax as sd_head_run takes it, certified
 * from the output weight's certificate (graphs/cert.h) where it has one
 * and h has pieces; false where it did not (the caller runs the job). */
bool sd_head_certified(struct head_job *h, struct sd_pool *pool);
/* The head's logits for a top-k sampler into h->mm.y[0] (graphs/forward.h's
 * sd_fwd_logits_topk), from the certificate where it has one, k <=
 * SD_CERT_MAX_TOPK and h has pieces; false where it did not (the caller
 * computes every logit). */
bool sd_head_topk(struct head_job *h, struct sd_pool *pool, int32_t k, const int32_t *keep, int32_t n_keep);

/* ---------------------------------------------------- rowjobs.c */

/* The RoPE tables of these rows for this base, kept or to be filled
 * (*fill) by sd_qkv_post_run; on the calling thread, before the run. */
float *sd_rope_lookup(struct sd_fwd *f, const struct sd_row *rows, int32_t n, float base, bool *fill);
/* Pool jobs over a struct layer_job: after q/k/v (biases, QK-norm, RoPE,
 * the K/V write); the input norm; the residual adds after attention and
 * after the FFN; the FFN's activation. */
void sd_qkv_post_run(void *ctx, int ith, int nth);
void sd_attn_norm_run(void *ctx, int ith, int nth);
void sd_attn_residual_run(void *ctx, int ith, int nth);
void sd_ffn_residual_run(void *ctx, int ith, int nth);
void sd_ffn_act_run(void *ctx, int ith, int nth);
/* The threads a row job of this much work runs on, and the job run so. */
int sd_rows_threads(const struct sd_fwd *f, int64_t work);
void sd_run_rows(struct sd_fwd *f, sd_pool_fn fn, void *ctx, int64_t work);

/* ---------------------------------------------------- attnjobs.c */

/* Floats of attention scratch per thread. */
size_t sd_attn_scratch(int32_t max_rows, int32_t n_ctx, int32_t hd, int32_t group);
/* The batch's attention into f->h: split per unit's keys across the
 * threads (sd_attn_split, on the calling thread, where
 * sd_attn_split_wanted), else sd_attn_run as a pool job. */
bool sd_attn_split_wanted(const struct layer_job *J, int nth);
void sd_attn_split(struct layer_job *J);
void sd_attn_run(void *ctx, int ith, int nth);

#endif
