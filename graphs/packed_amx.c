/* graphs/packed_amx.c - AMX (Intel's tile unit) on the packed layout: the
 * probe and the tile program in scalar form (graphs/packed.h, "AMX").
 *
 * What runs here is the emulation: tdpbsud's arithmetic on the bytes the
 * tiles would hold, so that the layout's claim (the VNNI kernels' unpacked
 * step vectors are B tiles, prepared activation rows A tiles, and the
 * block sums come out exact at any row count; the K types' a sub-block at
 * a time, their scales and mins applied as the VNNI kernels apply them) is
 * tested on every machine with AVX-512. The tile kernels themselves are
 * not built yet: the machines these sessions ran on either had no AMX or
 * had it only before the probe existed, and a kernel nobody ran stays out
 * of the library. */
#define _GNU_SOURCE /* syscall */
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

enum sd_amx sd_amx_probe(void) {
    static int state = -1; /* probed once; a race only probes twice */
    int s = __atomic_load_n(&state, __ATOMIC_RELAXED);
    if (s < 0) {
        s = (int)sd_amx_probe_as(false);
        __atomic_store_n(&state, s, __ATOMIC_RELAXED);
    }
    return (enum sd_amx)s;
}

const char *sd_amx_desc(enum sd_amx a) {
    switch (a) {
    case SD_AMX_READY: return "AMX-INT8 granted (tile kernels not built: the VNNI kernels run)";
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
        sd_packed_unpack_q0_avx512(t, g + (size_t)b * V, B);
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
static void k_sub_tiles(enum sd_type t, const uint8_t *rec, int64_t b, size_t xc, const uint8_t *xq,
                        size_t xs, int M, float T[16][16]) {
    for (int j = 0; j < 8; j++) {
        _Alignas(64) uint8_t B[512];
        sd_packed_unpack_k_avx512(t, rec, j, B);
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
        k_sub_tiles(t, rec, b, SD_PK_K_CORR(n), xq, xs, M, T);
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
