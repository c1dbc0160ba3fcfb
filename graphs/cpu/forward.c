/*
 * graphs/cpu/forward.c - the CPU implementation of graphs/forward.h: a
 * pass created over its buffers, and its entry points, which run a
 * layer as projections (matjobs.c) between row jobs (rowjobs.c) and the
 * attention (attnjobs.c). What the files share is in
 * graphs/cpu/forward_internal.h.
 */
#include "graphs/forward.h"

#include <assert.h>
#include <string.h>

#include "graphs/cpu/attention.h"
#include "graphs/cpu/forward_internal.h"

/* ------------------------------------------------------------ create */

int sd_fwd_create(const struct sd_model *m, int32_t max_rows, int32_t n_ctx, struct sd_pool *pool,
                  struct sd_fwd_share *share, struct sd_fwd **out, struct sd_err *err) {
    *out = NULL;
    if (max_rows <= 0 || max_rows > SD_MAX_BATCH_ROWS)
        return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "batch of %d rows: must be 1..%d", max_rows, SD_MAX_BATCH_ROWS);
    if (m->cfg.head_dim > SD_ROPE_MAX_HD)
        return sd_err_set(err, SDNPU_ERR_UNSUPPORTED, "head dimension %d: at most %d", m->cfg.head_dim, SD_ROPE_MAX_HD);
    sd_gelu_init();
    struct sd_fwd *f = sd_calloc(1, sizeof *f);
    if (!f) return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for forward scratch");
    const struct sd_model_config *c = &m->cfg;
    f->m = m;
    f->pool = pool;
    f->share = share;
    f->max_rows = max_rows;
    f->n_ctx = n_ctx;
    f->n_threads = sd_pool_n_threads(pool);
    f->d = c->d_model;
    f->hd = c->head_dim;
    f->nq = c->n_head * c->head_dim;
    f->nkv = c->n_head_kv * c->head_dim;
    f->n_ff = c->n_ff;
    struct sd_fwd_buf *b = f->buf = sd_fwd_buf_get(f, c);
    if (!b) {
        sd_free(f);
        return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for forward scratch (%d rows, %d context)", max_rows,
                          n_ctx);
    }
    f->amax = sd_calloc((size_t)f->n_threads * (size_t)max_rows, sizeof *f->amax);
    f->ranges = sd_aligned_alloc((size_t)f->n_threads * sizeof *f->ranges);
    if (!f->amax || !f->ranges) {
        sd_free(f->amax);
        sd_aligned_free(f->ranges);
        sd_fwd_buf_put(share, b);
        sd_free(f);
        return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for forward scratch (%d rows)", max_rows);
    }
    assert(b->bytes == sd_fwd_estimate(m, max_rows, b->n_ctx, f->n_threads));
    f->x = b->x, f->h = b->h, f->q = b->q, f->k = b->k, f->v = b->v;
    f->o = b->o, f->gate = b->gate, f->up = b->up, f->scores = b->scores;
    memcpy(f->xq, b->xq, sizeof f->xq);
    memcpy(f->xq_row, b->xq_row, sizeof f->xq_row);
    *out = f;
    return SDNPU_OK;
}

void sd_fwd_free(struct sd_fwd *f) {
    if (!f) return;
    sd_fwd_buf_put(f->share, f->buf);
    sd_free(f->amax);
    sd_aligned_free(f->ranges);
    sd_free(f);
}

size_t sd_fwd_bytes(const struct sd_fwd *f) { return f->share ? 0 : f->buf->bytes; }
void sd_fwd_set_fast_order(struct sd_fwd *f, bool on) { f->fast_order = on; }

/* ------------------------------------------------------------ running */

static sd_fwd_trace_fn trace_fn;
static void *trace_ud;

void sd_fwd_set_trace(sd_fwd_trace_fn fn, void *ud) {
    trace_fn = fn;
    trace_ud = ud;
}

#define TRACE(name, il, data, n_rows, width)                                                                  \
    do {                                                                                                      \
        if (trace_fn) trace_fn(trace_ud, name, il, data, n_rows, width);                                     \
    } while (0)

float *sd_fwd_x(struct sd_fwd *f) { return f->x; }
float *sd_fwd_q(struct sd_fwd *f) { return f->q; }
float *sd_fwd_k(struct sd_fwd *f) { return f->k; }
float *sd_fwd_v(struct sd_fwd *f) { return f->v; }
float *sd_fwd_h(struct sd_fwd *f) { return f->h; }

/* How many of the slots the rows see from the cache's start hold their own
 * index as position (the committed context does): up to the largest
 * n_prefix. Each (row, K/V head) then takes its keys there as a range,
 * where it scanned every slot of the cache (16 scans a layer at 8 rows). */
static int32_t contiguous_prefix(const struct sd_kv_cache *kv, const struct sd_row *rows, int32_t n_rows) {
    int32_t want = 0;
    for (int32_t r = 0; r < n_rows; r++) want = SD_MAX(want, SD_MIN(rows[r].n_prefix, kv->n_ctx));
    int32_t s = 0;
    while (s < want && kv->slot_pos[s] == s) s++;
    return s;
}

void sd_fwd_attention(struct sd_fwd *f, struct sd_kv_cache *kv, const struct sd_row *rows, int32_t n_rows, int32_t base,
                      int32_t il) {
    struct layer_job J = {f, kv, rows, n_rows, base, il, NULL, false, NULL, 0, NULL, 0};
    J.rope = sd_rope_lookup(f, rows, n_rows, f->m->layers[il].rope_base, &J.rope_fill);
    J.contig = contiguous_prefix(kv, rows, n_rows);
    sd_run_rows(f, sd_qkv_post_run, &J, (int64_t)n_rows * f->nq * 4);
    TRACE("Qrope", il, f->q, n_rows, f->nq);
    TRACE("Krope", il, f->k, n_rows, f->nkv);
    if (sd_attn_split_wanted(&J, sd_pool_n_threads(f->pool))) {
        sd_attn_split(&J);
    } else {
        sd_pool_run(f->pool, sd_attn_run, &J);
    }
    TRACE("kqv_out", il, f->h, n_rows, f->nq);
}

void sd_fwd_layers(struct sd_fwd *f, struct sd_kv_cache *kv, const struct sd_row *rows, int32_t n_rows, int32_t base,
                   int32_t l0, int32_t l1) {
    const struct sd_model *m = f->m;
    sd_kv_mark_rows(kv, rows, n_rows);
    bool normed = false; /* f->h holds this layer's normed input, prepared (the last layer's residual job) */
    for (int32_t il = l0; il < l1; il++) {
        const struct sd_layer *L = &m->layers[il];
        struct layer_job J = {f, kv, rows, n_rows, base, il, NULL, false, NULL, 0, NULL, 0};
        const struct sd_weight *wqkv[3] = {&L->wq, &L->wk, &L->wv};
        TRACE("l_in", il, f->x, n_rows, f->d);
        if (!normed) {
            J.next_w = wqkv;
            J.n_next = 3;
            sd_run_rows(f, sd_attn_norm_run, &J, (int64_t)n_rows * f->d);
        }
        TRACE("attn_norm", il, f->h, n_rows, f->d);
        float *yqkv[3] = {f->q, f->k, f->v};
        sd_project(f, f->h, n_rows, 3, wqkv, yqkv, sd_prep_mask(wqkv, 3));
        TRACE("Qcur", il, f->q, n_rows, f->nq);
        TRACE("Kcur", il, f->k, n_rows, f->nkv);
        TRACE("Vcur", il, f->v, n_rows, f->nkv);
        sd_fwd_attention(f, kv, rows, n_rows, base, il);
        const struct sd_weight *wo[1] = {&L->wo};
        float *yo[1] = {f->o};
        sd_project(f, f->h, n_rows, 1, wo, yo, 0);
        TRACE("attn_out", il, f->o, n_rows, f->d);
        const struct sd_weight *wgu[2] = {&L->w_gate, &L->w_up};
        J.next_w = wgu;
        J.n_next = 2;
        sd_run_rows(f, sd_attn_residual_run, &J, (int64_t)n_rows * f->d * 2);
        TRACE("attn_post_norm", il, f->o, n_rows, f->d);
        TRACE("sa_out", il, f->x, n_rows, f->d);
        TRACE("ffn_norm", il, f->h, n_rows, f->d);
        float *ygu[2] = {f->gate, f->up};
        sd_project(f, f->h, n_rows, 2, wgu, ygu, sd_prep_mask(wgu, 2));
        TRACE("ffn_gate", il, f->gate, n_rows, f->n_ff);
        TRACE("ffn_up", il, f->up, n_rows, f->n_ff);
        const struct sd_weight *wd[1] = {&L->w_down};
        const int64_t act_work = (int64_t)n_rows * f->n_ff * 8;
        const bool act_rows = n_rows >= sd_rows_threads(f, act_work);
        J.next_w = wd;
        J.n_next = act_rows ? 1 : 0;
        sd_run_rows(f, sd_ffn_act_run, &J, act_work);
        TRACE("ffn_act", il, f->gate, n_rows, f->n_ff);
        float *yd[1] = {f->o};
        sd_project(f, f->gate, n_rows, 1, wd, yd, act_rows ? sd_prep_mask(wd, 1) : 0);
        TRACE("ffn_out", il, f->o, n_rows, f->d);
        /* The next layer's input norm, prepared for its q/k/v, in the same job. */
        normed = il + 1 < l1;
        const struct sd_layer *N = normed ? &m->layers[il + 1] : NULL;
        const struct sd_weight *wqkv_next[3] = {N ? &N->wq : NULL, N ? &N->wk : NULL, N ? &N->wv : NULL};
        J.next_w = wqkv_next;
        J.n_next = 3;
        J.next_norm = N ? &N->attn_norm : NULL;
        sd_run_rows(f, sd_ffn_residual_run, &J, (int64_t)n_rows * f->d);
        TRACE("ffn_post_norm", il, f->o, n_rows, f->d);
        TRACE("l_out", il, f->x, n_rows, f->d);
    }
}

/* The wanted rows of f->x, normed, into f->h: the head's input. */
static void head_input(struct sd_fwd *f, const int32_t *which, int32_t n_which) {
    for (int32_t i = 0; i < n_which; i++)
        sd_norm(f, f->h + (size_t)i * (size_t)f->d, f->x + (size_t)which[i] * (size_t)f->d, f->m->output_norm.data,
                f->d);
    TRACE("result_norm", -1, f->h, n_which, f->d);
}

/* The head's job over f->h, its input prepared (pieces: a packed head's). */
static struct head_job head_job_of(struct sd_fwd *f, int32_t n_which, float *logits, float *pieces) {
    const struct sd_weight *w = &f->m->output;
    unsigned done = 0;
    struct head_job h = {.mm = {.n = 1, .n_rows = n_which, .ranges = f->ranges, .w = {w}, .y = {logits}},
                         .amax = f->amax,
                         .pieces = w->packed ? pieces : NULL};
    h.mm.xq[0] = sd_prep_input(f, w, f->h, n_which, &h.mm.xq_row[0], &done);
    return h;
}

void sd_fwd_logits_topk(struct sd_fwd *f, const int32_t *which, int32_t n_which, float *logits, int32_t k,
                        const int32_t *keep, int32_t n_keep, float *pieces) {
    if (n_which <= 0) return;
    head_input(f, which, n_which);
    struct head_job h = head_job_of(f, n_which, logits, pieces);
    if (sd_head_topk(&h, f->pool, k, keep, n_keep)) return;
    const struct sd_weight *w[1] = {h.mm.w[0]};
    float *y[1] = {logits};
    sd_project(f, f->h, n_which, 1, w, y, ~0u); /* every logit: the input is prepared already */
}

void sd_fwd_logits(struct sd_fwd *f, const int32_t *which, int32_t n_which, float *logits, int32_t *argmax,
                   float *pieces) {
    const struct sd_model *m = f->m;
    if (n_which <= 0) return;
    head_input(f, which, n_which);
    const struct sd_weight *w[1] = {&m->output};
    float *y[1] = {logits};
    if (!argmax) {
        sd_project(f, f->h, n_which, 1, w, y, 0);
        return;
    }
    struct head_job h = head_job_of(f, n_which, logits, pieces);
    if (!sd_head_certified(&h, f->pool)) sd_head_run(&h, f->pool);
    /* Each thread's argmax covers the columns it took (sd_head_run). */
    for (int32_t r = 0; r < n_which; r++) {
        struct sd_amax a = f->amax[r];
        for (int t = 1; t < f->n_threads; t++) sd_amax_merge(&a, &f->amax[(size_t)t * (size_t)n_which + (size_t)r]);
        argmax[r] = sd_amax_index(&a);
    }
}

enum sd_pv_path sd_fwd_pv_path(void) {
    if (sd_attn_bf16_active()) return SD_PV_BF16;
    return sd_attn_bf16_supported() ? SD_PV_FMA_FASTER : SD_PV_FMA;
}
