/* graphs/quant.c - the entry points of graphs/quant.h: the run-time choice
 * between the scalar reference (quant_dequant.c, quant_quantize.c,
 * quant_dot.c), the AVX2 kernels (quant_avx2*.c) and, within AVX2, the
 * AVX-512 tiles (quant_avx512.c), and the dispatch of each call by element
 * type.
 *
 * Every implementation keeps the reduction order that graphs/quant.h
 * documents, so the choice changes speed, never results. */
#include <assert.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>

#include "base/base.h"
#include "quant.h"
#include "quant_ref.h"


_Static_assert(sizeof(struct sd_block_q4_0) == 18, "q4_0 layout");
_Static_assert(sizeof(struct sd_block_q4_1) == 20, "q4_1 layout");
_Static_assert(sizeof(struct sd_block_q5_0) == 22, "q5_0 layout");
_Static_assert(sizeof(struct sd_block_q5_1) == 24, "q5_1 layout");
_Static_assert(sizeof(struct sd_block_q8_0) == 34, "q8_0 layout");
_Static_assert(sizeof(struct sd_block_q8_1) == 36, "q8_1 layout");
_Static_assert(sizeof(struct sd_block_q4_K) == 144, "q4_K layout");
_Static_assert(sizeof(struct sd_block_q5_K) == 176, "q5_K layout");
_Static_assert(sizeof(struct sd_block_q6_K) == 210, "q6_K layout");
_Static_assert(sizeof(struct sd_block_q8_K) == 292, "q8_K layout");

/* ------------------------------------------------------------- tables */

struct kernels {
    sd_dequant_fn dequant;
    sd_quant_fn quant;
    sd_dot_fn dot;
};

/* The scalar kernels of a type, all NULL for a type out of range. Each
 * operation's table sits with its kernels (quant_ref.h). */
static struct kernels kernels_of(int type) {
    if (type < 0 || type >= SD_TYPE_COUNT) return (struct kernels){0};
    return (struct kernels){sd_ref_dequant[type], sd_ref_quant[type], sd_ref_dot[type]};
}

/* -------------------------------------------------------- dispatching */

/* SD_IMPL_AUTO until first resolved; an atomic so that threads calling into
 * the kernels concurrently with the first resolution see a whole value. */
static atomic_int g_impl = SD_IMPL_AUTO;

static enum sd_quant_impl resolve(enum sd_quant_impl want) {
    if (want == SD_IMPL_SCALAR) return SD_IMPL_SCALAR;
    return sd_quant_avx2_supported() ? SD_IMPL_AVX2 : SD_IMPL_SCALAR;
}

enum sd_quant_impl sd_quant_set_impl(enum sd_quant_impl impl) {
    enum sd_quant_impl r = resolve(impl);
    atomic_store_explicit(&g_impl, (int)r, memory_order_relaxed);
    return r;
}

enum sd_quant_impl sd_quant_get_impl(void) {
    int v = atomic_load_explicit(&g_impl, memory_order_relaxed);
    if (v == SD_IMPL_AUTO) {
        v = (int)resolve(SD_IMPL_AUTO);
        atomic_store_explicit(&g_impl, v, memory_order_relaxed);
    }
    return (enum sd_quant_impl)v;
}

/* A CPU feature the AVX2 implementation may use: -1 until first
 * resolved, then 0 or 1; an atomic for the reason above. */
static atomic_int g_avx512 = -1, g_avxvnni = -1, g_gfni = -1;

static bool feature_set(atomic_int *f, bool on, bool (*supported)(void)) {
    const bool r = on && supported();
    atomic_store_explicit(f, r ? 1 : 0, memory_order_relaxed);
    return r;
}

static bool feature_on(atomic_int *f, bool (*supported)(void)) {
    int v = atomic_load_explicit(f, memory_order_relaxed);
    if (v < 0) {
        v = supported() ? 1 : 0;
        atomic_store_explicit(f, v, memory_order_relaxed);
    }
    return v == 1;
}

bool sd_quant_set_avx512(bool on) { return feature_set(&g_avx512, on, sd_quant_avx512_supported); }

bool sd_quant_avx512_active(void) {
    return sd_quant_get_impl() == SD_IMPL_AVX2 && feature_on(&g_avx512, sd_quant_avx512_supported);
}

bool sd_quant_set_avxvnni(bool on) { return feature_set(&g_avxvnni, on, sd_quant_avxvnni_supported); }

bool sd_quant_avxvnni_active(void) {
    return sd_quant_get_impl() == SD_IMPL_AVX2 && !sd_quant_avx512_active() &&
           feature_on(&g_avxvnni, sd_quant_avxvnni_supported);
}

bool sd_quant_set_gfni(bool on) { return feature_set(&g_gfni, on, sd_quant_gfni_supported); }

bool sd_quant_gfni_active(void) {
    return (sd_quant_avx512_active() || sd_quant_avxvnni_active()) &&
           feature_on(&g_gfni, sd_quant_gfni_supported);
}

void sd_dequantize_row(enum sd_type type, const void *src, float *dst, int64_t n) {
    const struct kernels k = kernels_of(type);
    const struct sd_type_traits *t = sd_type_get(type);
    assert(k.dequant && t && n % t->blck_size == 0);
    if (!k.dequant || !t || n % t->blck_size != 0) return;
    k.dequant(src, dst, n);
}

bool sd_quantize_row(enum sd_type type, const float *src, void *dst, int64_t n) {
    const struct kernels k = kernels_of(type);
    const struct sd_type_traits *t = sd_type_get(type);
    if (!k.quant || !t || n < 0 || n % t->blck_size != 0) return false;
    if (sd_quant_get_impl() == SD_IMPL_AVX2 && sd_quantize_row_avx2(type, src, dst, n)) return true;
    k.quant(src, dst, n);
    return true;
}

float sd_vec_dot(enum sd_type wtype, int64_t n, const void *w, const void *xq) {
    float y = NAN;
    sd_vec_dot_tile(wtype, n, w, 0, 1, xq, 0, 1, &y, 0);
    return y;
}

/* The SIMD tiles of q4_1/q5_1 do not give the scalar kernels' bits (their
 * rewrite in ggml's vec_dot order was lost in a merge): the scalar kernels
 * take them. */
bool sd_vec_dot_simd_ok(enum sd_type wtype) {
    return wtype != SD_TYPE_Q4_1 && wtype != SD_TYPE_Q5_1;
}

void sd_vec_dot_tile(enum sd_type wtype, int64_t n, const void *w, size_t w_stride, int nw,
                     const void *xq, size_t x_stride, int nx, float *y, size_t y_stride) {
    const struct kernels k = kernels_of(wtype);
    const struct sd_type_traits *t = sd_type_get(wtype);
    /* Programmer errors: the model loader only admits types with
     * can_compute, and row lengths that are whole blocks. */
    assert(k.dot && t && n >= 0 && n % t->blck_size == 0);
    if (!k.dot || !t || n < 0 || n % t->blck_size != 0) {
        for (int r = 0; r < nx; r++) {
            for (int i = 0; i < nw; i++) y[(size_t)r * y_stride + (size_t)i] = NAN;
        }
        return;
    }
    const bool simd_ok = sd_vec_dot_simd_ok(wtype);
    /* One activation row gains nothing from the AVX-512 layout (it fills
     * one lane of eight); the AVX2 tiles take it. */
    if (simd_ok && nx >= 2 && sd_quant_avx512_active() &&
        sd_vec_dot_tile_avx512(wtype, n, w, w_stride, nw, xq, x_stride, nx, y, y_stride)) {
        return;
    }
    if (simd_ok && sd_quant_get_impl() == SD_IMPL_AVX2 &&
        sd_vec_dot_tile_avx2(wtype, n, w, w_stride, nw, xq, x_stride, nx, y, y_stride)) {
        return;
    }
    const uint8_t *wb = w, *xb = xq;
    for (int r = 0; r < nx; r++) {
        for (int i = 0; i < nw; i++) {
            y[(size_t)r * y_stride + (size_t)i] = k.dot(n, wb + (size_t)i * w_stride, xb + (size_t)r * x_stride);
        }
    }
}
