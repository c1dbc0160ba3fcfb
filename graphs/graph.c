/* graphs/graph.c - the backend-independent part of static graphs: choosing
 * a backend, the memory budget, timing preparation, and the host-side token
 * embedding. */
#include "graphs/graph.h"

#include <assert.h>
#include <string.h>

#include "graphs/forward.h"
#include "graphs/packed.h"
#include "graphs/quant.h"

int sd_backend_create(const char *name, int cl_device, enum sd_kernels kernels, const struct sd_model *m,
                      struct sd_wstore *weights, struct sd_pool *pool, struct sd_backend **out, struct sd_err *err) {
    *out = NULL;
    if (!name || !*name || strcmp(name, "cpu") == 0) return sd_backend_cpu_create(m, pool, kernels, weights, out, err);
    if (strcmp(name, "opencl") == 0) return sd_backend_opencl_create(m, pool, cl_device, weights != NULL, out, err);
    return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "unknown backend \"%s\" (known: cpu, opencl)", name);
}

enum sd_kv_keys sd_backend_kv_keys(const struct sd_backend *be) { return be->kv_keys; }

void sd_backend_free(struct sd_backend *be) {
    if (be) be->i->destroy(be);
}

/* A subset is for heads only, and holds distinct ids of the vocabulary
 * (a repeated row would be a wasted output and a caller's bug). */
static int check_subset(const struct sd_model_config *c, const struct sd_graph_shape *s, struct sd_err *err) {
    if (s->n_subset == 0 && !s->subset) return SDNPU_OK;
    if (s->kind != SD_GRAPH_HEAD || s->n_subset < 1 || !s->subset)
        return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "a vocabulary subset of %d tokens: heads only, at least one token",
                          s->n_subset);
    if (s->n_subset > c->n_vocab)
        return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "a vocabulary subset of %d tokens: the vocabulary has %d",
                          s->n_subset, c->n_vocab);
    uint8_t *seen = sd_calloc(((size_t)c->n_vocab + 7) / 8, 1);
    if (!seen) return sd_err_set(err, SDNPU_ERR_OOM, "out of memory checking a vocabulary subset");
    int rc = SDNPU_OK;
    for (int32_t i = 0; i < s->n_subset && rc == SDNPU_OK; i++) {
        int32_t t = s->subset[i];
        if (t < 0 || t >= c->n_vocab)
            rc = sd_err_set(err, SDNPU_ERR_INVALID_ARG, "vocabulary subset entry %d is token %d, outside 0..%d", i, t,
                            c->n_vocab - 1);
        else if (seen[t / 8] & (1u << (t % 8)))
            rc = sd_err_set(err, SDNPU_ERR_INVALID_ARG, "vocabulary subset entry %d repeats token %d", i, t);
        else
            seen[t / 8] |= (uint8_t)(1u << (t % 8));
    }
    sd_free(seen);
    return rc;
}

static int graph_prepare(struct sd_backend *be, const struct sd_graph_shape *shape, size_t mem_left, unsigned flags,
                         struct sd_graph *g, struct sd_err *err) {
    memset(g, 0, sizeof *g);
    const struct sd_model_config *c = &be->m->cfg;
    if (shape->n_rows < 1 || shape->n_rows > SD_MAX_BATCH_ROWS)
        return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "graph of %d rows: must be 1..%d", shape->n_rows,
                          SD_MAX_BATCH_ROWS);
    if (shape->kind == SD_GRAPH_BLOCK && (shape->l0 < 0 || shape->l0 >= shape->l1 || shape->l1 > c->n_layer))
        return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "block of layers [%d, %d): the model has %d layers", shape->l0,
                          shape->l1, c->n_layer);
    if (shape->n_ctx < 1) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "graph context of %d slots", shape->n_ctx);
    int rc = check_subset(c, shape, err);
    if (rc) return rc;
    size_t need = be->i->estimate(be, shape, flags);
    if (need > mem_left) {
        return sd_err_set(err, SDNPU_ERR_OOM,
                          "preparing the %s graph (%s, L=%d) needs %.1f MiB but the memory limit leaves %.1f MiB",
                          shape->kind == SD_GRAPH_HEAD ? "head" : "block", be->i->name, shape->n_rows,
                          (double)need / 1048576.0, (double)mem_left / 1048576.0);
    }
    g->shape = *shape;
    g->be = be;
    double t0 = sd_time_ms();
    rc = be->i->prepare(be, g, flags, err);
    if (rc) {
        memset(g, 0, sizeof *g);
        return rc;
    }
    g->shape.subset = NULL; /* the caller's list: read while preparing only */
    g->prepare_ms = sd_time_ms() - t0;
    return SDNPU_OK;
}

int sd_graph_prepare(struct sd_backend *be, const struct sd_graph_shape *shape, size_t mem_left, struct sd_graph *g,
                     struct sd_err *err) {
    return graph_prepare(be, shape, mem_left, 0, g, err);
}

int sd_graph_prepare_on_loader(struct sd_backend *be, const struct sd_graph_shape *shape, size_t mem_left,
                               struct sd_graph *g, struct sd_err *err) {
    if (!be->i->loader_prepare) {
        memset(g, 0, sizeof *g);
        return sd_err_set(err, SDNPU_ERR_UNSUPPORTED, "the %s backend prepares graphs on the session's thread only",
                          be->i->name);
    }
    return graph_prepare(be, shape, mem_left, SD_PREPARE_LOADER, g, err);
}

size_t sd_backend_shared_bytes(struct sd_backend *be) { return be->i->shared_bytes ? be->i->shared_bytes(be) : 0; }
size_t sd_backend_shared_weight_bytes(struct sd_backend *be) {
    return be->i->shared_weight_bytes ? be->i->shared_weight_bytes(be) : 0;
}

void sd_graph_release(struct sd_graph *g) {
    if (!g || !g->be) return;
    g->be->i->release(g->be, g);
    memset(g, 0, sizeof *g);
}

int sd_graph_run(struct sd_graph *g, struct sd_kv_cache *kv, const struct sd_row *rows, int32_t base, float *x,
                 float *logits, struct sd_err *err) {
    if (!g->be) return sd_err_set(err, SDNPU_ERR_STATE, "graph is not prepared");
    if (kv && g->shape.kind == SD_GRAPH_BLOCK && kv->keys != sd_backend_kv_keys(g->be))
        return sd_err_set(err, SDNPU_ERR_STATE,
                          "the KV cache holds %s keys; this backend's attention reads %s",
                          kv->keys == SD_KV_KEYS_I16 ? "integer" : "fp16",
                          sd_backend_kv_keys(g->be) == SD_KV_KEYS_I16 ? "integer" : "fp16");
    return g->be->i->run(g->be, g, kv, rows, base, x, logits, err);
}

int sd_graph_run_argmax(struct sd_graph *g, float *x, float *logits, int32_t *argmax, bool keep_logits,
                        struct sd_err *err) {
    if (!g->be) return sd_err_set(err, SDNPU_ERR_STATE, "graph is not prepared");
    assert(g->shape.kind == SD_GRAPH_HEAD);
    if (g->be->i->run_argmax) return g->be->i->run_argmax(g->be, g, x, logits, argmax, keep_logits, err);
    int rc = g->be->i->run(g->be, g, NULL, NULL, 0, x, logits, err);
    if (rc) return rc;
    const size_t width = (size_t)sd_head_width(g->be->m, &g->shape);
    for (int32_t r = 0; r < g->shape.n_rows; r++) argmax[r] = sd_amax_of(logits + (size_t)r * width, (int64_t)width);
    return SDNPU_OK;
}

int sd_graph_run_topk(struct sd_graph *g, float *x, float *logits, const struct sd_head_topk *topk,
                      struct sd_err *err) {
    if (!g->be) return sd_err_set(err, SDNPU_ERR_STATE, "graph is not prepared");
    assert(g->shape.kind == SD_GRAPH_HEAD);
    if (g->be->i->run_topk) return g->be->i->run_topk(g->be, g, x, logits, topk, err);
    return g->be->i->run(g->be, g, NULL, NULL, 0, x, logits, err);
}

int32_t sd_head_width(const struct sd_model *m, const struct sd_graph_shape *shape) {
    return shape->n_subset > 0 ? shape->n_subset : m->cfg.n_vocab;
}

int sd_head_weight(const struct sd_model *m, const struct sd_graph_shape *shape, struct sd_weight *out, void **buf,
                   struct sd_err *err) {
    *out = m->output;
    if (buf) *buf = NULL;
    if (shape->n_subset <= 0) return SDNPU_OK;
    out->n_out = shape->n_subset;
    if (!buf) return SDNPU_OK;
    uint8_t *rows = sd_malloc((size_t)shape->n_subset * m->output.row_bytes);
    if (!rows) return sd_err_set(err, SDNPU_ERR_OOM, "out of memory gathering %d rows of the output projection", shape->n_subset);
    for (int32_t i = 0; i < shape->n_subset; i++)
        memcpy(rows + (size_t)i * m->output.row_bytes,
               (const uint8_t *)m->output.data + (size_t)shape->subset[i] * m->output.row_bytes, m->output.row_bytes);
    out->data = rows;
    *buf = rows;
    return SDNPU_OK;
}

/* A read fault on a file mapping maps up to this much around the page it
 * wants (the kernel's fault-around), where the page cache holds it. */
#define FAULT_AROUND ((uintptr_t)64 << 10)

/* Give back what reading one row of the embedding table brought in: its
 * page and the fault-around window, within the table. Otherwise every
 * token a session ever saw would keep 64 KiB of the table resident
 * (17 MiB of Gemma 3's after one 340-token prompt), and a later read only
 * faults the row in again. */
static void drop_row(const struct sd_weight *w, const char *row) {
    const uintptr_t t0 = (uintptr_t)w->data, t1 = t0 + (size_t)w->n_out * w->row_bytes;
    uintptr_t a = (uintptr_t)row & ~(FAULT_AROUND - 1);
    uintptr_t b = ((uintptr_t)row + w->row_bytes + FAULT_AROUND - 1) & ~(FAULT_AROUND - 1);
    a = a < t0 ? t0 : a;
    b = b > t1 ? t1 : b;
    sd_drop_pages((const void *)a, b - a);
}

void sd_embed_rows(const struct sd_model *m, const struct sd_row *rows, int32_t n_rows, float *x) {
    int32_t d = m->cfg.d_model;
    for (int32_t r = 0; r < n_rows; r++) {
        float *xr = x + (size_t)r * (size_t)d;
        int32_t t = rows[r].token;
        if (t < 0 || t >= m->cfg.n_vocab) t = 0; /* padding rows compute on token 0 */
        const char *row = (const char *)m->tok_embd.data + (size_t)t * m->tok_embd.row_bytes;
        sd_dequantize_row(m->tok_embd.type, row, xr, d);
        if (m->file_mapped) drop_row(&m->tok_embd, row);
        if (m->cfg.embd_scale != 1.0f)
            for (int32_t i = 0; i < d; i++) xr[i] *= m->cfg.embd_scale;
    }
}

#ifndef SD_HAVE_OPENCL
int sd_backend_opencl_create(const struct sd_model *m, struct sd_pool *pool, int cl_device, bool share_weights,
                             struct sd_backend **out, struct sd_err *err) {
    (void)m;
    (void)pool;
    (void)cl_device;
    (void)share_weights;
    *out = NULL;
    return sd_err_set(err, SDNPU_ERR_UNSUPPORTED, "this build of sdnpu has no OpenCL backend (OpenCL was not found)");
}

int sd_opencl_list_devices(char *buf, size_t cap, struct sd_err *err) {
    if (cap) buf[0] = '\0';
    return sd_err_set(err, SDNPU_ERR_UNSUPPORTED, "this build of sdnpu has no OpenCL backend");
}
#endif

const char *sd_cpu_isa_desc(void) {
    if (sd_quant_get_impl() != SD_IMPL_AVX2) return "scalar";
    const bool gf = sd_quant_gfni_active();
    /* AMX's tiles change what wide passes cost, so a profile measured
     * without them (graphs/packed.h) is not one with them. */
    if (sd_quant_avx512_active() && sd_packed_amx_active())
        return gf ? "AVX-512 VNNI+GFNI+AMX" : "AVX-512 VNNI+AMX";
    if (sd_quant_avx512_active()) return gf ? "AVX-512 VNNI+GFNI" : "AVX-512 VNNI";
    if (sd_quant_avxvnni_active()) return gf ? "AVX-VNNI+GFNI" : "AVX-VNNI";
    return "AVX2";
}

const char *sd_cpu_kernels_desc(void) {
    if (sd_quant_get_impl() != SD_IMPL_AVX2) return "scalar";
    const bool gf = sd_quant_gfni_active();
    if (!sd_quant_avx512_active())
        return !sd_quant_avxvnni_active() ? "AVX2" : gf ? "AVX2+AVX-VNNI+GFNI" : "AVX2+AVX-VNNI";
    switch (sd_fwd_pv_path()) {
    case SD_PV_BF16:
        return gf ? "AVX2+AVX-512 VNNI+GFNI+BF16" : "AVX2+AVX-512 VNNI+BF16";
    case SD_PV_FMA_FASTER:
        return gf ? "AVX2+AVX-512 VNNI+GFNI (BF16 present, measured slower for p.V)"
                  : "AVX2+AVX-512 VNNI (BF16 present, measured slower for p.V)";
    default:
        return gf ? "AVX2+AVX-512 VNNI+GFNI" : "AVX2+AVX-512 VNNI";
    }
}

const char *sd_cpu_amx_desc(void) { return sd_amx_desc(sd_amx_probe()); }
