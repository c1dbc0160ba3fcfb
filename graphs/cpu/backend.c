/*
 * graphs/cpu/backend.c - the CPU backend: graphs run the forward pass of
 * graphs/cpu/forward.c over the session's thread pool.
 *
 * Where a graph's weights live (graphs/weights.h says why):
 *   - shared (a store given at creation, the default): a weight of a type
 *     the fast kernels pack is the store's one packed copy, taken at
 *     prepare and dropped at release; every other weight (the ggml
 *     kernels', q4_1, f32) is read in place from the model file.
 *   - private (no store): each graph copies the weights it uses into its
 *     own 64-byte aligned buffer, repacked into graphs/packed.h's layout
 *     with the fast kernels, GGUF rows with the ggml ones; touching every
 *     page now, not during the first run. That is a static runtime without
 *     weight sharing, whose memory and load time the scheduler pays for
 *     (G1 and G2 of a block hold two copies).
 * A calibration subset head always packs its own gathered rows.
 *
 * Preparing also allocates the forward scratch for exactly L rows (shared
 * by the graphs of one L: they never run at once).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "graphs/graph.h"
#include "graphs/cert.h"
#include "graphs/forward.h"
#include "graphs/packed.h"
#include "graphs/quant.h"
#include "graphs/weights.h"

struct cpu_graph {
    struct sd_model shadow;   /* the model with this graph's weights redirected to their prepared copies */
    struct sd_layer *layers;  /* shadow.layers */
    uint8_t *weights;         /* the graph's own bytes: private weights, a head's pieces */
    size_t weight_bytes;
    struct sd_weight *held;   /* the model's weights taken from the store [n_held] */
    int32_t n_held;
    struct sd_fwd *fwd;
    int32_t *which;           /* 0..L-1 for the head */
    float *pieces;            /* a packed head's scratch for runs that keep no logits (in `weights`) */
};

/* The backend's state: the forward scratch its graphs of one row count
 * share (graphs/forward.h), and its hold on the shared weights (NULL: each
 * graph keeps private weights). */
struct cpu_backend {
    struct sd_fwd_share *share;
    struct sd_wholder *holder;
};

static struct cpu_backend *cpu_of(const struct sd_backend *be) { return be->impl; }

static size_t weight_bytes(const struct sd_weight *w) { return (size_t)w->n_out * w->row_bytes; }

/* Whether this backend packs w: fast kernels and a type that has them. */
static bool packs(const struct sd_backend *be, const struct sd_weight *w) {
    return be->kernels == SD_KERNELS_FAST && sd_packed_bytes(w->type, w->n_out, w->n_in) > 0;
}

/* Bytes of w's prepared copy. */
static size_t prepared_bytes(const struct sd_backend *be, const struct sd_weight *w) {
    return packs(be, w) ? sd_packed_bytes(w->type, w->n_out, w->n_in) : weight_bytes(w);
}

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Where a graph's copy of a weight lives (the file's head comment). */
enum place { PLACE_OWN, PLACE_STORE, PLACE_FILE };

/* subset: w is a subset head's gathered rows, not a weight of the model. */
static enum place place_of(const struct sd_backend *be, const struct sd_weight *w, bool subset) {
    const struct sd_wholder *h = cpu_of(be)->holder;
    if (!h || subset) return PLACE_OWN;
    return packs(be, w) && sd_wholder_has(h, w) ? PLACE_STORE : PLACE_FILE;
}

/* Whether a head of this shape certifies its argmax (graphs/cert.h): one
 * of few rows over the store's output projection, where the store holds
 * its certificate (asked with the model's rows: only whether there is one). */
static bool head_certified(const struct sd_backend *be, const struct sd_graph_shape *s,
                           const struct sd_weight *w) {
    const struct sd_wholder *h = cpu_of(be)->holder;
    return s->n_subset == 0 && s->n_rows <= sd_cert_max_rows(w->type) &&
           place_of(be, w, false) == PLACE_STORE && sd_wholder_cert(h, w, w->data) != NULL;
}

/* A packed head's scratch for greedy runs that keep no logits
 * (graphs/forward.h's pieces), and a certified argmax's: bytes after its
 * weights. A subset head (calibration's, 256 rows: 2 MiB of scratch)
 * always keeps its logits. */
static size_t head_piece_bytes(const struct sd_backend *be, const struct sd_graph_shape *s, const struct sd_weight *w) {
    if (s->n_subset > 0 || !packs(be, w)) return 0;
    const int64_t cert = head_certified(be, s, w) ? w->n_out : 0;
    return align64(sd_fwd_head_piece_bytes(sd_pool_n_threads(be->pool), s->n_rows, cert));
}

/* The model's weights a block graph uses, into w[7 * layers]. */
static int32_t block_weights(const struct sd_model *m, const struct sd_graph_shape *s, const struct sd_weight **w) {
    int32_t n = 0;
    for (int32_t il = s->l0; il < s->l1; il++) {
        const struct sd_layer *L = &m->layers[il];
        const struct sd_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < SD_ARRAY_LEN(ws); i++) w[n++] = ws[i];
    }
    return n;
}

/* The graph's own bytes for its weights (each copy 64-byte aligned) and,
 * into *store, what it would add to the backend's hold on the store. */
static size_t shape_weight_bytes(struct sd_backend *be, const struct sd_graph_shape *s, size_t *store) {
    const struct sd_model *m = be->m;
    const struct sd_weight *w[7 * SD_MAX_LAYERS + 1];
    struct sd_weight head;
    int32_t n = 1;
    size_t own = 0;
    if (s->kind == SD_GRAPH_HEAD) {
        sd_head_weight(m, s, &head, NULL, NULL);
        w[0] = &head;
        own = head_piece_bytes(be, s, &head);
    } else {
        n = block_weights(m, s, w);
    }
    int32_t n_shared = 0;
    for (int32_t i = 0; i < n; i++) {
        enum place p = place_of(be, w[i], s->n_subset > 0);
        if (p == PLACE_OWN) own += align64(prepared_bytes(be, w[i]));
        if (p == PLACE_STORE) w[n_shared++] = w[i];
    }
    *store = n_shared ? sd_wholder_need(cpu_of(be)->holder, w, n_shared) : 0;
    return own;
}

/* A loader's prepare counts the store's weights as new too: the session's
 * thread may let go of the last hold on them before the job takes them.
 * Never less than what taking them would add now: with a weight cache,
 * the first take brings in the whole packed model. */
static size_t cpu_estimate(struct sd_backend *be, const struct sd_graph_shape *s, unsigned flags) {
    const bool loader = flags & SD_PREPARE_LOADER;
    size_t store, own = shape_weight_bytes(be, s, &store);
    if (loader && cpu_of(be)->holder && s->kind == SD_GRAPH_BLOCK) {
        const struct sd_weight *w[7 * SD_MAX_LAYERS];
        int32_t n = block_weights(be->m, s, w);
        size_t all = 0;
        for (int32_t i = 0; i < n; i++)
            if (place_of(be, w[i], false) == PLACE_STORE) all += align64(prepared_bytes(be, w[i]));
        store = SD_MAX(store, all);
    }
    return own + store +
           sd_fwd_share_need(loader ? NULL : cpu_of(be)->share, be->m, s->n_rows, s->n_ctx, sd_pool_n_threads(be->pool));
}

static size_t cpu_shared_weight_bytes(struct sd_backend *be) {
    const struct cpu_backend *cb = cpu_of(be);
    return cb->holder ? sd_wholder_bytes(cb->holder) : 0;
}

static size_t cpu_shared_bytes(struct sd_backend *be) {
    return sd_fwd_share_bytes(cpu_of(be)->share) + cpu_shared_weight_bytes(be);
}

static void cpu_release(struct sd_backend *be, struct sd_graph *g) {
    struct cpu_graph *cg = g->impl;
    if (!cg) return;
    sd_fwd_free(cg->fwd);
    for (int32_t i = 0; i < cg->n_held; i++) sd_wholder_drop(cpu_of(be)->holder, &cg->held[i]);
    sd_free(cg->held);
    sd_aligned_free(cg->weights);
    sd_free(cg->layers);
    sd_free(cg->which);
    sd_free(cg);
    g->impl = NULL;
}

/* Point the shadow's copy of w (its data still the model's) at the copy
 * it runs from: its own (packed or copied into dst, advancing *off), the
 * store's, or the file's. On a loader thread the pool belongs to the runs:
 * pack on this thread alone. */
static int place_weight(struct sd_backend *be, struct cpu_graph *cg, struct sd_weight *shadow_w, bool subset,
                        bool loader, size_t *off, struct sd_err *err) {
    struct sd_pool *pool = loader ? NULL : be->pool;
    switch (place_of(be, shadow_w, subset)) {
    case PLACE_FILE:
        return SDNPU_OK;
    case PLACE_STORE: {
        const struct sd_weight model_w = *shadow_w;
        const void *data;
        int rc = sd_wholder_take(cpu_of(be)->holder, &model_w, pool, &data, err);
        if (rc) return rc;
        cg->held[cg->n_held++] = model_w;
        shadow_w->data = data;
        shadow_w->packed = true;
        return SDNPU_OK;
    }
    case PLACE_OWN:
        break;
    }
    uint8_t *dst = cg->weights + *off;
    if (packs(be, shadow_w)) {
        sd_weight_pack(pool, shadow_w, dst);
        shadow_w->packed = true;
    } else {
        memcpy(dst, shadow_w->data, prepared_bytes(be, shadow_w));
    }
    *off += align64(prepared_bytes(be, shadow_w));
    shadow_w->data = dst;
    return SDNPU_OK;
}

/* A subset head's rows gathered from the store's packed output projection
 * into the graph's own copy, where the backend holds that already (its
 * heads do): bit for bit what packing the GGUF rows gives, and no row of
 * the file is read. False where it does not hold it. */
static bool gather_from_store(struct sd_backend *be, const struct sd_graph_shape *s, struct cpu_graph *cg) {
    struct sd_wholder *h = cpu_of(be)->holder;
    const struct sd_weight *out = &be->m->output;
    const void *data;
    if (!h || !packs(be, out) || !sd_wholder_has(h, out) || sd_wholder_need(h, &out, 1) != 0 ||
        sd_wholder_take(h, out, NULL, &data, NULL) != SDNPU_OK)
        return false;
    sd_pack_gather(out->type, data, out->n_in, s->subset, s->n_subset, cg->weights);
    sd_wholder_drop(h, out);
    cg->shadow.output = *out;
    cg->shadow.output.data = cg->weights;
    cg->shadow.output.n_out = s->n_subset;
    cg->shadow.output.packed = true;
    return true;
}

/* The head's output projection: the model's, or a subset head's rows,
 * gathered from the shared packed copy or from the file's rows (packed
 * into the graph's own copy; the gathered rows go then). */
static int prepare_head(struct sd_backend *be, const struct sd_graph_shape *s, struct cpu_graph *cg, bool loader,
                        struct sd_err *err) {
    if (s->n_subset > 0 && gather_from_store(be, s, cg)) {
        cg->shadow.cfg.n_vocab = s->n_subset;
        return SDNPU_OK;
    }
    void *rows = NULL;
    int rc = sd_head_weight(be->m, s, &cg->shadow.output, &rows, err);
    if (rc) return rc;
    cg->shadow.cfg.n_vocab = (int32_t)cg->shadow.output.n_out;
    const size_t pieces = head_piece_bytes(be, s, &cg->shadow.output);
    const bool certified = head_certified(be, s, &cg->shadow.output);
    size_t off = 0;
    rc = place_weight(be, cg, &cg->shadow.output, s->n_subset > 0, loader, &off, err);
    if (pieces) cg->pieces = (float *)(void *)(cg->weights + off);
    if (!rc && certified)
        cg->shadow.output.cert = sd_wholder_cert(cpu_of(be)->holder, &be->m->output, cg->shadow.output.data);
    sd_free(rows);
    return rc;
}

static int prepare_block(struct sd_backend *be, const struct sd_graph_shape *s, struct cpu_graph *cg, bool loader,
                         struct sd_err *err) {
    size_t off = 0;
    for (int32_t il = s->l0; il < s->l1; il++) {
        struct sd_layer *L = &cg->layers[il];
        struct sd_weight *dst[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < SD_ARRAY_LEN(dst); i++) {
            int rc = place_weight(be, cg, dst[i], false, loader, &off, err);
            if (rc) return rc;
        }
    }
    return SDNPU_OK;
}

static int cpu_prepare(struct sd_backend *be, struct sd_graph *g, unsigned flags, struct sd_err *err) {
    const bool loader = flags & SD_PREPARE_LOADER;
    const struct sd_model *m = be->m;
    const struct sd_graph_shape *s = &g->shape;
    struct cpu_graph *cg = sd_calloc(1, sizeof *cg);
    if (!cg) return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for a graph");
    g->impl = cg;
    cg->shadow = *m;
    size_t store;
    cg->weight_bytes = shape_weight_bytes(be, s, &store);
    const int32_t n_w = s->kind == SD_GRAPH_HEAD ? 1 : 7 * (s->l1 - s->l0);
    cg->layers = sd_malloc((size_t)m->cfg.n_layer * sizeof *cg->layers);
    cg->which = sd_malloc((size_t)s->n_rows * sizeof *cg->which);
    cg->held = sd_malloc((size_t)n_w * sizeof *cg->held);
    cg->weights = sd_aligned_alloc(cg->weight_bytes);
    if (!cg->layers || !cg->which || !cg->held || !cg->weights) {
        cpu_release(be, g);
        return sd_err_set(err, SDNPU_ERR_OOM, "out of memory preparing a graph (L=%d)", s->n_rows);
    }
    memcpy(cg->layers, m->layers, (size_t)m->cfg.n_layer * sizeof *cg->layers);
    cg->shadow.layers = cg->layers;
    for (int32_t i = 0; i < s->n_rows; i++) cg->which[i] = i;
    sd_advise_huge_pages(cg->weights, cg->weight_bytes); /* preparing faults its pages in 2 MiB at a time */
    int rc = s->kind == SD_GRAPH_HEAD ? prepare_head(be, s, cg, loader, err) : prepare_block(be, s, cg, loader, err);
    /* A head runs no attention, but its scratch is made for the context of
     * its set's blocks (the runtime gives heads its own), so it shares theirs. */
    if (!rc) rc = sd_fwd_create(&cg->shadow, s->n_rows, s->n_ctx, be->pool, cpu_of(be)->share, &cg->fwd, err);
    if (rc) {
        cpu_release(be, g);
        return rc;
    }
    sd_fwd_set_fast_order(cg->fwd, be->kernels == SD_KERNELS_FAST);
    g->prepared_bytes = cg->weight_bytes + sd_fwd_bytes(cg->fwd);
    return SDNPU_OK;
}
/* A head's run, cpu_run's too (argmax NULL): the greedy tokens, and the
 * logits unless keep_logits is false and the head has pieces. */
static int cpu_run_argmax(struct sd_backend *be, struct sd_graph *g, float *x, float *logits, int32_t *argmax,
                          bool keep_logits, struct sd_err *err) {
    (void)err;
    struct cpu_graph *cg = g->impl;
    const int32_t L = g->shape.n_rows;
    memcpy(sd_fwd_x(cg->fwd), x, (size_t)L * (size_t)be->m->cfg.d_model * sizeof(float));
    sd_fwd_logits(cg->fwd, cg->which, L, logits, argmax, keep_logits ? NULL : cg->pieces);
    return SDNPU_OK;
}

/* A head's run for a top-k sampler (graph.h): certified where the head
 * has a certificate and pieces, else every logit. */
static int cpu_run_topk(struct sd_backend *be, struct sd_graph *g, float *x, float *logits,
                        const struct sd_head_topk *topk, struct sd_err *err) {
    (void)err;
    struct cpu_graph *cg = g->impl;
    const int32_t L = g->shape.n_rows;
    memcpy(sd_fwd_x(cg->fwd), x, (size_t)L * (size_t)be->m->cfg.d_model * sizeof(float));
    sd_fwd_logits_topk(cg->fwd, cg->which, L, logits, topk->k, topk->keep, topk->n_keep, cg->pieces);
    return SDNPU_OK;
}

static int cpu_run(struct sd_backend *be, struct sd_graph *g, struct sd_kv_cache *kv, const struct sd_row *rows,
                   int32_t base, float *x, float *logits, struct sd_err *err) {
    (void)err;
    struct cpu_graph *cg = g->impl;
    const struct sd_graph_shape *s = &g->shape;
    size_t xbytes = (size_t)s->n_rows * (size_t)be->m->cfg.d_model * sizeof(float);
    if (s->kind == SD_GRAPH_HEAD) return cpu_run_argmax(be, g, x, logits, NULL, true, err);
    float *fx = sd_fwd_x(cg->fwd);
    memcpy(fx, x, xbytes);
    sd_fwd_layers(cg->fwd, kv, rows, s->n_rows, base, s->l0, s->l1);
    memcpy(x, fx, xbytes);
    return SDNPU_OK;
}

static void cpu_destroy(struct sd_backend *be) {
    struct cpu_backend *cb = cpu_of(be);
    sd_fwd_share_free(cb->share);
    sd_wholder_free(cb->holder);
    sd_free(cb);
    sd_free(be);
}

static const struct sd_backend_i cpu_backend_i = {
    .name = "cpu",
    .estimate = cpu_estimate,
    .shared_bytes = cpu_shared_bytes,
    .shared_weight_bytes = cpu_shared_weight_bytes,
    .loader_prepare = true,
    .prepare = cpu_prepare,
    .release = cpu_release,
    .run = cpu_run,
    .run_argmax = cpu_run_argmax,
    .run_topk = cpu_run_topk,
    .destroy = cpu_destroy,
};

int sd_backend_cpu_create(const struct sd_model *m, struct sd_pool *pool, enum sd_kernels kernels,
                          struct sd_wstore *weights, struct sd_backend **out, struct sd_err *err) {
    struct sd_backend *be = sd_calloc(1, sizeof *be);
    struct cpu_backend *cb = sd_calloc(1, sizeof *cb);
    if (!be || !cb) {
        sd_free(be);
        sd_free(cb);
        return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for the cpu backend");
    }
    be->impl = cb;
    int rc = sd_fwd_share_create(&cb->share, err);
    if (!rc && weights) rc = sd_wholder_create(weights, &cb->holder, err);
    if (rc) {
        sd_fwd_share_free(cb->share);
        sd_free(cb);
        sd_free(be);
        return rc;
    }
    be->i = &cpu_backend_i;
    be->m = m;
    be->pool = pool;
    be->kernels = kernels;
    be->kv_keys = kernels == SD_KERNELS_FAST ? SD_KV_KEYS_I16 : SD_KV_KEYS_FP16;
    (void)sd_fwd_pv_path(); /* p.V's path is measured here, not inside the first pass */
    const char *isa = sd_cpu_isa_desc();
    snprintf(be->desc, sizeof be->desc, "cpu (%s kernels, %s, %s weights, %d threads)", sd_kernels_name(kernels), isa,
             weights ? "shared" : "private", sd_pool_n_threads(pool));
    *out = be;
    return SDNPU_OK;
}
