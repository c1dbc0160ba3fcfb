/* graphs/matmul.c - matrix product over the dot-product tiles of
 * graphs/quant.h. The tiles carry the arithmetic and its fixed order; this
 * file only walks the output range in cache-friendly chunks. */
#include "matmul.h"

#include <assert.h>

/* Weight rows handed to one tile call: with the activation rows (at most a
 * few hundred KiB for a graph's L rows) they stay in L2 while every
 * activation row passes by, so each weight byte comes from memory once. */
#define SD_MATMUL_OUT_CHUNK 16

void sd_matmul(enum sd_type wtype, const void *w, size_t w_row_bytes, int64_t n_out, int64_t n_in,
               const void *xq, size_t xq_row_bytes, int64_t n_rows, float *y, int64_t out_begin,
               int64_t out_end) {
    assert(out_begin >= 0 && out_begin <= out_end && out_end <= n_out && n_rows >= 0);
    const uint8_t *wb = w;
    /* The AVX-512 kernels block the whole range themselves: they transpose
     * the activation rows once per call and reuse them for every weight row,
     * so they take the range in one piece. */
    if (n_rows >= 2 && out_end > out_begin && sd_quant_avx512_active() && sd_vec_dot_simd_ok(wtype) &&
        sd_vec_dot_tile_avx512(wtype, n_in, wb + (size_t)out_begin * w_row_bytes, w_row_bytes, out_end - out_begin,
                               xq, xq_row_bytes, n_rows, y + out_begin, (size_t)n_out)) {
        return;
    }
    for (int64_t o = out_begin; o < out_end; o += SD_MATMUL_OUT_CHUNK) {
        const int64_t cw = out_end - o < SD_MATMUL_OUT_CHUNK ? out_end - o : SD_MATMUL_OUT_CHUNK;
        /* A tile call takes int counts; rows go in chunks that fit. */
        for (int64_t r = 0; r < n_rows; r += 1 << 20) {
            const int64_t cx = n_rows - r < (1 << 20) ? n_rows - r : (1 << 20);
            sd_vec_dot_tile(wtype, n_in, wb + (size_t)o * w_row_bytes, w_row_bytes, (int)cw,
                            (const uint8_t *)xq + (size_t)r * xq_row_bytes, xq_row_bytes, (int)cx,
                            y + (size_t)r * (size_t)n_out + (size_t)o, (size_t)n_out);
        }
    }
}

bool sd_quantize_rows(enum sd_type vec_dot_type, const float *x, int64_t n_rows, int64_t n_in, void *xq) {
    size_t row_bytes;
    if (n_rows < 0 || !sd_row_size(vec_dot_type, n_in, &row_bytes)) return false;
    for (int64_t r = 0; r < n_rows; r++) {
        if (!sd_quantize_row(vec_dot_type, x + (size_t)r * (size_t)n_in, (uint8_t *)xq + (size_t)r * row_bytes, n_in)) {
            return false;
        }
    }
    return true;
}
