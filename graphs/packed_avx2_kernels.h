/* graphs/packed_avx2_kernels.h - the AVX2 integer group kernels of
 * graphs/packed_avx2.c, compiled twice: packed_avx2.c includes them
 * without GFNI (for AVX2 alone and with AVX-VNNI), packed_avx2_gfni.c with
 * it (SD_PK_GF 1, for AVX-VNNI with GFNI: Intel's client cores from Alder
 * Lake on, the laptops without AVX-512), as graphs/packed_avx512_kernels.h
 * is and for its reasons. Each includer defines TGT, TGT_INLINE and
 * SD_PK_GF first.
 *
 * Internal to graphs/packed_avx2*.c. */
#ifndef SD_GRAPHS_PACKED_AVX2_KERNELS_H
#define SD_GRAPHS_PACKED_AVX2_KERNELS_H

#include <immintrin.h>
#include <string.h>

#include "base/base.h"
#include "packed.h"

#if !defined(TGT) || !defined(TGT_INLINE) || !defined(SD_PK_GF)
#error "define TGT, TGT_INLINE and SD_PK_GF before including packed_avx2_kernels.h"
#endif

TGT_INLINE __m256i ld(const uint8_t *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* The 32 bytes at p, loaded here on every call. GCC keeps the unpacking's
 * constants in registers through the row loop that follows it, and with
 * AVX2's sixteen the row loop then spills the weights it multiplies: q5_0
 * lost three loads a row and half block to spills, q4_0 three (llvm-mca
 * on Zen 3: 9 and 8.5 cycles a row and half block, 6.5 and 7 with the
 * constants loaded at the unpacking). The asm hides p's value, so the
 * load is neither hoisted out of the block loop nor kept in a register.
 * The K-quants' row loops keep the nibble mask a constant: loaded there,
 * it made GCC spill two of q4_K's weights instead. */
TGT_INLINE __m256i konst(const void *p) {
    __asm__ volatile("" : "+r"(p));
    return _mm256_loadu_si256((const __m256i *)p);
}

/* 15 in every byte: the low nibble's mask. */
static const uint8_t SD_PK_M4[32] = {15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15,
                                     15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15};

/* Half h of four nibble vectors -> the eight steps' values, m4 15 in every
 * byte (with GFNI the high nibbles in one vgf2p8affineqb each, where a
 * shift and a mask were two). */
TGT_INLINE void unpack_nib(const uint8_t *p, int h, __m256i m4, __m256i w[8]) {
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        const __m256i v = ld(p + 64 * i + 32 * h);
        w[i] = _mm256_and_si256(v, m4);
#if SD_PK_GF
        w[i + 4] = _mm256_gf2p8affine_epi64_epi8(v, _mm256_set1_epi64x(SD_PK_GF_HI), 0);
#else
        w[i + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
#endif
    }
}

/* add_bit4's constants, loaded once a call (konst): a byte shuffle of the
 * mask, the bit j % 8 of each byte j and, without GFNI, 16 in every byte. */
static const uint64_t SD_PK_BITS[4] = {0x8040201008040201ULL, 0x8040201008040201ULL, 0x8040201008040201ULL,
                                       0x8040201008040201ULL};

struct bit4_k {
    __m256i shuf, bits, sixteen;
};

#if SD_PK_GF
/* The shuffle that puts byte q of a mask in byte 3 of qword q: the
 * affine matrix's row of result bit 4. */
static const int8_t SD_PK_TO_ROW4[32] = {-1, -1, -1, 0, -1, -1, -1, -1, -1, -1, -1, 1, -1, -1, -1, -1,
                                         -1, -1, -1, 2, -1, -1, -1, -1, -1, -1, -1, 3, -1, -1, -1, -1};

/* 16 in byte j where bit j of m is set, on GFNI: each qword q of the
 * affine's matrix holds byte q of m as its byte 3 (the row of result bit
 * 4), and the data's byte j is 1 << (j % 8), so result bit 4 of byte j is
 * bit j % 8 of byte j / 8 of m and the other bits are 0. Two operations
 * where the byte compare and its mask took four. */
TGT_INLINE struct bit4_k bit4_consts(void) {
    return (struct bit4_k){konst(SD_PK_TO_ROW4), konst(SD_PK_BITS), _mm256_setzero_si256()};
}
TGT_INLINE __m256i bit4_of(uint32_t m, const struct bit4_k *k) {
    return _mm256_gf2p8affine_epi64_epi8(k->bits, _mm256_shuffle_epi8(_mm256_set1_epi32((int)m), k->shuf), 0);
}
#else
/* The shuffle that puts byte j / 8 of a mask in byte j; 16 in every byte. */
static const uint64_t SD_PK_SHUF[4] = {0, 0x0101010101010101ULL, 0x0202020202020202ULL,
                                       0x0303030303030303ULL};
static const uint8_t SD_PK_16[32] = {16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16,
                                     16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16};

TGT_INLINE struct bit4_k bit4_consts(void) {
    return (struct bit4_k){konst(SD_PK_SHUF), konst(SD_PK_BITS), konst(SD_PK_16)};
}
/* 16 in byte j where bit j of m is set: byte j / 8 of m in byte j, its
 * bit j % 8 compared. */
TGT_INLINE __m256i bit4_of(uint32_t m, const struct bit4_k *k) {
    const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)m), k->shuf);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, k->bits), k->bits), k->sixteen);
}
#endif

/* 16 where bit s of B's byte is set, 0 elsewhere: one affine map (result
 * bit 4 is bit s) with GFNI, else a shift of the 16-bit lanes and a mask
 * (bit 4 of every byte comes from bit s of the same byte for s <= 7). */
TGT_INLINE __m256i sliced_bit(__m256i B, int s) {
#if SD_PK_GF
    return _mm256_gf2p8affine_epi64_epi8(B, _mm256_set1_epi64x((long long)((1ULL << s) << 24)), 0);
#else
    const __m256i m = _mm256_set1_epi8(0x10);
    if (s < 4) return _mm256_and_si256(_mm256_slli_epi16(B, 4 - s), m);
    if (s > 4) return _mm256_and_si256(_mm256_srli_epi16(B, s - 4), m);
    return _mm256_and_si256(B, m);
#endif
}

/* Adds the fifth bits (q5_0, q5_K) of half h, laid out as the process
 * packs them (sd_packed_bits): sliced, a shift and a mask a step (one
 * affine map with GFNI) from one 32-byte load, or as masks, a byte
 * shuffle and a compare a step. */
TGT_INLINE void add_bit4(const uint8_t *masks, int h, bool sliced, __m256i w[8]) {
    if (sliced) {
        const __m256i B = ld(masks + 32 * h);
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++)
            w[s] = _mm256_or_si256(w[s], sliced_bit(B, s));
        return;
    }
    const struct bit4_k k = bit4_consts();
#pragma GCC unroll 8
    for (int s = 0; s < 8; s++) {
        uint32_t m;
        memcpy(&m, masks + 8 * s + 4 * h, 4);
        w[s] = _mm256_or_si256(w[s], bit4_of(m, &k));
    }
}

/* q6_K's two high bits of half h. */
TGT_INLINE void add_high2(const uint8_t *p, int h, __m256i w[8]) {
    const __m256i m30 = _mm256_set1_epi8(0x30);
#pragma GCC unroll 2
    for (int a = 0; a < 2; a++) {
        const __m256i v = ld(p + 64 * a + 32 * h);
        const __m256i sh[4] = {_mm256_slli_epi16(v, 4), _mm256_slli_epi16(v, 2), v, _mm256_srli_epi16(v, 2)};
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++)
            w[4 * a + t] = _mm256_or_si256(w[4 * a + t], _mm256_and_si256(sh[t], m30));
    }
}

/* S += the exact dot of each dword of unsigned bytes w with x's signed
 * dword: AVX-VNNI's vpdpbusd, VEX-encoded. Written in assembly so that the
 * functions around it need no avxvnni target: they run on AVX2-only CPUs
 * too, which take the other branch. */
TGT_INLINE __m256i dpbusd_vex(__m256i S, __m256i w, __m256i x) {
    __asm__("%{vex%} vpdpbusd %2, %1, %0" : "+x"(S) : "x"(w), "x"(x));
    return S;
}

/* How many steps' vpmaddubsw pair sums add up exactly in 16 bits before one
 * vpmaddwd widens them, for stored values up to umax: a pair sum is at most
 * 2 * umax * 127 (activations are within +-127), so 8 steps of 4-bit
 * values, 4 of 5-bit and 2 of 6-bit stay under 2^15. Without VNNI the
 * widening vpmaddwd and its 32-bit add were half of a step's multiplies
 * (Zen 3 has two ports for both); summing first leaves one widening a
 * group of steps. */
#define SD_PK_I16_STEPS(umax) (32767 / (2 * (umax)*127))

/* S += the exact dot of unsigned w (values <= umax, any byte with vnni)
 * and x's dwords, steps [s0, s1). */
TGT_INLINE __m256i dot_steps(__m256i S, const __m256i w[8], const uint8_t *x, int s0, int s1, bool vnni,
                             int umax) {
    if (vnni) { /* two chains of vpdpbusd, each half as long */
        __m256i S2 = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int s = s0; s < s1; s++) {
            const __m256i xb = _mm256_set1_epi32(sd_pk_i32(x + 4 * s));
            if ((s - s0) & 1)
                S2 = dpbusd_vex(S2, w[s], xb);
            else
                S = dpbusd_vex(S, w[s], xb);
        }
        return _mm256_add_epi32(S, S2);
    }
    const int gs = SD_PK_I16_STEPS(umax);
#pragma GCC unroll 8
    for (int s = s0; s < s1; s += gs) {
        __m256i p = _mm256_maddubs_epi16(w[s], _mm256_set1_epi32(sd_pk_i32(x + 4 * s)));
#pragma GCC unroll 8
        for (int k = 1; k < gs; k++) /* gs divides s1 - s0 at every call */
            p = _mm256_add_epi16(
                p, _mm256_maddubs_epi16(w[s + k], _mm256_set1_epi32(sd_pk_i32(x + 4 * (s + k)))));
        S = _mm256_add_epi32(S, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
    }
    return S;
}

/* The exact int32 sums of the four products of w's dwords (values <= 63)
 * with the dwords at p and p + 4: a q4_K/q5_K minimum's sums. */
TGT_INLINE __m256i dot_pair(__m256i m0, __m256i m1, const uint8_t *p, bool vnni) {
    const __m256i x0 = _mm256_set1_epi32(sd_pk_i32(p)), x1 = _mm256_set1_epi32(sd_pk_i32(p + 4));
    if (vnni) return dpbusd_vex(dpbusd_vex(_mm256_setzero_si256(), m0, x0), m1, x1);
    return _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(m0, x0), _mm256_maddubs_epi16(m1, x1)),
                             _mm256_set1_epi16(1));
}

/* q8_0 without VNNI: w holds u = q + 128; the dot of q with x is taken
 * by sign, |q| (exact as an unsigned byte, 128 included) times x with q's
 * sign. q8_split turns a block half's u into |q| in place and q into sg
 * once, for all the rows; dot_steps_q8 is then one sign, one vpmaddubsw
 * and one vpmaddwd a row and step (a pair sum reaches 2 * 128 * 127, so
 * steps cannot share a widening as the smaller types do). */
TGT_INLINE void q8_split(__m256i w[8], __m256i sg[8]) {
    const __m256i flip = _mm256_set1_epi8((char)0x80);
#pragma GCC unroll 8
    for (int s = 0; s < 8; s++) {
        sg[s] = _mm256_xor_si256(w[s], flip);
        w[s] = _mm256_abs_epi8(sg[s]);
    }
}
TGT_INLINE __m256i dot_steps_q8(const __m256i a[8], const __m256i sg[8], const uint8_t *x) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i S = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int s = 0; s < 8; s++) {
        const __m256i xs = _mm256_sign_epi8(_mm256_set1_epi32(sd_pk_i32(x + 4 * s)), sg[s]);
        S = _mm256_add_epi32(S, _mm256_madd_epi16(_mm256_maddubs_epi16(a[s], xs), ones));
    }
    return S;
}

/* The largest stored (unsigned) value of a 4- or 5-bit type. */
#define SD_PK_UMAX(t) ((t) == SD_TYPE_Q4_0 || (t) == SD_TYPE_Q4_K ? 15 : 31)

TGT_INLINE __m256 cvt_half8(const uint8_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

TGT_INLINE void q0_group(enum sd_type t, bool vnni, bool sliced, const uint8_t *g, int64_t n,
                         const uint8_t *xq, size_t xs, int64_t nr, float *acc) {
    const int64_t nb = n / 32;
    const size_t V = SD_PK_Q0_REC(t);
    const size_t corr = SD_PK_Q0_CORR(t, n); /* without vnni q8_0 takes dot_steps_q8 */
    for (int64_t i = 0; i < 16 * nr; i += 8)
        _mm256_store_ps(acc + i, _mm256_setzero_ps());
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *rec = g + (size_t)b * V;
        sd_pk_prefetch(rec, V, t != SD_TYPE_Q8_0);
        for (int h = 0; h < 2; h++) {
            __m256i w[8], sg[8];
            if (t == SD_TYPE_Q8_0) {
#pragma GCC unroll 8
                for (int s = 0; s < 8; s++)
                    w[s] = ld(rec + 64 * s + 32 * h);
                if (!vnni) q8_split(w, sg);
            } else {
                unpack_nib(rec, h, konst(SD_PK_M4), w);
                if (t == SD_TYPE_Q5_0) add_bit4(rec + 256, h, sliced, w);
            }
            const __m256 dw = cvt_half8(g + (size_t)nb * V + 32 * (size_t)b + 16 * h);
            for (int64_t r = 0; r < nr; r++) {
                const uint8_t *x = xq + (size_t)r * xs;
                const __m256i S = t == SD_TYPE_Q8_0 && !vnni
                                      ? dot_steps_q8(w, sg, x + 32 * b)
                                      : dot_steps(_mm256_set1_epi32(sd_pk_i32(x + corr + 4 * b)), w,
                                                  x + 32 * b, 0, 8, vnni, SD_PK_UMAX(t));
                const __m256 sc = _mm256_mul_ps(dw, _mm256_set1_ps(sd_pk_f32(x + n + 4 * b)));
                float *a = acc + 16 * r + 8 * h;
                _mm256_store_ps(a, _mm256_fmadd_ps(_mm256_cvtepi32_ps(S), sc, _mm256_load_ps(a)));
            }
        }
    }
}

TGT_INLINE __m256i sc_vec(const uint8_t *p, bool sign) {
    const __m128i v = _mm_loadl_epi64((const __m128i *)p);
    return sign ? _mm256_cvtepi8_epi32(v) : _mm256_cvtepu8_epi32(v);
}

TGT_INLINE void k45_group(enum sd_type t, bool vnni, bool sliced, const uint8_t *g, int64_t n,
                          const uint8_t *xq, size_t xs, int64_t nr, float *acc, float *T) {
    const int64_t nsb = n / 256;
    const size_t xd = (size_t)n, xlo = SD_PK_K_LO(n), xhi = SD_PK_K_HI(n);
    for (int64_t i = 0; i < 16 * nr; i += 8)
        _mm256_store_ps(acc + i, _mm256_setzero_ps());
    for (int64_t b = 0; b < nsb; b++) {
        const uint8_t *rec = g + (size_t)b * SD_PK_K_REC(t);
        for (int h = 0; h < 2; h++) {
            for (int j = 0; j < 8; j++) {
                sd_pk_prefetch_part(rec, SD_PK_K_REC(t), 8 * h + j, 16, true);
                __m256i w[8];
                unpack_nib(rec + 256 * j, h, _mm256_set1_epi8(15), w);
                if (t == SD_TYPE_Q5_K) add_bit4(rec + 2048 + 64 * j, h, sliced, w);
                const __m256 sc = _mm256_cvtepi32_ps(sc_vec(rec + SD_PK_K_SC(t) + 16 * j + 8 * h, false));
                for (int64_t r = 0; r < nr; r++) {
                    const uint8_t *x = xq + (size_t)r * xs + 256 * b + 32 * j;
                    const __m256 S = _mm256_cvtepi32_ps(
                        dot_steps(_mm256_setzero_si256(), w, x, 0, 8, vnni, SD_PK_UMAX(t)));
                    float *Tr = T + 16 * r + 8 * h;
                    _mm256_store_ps(Tr, _mm256_fmadd_ps(S, sc, j ? _mm256_load_ps(Tr) : _mm256_setzero_ps()));
                }
            }
            const __m256i m0 = ld(rec + SD_PK_K_M(t) + 32 * h), m1 = ld(rec + SD_PK_K_M(t) + 64 + 32 * h);
            const __m256 dw = cvt_half8(rec + SD_PK_K_D(t) + 16 * h),
                         dm = cvt_half8(rec + SD_PK_K_D(t) + 32 + 16 * h);
            for (int64_t r = 0; r < nr; r++) {
                const uint8_t *x = xq + (size_t)r * xs;
                const uint8_t *lo = x + xlo + 8 * b, *hi = x + xhi + 8 * b;
                const __m256i Ml = dot_pair(m0, m1, lo, vnni), Mh = dot_pair(m0, m1, hi, vnni);
                const __m256i M = _mm256_add_epi32(Ml, _mm256_slli_epi32(Mh, 8));
                const __m256 dx = _mm256_set1_ps(sd_pk_f32(x + xd + 4 * b));
                float *a = acc + 16 * r + 8 * h;
                __m256 v = _mm256_load_ps(a);
                v = _mm256_fmadd_ps(_mm256_load_ps(T + 16 * r + 8 * h), _mm256_mul_ps(dw, dx), v);
                v = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(M), _mm256_mul_ps(dm, dx), v);
                _mm256_store_ps(a, v);
            }
        }
    }
}

TGT_INLINE void q6k_group(bool vnni, const uint8_t *g, int64_t n, const uint8_t *xq, size_t xs, int64_t nr,
                          float *acc, float *T) {
    const int64_t nsb = n / 256;
    const size_t xd = (size_t)n, xc = SD_PK_K_CORR(n);
    for (int64_t i = 0; i < 16 * nr; i += 8)
        _mm256_store_ps(acc + i, _mm256_setzero_ps());
    for (int64_t b = 0; b < nsb; b++) {
        const uint8_t *rec = g + (size_t)b * SD_PK_K_REC(SD_TYPE_Q6_K);
        for (int h = 0; h < 2; h++) {
            for (int c = 0; c < 8; c++) {
                sd_pk_prefetch_part(rec, SD_PK_K_REC(SD_TYPE_Q6_K), 8 * h + c, 16, true);
                __m256i w[8];
                unpack_nib(rec + 256 * c, h, _mm256_set1_epi8(15), w);
                add_high2(rec + 2048 + 128 * c, h, w);
                const __m256 sc0 =
                    _mm256_cvtepi32_ps(sc_vec(rec + SD_PK_K_SC(SD_TYPE_Q6_K) + 32 * c + 8 * h, true));
                const __m256 sc1 =
                    _mm256_cvtepi32_ps(sc_vec(rec + SD_PK_K_SC(SD_TYPE_Q6_K) + 32 * c + 16 + 8 * h, true));
                for (int64_t r = 0; r < nr; r++) {
                    const uint8_t *x = xq + (size_t)r * xs;
                    const uint8_t *cr = x + xc + 4 * (16 * b + 2 * c);
                    const uint8_t *xv = x + 256 * b + 32 * c;
                    const __m256i D0 = dot_steps(_mm256_set1_epi32(sd_pk_i32(cr)), w, xv, 0, 4, vnni, 63);
                    const __m256i D1 = dot_steps(_mm256_set1_epi32(sd_pk_i32(cr + 4)), w, xv, 4, 8, vnni, 63);
                    float *Tr = T + 16 * r + 8 * h;
                    __m256 t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(D0), sc0,
                                               c ? _mm256_load_ps(Tr) : _mm256_setzero_ps());
                    _mm256_store_ps(Tr, _mm256_fmadd_ps(_mm256_cvtepi32_ps(D1), sc1, t));
                }
            }
            const __m256 dw = cvt_half8(rec + SD_PK_K_D(SD_TYPE_Q6_K) + 16 * h);
            for (int64_t r = 0; r < nr; r++) {
                const __m256 dx = _mm256_set1_ps(sd_pk_f32(xq + (size_t)r * xs + xd + 4 * b));
                float *a = acc + 16 * r + 8 * h;
                _mm256_store_ps(a, _mm256_fmadd_ps(_mm256_load_ps(T + 16 * r + 8 * h), _mm256_mul_ps(dw, dx),
                                                   _mm256_load_ps(a)));
            }
        }
    }
}

/* The integer kernels of one kind: AVX2 alone, or with AVX-VNNI. */
TGT_INLINE bool int_group(bool vnni, enum sd_type t, const uint8_t *g, int64_t n_in, const uint8_t *xq,
                          size_t xs, int64_t n_rows, float *acc) {
    _Alignas(64) float T[64 * 16];
    const bool sliced = sd_packed_bits() == SD_PK_BITS_SLICED;
    switch (t) {
    /* Each type its own copy, so that its step grouping (and q5's bit
     * layout) is a constant. */
    case SD_TYPE_Q4_0:
        q0_group(SD_TYPE_Q4_0, vnni, false, g, n_in, xq, xs, n_rows, acc);
        return true;
    case SD_TYPE_Q5_0:
        if (sliced)
            q0_group(SD_TYPE_Q5_0, vnni, true, g, n_in, xq, xs, n_rows, acc);
        else
            q0_group(SD_TYPE_Q5_0, vnni, false, g, n_in, xq, xs, n_rows, acc);
        return true;
    case SD_TYPE_Q8_0:
        q0_group(SD_TYPE_Q8_0, vnni, false, g, n_in, xq, xs, n_rows, acc);
        return true;
    case SD_TYPE_Q4_K:
        k45_group(SD_TYPE_Q4_K, vnni, false, g, n_in, xq, xs, n_rows, acc, T);
        return true;
    case SD_TYPE_Q5_K:
        if (sliced)
            k45_group(SD_TYPE_Q5_K, vnni, true, g, n_in, xq, xs, n_rows, acc, T);
        else
            k45_group(SD_TYPE_Q5_K, vnni, false, g, n_in, xq, xs, n_rows, acc, T);
        return true;
    case SD_TYPE_Q6_K:
        q6k_group(vnni, g, n_in, xq, xs, n_rows, acc, T);
        return true;
    default:
        return false;
    }
}

#endif
