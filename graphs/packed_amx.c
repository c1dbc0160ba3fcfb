/* graphs/packed_amx.c - AMX (Intel's tile unit) on the packed layout: the
 * probe and the tile program in scalar form (graphs/packed.h, "AMX").
 *
 * What runs here is the emulation: tdpbsud's arithmetic on the bytes the
 * tiles would hold, so that the layout's claim (the VNNI kernels' unpacked
 * step vectors are B tiles, prepared activation rows A tiles, and the
 * block sums come out exact at any row count; the K types' a sub-block at
 * a time, their scales and mins applied as the VNNI kernels apply them) is
 * tested on every machine with AVX-512; and the tile kernels themselves,
 * which run that program where AMX is granted (below, "tiles"). */
#define _GNU_SOURCE /* syscall */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "packed.h"

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#define SD_AMX_X86 1
#endif

/* ------------------------------------------------------------ probe */

#ifdef SD_AMX_X86
enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };

/* AMX-TILE and AMX-INT8 (cpuid leaf 7, EDX bits 24 and 25), and the tile
 * state enabled by the OS (XCR0 bits 17 and 18). */
static bool amx_in_cpu(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 25))) return false;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return false; /* OSXSAVE */
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & (3u << 17)) == (3u << 17);
}
#endif

enum sd_amx sd_amx_probe_as(bool refuse) {
#ifdef SD_AMX_X86
    if (!amx_in_cpu()) return SD_AMX_ABSENT;
    /* Without this request the first tile instruction raises SIGILL. */
    if (refuse || syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) return SD_AMX_REFUSED;
    return SD_AMX_READY;
#else
    (void)refuse;
    return SD_AMX_ABSENT;
#endif
}

static bool refusal_simulated;

enum sd_amx sd_amx_probe(void) {
    static int state = -1; /* probed once; a race only probes twice */
    int s = __atomic_load_n(&state, __ATOMIC_RELAXED);
    if (s < 0) {
        s = (int)sd_amx_probe_as(false);
        __atomic_store_n(&state, s, __ATOMIC_RELAXED);
    }
    return s == SD_AMX_READY && refusal_simulated ? SD_AMX_REFUSED : (enum sd_amx)s;
}

enum sd_amx sd_amx_simulate_refusal(bool on) {
    refusal_simulated = on;
    return sd_amx_probe();
}

#define SD_AMX_STR(x) #x
#define SD_AMX_XSTR(x) SD_AMX_STR(x)
#define SD_AMX_ROWS_STR SD_AMX_XSTR(SD_AMX_MIN_ROWS)

const char *sd_amx_desc(enum sd_amx a) {
    switch (a) {
    case SD_AMX_READY:
        return sd_packed_amx_active() ? "AMX-INT8 granted: passes of " SD_AMX_ROWS_STR
                                        " rows or more run on the tiles (SDNPU_AMX=0: off)"
                                      : "AMX-INT8 granted, tiles off (the VNNI kernels run)";
    case SD_AMX_REFUSED: return "AMX-INT8 present, tile data refused by the kernel (the VNNI kernels run)";
    default: return "no AMX";
    }
}

/* ------------------------------------------------------------ emulation */

void sd_amx_dpbsud_ref(int32_t C[16][16], const int8_t *A, size_t lda, int M, const uint8_t *B, int K) {
    for (int m = 0; m < M; m++)
        for (int n = 0; n < 16; n++) {
            int32_t s = C[m][n];
            for (int k = 0; k < K; k++) s += (int32_t)A[(size_t)m * lda + (size_t)k] * (int32_t)B[64 * (k / 4) + 4 * n + k % 4];
            C[m][n] = s;
        }
}

/* Rows [0, M) (M <= 16) of a 32-value group: per block, B is the eight
 * unpacked step vectors, A the rows' 32 bytes of the block, C their exact
 * sums; then each row's offset term and the reference's float step. */
static void q0_tiles(enum sd_type t, const uint8_t *g, int64_t n, const uint8_t *xq, size_t xs, int M, float *acc) {
    const int64_t nb = n / SD_QK;
    const size_t V = SD_PK_Q0_REC(t);
    const int32_t off = SD_PK_Q0_OFF(t);
    float a[16][16] = {{0}};
    for (int64_t b = 0; b < nb; b++) {
        _Alignas(64) uint8_t B[512];
        int32_t C[16][16] = {{0}};
        sd_packed_unpack_avx512(t, false, g, b, b + 1, B);
        sd_amx_dpbsud_ref(C, (const int8_t *)xq + 32 * b, xs, M, B, 32);
        for (int m = 0; m < M; m++) {
            const uint8_t *x = xq + (size_t)m * xs;
            const float dx = sd_pk_f32(x + n + 4 * b);
            const int32_t corr = off * sd_pk_i32(x + n + 4 * nb + 4 * b);
            for (int c = 0; c < SD_PK_COLS; c++) {
                uint16_t h;
                memcpy(&h, g + (size_t)nb * V + 2 * (size_t)(b * SD_PK_COLS + c), 2);
                a[m][c] = fmaf((float)(C[m][c] - corr), sd_fp16_to_fp32(h) * dx, a[m][c]);
            }
        }
    }
    for (int m = 0; m < M; m++) memcpy(acc + 16 * m, a[m], sizeof a[m]);
}

/* One K super-block's C tiles: per sub-block j (q6_K: per half, its
 * activation-sum correction first) the exact sums, scaled into T in the
 * VNNI kernels' float order. */
static void k_sub_tiles(enum sd_type t, const uint8_t *g, int64_t b, size_t xc, const uint8_t *xq, size_t xs,
                        int M, float T[16][16]) {
    const uint8_t *rec = g + (size_t)b * SD_PK_K_REC(t);
    _Alignas(64) uint8_t U[4096];
    sd_packed_unpack_avx512(t, false, g, b, b + 1, U);
    for (int j = 0; j < 8; j++) {
        const uint8_t *B = U + 512 * j;
        for (int half = 0; half < (t == SD_TYPE_Q6_K ? 2 : 1); half++) {
            int32_t C[16][16] = {{0}};
            if (t == SD_TYPE_Q6_K)
                for (int m = 0; m < M; m++)
                    for (int c = 0; c < SD_PK_COLS; c++)
                        C[m][c] = sd_pk_i32(xq + (size_t)m * xs + xc + 4 * (size_t)(16 * b + 2 * j + half));
            const int K = t == SD_TYPE_Q6_K ? 16 : 32;
            sd_amx_dpbsud_ref(C, (const int8_t *)xq + 256 * b + 32 * j + 16 * half, xs, M, B + 256 * half, K);
            for (int c = 0; c < SD_PK_COLS; c++) {
                const float sc = t == SD_TYPE_Q6_K
                                     ? (float)(int8_t)rec[SD_PK_K_SC(t) + 32 * j + 16 * half + c]
                                     : (float)rec[SD_PK_K_SC(t) + 16 * j + c];
                for (int m = 0; m < M; m++)
                    T[m][c] = fmaf((float)C[m][c], sc, T[m][c]);
            }
        }
    }
}

/* Rows [0, M) of a K group (q4_K, q5_K, q6_K), as q0_tiles; q4_K's and
 * q5_K's mins by a tile of the record's 8 x 16 mins (two 64-byte rows, as
 * the VNNI kernels read them) against each row's sub-block sums, whose low
 * and high bytes are two A tiles. */
static void k_tiles(enum sd_type t, const uint8_t *g, int64_t n, const uint8_t *xq, size_t xs, int M,
                    float *acc) {
    const int64_t nb = n / 256;
    const size_t xlo = SD_PK_K_LO(n), xhi = SD_PK_K_HI(n);
    float a[16][16] = {{0}};
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *rec = g + (size_t)b * SD_PK_K_REC(t);
        float T[16][16] = {{0}};
        k_sub_tiles(t, g, b, SD_PK_K_CORR(n), xq, xs, M, T);
        int32_t lo[16][16] = {{0}}, hi[16][16] = {{0}};
        if (t != SD_TYPE_Q6_K) {
            sd_amx_dpbsud_ref(lo, (const int8_t *)xq + xlo + 8 * b, xs, M, rec + SD_PK_K_M(t), 8);
            sd_amx_dpbsud_ref(hi, (const int8_t *)xq + xhi + 8 * b, xs, M, rec + SD_PK_K_M(t), 8);
        }
        float dw[SD_PK_COLS], dm[SD_PK_COLS]; /* the record's scales of the sums and of the mins */
        for (int c = 0; c < SD_PK_COLS; c++) {
            uint16_t h[2];
            memcpy(&h[0], rec + SD_PK_K_D(t) + 2 * c, 2);
            memcpy(&h[1], rec + SD_PK_K_D(t) + 32 + 2 * c, 2);
            dw[c] = sd_fp16_to_fp32(h[0]), dm[c] = sd_fp16_to_fp32(h[1]);
        }
        for (int m = 0; m < M; m++) {
            const float dx = sd_pk_f32(xq + (size_t)m * xs + n + 4 * b);
            for (int c = 0; c < SD_PK_COLS; c++) {
                a[m][c] = fmaf(T[m][c], dw[c] * dx, a[m][c]);
                if (t == SD_TYPE_Q6_K) continue;
                const int32_t mins = (int32_t)((uint32_t)lo[m][c] + ((uint32_t)hi[m][c] << 8));
                a[m][c] = fmaf(-(float)mins, dm[c] * dx, a[m][c]);
            }
        }
    }
    for (int m = 0; m < M; m++)
        memcpy(acc + 16 * m, a[m], sizeof a[m]);
}

bool sd_packed_group_amx_emul(enum sd_type t, const uint8_t *g, int64_t n_in, const uint8_t *xq, size_t xs,
                              int64_t n_rows, float *acc) {
    const bool q0 = t == SD_TYPE_Q4_0 || t == SD_TYPE_Q5_0 || t == SD_TYPE_Q8_0;
    const bool k = t == SD_TYPE_Q4_K || t == SD_TYPE_Q5_K || t == SD_TYPE_Q6_K;
    if ((!q0 && !k) || !sd_quant_avx512_active()) return false;
    if ((t == SD_TYPE_Q5_0 || t == SD_TYPE_Q5_K) && sd_packed_bits() == SD_PK_BITS_SLICED)
        return false; /* the AVX-512 unpack's masks */
    for (int64_t r = 0; r < n_rows; r += 16) {
        const int M = (int)SD_MIN(16, n_rows - r);
        if (q0)
            q0_tiles(t, g, n_in, xq + (size_t)r * xs, xs, M, acc + 16 * r);
        else
            k_tiles(t, g, n_in, xq + (size_t)r * xs, xs, M, acc + 16 * r);
    }
    return true;
}

/* ------------------------------------------------------------ tiles
 *
 * The tile program of the emulation above, run, for q4_0, q5_0, q8_0,
 * q4_K and q5_K. Per 32-value block (K sub-block) the unpacked step
 * vectors are a B tile, each sixteen rows' bytes of the block an A tile,
 * and one tile product gives their exact sums, stored to a window in L1
 * (C); the float step then reads C in the VNNI kernels' order. The 32-value
 * types' B tiles are signed (each value less its offset, once a block for
 * all rows), so tdpbssd gives the whole sum S_b and a row's step is a
 * conversion, a product of the scales and a fused multiply-add; the K
 * types scale each sub-block's sum into T, then d and the mins (by
 * vpdpbusd, once a super-block and row, as the VNNI kernels take them).
 *
 * What it gains is bounded by the order: the float step is per block, so
 * C leaves the tile unit every 32 values (a 16-row store is about as long
 * as the product), and the tile unit and the vector ports did not overlap
 * here (interleaved, the two took the sum of their times). Measured on
 * one thread (Xeon with AMX, stop 96): 1.1-1.3 times the VNNI kernels at
 * 32 and 64 rows, level at 16, slower below; hence SD_AMX_MIN_ROWS. */

#ifdef SD_AMX_X86
#include <immintrin.h>

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define TGT_INLINE                                                                                           \
    static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,"      \
                                                       "f16c")))

/* The tile instructions by number (GCC 12's intrinsics tell the compiler
 * of no memory they read or write; these do). */
#define TILE_LOAD(t, p, stride)                                                                              \
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"(p), "r"((long)(stride)) : "memory")
#define TILE_STORE(t, p, stride)                                                                             \
    __asm__ volatile("tilestored %%tmm" #t ", (%0,%1,1)" ::"r"(p), "r"((long)(stride)) : "memory")
#define TILE_ZERO(t) __asm__ volatile("tilezero %%tmm" #t ::)
#define TILE_DPBSUD(c, a, b) __asm__ volatile("tdpbsud %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)
#define TILE_DPBSSD(c, a, b) __asm__ volatile("tdpbssd %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)

/* ldtilecfg's 64 bytes, palette 1. */
struct tile_cfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

/* Tiles for passes of n_rows rows, a block's product over K = 32 bytes:
 * B, A and C of 16 rows (of n_rows, fewer), and where a pass of more has a
 * last tile of fewer, its A and C (2, 4). */
static void tiles_configure(int n_rows) {
    const int K = 32, full = SD_MIN(16, n_rows), last = n_rows > 16 ? n_rows % 16 : 0;
    struct tile_cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    c.rows[0] = (uint8_t)(K / 4), c.colsb[0] = 64;
    c.rows[1] = (uint8_t)full, c.colsb[1] = (uint16_t)K;
    c.rows[3] = (uint8_t)full, c.colsb[3] = 64;
    if (last) {
        c.rows[2] = (uint8_t)last, c.colsb[2] = (uint16_t)K;
        c.rows[4] = (uint8_t)last, c.colsb[4] = 64;
    }
    __asm__ volatile("ldtilecfg %0" ::"m"(c) : "memory");
}

/* One block's products for one row tile: B (64-byte rows at w, tile 0)
 * against the tile's activation rows' K bytes at a (row stride xs; tile
 * 1, or 2 where part: the last tile of a pass of more than 16 rows, fewer
 * than 16), C (tile 3, or 4) stored at c, 16 int32 a row. sgn: B signed
 * (tdpbssd), else unsigned (tdpbsud). Two sets of tiles taking blocks in
 * turn, so that one block's products need not wait for the store of the
 * one before, measured the same. */
#define TILE_PRODUCT(A, C)                                                                                   \
    do {                                                                                                     \
        TILE_LOAD(A, a, xs);                                                                                 \
        TILE_ZERO(C);                                                                                        \
        if (sgn)                                                                                             \
            TILE_DPBSSD(C, A, 0);                                                                            \
        else                                                                                                 \
            TILE_DPBSUD(C, A, 0);                                                                            \
        TILE_STORE(C, c, 64);                                                                                \
    } while (0)

static inline void tile_block(bool part, bool sgn, const uint8_t *w, const uint8_t *a, size_t xs,
                              int32_t *c) {
    TILE_LOAD(0, w, 64);
    if (part)
        TILE_PRODUCT(2, 4);
    else
        TILE_PRODUCT(1, 3);
}

/* One block (B at w) against m rows (K bytes at a) of a pass of nr rows
 * (m = nr, or a chunk of it ending the pass): C at c, 16 int32 a row. */
static inline void tile_rows(bool sgn, const uint8_t *w, const uint8_t *a, size_t xs, int m, int nr,
                             int32_t *c) {
    for (int r = 0; r < m; r += 16)
        tile_block(nr > 16 && m - r < 16, sgn, w, a + (size_t)r * xs, xs, c + 16 * r);
}

/* q0: R rows (a constant) over a window's blocks [b0, b1), C of block b
 * at c + 16 nr (b - b0), dw the blocks' weight scales as floats: the
 * accumulators in registers across the window, from 0 at block 0, else
 * from acc. C is the block's whole sum (B signed: no offset term). */
TGT_INLINE void q0_float(int R, const float *dw, int64_t b0, int64_t b1, int64_t n, const int32_t *c, int nr,
                         const uint8_t *x, size_t xs, float *acc) {
    __m512 a[4];
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
        a[i] = b0 == 0 ? _mm512_setzero_ps() : _mm512_load_ps(acc + 16 * i);
    for (int64_t b = b0; b < b1; b++) {
        const int32_t *cb = c + 16 * (size_t)nr * (size_t)(b - b0);
        const __m512 d = _mm512_load_ps(dw + 16 * (b - b0));
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) {
            const __m512 S = _mm512_cvtepi32_ps(_mm512_load_si512((const void *)(cb + 16 * i)));
            a[i] = _mm512_fmadd_ps(
                S, _mm512_mul_ps(d, _mm512_set1_ps(sd_pk_f32(x + (size_t)i * xs + n + 4 * b))), a[i]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
        _mm512_store_ps(acc + 16 * i, a[i]);
}

/* Blocks a window: C (16 nr int32 a block) within 16 KB. */
static int64_t q0_window(int nr) { return SD_MAX(1, SD_MIN(16, 256 / nr)); }

/* The window's B tiles signed: each unsigned value less the type's offset
 * (q8_0's records, its step vectors, read straight from the weights), so
 * that tdpbssd gives each block's whole sum S_b (packed.h), and the float
 * step has no offset term to add a row and block. */
TGT static void q0_signed_window(enum sd_type t, bool gfni, const uint8_t *g, int64_t b0, int64_t b1,
                                 uint8_t *u) {
    const size_t V = SD_PK_Q0_REC(t);
    if (t != SD_TYPE_Q8_0) sd_packed_unpack_avx512(t, gfni, g, b0, b1, u);
    const __m512i off = _mm512_set1_epi8((char)SD_PK_Q0_OFF(t));
    for (int64_t b = b0; b < b1; b++) {
        const uint8_t *src = t == SD_TYPE_Q8_0 ? g + (size_t)b * V : u + 512 * (size_t)(b - b0);
        if (t == SD_TYPE_Q8_0) sd_pk_prefetch(src, V, false);
        for (int v = 0; v < 8; v++) {
            const __m512i w = _mm512_loadu_si512((const void *)(src + 64 * v));
            _mm512_store_si512((void *)(u + 512 * (size_t)(b - b0) + 64 * v), _mm512_sub_epi8(w, off));
        }
    }
}

TGT static void q0_group(enum sd_type t, bool gfni, const uint8_t *g, int64_t n, const uint8_t *xq, size_t xs,
                         int nr, float *acc) {
    const int64_t nb = n / SD_QK, W = q0_window(nr);
    const size_t V = SD_PK_Q0_REC(t);
    _Alignas(64) uint8_t u[16 * 512];
    _Alignas(64) int32_t c[4096];
    _Alignas(64) float dw[16 * 16];
    for (int64_t b0 = 0; b0 < nb; b0 += W) {
        const int64_t b1 = SD_MIN(nb, b0 + W);
        q0_signed_window(t, gfni, g, b0, b1, u);
        for (int64_t b = b0; b < b1; b++) {
            tile_rows(true, u + 512 * (size_t)(b - b0), xq + 32 * b, xs, nr, nr,
                      c + 16 * (size_t)nr * (size_t)(b - b0));
            _mm512_store_ps(dw + 16 * (b - b0), _mm512_cvtph_ps(_mm256_loadu_si256(
                                                    (const __m256i *)(g + (size_t)nb * V + 32 * (size_t)b))));
        }
        int r = 0;
        for (; r + 4 <= nr; r += 4)
            q0_float(4, dw, b0, b1, n, c + 16 * r, nr, xq + (size_t)r * xs, xs, acc + 16 * r);
        for (; r < nr; r++)
            q0_float(1, dw, b0, b1, n, c + 16 * r, nr, xq + (size_t)r * xs, xs, acc + 16 * r);
    }
}

/* q4_K, q5_K: one super-block's float step for R rows (a constant): the
 * eight sub-blocks' C (at c + 16 nr j) scaled into T, then d and the
 * mins, into acc. */
TGT_INLINE void k_float(enum sd_type t, int R, const uint8_t *rec, int64_t b, int64_t n, const int32_t *c,
                        int nr, const uint8_t *x, size_t xs, float *acc) {
    __m512 sc[8], T[4];
    for (int j = 0; j < 8; j++)
        sc[j] = _mm512_cvtepi32_ps(
            _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(rec + SD_PK_K_SC(t) + 16 * j))));
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
        T[i] = _mm512_setzero_ps();
    for (int j = 0; j < 8; j++)
#pragma GCC unroll 4
        for (int i = 0; i < R; i++)
            T[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(
                                       (const void *)(c + 16 * ((size_t)nr * (size_t)j + (size_t)i)))),
                                   sc[j], T[i]);
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(rec + SD_PK_K_D(t))));
    const __m512 dm = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(rec + SD_PK_K_D(t) + 32)));
    const __m512i m0 = _mm512_loadu_si512((const void *)(rec + SD_PK_K_M(t)));
    const __m512i m1 = _mm512_loadu_si512((const void *)(rec + SD_PK_K_M(t) + 64));
#pragma GCC unroll 4
    for (int i = 0; i < R; i++) {
        const uint8_t *xi = x + (size_t)i * xs;
        const __m512 dx = _mm512_set1_ps(sd_pk_f32(xi + n + 4 * b));
        const uint8_t *lo = xi + SD_PK_K_LO(n) + 8 * b, *hi = xi + SD_PK_K_HI(n) + 8 * b;
        const __m512i z = _mm512_setzero_si512();
        const __m512i Ml = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(z, m0, _mm512_set1_epi32(sd_pk_i32(lo))),
                                               m1, _mm512_set1_epi32(sd_pk_i32(lo + 4)));
        const __m512i Mh = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(z, m0, _mm512_set1_epi32(sd_pk_i32(hi))),
                                               m1, _mm512_set1_epi32(sd_pk_i32(hi + 4)));
        const __m512i M = _mm512_add_epi32(Ml, _mm512_slli_epi32(Mh, 8));
        __m512 a = b == 0 ? _mm512_setzero_ps() : _mm512_load_ps(acc + 16 * i);
        a = _mm512_fmadd_ps(T[i], _mm512_mul_ps(dw, dx), a);
        a = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(M), _mm512_mul_ps(dm, dx), a);
        _mm512_store_ps(acc + 16 * i, a);
    }
}

/* Rows a K pass takes at once: C (8 sub-blocks of 16 int32 a row) within
 * 16 KB. */
#define K_ROWS 32

TGT static void k_group(enum sd_type t, bool gfni, const uint8_t *g, int64_t n, const uint8_t *xq, size_t xs,
                        int nr, float *acc) {
    const int64_t nb = n / 256;
    _Alignas(64) uint8_t u[4096];
    _Alignas(64) int32_t c[8 * K_ROWS * 16];
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *rec = g + (size_t)b * SD_PK_K_REC(t);
        sd_packed_unpack_avx512(t, gfni, g, b, b + 1, u);
        for (int r0 = 0; r0 < nr; r0 += K_ROWS) {
            const int m = SD_MIN(K_ROWS, nr - r0);
            const uint8_t *x = xq + (size_t)r0 * xs;
            for (int j = 0; j < 8; j++)
                tile_rows(false, u + 512 * j, x + 256 * b + 32 * j, xs, m, nr, c + 16 * m * j);
            int r = 0;
            for (; r + 4 <= m; r += 4)
                k_float(t, 4, rec, b, n, c + 16 * r, m, x + (size_t)r * xs, xs, acc + 16 * (r0 + r));
            for (; r < m; r++)
                k_float(t, 1, rec, b, n, c + 16 * r, m, x + (size_t)r * xs, xs, acc + 16 * (r0 + r));
        }
    }
}

/* q6_K is not among them: its sixteen scales a super-block make a tile
 * product of K = 16 and a store of C per 16 values, which measured twice
 * the VNNI kernels' time (docs/benchmarks.md, "Stop 96"). */
static bool tile_type(enum sd_type t) {
    return t == SD_TYPE_Q4_0 || t == SD_TYPE_Q5_0 || t == SD_TYPE_Q8_0 || t == SD_TYPE_Q4_K ||
           t == SD_TYPE_Q5_K;
}

void sd_packed_group_amx(enum sd_type t, const uint8_t *g, int64_t n_in, const uint8_t *xq, size_t xs,
                         int64_t n_rows, float *acc) {
    const bool gfni = sd_quant_gfni_active();
    if (t == SD_TYPE_Q4_K || t == SD_TYPE_Q5_K)
        k_group(t, gfni, g, n_in, xq, xs, (int)n_rows, acc);
    else
        q0_group(t, gfni, g, n_in, xq, xs, (int)n_rows, acc);
}
#endif /* SD_AMX_X86 */

static int amx_on = -1; /* -1: not yet asked: the environment decides */
static uint64_t amx_passes;

bool sd_packed_set_amx(bool on) {
    amx_on = on;
    return sd_packed_amx_active();
}

bool sd_packed_amx_active(void) {
    int on = __atomic_load_n(&amx_on, __ATOMIC_RELAXED);
    if (on < 0) {
        const char *e = getenv("SDNPU_AMX");
        on = !(e && (!strcmp(e, "0") || !strcmp(e, "off")));
        __atomic_store_n(&amx_on, on, __ATOMIC_RELAXED);
    }
    return on && sd_quant_avx512_active() && sd_amx_probe() == SD_AMX_READY;
}

uint64_t sd_packed_amx_passes(void) { return __atomic_load_n(&amx_passes, __ATOMIC_RELAXED); }

bool sd_packed_amx_begin(enum sd_type t, int64_t n_rows) {
#ifdef SD_AMX_X86
    /* The AVX-512 unpack reads q5's fifth bits as masks only. */
    const bool sliced = (t == SD_TYPE_Q5_0 || t == SD_TYPE_Q5_K) && sd_packed_bits() == SD_PK_BITS_SLICED;
    if (n_rows < SD_AMX_MIN_ROWS || n_rows > 64 || !tile_type(t) || sliced || !sd_packed_amx_active())
        return false;
    tiles_configure((int)n_rows);
    __atomic_fetch_add(&amx_passes, 1, __ATOMIC_RELAXED);
    return true;
#else
    (void)t, (void)n_rows;
    return false;
#endif
}

void sd_packed_amx_end(void) {
#ifdef SD_AMX_X86
    __asm__ volatile("tilerelease" ::);
#endif
}

#ifndef SD_AMX_X86
void sd_packed_group_amx(enum sd_type t, const uint8_t *g, int64_t n_in, const uint8_t *xq, size_t xs,
                         int64_t n_rows, float *acc) {
    (void)t, (void)g, (void)n_in, (void)xq, (void)xs, (void)n_rows, (void)acc;
}
#endif
