/*
 * graphs/opencl/prepare.c - preparing and releasing the OpenCL backend's
 * graphs: what a shape will hold on the device (the estimate the memory
 * budget reads, and the count prepare checks itself against), and the
 * prepare that builds a graph's kernels and uploads its weights.
 */
#include <CL/cl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "graphs/opencl/backend.h"

/* Whether a graph's copy of w is the backend's shared buffer (subset:
 * w is a subset head's gathered rows). */
static bool cl_shares(const struct cl_be *cb, bool subset) { return cb->share_weights && !subset; }

/* Device bytes of the weights a shape uses that it would share: all of
 * them, or (held false) only those the backend holds no buffer for yet. */
static size_t cl_shared_weight_need(struct cl_be *cb, const struct sd_model *m,
                                    const struct sd_graph_shape *s, bool all) {
    if (!cl_shares(cb, s->n_subset > 0)) return 0;
    const struct sd_weight *w[7];
    size_t n = 0;
    pthread_mutex_lock(&cb->mu);
    if (s->kind == SD_GRAPH_HEAD) {
        n = all || !sd_cl_wbuf_find(cb, m->output.data) ? w_bytes(&m->output) : 0;
    } else {
        for (int32_t il = s->l0; il < s->l1; il++) {
            const struct sd_layer *Ly = &m->layers[il];
            const struct sd_weight *ws[] = {&Ly->wq,     &Ly->wk,   &Ly->wv,    &Ly->wo,
                                            &Ly->w_gate, &Ly->w_up, &Ly->w_down};
            memcpy(w, ws, sizeof ws);
            for (size_t i = 0; i < 7; i++)
                n += all || !sd_cl_wbuf_find(cb, w[i]->data) ? w_bytes(w[i]) : 0;
        }
    }
    pthread_mutex_unlock(&cb->mu);
    return n;
}

/* Device bytes a graph holds on its own: weights as stored (unless the
 * backend shares them), norm vectors, and a head's activations (a block's
 * are shared: cl_acts). prepare allocates exactly this (it checks). */
static size_t cl_dev_bytes(const struct cl_be *cb, const struct sd_model *m, const struct sd_graph_shape *s) {
    const struct sd_model_config *c = &m->cfg;
    const bool own_w = !cl_shares(cb, s->n_subset > 0);
    size_t L = (size_t)s->n_rows, d = (size_t)c->d_model;
    if (s->kind == SD_GRAPH_HEAD) {
        struct sd_weight w;
        sd_head_weight(m, s, &w, NULL, NULL);
        return (own_w ? w_bytes(&w) : 0) + v_bytes(&m->output_norm) +
               L * (2 * d + (size_t)sd_head_width(m, s)) * sizeof(float);
    }
    size_t bytes = 0;
    for (int32_t il = s->l0; il < s->l1; il++) {
        const struct sd_layer *Ly = &m->layers[il];
        const struct sd_weight *ws[] = {&Ly->wq,     &Ly->wk,   &Ly->wv,    &Ly->wo,
                                        &Ly->w_gate, &Ly->w_up, &Ly->w_down};
        for (size_t i = 0; i < SD_ARRAY_LEN(ws); i++)
            bytes += own_w ? w_bytes(ws[i]) : 0;
        const struct sd_vec *vs[] = {&Ly->attn_norm, &Ly->post_attn_norm, &Ly->ffn_norm, &Ly->post_ffn_norm};
        for (size_t i = 0; i < SD_ARRAY_LEN(vs); i++)
            bytes += v_bytes(vs[i]);
    }
    return bytes;
}

/* A block's estimate adds the activations and host scratch of its L unless
 * they are held already (a loader's counts them as new: see graph.h). */
size_t sd_cl_estimate(struct sd_backend *be, const struct sd_graph_shape *s, unsigned flags) {
    struct cl_be *cb = cl_be_of(be);
    const bool alone = flags & SD_PREPARE_LOADER;
    const size_t shared_w = cl_shared_weight_need(cb, be->m, s, alone);
    if (s->kind == SD_GRAPH_HEAD) return cl_dev_bytes(cb, be->m, s) + shared_w;
    pthread_mutex_lock(&cb->mu);
    const bool held = !alone && sd_cl_acts_find(cb, s->n_rows);
    pthread_mutex_unlock(&cb->mu);
    size_t host =
        sd_fwd_share_need(alone ? NULL : cb->share, be->m, s->n_rows, s->n_ctx, sd_pool_n_threads(be->pool));
    return cl_dev_bytes(cb, be->m, s) + shared_w + (held ? 0 : sd_cl_act_bytes(&be->m->cfg, s->n_rows)) +
           host;
}

static void cl_layer_release(struct cl_be *cb, struct cl_layer *Ly) {
    struct cl_w *ws[] = {&Ly->wq, &Ly->wk, &Ly->wv, &Ly->wo, &Ly->gate, &Ly->up, &Ly->down};
    for (size_t i = 0; i < SD_ARRAY_LEN(ws); i++)
        sd_cl_w_put(cb, ws[i]);
    rel(&Ly->attn_norm);
    rel(&Ly->post_attn_norm);
    rel(&Ly->ffn_norm);
    rel(&Ly->post_ffn_norm);
}

void sd_cl_release(struct sd_backend *be, struct sd_graph *g) {
    struct cl_graph *cg = g->impl;
    if (!cg) return;
    if (cg->layers) {
        for (int32_t i = 0; i < g->shape.l1 - g->shape.l0; i++)
            cl_layer_release(cl_be_of(be), &cg->layers[i]);
        sd_free(cg->layers);
    }
    sd_cl_w_put(cl_be_of(be), &cg->out);
    rel(&cg->out_norm);
    cl_mem *acts[] = {&cg->x, &cg->h, &cg->q, &cg->k, &cg->v, &cg->o, &cg->gate, &cg->up, &cg->logits};
    for (size_t i = 0; i < SD_ARRAY_LEN(acts); i++)
        rel(acts[i]);
    if (cg->acts) sd_cl_acts_put(cl_be_of(be), cg->acts);
    sd_fwd_free(cg->fwd);
    sd_free(cg);
    g->impl = NULL;
}

static int cl_upload_layer(struct cl_be *cb, const struct sd_layer *Ly, int32_t il, struct cl_layer *out,
                           size_t *counted, struct sd_err *err) {
    static const char *wn[] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
    const struct sd_weight *ws[] = {&Ly->wq, &Ly->wk, &Ly->wv, &Ly->wo, &Ly->w_gate, &Ly->w_up, &Ly->w_down};
    struct cl_w *dst[] = {&out->wq, &out->wk, &out->wv, &out->wo, &out->gate, &out->up, &out->down};
    char name[64];
    for (size_t i = 0; i < SD_ARRAY_LEN(ws); i++) {
        snprintf(name, sizeof name, "blk.%d.%s.weight", il, wn[i]);
        int rc = sd_cl_upload_weight(cb, ws[i], cl_shares(cb, false), name, dst[i], counted, err);
        if (rc) return rc;
    }
    static const char *vn[] = {"attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm"};
    const struct sd_vec *vs[] = {&Ly->attn_norm, &Ly->post_attn_norm, &Ly->ffn_norm, &Ly->post_ffn_norm};
    cl_mem *vd[] = {&out->attn_norm, &out->post_attn_norm, &out->ffn_norm, &out->post_ffn_norm};
    for (size_t i = 0; i < SD_ARRAY_LEN(vs); i++) {
        snprintf(name, sizeof name, "blk.%d.%s.weight", il, vn[i]);
        int rc = sd_cl_upload_vec(cb, vs[i], name, vd[i], counted, err);
        if (rc) return rc;
    }
    return SDNPU_OK;
}

/* On the loader (flags & SD_PREPARE_LOADER) as on the session's thread:
 * the kernels come from sd_cl_get_program (locked), every buffer is a new
 * object of this graph (clCreateBuffer is thread-safe and enqueues
 * nothing), no kernel argument is set (runs set them), and the session's
 * worker pool is not run: sd_fwd_create only records it (and reads its
 * thread count, fixed at creation) for this graph's later runs on the
 * session's thread; its host scratch comes from the backend's share
 * (locked; the scratch of a shape the share holds is only counted, never
 * written), and the one host-side copy, a subset head's gathered rows, is
 * a plain loop on this thread. */
int sd_cl_prepare(struct sd_backend *be, struct sd_graph *g, unsigned flags, struct sd_err *err) {
    const bool loader = flags & SD_PREPARE_LOADER;
    struct cl_be *cb = cl_be_of(be);
    const struct sd_model *m = be->m;
    const struct sd_model_config *c = &m->cfg;
    const struct sd_graph_shape *s = &g->shape;
    struct cl_graph *cg = sd_calloc(1, sizeof *cg);
    if (!cg) return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for a graph");
    g->impl = cg;
    size_t L = (size_t)s->n_rows, d = (size_t)c->d_model, fl = sizeof(float);
    size_t counted = 0;
    int rc = sd_cl_get_program(be, s->n_rows, &cg->prog, err);
    if (rc) goto fail;
    if (s->kind == SD_GRAPH_HEAD) {
        /* A subset head uploads a gathered copy of its rows (freed once on the device). */
        struct sd_weight w;
        void *rows = NULL;
        if ((rc = sd_head_weight(m, s, &w, &rows, err))) goto fail;
        rc = sd_cl_upload_weight(cb, &w, cl_shares(cb, s->n_subset > 0), "output.weight", &cg->out, &counted,
                                 err);
        sd_free(rows);
        if (rc ||
            (rc =
                 sd_cl_upload_vec(cb, &m->output_norm, "output_norm.weight", &cg->out_norm, &counted, err)) ||
            (rc = sd_cl_buffer(cb, L * d * fl, NULL, &cg->x, &counted, "activations x", err)) ||
            (rc = sd_cl_buffer(cb, L * d * fl, NULL, &cg->h, &counted, "activations h", err)) ||
            (rc = sd_cl_buffer(cb, L * (size_t)sd_head_width(m, s) * fl, NULL, &cg->logits, &counted,
                               "logits", err)))
            goto fail;
    } else {
        cg->layers = sd_calloc((size_t)(s->l1 - s->l0), sizeof *cg->layers);
        if (!cg->layers) {
            rc = sd_err_set(err, SDNPU_ERR_OOM, "out of memory for a graph");
            goto fail;
        }
        for (int32_t il = s->l0; il < s->l1; il++)
            if ((rc = cl_upload_layer(cb, &m->layers[il], il, &cg->layers[il - s->l0], &counted, err)))
                goto fail;
        if ((rc = sd_cl_acts_get(cb, c, s->n_rows, &cg->acts, err))) goto fail;
        cl_mem *mine[CL_ACT_N] = {&cg->x, &cg->h, &cg->q, &cg->k, &cg->v, &cg->o, &cg->gate, &cg->up};
        for (int i = 0; i < CL_ACT_N; i++) {
            clRetainMemObject(cg->acts->mem[i]);
            *mine[i] = cg->acts->mem[i];
        }
        if ((rc = sd_fwd_create(m, s->n_rows, s->n_ctx, be->pool, cb->share, &cg->fwd, err))) goto fail;
    }
    /* The weights went in with CL_MEM_COPY_HOST_PTR, which takes its copy
     * of the host data inside clCreateBuffer (the host memory is not read
     * after it returns), so a prepared graph needs nothing more to be
     * complete. On the session's thread the queue is drained as before
     * (harmless: runs leave it idle). On the loader it is skipped rather
     * than given a queue of its own: q belongs to the session's runs (a
     * clFinish here would wait on, and race with, a run in flight), and
     * this prepare enqueued nothing on any queue, so a clFinish of a loader
     * queue would wait for nothing. A device that defers moving the buffer
     * to its memory does so at the graph's first run, on the session's
     * queue, as it would after a prepare on the session's thread. */
    if (!loader) clFinish(cb->q);
    if (counted != cl_dev_bytes(cb, m, s)) {
        rc = sd_err_set(err, SDNPU_ERR_BACKEND, "OpenCL: prepared %zu device bytes, estimated %zu", counted,
                        cl_dev_bytes(cb, m, s));
        goto fail;
    }
    cg->dev_bytes = counted;
    g->prepared_bytes = counted + (cg->fwd ? sd_fwd_bytes(cg->fwd) : 0);
    return SDNPU_OK;
fail:
    sd_cl_release(be, g);
    if (rc == SDNPU_ERR_BACKEND || rc == SDNPU_ERR_OOM || rc == SDNPU_ERR_UNSUPPORTED)
        sd_err_prefix(err, "preparing the %s graph (L=%d)", s->kind == SD_GRAPH_HEAD ? "head" : "block",
                      s->n_rows);
    return rc;
}
