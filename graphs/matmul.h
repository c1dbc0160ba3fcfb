/*
 * graphs/matmul.h - the matrix product the CPU forward pass calls:
 * quantized weight rows times quantized activation rows.
 *
 * Batch invariance: y[r][o] is bit-identical to
 * sd_vec_dot(wtype, n_in, weight row o, activation row r) with the same
 * implementation (see graphs/quant.h), whatever n_rows is, where row r sits
 * and how the caller splits [out_begin, out_end) among threads. The kernels
 * only share the unpacking of weights between activation rows (tiles of 4
 * weight rows x 8 activation rows in the AVX2 implementation; with AVX-512
 * VNNI, activation rows transposed once per call into groups of eight, one
 * row per vector lane, or for q4_K and q6_K tiles of 4 x 16), never the
 * arithmetic of an output.
 */
#ifndef SD_MATMUL_H
#define SD_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "quant.h"

/* y[r * n_out + o] = dot(weight row o, activation row r) for every
 * r < n_rows and o in [out_begin, out_end); other entries of y are not
 * touched, so threads may share y with disjoint output ranges.
 *   w:  n_out rows of n_in elements of wtype, row o at w + o * w_row_bytes
 *   xq: n_rows rows already in sd_type_get(wtype)->vec_dot_type (made by
 *       sd_quantize_rows), row r at xq + r * xq_row_bytes
 *   y:  [n_rows][n_out] floats
 * n_in must be a whole number of wtype blocks and wtype must have
 * can_compute; these are programmer errors (asserted), as the model loader
 * checks them. Thread-safe: reads w and xq, writes only its part of y. */
void sd_matmul(enum sd_type wtype, const void *w, size_t w_row_bytes, int64_t n_out, int64_t n_in,
               const void *xq, size_t xq_row_bytes, int64_t n_rows, float *y, int64_t out_begin,
               int64_t out_end);

/* Quantize n_rows rows of n_in floats (row r at x + r * n_in) to
 * vec_dot_type, row r at xq + r * row_size(vec_dot_type, n_in) (see
 * sd_row_size). Each row is quantized on its own, so a row's bytes never
 * depend on the batch. Returns false (writing nothing) if the type cannot be
 * quantized or n_in is not a whole number of its blocks. */
bool sd_quantize_rows(enum sd_type vec_dot_type, const float *x, int64_t n_rows, int64_t n_in, void *xq);

#endif /* SD_MATMUL_H */
