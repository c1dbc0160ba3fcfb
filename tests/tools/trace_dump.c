/*
 * tests/tools/trace_dump.c - writes every intermediate of sdnpu's forward pass
 * for one token sequence, for an op-by-op comparison with llama.cpp's graph
 * (tests/conformance/trace_compare.py).
 * Usage: trace_dump MODEL OUT.bin TOKEN,TOKEN,... [n_threads]
 * Record: u32 name_len, name, i32 layer, i32 n_rows, i32 width, f32[n_rows*width]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graphs/forward.h"
#include "graphs/quant.h"
#include "sdnpu.h"

static void trace(void *ud, const char *name, int32_t il, const float *data, int32_t n_rows, int32_t width) {
    FILE *f = ud;
    uint32_t n = (uint32_t)strlen(name);
    int32_t hdr[3] = {il, n_rows, width};
    fwrite(&n, sizeof n, 1, f);
    fwrite(name, 1, n, f);
    fwrite(hdr, sizeof hdr, 1, f);
    fwrite(data, sizeof(float), (size_t)n_rows * (size_t)width, f);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: trace_dump MODEL OUT.bin TOKENS [n_threads]\n");
        return 2;
    }
    int32_t toks[256];
    size_t n = 0;
    for (char *p = argv[3]; *p && n < 256;) {
        toks[n++] = (int32_t)strtol(p, &p, 10);
        if (*p == ',') p++;
    }
    struct sdnpu_model_params mp = sdnpu_model_default_params();
    if (argc > 4) mp.n_threads = atoi(argv[4]);
    struct sdnpu_model *model;
    char err[512];
    if (sdnpu_model_load(argv[1], mp, &model, err, sizeof err)) {
        fprintf(stderr, "trace_dump: %s\n", err);
        return 1;
    }
    struct sdnpu_session_params sp = sdnpu_session_default_params();
    sp.n_ctx = 512;
    sp.kernels = "ggml"; /* compared op by op with llama.cpp */
    struct sdnpu_session *s;
    if (sdnpu_session_create(model, sp, &s)) {
        fprintf(stderr, "trace_dump: %s\n", sdnpu_model_last_error(model));
        return 1;
    }
    if (getenv("TRACE_SCALAR")) sd_quant_set_impl(SD_IMPL_SCALAR);
    FILE *f = fopen(argv[2], "wb");
    if (!f) return 1;
    sd_fwd_set_trace(trace, f);
    int32_t nv = sdnpu_model_n_vocab(model);
    float *logits = malloc(n * (size_t)nv * sizeof(float));
    int rc = sdnpu_session_eval(s, toks, n, logits, n * (size_t)nv);
    sd_fwd_set_trace(NULL, NULL);
    trace(f, "result_output", -1, logits, (int32_t)n, nv);
    fclose(f);
    free(logits);
    sdnpu_session_free(s);
    sdnpu_model_free(model);
    return rc;
}
