/*
 * graphs/opencl/program.c - the OpenCL backend's kernels: the programs
 * built from graphs/opencl/kernels.h per graph shape, cached per device for
 * the whole process in the device's shared context, and each backend's
 * kernel objects of the programs its graphs use.
 */
#include <CL/cl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "graphs/opencl/backend.h"
#include "graphs/opencl/kernels.h"
#include "graphs/quant.h"

/* Weight types with a matmul kernel; the kernel is named mm_<type name>. */
static const enum sd_type cl_types[] = {SD_TYPE_F32,  SD_TYPE_F16,  SD_TYPE_BF16, SD_TYPE_Q4_0,
                                        SD_TYPE_Q4_1, SD_TYPE_Q5_0, SD_TYPE_Q5_1, SD_TYPE_Q8_0,
                                        SD_TYPE_Q4_K, SD_TYPE_Q5_K, SD_TYPE_Q6_K};

bool sd_opencl_type_supported(enum sd_type type) {
    for (size_t i = 0; i < SD_ARRAY_LEN(cl_types); i++)
        if (cl_types[i] == type) return true;
    return false;
}

static pthread_mutex_t cl_shared_mu = PTHREAD_MUTEX_INITIALIZER;

static struct cl_shared cl_shared_devs[CL_MAX_DEVICES];

/* Rows per matmul work-item: the weights are unpacked once per tile, so
 * larger tiles amortise the dequantization; 8 keeps the accumulators in
 * registers. */
static int32_t cl_tile_rows(int32_t n_rows) { return n_rows < 8 ? n_rows : 8; }

void sd_cl_prog_release(struct cl_prog *p) {
    for (int i = 0; i < SD_TYPE_COUNT; i++)
        if (p->mm[i]) clReleaseKernel(p->mm[i]);
    cl_kernel ks[] = {p->rmsnorm, p->add_rows, p->add_normed, p->act_mul};
    for (size_t i = 0; i < SD_ARRAY_LEN(ks); i++)
        if (ks[i]) clReleaseKernel(ks[i]);
    memset(p, 0, sizeof *p);
}

/* The device's shared context, made on first use; counts a reference. */
int sd_cl_shared_get(cl_platform_id plat, cl_device_id dev, struct cl_shared **out, struct sd_err *err) {
    pthread_mutex_lock(&cl_shared_mu);
    struct cl_shared *free_slot = NULL;
    for (int i = 0; i < CL_MAX_DEVICES; i++) {
        struct cl_shared *sh = &cl_shared_devs[i];
        if (sh->refs > 0 && sh->dev == dev) {
            sh->refs++;
            *out = sh;
            pthread_mutex_unlock(&cl_shared_mu);
            return SDNPU_OK;
        }
        if (sh->refs == 0 && !free_slot) free_slot = sh;
    }
    int rc = SDNPU_OK;
    if (!free_slot) {
        rc = sd_err_set(err, SDNPU_ERR_BACKEND, "OpenCL: too many devices in use");
    } else {
        cl_int e;
        cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)plat, 0};
        cl_context ctx = clCreateContext(props, 1, &dev, NULL, NULL, &e);
        if (e != CL_SUCCESS) {
            rc = sd_cl_fail(err, e, "clCreateContext");
        } else {
            memset(free_slot, 0, sizeof *free_slot);
            free_slot->dev = dev;
            free_slot->ctx = ctx;
            free_slot->refs = 1;
            *out = free_slot;
        }
    }
    pthread_mutex_unlock(&cl_shared_mu);
    return rc;
}

void sd_cl_shared_put(struct cl_shared *sh) {
    pthread_mutex_lock(&cl_shared_mu);
    if (--sh->refs == 0) {
        for (int i = 0; i < sh->n_progs; i++)
            clReleaseProgram(sh->progs[i].prog);
        clReleaseContext(sh->ctx);
        memset(sh, 0, sizeof *sh);
    }
    pthread_mutex_unlock(&cl_shared_mu);
}

/* The built program with these options, from the device's cache or built
 * now (its build log goes into err on failure). *built says which. */
static int cl_shared_program(struct cl_be *cb, const char *opts, struct cl_shared_prog **out, bool *built,
                             double *ms, struct sd_err *err) {
    struct cl_shared *sh = cb->sh;
    int rc = SDNPU_OK;
    *built = false;
    *ms = 0;
    pthread_mutex_lock(&cl_shared_mu);
    for (int i = 0; i < sh->n_progs; i++) {
        if (strcmp(sh->progs[i].opts, opts) == 0) {
            *out = &sh->progs[i];
            goto done;
        }
    }
    if (sh->n_progs == CL_MAX_PROGRAMS) {
        rc = sd_err_set(err, SDNPU_ERR_BACKEND, "OpenCL: more than %d distinct graph shapes on one device",
                        CL_MAX_PROGRAMS);
        goto done;
    }
    const char *src = sd_cl_kernel_src;
    size_t len = sizeof sd_cl_kernel_src - 1;
    cl_int e;
    cl_program prog = clCreateProgramWithSource(sh->ctx, 1, &src, &len, &e);
    if (e != CL_SUCCESS) {
        rc = sd_cl_fail(err, e, "clCreateProgramWithSource");
        goto done;
    }
    double t0 = sd_time_ms();
    e = clBuildProgram(prog, 1, &cb->dev, opts, NULL, NULL);
    *ms = sd_time_ms() - t0;
    if (e != CL_SUCCESS) {
        char log[SD_ERR_MSG_MAX];
        size_t n = 0;
        log[0] = '\0';
        clGetProgramBuildInfo(prog, cb->dev, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, &n);
        log[sizeof log - 1] = '\0';
        if (n < sizeof log) log[n] = '\0';
        clReleaseProgram(prog);
        rc = sd_err_set(err, SDNPU_ERR_BACKEND,
                        "OpenCL: building the kernels (%s) failed: %s (%d); build log: %s", opts,
                        sd_cl_err_name(e), (int)e, log);
        goto done;
    }
    struct cl_shared_prog *sp = &sh->progs[sh->n_progs++];
    snprintf(sp->opts, sizeof sp->opts, "%s", opts);
    sp->prog = prog;
    *built = true;
    *out = sp;
done:
    pthread_mutex_unlock(&cl_shared_mu);
    return rc;
}

/* This backend's kernels for graphs of n_rows rows of its model. Called
 * with cb->mu held (sd_cl_get_program). */
static int cl_get_program_locked(struct sd_backend *be, int32_t n_rows, struct cl_prog **out,
                                 struct sd_err *err) {
    struct cl_be *cb = cl_be_of(be);
    const struct sd_model_config *c = &be->m->cfg;
    char opts[320];
    int32_t tr = cl_tile_rows(n_rows);
    /* EPS as a hex float literal: exactly the model's float. */
    snprintf(opts, sizeof opts, "-cl-std=CL1.2 -DL_ROWS=%d -DTR=%d -DRN=%zu -DD_MODEL=%d -DN_FF=%d -DEPS=%af",
             n_rows, tr, cb->rn, c->d_model, c->n_ff, (double)c->norm_eps);
    for (int i = 0; i < cb->n_progs; i++) {
        if (strcmp(cb->progs[i].opts, opts) == 0) {
            cb->stats.n_reused++;
            *out = &cb->progs[i];
            return SDNPU_OK;
        }
    }
    if (cb->n_progs == CL_MAX_PROGRAMS)
        return sd_err_set(err, SDNPU_ERR_BACKEND, "OpenCL: more than %d distinct graph shapes on one backend",
                          CL_MAX_PROGRAMS);
    struct cl_shared_prog *sp = NULL;
    bool built;
    double ms;
    int rc = cl_shared_program(cb, opts, &sp, &built, &ms, err);
    if (rc) return rc;
    struct cl_prog *p = &cb->progs[cb->n_progs];
    memset(p, 0, sizeof *p);
    p->opts = sp->opts;
    p->n_rows = n_rows;
    p->tr = tr;
    cl_int e;
    for (size_t i = 0; i < SD_ARRAY_LEN(cl_types); i++) {
        char name[32];
        snprintf(name, sizeof name, "mm_%s", sd_type_name(cl_types[i]));
        p->mm[cl_types[i]] = clCreateKernel(sp->prog, name, &e);
        if (e != CL_SUCCESS) {
            sd_cl_prog_release(p);
            return sd_cl_fail(err, e, "clCreateKernel(mm)");
        }
    }
    struct {
        cl_kernel *k;
        const char *name;
    } ks[] = {{&p->rmsnorm, "rmsnorm"},
              {&p->add_rows, "add_rows"},
              {&p->add_normed, "add_normed"},
              {&p->act_mul, "act_mul"}};
    for (size_t i = 0; i < SD_ARRAY_LEN(ks); i++) {
        *ks[i].k = clCreateKernel(sp->prog, ks[i].name, &e);
        if (e != CL_SUCCESS) {
            sd_cl_prog_release(p);
            return sd_cl_fail(err, e, ks[i].name);
        }
    }
    /* Published: the entry is filled before n_progs counts it (both under
     * cb->mu, which every reader of n_progs takes too). */
    cb->n_progs++;
    if (built) {
        cb->stats.n_builds++;
        cb->stats.build_ms += ms;
        cb->stats.last_build_ms = ms;
        SD_LOGD("opencl: built kernels for L=%d in %.0f ms", n_rows, ms);
    } else {
        cb->stats.n_reused++;
    }
    *out = p;
    return SDNPU_OK;
}

/* The same under the backend's lock: prepares on the session's thread and
 * on the loader may look up (and build) programs at the same time. A build
 * holds the lock (and the device's cl_shared_mu) for its duration, so a
 * concurrent prepare of the same backend waits for it; runs never take it.
 * Lock order: cb->mu, then cl_shared_mu. */
int sd_cl_get_program(struct sd_backend *be, int32_t n_rows, struct cl_prog **out, struct sd_err *err) {
    struct cl_be *cb = cl_be_of(be);
    pthread_mutex_lock(&cb->mu);
    int rc = cl_get_program_locked(be, n_rows, out, err);
    pthread_mutex_unlock(&cb->mu);
    return rc;
}

void sd_opencl_get_stats(const struct sd_backend *be, struct sd_opencl_stats *st) {
    memset(st, 0, sizeof *st);
    if (be && be->i && be->i->name && strcmp(be->i->name, "opencl") == 0) {
        struct cl_be *cb = cl_be_of(be);
        pthread_mutex_lock(&cb->mu);
        *st = cb->stats;
        pthread_mutex_unlock(&cb->mu);
    }
}
