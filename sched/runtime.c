/* sched/runtime.c - graph sets per block, chunked prefill with the pad or
 * pipe policy for the last chunk, and padded decoding (sched/runtime.h).
 * A switching prefill's graph switch runs in sched/switch_run.c, through
 * begin, a tick before each unit, and finish. */
#include "sched/runtime.h"

#include <math.h>
#include <string.h>

#include "sched/loader.h"
#include "sched/rt_state.h"
#include "sched/switch_run.h"

static int prepare_shape(struct sd_rt *rt, struct sd_graph *g, const struct sd_graph_shape *shape,
                         struct sd_err *err) {
    if (g->be) return SDNPU_OK;
    int rc = sd_loader_prepare(&rt->ld, shape, g, err);
    if (rc) return rc;
    rt->prepare_ms += g->prepare_ms;
    SD_LOGD("prepared %s graph [%d,%d) L=%d: %.1f MiB in %.1f ms", shape->kind == SD_GRAPH_HEAD ? "head" : "block",
            shape->l0, shape->l1, shape->n_rows, (double)g->prepared_bytes / 1048576.0, g->prepare_ms);
    return SDNPU_OK;
}

int sd_rt_prepare_graph(struct sd_rt *rt, struct sd_graph *g, enum sd_graph_kind kind, int32_t l0, int32_t l1,
                        int32_t L, struct sd_err *err) {
    struct sd_graph_shape shape = {kind, l0, l1, L, rt->n_ctx, NULL, 0};
    return prepare_shape(rt, g, &shape, err);
}

static void release_graph(struct sd_rt *rt, struct sd_graph *g) { sd_loader_release(&rt->ld, g); }

int sd_rt_prepare_set(struct sd_rt *rt, enum sd_graph_set set, struct sd_err *err) {
    if (rt->L[set] == 0) return SDNPU_OK;
    for (int32_t b = 0; b < rt->n_blocks; b++) {
        int rc =
            sd_rt_prepare_graph(rt, &rt->g[set][b], SD_GRAPH_BLOCK, rt->b0[b], rt->b1[b], rt->L[set], err);
        if (rc) {
            /* A set runs only whole: give back the blocks it holds. */
            for (int32_t i = 0; i < b; i++) release_graph(rt, &rt->g[set][i]);
            return rc;
        }
    }
    if (set == SD_SET_GR) return SDNPU_OK; /* its chunks' logits come from the decode heads */
    if (set == SD_SET_G2 && rt->L[SD_SET_G2] > 1)
        return sd_rt_prepare_graph(rt, &rt->h2, SD_GRAPH_HEAD, 0, 0, rt->L[set], err);
    /* With graph switching one-row steps share the L2-row head: a second
     * head is many times the size of a one-row block (README, "Graph
     * switching", has the sizes). */
    if (set == SD_SET_G0 && rt->sw_mode != SD_SWITCH_OFF) return SDNPU_OK;
    return sd_rt_prepare_graph(rt, &rt->h1, SD_GRAPH_HEAD, 0, 0, 1, err);
}

int sd_rt_prepare_like(struct sd_rt *rt, const struct sd_rt *like, struct sd_err *err) {
    for (int s = 0; s < SD_SET_N; s++) {
        bool whole = like->L[s] > 0;
        for (int32_t b = 0; b < like->n_blocks && whole; b++)
            whole = like->g[s][b].be != NULL;
        int rc = whole ? sd_rt_prepare_set(rt, (enum sd_graph_set)s, err) : SDNPU_OK;
        if (rc) return rc;
    }
    return SDNPU_OK;
}

void sd_rt_free(struct sd_rt *rt) {
    if (!rt) return;
    /* First the loader: a prepare it is running finishes into its graph,
     * which is then released with the others. */
    if (rt->ld.be) sd_loader_fini(&rt->ld);
    for (int s = 0; s < SD_SET_N; s++)
        for (int32_t b = 0; b < rt->n_blocks; b++) sd_graph_release(&rt->g[s][b]);
    sd_graph_release(&rt->h1);
    sd_graph_release(&rt->h2);
    sd_backend_free(rt->be);
    sd_kv_free(&rt->kv);
    sd_aligned_free(rt->x);
    sd_aligned_free(rt->xh);
    sd_aligned_free(rt->hl);
    sd_free(rt->am);
    sd_free(rt->rows);
    sd_free(rt);
}

int32_t sd_rt_plan_blocks(const struct sd_model *m, int32_t block_layers, int32_t *b0, int32_t *b1) {
    int32_t n_layer = m->cfg.n_layer, n = 0;
    int32_t per = block_layers > 0 ? block_layers : (n_layer + 5) / 6;
    per = SD_MAX(per, (n_layer + SD_MAX_BLOCKS - 1) / SD_MAX_BLOCKS);
    for (int32_t l = 0; l < n_layer; l += per, n++) {
        b0[n] = l;
        b1[n] = SD_MIN(l + per, n_layer);
    }
    return n;
}

int sd_rt_create(const struct sd_model *m, struct sd_pool *pool, const struct sd_rt_params *p, struct sd_rt **out,
                 struct sd_err *err) {
    *out = NULL;
    const struct sd_model_config *c = &m->cfg;
    if (p->n_prefill < 1 || p->n_prefill > SD_MAX_BATCH_ROWS || p->n_verify < 1 || p->n_verify > SD_MAX_BATCH_ROWS)
        return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "graph lengths L1=%d, L2=%d: each must be 1..%d", p->n_prefill,
                          p->n_verify, SD_MAX_BATCH_ROWS);
    if (p->n_ctx < 1) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "context of %d tokens", p->n_ctx);
    struct sd_rt *rt = sd_calloc(1, sizeof *rt);
    if (!rt) return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for the graph runtime");
    rt->m = m;
    rt->n_ctx = p->n_ctx;
    rt->L[SD_SET_G1] = p->n_prefill;
    rt->L[SD_SET_G2] = p->n_verify;
    rt->L[SD_SET_G0] = 1;
    /* The remainder set costs its scratch only where the weights are shared. */
    const bool remainder = p->weights && p->mem_limit == 0 && p->n_verify < SD_REMAINDER_ROWS &&
                           SD_REMAINDER_ROWS < p->n_prefill;
    rt->L[SD_SET_GR] = remainder ? SD_REMAINDER_ROWS : 0;
    rt->policy = p->prefill_policy;
    rt->n_blocks = sd_rt_plan_blocks(m, p->block_layers, rt->b0, rt->b1);
    for (int32_t b = 0; b < rt->n_blocks; b++) rt->block_set[b] = SD_SET_G1;
    int rc = sd_backend_create(p->backend, p->cl_device, p->kernels, m, p->weights, pool, &rt->be, err);
    if (rc == SDNPU_ERR_BACKEND || rc == SDNPU_ERR_UNSUPPORTED) {
        SD_LOGW("%s; using the cpu backend", err->msg);
        sd_err_clear(err);
        rc = sd_backend_cpu_create(m, pool, p->kernels, p->weights, &rt->be, err);
    }
    if (rc) goto fail;
    if ((rc = sd_kv_create(m, p->n_ctx, sd_backend_kv_keys(rt->be), &rt->kv, err))) goto fail;
    if ((rc = sd_loader_init(&rt->ld, rt->be, p->mem_limit, err))) goto fail;
    rt->slowdown = -1;
    /* A prefill chunk on a block switched to G2 runs as whole L2 passes. */
    rt->x_rows = (p->n_prefill + p->n_verify - 1) / p->n_verify * p->n_verify;
    size_t d = (size_t)c->d_model;
    rt->x = sd_aligned_alloc((size_t)rt->x_rows * d * sizeof(float));
    rt->xh = sd_aligned_alloc((size_t)p->n_verify * d * sizeof(float));
    rt->hl = sd_aligned_alloc((size_t)p->n_verify * (size_t)c->n_vocab * sizeof(float));
    rt->am = sd_calloc((size_t)p->n_verify, sizeof *rt->am);
    rt->rows = sd_calloc((size_t)rt->x_rows, sizeof *rt->rows);
    if (!rt->x || !rt->xh || !rt->hl || !rt->am || !rt->rows) {
        rc = sd_err_set(err, SDNPU_ERR_OOM, "out of memory for the graph runtime's buffers");
        goto fail;
    }
    *out = rt;
    return SDNPU_OK;
fail:
    sd_rt_free(rt);
    return rc;
}

/* Block b on its graph of set s over rows [0, L) of rt->rows and rt->x, as
 * passes of that graph's own row count; a pass with no real row is
 * skipped (it would write nothing and its rows are padding). */
static int run_block(struct sd_rt *rt, enum sd_graph_set s, int32_t b, int32_t L, int32_t base, struct sd_err *err) {
    struct sd_graph *g = &rt->g[s][b];
    bool fresh = !g->be;
    int rc = sd_rt_prepare_graph(rt, g, SD_GRAPH_BLOCK, rt->b0[b], rt->b1[b], rt->L[s], err);
    if (rc) return rc;
    if (fresh && s == SD_SET_G1) rt->g1_prep_ms[b] = g->prepare_ms;
    size_t d = (size_t)rt->m->cfg.d_model;
    for (int32_t i = 0; i < L; i += rt->L[s]) {
        if (i > 0 && rt->rows[i].token < 0) break; /* padding is at the end */
        if ((rc = sd_graph_run(g, &rt->kv, rt->rows + i, base + i, rt->x + (size_t)i * d, NULL, err))) return rc;
    }
    return SDNPU_OK;
}

/* A whole chunk's run of block b on set s: its time, or, if the loader
 * was preparing all along, a sample of how much that slows compute. */
static void note_unit(struct sd_rt *rt, enum sd_graph_set s, int32_t b, double ms, bool loading) {
    double *est = &rt->run_ms[s == SD_SET_G1 ? 0 : 1][b];
    if (!loading) {
        sd_rt_note_ms(est, ms);
    } else if (*est > 0) {
        double x = SD_MAX(0.0, SD_MIN(3.0, ms / *est - 1.0));
        rt->slowdown = rt->slowdown >= 0 ? 0.5 * rt->slowdown + 0.5 * x : x;
    }
}

/* A whole pass of set over every block took ms: into its cost, unless profiled. */
static void note_set_cost(struct sd_rt *rt, enum sd_graph_set set, double ms) {
    if (!rt->cost_fixed[set]) rt->cost_ms[set] = rt->cost_ms[set] > 0 ? 0.75 * rt->cost_ms[set] + 0.25 * ms : ms;
}

/* One pass over every block of rt->rows[0..L) in rt->x: decoding (G2, G0)
 * on that set's graphs; a prefill chunk (G1) on each block's own prefill
 * graph (the per-block state), unit0 the chunk's first unit of a switch
 * (or -1). */
static int run_blocks(struct sd_rt *rt, enum sd_graph_set set, int32_t base, int32_t unit0, struct sd_err *err) {
    int rc;
    if (set != SD_SET_G1 && (rc = sd_rt_prepare_set(rt, set, err))) return rc;
    bool whole = true; /* every block on `set`: the pass is a cost sample of the set */
    bool full = set == SD_SET_G1 && rt->rows[rt->L[SD_SET_G1] - 1].token >= 0; /* a whole chunk: a per-block sample */
    double t0 = sd_time_ms();
    /* A prefill chunk embeds the rows past L1 too: blocks on G2 run them as padding. */
    sd_embed_rows(rt->m, rt->rows, set == SD_SET_G1 ? rt->x_rows : rt->L[set], rt->x);
    for (int32_t b = 0; b < rt->n_blocks; b++) {
        if (unit0 >= 0) sd_switch_tick(rt, unit0 + b, err);
        enum sd_graph_set s = set == SD_SET_G1 ? rt->block_set[b] : set;
        whole = whole && s == set;
        double tb = sd_time_ms(), prep = rt->prepare_ms;
        bool loading = unit0 >= 0 && sd_switch_active(rt) && sd_loader_busy(&rt->ld);
        if ((rc = run_block(rt, s, b, rt->L[set], base, err))) return rc;
        if (full && rt->prepare_ms == prep) note_unit(rt, s, b, sd_time_ms() - tb, loading && sd_loader_busy(&rt->ld));
    }
    if (whole) note_set_cost(rt, set, sd_time_ms() - t0);
    return SDNPU_OK;
}

/* Rows n_real.. L of rt->rows become padding: no token, no slot, no keys. */
static void pad_rows(struct sd_rt *rt, int32_t n_real, int32_t L) {
    for (int32_t r = n_real; r < L; r++) {
        memset(&rt->rows[r], 0, sizeof rt->rows[r]);
        rt->rows[r].token = -1;
        rt->rows[r].slot = -1;
    }
}

/* Whether block b's one-row graph is held, or fits: a switching session
 * exists to hold one graph set, so the one-row blocks it adds for speed
 * stay within a quarter of the decode set it holds (and the memory
 * limit); a block past that runs its one-row steps on its decode graph. */
static bool g0_fits(struct sd_rt *rt, int32_t b) {
    if (rt->g[SD_SET_G0][b].be) return true;
    size_t held = sd_loader_prepared(&rt->ld), g0 = 0;
    for (int32_t i = 0; i < rt->n_blocks; i++) g0 += rt->g[SD_SET_G0][i].prepared_bytes;
    const struct sd_graph_shape shape = {SD_GRAPH_BLOCK, rt->b0[b], rt->b1[b], 1, rt->n_ctx, NULL, 0};
    size_t need = rt->be->i->estimate(rt->be, &shape, 0), decode_set = held - g0;
    return held + need <= decode_set + decode_set / 4;
}

/* One row through every block of a switching session (rt->rows[0] real,
 * the rest padding to L2): on the block's one-row graph where g0_fits
 * (prepared on first use), else on its decode graph. *L_out: the rows the
 * widest pass computed. */
static int run_one_row(struct sd_rt *rt, int32_t base, int32_t *L_out, struct sd_err *err) {
    const int32_t L2 = rt->L[SD_SET_G2];
    int rc = sd_rt_prepare_set(rt, SD_SET_G2, err);
    if (rc) return rc;
    pad_rows(rt, 1, L2);
    sd_embed_rows(rt->m, rt->rows, L2, rt->x);
    *L_out = 1;
    double t0 = sd_time_ms();
    for (int32_t b = 0; b < rt->n_blocks; b++) {
        enum sd_graph_set s = g0_fits(rt, b) ? SD_SET_G0 : SD_SET_G2;
        rc = run_block(rt, s, b, rt->L[s], base, err);
        if (rc == SDNPU_ERR_OOM && s == SD_SET_G0) { /* past the memory limit: the decode graph, padded */
            sd_err_clear(err);
            rc = run_block(rt, s = SD_SET_G2, b, L2, base, err);
        }
        if (rc) return rc;
        if (s == SD_SET_G2) *L_out = L2;
    }
    if (*L_out == 1) note_set_cost(rt, SD_SET_G0, sd_time_ms() - t0);
    return SDNPU_OK;
}

/* Causal rows for tokens[0..n) at n_past.., padded to L. */
static void causal_rows(struct sd_rt *rt, const int32_t *tokens, int32_t n, int32_t n_past, int32_t L) {
    for (int32_t r = 0; r < n; r++) {
        struct sd_row *row = &rt->rows[r];
        memset(row, 0, sizeof *row);
        row->token = tokens[r];
        row->pos = n_past + r;
        row->slot = n_past + r;
        row->n_prefix = n_past + r + 1;
    }
    pad_rows(rt, n, L);
}

/* One pass of head g over rt->xh into out, with its rows' greedy tokens
 * in rt->am where argmax is wanted (out then unwritten unless keep). */
static int head_pass(struct sd_rt *rt, struct sd_graph *g, float *out, bool argmax, bool keep,
                     const struct sd_head_topk *topk, struct sd_err *err) {
    if (topk) return sd_graph_run_topk(g, rt->xh, out, topk, err);
    return argmax ? sd_graph_run_argmax(g, rt->xh, out, rt->am, keep, err)
                  : sd_graph_run(g, NULL, NULL, 0, rt->xh, out, err);
}

/* Whether n rows run on the one-row head: one row does, unless a switch
 * has given that head back (the session then holds the decode set only). */
static bool on_h1(const struct sd_rt *rt, int32_t n) {
    return n == 1 && (rt->sw_mode == SD_SWITCH_OFF || rt->h1.be);
}

/* The head's input: rows [0, k) of x, and L - k padding rows that copy
 * row k - 1. A padding row costs what a real row costs only if it looks
 * like one: a zero row ties every logit, so a certified head finds every
 * group a candidate for it and computes it through the exact head (the
 * 0.5B's 4-row pass with one padding row: 18.1 ms against 13.0 with
 * none); a copy has its row's candidates, computed with it as one run. */
static void head_input_rows(float *xh, const float *x, int32_t k, int32_t L, size_t d) {
    memcpy(xh, x, (size_t)k * d * sizeof(float));
    for (int32_t r = k; r < L; r++)
        memcpy(xh + (size_t)r * d, x + (size_t)(k - 1) * d, d * sizeof(float));
}

/* Head over rows src[0..n) of x (n <= L2): logits [n][n_vocab], and
 * where argmax is not NULL each row's greedy token argmax[n] (the logits
 * then left unwritten unless keep). */
static int run_head(struct sd_rt *rt, const float *x, int32_t n, float *logits, int32_t *argmax, bool keep,
                    const struct sd_head_topk *topk, struct sd_err *err) {
    size_t d = (size_t)rt->m->cfg.d_model, nv = (size_t)rt->m->cfg.n_vocab;
    int rc;
    if (on_h1(rt, n)) {
        if ((rc = sd_rt_prepare_graph(rt, &rt->h1, SD_GRAPH_HEAD, 0, 0, 1, err))) return rc;
        memcpy(rt->xh, x, d * sizeof(float));
        if ((rc = head_pass(rt, &rt->h1, logits, argmax != NULL, keep, topk, err))) return rc;
        if (argmax) argmax[0] = rt->am[0];
        return SDNPU_OK;
    }
    int32_t L2 = rt->L[SD_SET_G2];
    if ((rc = sd_rt_prepare_graph(rt, &rt->h2, SD_GRAPH_HEAD, 0, 0, L2, err))) return rc;
    for (int32_t i = 0; i < n; i += L2) {
        int32_t k = SD_MIN(L2, n - i);
        head_input_rows(rt->xh, x + (size_t)i * d, k, L2, d);
        if ((rc = head_pass(rt, &rt->h2, rt->hl, argmax != NULL, keep, topk, err))) return rc;
        if (keep && logits != rt->hl) memcpy(logits + (size_t)i * nv, rt->hl, (size_t)k * nv * sizeof(float));
        if (argmax) memcpy(argmax + i, rt->am, (size_t)k * sizeof *argmax);
    }
    return SDNPU_OK;
}

/* A pass's cost in rows' worth when nothing is known: a fixed overhead of
 * about 8 rows plus its rows, the shape of the CPU backend's curve. */
static double guess_rows(int32_t L) { return 8.0 + L; }

/* What one pass of each set costs, and whether a final chunk may use it.
 * A set with a cost (profiled, or measured by a run) has it; one without
 * takes the guessed shape scaled to the known set nearest in rows (a chat
 * session that never prefills a whole chunk still measures G2, G0 and
 * GR); with none known, every set its guess. */
static void chunk_costs(const struct sd_rt *rt, double c[SD_SET_N], bool use[SD_SET_N]) {
    for (int s = 0; s < SD_SET_N; s++) {
        c[s] = INFINITY;
        if (rt->L[s] == 0) continue; /* a set this runtime does not use */
        int near = -1;
        for (int k = 0; k < SD_SET_N; k++)
            if (rt->L[k] > 0 && rt->cost_ms[k] > 0 &&
                (near < 0 || fabs(log((double)rt->L[k] / rt->L[s])) < fabs(log((double)rt->L[near] / rt->L[s]))))
                near = k;
        c[s] = rt->cost_ms[s] > 0 ? rt->cost_ms[s]
               : near >= 0         ? rt->cost_ms[near] * guess_rows(rt->L[s]) / guess_rows(rt->L[near])
                                   : guess_rows(rt->L[s]);
    }
    use[SD_SET_G1] = rt->policy != SD_PREFILL_PIPE;
    use[SD_SET_G2] = true;
    /* A switching session holds the one-row blocks for decoding only
     * (run_one_row), and exists to hold as few sets as it can. */
    use[SD_SET_G0] = rt->sw_mode == SD_SWITCH_OFF;
    use[SD_SET_GR] = rt->L[SD_SET_GR] > 0 && rt->sw_mode == SD_SWITCH_OFF && rt->policy == SD_PREFILL_AUTO;
}

/* The passes a chunk of r tokens runs as; returns their count, with each
 * pass's set and tokens in set_of and k_of, in token order. A whole chunk
 * (and every chunk of a pad policy or a switching prefill) is one pass of
 * G1. A final chunk of r < L1 takes the passes that cost least: a pass of
 * L rows costs its set's pass whatever it holds, so the least cost of x
 * tokens is the least, over the sets, of a pass plus the least cost of
 * the x - L tokens left; ties go to G1, then G2, G0 and GR. */
static int32_t chunk_plan(const struct sd_rt *rt, int32_t r, enum sd_graph_set *set_of, int32_t *k_of) {
    const int32_t L1 = rt->L[SD_SET_G1];
    if (r >= L1 || rt->policy == SD_PREFILL_PAD || sd_switch_active(rt)) {
        set_of[0] = SD_SET_G1;
        k_of[0] = r;
        return 1;
    }
    double c[SD_SET_N], best[SD_MAX_BATCH_ROWS + 1];
    bool use[SD_SET_N];
    enum sd_graph_set pick[SD_MAX_BATCH_ROWS + 1];
    const enum sd_graph_set order[SD_SET_N] = {SD_SET_G1, SD_SET_G2, SD_SET_G0, SD_SET_GR};
    chunk_costs(rt, c, use);
    best[0] = 0;
    for (int32_t x = 1; x <= r; x++) {
        best[x] = INFINITY;
        for (int i = 0; i < SD_SET_N; i++) {
            const enum sd_graph_set s = order[i];
            const double v = use[s] ? c[s] + best[x - SD_MIN(x, rt->L[s])] : INFINITY;
            if (v < best[x]) best[x] = v, pick[x] = s;
        }
    }
    int32_t n = 0;
    for (int32_t x = r; x > 0; n++) {
        set_of[n] = pick[x];
        k_of[n] = SD_MIN(x, rt->L[pick[x]]);
        x -= k_of[n];
    }
    return n;
}

/* The logits of rows [0, n) of x, in head passes of up to L2 rows, to the
 * sink; pos0 is the first row's index among the prefilled tokens. */
static int head_to_sink(struct sd_rt *rt, const float *x, int32_t n, int32_t pos0, const struct sd_logit_sink *sink,
                        struct sd_err *err) {
    size_t d = (size_t)rt->m->cfg.d_model;
    int32_t L2 = rt->L[SD_SET_G2];
    for (int32_t i = 0; i < n; i += L2) {
        int32_t k = SD_MIN(L2, n - i);
        if (!on_h1(rt, k)) sd_switch_wait_head(rt); /* during a switch, H2 may be on the loader */
        int rc = run_head(rt, x + (size_t)i * d, k, rt->hl, NULL, true, NULL, err);
        if (rc) return rc;
        if (!sink->fn(sink->ud, pos0 + i, k, rt->hl)) return sd_err_set(err, SDNPU_ABORTED, "prefill stopped by its logit sink");
    }
    return SDNPU_OK;
}

/* What one prefill call holds for its subset sink: the subset head, and
 * the current chunk's rows after the last block with their logits. */
struct subset_run {
    const struct sd_subset_sink *sink;
    struct sd_graph hs;
    float *xs; /* [L1][d] */
    float *lg; /* [L1][n_tok] */
};

static void subset_end(struct sd_rt *rt, struct subset_run *u) {
    if (u->hs.be) release_graph(rt, &u->hs);
    sd_aligned_free(u->xs);
    sd_aligned_free(u->lg);
    memset(u, 0, sizeof *u);
}

static int subset_begin(struct sd_rt *rt, struct subset_run *u, const struct sd_subset_sink *sink, struct sd_err *err) {
    memset(u, 0, sizeof *u);
    if (!sink) return SDNPU_OK;
    u->sink = sink;
    size_t L1 = (size_t)rt->L[SD_SET_G1], d = (size_t)rt->m->cfg.d_model;
    struct sd_graph_shape shape = {SD_GRAPH_HEAD, 0, 0, (int32_t)L1, rt->n_ctx, sink->tok, sink->n_tok};
    int rc = prepare_shape(rt, &u->hs, &shape, err);
    if (rc) {
        sd_err_prefix(err, "the subset head of %d tokens", sink->n_tok);
        return rc;
    }
    u->xs = sd_aligned_alloc(L1 * d * sizeof(float));
    u->lg = sd_aligned_alloc(L1 * (size_t)sink->n_tok * sizeof(float));
    if (!u->xs || !u->lg) {
        subset_end(rt, u);
        return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for the subset head's buffers");
    }
    return SDNPU_OK;
}

/* The subset logits of a chunk's r rows (collected in u->xs) to the sink.
 * Rows past r are zeros: the static head computes them anyway. */
static int subset_chunk(struct sd_rt *rt, struct subset_run *u, int32_t pos0, int32_t r, struct sd_err *err) {
    size_t L1 = (size_t)rt->L[SD_SET_G1], d = (size_t)rt->m->cfg.d_model;
    memset(u->xs + (size_t)r * d, 0, (L1 - (size_t)r) * d * sizeof(float));
    double t0 = sd_time_ms();
    int rc = sd_graph_run(&u->hs, NULL, NULL, 0, u->xs, u->lg, err);
    rt->counts.subset_ms += sd_time_ms() - t0;
    if (rc) return rc;
    if (!u->sink->fn(u->sink->ud, pos0, r, u->lg)) return sd_err_set(err, SDNPU_ABORTED, "prefill stopped by its subset sink");
    return SDNPU_OK;
}

/* One step of a chunk: k tokens at chunk offset i through every block, on
 * `set`, then their logits to whoever asked. */
static int prefill_step(struct sd_rt *rt, const int32_t *tokens, int32_t k, int32_t pos, int32_t n_past,
                        enum sd_graph_set set, bool last, const struct sd_logit_sink *sink, struct subset_run *u,
                        int32_t i, float *last_logits, struct sd_err *err) {
    size_t d = (size_t)rt->m->cfg.d_model, nv = (size_t)rt->m->cfg.n_vocab;
    int32_t L = rt->L[set];
    /* A G1 chunk pads to x_rows: blocks on G2 run it as whole L2 passes. */
    causal_rows(rt, tokens, k, n_past + pos, set == SD_SET_G1 ? rt->x_rows : L);
    int32_t unit0 = set == SD_SET_G1 ? pos / rt->L[SD_SET_G1] * rt->n_blocks : -1;
    int rc = run_blocks(rt, set, n_past + pos, unit0, err);
    if (rc) return rc;
    /* The last chunk's blocks have run: the switch ends before the last logits. */
    if (last && (rc = sd_switch_finish(rt, err))) return rc;
    if (u->sink) memcpy(u->xs + (size_t)i * d, rt->x, (size_t)k * d * sizeof(float));
    if (sink) {
        if ((rc = head_to_sink(rt, rt->x, k, pos, sink, err))) return rc;
        /* The sink's last pass left the final token's logits in hl. */
        if (last && last_logits) memcpy(last_logits, rt->hl + (size_t)((k - 1) % rt->L[SD_SET_G2]) * nv, nv * sizeof(float));
    } else if (last && last_logits) {
        if ((rc = run_head(rt, rt->x + (size_t)(k - 1) * d, 1, last_logits, NULL, true, NULL, err))) return rc;
    }
    return SDNPU_OK;
}

int sd_rt_prefill(struct sd_rt *rt, const int32_t *tokens, int32_t n, int32_t n_past,
                  const struct sd_logit_sink *sink, const struct sd_subset_sink *subset,
                  const struct sd_prefill_watch *watch, float *last_logits, struct sd_err *err) {
    if (n < 0 || n_past < 0 || n > rt->n_ctx - n_past)
        return sd_err_set(err, SDNPU_ERR_CONTEXT_FULL, "%d tokens at position %d do not fit a context of %d", n,
                          n_past, rt->n_ctx);
    if (n > 0) sd_switch_begin(rt, n);
    struct subset_run u;
    int rc = subset_begin(rt, &u, n > 0 ? subset : NULL, err);
    if (rc) {
        sd_switch_abandon(rt);
        return rc;
    }
    int32_t L1 = rt->L[SD_SET_G1];
    enum sd_graph_set set_of[SD_MAX_BATCH_ROWS];
    int32_t k_of[SD_MAX_BATCH_ROWS];
    for (int32_t done = 0; done < n && !rc; done += L1) {
        int32_t r = SD_MIN(L1, n - done);
        const int32_t passes = chunk_plan(rt, r, set_of, k_of);
        for (int32_t p = 0, i = 0; p < passes && !rc; i += k_of[p], p++) {
            rc = prefill_step(rt, tokens + done + i, k_of[p], done + i, n_past, set_of[p], done + i + k_of[p] == n,
                              sink, &u, i, last_logits, err);
            rt->counts.prefill_passes[set_of[p]]++;
        }
        if (!rc && u.sink) rc = subset_chunk(rt, &u, done, r, err);
        if (!rc && watch && !watch->fn(watch->ud, done + r, n) && done + r < n)
            rc = sd_err_set(err, SDNPU_ABORTED, "prefill stopped after %d of %d tokens", done + r, n);
    }
    subset_end(rt, &u);
    if (rc) sd_switch_abandon(rt);
    return rc;
}

static int decode_rows(struct sd_rt *rt, const struct sd_row *rows, int32_t n_real, int32_t base, bool on_l2,
                       float *logits, int32_t *argmax, bool keep, const struct sd_head_topk *topk,
                       struct sd_err *err) {
    enum sd_graph_set set = (!on_l2 && n_real == 1) ? SD_SET_G0 : SD_SET_G2;
    int32_t L = rt->L[set];
    if (n_real < 1 || n_real > L)
        return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "%d rows to decode on a graph of %d rows", n_real, L);
    /* No switch is active here: the prefill that began one has ended it. */
    memcpy(rt->rows, rows, (size_t)n_real * sizeof *rows);
    int rc;
    if (set == SD_SET_G0 && rt->sw_mode != SD_SWITCH_OFF) {
        rc = run_one_row(rt, base, &L, err);
    } else {
        pad_rows(rt, n_real, L);
        rc = run_blocks(rt, set, base, -1, err);
    }
    if (rc) return rc;
    rt->counts.rows += L;
    rt->counts.pad_rows += L - n_real;
    return run_head(rt, rt->x, n_real, logits ? logits : rt->hl, argmax, keep, topk, err);
}

int sd_rt_decode(struct sd_rt *rt, const struct sd_row *rows, int32_t n_real, int32_t base, bool on_l2,
                 float *logits, int32_t *argmax, struct sd_err *err) {
    return decode_rows(rt, rows, n_real, base, on_l2, logits, argmax, true, NULL, err);
}

int sd_rt_decode_topk(struct sd_rt *rt, const struct sd_row *rows, int32_t n_real, int32_t base, bool on_l2,
                      float *logits, int32_t k, const int32_t *keep, int32_t n_keep, struct sd_err *err) {
    const struct sd_head_topk topk = {k, keep, n_keep};
    return decode_rows(rt, rows, n_real, base, on_l2, logits, NULL, true, &topk, err);
}

int sd_rt_decode_greedy(struct sd_rt *rt, const struct sd_row *rows, int32_t n_real, int32_t base, bool on_l2,
                        int32_t *argmax, struct sd_err *err) {
    return decode_rows(rt, rows, n_real, base, on_l2, NULL, argmax, false, NULL, err);
}

float *sd_rt_logits(struct sd_rt *rt) { return rt->hl; }

int32_t sd_rt_n_prefill(const struct sd_rt *rt) { return rt->L[SD_SET_G1]; }
int32_t sd_rt_n_verify(const struct sd_rt *rt) { return rt->L[SD_SET_G2]; }
int32_t sd_rt_set_rows(const struct sd_rt *rt, enum sd_graph_set set) { return rt->L[set]; }
int32_t sd_rt_n_blocks(const struct sd_rt *rt) { return rt->n_blocks; }
size_t sd_rt_prepared_bytes(const struct sd_rt *rt) { return sd_loader_prepared((struct sd_loader *)&rt->ld); }
double sd_rt_prepare_ms(const struct sd_rt *rt) { return rt->prepare_ms; }
size_t sd_rt_shared_weight_bytes(const struct sd_rt *rt) { return sd_backend_shared_weight_bytes(rt->be); }
const char *sd_rt_backend_desc(const struct sd_rt *rt) { return rt->be->desc; }
struct sd_rt_counts sd_rt_counts(const struct sd_rt *rt) {
    struct sd_rt_counts c = rt->counts;
    c.switch_wait_ms = rt->wait_ms;
    struct sd_loader *ld = (struct sd_loader *)&rt->ld;
    pthread_mutex_lock(&ld->mu);
    c.loader_ms = ld->busy_ms;
    pthread_mutex_unlock(&ld->mu);
    return c;
}

void sd_rt_release_graphs(struct sd_rt *rt) {
    sd_switch_abandon(rt);
    for (int s = 0; s < SD_SET_N; s++)
        for (int32_t b = 0; b < rt->n_blocks; b++) release_graph(rt, &rt->g[s][b]);
    for (int32_t b = 0; b < rt->n_blocks; b++) rt->block_set[b] = SD_SET_G1;
    release_graph(rt, &rt->h1);
    release_graph(rt, &rt->h2);
}

void sd_rt_set_switch(struct sd_rt *rt, enum sd_switch_mode mode) { rt->sw_mode = mode; }
enum sd_switch_mode sd_rt_switch_mode(const struct sd_rt *rt) { return rt->sw_mode; }
size_t sd_rt_peak_bytes(const struct sd_rt *rt) { return sd_loader_peak((struct sd_loader *)&rt->ld); }
void sd_rt_reset_peak(struct sd_rt *rt) { sd_loader_reset_peak(&rt->ld); }

void sd_rt_set_block_costs(struct sd_rt *rt, const double *g1_ms, const double *g2_ms, const double *load_ms) {
    for (int32_t b = 0; b < rt->n_blocks; b++) {
        if (g1_ms && g1_ms[b] > 0) rt->run_ms[0][b] = g1_ms[b];
        if (g2_ms && g2_ms[b] > 0) rt->run_ms[1][b] = g2_ms[b];
    }
    for (int32_t b = 0; load_ms && b <= rt->n_blocks; b++)
        if (load_ms[b] > 0) rt->load_ms[b] = load_ms[b];
}

void sd_rt_kv_truncate(struct sd_rt *rt, int32_t from) { sd_kv_truncate(&rt->kv, from); }
void sd_rt_kv_move(struct sd_rt *rt, int32_t src, int32_t dst) { sd_kv_move(&rt->kv, src, dst); }
size_t sd_rt_kv_snapshot_bytes(const struct sd_rt *rt, int32_t n) { return sd_kv_snapshot_bytes(&rt->kv, n); }
void sd_rt_kv_snapshot(const struct sd_rt *rt, int32_t n, void *dst) { sd_kv_snapshot(&rt->kv, n, dst); }
enum sd_kv_keys sd_rt_kv_keys(const struct sd_rt *rt) { return rt->kv.keys; }
void sd_rt_kv_restore(struct sd_rt *rt, const void *src, enum sd_kv_keys src_keys, int32_t n_src, int32_t n) {
    sd_kv_restore(&rt->kv, src, src_keys, n_src, n);
}

enum sd_graph_set sd_rt_block_set(const struct sd_rt *rt, int32_t b) { return rt->block_set[b]; }

int sd_rt_set_block_set(struct sd_rt *rt, int32_t b, enum sd_graph_set set, struct sd_err *err) {
    if (b < 0 || b >= rt->n_blocks) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "block %d of %d", b, rt->n_blocks);
    if (set != SD_SET_G1 && set != SD_SET_G2)
        return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "a block prefills on G1 or G2, not set %d", (int)set);
    rt->block_set[b] = set;
    return SDNPU_OK;
}

void sd_rt_set_costs(struct sd_rt *rt, const double ms[SD_SET_N]) {
    for (int s = 0; s < SD_SET_N; s++)
        if (ms[s] > 0) {
            rt->cost_ms[s] = ms[s];
            rt->cost_fixed[s] = true;
        }
}
