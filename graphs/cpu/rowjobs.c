/*
 * graphs/cpu/rowjobs.c - the per-row work of a layer between its
 * projections, as pool jobs over struct layer_job: biases, QK-norm, RoPE
 * and the K/V write after q/k/v; the input norms; the residual adds; the
 * FFN's activation. A job that writes the next projection's input prepares
 * it there too (sd_prep_rows).
 */
#include "graphs/cpu/attention.h"
#include "graphs/cpu/forward_internal.h"

/* ------------------------------------------------------------ q, k, v */

/* The RoPE tables of this batch's rows for this layer's base: a kept one
 * whose key matches, else the next one, claimed for this key and to be
 * filled (*fill). On the calling thread, before the rows' run. */
float *sd_rope_lookup(struct sd_fwd *f, const struct sd_row *rows, int32_t n, float base, bool *fill) {
    struct sd_fwd_buf *b = f->buf;
    const float scale = f->m->cfg.rope_freq_scale;
    const float *factors = f->m->rope_freqs;
    for (int i = 0; i < ROPE_TABLES; i++) {
        struct rope_tables *t = &b->rope[i];
        if (!t->valid || t->base != base || t->scale != scale || t->factors != factors || t->n != n) continue;
        int32_t r = 0;
        while (r < n && t->pos[r] == rows[r].pos) r++;
        if (r == n) {
            *fill = false;
            return t->cs;
        }
    }
    struct rope_tables *t = &b->rope[b->rope_next];
    b->rope_next = (b->rope_next + 1) % ROPE_TABLES;
    *t = (struct rope_tables){true, base, scale, factors, n, t->pos, t->cs};
    for (int32_t r = 0; r < n; r++) t->pos[r] = rows[r].pos;
    *fill = true;
    return t->cs;
}

/* After q/k/v: biases, QK-norm, RoPE, and the K/V write into the cache. */
void sd_qkv_post_run(void *ctx, int ith, int nth) {
    struct layer_job *J = ctx;
    struct sd_fwd *f = J->f;
    const struct sd_model_config *c = &f->m->cfg;
    const struct sd_layer *L = &f->m->layers[J->il];
    int64_t rb, re;
    sd_split(J->n_rows, ith, nth, &rb, &re);
    for (int64_t r = rb; r < re; r++) {
        const struct sd_row *row = &J->rows[r];
        float *q = f->q + r * f->nq, *k = f->k + r * f->nkv, *v = f->v + r * f->nkv;
        if (L->bq.data) {
            for (int32_t i = 0; i < f->nq; i++) q[i] += L->bq.data[i];
            for (int32_t i = 0; i < f->nkv; i++) k[i] += L->bk.data[i];
            for (int32_t i = 0; i < f->nkv; i++) v[i] += L->bv.data[i];
        }
        float *cs = J->rope + r * f->hd;
        if (J->rope_fill) sd_rope_table(cs, f->hd, row->pos, L->rope_base, c->rope_freq_scale, f->m->rope_freqs);
        for (int32_t h = 0; h < c->n_head; h++) {
            float *qh = q + h * f->hd;
            if (L->q_norm.data) sd_norm(f, qh, qh, L->q_norm.data, f->hd);
            sd_rope_head(qh, f->hd, cs, c->rope_kind);
        }
        for (int32_t h = 0; h < c->n_head_kv; h++) {
            float *kh = k + h * f->hd;
            if (L->k_norm.data) sd_norm(f, kh, kh, L->k_norm.data, f->hd);
            sd_rope_head(kh, f->hd, cs, c->rope_kind);
        }
        if (row->token >= 0 && row->slot >= 0 && row->slot < J->kv->n_ctx)
            for (int32_t h = 0; h < c->n_head_kv; h++) {
                const size_t off = sd_kv_head_off(J->kv, J->il, h) + (size_t)row->slot * (size_t)f->hd;
                if (J->kv->keys == SD_KV_KEYS_I16) {
                    sd_kv_write_k(J->kv, J->il, h, row->slot, k + h * f->hd);
                    sd_kv_write_v(J->kv, J->il, h, row->slot, v + h * f->hd);
                } else {
                    sd_f32_to_f16_row(k + h * f->hd, J->kv->k + off, f->hd);
                    sd_f32_to_f16_row(v + h * f->hd, J->kv->v + off, f->hd);
                }
            }
    }
}

/* ------------------------------------------------ residuals, activation */

/* A block's output in f->o: its optional post-norm (Gemma), the residual
 * add, and, when next_norm is given, the next block's input norm into f->h
 * (prepared for J->next_w). */
static void residual_rows(struct layer_job *J, int ith, int nth, const struct sd_vec *post,
                          const struct sd_vec *next_norm) {
    struct sd_fwd *f = J->f;
    int64_t rb, re;
    sd_split(J->n_rows, ith, nth, &rb, &re);
    for (int64_t r = rb; r < re; r++) {
        float *x = f->x + r * f->d, *o = f->o + r * f->d;
        if (post->data) sd_norm(f, o, o, post->data, f->d);
        for (int32_t i = 0; i < f->d; i++) x[i] += o[i];
        if (next_norm) sd_norm(f, f->h + r * f->d, x, next_norm->data, f->d);
    }
    if (next_norm) sd_prep_rows(f, J->next_w, J->n_next, f->h, J->n_rows, rb, re);
}

void sd_attn_residual_run(void *ctx, int ith, int nth) {
    struct layer_job *J = ctx;
    const struct sd_layer *L = &J->f->m->layers[J->il];
    residual_rows(J, ith, nth, &L->post_attn_norm, &L->ffn_norm);
}

void sd_ffn_residual_run(void *ctx, int ith, int nth) {
    struct layer_job *J = ctx;
    residual_rows(J, ith, nth, &J->f->m->layers[J->il].post_ffn_norm, J->next_norm);
}

/* By rows, each prepared for the down projection, where the job has as
 * many rows as threads (J->n_next); else the values split evenly. */
void sd_ffn_act_run(void *ctx, int ith, int nth) {
    struct layer_job *J = ctx;
    struct sd_fwd *f = J->f;
    int64_t b, e;
    if (J->n_next) {
        sd_split(J->n_rows, ith, nth, &b, &e);
        sd_act_span(f, b * f->n_ff, e * f->n_ff);
        sd_prep_rows(f, J->next_w, J->n_next, f->gate, J->n_rows, b, e);
        return;
    }
    sd_split((int64_t)J->n_rows * f->n_ff, ith, nth, &b, &e);
    sd_act_span(f, b, e);
}

void sd_attn_norm_run(void *ctx, int ith, int nth) {
    struct layer_job *J = ctx;
    struct sd_fwd *f = J->f;
    const struct sd_layer *L = &f->m->layers[J->il];
    int64_t rb, re;
    sd_split(J->n_rows, ith, nth, &rb, &re);
    for (int64_t r = rb; r < re; r++) sd_norm(f, f->h + r * f->d, f->x + r * f->d, L->attn_norm.data, f->d);
    sd_prep_rows(f, J->next_w, J->n_next, f->h, J->n_rows, rb, re);
}

/* Small row jobs are not worth waking the workers for: the threads a row
 * job of this much work runs on. */
int sd_rows_threads(const struct sd_fwd *f, int64_t work) {
    return work < 4096 ? 1 : sd_pool_n_threads(f->pool);
}

void sd_run_rows(struct sd_fwd *f, sd_pool_fn fn, void *ctx, int64_t work) {
    if (sd_rows_threads(f, work) == 1) {
        fn(ctx, 0, 1);
    } else {
        sd_pool_run(f->pool, fn, ctx);
    }
}
