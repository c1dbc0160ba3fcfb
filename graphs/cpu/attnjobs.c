/*
 * graphs/cpu/attnjobs.c - the batch's attention over the threads: the keys
 * each row sees, then its (row, head) pairs dealt out in ggml's order or,
 * in the fast order (graphs/cpu/attention.h), as tiles of rows or with one
 * row's keys split between the threads.
 *
 * Attention runs here, on the CPU side, against the KV cache: mobile NPU
 * engines keep attention over the growing cache off the static graph too
 * (the paper's footnote), because its length changes every step while the
 * projections and FFN have fixed shapes.
 */
#include <math.h>
#include <string.h>

#include "graphs/cpu/attention.h"
#include "graphs/cpu/forward_internal.h"

/* ------------------------------------------------------------ scratch */

/* Floats of attention scratch per thread, for up to `group` query heads
 * that share a K/V head (see sd_attn_run). One row (attend): per head its
 * scores indexed by key position (a span of up to n_ctx + max_rows, rounded
 * out to whole blocks of 16), 64 lane accumulators, the rounded q and its
 * maximum score; the slots by position; one K or V row converted to
 * floats. A tile of up to ATTN_TILE rows (attend_tile): per row its slots,
 * its heads' scores and q. (The fast order's heads' 1 / sum follow their
 * scores, inside the span's 32 spare floats a head.) */
enum { ATTN_TILE = 4 };

static size_t attn_span_cap(int32_t max_rows, int32_t n_ctx) { return (size_t)n_ctx + (size_t)max_rows + 32; }

static size_t attn_tile_row(int32_t max_rows, int32_t n_ctx, int32_t hd, int32_t group) {
    return ((size_t)group + 1) * attn_span_cap(max_rows, n_ctx) + (size_t)group * (size_t)hd;
}

size_t sd_attn_scratch(int32_t max_rows, int32_t n_ctx, int32_t hd, int32_t group) {
    const size_t one = ((size_t)group + 1) * attn_span_cap(max_rows, n_ctx) + (size_t)group * (65 * (size_t)hd + 1) + (size_t)hd;
    return SD_MAX(one, ATTN_TILE * attn_tile_row(max_rows, n_ctx, hd, group));
}

/* ------------------------------------------------------------ a row's keys */

/* The slots a row sees in this layer, by position: slot_of[p - base] for
 * the positions p in [base, base + span), -1 where the row sees none. */
struct visible {
    int32_t lo, base, span, n;
};

/* The first position row sees in this layer: a sliding window's start, or
 * 0. */
static int32_t first_visible(const struct layer_job *J, const struct sd_row *row) {
    const int32_t window = J->f->m->layers[J->il].swa ? J->f->m->cfg.swa_window : 0;
    return window ? SD_MAX(0, row->pos - window + 1) : 0;
}

static struct visible visible_slots(const struct layer_job *J, const struct sd_row *row, int32_t cap,
                                    int32_t *slot_of) {
    const struct sd_kv_cache *kv = J->kv;
    const int32_t n_pref = SD_MIN(row->n_prefix, kv->n_ctx);
    struct visible vis;
    /* The visible positions lie in [lo, row->pos]; index from lo's block. */
    vis.lo = first_visible(J, row);
    vis.base = vis.lo / 16 * 16;
    vis.span = row->pos - vis.base + 1;
    if (vis.span > cap - 16) vis.span = cap - 16; /* cannot happen: pos < n_ctx */
    vis.n = 0;
    for (int32_t i = 0; i < vis.span; i++) slot_of[i] = -1;
#define VISIT(slot_expr)                                                                                     \
    do {                                                                                                     \
        int32_t s_ = (slot_expr);                                                                            \
        int32_t kp_ = kv->slot_pos[s_];                                                                      \
        if (kp_ < vis.lo || kp_ > row->pos || kp_ - vis.base >= vis.span) break;                             \
        slot_of[kp_ - vis.base] = s_;                                                                        \
        vis.n++;                                                                                             \
    } while (0)
    for (int32_t s = 0; s < n_pref; s++) VISIT(s);
    for (int32_t j = 0; j < J->n_rows; j++)
        if (row->anc[j >> 6] >> (j & 63) & 1) {
            int32_t s = J->base + j;
            if (s >= n_pref && s < kv->n_ctx) VISIT(s);
        }
#undef VISIT
    return vis;
}

/* slot_of[0, span) without its gaps: the visible slots in position order;
 * returns their count. */
static int32_t compact_slots(int32_t *slot_of, int32_t span) {
    int32_t m = 0;
    for (int32_t i = 0; i < span; i++)
        if (slot_of[i] >= 0) slot_of[m++] = slot_of[i];
    return m;
}

/* The slots row sees in this layer, in position order, into list (cap
 * entries); returns their count: visible_slots and compact_slots, or where
 * its cache prefix is contiguous (J->contig) that prefix as a range and the
 * in-batch ancestors after it, which gives the same list without a pass
 * over every slot of the cache. */
static int32_t visible_list(const struct layer_job *J, const struct sd_row *row, int32_t cap, int32_t *list) {
    const struct sd_kv_cache *kv = J->kv;
    const int32_t n_pref = SD_MIN(row->n_prefix, kv->n_ctx);
    const int32_t lo = first_visible(J, row);
    const int32_t end = SD_MIN(n_pref, row->pos + 1); /* prefix positions [lo, end) */
    if (n_pref > J->contig || end - lo > cap - 16) goto scan;
    int32_t n = 0, last = end - 1;
    /* Four at a time in a vector (SSE2 on any x86-64): -O2 leaves the plain
     * loop at one store a slot, 2,048 a row and K/V head at 2,048 keys. */
    typedef int32_t v4i __attribute__((vector_size(16)));
    v4i v = {lo, lo + 1, lo + 2, lo + 3};
    const v4i four = {4, 4, 4, 4};
    for (; lo + n + 4 <= end; n += 4, v += four) memcpy(list + n, &v, sizeof v);
    for (; lo + n < end; n++) list[n] = lo + n;
    for (int32_t j = 0; j < J->n_rows; j++) {
        if (!(row->anc[j >> 6] >> (j & 63) & 1)) continue;
        const int32_t s = J->base + j;
        if (s < n_pref || s >= kv->n_ctx) continue;
        const int32_t kp = kv->slot_pos[s];
        if (kp < lo || kp > row->pos) continue;
        if (kp <= last || n >= cap - 16) goto scan; /* not after the prefix, in order: the general path */
        list[n++] = s;
        last = kp;
    }
    return n;
scan:;
    const struct visible vis = visible_slots(J, row, cap, list);
    return vis.n ? compact_slots(list, vis.span) : 0;
}

/* This layer's rows of K/V head kvh in the cache (kv->k or kv->v): a slot's
 * row every head_dim values; for the fast order, K's levels and scales. */
static const uint16_t *head_rows(const struct layer_job *J, const uint16_t *cache, int32_t kvh) {
    return cache + sd_kv_head_off(J->kv, J->il, kvh);
}
static const int16_t *key_levels(const struct layer_job *J, int32_t kvh) {
    return (const int16_t *)head_rows(J, J->kv->k, kvh);
}
static const float *key_scales(const struct layer_job *J, int32_t kvh) {
    return J->kv->k_scale + sd_kv_scale_off(J->kv, J->il, kvh);
}

/* The attention scale goes on q or on the scores, as the model says. */
static float attn_qscale(const struct sd_model_config *c) { return c->attn_scale_q ? c->attn_scale : 1.0f; }
static float attn_kscale(const struct sd_model_config *c) { return c->attn_scale_q ? 1.0f : c->attn_scale; }

/* ------------------------------------------------------- a row, a tile */

/* Attention for (row, head) pairs split across threads, in ggml's order
 * (see kernels.c). A row sees the prefix of the cache and its in-batch
 * ancestors; those keys have distinct positions, and everything is indexed
 * by position: scores, the softmax sum in blocks of 16 positions, and the
 * lane (position mod 64) that accumulates p.V. */
/* Attention of heads [h0, h0 + nh) of row r, which share one K/V head
 * (each K and V row is converted once for them all), on this thread's
 * scratch (sd_attn_scratch). */
static void attend(const struct layer_job *J, int32_t r, int32_t h0, int32_t nh, float *scratch) {
    struct sd_fwd *f = J->f;
    const struct sd_model_config *c = &f->m->cfg;
    const struct sd_kv_cache *kv = J->kv;
    const int32_t hd = f->hd, group = c->n_head / c->n_head_kv;
    const int32_t cap = (int32_t)attn_span_cap(f->max_rows, f->n_ctx);
    float *sc = scratch;                                                /* [group][cap] */
    int32_t *slot_of = (int32_t *)(sc + (size_t)group * (size_t)cap);   /* [cap] */
    float *acc = (float *)(slot_of + cap);                              /* [group][64][hd] */
    float *q16 = acc + (size_t)group * 64 * (size_t)hd;                 /* [group][hd] */
    float *mx = q16 + (size_t)group * (size_t)hd;                       /* [group] */
    float *kvrow = mx + group;                                          /* [hd] */
    const float qscale = attn_qscale(c), kscale = attn_kscale(c);
    const uint16_t *kl = head_rows(J, kv->k, h0 / group), *vl = head_rows(J, kv->v, h0 / group);
    const struct sd_row *row = &J->rows[r];
    float *out = f->h + (size_t)r * (size_t)f->nq + (size_t)h0 * (size_t)hd; /* [nh][hd] */
    memset(out, 0, (size_t)nh * (size_t)hd * sizeof(float));
    if (row->token < 0) return;
    const struct visible vis = visible_slots(J, row, cap, slot_of);
    const int32_t base = vis.base, span = vis.span;
    if (vis.n == 0) return;
    if (f->fast_order) {
        /* The visible slots in position order, then the fast kernels. */
        const int32_t m = compact_slots(slot_of, span);
        const float *qr = f->q + (size_t)r * (size_t)f->nq + (size_t)h0 * (size_t)hd;
        for (int32_t i = 0; i < nh * hd; i++) q16[i] = qr[i] * qscale;
        sd_attn_fast(q16, nh, hd, key_levels(J, h0 / group), key_scales(J, h0 / group), vl, (size_t)hd,
                     slot_of, m, kscale, sc, out);
        return;
    }
    sd_fp16_round_scaled(q16, f->q + (size_t)r * (size_t)f->nq + (size_t)h0 * (size_t)hd, qscale, nh * hd);
    /* Scores (masked positions -inf) and each head's maximum. */
    for (int32_t j = 0; j < nh; j++) mx[j] = -INFINITY;
    const int32_t nb = (span + 15) / 16;
    for (int32_t i = 0; i < nb * 16; i++) {
        if (i >= span || slot_of[i] < 0) {
            for (int32_t j = 0; j < nh; j++) sc[(size_t)j * cap + i] = -INFINITY;
            continue;
        }
        sd_f16_to_f32_row(kl + (size_t)slot_of[i] * (size_t)hd, kvrow, hd);
        for (int32_t j = 0; j < nh; j++) {
            const float v = sd_dot64(q16 + (size_t)j * hd, kvrow, hd) * kscale;
            sc[(size_t)j * cap + i] = v;
            if (v > mx[j]) mx[j] = v;
        }
    }
    /* exp, summed per block of 16 positions, blocks summed in double. */
    for (int32_t j = 0; j < nh; j++) {
        float *sj = sc + (size_t)j * cap;
        double sum = 0.0;
        for (int32_t b = 0; b < nb; b++) {
            sd_expf16(sj + 16 * b, mx[j]);
            sum += (double)sd_reduce16(sj + 16 * b, 1);
        }
        /* p, rounded to fp16 (masked positions are 0 and skipped below). */
        sd_fp16_round_scaled(sj, sj, (float)(1.0 / sum), span);
    }
    /* p rounded to fp16; p.V accumulated per lane (the key's position
     * mod 64), then fold64. */
    memset(acc, 0, (size_t)nh * 64 * (size_t)hd * sizeof(float));
    for (int32_t i = 0; i < span; i++) {
        if (slot_of[i] < 0) continue;
        sd_f16_to_f32_row(vl + (size_t)slot_of[i] * (size_t)hd, kvrow, hd);
        const size_t lane = (size_t)((base + i) & 63) * (size_t)hd;
        for (int32_t j = 0; j < nh; j++)
            sd_axpy(acc + (size_t)j * 64 * (size_t)hd + lane, sc[(size_t)j * cap + i], kvrow, hd);
    }
    for (int32_t j = 0; j < nh; j++) sd_fold64_rows(acc + (size_t)j * 64 * (size_t)hd, hd, out + (size_t)j * hd);
}

/* A tile's shared run (sd_attn_fast_rows): from the latest first position
 * among its rows, the slots that every row holds at the same offsets; sets
 * each row's start a. In a causal prefill chunk that is all of the first
 * row's keys; in a draft tree, the cache and the common ancestors. */
static int32_t shared_run(const struct sd_kv_cache *kv, struct sd_attn_row *rows, int32_t n) {
    int32_t p = 0;
    for (int32_t r = 0; r < n; r++) p = SD_MAX(p, kv->slot_pos[rows[r].slots[0]]);
    for (int32_t r = 0; r < n; r++) {
        int32_t a = 0;
        while (a < rows[r].n && kv->slot_pos[rows[r].slots[a]] < p) a++;
        rows[r].a = a;
    }
    /* The run's length: how far every row's slots agree with row 0's,
     * compared a block at a time (memcmp) where they agree, a slot at a time
     * at the end. */
    int32_t m = rows[0].n - rows[0].a;
    for (int32_t r = 1; r < n; r++) {
        const int32_t *x = rows[0].slots + rows[0].a, *y = rows[r].slots + rows[r].a;
        const int32_t lim = SD_MIN(m, rows[r].n - rows[r].a);
        int32_t i = 0;
        while (i + 64 <= lim && !memcmp(x + i, y + i, 64 * sizeof *x)) i += 64;
        while (i < lim && x[i] == y[i]) i++;
        m = i;
    }
    return m;
}

/* Row r's unit for K/V head kvh in the fast order, in the tile row at mem
 * (attn_tile_row floats): its output zeroed, its visible slots and its
 * scaled q. False where it attends to nothing (a padding row, no keys). */
static bool attn_unit(const struct layer_job *J, int32_t r, int32_t kvh, float *mem, struct sd_attn_row *u) {
    const struct sd_fwd *f = J->f;
    const struct sd_model_config *c = &f->m->cfg;
    const int32_t hd = f->hd, group = c->n_head / c->n_head_kv, h0 = kvh * group;
    const int32_t cap = (int32_t)attn_span_cap(f->max_rows, f->n_ctx);
    const struct sd_row *row = &J->rows[r];
    float *out = f->h + (size_t)r * (size_t)f->nq + (size_t)h0 * (size_t)hd;
    memset(out, 0, (size_t)group * (size_t)hd * sizeof(float));
    if (row->token < 0) return false;
    int32_t *slots = (int32_t *)(mem + (size_t)group * (size_t)cap); /* after the scores, [group][cap] */
    float *q = (float *)(slots + cap);                              /* [group][hd] */
    const int32_t n = visible_list(J, row, cap, slots);
    if (n == 0) return false;
    const float qscale = attn_qscale(c);
    const float *qr = f->q + (size_t)r * (size_t)f->nq + (size_t)h0 * (size_t)hd;
    for (int32_t i = 0; i < group * hd; i++) q[i] = qr[i] * qscale;
    *u = (struct sd_attn_row){q, slots, n, 0, mem, out};
    return true;
}

/* Fast-order attention of rows [r0, r0 + nr) for the query heads of K/V
 * head kvh, as one tile: each row's slots, scores and q in its part of
 * this thread's scratch (attn_tile_row). */
static void attend_tile(const struct layer_job *J, int32_t r0, int32_t nr, int32_t kvh, float *scratch) {
    struct sd_fwd *f = J->f;
    const struct sd_model_config *c = &f->m->cfg;
    const struct sd_kv_cache *kv = J->kv;
    const int32_t hd = f->hd, group = c->n_head / c->n_head_kv;
    const size_t per = attn_tile_row(f->max_rows, f->n_ctx, hd, group);
    struct sd_attn_row rows[ATTN_TILE];
    int32_t n = 0;
    for (int32_t r = r0; r < r0 + nr; r++) n += attn_unit(J, r, kvh, scratch + (size_t)n * per, &rows[n]);
    if (n == 0) return;
    const int32_t m = shared_run(kv, rows, n);
    sd_attn_fast_rows(rows, n, m, group, hd, key_levels(J, kvh), key_scales(J, kvh), head_rows(J, kv->v, kvh),
                      (size_t)hd, attn_kscale(c));
}

/* ------------------------------------------------------------ dispatch */

/* Rows in the fast order as nt tiles of consecutive rows (which share most
 * of their keys), each tile once for every K/V head, the (tile, head)
 * units dealt round-robin as sd_attn_run deals rows. */
static void attn_tiles(const struct layer_job *J, int ith, int nth, int64_t nt, float *scratch) {
    const int32_t L = J->n_rows, nkvh = J->f->m->cfg.n_head_kv;
    for (int64_t u = ith; u < nt * nkvh; u += nth) {
        const int64_t t = u / nkvh;
        const int32_t r0 = (int32_t)(t * L / nt), r1 = (int32_t)((t + 1) * L / nt);
        if (r1 > r0) attend_tile(J, r0, r1 - r0, (int32_t)(u % nkvh), scratch);
    }
}

/* A few rows over many keys, in the fast order, where the (row, K/V head)
 * units do not divide evenly between the threads (one K/V head, as
 * Gemma's, or more threads than units): each unit's keys split between the
 * threads for the scores, one softmax, then the output values split
 * between them for p.V. Where they divide, each thread takes whole units
 * (sd_attn_run): a K/V head's rows lie together in the cache, so a thread
 * reads its heads' keys and values once, in order, with one dispatch and
 * the softmax on every thread; the 0.5B's one-row attention after 4,096
 * tokens took 3.8-4.1 ms a pass so against 4.2-4.6 split, the 1.5B's 13.7
 * against 17.1 (passes alternated in one process). */
enum { SPLIT_MIN_KEYS = 128, SPLIT_MAX_UNITS = 32 };

struct split_job {
    struct layer_job *J;
    int32_t n;                             /* units */
    struct sd_attn_row u[SPLIT_MAX_UNITS]; /* q, slots, n, scores, out of each unit */
    int32_t kvh[SPLIT_MAX_UNITS];
};

static void split_scores_run(void *ctx, int ith, int nth) {
    struct split_job *S = ctx;
    const struct sd_fwd *f = S->J->f;
    const struct sd_model_config *c = &f->m->cfg;
    const float kscale = attn_kscale(c);
    for (int32_t i = 0; i < S->n; i++) {
        const struct sd_attn_row *u = &S->u[i];
        /* Whole key blocks a thread, as the cache holds them (graphs/kv.h). */
        int64_t b, e;
        sd_split((u->n + SD_KV_KEY_BLOCK - 1) / SD_KV_KEY_BLOCK, ith, nth, &b, &e);
        b *= SD_KV_KEY_BLOCK, e = SD_MIN(e * SD_KV_KEY_BLOCK, u->n);
        sd_attn_fast_scores(u->q, c->n_head / c->n_head_kv, f->hd, key_levels(S->J, S->kvh[i]),
                            key_scales(S->J, S->kvh[i]), (size_t)f->hd, u->slots, u->n, (int32_t)b,
                            (int32_t)e, kscale, u->scores);
    }
}

static void split_pv_run(void *ctx, int ith, int nth) {
    struct split_job *S = ctx;
    const struct sd_fwd *f = S->J->f;
    const struct sd_model_config *c = &f->m->cfg;
    int64_t b, e;
    sd_split(f->hd / 16, ith, nth, &b, &e);
    for (int32_t i = 0; i < S->n; i++) {
        const struct sd_attn_row *u = &S->u[i];
        sd_attn_fast_pv(c->n_head / c->n_head_kv, f->hd, head_rows(S->J, S->J->kv->v, S->kvh[i]),
                        (size_t)f->hd, u->slots, u->n, u->scores, (int32_t)(16 * b), (int32_t)(16 * e), u->out);
    }
}

/* Whether the batch's attention runs split (sd_attn_split): the fast order,
 * more than one thread, fewer units than sd_attn_run deals out in tiles and
 * not a whole number of them a thread (and no more than the threads'
 * scratch holds, a tile row each), and keys enough to pay for the second
 * dispatch. */
bool sd_attn_split_wanted(const struct layer_job *J, int nth) {
    const struct sd_fwd *f = J->f;
    const int64_t units = (int64_t)J->n_rows * f->m->cfg.n_head_kv;
    if (!f->fast_order || nth < 2 || units >= 4 * (int64_t)nth || units % nth == 0 ||
        units > (int64_t)nth * ATTN_TILE || units > SPLIT_MAX_UNITS || f->hd % 16)
        return false;
    for (int32_t r = 0; r < J->n_rows; r++)
        if (J->rows[r].token >= 0 && J->rows[r].pos >= SPLIT_MIN_KEYS) return true;
    return false;
}

/* Each unit's keys and q on the calling thread (the units' scratch is the
 * tiles' scratch of the threads, one tile row each), then the two runs. */
void sd_attn_split(struct layer_job *J) {
    struct sd_fwd *f = J->f;
    const struct sd_model_config *c = &f->m->cfg;
    const int32_t group = c->n_head / c->n_head_kv;
    const size_t per = attn_tile_row(f->max_rows, f->n_ctx, f->hd, group);
    struct split_job S = {.J = J};
    for (int32_t r = 0; r < J->n_rows; r++)
        for (int32_t kvh = 0; kvh < c->n_head_kv; kvh++)
            if (attn_unit(J, r, kvh, f->scores + (size_t)S.n * per, &S.u[S.n])) S.kvh[S.n++] = kvh;
    if (S.n == 0) return;
    sd_pool_run(f->pool, split_scores_run, &S);
    for (int32_t i = 0; i < S.n; i++)
        sd_attn_fast_softmax(S.u[i].scores, group, f->hd, S.u[i].n);
    sd_pool_run(f->pool, split_pv_run, &S);
}

/* The batch's (row, head) pairs over the threads, in runs of one row's
 * heads that share a K/V head. Many rows: whole runs (in the fast order,
 * tiles of runs) dealt round-robin, so that each thread gets rows of every
 * length (in a causal prefill chunk row r sees r more keys than row 0; a
 * contiguous split gave one thread the short rows and the other the long
 * ones). A few rows of a verification where the kernels are vectorised
 * (sd_attn_few_rows_tiled): one tile, whose K/V heads the threads take
 * whole where they divide evenly. Otherwise few rows (decoding): the pairs
 * split evenly, a run's heads shared between threads if need be. */
void sd_attn_run(void *ctx, int ith, int nth) {
    struct layer_job *J = ctx;
    struct sd_fwd *f = J->f;
    const struct sd_model_config *c = &f->m->cfg;
    const int32_t group = c->n_head / c->n_head_kv;
    float *scratch = f->scores + (size_t)ith * sd_attn_scratch(f->max_rows, f->n_ctx, f->hd, group);
    const int64_t n_runs = (int64_t)J->n_rows * c->n_head_kv;
    if (f->fast_order && J->n_rows > 1 && J->n_rows <= ATTN_TILE && c->n_head_kv % nth == 0 &&
        sd_attn_few_rows_tiled(f->hd)) {
        /* A few rows: one tile, each thread whole K/V heads of it. */
        attn_tiles(J, ith, nth, 1, scratch);
        return;
    }
    if (n_runs >= 4 * (int64_t)nth && f->fast_order) {
        /* Many rows: up to ATTN_TILE rows a tile, as many tiles for each thread. */
        const int64_t tiles = (J->n_rows + (int64_t)nth * ATTN_TILE - 1) / ((int64_t)nth * ATTN_TILE);
        attn_tiles(J, ith, nth, (int64_t)nth * tiles, scratch);
        return;
    }
    if (n_runs >= 4 * (int64_t)nth) {
        for (int64_t u = ith; u < n_runs; u += nth)
            attend(J, (int32_t)(u / c->n_head_kv), (int32_t)(u % c->n_head_kv) * group, group, scratch);
        return;
    }
    int64_t pb, pe;
    sd_split((int64_t)J->n_rows * c->n_head, ith, nth, &pb, &pe);
    for (int64_t p = pb; p < pe;) {
        const int32_t r = (int32_t)(p / c->n_head), h0 = (int32_t)(p % c->n_head);
        const int32_t nh = (int32_t)SD_MIN((int64_t)((h0 / group + 1) * group - h0), pe - p);
        p += nh;
        attend(J, r, h0, nh, scratch);
    }
}
