/*
 * graphs/cpu/backend.c - the CPU backend: graphs run the forward pass of
 * graphs/cpu/forward.c over the session's thread pool.
 *
 * Preparing a graph copies the weights it uses into its own 64-byte aligned
 * buffer (touching every page now, not during the first run), and
 * allocates the forward scratch for exactly L rows (shared by the graphs
 * of one L: they never run at once). With the fast kernels
 * (the default) the copy is repacked into graphs/packed.h's layout, as an
 * accelerator's graph finalisation lays out its weights; with the ggml
 * kernels it keeps the GGUF rows. Either way it is a static runtime's
 * private, prepared weights, whose memory and load time the scheduler has
 * to pay for (G1 and G2 of a block hold two copies).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "graphs/graph.h"
#include "graphs/forward.h"
#include "graphs/packed.h"
#include "graphs/quant.h"

struct cpu_graph {
    struct sd_model shadow;   /* the model with this graph's weights redirected to `weights` */
    struct sd_layer *layers;  /* shadow.layers */
    uint8_t *weights;
    size_t weight_bytes;
    struct sd_fwd *fwd;
    int32_t *which;           /* 0..L-1 for the head */
    float *pieces;            /* a packed head's scratch for runs that keep no logits (in `weights`) */
};

static size_t weight_bytes(const struct sd_weight *w) { return (size_t)w->n_out * w->row_bytes; }

/* Whether this backend packs w: fast kernels and a type that has them. */
static bool packs(const struct sd_backend *be, const struct sd_weight *w) {
    return be->kernels == SD_KERNELS_FAST && sd_packed_bytes(w->type, w->n_out, w->n_in) > 0;
}

/* Bytes of w's prepared copy. */
static size_t prepared_bytes(const struct sd_backend *be, const struct sd_weight *w) {
    return packs(be, w) ? sd_packed_bytes(w->type, w->n_out, w->n_in) : weight_bytes(w);
}

/* Bytes of the weights a shape uses, each copy 64-byte aligned. */
static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

/* A packed head's scratch for greedy runs that keep no logits
 * (graphs/forward.h's pieces): bytes after its weights. A subset head
 * (calibration's, 256 rows: 2 MiB of scratch) always keeps its logits. */
static size_t head_piece_bytes(const struct sd_backend *be, const struct sd_graph_shape *s, const struct sd_weight *w) {
    if (s->n_subset > 0 || !packs(be, w)) return 0;
    return align64(sd_fwd_head_piece_bytes(sd_pool_n_threads(be->pool), s->n_rows));
}

static size_t shape_weight_bytes(const struct sd_backend *be, const struct sd_graph_shape *s) {
    const struct sd_model *m = be->m;
    if (s->kind == SD_GRAPH_HEAD) {
        struct sd_weight w;
        sd_head_weight(m, s, &w, NULL, NULL);
        return align64(prepared_bytes(be, &w)) + head_piece_bytes(be, s, &w);
    }
    size_t bytes = 0;
    for (int32_t il = s->l0; il < s->l1; il++) {
        const struct sd_layer *L = &m->layers[il];
        const struct sd_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < SD_ARRAY_LEN(ws); i++) bytes += align64(prepared_bytes(be, ws[i]));
    }
    return bytes;
}

/* The backend's forward scratch, shared by its graphs of one row count
 * (graphs/forward.h): a set of six blocks and its head holds one. */
static struct sd_fwd_share *share_of(struct sd_backend *be) { return be->impl; }

static size_t cpu_estimate(struct sd_backend *be, const struct sd_graph_shape *s, unsigned flags) {
    struct sd_fwd_share *share = flags & SD_PREPARE_LOADER ? NULL : share_of(be);
    return shape_weight_bytes(be, s) +
           sd_fwd_share_need(share, be->m, s->n_rows, s->n_ctx, sd_pool_n_threads(be->pool));
}

static size_t cpu_shared_bytes(struct sd_backend *be) { return sd_fwd_share_bytes(share_of(be)); }

static void cpu_release(struct sd_backend *be, struct sd_graph *g) {
    (void)be;
    struct cpu_graph *cg = g->impl;
    if (!cg) return;
    sd_fwd_free(cg->fwd);
    sd_aligned_free(cg->weights);
    sd_free(cg->layers);
    sd_free(cg->which);
    sd_free(cg);
    g->impl = NULL;
}

/* Packing one matrix on every thread of the session's pool: preparing a
 * graph is on the way to its first run, and the head alone is 178 MB. */
struct pack_job {
    const struct sd_weight *w;
    uint8_t *dst;
};

static void pack_job_run(void *ctx, int ith, int nth) {
    const struct pack_job *j = ctx;
    int64_t g0, g1;
    sd_split((j->w->n_out + SD_PK_COLS - 1) / SD_PK_COLS, ith, nth, &g0, &g1);
    sd_pack_groups(j->w->type, j->w->data, j->w->row_bytes, j->w->n_out, j->w->n_in, j->dst, g0, g1);
}

/* Copy (or pack) w into dst and point the shadow's copy of w at it. On a
 * loader thread the pool belongs to the runs: pack on this thread alone. */
static size_t copy_weight(const struct sd_backend *be, struct sd_weight *shadow_w, uint8_t *dst, bool loader) {
    const size_t n = prepared_bytes(be, shadow_w);
    if (packs(be, shadow_w)) {
        struct pack_job j = {shadow_w, dst};
        if (loader) pack_job_run(&j, 0, 1);
        else sd_pool_run(be->pool, pack_job_run, &j);
        shadow_w->packed = true;
    } else {
        memcpy(dst, shadow_w->data, n);
    }
    shadow_w->data = dst;
    return align64(n);
}

static int cpu_prepare(struct sd_backend *be, struct sd_graph *g, unsigned flags, struct sd_err *err) {
    const bool loader = flags & SD_PREPARE_LOADER;
    const struct sd_model *m = be->m;
    const struct sd_graph_shape *s = &g->shape;
    struct cpu_graph *cg = sd_calloc(1, sizeof *cg);
    if (!cg) return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for a graph");
    g->impl = cg;
    cg->shadow = *m;
    cg->layers = sd_malloc((size_t)m->cfg.n_layer * sizeof *cg->layers);
    cg->which = sd_malloc((size_t)s->n_rows * sizeof *cg->which);
    if (!cg->layers || !cg->which) goto oom;
    memcpy(cg->layers, m->layers, (size_t)m->cfg.n_layer * sizeof *cg->layers);
    cg->shadow.layers = cg->layers;
    for (int32_t i = 0; i < s->n_rows; i++) cg->which[i] = i;
    cg->weight_bytes = shape_weight_bytes(be, s);
    cg->weights = sd_aligned_alloc(cg->weight_bytes);
    if (!cg->weights) goto oom;
    sd_advise_huge_pages(cg->weights, cg->weight_bytes); /* preparing faults its pages in 2 MiB at a time */
    size_t off = 0;
    if (s->kind == SD_GRAPH_HEAD) {
        /* A subset head packs a gathered copy of its rows; the copy goes once packed. */
        void *rows = NULL;
        int rc = sd_head_weight(m, s, &cg->shadow.output, &rows, err);
        if (rc) {
            cpu_release(be, g);
            return rc;
        }
        cg->shadow.cfg.n_vocab = (int32_t)cg->shadow.output.n_out;
        const size_t pieces = head_piece_bytes(be, s, &cg->shadow.output);
        off += copy_weight(be, &cg->shadow.output, cg->weights + off, loader);
        if (pieces) cg->pieces = (float *)(void *)(cg->weights + off);
        off += pieces;
        sd_free(rows);
    } else {
        for (int32_t il = s->l0; il < s->l1; il++) {
            struct sd_layer *L = &cg->layers[il];
            struct sd_weight *dst[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
            for (size_t i = 0; i < SD_ARRAY_LEN(dst); i++) off += copy_weight(be, dst[i], cg->weights + off, loader);
        }
    }
    /* A head runs no attention, but its scratch is made for the context of
     * its set's blocks (the runtime gives heads its own), so it shares theirs. */
    int rc = sd_fwd_create(&cg->shadow, s->n_rows, s->n_ctx, be->pool, share_of(be), &cg->fwd, err);
    if (rc) {
        cpu_release(be, g);
        return rc;
    }
    sd_fwd_set_fast_order(cg->fwd, be->kernels == SD_KERNELS_FAST);
    g->prepared_bytes = cg->weight_bytes + sd_fwd_bytes(cg->fwd);
    return SDNPU_OK;
oom:
    cpu_release(be, g);
    return sd_err_set(err, SDNPU_ERR_OOM, "out of memory preparing a graph (L=%d)", s->n_rows);
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
    sd_fwd_share_free(share_of(be));
    sd_free(be);
}

static const struct sdnpu_backend_i cpu_backend_i = {
    .name = "cpu",
    .estimate = cpu_estimate,
    .shared_bytes = cpu_shared_bytes,
    .loader_prepare = true,
    .prepare = cpu_prepare,
    .release = cpu_release,
    .run = cpu_run,
    .run_argmax = cpu_run_argmax,
    .destroy = cpu_destroy,
};

int sd_backend_cpu_create(const struct sd_model *m, struct sd_pool *pool, enum sd_kernels kernels,
                          struct sd_backend **out, struct sd_err *err) {
    struct sd_backend *be = sd_calloc(1, sizeof *be);
    if (!be) return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for the cpu backend");
    int rc = sd_fwd_share_create((struct sd_fwd_share **)&be->impl, err);
    if (rc) {
        sd_free(be);
        return rc;
    }
    be->i = &cpu_backend_i;
    be->m = m;
    be->pool = pool;
    be->kernels = kernels;
    const char *isa = sd_quant_get_impl() != SD_IMPL_AVX2 ? "scalar" : sd_quant_avx512_active() ? "AVX-512 VNNI" : "AVX2";
    snprintf(be->desc, sizeof be->desc, "cpu (%s kernels, %s, %d threads)", sd_kernels_name(kernels), isa,
             sd_pool_n_threads(pool));
    *out = be;
    return SDNPU_OK;
}
