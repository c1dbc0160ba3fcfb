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
 * is slow, and the first launch of each kernel costs about as much again
 * (PoCL finishes code generation lazily and keeps it in its on-disk cache,
 * ~/.cache/pocl, so later processes start warm).
 *
 * Rows: a graph always computes its L rows; padding rows (token < 0) cost
 * what they cost. Every per-row reduction (matmul lanes, the RMSNorm sum)
 * runs in an order fixed by the kernel source, not by L or the row's index.
 *
 * This file makes the backend on a device and holds its vtable; the kernel
 * programs are program.c's, device buffers buffers.c's, preparing a graph
 * prepare.c's and running one run.c's (backend.h joins them).
 */
#include <CL/cl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "graphs/opencl/backend.h"

#ifndef CL_PLATFORM_NOT_FOUND_KHR
#define CL_PLATFORM_NOT_FOUND_KHR -1001
#endif

#define MM_WG 32 /* matmul work-group: output columns per group */

/* ------------------------------------------------------------ errors */

const char *sd_cl_err_name(cl_int e) {
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

int sd_cl_fail(struct sd_err *err, cl_int e, const char *what) {
    return sd_err_set(err, SDNPU_ERR_BACKEND, "OpenCL: %s failed: %s (%d)", what, sd_cl_err_name(e), (int)e);
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
    if (e != CL_SUCCESS) return sd_cl_fail(err, e, "clGetPlatformIDs");
    if (np > 16) np = 16;
    int n = 0;
    for (cl_uint p = 0; p < np && n < cap; p++) {
        cl_device_id ids[CL_MAX_DEVICES];
        cl_uint nd = 0;
        e = clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, CL_MAX_DEVICES, ids, &nd);
        if (e == CL_DEVICE_NOT_FOUND) continue;
        if (e != CL_SUCCESS) return sd_cl_fail(err, e, "clGetDeviceIDs");
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

/* ------------------------------------------------------------ create */

static void cl_destroy(struct sd_backend *be) {
    struct cl_be *cb = cl_be_of(be);
    if (cb) {
        /* The session's thread, with no loader prepare left in flight. */
        pthread_mutex_lock(&cb->mu);
        for (int i = 0; i < cb->n_progs; i++)
            sd_cl_prog_release(&cb->progs[i]);
        cb->n_progs = 0;
        pthread_mutex_unlock(&cb->mu);
        pthread_mutex_destroy(&cb->mu);
        if (cb->q) clReleaseCommandQueue(cb->q);
        if (cb->sh) sd_cl_shared_put(cb->sh);
        sd_fwd_share_free(cb->share);
        sd_free(cb);
    }
    sd_free(be);
}

static const struct sd_backend_i cl_backend_i = {
    .name = "opencl",
    .estimate = sd_cl_estimate,
    .shared_bytes = sd_cl_shared_bytes,
    .shared_weight_bytes = sd_cl_shared_weight_bytes,
    .loader_prepare = true,
    .prepare = sd_cl_prepare,
    .release = sd_cl_release,
    .run = sd_cl_run,
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
    be->kv_keys = SD_KV_KEYS_FP16; /* its attention runs in ggml's order */
    be->pool = pool;
    be->impl = cb;
    cb->share_weights = share_weights;
    cb->plat = devs[cl_device].plat;
    cb->dev = devs[cl_device].dev;
    cl_int e;
    if ((rc = sd_fwd_share_create(&cb->share, err)) || (rc = sd_cl_shared_get(cb->plat, cb->dev, &cb->sh, err)))
        goto fail;
    cb->ctx = cb->sh->ctx;
    cb->q = clCreateCommandQueue(cb->ctx, cb->dev, 0, &e);
    if (e != CL_SUCCESS) {
        rc = sd_cl_fail(err, e, "clCreateCommandQueue");
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
