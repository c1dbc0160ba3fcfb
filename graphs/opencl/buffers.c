/*
 * graphs/opencl/buffers.c - the OpenCL backend's device buffers: making
 * one within the device's limits, the weights a graph uploads (its own copy,
 * or the backend's one shared buffer per weight), and the activations the
 * block graphs of one row count share.
 */
#include <CL/cl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "graphs/opencl/backend.h"

/* A weight's device buffer shared by the backend's graphs that read it,
 * keyed by the host data it was made from (the model's: a subset head's
 * gathered rows are never shared). Each graph holds its own retain; the
 * entry holds one more and counts the graphs. */
struct cl_wbuf {
    const void *src;
    cl_mem mem;
    size_t bytes;
    int refs;
    struct cl_wbuf *next;
};

/* Widths of a block's activations x, h, q, k, v, o, gate, up (floats a row). */
static void cl_act_widths(const struct sd_model_config *c, size_t wd[CL_ACT_N]) {
    size_t d = (size_t)c->d_model, nq = (size_t)c->n_head * (size_t)c->head_dim;
    size_t nkv = (size_t)c->n_head_kv * (size_t)c->head_dim, ff = (size_t)c->n_ff;
    const size_t w[CL_ACT_N] = {d, SD_MAX(d, nq), nq, nkv, nkv, d, ff, ff};
    memcpy(wd, w, sizeof w);
}

/* Device bytes of a block's activations at L rows (shared: cl_acts). */
size_t sd_cl_act_bytes(const struct sd_model_config *c, int32_t L) {
    size_t wd[CL_ACT_N], n = 0;
    cl_act_widths(c, wd);
    for (int i = 0; i < CL_ACT_N; i++)
        n += (size_t)L * wd[i] * sizeof(float);
    return n;
}

/* Under mu: the shared buffer made from src, or NULL. */
struct cl_wbuf *sd_cl_wbuf_find(const struct cl_be *cb, const void *src) {
    for (struct cl_wbuf *b = cb->wbufs; b; b = b->next)
        if (b->src == src) return b;
    return NULL;
}

/* The shared activations of L rows, if the backend holds them (under mu). */
struct cl_acts *sd_cl_acts_find(const struct cl_be *cb, int32_t L) {
    for (struct cl_acts *a = cb->acts; a; a = a->next)
        if (a->L == L) return a;
    return NULL;
}

size_t sd_cl_shared_bytes(struct sd_backend *be) {
    struct cl_be *cb = cl_be_of(be);
    pthread_mutex_lock(&cb->mu);
    size_t dev = cb->acts_bytes + cb->wbuf_bytes;
    pthread_mutex_unlock(&cb->mu);
    return dev + sd_fwd_share_bytes(cb->share);
}

size_t sd_cl_shared_weight_bytes(struct sd_backend *be) {
    struct cl_be *cb = cl_be_of(be);
    pthread_mutex_lock(&cb->mu);
    size_t n = cb->wbuf_bytes;
    pthread_mutex_unlock(&cb->mu);
    return n;
}

/* A device buffer of n bytes, filled from src when given. */
int sd_cl_buffer(struct cl_be *cb, size_t n, const void *src, cl_mem *out, size_t *counted, const char *what,
                 struct sd_err *err) {
    cl_int e;
    if (n > cb->max_alloc)
        return sd_err_set(err, SDNPU_ERR_OOM,
                          "OpenCL: %s needs %.1f MiB but the device allows %.1f MiB per buffer", what,
                          (double)n / 1048576.0, (double)cb->max_alloc / 1048576.0);
    cl_mem_flags fl = src ? CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR : CL_MEM_READ_WRITE;
    *out = clCreateBuffer(cb->ctx, fl, n, (void *)src, &e);
    if (e != CL_SUCCESS) {
        *out = NULL;
        if (e == CL_MEM_OBJECT_ALLOCATION_FAILURE || e == CL_OUT_OF_HOST_MEMORY || e == CL_OUT_OF_RESOURCES)
            return sd_err_set(err, SDNPU_ERR_OOM, "OpenCL: allocating %s (%.1f MiB) failed: %s", what,
                              (double)n / 1048576.0, sd_cl_err_name(e));
        return sd_cl_fail(err, e, what);
    }
    *counted += n;
    return SDNPU_OK;
}

int sd_cl_upload_weight(struct cl_be *cb, const struct sd_weight *w, bool shared, const char *name,
                        struct cl_w *out, size_t *counted, struct sd_err *err) {
    if (!sd_opencl_type_supported(w->type))
        return sd_err_set(
            err, SDNPU_ERR_UNSUPPORTED,
            "tensor %s: type %s has no OpenCL kernel (the backend runs f32, f16, bf16, q4_0, q4_1, "
            "q5_0, q5_1, q8_0, q4_K, q5_K, q6_K)",
            name, sd_type_name(w->type));
    if (w->n_in % 32 != 0 || w->n_in > INT32_MAX || w->n_out > INT32_MAX)
        return sd_err_set(err, SDNPU_ERR_UNSUPPORTED,
                          "tensor %s: %lld x %lld is not a shape the OpenCL kernels run", name,
                          (long long)w->n_out, (long long)w->n_in);
    out->type = w->type;
    out->n_in = (int32_t)w->n_in;
    out->n_out = (int32_t)w->n_out;
    out->row_bytes = w->row_bytes;
    if (!shared) return sd_cl_buffer(cb, w_bytes(w), w->data, &out->mem, counted, name, err);
    /* Shared: take the backend's buffer, or make it (outside the lock: a
     * loader and the session's thread may both make one; the second to
     * come back takes the first's and lets its own go). */
    pthread_mutex_lock(&cb->mu);
    struct cl_wbuf *b = sd_cl_wbuf_find(cb, w->data);
    if (b) b->refs++;
    pthread_mutex_unlock(&cb->mu);
    if (!b) {
        size_t made = 0;
        cl_mem mem;
        int rc = sd_cl_buffer(cb, w_bytes(w), w->data, &mem, &made, name, err);
        if (rc) return rc;
        struct cl_wbuf *nb = sd_calloc(1, sizeof *nb);
        if (!nb) {
            clReleaseMemObject(mem);
            return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for a shared weight");
        }
        pthread_mutex_lock(&cb->mu);
        if ((b = sd_cl_wbuf_find(cb, w->data))) {
            b->refs++;
        } else {
            *nb = (struct cl_wbuf){w->data, mem, made, 1, cb->wbufs};
            cb->wbufs = b = nb;
            cb->wbuf_bytes += made;
            nb = NULL;
        }
        pthread_mutex_unlock(&cb->mu);
        if (nb) {
            clReleaseMemObject(mem);
            sd_free(nb);
        }
    }
    clRetainMemObject(b->mem);
    out->mem = b->mem;
    return SDNPU_OK;
}

/* Let a graph's copy of a weight go: its retain, and, for a shared buffer,
 * its count there (the buffer goes with the last graph). */
void sd_cl_w_put(struct cl_be *cb, struct cl_w *w) {
    if (!w->mem) return;
    pthread_mutex_lock(&cb->mu);
    for (struct cl_wbuf **p = &cb->wbufs; *p; p = &(*p)->next) {
        struct cl_wbuf *b = *p;
        if (b->mem != w->mem) continue;
        if (--b->refs == 0) {
            *p = b->next;
            cb->wbuf_bytes -= b->bytes;
            clReleaseMemObject(b->mem);
            sd_free(b);
        }
        break;
    }
    pthread_mutex_unlock(&cb->mu);
    clReleaseMemObject(w->mem);
    w->mem = NULL;
}

int sd_cl_upload_vec(struct cl_be *cb, const struct sd_vec *v, const char *name, cl_mem *out, size_t *counted,
                     struct sd_err *err) {
    *out = NULL;
    if (!v->data) return SDNPU_OK;
    return sd_cl_buffer(cb, v_bytes(v), v->data, out, counted, name, err);
}

/* One graph fewer on a, which its last graph frees (its retains are gone by then). */
void sd_cl_acts_put(struct cl_be *cb, struct cl_acts *a) {
    pthread_mutex_lock(&cb->mu);
    if (--a->refs == 0) {
        struct cl_acts **p = &cb->acts;
        while (*p != a)
            p = &(*p)->next;
        *p = a->next;
        cb->acts_bytes -= a->bytes;
        for (int i = 0; i < CL_ACT_N; i++)
            rel(&a->mem[i]);
        sd_free(a);
    }
    pthread_mutex_unlock(&cb->mu);
}

/* The activations of L rows for one more block: the held ones, or new
 * ones made under the lock (clCreateBuffer enqueues nothing). */
int sd_cl_acts_get(struct cl_be *cb, const struct sd_model_config *c, int32_t L, struct cl_acts **out,
                   struct sd_err *err) {
    static const char *what[CL_ACT_N] = {"activations x",    "activations h", "activations q",
                                         "activations k",    "activations v", "activations o",
                                         "activations gate", "activations up"};
    pthread_mutex_lock(&cb->mu);
    struct cl_acts *a = sd_cl_acts_find(cb, L);
    int rc = SDNPU_OK;
    if (!a) {
        size_t wd[CL_ACT_N];
        cl_act_widths(c, wd);
        if (!(a = sd_calloc(1, sizeof *a))) rc = sd_err_set(err, SDNPU_ERR_OOM, "out of memory for a graph");
        for (int i = 0; !rc && i < CL_ACT_N; i++)
            rc = sd_cl_buffer(cb, (size_t)L * wd[i] * sizeof(float), NULL, &a->mem[i], &a->bytes, what[i],
                              err);
        if (rc && a) {
            for (int i = 0; i < CL_ACT_N; i++)
                rel(&a->mem[i]);
            sd_free(a);
        } else if (!rc) {
            a->L = L;
            a->next = cb->acts;
            cb->acts = a;
            cb->acts_bytes += a->bytes;
        }
    }
    if (!rc) a->refs++;
    pthread_mutex_unlock(&cb->mu);
    *out = rc ? NULL : a;
    return rc;
}
