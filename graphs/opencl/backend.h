/*
 * graphs/opencl/backend.h - what the files of the OpenCL backend share: the
 * backend's state and its threading contract, a graph's device buffers, and
 * the functions one file offers the others. Private to graphs/opencl/.
 *
 * backend.c makes the backend on a device (and says what runs where);
 * program.c builds and caches the kernels; buffers.c makes device buffers
 * and shares weights and activations between graphs; prepare.c prepares
 * and releases graphs; run.c runs them.
 */
#ifndef SD_OPENCL_BACKEND_H
#define SD_OPENCL_BACKEND_H

#include <CL/cl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "graphs/forward.h"
#include "graphs/graph.h"
#include "graphs/opencl/opencl.h"

#define CL_MAX_DEVICES 64
#define CL_MAX_PROGRAMS 32

/* What one device shares across all backends of the process: a context
 * and the built programs, keyed by their build options. Sessions each make
 * their own backend on the same model; sharing the programs means only the
 * first pays the compile (slow on PoCL). Guarded by cl_shared_mu (program.c);
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
    cl_context ctx;     /* sh->ctx */
    cl_command_queue q; /* the session's: runs (and prepares on its thread) */
    size_t rn;          /* work-group size of the row kernels (power of two) */
    size_t mm_wg;       /* work-group width of the matmuls */
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
    cl_mem x;             /* [L][d] residual stream */
    cl_mem h;             /* [L][max(d, nq)] normed input, attention output */
    cl_mem q, k, v;       /* [L][nq], [L][nkv], [L][nkv] */
    cl_mem o;             /* [L][d] projection output */
    cl_mem gate, up;      /* [L][n_ff] */
    cl_mem logits;        /* head: [L][n_vocab] */
    struct sd_fwd *fwd;   /* block: host scratch of the attention step */
    struct cl_acts *acts; /* block: the shared activations x .. up are retains of */
    size_t dev_bytes;
};

static inline struct cl_be *cl_be_of(const struct sd_backend *be) { return be->impl; }

static inline size_t w_bytes(const struct sd_weight *w) { return (size_t)w->n_out * w->row_bytes; }
static inline size_t v_bytes(const struct sd_vec *v) { return v->data ? (size_t)v->n * sizeof(float) : 0; }

static inline void rel(cl_mem *m) {
    if (*m) clReleaseMemObject(*m);
    *m = NULL;
}

/* backend.c: OpenCL failures as sd_err records. */
const char *sd_cl_err_name(cl_int e);
int sd_cl_fail(struct sd_err *err, cl_int e, const char *what);

/* program.c: the device's shared context (counted per backend) and a
 * backend's kernels for graphs of n_rows rows. */
int sd_cl_shared_get(cl_platform_id plat, cl_device_id dev, struct cl_shared **out, struct sd_err *err);
void sd_cl_shared_put(struct cl_shared *sh);
int sd_cl_get_program(struct sd_backend *be, int32_t n_rows, struct cl_prog **out, struct sd_err *err);
void sd_cl_prog_release(struct cl_prog *p);

/* buffers.c: device buffers, shared weights and shared activations. */
int sd_cl_buffer(struct cl_be *cb, size_t n, const void *src, cl_mem *out, size_t *counted, const char *what,
                 struct sd_err *err);
int sd_cl_upload_weight(struct cl_be *cb, const struct sd_weight *w, bool shared, const char *name,
                        struct cl_w *out, size_t *counted, struct sd_err *err);
void sd_cl_w_put(struct cl_be *cb, struct cl_w *w);
int sd_cl_upload_vec(struct cl_be *cb, const struct sd_vec *v, const char *name, cl_mem *out, size_t *counted,
                     struct sd_err *err);
struct cl_wbuf *sd_cl_wbuf_find(const struct cl_be *cb, const void *src);
size_t sd_cl_act_bytes(const struct sd_model_config *c, int32_t L);
struct cl_acts *sd_cl_acts_find(const struct cl_be *cb, int32_t L);
int sd_cl_acts_get(struct cl_be *cb, const struct sd_model_config *c, int32_t L, struct cl_acts **out,
                   struct sd_err *err);
void sd_cl_acts_put(struct cl_be *cb, struct cl_acts *a);
size_t sd_cl_shared_bytes(struct sd_backend *be);
size_t sd_cl_shared_weight_bytes(struct sd_backend *be);

/* prepare.c and run.c: the entries of the backend's vtable. */
size_t sd_cl_estimate(struct sd_backend *be, const struct sd_graph_shape *s, unsigned flags);
int sd_cl_prepare(struct sd_backend *be, struct sd_graph *g, unsigned flags, struct sd_err *err);
void sd_cl_release(struct sd_backend *be, struct sd_graph *g);
int sd_cl_run(struct sd_backend *be, struct sd_graph *g, struct sd_kv_cache *kv, const struct sd_row *rows,
              int32_t base, float *x, float *logits, struct sd_err *err);

#endif /* SD_OPENCL_BACKEND_H */
