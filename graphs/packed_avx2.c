/* graphs/packed_avx2.c - AVX2 group kernels of graphs/packed.h, for CPUs
 * without AVX-512 VNNI.
 *
 * The sixteen outputs of a group are taken as two halves of eight (the low
 * and high 32 bytes of each 64-byte vector of the layout). A step's four
 * products per output are summed exactly by vpmaddubsw and vpmaddwd
 * (values up to 63 times activations within +-127 cannot saturate 16
 * bits); q8_0's values up to 255 would, so its weights are turned back to
 * signed bytes and multiplied by sign (as ggml's AVX2 kernels do), which
 * gives S_b directly. Where the CPU has AVX-VNNI (and no AVX-512), one
 * 256-bit vpdpbusd does a step's sums instead (q8_0 then takes its stored
 * unsigned values and the offset product, as the AVX-512 kernels do). The
 * integer sums are exact and the float steps are the scalar reference's,
 * lane by lane, so the bits are the reference's on either path.
 *
 * Built with target attributes; graphs/packed.c calls in only when
 * sd_quant_get_impl() is SD_IMPL_AVX2. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <string.h>

#include "base/base.h"
#include "packed.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)

#include <immintrin.h>

#define TGT __attribute__((target("avx2,fma,f16c")))
#define TGT_INLINE static inline __attribute__((always_inline, target("avx2,fma,f16c")))


TGT_INLINE __m256i ld(const uint8_t *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* Half h of four nibble vectors -> the eight steps' values. */
TGT_INLINE void unpack_nib(const uint8_t *p, int h, __m256i w[8]) {
    const __m256i m4 = _mm256_set1_epi8(15);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        const __m256i v = ld(p + 64 * i + 32 * h);
        w[i] = _mm256_and_si256(v, m4);
        w[i + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    }
}

/* Byte j of the result is 0xFF where bit j of m is set. */
TGT_INLINE __m256i expand_mask(uint32_t m) {
    const __m256i shuf = _mm256_setr_epi64x(0, 0x0101010101010101LL, 0x0202020202020202LL, 0x0303030303030303LL);
    const __m256i bits = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)m), shuf);
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, bits), bits);
}

/* Adds the fifth bits (q5_0, q5_K) of half h. */
TGT_INLINE void add_bit4(const uint8_t *masks, int h, __m256i w[8]) {
    const __m256i b4 = _mm256_set1_epi8(16);
#pragma GCC unroll 8
    for (int s = 0; s < 8; s++) {
        uint32_t m;
        memcpy(&m, masks + 8 * s + 4 * h, 4);
        w[s] = _mm256_or_si256(w[s], _mm256_and_si256(expand_mask(m), b4));
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
        for (int t = 0; t < 4; t++) w[4 * a + t] = _mm256_or_si256(w[4 * a + t], _mm256_and_si256(sh[t], m30));
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

/* S += the exact dot of unsigned w (values <= 63, any byte with vnni) and
 * x's dwords, steps [s0, s1). */
TGT_INLINE __m256i dot_steps(__m256i S, const __m256i w[8], const uint8_t *x, int s0, int s1, bool vnni) {
    const __m256i ones = _mm256_set1_epi16(1);
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
#pragma GCC unroll 8
    for (int s = s0; s < s1; s++)
        S = _mm256_add_epi32(
            S, _mm256_madd_epi16(_mm256_maddubs_epi16(w[s], _mm256_set1_epi32(sd_pk_i32(x + 4 * s))), ones));
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

/* q8_0: w holds u = q + 128; the dot of q with x, by sign. */
TGT_INLINE __m256i dot_steps_q8(const __m256i w[8], const uint8_t *x) {
    const __m256i ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8((char)0x80);
    __m256i S = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int s = 0; s < 8; s++) {
        const __m256i q = _mm256_xor_si256(w[s], flip);
        const __m256i xs = _mm256_sign_epi8(_mm256_set1_epi32(sd_pk_i32(x + 4 * s)), q);
        S = _mm256_add_epi32(S, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(q), xs), ones));
    }
    return S;
}

TGT_INLINE __m256 cvt_half8(const uint8_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

TGT_INLINE void q0_group(enum sd_type t, bool vnni, const uint8_t *g, int64_t n, const uint8_t *xq, size_t xs,
                         int64_t nr, float *acc) {
    const int64_t nb = n / 32;
    const size_t V = SD_PK_Q0_REC(t);
    const size_t corr = SD_PK_Q0_CORR(t, n); /* without vnni q8_0 takes dot_steps_q8 */
    for (int64_t i = 0; i < 16 * nr; i += 8) _mm256_store_ps(acc + i, _mm256_setzero_ps());
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *rec = g + (size_t)b * V;
        sd_pk_prefetch(rec, V, t != SD_TYPE_Q8_0);
        for (int h = 0; h < 2; h++) {
            __m256i w[8];
            if (t == SD_TYPE_Q8_0) {
#pragma GCC unroll 8
                for (int s = 0; s < 8; s++) w[s] = ld(rec + 64 * s + 32 * h);
            } else {
                unpack_nib(rec, h, w);
                if (t == SD_TYPE_Q5_0) add_bit4(rec + 256, h, w);
            }
            const __m256 dw = cvt_half8(g + (size_t)nb * V + 32 * (size_t)b + 16 * h);
            for (int64_t r = 0; r < nr; r++) {
                const uint8_t *x = xq + (size_t)r * xs;
                const __m256i S = t == SD_TYPE_Q8_0 && !vnni
                                      ? dot_steps_q8(w, x + 32 * b)
                                      : dot_steps(_mm256_set1_epi32(sd_pk_i32(x + corr + 4 * b)), w,
                                                  x + 32 * b, 0, 8, vnni);
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

TGT_INLINE void k45_group(enum sd_type t, bool vnni, const uint8_t *g, int64_t n, const uint8_t *xq,
                          size_t xs, int64_t nr, float *acc, float *T) {
    const int64_t nsb = n / 256;
    const size_t xd = (size_t)n, xlo = SD_PK_K_LO(n), xhi = SD_PK_K_HI(n);
    for (int64_t i = 0; i < 16 * nr; i += 8) _mm256_store_ps(acc + i, _mm256_setzero_ps());
    for (int64_t b = 0; b < nsb; b++) {
        const uint8_t *rec = g + (size_t)b * SD_PK_K_REC(t);
        for (int h = 0; h < 2; h++) {
            for (int j = 0; j < 8; j++) {
                sd_pk_prefetch_part(rec, SD_PK_K_REC(t), 8 * h + j, 16, true);
                __m256i w[8];
                unpack_nib(rec + 256 * j, h, w);
                if (t == SD_TYPE_Q5_K) add_bit4(rec + 2048 + 64 * j, h, w);
                const __m256 sc = _mm256_cvtepi32_ps(sc_vec(rec + SD_PK_K_SC(t) + 16 * j + 8 * h, false));
                for (int64_t r = 0; r < nr; r++) {
                    const uint8_t *x = xq + (size_t)r * xs + 256 * b + 32 * j;
                    const __m256 S = _mm256_cvtepi32_ps(dot_steps(_mm256_setzero_si256(), w, x, 0, 8, vnni));
                    float *Tr = T + 16 * r + 8 * h;
                    _mm256_store_ps(Tr, _mm256_fmadd_ps(S, sc, j ? _mm256_load_ps(Tr) : _mm256_setzero_ps()));
                }
            }
            const __m256i m0 = ld(rec + SD_PK_K_M(t) + 32 * h), m1 = ld(rec + SD_PK_K_M(t) + 64 + 32 * h);
            const __m256 dw = cvt_half8(rec + SD_PK_K_D(t) + 16 * h), dm = cvt_half8(rec + SD_PK_K_D(t) + 32 + 16 * h);
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
    for (int64_t i = 0; i < 16 * nr; i += 8) _mm256_store_ps(acc + i, _mm256_setzero_ps());
    for (int64_t b = 0; b < nsb; b++) {
        const uint8_t *rec = g + (size_t)b * SD_PK_K_REC(SD_TYPE_Q6_K);
        for (int h = 0; h < 2; h++) {
            for (int c = 0; c < 8; c++) {
                sd_pk_prefetch_part(rec, SD_PK_K_REC(SD_TYPE_Q6_K), 8 * h + c, 16, true);
                __m256i w[8];
                unpack_nib(rec + 256 * c, h, w);
                add_high2(rec + 2048 + 128 * c, h, w);
                const __m256 sc0 = _mm256_cvtepi32_ps(sc_vec(rec + SD_PK_K_SC(SD_TYPE_Q6_K) + 32 * c + 8 * h, true));
                const __m256 sc1 = _mm256_cvtepi32_ps(sc_vec(rec + SD_PK_K_SC(SD_TYPE_Q6_K) + 32 * c + 16 + 8 * h, true));
                for (int64_t r = 0; r < nr; r++) {
                    const uint8_t *x = xq + (size_t)r * xs;
                    const uint8_t *cr = x + xc + 4 * (16 * b + 2 * c);
                    const uint8_t *xv = x + 256 * b + 32 * c;
                    const __m256i D0 = dot_steps(_mm256_set1_epi32(sd_pk_i32(cr)), w, xv, 0, 4, vnni);
                    const __m256i D1 = dot_steps(_mm256_set1_epi32(sd_pk_i32(cr + 4)), w, xv, 4, 8, vnni);
                    float *Tr = T + 16 * r + 8 * h;
                    __m256 t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(D0), sc0, c ? _mm256_load_ps(Tr) : _mm256_setzero_ps());
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

TGT_INLINE __m256 wload(enum sd_type t, const uint8_t *p) {
    if (t == SD_TYPE_F32) return _mm256_loadu_ps((const float *)p);
    const __m128i h = _mm_loadu_si128((const __m128i *)p);
    if (t == SD_TYPE_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* Float weights: each half of eight outputs, two rows at a time, four
 * accumulators a row (k % 4). */
TGT static void f_group(enum sd_type t, const uint8_t *g, int64_t n, const uint8_t *xq, size_t xs, int64_t nr,
                        float *acc) {
    const size_t es = t == SD_TYPE_F32 ? 4 : 2;
    for (int h = 0; h < 2; h++)
        for (int64_t r0 = 0; r0 < nr; r0 += 2) {
            const float *x0 = (const float *)(xq + (size_t)r0 * xs);
            const float *x1 = r0 + 1 < nr ? (const float *)(xq + (size_t)(r0 + 1) * xs) : x0;
            __m256 a0[4], a1[4];
            for (int l = 0; l < 4; l++) a0[l] = a1[l] = _mm256_setzero_ps();
            for (int64_t k = 0; k < n; k++) {
                const __m256 w = wload(t, g + ((size_t)k * 16 + 8 * (size_t)h) * es);
                a0[k & 3] = _mm256_fmadd_ps(w, _mm256_set1_ps(x0[k]), a0[k & 3]);
                a1[k & 3] = _mm256_fmadd_ps(w, _mm256_set1_ps(x1[k]), a1[k & 3]);
            }
            _mm256_store_ps(acc + 16 * r0 + 8 * h, _mm256_add_ps(_mm256_add_ps(a0[0], a0[1]), _mm256_add_ps(a0[2], a0[3])));
            if (r0 + 1 < nr)
                _mm256_store_ps(acc + 16 * (r0 + 1) + 8 * h,
                                _mm256_add_ps(_mm256_add_ps(a1[0], a1[1]), _mm256_add_ps(a1[2], a1[3])));
        }
}

/* quant_span of graphs/packed.c, eight values at a time (nbk a multiple of
 * 8), as the AVX-512 one: the maximum keeps mx where a value is NaN, as the
 * scalar comparison does, and the rounding is to nearest even. */
TGT float sd_packed_quant_span_avx2(const float *x, int nbk, int8_t *q, int32_t *sum) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 mx = _mm256_setzero_ps();
    for (int j = 0; j < nbk; j += 8)
        mx = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + j), absmask), mx);
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    const float amax = _mm_cvtss_f32(m4);
    const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.f / amax : 0.0f);
    const __m256 lim = _mm256_set1_ps(127.f), nlim = _mm256_set1_ps(-127.f);
    __m256i s = _mm256_setzero_si256();
    for (int j = 0; j < nbk; j += 8) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + j), id);
        __m256 r = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        r = _mm256_and_ps(r, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
        const __m256i qi = _mm256_cvtps_epi32(_mm256_max_ps(_mm256_min_ps(r, lim), nlim));
        const __m128i p16 = _mm_packs_epi32(_mm256_castsi256_si128(qi), _mm256_extracti128_si256(qi, 1));
        _mm_storel_epi64((__m128i *)(q + j), _mm_packs_epi16(p16, p16));
        s = _mm256_add_epi32(s, qi);
    }
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(1, 0, 3, 2)));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(2, 3, 0, 1)));
    *sum = _mm_cvtsi128_si32(s4);
    return amax / 127.f;
}

/* The integer kernels of one kind: AVX2 alone, or with AVX-VNNI. */
TGT_INLINE bool int_group(bool vnni, enum sd_type t, const uint8_t *g, int64_t n_in, const uint8_t *xq,
                          size_t xs, int64_t n_rows, float *acc) {
    _Alignas(64) float T[64 * 16];
    switch (t) {
    case SD_TYPE_Q4_0:
    case SD_TYPE_Q5_0:
    case SD_TYPE_Q8_0:
        q0_group(t, vnni, g, n_in, xq, xs, n_rows, acc);
        return true;
    case SD_TYPE_Q4_K:
    case SD_TYPE_Q5_K:
        k45_group(t, vnni, g, n_in, xq, xs, n_rows, acc, T);
        return true;
    case SD_TYPE_Q6_K:
        q6k_group(vnni, g, n_in, xq, xs, n_rows, acc, T);
        return true;
    default:
        return false;
    }
}
TGT static bool int_group_avx2(enum sd_type t, const uint8_t *g, int64_t n_in, const uint8_t *xq, size_t xs,
                               int64_t n_rows, float *acc) {
    return int_group(false, t, g, n_in, xq, xs, n_rows, acc);
}
TGT static bool int_group_vnni(enum sd_type t, const uint8_t *g, int64_t n_in, const uint8_t *xq, size_t xs,
                               int64_t n_rows, float *acc) {
    return int_group(true, t, g, n_in, xq, xs, n_rows, acc);
}

bool sd_packed_group_avx2(enum sd_type t, bool vnni, const uint8_t *g, int64_t n_in, const uint8_t *xq,
                          size_t xs, int64_t n_rows, float *acc) {
    if (n_rows > 64) return false;
    switch (t) {
    case SD_TYPE_Q4_0:
    case SD_TYPE_Q5_0:
    case SD_TYPE_Q8_0:
    case SD_TYPE_Q4_K:
    case SD_TYPE_Q5_K:
    case SD_TYPE_Q6_K:
        return (vnni ? int_group_vnni : int_group_avx2)(t, g, n_in, xq, xs, n_rows, acc);
    case SD_TYPE_F32:
    case SD_TYPE_F16:
    case SD_TYPE_BF16: f_group(t, g, n_in, xq, xs, n_rows, acc); return true;
    default: return false;
    }
}

#else

float sd_packed_quant_span_avx2(const float *x, int nbk, int8_t *q, int32_t *sum) {
    (void)x, (void)nbk, (void)q, (void)sum;
    return 0.0f;
}

bool sd_packed_group_avx2(enum sd_type t, bool vnni, const uint8_t *g, int64_t n_in, const uint8_t *xq,
                          size_t xs, int64_t n_rows, float *acc) {
    (void)t, (void)vnni, (void)g, (void)n_in, (void)xq, (void)xs, (void)n_rows, (void)acc;
    return false;
}

#endif
