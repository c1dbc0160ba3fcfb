/*
 * graphs/cpu/matjobs.c - the projections of the CPU forward pass as pool
 * jobs: the activations prepared in the form each weight reads (struct
 * sd_fwd_buf's xq buffers), then the output columns split across the
 * threads; and the head, whose argmax is taken as its logits are written.
 */
#include "graphs/cpu/forward_internal.h"
#include "graphs/cert.h"
#include "graphs/matmul.h"
#include "graphs/packed.h"
#include "graphs/quant.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

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

/* Chunks of about an eighth of a thread's share, dealt as graphs/pool.h's
 * sd_ranges deal them, not fixed halves: this guest's cores do not stream
 * at the same rate, and a thread done with a fixed half waited for the
 * other (5.7% of a pass). A column's arithmetic does not depend on the
 * thread that computes it. The chunk is a whole number of `step` units of
 * 16 columns. */
static int64_t chunk_units(int64_t units, int nth, int64_t step) {
    return SD_MAX(1, units / (8 * (int64_t)nth) / step) * step;
}

/* The next chunk's first unit into *u; false once every unit is taken. */
static bool take_chunk(_Atomic int64_t *next, int64_t units, int64_t chunk, int64_t *u) {
    *u = atomic_fetch_add_explicit(next, chunk, memory_order_relaxed);
    return *u < units;
}

static void mm_job_run(void *ctx, int ith, int nth) {
    struct mm_job *j = ctx;
    const int64_t total = mm_total(j), chunk = chunk_units((total + 15) / 16, nth, 1);
    for (int64_t b, e; sd_ranges_take(j->ranges, ith, nth, chunk, &b, &e);)
        mm_range(j, b * 16, SD_MIN(e * 16, total));
}


/* A piece's rows are a line more than 4 KiB apart: 4 KiB apart, each row's
 * stores fall in the same L1 set as the others'. */
#define PIECE_STRIDE (SD_FWD_HEAD_PIECE + 16)

/* A certified head's scratch after the pieces (struct cert_job): groups'
 * upper and lower bounds [n_rows][groups] each, the threads' best lower
 * bounds [nth][n_rows], their failures [nth], the candidates [groups], the
 * rows each candidate is one for [groups] and the groups a top-k run keeps
 * whole [groups]. */
static size_t cert_scratch(int n_threads, int32_t n_rows, int64_t groups) {
    return (2 * (size_t)n_rows * (size_t)groups + 2 * (size_t)n_threads * (size_t)n_rows +
            3 * (size_t)groups) *
           4;
}

size_t sd_fwd_head_piece_bytes(int n_threads, int32_t n_rows, int64_t cert_outputs) {
    const size_t pieces = (size_t)n_threads * (size_t)n_rows * PIECE_STRIDE * sizeof(float);
    return pieces + (cert_outputs > 0 ? cert_scratch(n_threads, n_rows, (cert_outputs + 15) / 16) : 0);
}

/* Columns [lo, hi) of the head for rows [r0, r1) into the thread's piece
 * of scratch, rows PIECE_STRIDE apart; returns the piece (row 0). A row's
 * logits do not depend on the rows computed with it (graphs/packed.h). */
static const float *head_piece_rows(const struct head_job *h, int ith, int64_t lo, int64_t hi, int32_t r0,
                                    int32_t r1) {
    const struct mm_job *j = &h->mm;
    const struct sd_weight *w = j->w[0];
    float *p = h->pieces + (size_t)ith * (size_t)j->n_rows * PIECE_STRIDE;
    sd_packed_matmul(w->type, w->data, w->n_out, w->n_in,
                     (const uint8_t *)j->xq[0] + (size_t)r0 * j->xq_row[0], j->xq_row[0], r1 - r0,
                     p + (size_t)r0 * PIECE_STRIDE, PIECE_STRIDE, lo, hi);
    return p;
}

static const float *head_piece(const struct head_job *h, int ith, int64_t lo, int64_t hi) {
    return head_piece_rows(h, ith, lo, hi, 0, h->mm.n_rows);
}

/* The head in chunks of whole pieces, dealt as mm_job_run deals projections
 * (fixed halves left one thread waiting for the other; the head is a third
 * of the 0.5B's bytes), computed and scanned a piece at a time. A chunk's
 * pieces come in index order, so one running argmax scans them as one
 * vector; the chunks' argmaxes (a thread's own range ascending, then
 * chunks from the back of the others') and the threads' fold in any order
 * by sd_amax_merge. */
static void head_job_run(void *ctx, int ith, int nth) {
    struct head_job *h = ctx;
    struct mm_job *j = &h->mm;
    const int64_t n_out = j->w[0]->n_out, units = (n_out + 15) / 16, piece = SD_FWD_HEAD_PIECE / 16;
    /* Chunks of whole pieces: a chunk a piece long measured slower (each
     * start of a chunk is a new stream for the prefetchers). */
    const int64_t chunk = chunk_units(units, nth, piece);
    struct sd_amax *a = h->amax + (size_t)ith * (size_t)j->n_rows;
    for (int32_t r = 0; r < j->n_rows; r++) sd_amax_init(&a[r]);
    for (int64_t u, ue; sd_ranges_take(j->ranges, ith, nth, chunk, &u, &ue);) {
        const int64_t ce = SD_MIN(ue * 16, n_out);
        struct sd_amax c[SD_MAX_BATCH_ROWS];
        for (int32_t r = 0; r < j->n_rows; r++)
            sd_amax_init(&c[r]);
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
            for (int32_t r = 0; r < j->n_rows; r++)
                sd_amax_scan(&c[r], y + (size_t)r * stride, hi - lo, lo);
        }
        for (int32_t r = 0; r < j->n_rows; r++)
            sd_amax_merge(&a[r], &c[r]);
    }
}

void sd_head_run(struct head_job *h, struct sd_pool *pool) {
    sd_ranges_init(h->mm.ranges, sd_pool_n_threads(pool), (h->mm.w[0]->n_out + 15) / 16);
    sd_pool_run(pool, head_job_run, h);
}

/* ------------------------------------------------------- certified head */

/* A greedy head's argmax certified from its copy (graphs/cert.h): first
 * every output's bounds from the copy, then the exact head over the
 * candidate groups alone. The threads' scratch follows their pieces
 * (cert_scratch). */
_Static_assert(SD_CERT_MAX_ROWS <= 32, "a candidate's rows are the bits of an int32");

struct cert_job {
    struct head_job *h;
    const float *c;             /* the margins */
    float xn[SD_CERT_MAX_ROWS]; /* each row's ||x~|| */
    int64_t groups;
    float *gmax;   /* [n_rows][groups]: each group's largest upper bound */
    float *glo;    /* [n_rows][groups]: each group's largest lower bound (top-k runs; else NULL) */
    float *lo;     /* [nth][n_rows]: each thread's best lower bound */
    int32_t *bad;  /* [nth]: a bound that was not finite */
    int32_t *cand; /* [groups]: the candidate groups, ascending */
    int32_t *mask; /* [groups]: bit r set where cand[i] is one for row r (greedy runs) */
    int32_t *kept; /* [groups]: nonzero where a top-k run's keep tokens are */
    int64_t n_cand;
    _Atomic int64_t next;
};

/* The bounds, in chunks of whole pieces as head_job_run takes them (a
 * group's bounds have their own place, a row's best lower bound is a
 * maximum: the order does not matter). */
static void cert_bounds_run(void *ctx, int ith, int nth) {
    struct cert_job *cj = ctx;
    const struct mm_job *j = &cj->h->mm;
    const struct sd_weight *w = j->w[0];
    const int64_t n_out = w->n_out, units = cj->groups,
                  chunk = chunk_units(units, nth, SD_FWD_HEAD_PIECE / 16);
    float *lo = cj->lo + (size_t)ith * (size_t)j->n_rows;
    float *p = cj->h->pieces + (size_t)ith * (size_t)j->n_rows * PIECE_STRIDE;
    bool ok = true;
    for (int32_t r = 0; r < j->n_rows; r++)
        lo[r] = -INFINITY;
    for (int64_t u, ue; sd_ranges_take(j->ranges, ith, nth, chunk, &u, &ue);) {
        const int64_t ce = SD_MIN(ue * 16, n_out);
        for (int64_t a = u * 16; a < ce; a += SD_FWD_HEAD_PIECE) {
            const int64_t b = SD_MIN(a + SD_FWD_HEAD_PIECE, ce);
            sd_cert_matmul(w->type, w->cert, n_out, w->n_in, j->xq[0], j->xq_row[0], j->n_rows, p,
                           PIECE_STRIDE, a, b);
            for (int32_t r = 0; r < j->n_rows; r++) {
                const size_t g = (size_t)r * (size_t)cj->groups + (size_t)(a / 16);
                ok &= sd_cert_scan(p + (size_t)r * PIECE_STRIDE, cj->c + a, cj->xn[r], b - a, &lo[r], cj->gmax + g,
                                   cj->glo ? cj->glo + g : NULL);
                if (cj->glo) /* a top-k run's logits: what no candidate group overwrites stays -infinity */
                    for (int64_t o = a; o < b; o++) j->y[0][(size_t)r * (size_t)n_out + (size_t)o] = -INFINITY;
            }
        }
    }
    cj->bad[ith] = !ok;
}

/* Columns [lo, hi) of the head for the rows of mask, each run of
 * consecutive rows as one product (head_piece_rows). */
static const float *head_piece_mask(const struct head_job *h, int ith, int64_t lo, int64_t hi,
                                    uint32_t mask) {
    const float *p = NULL;
    for (int32_t r = 0; r < h->mm.n_rows;) {
        if (!(mask >> r & 1)) {
            r++;
            continue;
        }
        int32_t e = r;
        while (e < h->mm.n_rows && mask >> e & 1)
            e++;
        p = head_piece_rows(h, ith, lo, hi, r, e);
        r = e;
    }
    return p;
}

/* The exact head over the candidate groups, each thread's in ascending
 * order, so its running argmax scans them as one vector. A group is
 * computed for the rows it is a candidate for alone: past a rejected draft
 * token a row is often unsure (the 0.5B, 8 rows: one row's 764 candidate
 * groups against 1-25 for the others), and its groups computed for all 8
 * rows cost 0.9 ms of the pass. */
static void cert_exact_run(void *ctx, int ith, int nth) {
    struct cert_job *cj = ctx;
    const struct head_job *h = cj->h;
    const int64_t n_out = h->mm.w[0]->n_out, chunk = SD_MAX(1, cj->n_cand / (4 * (int64_t)nth));
    struct sd_amax *a = h->amax + (size_t)ith * (size_t)h->mm.n_rows;
    for (int32_t r = 0; r < h->mm.n_rows; r++)
        sd_amax_init(&a[r]);
    for (int64_t u; take_chunk(&cj->next, cj->n_cand, chunk, &u);) {
        for (int64_t k = u; k < SD_MIN(u + chunk, cj->n_cand); k++) {
            const int64_t lo = (int64_t)cj->cand[k] * 16, hi = SD_MIN(lo + 16, n_out);
            const uint32_t mask = (uint32_t)cj->mask[k];
            const float *y = head_piece_mask(h, ith, lo, hi, mask);
            for (int32_t r = 0; r < h->mm.n_rows; r++)
                if (mask >> r & 1) sd_amax_scan(&a[r], y + (size_t)r * PIECE_STRIDE, hi - lo, lo);
        }
    }
}

/* The groups with an output whose upper bound reaches its row's best
 * lower bound; false where a bound was not finite. */
static bool cert_candidates(struct cert_job *cj, int nth) {
    const int32_t n_rows = cj->h->mm.n_rows;
    float best[SD_CERT_MAX_ROWS];
    for (int t = 0; t < nth; t++)
        if (cj->bad[t]) return false;
    for (int32_t r = 0; r < n_rows; r++) {
        best[r] = -INFINITY;
        for (int t = 0; t < nth; t++)
            best[r] = SD_MAX(best[r], cj->lo[(size_t)t * (size_t)n_rows + (size_t)r]);
    }
    cj->n_cand = 0;
    for (int64_t g = 0; g < cj->groups; g++) {
        uint32_t mask = 0;
        for (int32_t r = 0; r < n_rows; r++)
            mask |= (uint32_t)(cj->gmax[(size_t)r * (size_t)cj->groups + (size_t)g] >= best[r]) << r;
        if (mask) {
            cj->mask[cj->n_cand] = (int32_t)mask;
            cj->cand[cj->n_cand++] = (int32_t)g;
        }
    }
    return true;
}

/* The job over h's certificate, its scratch laid out after the pieces;
 * false where the head has none or a row's norm is not finite. */
static bool cert_setup(struct head_job *h, int nth, bool topk, struct cert_job *cj) {
    const struct mm_job *j = &h->mm;
    const struct sd_weight *w = j->w[0];
    if (!w->cert || !h->pieces || j->n_rows > sd_cert_max_rows(w->type)) return false;
    *cj = (struct cert_job){
        .h = h, .c = sd_cert_margins(w->type, w->cert, w->n_out, w->n_in), .groups = (w->n_out + 15) / 16};
    for (int32_t r = 0; r < j->n_rows; r++) {
        cj->xn[r] = sd_cert_act_norm(w->type, (const uint8_t *)j->xq[0] + (size_t)r * j->xq_row[0], w->n_in);
        if (!isfinite(cj->xn[r])) return false;
    }
    const size_t rg = (size_t)j->n_rows * (size_t)cj->groups, tr = (size_t)nth * (size_t)j->n_rows;
    cj->gmax = h->pieces + (size_t)nth * (size_t)j->n_rows * PIECE_STRIDE;
    cj->glo = topk ? cj->gmax + rg : NULL;
    cj->lo = cj->gmax + 2 * rg;
    cj->bad = (int32_t *)(void *)(cj->lo + tr);
    cj->cand = cj->bad + tr;
    cj->mask = cj->cand + cj->groups;
    cj->kept = cj->mask + cj->groups;
    return true;
}

bool sd_head_certified(struct head_job *h, struct sd_pool *pool) {
    const int nth = sd_pool_n_threads(pool);
    struct cert_job cj;
    if (!cert_setup(h, nth, false, &cj)) return false;
    sd_ranges_init(h->mm.ranges, nth, cj.groups);
    sd_pool_run(pool, cert_bounds_run, &cj);
    if (!cert_candidates(&cj, nth)) return false;
    atomic_store_explicit(&cj.next, 0, memory_order_relaxed);
    sd_pool_run(pool, cert_exact_run, &cj);
    return true;
}

/* The k-th largest of v[g] over the groups not kept, from a min-heap of
 * the k largest; -infinity where fewer than k groups are not kept. */
static float kth_largest(const float *v, const int32_t *kept, int64_t groups, int32_t k, float *heap) {
    int32_t n = 0;
    for (int64_t g = 0; g < groups; g++) {
        if (kept[g]) continue;
        float x = v[g];
        if (n < k) { /* sift up */
            int32_t i = n++;
            for (; i > 0 && heap[(i - 1) / 2] > x; i = (i - 1) / 2) heap[i] = heap[(i - 1) / 2];
            heap[i] = x;
        } else if (x > heap[0]) { /* replace the smallest, sift down */
            int32_t i = 0;
            for (;;) {
                int32_t l = 2 * i + 1, m = i;
                float mv = x;
                if (l < k && heap[l] < mv) m = l, mv = heap[l];
                if (l + 1 < k && heap[l + 1] < mv) m = l + 1;
                if (m == i) break;
                heap[i] = heap[m];
                i = m;
            }
            heap[i] = x;
        }
    }
    return n < k ? -INFINITY : heap[0];
}

/* A top-k run's candidate groups: each row's k-th largest group lower
 * bound among the groups without keep tokens is reached by k tokens whose
 * logits no penalty changes, so a token below it in every row is in no
 * row's k best; the keep tokens' groups are computed whole. False where a
 * bound was not finite or fewer than k groups are left. */
static bool topk_candidates(struct cert_job *cj, int nth, int32_t k, const int32_t *keep, int32_t n_keep) {
    const int32_t n_rows = cj->h->mm.n_rows;
    const int64_t n_out = cj->h->mm.w[0]->n_out;
    float T[SD_CERT_MAX_ROWS], heap[SD_CERT_MAX_TOPK];
    for (int t = 0; t < nth; t++)
        if (cj->bad[t]) return false;
    memset(cj->kept, 0, (size_t)cj->groups * sizeof *cj->kept);
    for (int32_t i = 0; i < n_keep; i++)
        if (keep[i] >= 0 && keep[i] < n_out) cj->kept[keep[i] / 16] = 1;
    for (int32_t r = 0; r < n_rows; r++) {
        T[r] = kth_largest(cj->glo + (size_t)r * (size_t)cj->groups, cj->kept, cj->groups, k, heap);
        if (T[r] == -INFINITY) return false;
    }
    cj->n_cand = 0;
    for (int64_t g = 0; g < cj->groups; g++) {
        bool in = cj->kept[g] != 0;
        for (int32_t r = 0; r < n_rows; r++) in |= cj->gmax[(size_t)r * (size_t)cj->groups + (size_t)g] >= T[r];
        if (in) cj->cand[cj->n_cand++] = (int32_t)g;
    }
    return true;
}

/* The exact logits of the candidate groups, every row, into the job's y. */
static void topk_exact_run(void *ctx, int ith, int nth) {
    struct cert_job *cj = ctx;
    (void)ith;
    const int64_t n_out = cj->h->mm.w[0]->n_out, chunk = SD_MAX(1, cj->n_cand / (4 * (int64_t)nth));
    for (int64_t u; take_chunk(&cj->next, cj->n_cand, chunk, &u);)
        for (int64_t i = u; i < SD_MIN(u + chunk, cj->n_cand); i++) {
            const int64_t lo = (int64_t)cj->cand[i] * 16;
            mm_cols(&cj->h->mm, 0, lo, SD_MIN(lo + 16, n_out));
        }
}

bool sd_head_topk(struct head_job *h, struct sd_pool *pool, int32_t k, const int32_t *keep, int32_t n_keep) {
    const int nth = sd_pool_n_threads(pool);
    struct cert_job cj;
    if (k <= 0 || k > SD_CERT_MAX_TOPK || !cert_setup(h, nth, true, &cj)) return false;
    sd_ranges_init(h->mm.ranges, nth, cj.groups);
    sd_pool_run(pool, cert_bounds_run, &cj);
    if (!topk_candidates(&cj, nth, k, keep, n_keep)) return false;
    atomic_store_explicit(&cj.next, 0, memory_order_relaxed);
    sd_pool_run(pool, topk_exact_run, &cj);
    return true;
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
    struct mm_job j = {.n = n, .n_rows = n_rows, .ranges = f->ranges};
    for (int i = 0; i < n; i++) {
        j.w[i] = w[i];
        j.y[i] = y[i];
        j.xq[i] = sd_prep_input(f, w[i], x, n_rows, &j.xq_row[i], &done);
    }
    sd_ranges_init(j.ranges, f->n_threads, (mm_total(&j) + 15) / 16);
    sd_pool_run(f->pool, mm_job_run, &j);
}
