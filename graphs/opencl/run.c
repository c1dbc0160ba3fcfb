/*
 * graphs/opencl/run.c - running the OpenCL backend's graphs: the kernel
 * launches, a block graph's layers with attention on the host between the
 * projections, the head, and the test hooks of graphs/opencl/opencl.h that
 * run one launch alone.
 */
#include <CL/cl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "graphs/opencl/backend.h"

/* ------------------------------------------------------------ launches */

static size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

/* Y [L][w->n_out] = X [L][w->n_in] W^T. */
static int cl_matmul(struct cl_be *cb, const struct cl_prog *p, const struct cl_w *w, cl_mem X, cl_mem Y,
                     struct sd_err *err) {
    cl_kernel k = p->mm[w->type];
    cl_ulong rb = w->row_bytes;
    cl_int n_in = w->n_in, n_out = w->n_out;
    cl_int e = clSetKernelArg(k, 0, sizeof(cl_mem), &w->mem);
    e |= clSetKernelArg(k, 1, sizeof rb, &rb);
    e |= clSetKernelArg(k, 2, sizeof n_in, &n_in);
    e |= clSetKernelArg(k, 3, sizeof n_out, &n_out);
    e |= clSetKernelArg(k, 4, sizeof(cl_mem), &X);
    e |= clSetKernelArg(k, 5, sizeof(cl_mem), &Y);
    if (e != CL_SUCCESS) return sd_cl_fail(err, e, "clSetKernelArg(matmul)");
    size_t gsz[2] = {round_up((size_t)n_out, cb->mm_wg), (size_t)((p->n_rows + p->tr - 1) / p->tr)};
    size_t lsz[2] = {cb->mm_wg, 1};
    e = clEnqueueNDRangeKernel(cb->q, k, 2, NULL, gsz, lsz, 0, NULL, NULL);
    if (e != CL_SUCCESS) return sd_cl_fail(err, e, "clEnqueueNDRangeKernel(matmul)");
    return SDNPU_OK;
}

/* A row kernel (rmsnorm, add_rows, add_normed): one work-group of RN per
 * row; args are the kernel's buffers in order. */
static int cl_rows(struct cl_be *cb, const struct cl_prog *p, cl_kernel k, int n_args, const cl_mem *args,
                   struct sd_err *err) {
    cl_int e = CL_SUCCESS;
    for (int i = 0; i < n_args; i++)
        e |= clSetKernelArg(k, (cl_uint)i, sizeof(cl_mem), &args[i]);
    if (e != CL_SUCCESS) return sd_cl_fail(err, e, "clSetKernelArg(row kernel)");
    size_t gsz[2] = {cb->rn, (size_t)p->n_rows}, lsz[2] = {cb->rn, 1};
    e = clEnqueueNDRangeKernel(cb->q, k, 2, NULL, gsz, lsz, 0, NULL, NULL);
    if (e != CL_SUCCESS) return sd_cl_fail(err, e, "clEnqueueNDRangeKernel(row kernel)");
    return SDNPU_OK;
}

static int cl_rmsnorm(struct cl_be *cb, const struct cl_prog *p, cl_mem X, cl_mem w, cl_mem Y,
                      struct sd_err *err) {
    cl_mem a[3] = {X, w, Y};
    return cl_rows(cb, p, p->rmsnorm, 3, a, err);
}

/* X += O, or X += rmsnorm(O) * w when the model has the post-norm. */
static int cl_residual(struct cl_be *cb, const struct cl_prog *p, cl_mem O, cl_mem w, cl_mem X,
                       struct sd_err *err) {
    if (w) {
        cl_mem a[3] = {O, w, X};
        return cl_rows(cb, p, p->add_normed, 3, a, err);
    }
    cl_mem a[2] = {O, X};
    return cl_rows(cb, p, p->add_rows, 2, a, err);
}

static int cl_act(struct cl_be *cb, const struct cl_prog *p, cl_mem G, cl_mem U, int32_t n_ff, bool gelu,
                  struct sd_err *err) {
    cl_int g = gelu ? 1 : 0;
    cl_int e = clSetKernelArg(p->act_mul, 0, sizeof(cl_mem), &G);
    e |= clSetKernelArg(p->act_mul, 1, sizeof(cl_mem), &U);
    e |= clSetKernelArg(p->act_mul, 2, sizeof g, &g);
    if (e != CL_SUCCESS) return sd_cl_fail(err, e, "clSetKernelArg(act_mul)");
    size_t lsz = 64, gsz = round_up((size_t)p->n_rows * (size_t)n_ff, lsz);
    e = clEnqueueNDRangeKernel(cb->q, p->act_mul, 1, NULL, &gsz, &lsz, 0, NULL, NULL);
    if (e != CL_SUCCESS) return sd_cl_fail(err, e, "clEnqueueNDRangeKernel(act_mul)");
    return SDNPU_OK;
}

static int cl_write(struct cl_be *cb, cl_mem dst, const void *src, size_t n, struct sd_err *err) {
    cl_int e = clEnqueueWriteBuffer(cb->q, dst, CL_TRUE, 0, n, src, 0, NULL, NULL);
    return e == CL_SUCCESS ? SDNPU_OK : sd_cl_fail(err, e, "clEnqueueWriteBuffer");
}

static int cl_read(struct cl_be *cb, cl_mem src, void *dst, size_t n, bool blocking, struct sd_err *err) {
    cl_int e = clEnqueueReadBuffer(cb->q, src, blocking ? CL_TRUE : CL_FALSE, 0, n, dst, 0, NULL, NULL);
    return e == CL_SUCCESS ? SDNPU_OK : sd_cl_fail(err, e, "clEnqueueReadBuffer");
}

/* ------------------------------------------------------------ run */

static int cl_run_block(struct sd_backend *be, struct sd_graph *g, struct sd_kv_cache *kv,
                        const struct sd_row *rows, int32_t base, float *x, struct sd_err *err) {
    struct cl_be *cb = cl_be_of(be);
    struct cl_graph *cg = g->impl;
    const struct cl_prog *p = cg->prog;
    const struct sd_model_config *c = &be->m->cfg;
    const struct sd_graph_shape *s = &g->shape;
    size_t L = (size_t)s->n_rows, fl = sizeof(float);
    size_t nq = (size_t)c->n_head * (size_t)c->head_dim, nkv = (size_t)c->n_head_kv * (size_t)c->head_dim;
    struct sd_fwd *f = cg->fwd;
    int rc = cl_write(cb, cg->x, x, L * (size_t)c->d_model * fl, err);
    if (rc) return rc;
    sd_kv_mark_rows(kv, rows, s->n_rows);
    for (int32_t il = s->l0; il < s->l1; il++) {
        const struct cl_layer *Ly = &cg->layers[il - s->l0];
        if ((rc = cl_rmsnorm(cb, p, cg->x, Ly->attn_norm, cg->h, err)) ||
            (rc = cl_matmul(cb, p, &Ly->wq, cg->h, cg->q, err)) ||
            (rc = cl_matmul(cb, p, &Ly->wk, cg->h, cg->k, err)) ||
            (rc = cl_matmul(cb, p, &Ly->wv, cg->h, cg->v, err)) ||
            (rc = cl_read(cb, cg->q, sd_fwd_q(f), L * nq * fl, false, err)) ||
            (rc = cl_read(cb, cg->k, sd_fwd_k(f), L * nkv * fl, false, err)) ||
            (rc = cl_read(cb, cg->v, sd_fwd_v(f), L * nkv * fl, true, err)))
            goto fail;
        /* The host side of the boundary: attention against the KV cache. */
        sd_fwd_attention(f, kv, rows, s->n_rows, base, il);
        if ((rc = cl_write(cb, cg->h, sd_fwd_h(f), L * nq * fl, err)) ||
            (rc = cl_matmul(cb, p, &Ly->wo, cg->h, cg->o, err)) ||
            (rc = cl_residual(cb, p, cg->o, Ly->post_attn_norm, cg->x, err)) ||
            (rc = cl_rmsnorm(cb, p, cg->x, Ly->ffn_norm, cg->h, err)) ||
            (rc = cl_matmul(cb, p, &Ly->gate, cg->h, cg->gate, err)) ||
            (rc = cl_matmul(cb, p, &Ly->up, cg->h, cg->up, err)) ||
            (rc = cl_act(cb, p, cg->gate, cg->up, c->n_ff, c->gelu, err)) ||
            (rc = cl_matmul(cb, p, &Ly->down, cg->gate, cg->o, err)) ||
            (rc = cl_residual(cb, p, cg->o, Ly->post_ffn_norm, cg->x, err)))
            goto fail;
    }
    if ((rc = cl_read(cb, cg->x, x, L * (size_t)c->d_model * fl, true, err))) goto fail;
    return SDNPU_OK;
fail:
    clFinish(cb->q); /* nothing may still read or write the caller's memory */
    return rc;
}

static int cl_run_head(struct sd_backend *be, struct sd_graph *g, const float *x, float *logits,
                       struct sd_err *err) {
    struct cl_be *cb = cl_be_of(be);
    struct cl_graph *cg = g->impl;
    const struct sd_model_config *c = &be->m->cfg;
    size_t L = (size_t)g->shape.n_rows;
    int rc;
    if ((rc = cl_write(cb, cg->x, x, L * (size_t)c->d_model * sizeof(float), err)) ||
        (rc = cl_rmsnorm(cb, cg->prog, cg->x, cg->out_norm, cg->h, err)) ||
        (rc = cl_matmul(cb, cg->prog, &cg->out, cg->h, cg->logits, err)) ||
        (rc = cl_read(cb, cg->logits, logits, L * (size_t)cg->out.n_out * sizeof(float), true, err))) {
        clFinish(cb->q);
        return rc;
    }
    return SDNPU_OK;
}

int sd_cl_run(struct sd_backend *be, struct sd_graph *g, struct sd_kv_cache *kv, const struct sd_row *rows,
              int32_t base, float *x, float *logits, struct sd_err *err) {
    if (g->shape.kind == SD_GRAPH_HEAD) return cl_run_head(be, g, x, logits, err);
    return cl_run_block(be, g, kv, rows, base, x, err);
}

/* ------------------------------------------------------------ test hooks */

static bool is_opencl(const struct sd_backend *be) {
    return be && be->i && strcmp(be->i->name, "opencl") == 0;
}

int sd_opencl_test_matmul(struct sd_backend *be, const struct sd_weight *w, const float *x, int32_t n_rows,
                          float *y, struct sd_err *err) {
    if (!is_opencl(be)) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "not an OpenCL backend");
    if (n_rows < 1 || n_rows > SD_MAX_BATCH_ROWS)
        return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "bad row count");
    struct cl_be *cb = cl_be_of(be);
    struct cl_prog *p;
    int rc = sd_cl_get_program(be, n_rows, &p, err);
    if (rc) return rc;
    struct cl_w dw = {0};
    cl_mem X = NULL, Y = NULL;
    size_t counted = 0, n = (size_t)n_rows;
    if ((rc = sd_cl_upload_weight(cb, w, false, "test weight", &dw, &counted, err)) ||
        (rc = sd_cl_buffer(cb, n * (size_t)w->n_in * sizeof(float), x, &X, &counted, "test x", err)) ||
        (rc = sd_cl_buffer(cb, n * (size_t)w->n_out * sizeof(float), NULL, &Y, &counted, "test y", err)) ||
        (rc = cl_matmul(cb, p, &dw, X, Y, err)) ||
        (rc = cl_read(cb, Y, y, n * (size_t)w->n_out * sizeof(float), true, err)))
        clFinish(cb->q);
    rel(&dw.mem);
    rel(&X);
    rel(&Y);
    return rc;
}

int sd_opencl_test_rowop(struct sd_backend *be, enum sd_opencl_test_op op, const float *x, const float *a,
                         const float *w, int32_t n_rows, float *y, struct sd_err *err) {
    if (!is_opencl(be)) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "not an OpenCL backend");
    if (n_rows < 1 || n_rows > SD_MAX_BATCH_ROWS)
        return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "bad row count");
    struct cl_be *cb = cl_be_of(be);
    const struct sd_model_config *c = &be->m->cfg;
    struct cl_prog *p;
    int rc = sd_cl_get_program(be, n_rows, &p, err);
    if (rc) return rc;
    size_t width = (size_t)(op == SD_CL_OP_ACT_MUL ? c->n_ff : c->d_model);
    size_t bytes = (size_t)n_rows * width * sizeof(float), counted = 0;
    cl_mem X = NULL, A = NULL, W = NULL;
    /* X is computed in place (the residual kernels update x), so it is
     * read-write: copy it in after creation. */
    if ((rc = sd_cl_buffer(cb, bytes, NULL, &X, &counted, "test x", err)) ||
        (rc = cl_write(cb, X, x, bytes, err)))
        goto done;
    if (a && (rc = sd_cl_buffer(cb, bytes, a, &A, &counted, "test a", err))) goto done;
    if (w && (rc = sd_cl_buffer(cb, (size_t)c->d_model * sizeof(float), w, &W, &counted, "test w", err)))
        goto done;
    switch (op) {
    case SD_CL_OP_RMSNORM: {
        cl_mem out = NULL;
        if ((rc = sd_cl_buffer(cb, bytes, NULL, &out, &counted, "test y", err)) == SDNPU_OK) {
            if ((rc = cl_rmsnorm(cb, p, X, W, out, err)) == SDNPU_OK)
                rc = cl_read(cb, out, y, bytes, true, err);
            clFinish(cb->q);
            rel(&out);
        }
        goto done;
    }
    case SD_CL_OP_ADD:
        rc = cl_residual(cb, p, A, NULL, X, err);
        break;
    case SD_CL_OP_ADD_NORMED:
        rc = cl_residual(cb, p, A, W, X, err);
        break;
    case SD_CL_OP_ACT_MUL:
        rc = cl_act(cb, p, X, A, c->n_ff, c->gelu, err);
        break;
    default:
        rc = sd_err_set(err, SDNPU_ERR_INVALID_ARG, "unknown test op %d", (int)op);
    }
    if (rc == SDNPU_OK) rc = cl_read(cb, X, y, bytes, true, err);
done:
    clFinish(cb->q);
    rel(&X);
    rel(&A);
    rel(&W);
    return rc;
}
