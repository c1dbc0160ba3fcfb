/*
 * graphs/opencl/opencl.h - what the OpenCL backend offers beyond the backend
 * interface of graphs/graph.h: build statistics and per-operation test
 * hooks. Compiled only when the build has OpenCL (SD_HAVE_OPENCL); the
 * backend itself is made with sd_backend_opencl_create (graphs/graph.h).
 *
 * The hooks run one operation of the backend's graphs on the device, built
 * for n_rows rows exactly as a graph of that row count builds it, so tests
 * compare each operation with the CPU and a float reference on its own.
 * They allocate and free device buffers per call: for tests, not the token
 * loop. be must be an OpenCL backend; calls come from one thread at a time.
 */
#ifndef SD_OPENCL_H
#define SD_OPENCL_H

#include <stddef.h>
#include <stdint.h>

#include "graphs/graph.h"

struct sd_opencl_stats {
    int32_t n_builds;     /* programs this backend compiled (one per new shape key) */
    int32_t n_reused;     /* program look-ups served by a cache: the backend's own, or the
                           * device's, filled by other backends of the process */
    double build_ms;      /* total clBuildProgram time of this backend's compiles */
    double last_build_ms; /* time of the latest compile */
};

/* Zeroes *st if be is not an OpenCL backend. */
void sd_opencl_get_stats(const struct sd_backend *be, struct sd_opencl_stats *st);

/* True if the backend has a matmul kernel for weights of this type. */
bool sd_opencl_type_supported(enum sd_type type);

/* y [n_rows][w->n_out] = x [n_rows][w->n_in] times w transposed, on the
 * device. Returns SDNPU_ERR_UNSUPPORTED for a weight type without a kernel,
 * SDNPU_ERR_BACKEND for an OpenCL failure. */
int sd_opencl_test_matmul(struct sd_backend *be, const struct sd_weight *w, const float *x, int32_t n_rows,
                          float *y, struct sd_err *err);

enum sd_opencl_test_op {
    SD_CL_OP_RMSNORM = 0,    /* y = rmsnorm(x) * w            (rows of d_model) */
    SD_CL_OP_ADD = 1,        /* y = x + a                     (rows of d_model) */
    SD_CL_OP_ADD_NORMED = 2, /* y = x + rmsnorm(a) * w        (rows of d_model) */
    SD_CL_OP_ACT_MUL = 3     /* y = act(x) * a, GELU or SiLU  (rows of n_ff)    */
};

/* One row operation of the model's shapes on n_rows rows; x and a hold
 * n_rows rows of the op's width, w the norm weights (d_model) where used. */
int sd_opencl_test_rowop(struct sd_backend *be, enum sd_opencl_test_op op, const float *x, const float *a,
                         const float *w, int32_t n_rows, float *y, struct sd_err *err);

#endif /* SD_OPENCL_H */
