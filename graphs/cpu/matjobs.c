/*
 * graphs/cpu/matjobs.c - the projections of the CPU forward pass as pool
 * jobs: the activations prepared in the form each weight reads (struct
 * sd_fwd_buf's xq buffers), then the output columns split across the
 * threads; and the head, whose argmax is taken as its logits are written.
 */
#include "graphs/cpu/forward_internal.h"
#include "graphs/matmul.h"
#include "graphs/packed.h"
#include "graphs/quant.h"

#include <stdatomic.h>

/* ------------------------------------------------------- activation forms */

/* A weight type of each packed activation class. */
static const enum sd_type xq_packed_type[3] = {SD_TYPE_Q8_0, SD_TYPE_Q4_K, SD_TYPE_F32};

/* The activation buffer (XQ_*) that weight w reads; -1 where it reads the
 * floats as they are (F32 weights). */
static int xq_index(const struct sd_weight *w) {
    const enum sd_type wtype = w->type;
    if (w->packed)
        for (int i = 0; i < 3; i++)
            if (sd_packed_act_same(wtype, xq_packed_type[i])) return XQ_P32 + i;
    if (wtype == SD_TYPE_F16) return XQ_F16;
    if (wtype == SD_TYPE_BF16) return XQ_BF16;
    switch (sd_type_get(wtype)->vec_dot_type) {
    case SD_TYPE_Q8_0: return XQ_Q8_0;
    case SD_TYPE_Q8_1: return XQ_Q8_1;
    case SD_TYPE_Q8_K: return XQ_Q8_K;
    default: return -1;
    }
}

/* Bytes of one row of activation buffer i for inputs of up to wmax values
 * (a whole number of 256). */
size_t sd_xq_row_bytes(int i, int64_t wmax) {
    if (i >= XQ_P32) return sd_packed_act_row_bytes(xq_packed_type[i - XQ_P32], wmax);
    const enum sd_type t[] = {SD_TYPE_Q8_0, SD_TYPE_Q8_1, SD_TYPE_Q8_K, SD_TYPE_F32, SD_TYPE_F32};
    size_t rb = 0;
    sd_row_size(t[i], wmax, &rb);
    return rb;
}

/* ------------------------------------------------------------ projections */

/* Columns [lo, hi) of projection i, every row. */
static void mm_cols(const struct mm_job *j, int i, int64_t lo, int64_t hi) {
    const struct sd_weight *w = j->w[i];
    if (lo >= hi) return;
    if (w->packed) {
        sd_packed_matmul(w->type, w->data, w->n_out, w->n_in, j->xq[i], j->xq_row[i], j->n_rows, j->y[i] + lo,
                         (size_t)w->n_out, lo, hi);
    } else {
        sd_matmul(w->type, w->data, w->row_bytes, w->n_out, w->n_in, j->xq[i], j->xq_row[i], j->n_rows, j->y[i], lo,
                  hi);
    }
}

/* The columns of the job's projections taken as one. */
static int64_t mm_total(const struct mm_job *j) {
    int64_t total = 0;
    for (int i = 0; i < j->n; i++) total += j->w[i]->n_out;
    return total;
}

/* Columns [cb, ce) of the job's projections taken as one. */
static void mm_range(const struct mm_job *j, int64_t cb, int64_t ce) {
    int64_t off = 0;
    for (int i = 0; i < j->n && cb < ce; i++) {
        const int64_t n_out = j->w[i]->n_out;
        mm_cols(j, i, SD_MAX(cb, off) - off, SD_MIN(ce, off + n_out) - off);
        off += n_out;
    }
}

/* Chunks of about an eighth of a thread's share from a shared counter,
 * not fixed halves: this guest's cores do not stream at the same rate, and
 * a thread done with a fixed half waited for the other (5.7% of a pass).
 * A column's arithmetic does not depend on the thread that computes it.
 * The chunk is a whole number of `step` units of 16 columns. */
static int64_t chunk_units(int64_t units, int nth, int64_t step) {
    return SD_MAX(1, units / (8 * (int64_t)nth) / step) * step;
}

/* The next chunk's first unit into *u; false once every unit is taken. */
static bool take_chunk(struct mm_job *j, int64_t units, int64_t chunk, int64_t *u) {
    *u = atomic_fetch_add_explicit(&j->next, chunk, memory_order_relaxed);
    return *u < units;
}

static void mm_job_run(void *ctx, int ith, int nth) {
    struct mm_job *j = ctx;
    (void)ith;
    const int64_t total = mm_total(j), units = (total + 15) / 16, chunk = chunk_units(units, nth, 1);
    for (int64_t u; take_chunk(j, units, chunk, &u);)
        mm_range(j, u * 16, SD_MIN(SD_MIN(u + chunk, units) * 16, total));
}


/* A piece's rows are a line more than 4 KiB apart: 4 KiB apart, each row's
 * stores fall in the same L1 set as the others'. */
#define PIECE_STRIDE (SD_FWD_HEAD_PIECE + 16)

size_t sd_fwd_head_piece_bytes(int n_threads, int32_t n_rows) {
    return (size_t)n_threads * (size_t)n_rows * PIECE_STRIDE * sizeof(float);
}

/* Columns [lo, hi) of the head into its piece of scratch, rows
 * PIECE_STRIDE apart. */
static const float *head_piece(const struct head_job *h, int ith, int64_t lo, int64_t hi) {
    const struct mm_job *j = &h->mm;
    const struct sd_weight *w = j->w[0];
    float *p = h->pieces + (size_t)ith * (size_t)j->n_rows * PIECE_STRIDE;
    sd_packed_matmul(w->type, w->data, w->n_out, w->n_in, j->xq[0], j->xq_row[0], j->n_rows, p, PIECE_STRIDE,
                     lo, hi);
    return p;
}

/* The head in chunks of whole pieces from a shared counter, as mm_job_run
 * takes projections (fixed halves left one thread waiting for the other;
 * the head is a third of the 0.5B's bytes), computed and scanned a piece at
 * a time. A thread's pieces come in index order, so its running argmax scans them as one vector; the threads'
 * argmaxes interleave, and sd_amax_merge folds them in any order. */
void sd_head_job_run(void *ctx, int ith, int nth) {
    struct head_job *h = ctx;
    struct mm_job *j = &h->mm;
    const int64_t n_out = j->w[0]->n_out, units = (n_out + 15) / 16, piece = SD_FWD_HEAD_PIECE / 16;
    /* Chunks of whole pieces: a chunk a piece long measured slower (each
     * start of a chunk is a new stream for the prefetchers). */
    const int64_t chunk = chunk_units(units, nth, piece);
    struct sd_amax *a = h->amax + (size_t)ith * (size_t)j->n_rows;
    for (int32_t r = 0; r < j->n_rows; r++) sd_amax_init(&a[r]);
    for (int64_t u; take_chunk(j, units, chunk, &u);) {
        const int64_t ce = SD_MIN((u + chunk) * 16, n_out);
        for (int64_t lo = u * 16; lo < ce; lo += SD_FWD_HEAD_PIECE) {
            const int64_t hi = SD_MIN(lo + SD_FWD_HEAD_PIECE, ce);
            const float *y = j->y[0] + lo;
            size_t stride = (size_t)n_out;
            if (h->pieces) {
                y = head_piece(h, ith, lo, hi);
                stride = PIECE_STRIDE;
            } else {
                mm_cols(j, 0, lo, hi);
            }
            for (int32_t r = 0; r < j->n_rows; r++) sd_amax_scan(&a[r], y + (size_t)r * stride, hi - lo, lo);
        }
    }
}

struct quant_job {
    bool packed; /* t is then a weight type of the packed class to prepare */
    enum sd_type t;
    const float *x;
    int64_t n_in;
    int32_t n_rows;
    void *xq;
    size_t row;
};

/* Rows [rb, re) of the job. */
static void quant_rows(const struct quant_job *q, int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; r++) {
        const float *x = q->x + r * q->n_in;
        void *dst = (char *)q->xq + (size_t)r * q->row;
        if (q->packed) {
            sd_packed_quantize_act(q->t, x, dst, q->n_in);
        } else if (q->t == SD_TYPE_F16 || q->t == SD_TYPE_BF16) {
            float *y = dst;
            for (int64_t i = 0; i < q->n_in; i++)
                y[i] = q->t == SD_TYPE_F16 ? sd_fp16_to_fp32(sd_fp32_to_fp16(x[i])) : sd_bf16_to_fp32(sd_fp32_to_bf16(x[i]));
        } else {
            sd_quantize_act_row(q->t, x, dst, q->n_in);
        }
    }
}

static void quant_job_run(void *ctx, int ith, int nth) {
    struct quant_job *q = ctx;
    int64_t rb, re;
    sd_split(q->n_rows, ith, nth, &rb, &re);
    quant_rows(q, rb, re);
}

/* The preparation of x [n_rows][n_in] for weight w into its activation
 * buffer (index *idx, rows of q->row bytes); *idx < 0 where w reads x as
 * it is (float weights). */
static struct quant_job quant_for(const struct sd_fwd *f, const struct sd_weight *w, const float *x, int32_t n_rows,
                                  int *idx) {
    *idx = xq_index(w);
    /* For half-precision weights the "quantization" is rounding to the
     * weight's own type, kept as floats for the F32-activation kernel. */
    enum sd_type qt = *idx == XQ_F16 ? SD_TYPE_F16 : *idx == XQ_BF16 ? SD_TYPE_BF16 : sd_type_get(w->type)->vec_dot_type;
    size_t rb = (size_t)w->n_in * sizeof(float);
    if (w->packed) {
        qt = w->type;
        rb = sd_packed_act_row_bytes(qt, w->n_in);
    } else if (*idx >= 0 && qt != SD_TYPE_F16 && qt != SD_TYPE_BF16) {
        sd_row_size(qt, w->n_in, &rb);
    }
    return (struct quant_job){w->packed, qt, x, w->n_in, n_rows, *idx >= 0 ? f->xq[*idx] : NULL, rb};
}

/* Quantize x [n_rows][n_in] for weight w, unless done_mask holds its
 * buffer already; returns the row pointer base and stride to hand to the
 * matmul. Float weights read x as it is. */
const void *sd_prep_input(struct sd_fwd *f, const struct sd_weight *w, const float *x, int32_t n_rows,
                          size_t *row_bytes, unsigned *done_mask) {
    int idx;
    struct quant_job q = quant_for(f, w, x, n_rows, &idx);
    if (idx < 0) {
        *row_bytes = (size_t)w->n_in * sizeof(float);
        return x;
    }
    *row_bytes = q.row;
    if (!(*done_mask & (1u << idx))) {
        if ((int64_t)n_rows * w->n_in >= 16384) {
            sd_pool_run(f->pool, quant_job_run, &q);
        } else {
            quant_job_run(&q, 0, 1);
        }
        *done_mask |= 1u << idx;
    }
    return f->xq[idx];
}

/* The next projection's inputs, prepared by the row job that wrote them
 * (fused): rows [rb, re) of x for the weights w[0, n), each buffer once.
 * Done there, a row's floats are read while still in the writing core's
 * cache, and the projection skips a pass of its own (on one thread below
 * 16,384 values, which an 8-row batch of 640 is). */
void sd_prep_rows(const struct sd_fwd *f, const struct sd_weight *const *w, int n, const float *x,
                  int32_t n_rows, int64_t rb, int64_t re) {
    unsigned seen = 0;
    for (int i = 0; i < n; i++) {
        int idx;
        const struct quant_job q = quant_for(f, w[i], x, n_rows, &idx);
        if (idx < 0 || seen & (1u << idx)) continue;
        seen |= 1u << idx;
        quant_rows(&q, rb, re);
    }
}

/* The buffers sd_prep_rows fills for the weights w[0, n). */
unsigned sd_prep_mask(const struct sd_weight *const *w, int n) {
    unsigned m = 0;
    for (int i = 0; i < n; i++) {
        const int idx = xq_index(w[i]);
        if (idx >= 0) m |= 1u << idx;
    }
    return m;
}

/* y_i = W_i x for up to three weights sharing the input x; the buffers in
 * done hold x prepared already (sd_prep_rows). */
void sd_project(struct sd_fwd *f, const float *x, int32_t n_rows, int n, const struct sd_weight *const *w,
                float *const *y, unsigned done) {
    struct mm_job j = {.n = n, .n_rows = n_rows};
    for (int i = 0; i < n; i++) {
        j.w[i] = w[i];
        j.y[i] = y[i];
        j.xq[i] = sd_prep_input(f, w[i], x, n_rows, &j.xq_row[i], &done);
    }
    sd_pool_run(f->pool, mm_job_run, &j);
}
