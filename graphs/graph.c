/* graphs/graph.c - the backend-independent part of static graphs: choosing
 * a backend, the memory budget, timing preparation, and the host-side token
 * embedding. */
#include "graphs/graph.h"

#include <string.h>

#include "graphs/quant.h"

int sd_backend_create(const char *name, int cl_device, enum sd_kernels kernels, const struct sd_model *m,
                      struct sd_pool *pool, struct sd_backend **out, struct sd_err *err) {
    *out = NULL;
    if (!name || !*name || strcmp(name, "cpu") == 0) return sd_backend_cpu_create(m, pool, kernels, out, err);
    if (strcmp(name, "opencl") == 0) return sd_backend_opencl_create(m, pool, cl_device, out, err);
    return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "unknown backend \"%s\" (known: cpu, opencl)", name);
}

void sd_backend_free(struct sd_backend *be) {
    if (be) be->i->destroy(be);
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
    size_t need = be->i->estimate(be, shape);
    if (need > mem_left) {
        return sd_err_set(err, SDNPU_ERR_OOM,
                          "preparing the %s graph (%s, L=%d) needs %.1f MiB but the memory limit leaves %.1f MiB",
                          shape->kind == SD_GRAPH_HEAD ? "head" : "block", be->i->name, shape->n_rows,
                          (double)need / 1048576.0, (double)mem_left / 1048576.0);
    }
    g->shape = *shape;
    g->be = be;
    double t0 = sd_time_ms();
    int rc = be->i->prepare(be, g, flags, err);
    if (rc) {
        memset(g, 0, sizeof *g);
        return rc;
    }
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

void sd_graph_release(struct sd_graph *g) {
    if (!g || !g->be) return;
    g->be->i->release(g->be, g);
    memset(g, 0, sizeof *g);
}

int sd_graph_run(struct sd_graph *g, struct sd_kv_cache *kv, const struct sd_row *rows, int32_t base, float *x,
                 float *logits, struct sd_err *err) {
    if (!g->be) return sd_err_set(err, SDNPU_ERR_STATE, "graph is not prepared");
    return g->be->i->run(g->be, g, kv, rows, base, x, logits, err);
}

void sd_embed_rows(const struct sd_model *m, const struct sd_row *rows, int32_t n_rows, float *x) {
    int32_t d = m->cfg.d_model;
    for (int32_t r = 0; r < n_rows; r++) {
        float *xr = x + (size_t)r * (size_t)d;
        int32_t t = rows[r].token;
        if (t < 0 || t >= m->cfg.n_vocab) t = 0; /* padding rows compute on token 0 */
        sd_dequantize_row(m->tok_embd.type, (const char *)m->tok_embd.data + (size_t)t * m->tok_embd.row_bytes, xr, d);
        if (m->cfg.embd_scale != 1.0f)
            for (int32_t i = 0; i < d; i++) xr[i] *= m->cfg.embd_scale;
    }
}

#ifndef SD_HAVE_OPENCL
int sd_backend_opencl_create(const struct sd_model *m, struct sd_pool *pool, int cl_device, struct sd_backend **out,
                             struct sd_err *err) {
    (void)m;
    (void)pool;
    (void)cl_device;
    *out = NULL;
    return sd_err_set(err, SDNPU_ERR_UNSUPPORTED, "this build of sdnpu has no OpenCL backend (OpenCL was not found)");
}

int sd_opencl_list_devices(char *buf, size_t cap, struct sd_err *err) {
    if (cap) buf[0] = '\0';
    return sd_err_set(err, SDNPU_ERR_UNSUPPORTED, "this build of sdnpu has no OpenCL backend");
}
#endif

const char *sd_cpu_kernels_desc(void) {
    if (sd_quant_get_impl() != SD_IMPL_AVX2) return "scalar";
    return sd_quant_avx512_active() ? "AVX2+AVX-512 VNNI" : "AVX2";
}
