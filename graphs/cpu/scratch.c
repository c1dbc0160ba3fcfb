/*
 * graphs/cpu/scratch.c - the buffers of a CPU forward pass (struct
 * sd_fwd_buf), sized by sd_fwd_estimate, and the shares through which
 * graphs that never run at once use one set of them (graphs/forward.h).
 */
#include <assert.h>
#include <pthread.h>
#include <string.h>

#include "graphs/cpu/forward_internal.h"

/* The share's buffer sets, one per shape, each with its count of users. */
struct sd_fwd_share {
    pthread_mutex_t mu; /* prepares on a loader thread attach while the session's thread releases */
    struct sd_fwd_buf *bufs;
    size_t bytes;
};

/* ------------------------------------------------------------ buffers */

/* The floats of each float buffer of struct sd_fwd_buf (x, h, q, k, v, o,
 * gate, up, scores, rope_mem) for these arguments; returns the widest input
 * rounded up to a whole Q8_K block, which sizes the rows of every xq buffer. */
enum { FWD_FLOAT_BUFS = 10 };
static size_t buf_floats(const struct sd_model_config *c, int32_t max_rows, int32_t n_ctx, int n_threads,
                         size_t n[FWD_FLOAT_BUFS]) {
    const size_t R = (size_t)max_rows, d = (size_t)c->d_model, nq = (size_t)c->n_head * (size_t)c->head_dim;
    const size_t nkv = (size_t)c->n_head_kv * (size_t)c->head_dim, ff = (size_t)c->n_ff;
    const size_t sizes[FWD_FLOAT_BUFS] = {
        R * d,  R * SD_MAX(d, nq), R * nq, R * nkv, R * nkv, R * d, R * ff, R * ff,
        (size_t)n_threads * sd_attn_scratch(max_rows, n_ctx, c->head_dim, c->n_head / c->n_head_kv),
        ROPE_TABLES * R * ((size_t)c->head_dim + 1)};
    memcpy(n, sizes, sizeof sizes);
    return (SD_MAX(SD_MAX(d, nq), ff) + 255) / 256 * 256;
}

size_t sd_fwd_estimate(const struct sd_model *m, int32_t max_rows, int32_t n_ctx, int n_threads) {
    size_t n[FWD_FLOAT_BUFS], bytes = 0;
    const size_t wmax = buf_floats(&m->cfg, max_rows, n_ctx, n_threads, n);
    for (int i = 0; i < FWD_FLOAT_BUFS; i++) bytes += n[i] * sizeof(float);
    for (int i = 0; i < XQ_N; i++) bytes += sd_xq_row_bytes(i, (int64_t)wmax) * (size_t)max_rows;
    return bytes;
}

static void buf_free(struct sd_fwd_buf *b) {
    if (!b) return;
    float *bufs[] = {b->x, b->h, b->q, b->k, b->v, b->o, b->gate, b->up, b->scores, b->rope_mem};
    for (size_t i = 0; i < SD_ARRAY_LEN(bufs); i++) sd_aligned_free(bufs[i]);
    for (int i = 0; i < XQ_N; i++) sd_aligned_free(b->xq[i]);
    sd_free(b);
}

/* Allocate every buffer of a pass of max_rows rows over n_ctx slots:
 * exactly sd_fwd_estimate's bytes. NULL when out of memory. */
static struct sd_fwd_buf *buf_alloc(const struct sd_model_config *c, int32_t max_rows, int32_t n_ctx, int n_threads) {
    struct sd_fwd_buf *b = sd_calloc(1, sizeof *b);
    if (!b) return NULL;
    b->max_rows = max_rows;
    b->n_ctx = n_ctx;
    b->n_threads = n_threads;
    const size_t R = (size_t)max_rows;
    size_t sizes[FWD_FLOAT_BUFS];
    const size_t wmax = buf_floats(c, max_rows, n_ctx, n_threads, sizes);
    float **bufs[FWD_FLOAT_BUFS] = {&b->x, &b->h, &b->q, &b->k, &b->v, &b->o, &b->gate, &b->up, &b->scores, &b->rope_mem};
    for (size_t i = 0; i < FWD_FLOAT_BUFS; i++) {
        *bufs[i] = sd_aligned_alloc(sizes[i] * sizeof(float));
        if (!*bufs[i]) goto oom;
        memset(*bufs[i], 0, sizes[i] * sizeof(float));
        b->bytes += sizes[i] * sizeof(float);
    }
    for (int i = 0; i < ROPE_TABLES; i++) {
        b->rope[i].cs = b->rope_mem + (size_t)i * R * ((size_t)c->head_dim + 1);
        b->rope[i].pos = (int32_t *)(b->rope[i].cs + R * (size_t)c->head_dim);
    }
    for (int i = 0; i < XQ_N; i++) {
        b->xq_row[i] = sd_xq_row_bytes(i, (int64_t)wmax);
        b->xq[i] = sd_aligned_alloc(b->xq_row[i] * R);
        if (!b->xq[i]) goto oom;
        b->bytes += b->xq_row[i] * R;
    }
    return b;
oom:
    buf_free(b);
    return NULL;
}

/* The share's buffers for this shape, if it holds them (under its lock). */
static struct sd_fwd_buf *share_find(const struct sd_fwd_share *s, int32_t max_rows, int32_t n_ctx, int n_threads) {
    for (struct sd_fwd_buf *b = s->bufs; b; b = b->next)
        if (b->max_rows == max_rows && b->n_ctx == n_ctx && b->n_threads == n_threads) return b;
    return NULL;
}

/* Buffers for f: the share's of that shape (one more user), new ones added
 * to the share, or, without a share, f's own. */
struct sd_fwd_buf *sd_fwd_buf_get(struct sd_fwd *f, const struct sd_model_config *c) {
    struct sd_fwd_share *s = f->share;
    if (!s) return buf_alloc(c, f->max_rows, f->n_ctx, f->n_threads);
    pthread_mutex_lock(&s->mu);
    struct sd_fwd_buf *b = share_find(s, f->max_rows, f->n_ctx, f->n_threads);
    if (!b && (b = buf_alloc(c, f->max_rows, f->n_ctx, f->n_threads))) {
        b->next = s->bufs;
        s->bufs = b;
        s->bytes += b->bytes;
    }
    if (b) b->refs++;
    pthread_mutex_unlock(&s->mu);
    return b;
}

/* One user fewer; the last frees them. */
void sd_fwd_buf_put(struct sd_fwd_share *s, struct sd_fwd_buf *b) {
    if (!s) {
        buf_free(b);
        return;
    }
    pthread_mutex_lock(&s->mu);
    if (--b->refs == 0) {
        struct sd_fwd_buf **p = &s->bufs;
        while (*p != b) p = &(*p)->next;
        *p = b->next;
        s->bytes -= b->bytes;
        buf_free(b);
    }
    pthread_mutex_unlock(&s->mu);
}

/* ------------------------------------------------------------ shares */

int sd_fwd_share_create(struct sd_fwd_share **out, struct sd_err *err) {
    struct sd_fwd_share *s = *out = sd_calloc(1, sizeof *s);
    if (!s) return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for a scratch share");
    if (pthread_mutex_init(&s->mu, NULL)) {
        sd_free(s);
        *out = NULL;
        return sd_err_set(err, SDNPU_ERR_OOM, "cannot make a scratch share's lock");
    }
    return SDNPU_OK;
}

void sd_fwd_share_free(struct sd_fwd_share *s) {
    if (!s) return;
    assert(!s->bufs); /* every pass on it freed first */
    pthread_mutex_destroy(&s->mu);
    sd_free(s);
}

size_t sd_fwd_share_bytes(struct sd_fwd_share *s) {
    if (!s) return 0;
    pthread_mutex_lock(&s->mu);
    size_t n = s->bytes;
    pthread_mutex_unlock(&s->mu);
    return n;
}

size_t sd_fwd_share_need(struct sd_fwd_share *s, const struct sd_model *m, int32_t max_rows, int32_t n_ctx,
                         int n_threads) {
    if (s) {
        pthread_mutex_lock(&s->mu);
        bool held = share_find(s, max_rows, n_ctx, n_threads) != NULL;
        pthread_mutex_unlock(&s->mu);
        if (held) return 0;
    }
    return sd_fwd_estimate(m, max_rows, n_ctx, n_threads);
}
