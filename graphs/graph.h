/*
 * graphs/graph.h - static graphs and the backends that prepare and run them.
 *
 * A graph is a fixed-shape program: a run of the model's layers (a block)
 * or the model's head (final norm and output projection), for exactly
 * n_rows rows (L) and a KV cache of n_ctx slots. Preparing a graph does
 * what a static accelerator runtime does at load time: it lays out the
 * weights in the backend's layout, builds the kernels for the shapes, and
 * allocates every buffer a run needs. A prepared graph runs with no
 * allocation. Weights are shared or private (graphs/weights.h): a backend
 * that shares reads one prepared copy per weight for all its graphs (and
 * the sessions over the model); with private weights each graph holds its
 * own copy, as an NPU runtime without weight sharing must. Running it always computes L rows; rows whose
 * token is < 0 are padding and cost what they cost.
 *
 * The residual stream crosses graph boundaries as floats on the host
 * (x [L][d_model]); the token embedding (a table look-up) is done on the
 * host by sd_embed_rows. Attention against the KV cache runs on the host
 * side of the boundary in every backend (graphs/forward.h explains why),
 * so the cache is one host buffer whatever the backend.
 *
 * Batch invariance (DESIGN.md): on the CPU backend a row's outputs are
 * bit-identical whatever L, its row index, and the other rows. Other
 * backends are compared with the CPU backend within a stated tolerance.
 */
#ifndef SD_GRAPH_H
#define SD_GRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "graphs/pool.h"
#include "graphs/kv.h"
#include "graphs/model.h"
#include "graphs/types.h"
#include "graphs/weights.h"

enum sd_graph_kind {
    SD_GRAPH_BLOCK = 0, /* layers [l0, l1): x -> x, writes K/V of real rows */
    SD_GRAPH_HEAD = 1   /* final norm and output projection: x -> logits [L][width] */
};

struct sd_graph_shape {
    enum sd_graph_kind kind;
    int32_t l0, l1;  /* layers of a block graph (ignored for the head) */
    int32_t n_rows;  /* L: 1 .. SD_MAX_BATCH_ROWS */
    int32_t n_ctx;   /* KV-cache slots the graph attends over */
    /* Head only: the vocabulary rows the output projection keeps, [n_subset]
     * distinct ids, or NULL and 0 for the whole vocabulary. A subset head
     * (in-context calibration's head, calib/calib.h) prepares a private
     * copy of just those rows and computes logits [L][n_subset]. The list
     * is read while preparing only: a prepared graph's shape has subset
     * NULL and keeps n_subset. */
    const int32_t *subset;
    int32_t n_subset;
};

struct sd_backend;
struct sd_head_topk;

struct sd_graph {
    struct sd_graph_shape shape;
    struct sd_backend *be;
    void *impl;            /* the backend's prepared state */
    size_t prepared_bytes; /* its own weights and buffers, as counted by the backend (not shared ones) */
    double prepare_ms;
};

/* Flags of prepare. */
#define SD_PREPARE_LOADER 1u /* called from a loader thread while the session's thread runs other graphs */

/* The interface every backend implements.
 *
 * Threads. run, release and destroy come from the session's thread only.
 * estimate and prepare come from the session's thread too, or, in a
 * backend whose loader_prepare is true, from one loader thread at a time
 * with SD_PREPARE_LOADER while the session's thread runs *other* graphs of
 * the same backend (progressive graph switching prepares a block's next
 * graph while the others compute). Such a prepare must not use the
 * session's worker pool (the runs own it) or any state a run touches: the
 * cpu backend then packs the weights on the loader thread alone. A backend
 * without loader_prepare is prepared on the session's thread. */
struct sd_backend_i {
    const char *name;
    bool loader_prepare;
    /* Bytes that preparing this shape would add to what the backend holds
     * now (for the memory budget): its own bytes, plus shared buffers it
     * would have to make. With SD_PREPARE_LOADER, as if nothing were
     * shared: a loader's prepare cannot count on buffers that the
     * session's thread may release before it takes them. */
    size_t (*estimate)(struct sd_backend *be, const struct sd_graph_shape *shape, unsigned flags);
    /* Bytes of the buffers shared by prepared graphs, counted in no
     * graph's prepared_bytes (NULL: the backend shares none). */
    size_t (*shared_bytes)(struct sd_backend *be);
    /* Of those, the shared prepared weights (graphs/weights.h) the
     * backend holds (NULL: it keeps private weights only). */
    size_t (*shared_weight_bytes)(struct sd_backend *be);
    /* Fill g->impl and g->prepared_bytes (the graph's own bytes). On
     * failure nothing is held. flags: SD_PREPARE_LOADER or 0. */
    int (*prepare)(struct sd_backend *be, struct sd_graph *g, unsigned flags, struct sd_err *err);
    void (*release)(struct sd_backend *be, struct sd_graph *g);
    /* Block: x [L][d] in and out; rows [L] (padding rows have token < 0);
     * base = slot of batch-relative ancestor 0 (see struct sd_row).
     * Head: x [L][d] in, logits [L][n_vocab] out; kv and rows unused. */
    int (*run)(struct sd_backend *be, struct sd_graph *g, struct sd_kv_cache *kv, const struct sd_row *rows,
               int32_t base, float *x, float *logits, struct sd_err *err);
    /* Head only, optional: run, and each row's greedy token argmax[L]
     * (base/base.h's sd_amax) taken while its logits are written; with
     * keep_logits false the backend may leave logits unwritten. NULL:
     * sd_graph_run_argmax scans the logits after the run. */
    int (*run_argmax)(struct sd_backend *be, struct sd_graph *g, float *x, float *logits, int32_t *argmax,
                      bool keep_logits, struct sd_err *err);
    /* Head only, optional: run for a sampler that reads each row's k best
     * logits alone (struct sd_head_topk). NULL: run. */
    int (*run_topk)(struct sd_backend *be, struct sd_graph *g, float *x, float *logits,
                    const struct sd_head_topk *topk, struct sd_err *err);
    void (*destroy)(struct sd_backend *be);
};

struct sd_backend {
    const struct sd_backend_i *i;
    const struct sd_model *m;
    struct sd_pool *pool;  /* the session's worker threads (the host side) */
    enum sd_kernels kernels; /* summation order of the cpu kernels (graphs/packed.h) */
    enum sd_kv_keys kv_keys; /* the keys its graphs' KV cache holds (graphs/kv.h), set by the backend */
    void *impl;
    char desc[160];        /* e.g. "cpu (AVX2, 2 threads)", "opencl: pthread-... on Portable Computing Language" */
};

/* Make a backend by name ("cpu" or "opencl"); cl_device indexes OpenCL
 * devices across all platforms. An "opencl" request where no usable device
 * exists fails with SDNPU_ERR_BACKEND and a message saying why; callers that
 * want the fallback (sessions do) then make "cpu" and log a warning. */
int sd_backend_create(const char *name, int cl_device, enum sd_kernels kernels, const struct sd_model *m,
                      struct sd_wstore *weights, struct sd_pool *pool, struct sd_backend **out, struct sd_err *err);
void sd_backend_free(struct sd_backend *be);
/* The keys a KV cache for this backend's graphs holds (be->kv_keys):
 * integer keys where its attention runs in the fast order (the cpu
 * backend's fast kernels), fp16 where it runs in ggml's (the cpu backend's
 * ggml order, OpenCL). */
enum sd_kv_keys sd_backend_kv_keys(const struct sd_backend *be);

/* kernels: SD_KERNELS_FAST runs on weights repacked into graphs/packed.h's
 * layout; SD_KERNELS_GGML on the GGUF rows with the ggml-order kernels.
 * weights: the store whose one packed copy the graphs share, or NULL for
 * private weights (each graph packs, or copies, its own). */
int sd_backend_cpu_create(const struct sd_model *m, struct sd_pool *pool, enum sd_kernels kernels,
                          struct sd_wstore *weights, struct sd_backend **out, struct sd_err *err);
/* Defined in graphs/opencl/ when the build has OpenCL, else returns
 * SDNPU_ERR_UNSUPPORTED saying the build has no OpenCL. share_weights: the
 * backend's graphs share one device buffer per weight (the weights stay in
 * the GGUF's layout there; the cpu store's packed copy is not used). */
int sd_backend_opencl_create(const struct sd_model *m, struct sd_pool *pool, int cl_device, bool share_weights,
                             struct sd_backend **out, struct sd_err *err);
/* The instruction sets the cpu kernels picked on this machine: "scalar",
 * "AVX2", "AVX2+AVX-VNNI" (with "+GFNI" where the packed kernels unpack on
 * it), "AVX2+AVX-512 VNNI" (the same) and "+BF16" (attention's p.V on
 * vdpbf16ps). */
const char *sd_cpu_kernels_desc(void);
/* The packed kernels' instruction sets alone, as a cpu backend's
 * description names them: "scalar", "AVX2", "AVX-VNNI", "AVX-VNNI+GFNI",
 * "AVX-512 VNNI" or "AVX-512 VNNI+GFNI". */
const char *sd_cpu_isa_desc(void);
/* Whether this machine's AMX tile unit is there and granted to sdnpu
 * (graphs/packed.h, "AMX"), in words. Asks the kernel for tile data once. */
const char *sd_cpu_amx_desc(void);
/* Lines "index: platform / device" for every OpenCL device, into buf. */
int sd_opencl_list_devices(char *buf, size_t cap, struct sd_err *err);

/* Prepare a graph of the given shape. If mem_left is not SIZE_MAX and the
 * backend's estimate exceeds it, fails with SDNPU_ERR_OOM naming both
 * numbers and prepares nothing. g is zeroed on failure. */
int sd_graph_prepare(struct sd_backend *be, const struct sd_graph_shape *shape, size_t mem_left, struct sd_graph *g,
                     struct sd_err *err);
/* The same from a loader thread (see struct sd_backend_i): fails with
 * SDNPU_ERR_UNSUPPORTED, preparing nothing, where the backend cannot. */
int sd_graph_prepare_on_loader(struct sd_backend *be, const struct sd_graph_shape *shape, size_t mem_left,
                               struct sd_graph *g, struct sd_err *err);
void sd_graph_release(struct sd_graph *g);
/* Bytes the backend holds in buffers its prepared graphs share. */
size_t sd_backend_shared_bytes(struct sd_backend *be);
/* Of those, the shared prepared weights; 0 where each graph keeps its own. */
size_t sd_backend_shared_weight_bytes(struct sd_backend *be);
/* Logits per row a head of this shape computes: n_subset, or n_vocab. */
int32_t sd_head_width(const struct sd_model *m, const struct sd_graph_shape *shape);
/* For backends preparing a head: the output projection it holds. Without
 * a subset, the model's own (*buf NULL); with one, a copy of those rows
 * gathered into *buf (sd_free it once the backend has its own copy).
 * With buf NULL, only the shape of the result (data points at the
 * model's rows): what estimates need. */
int sd_head_weight(const struct sd_model *m, const struct sd_graph_shape *shape, struct sd_weight *out, void **buf,
                   struct sd_err *err);
int sd_graph_run(struct sd_graph *g, struct sd_kv_cache *kv, const struct sd_row *rows, int32_t base, float *x,
                 float *logits, struct sd_err *err);
/* What a top-k sampler reads of a head's logits: each row's k largest by
 * (logit, then lower index), and the logits of the tokens keep[0, n_keep)
 * (a repetition penalty changes theirs). */
struct sd_head_topk {
    int32_t k;
    const int32_t *keep; /* ids outside the vocabulary are ignored */
    int32_t n_keep;
};
/* A head's run whose logits are exact for every token that can be among a
 * row's k best, and for the keep tokens; the rest may be -infinity (the
 * cpu backend's certified heads, graphs/cert.h, compute no more), so a
 * top-k sampler draws from them what it draws from all the logits. */
int sd_graph_run_topk(struct sd_graph *g, float *x, float *logits, const struct sd_head_topk *topk,
                      struct sd_err *err);

/* A head's run that also gives each row's greedy token, argmax[L]: what
 * sd_argmax of the row's logits gives, bit for bit, without reading the
 * logits back from memory where the backend fuses it. With keep_logits
 * false, the logits (still a buffer of [L][width]) may be left unwritten:
 * the cpu backend's packed heads then never store them. */
int sd_graph_run_argmax(struct sd_graph *g, float *x, float *logits, int32_t *argmax, bool keep_logits,
                        struct sd_err *err);

/* x[r] = embedding of rows[r].token times the architecture's scale (token 0
 * for padding rows). On a file-mapped model the pages each row brought in
 * are given back after it is read. */
void sd_embed_rows(const struct sd_model *m, const struct sd_row *rows, int32_t n_rows, float *x);

#endif /* SD_GRAPH_H */
