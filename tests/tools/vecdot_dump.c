/*
 * tests/tools/vecdot_dump.c - sdnpu's side of the kernel conformance test
 * (tests/conformance/kernel_conformance.py): one weight row and one float
 * activation row in, the dot product out from every kernel implementation.
 *
 * stdin, repeated: int32 type, int32 n, the weight row (sd_row_size bytes),
 * n floats of activations. stdout, one line per record: the result of the
 * scalar, AVX2 and AVX-512 kernels as hex bit patterns ("-" where this CPU
 * has no such kernel). The activations are quantized here the way the
 * forward pass quantizes them (sd_quantize_act_row).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graphs/quant.h"

static unsigned bits(float f) {
    unsigned u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* The activation row in the form the weight type's kernel reads. */
static void prep(enum sd_type t, const float *x, int32_t n, void *xq) {
    if (t == SD_TYPE_F16 || t == SD_TYPE_BF16) {
        float *y = xq;
        for (int32_t i = 0; i < n; i++)
            y[i] = t == SD_TYPE_F16 ? sd_fp16_to_fp32(sd_fp32_to_fp16(x[i])) : sd_bf16_to_fp32(sd_fp32_to_bf16(x[i]));
    } else if (t == SD_TYPE_F32) {
        memcpy(xq, x, (size_t)n * sizeof(float));
    } else {
        sd_quantize_act_row(sd_type_get(t)->vec_dot_type, x, xq, n);
    }
}

int main(void) {
    int32_t hdr[2];
    while (fread(hdr, sizeof hdr, 1, stdin) == 1) {
        enum sd_type t = (enum sd_type)hdr[0];
        int32_t n = hdr[1];
        size_t wb, xb;
        const struct sd_type_traits *tr = sd_type_get(t);
        if (!tr || n <= 0 || n > (1 << 20) || !sd_row_size(t, n, &wb)) {
            fprintf(stderr, "vecdot_dump: bad record (type %d, n %d)\n", hdr[0], n);
            return 2;
        }
        xb = (size_t)n * sizeof(float) + 1024; /* room for any vec_dot type */
        void *w = malloc(wb), *xq = malloc(8 * xb);
        float *x = malloc((size_t)n * sizeof(float));
        if (!w || !xq || !x || fread(w, 1, wb, stdin) != wb || fread(x, sizeof(float), (size_t)n, stdin) != (size_t)n) {
            fprintf(stderr, "vecdot_dump: truncated record\n");
            return 2;
        }
        prep(t, x, n, xq);
        for (int c = 1; c < 8; c++) memcpy((char *)xq + (size_t)c * xb, xq, xb);
        float y[8];
        sd_quant_set_impl(SD_IMPL_SCALAR);
        sd_vec_dot_tile(t, n, w, wb, 1, xq, xb, 1, y, 1);
        printf("%08x", bits(y[0]));
        if (sd_quant_avx2_supported()) {
            sd_quant_set_impl(SD_IMPL_AVX2);
            sd_quant_set_avx512(false);
            sd_vec_dot_tile(t, n, w, wb, 1, xq, xb, 1, y, 1);
            printf(" %08x", bits(y[0]));
            if (sd_quant_avx512_supported()) {
                /* The AVX-512 kernels take batches (q4_0/q5_0/q8_0 from
                 * four rows): a group of eight copies of the row. */
                sd_quant_set_avx512(true);
                sd_vec_dot_tile(t, n, w, wb, 1, xq, xb, 8, y, 1);
                printf(" %08x", bits(y[7]));
            } else {
                printf(" -");
            }
        } else {
            printf(" - -");
        }
        printf("\n");
        free(w);
        free(xq);
        free(x);
    }
    return 0;
}
