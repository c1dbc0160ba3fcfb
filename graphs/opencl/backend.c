/*
 * graphs/opencl/backend.c - the OpenCL backend: graphs whose projections,
 * norms, FFN and output head run as OpenCL kernels on a device (here PoCL
 * on the CPU; a phone GPU through its vendor's ICD), mirroring the CPU
 * backend (graphs/cpu/backend.c) piece for piece.
 *
 * What runs where. Per layer the device computes attn_norm, the Q/K/V
 * projections, the O projection, the optional post-attention norm, the
 * residual add, ffn_norm, gate/up, the GELU-tanh or SiLU gate, the down
 * projection, the optional post-FFN norm and the second residual add. The
 * Q/K/V rows are read back to the host and attention runs there
 * (sd_fwd_attention: biases, QK-norm, RoPE, the K/V write, the masked
 * softmax over the cache), and its output is written back for the O
 * projection. That is the split mobile NPU engines make: the projections
 * and FFN have static shapes and go to the accelerator, attention over a
 * cache that grows every step stays on the host side of the graph
 * boundary. So the KV cache is the same host buffer for every backend.
 *
 * Preparing a graph is what a static runtime does at load time: it builds
 * the kernels specialised for the graph's shape (-D L_ROWS, D_MODEL, N_FF,
 * ...), uploads the graph's own copy of its weights in their quantized
 * block form (the matmul kernels dequantize on the fly; activations stay
 * float, so results differ from the CPU backend, which quantizes
 * activations to Q8, by that quantization noise only), and allocates every
 * device buffer of a run. Built programs are cached by their build options
 * per device for the whole process (one context per device, shared by all
 * backends on it), so the blocks and head of one row count share a compile,
 * and so do the backends of several sessions on one model: a PoCL compile
 * takes about half a second, plus about as much again per kernel the first
 * time it is launched (PoCL finishes code generation lazily and keeps it in
 * its on-disk cache, ~/.cache/pocl, so later processes start warm).
 *
 * Rows: a graph always computes its L rows; padding rows (token < 0) cost
 * what they cost. Every per-row reduction (matmul lanes, the RMSNorm sum)
 * runs in an order fixed by the kernel source, not by L or the row's index.
 */
#include <CL/cl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "graphs/forward.h"
#include "graphs/graph.h"
#include "graphs/opencl/kernels.h"
#include "graphs/opencl/opencl.h"
#include "graphs/quant.h"

#ifndef CL_PLATFORM_NOT_FOUND_KHR
#define CL_PLATFORM_NOT_FOUND_KHR -1001
#endif

#define CL_MAX_DEVICES 64
#define CL_MAX_PROGRAMS 32
#define MM_WG 32 /* matmul work-group: output columns per group */

/* ------------------------------------------------------------ errors */

static const char *cl_err_name(cl_int e) {
    switch (e) {
    case CL_SUCCESS:
        return "CL_SUCCESS";
    case CL_DEVICE_NOT_FOUND:
        return "CL_DEVICE_NOT_FOUND";
    case CL_DEVICE_NOT_AVAILABLE:
        return "CL_DEVICE_NOT_AVAILABLE";
    case CL_COMPILER_NOT_AVAILABLE:
        return "CL_COMPILER_NOT_AVAILABLE";
    case CL_MEM_OBJECT_ALLOCATION_FAILURE:
        return "CL_MEM_OBJECT_ALLOCATION_FAILURE";
    case CL_OUT_OF_RESOURCES:
        return "CL_OUT_OF_RESOURCES";
    case CL_OUT_OF_HOST_MEMORY:
        return "CL_OUT_OF_HOST_MEMORY";
    case CL_BUILD_PROGRAM_FAILURE:
        return "CL_BUILD_PROGRAM_FAILURE";
    case CL_INVALID_VALUE:
        return "CL_INVALID_VALUE";
    case CL_INVALID_PLATFORM:
        return "CL_INVALID_PLATFORM";
    case CL_INVALID_DEVICE:
        return "CL_INVALID_DEVICE";
    case CL_INVALID_CONTEXT:
        return "CL_INVALID_CONTEXT";
    case CL_INVALID_COMMAND_QUEUE:
        return "CL_INVALID_COMMAND_QUEUE";
    case CL_INVALID_MEM_OBJECT:
        return "CL_INVALID_MEM_OBJECT";
    case CL_INVALID_BUILD_OPTIONS:
        return "CL_INVALID_BUILD_OPTIONS";
    case CL_INVALID_PROGRAM:
        return "CL_INVALID_PROGRAM";
    case CL_INVALID_PROGRAM_EXECUTABLE:
        return "CL_INVALID_PROGRAM_EXECUTABLE";
    case CL_INVALID_KERNEL_NAME:
        return "CL_INVALID_KERNEL_NAME";
    case CL_INVALID_KERNEL:
        return "CL_INVALID_KERNEL";
    case CL_INVALID_ARG_INDEX:
        return "CL_INVALID_ARG_INDEX";
    case CL_INVALID_ARG_VALUE:
        return "CL_INVALID_ARG_VALUE";
    case CL_INVALID_ARG_SIZE:
        return "CL_INVALID_ARG_SIZE";
    case CL_INVALID_KERNEL_ARGS:
        return "CL_INVALID_KERNEL_ARGS";
    case CL_INVALID_WORK_DIMENSION:
        return "CL_INVALID_WORK_DIMENSION";
    case CL_INVALID_WORK_GROUP_SIZE:
        return "CL_INVALID_WORK_GROUP_SIZE";
    case CL_INVALID_WORK_ITEM_SIZE:
        return "CL_INVALID_WORK_ITEM_SIZE";
    case CL_INVALID_GLOBAL_WORK_SIZE:
        return "CL_INVALID_GLOBAL_WORK_SIZE";
    case CL_INVALID_BUFFER_SIZE:
        return "CL_INVALID_BUFFER_SIZE";
    case CL_PLATFORM_NOT_FOUND_KHR:
        return "CL_PLATFORM_NOT_FOUND_KHR";
    default:
        return "unknown OpenCL error";
    }
}

static int cl_fail(struct sd_err *err, cl_int e, const char *what) {
    return sd_err_set(err, SDNPU_ERR_BACKEND, "OpenCL: %s failed: %s (%d)", what, cl_err_name(e), (int)e);
}

/* ------------------------------------------------------------ devices */

struct cl_dev {
    cl_platform_id plat;
    cl_device_id dev;
};

/* Every device of every platform, in platform order: the index space of
 * cl_device. Fails with SDNPU_ERR_BACKEND saying what is missing. */
static int cl_enum_devices(struct cl_dev *out, int cap, int *n_out, struct sd_err *err) {
    cl_platform_id plats[16];
    cl_uint np = 0;
    *n_out = 0;
    cl_int e = clGetPlatformIDs(16, plats, &np);
    if (e == CL_PLATFORM_NOT_FOUND_KHR || (e == CL_SUCCESS && np == 0))
        return sd_err_set(err, SDNPU_ERR_BACKEND,
                          "no OpenCL platform found (ICD loader reports none); install a driver such as "
                          "pocl-opencl-icd");
    if (e != CL_SUCCESS) return cl_fail(err, e, "clGetPlatformIDs");
    if (np > 16) np = 16;
    int n = 0;
    for (cl_uint p = 0; p < np && n < cap; p++) {
        cl_device_id ids[CL_MAX_DEVICES];
        cl_uint nd = 0;
        e = clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, CL_MAX_DEVICES, ids, &nd);
        if (e == CL_DEVICE_NOT_FOUND) continue;
        if (e != CL_SUCCESS) return cl_fail(err, e, "clGetDeviceIDs");
        for (cl_uint d = 0; d < nd && d < CL_MAX_DEVICES && n < cap; d++)
            out[n++] = (struct cl_dev){plats[p], ids[d]};
    }
    if (n == 0)
        return sd_err_set(err, SDNPU_ERR_BACKEND, "%u OpenCL platform(s) found but no device on any of them",
                          (unsigned)np);
    *n_out = n;
    return SDNPU_OK;
}

static void cl_platform_name(cl_platform_id p, char *buf, size_t cap) {
    if (clGetPlatformInfo(p, CL_PLATFORM_NAME, cap, buf, NULL) != CL_SUCCESS) snprintf(buf, cap, "?");
    buf[cap - 1] = '\0';
}

static void cl_device_name(cl_device_id d, char *buf, size_t cap) {
    if (clGetDeviceInfo(d, CL_DEVICE_NAME, cap, buf, NULL) != CL_SUCCESS) snprintf(buf, cap, "?");
    buf[cap - 1] = '\0';
}

int sd_opencl_list_devices(char *buf, size_t cap, struct sd_err *err) {
    if (cap) buf[0] = '\0';
    struct cl_dev devs[CL_MAX_DEVICES];
    int n;
    int rc = cl_enum_devices(devs, CL_MAX_DEVICES, &n, err);
    if (rc) return rc;
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        char pn[128], dn[128];
        cl_platform_name(devs[i].plat, pn, sizeof pn);
        cl_device_name(devs[i].dev, dn, sizeof dn);
        cl_device_type type = 0;
        cl_uint cu = 0;
        cl_ulong mem = 0;
        clGetDeviceInfo(devs[i].dev, CL_DEVICE_TYPE, sizeof type, &type, NULL);
        clGetDeviceInfo(devs[i].dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cu, &cu, NULL);
        clGetDeviceInfo(devs[i].dev, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof mem, &mem, NULL);
        const char *tn = (type & CL_DEVICE_TYPE_GPU)           ? "GPU"
                         : (type & CL_DEVICE_TYPE_CPU)         ? "CPU"
                         : (type & CL_DEVICE_TYPE_ACCELERATOR) ? "accelerator"
                                                               : "other";
        int w = snprintf(buf + used, cap > used ? cap - used : 0,
                         "%d: %s / %s (%s, %u compute units, %llu MiB)\n", i, pn, dn, tn, (unsigned)cu,
                         (unsigned long long)(mem >> 20));
        if (w > 0) used += (size_t)w;
    }
    if (used >= cap && cap) buf[cap - 1] = '\0';
    return SDNPU_OK;
}

/* ------------------------------------------------------------ backend */

/* Weight types with a matmul kernel; the kernel is named mm_<type name>. */
static const enum sd_type cl_types[] = {SD_TYPE_F32,  SD_TYPE_F16,  SD_TYPE_BF16, SD_TYPE_Q4_0,
                                        SD_TYPE_Q4_1, SD_TYPE_Q5_0, SD_TYPE_Q5_1, SD_TYPE_Q8_0,
                                        SD_TYPE_Q4_K, SD_TYPE_Q5_K, SD_TYPE_Q6_K};

bool sd_opencl_type_supported(enum sd_type type) {
    for (size_t i = 0; i < SD_ARRAY_LEN(cl_types); i++)
        if (cl_types[i] == type) return true;
    return false;
}

/* What one device shares across all backends of the process: a context
 * and the built programs, keyed by their build options. Sessions each make
 * their own backend on the same model; sharing the programs means only the
 * first pays the compile (seconds on PoCL). Guarded by cl_shared_mu;
 * released when the device's last backend is destroyed. */
struct cl_shared_prog {
    char opts[320];
    cl_program prog;
};

struct cl_shared {
    cl_device_id dev;
    cl_context ctx;
    int refs;
    struct cl_shared_prog progs[CL_MAX_PROGRAMS];
    int n_progs;
};

static pthread_mutex_t cl_shared_mu = PTHREAD_MUTEX_INITIALIZER;
static struct cl_shared cl_shared_devs[CL_MAX_DEVICES];

/* A backend's kernels of one program (kernel objects hold their arguments,
 * so each backend has its own; the compiled code is the program's). */
struct cl_prog {
    const char *opts; /* the shared program's key */
    int32_t n_rows, tr;
    cl_kernel mm[SD_TYPE_COUNT];
    cl_kernel rmsnorm, add_rows, add_normed, act_mul;
};

/* Threads (graphs/graph.h, struct sd_backend_i): runs, release and
 * destroy come from the session's thread; estimate and prepare from it or
 * from one loader thread (SD_PREPARE_LOADER) while the session's thread
 * runs other graphs, and may prepare or release others itself. What prepare
 * changes in the backend, the kernel cache progs[]/n_progs and stats, is
 * guarded by mu; the rest is set at creation and read-only after. A run
 * touches only its own graph, the cl_prog that graph borrows (its kernels'
 * arguments: set by runs only, never by prepare) and the queue q; a
 * prepare never enqueues on q from the loader. Entries of progs[] are never
 * moved or freed before destroy, so a graph's pointer to one stays valid
 * while later entries are appended. */
struct cl_be {
    cl_platform_id plat;
    cl_device_id dev;
    struct cl_shared *sh;
    cl_context ctx; /* sh->ctx */
    cl_command_queue q; /* the session's: runs (and prepares on its thread) */
    size_t rn;    /* work-group size of the row kernels (power of two) */
    size_t mm_wg; /* work-group width of the matmuls */
    cl_ulong max_alloc;
    pthread_mutex_t mu; /* guards progs, n_progs and stats */
    struct cl_prog progs[CL_MAX_PROGRAMS];
    int n_progs;
    struct sd_opencl_stats stats;
    struct sd_fwd_share *share; /* the blocks' host scratch, shared by those of one L and context */
    struct cl_acts *acts;       /* the blocks' device activations, one set per L (under mu) */
    size_t acts_bytes;          /* under mu */
    bool share_weights;         /* one device buffer per weight for every graph (graphs/weights.h) */
    struct cl_wbuf *wbufs;      /* those buffers (under mu) */
    size_t wbuf_bytes;          /* under mu */
};

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

/* A block graph's device activations, shared by the blocks of one L: runs
 * come from the session's thread one at a time, set every kernel argument
 * again, and leave nothing in them that the next run reads. Each graph
 * holds its own retain of the buffers; the entry its count of graphs. */
enum { CL_ACT_N = 8 };
struct cl_acts {
    int32_t L;
    int refs;
    cl_mem mem[CL_ACT_N]; /* x, h, q, k, v, o, gate, up */
    size_t bytes;
    struct cl_acts *next;
};

static struct cl_be *cl_be_of(const struct sd_backend *be) { return be->impl; }

/* Rows per matmul work-item: the weights are unpacked once per tile, so
 * larger tiles amortise the dequantization; 8 keeps the accumulators in
 * registers. */
static int32_t cl_tile_rows(int32_t n_rows) { return n_rows < 8 ? n_rows : 8; }

static void cl_prog_release(struct cl_prog *p) {
    for (int i = 0; i < SD_TYPE_COUNT; i++)
        if (p->mm[i]) clReleaseKernel(p->mm[i]);
    cl_kernel ks[] = {p->rmsnorm, p->add_rows, p->add_normed, p->act_mul};
    for (size_t i = 0; i < SD_ARRAY_LEN(ks); i++)
        if (ks[i]) clReleaseKernel(ks[i]);
    memset(p, 0, sizeof *p);
}

/* The device's shared context, made on first use; counts a reference. */
static int cl_shared_get(cl_platform_id plat, cl_device_id dev, struct cl_shared **out, struct sd_err *err) {
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
            rc = cl_fail(err, e, "clCreateContext");
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

static void cl_shared_put(struct cl_shared *sh) {
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
        rc = cl_fail(err, e, "clCreateProgramWithSource");
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
                        cl_err_name(e), (int)e, log);
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
 * with cb->mu held (cl_get_program). */
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
            cl_prog_release(p);
            return cl_fail(err, e, "clCreateKernel(mm)");
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
            cl_prog_release(p);
            return cl_fail(err, e, ks[i].name);
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
static int cl_get_program(struct sd_backend *be, int32_t n_rows, struct cl_prog **out, struct sd_err *err) {
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

/* ------------------------------------------------------------ buffers */

/* A weight matrix on the device, in its GGUF block layout. */
struct cl_w {
    cl_mem mem;
    enum sd_type type;
    int32_t n_in, n_out;
    size_t row_bytes;
};

struct cl_layer {
    struct cl_w wq, wk, wv, wo, gate, up, down;
    cl_mem attn_norm, post_attn_norm, ffn_norm, post_ffn_norm; /* post norms NULL unless Gemma */
};

struct cl_graph {
    struct cl_prog *prog;    /* borrowed from the backend's cache */
    struct cl_layer *layers; /* [l1 - l0] */
    struct cl_w out;         /* head: output projection [n_vocab][d] */
    cl_mem out_norm;         /* head: [d] */
    /* Activations, all [L][width] floats. */
    cl_mem x;           /* [L][d] residual stream */
    cl_mem h;           /* [L][max(d, nq)] normed input, attention output */
    cl_mem q, k, v;     /* [L][nq], [L][nkv], [L][nkv] */
    cl_mem o;           /* [L][d] projection output */
    cl_mem gate, up;    /* [L][n_ff] */
    cl_mem logits;      /* head: [L][n_vocab] */
    struct sd_fwd *fwd; /* block: host scratch of the attention step */
    struct cl_acts *acts; /* block: the shared activations x .. up are retains of */
    size_t dev_bytes;
};

static size_t w_bytes(const struct sd_weight *w) { return (size_t)w->n_out * w->row_bytes; }
static size_t v_bytes(const struct sd_vec *v) { return v->data ? (size_t)v->n * sizeof(float) : 0; }

/* Widths of a block's activations x, h, q, k, v, o, gate, up (floats a row). */
static void cl_act_widths(const struct sd_model_config *c, size_t wd[CL_ACT_N]) {
    size_t d = (size_t)c->d_model, nq = (size_t)c->n_head * (size_t)c->head_dim;
    size_t nkv = (size_t)c->n_head_kv * (size_t)c->head_dim, ff = (size_t)c->n_ff;
    const size_t w[CL_ACT_N] = {d, SD_MAX(d, nq), nq, nkv, nkv, d, ff, ff};
    memcpy(wd, w, sizeof w);
}

/* Device bytes of a block's activations at L rows (shared: cl_acts). */
static size_t cl_act_bytes(const struct sd_model_config *c, int32_t L) {
    size_t wd[CL_ACT_N], n = 0;
    cl_act_widths(c, wd);
    for (int i = 0; i < CL_ACT_N; i++) n += (size_t)L * wd[i] * sizeof(float);
    return n;
}

/* Under mu: the shared buffer made from src, or NULL. */
static struct cl_wbuf *cl_wbuf_find(const struct cl_be *cb, const void *src) {
    for (struct cl_wbuf *b = cb->wbufs; b; b = b->next)
        if (b->src == src) return b;
    return NULL;
}

/* Whether a graph's copy of w is the backend's shared buffer (subset:
 * w is a subset head's gathered rows). */
static bool cl_shares(const struct cl_be *cb, bool subset) { return cb->share_weights && !subset; }

/* Device bytes of the weights a shape uses that it would share: all of
 * them, or (held false) only those the backend holds no buffer for yet. */
static size_t cl_shared_weight_need(struct cl_be *cb, const struct sd_model *m, const struct sd_graph_shape *s,
                                    bool all) {
    if (!cl_shares(cb, s->n_subset > 0)) return 0;
    const struct sd_weight *w[7];
    size_t n = 0;
    pthread_mutex_lock(&cb->mu);
    if (s->kind == SD_GRAPH_HEAD) {
        n = all || !cl_wbuf_find(cb, m->output.data) ? w_bytes(&m->output) : 0;
    } else {
        for (int32_t il = s->l0; il < s->l1; il++) {
            const struct sd_layer *Ly = &m->layers[il];
            const struct sd_weight *ws[] = {&Ly->wq, &Ly->wk, &Ly->wv, &Ly->wo, &Ly->w_gate, &Ly->w_up, &Ly->w_down};
            memcpy(w, ws, sizeof ws);
            for (size_t i = 0; i < 7; i++) n += all || !cl_wbuf_find(cb, w[i]->data) ? w_bytes(w[i]) : 0;
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

/* The shared activations of L rows, if the backend holds them (under mu). */
static struct cl_acts *cl_acts_find(const struct cl_be *cb, int32_t L) {
    for (struct cl_acts *a = cb->acts; a; a = a->next)
        if (a->L == L) return a;
    return NULL;
}

/* A block's estimate adds the activations and host scratch of its L unless
 * they are held already (a loader's counts them as new: see graph.h). */
static size_t cl_estimate(struct sd_backend *be, const struct sd_graph_shape *s, unsigned flags) {
    struct cl_be *cb = cl_be_of(be);
    const bool alone = flags & SD_PREPARE_LOADER;
    const size_t shared_w = cl_shared_weight_need(cb, be->m, s, alone);
    if (s->kind == SD_GRAPH_HEAD) return cl_dev_bytes(cb, be->m, s) + shared_w;
    pthread_mutex_lock(&cb->mu);
    const bool held = !alone && cl_acts_find(cb, s->n_rows);
    pthread_mutex_unlock(&cb->mu);
    size_t host = sd_fwd_share_need(alone ? NULL : cb->share, be->m, s->n_rows, s->n_ctx, sd_pool_n_threads(be->pool));
    return cl_dev_bytes(cb, be->m, s) + shared_w + (held ? 0 : cl_act_bytes(&be->m->cfg, s->n_rows)) + host;
}

static size_t cl_shared_bytes(struct sd_backend *be) {
    struct cl_be *cb = cl_be_of(be);
    pthread_mutex_lock(&cb->mu);
    size_t dev = cb->acts_bytes + cb->wbuf_bytes;
    pthread_mutex_unlock(&cb->mu);
    return dev + sd_fwd_share_bytes(cb->share);
}

static size_t cl_shared_weight_bytes(struct sd_backend *be) {
    struct cl_be *cb = cl_be_of(be);
    pthread_mutex_lock(&cb->mu);
    size_t n = cb->wbuf_bytes;
    pthread_mutex_unlock(&cb->mu);
    return n;
}

/* A device buffer of n bytes, filled from src when given. */
static int cl_buffer(struct cl_be *cb, size_t n, const void *src, cl_mem *out, size_t *counted,
                     const char *what, struct sd_err *err) {
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
                              (double)n / 1048576.0, cl_err_name(e));
        return cl_fail(err, e, what);
    }
    *counted += n;
    return SDNPU_OK;
}

static int cl_upload_weight(struct cl_be *cb, const struct sd_weight *w, bool shared, const char *name,
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
    if (!shared) return cl_buffer(cb, w_bytes(w), w->data, &out->mem, counted, name, err);
    /* Shared: take the backend's buffer, or make it (outside the lock: a
     * loader and the session's thread may both make one; the second to
     * come back takes the first's and lets its own go). */
    pthread_mutex_lock(&cb->mu);
    struct cl_wbuf *b = cl_wbuf_find(cb, w->data);
    if (b) b->refs++;
    pthread_mutex_unlock(&cb->mu);
    if (!b) {
        size_t made = 0;
        cl_mem mem;
        int rc = cl_buffer(cb, w_bytes(w), w->data, &mem, &made, name, err);
        if (rc) return rc;
        struct cl_wbuf *nb = sd_calloc(1, sizeof *nb);
        if (!nb) {
            clReleaseMemObject(mem);
            return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for a shared weight");
        }
        pthread_mutex_lock(&cb->mu);
        if ((b = cl_wbuf_find(cb, w->data))) {
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
static void cl_w_put(struct cl_be *cb, struct cl_w *w) {
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

static int cl_upload_vec(struct cl_be *cb, const struct sd_vec *v, const char *name, cl_mem *out,
                         size_t *counted, struct sd_err *err) {
    *out = NULL;
    if (!v->data) return SDNPU_OK;
    return cl_buffer(cb, v_bytes(v), v->data, out, counted, name, err);
}

static void rel(cl_mem *m) {
    if (*m) clReleaseMemObject(*m);
    *m = NULL;
}

static void cl_layer_release(struct cl_be *cb, struct cl_layer *Ly) {
    struct cl_w *ws[] = {&Ly->wq, &Ly->wk, &Ly->wv, &Ly->wo, &Ly->gate, &Ly->up, &Ly->down};
    for (size_t i = 0; i < SD_ARRAY_LEN(ws); i++)
        cl_w_put(cb, ws[i]);
    rel(&Ly->attn_norm);
    rel(&Ly->post_attn_norm);
    rel(&Ly->ffn_norm);
    rel(&Ly->post_ffn_norm);
}

/* One graph fewer on a, which its last graph frees (its retains are gone by then). */
static void cl_acts_put(struct cl_be *cb, struct cl_acts *a) {
    pthread_mutex_lock(&cb->mu);
    if (--a->refs == 0) {
        struct cl_acts **p = &cb->acts;
        while (*p != a) p = &(*p)->next;
        *p = a->next;
        cb->acts_bytes -= a->bytes;
        for (int i = 0; i < CL_ACT_N; i++) rel(&a->mem[i]);
        sd_free(a);
    }
    pthread_mutex_unlock(&cb->mu);
}

static void cl_release(struct sd_backend *be, struct sd_graph *g) {
    struct cl_graph *cg = g->impl;
    if (!cg) return;
    if (cg->layers) {
        for (int32_t i = 0; i < g->shape.l1 - g->shape.l0; i++)
            cl_layer_release(cl_be_of(be), &cg->layers[i]);
        sd_free(cg->layers);
    }
    cl_w_put(cl_be_of(be), &cg->out);
    rel(&cg->out_norm);
    cl_mem *acts[] = {&cg->x, &cg->h, &cg->q, &cg->k, &cg->v, &cg->o, &cg->gate, &cg->up, &cg->logits};
    for (size_t i = 0; i < SD_ARRAY_LEN(acts); i++)
        rel(acts[i]);
    if (cg->acts) cl_acts_put(cl_be_of(be), cg->acts);
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
        int rc = cl_upload_weight(cb, ws[i], cl_shares(cb, false), name, dst[i], counted, err);
        if (rc) return rc;
    }
    static const char *vn[] = {"attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm"};
    const struct sd_vec *vs[] = {&Ly->attn_norm, &Ly->post_attn_norm, &Ly->ffn_norm, &Ly->post_ffn_norm};
    cl_mem *vd[] = {&out->attn_norm, &out->post_attn_norm, &out->ffn_norm, &out->post_ffn_norm};
    for (size_t i = 0; i < SD_ARRAY_LEN(vs); i++) {
        snprintf(name, sizeof name, "blk.%d.%s.weight", il, vn[i]);
        int rc = cl_upload_vec(cb, vs[i], name, vd[i], counted, err);
        if (rc) return rc;
    }
    return SDNPU_OK;
}

/* The activations of L rows for one more block: the held ones, or new
 * ones made under the lock (clCreateBuffer enqueues nothing). */
static int cl_acts_get(struct cl_be *cb, const struct sd_model_config *c, int32_t L, struct cl_acts **out,
                       struct sd_err *err) {
    static const char *what[CL_ACT_N] = {"activations x", "activations h",  "activations q",    "activations k",
                                         "activations v", "activations o", "activations gate", "activations up"};
    pthread_mutex_lock(&cb->mu);
    struct cl_acts *a = cl_acts_find(cb, L);
    int rc = SDNPU_OK;
    if (!a) {
        size_t wd[CL_ACT_N];
        cl_act_widths(c, wd);
        if (!(a = sd_calloc(1, sizeof *a))) rc = sd_err_set(err, SDNPU_ERR_OOM, "out of memory for a graph");
        for (int i = 0; !rc && i < CL_ACT_N; i++)
            rc = cl_buffer(cb, (size_t)L * wd[i] * sizeof(float), NULL, &a->mem[i], &a->bytes, what[i], err);
        if (rc && a) {
            for (int i = 0; i < CL_ACT_N; i++) rel(&a->mem[i]);
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

/* On the loader (flags & SD_PREPARE_LOADER) as on the session's thread:
 * the kernels come from cl_get_program (locked), every buffer is a new
 * object of this graph (clCreateBuffer is thread-safe and enqueues
 * nothing), no kernel argument is set (runs set them), and the session's
 * worker pool is not run: sd_fwd_create only records it (and reads its
 * thread count, fixed at creation) for this graph's later runs on the
 * session's thread; its host scratch comes from the backend's share
 * (locked; the scratch of a shape the share holds is only counted, never
 * written), and the one host-side copy, a subset head's gathered rows, is
 * a plain loop on this thread. */
static int cl_prepare(struct sd_backend *be, struct sd_graph *g, unsigned flags, struct sd_err *err) {
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
    int rc = cl_get_program(be, s->n_rows, &cg->prog, err);
    if (rc) goto fail;
    if (s->kind == SD_GRAPH_HEAD) {
        /* A subset head uploads a gathered copy of its rows (freed once on the device). */
        struct sd_weight w;
        void *rows = NULL;
        if ((rc = sd_head_weight(m, s, &w, &rows, err))) goto fail;
        rc = cl_upload_weight(cb, &w, cl_shares(cb, s->n_subset > 0), "output.weight", &cg->out, &counted, err);
        sd_free(rows);
        if (rc || (rc = cl_upload_vec(cb, &m->output_norm, "output_norm.weight", &cg->out_norm, &counted, err)) ||
            (rc = cl_buffer(cb, L * d * fl, NULL, &cg->x, &counted, "activations x", err)) ||
            (rc = cl_buffer(cb, L * d * fl, NULL, &cg->h, &counted, "activations h", err)) ||
            (rc = cl_buffer(cb, L * (size_t)sd_head_width(m, s) * fl, NULL, &cg->logits, &counted, "logits", err)))
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
        if ((rc = cl_acts_get(cb, c, s->n_rows, &cg->acts, err))) goto fail;
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
    cl_release(be, g);
    if (rc == SDNPU_ERR_BACKEND || rc == SDNPU_ERR_OOM || rc == SDNPU_ERR_UNSUPPORTED)
        sd_err_prefix(err, "preparing the %s graph (L=%d)", s->kind == SD_GRAPH_HEAD ? "head" : "block",
                      s->n_rows);
    return rc;
}

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
    if (e != CL_SUCCESS) return cl_fail(err, e, "clSetKernelArg(matmul)");
    size_t gsz[2] = {round_up((size_t)n_out, cb->mm_wg), (size_t)((p->n_rows + p->tr - 1) / p->tr)};
    size_t lsz[2] = {cb->mm_wg, 1};
    e = clEnqueueNDRangeKernel(cb->q, k, 2, NULL, gsz, lsz, 0, NULL, NULL);
    if (e != CL_SUCCESS) return cl_fail(err, e, "clEnqueueNDRangeKernel(matmul)");
    return SDNPU_OK;
}

/* A row kernel (rmsnorm, add_rows, add_normed): one work-group of RN per
 * row; args are the kernel's buffers in order. */
static int cl_rows(struct cl_be *cb, const struct cl_prog *p, cl_kernel k, int n_args, const cl_mem *args,
                   struct sd_err *err) {
    cl_int e = CL_SUCCESS;
    for (int i = 0; i < n_args; i++)
        e |= clSetKernelArg(k, (cl_uint)i, sizeof(cl_mem), &args[i]);
    if (e != CL_SUCCESS) return cl_fail(err, e, "clSetKernelArg(row kernel)");
    size_t gsz[2] = {cb->rn, (size_t)p->n_rows}, lsz[2] = {cb->rn, 1};
    e = clEnqueueNDRangeKernel(cb->q, k, 2, NULL, gsz, lsz, 0, NULL, NULL);
    if (e != CL_SUCCESS) return cl_fail(err, e, "clEnqueueNDRangeKernel(row kernel)");
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
    if (e != CL_SUCCESS) return cl_fail(err, e, "clSetKernelArg(act_mul)");
    size_t lsz = 64, gsz = round_up((size_t)p->n_rows * (size_t)n_ff, lsz);
    e = clEnqueueNDRangeKernel(cb->q, p->act_mul, 1, NULL, &gsz, &lsz, 0, NULL, NULL);
    if (e != CL_SUCCESS) return cl_fail(err, e, "clEnqueueNDRangeKernel(act_mul)");
    return SDNPU_OK;
}

static int cl_write(struct cl_be *cb, cl_mem dst, const void *src, size_t n, struct sd_err *err) {
    cl_int e = clEnqueueWriteBuffer(cb->q, dst, CL_TRUE, 0, n, src, 0, NULL, NULL);
    return e == CL_SUCCESS ? SDNPU_OK : cl_fail(err, e, "clEnqueueWriteBuffer");
}

static int cl_read(struct cl_be *cb, cl_mem src, void *dst, size_t n, bool blocking, struct sd_err *err) {
    cl_int e = clEnqueueReadBuffer(cb->q, src, blocking ? CL_TRUE : CL_FALSE, 0, n, dst, 0, NULL, NULL);
    return e == CL_SUCCESS ? SDNPU_OK : cl_fail(err, e, "clEnqueueReadBuffer");
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

static int cl_run(struct sd_backend *be, struct sd_graph *g, struct sd_kv_cache *kv,
                  const struct sd_row *rows, int32_t base, float *x, float *logits, struct sd_err *err) {
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
    int rc = cl_get_program(be, n_rows, &p, err);
    if (rc) return rc;
    struct cl_w dw = {0};
    cl_mem X = NULL, Y = NULL;
    size_t counted = 0, n = (size_t)n_rows;
    if ((rc = cl_upload_weight(cb, w, false, "test weight", &dw, &counted, err)) ||
        (rc = cl_buffer(cb, n * (size_t)w->n_in * sizeof(float), x, &X, &counted, "test x", err)) ||
        (rc = cl_buffer(cb, n * (size_t)w->n_out * sizeof(float), NULL, &Y, &counted, "test y", err)) ||
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
    int rc = cl_get_program(be, n_rows, &p, err);
    if (rc) return rc;
    size_t width = (size_t)(op == SD_CL_OP_ACT_MUL ? c->n_ff : c->d_model);
    size_t bytes = (size_t)n_rows * width * sizeof(float), counted = 0;
    cl_mem X = NULL, A = NULL, W = NULL;
    /* X is computed in place (the residual kernels update x), so it is
     * read-write: copy it in after creation. */
    if ((rc = cl_buffer(cb, bytes, NULL, &X, &counted, "test x", err)) ||
        (rc = cl_write(cb, X, x, bytes, err)))
        goto done;
    if (a && (rc = cl_buffer(cb, bytes, a, &A, &counted, "test a", err))) goto done;
    if (w && (rc = cl_buffer(cb, (size_t)c->d_model * sizeof(float), w, &W, &counted, "test w", err)))
        goto done;
    switch (op) {
    case SD_CL_OP_RMSNORM: {
        cl_mem out = NULL;
        if ((rc = cl_buffer(cb, bytes, NULL, &out, &counted, "test y", err)) == SDNPU_OK) {
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

/* ------------------------------------------------------------ create */

static void cl_destroy(struct sd_backend *be) {
    struct cl_be *cb = cl_be_of(be);
    if (cb) {
        /* The session's thread, with no loader prepare left in flight. */
        pthread_mutex_lock(&cb->mu);
        for (int i = 0; i < cb->n_progs; i++)
            cl_prog_release(&cb->progs[i]);
        cb->n_progs = 0;
        pthread_mutex_unlock(&cb->mu);
        pthread_mutex_destroy(&cb->mu);
        if (cb->q) clReleaseCommandQueue(cb->q);
        if (cb->sh) cl_shared_put(cb->sh);
        sd_fwd_share_free(cb->share);
        sd_free(cb);
    }
    sd_free(be);
}

static const struct sd_backend_i cl_backend_i = {
    .name = "opencl",
    .estimate = cl_estimate,
    .shared_bytes = cl_shared_bytes,
    .shared_weight_bytes = cl_shared_weight_bytes,
    .loader_prepare = true,
    .prepare = cl_prepare,
    .release = cl_release,
    .run = cl_run,
    .destroy = cl_destroy,
};

int sd_backend_opencl_create(const struct sd_model *m, struct sd_pool *pool, int cl_device, bool share_weights,
                             struct sd_backend **out, struct sd_err *err) {
    *out = NULL;
    struct cl_dev devs[CL_MAX_DEVICES];
    int n;
    int rc = cl_enum_devices(devs, CL_MAX_DEVICES, &n, err);
    if (rc) return rc;
    if (cl_device < 0 || cl_device >= n)
        return sd_err_set(err, SDNPU_ERR_BACKEND,
                          "OpenCL device %d does not exist: %d device(s) found (0..%d)", cl_device, n, n - 1);
    struct sd_backend *be = sd_calloc(1, sizeof *be);
    struct cl_be *cb = sd_calloc(1, sizeof *cb);
    if (!be || !cb) {
        sd_free(be);
        sd_free(cb);
        return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for the OpenCL backend");
    }
    if (pthread_mutex_init(&cb->mu, NULL)) {
        sd_free(be);
        sd_free(cb);
        return sd_err_set(err, SDNPU_ERR_OOM, "cannot make the OpenCL backend's lock");
    }
    be->i = &cl_backend_i;
    be->m = m;
    be->pool = pool;
    be->impl = cb;
    cb->share_weights = share_weights;
    cb->plat = devs[cl_device].plat;
    cb->dev = devs[cl_device].dev;
    cl_int e;
    if ((rc = sd_fwd_share_create(&cb->share, err)) || (rc = cl_shared_get(cb->plat, cb->dev, &cb->sh, err)))
        goto fail;
    cb->ctx = cb->sh->ctx;
    cb->q = clCreateCommandQueue(cb->ctx, cb->dev, 0, &e);
    if (e != CL_SUCCESS) {
        rc = cl_fail(err, e, "clCreateCommandQueue");
        goto fail;
    }
    size_t max_wg = 0;
    cl_bool compiler = CL_FALSE;
    clGetDeviceInfo(cb->dev, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof max_wg, &max_wg, NULL);
    clGetDeviceInfo(cb->dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof cb->max_alloc, &cb->max_alloc, NULL);
    clGetDeviceInfo(cb->dev, CL_DEVICE_COMPILER_AVAILABLE, sizeof compiler, &compiler, NULL);
    if (!compiler) {
        rc = sd_err_set(err, SDNPU_ERR_BACKEND,
                        "OpenCL device %d has no compiler (kernels are built from source)", cl_device);
        goto fail;
    }
    if (max_wg < 1) max_wg = 1;
    cb->rn = 1;
    while (cb->rn * 2 <= SD_MIN(max_wg, (size_t)64))
        cb->rn *= 2;
    cb->mm_wg = SD_MIN(max_wg, (size_t)MM_WG);
    char pn[96], dn[96];
    cl_platform_name(cb->plat, pn, sizeof pn);
    cl_device_name(cb->dev, dn, sizeof dn);
    snprintf(be->desc, sizeof be->desc, "opencl: %.60s on %.60s, %s weights", dn, pn,
             share_weights ? "shared" : "private");
    *out = be;
    return SDNPU_OK;
fail:
    cl_destroy(be);
    return rc;
}
