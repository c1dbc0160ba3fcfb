/*
 * tests/tools/logits_dump.c - the sdnpu side of the forward-pass conformance
 * test (tests/conformance/logits_conformance.py).
 *
 * Reads from stdin, for each case:  n_tok t_0 .. t_{n-1}  n_gen  and then
 * n_tok lines of 20 token ids (the peer's top-20 at each position).
 * Writes for each case:
 *   A a_0 .. a_{n-1}        our argmax at each position
 *   L p l_0 .. l_19         our log-softmax at the peer's top-20 ids, per position p
 *   G g_0 .. g_{n_gen-1}    our greedy continuation after the prompt
 * Usage: logits_dump MODEL [n_threads]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "graphs/quant.h"
#include "sdnpu.h"

#define TOPN 20
#define CHUNK 256

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: logits_dump MODEL [n_threads] < cases\n");
        return 2;
    }
    /* The scalar kernels are the reference the SIMD ones equal bit for bit;
     * this lets the conformance test run on them too. */
    if (getenv("SDNPU_TEST_SCALAR")) sd_quant_set_impl(SD_IMPL_SCALAR);
    struct sdnpu_model_params mp = sdnpu_model_default_params();
    if (argc > 2) mp.n_threads = atoi(argv[2]);
    struct sdnpu_model *model;
    char err[512];
    if (sdnpu_model_load(argv[1], mp, &model, err, sizeof err)) {
        fprintf(stderr, "logits_dump: %s\n", err);
        return 1;
    }
    int32_t nv = sdnpu_model_n_vocab(model);
    struct sdnpu_session_params sp = sdnpu_session_default_params();
    sp.n_ctx = 4096;
    /* llama.cpp's summation order unless the test asks for the default one. */
    sp.kernels = getenv("SDNPU_TEST_KERNELS") ? getenv("SDNPU_TEST_KERNELS") : "ggml";
    struct sdnpu_session *s;
    if (sdnpu_session_create(model, sp, &s)) {
        fprintf(stderr, "logits_dump: %s\n", sdnpu_model_last_error(model));
        return 1;
    }
    float *logits = malloc((size_t)CHUNK * (size_t)nv * sizeof(float));
    int n_tok;
    while (scanf("%d", &n_tok) == 1) {
        if (n_tok <= 0 || n_tok > 4000) return 3;
        int32_t *toks = malloc((size_t)n_tok * sizeof *toks);
        for (int i = 0; i < n_tok; i++)
            if (scanf("%d", &toks[i]) != 1) return 3;
        int n_gen;
        if (scanf("%d", &n_gen) != 1 || n_gen < 0) return 3;
        int32_t *top = malloc((size_t)n_tok * TOPN * sizeof *top);
        for (int i = 0; i < n_tok * TOPN; i++)
            if (scanf("%d", &top[i]) != 1) return 3;
        int32_t *amax = malloc((size_t)n_tok * sizeof *amax);
        double *lp = malloc((size_t)n_tok * TOPN * sizeof *lp);
        sdnpu_session_reset(s);
        for (int done = 0; done < n_tok; done += CHUNK) {
            int n = n_tok - done < CHUNK ? n_tok - done : CHUNK;
            int rc = sdnpu_session_eval(s, toks + done, (size_t)n, logits, (size_t)CHUNK * (size_t)nv);
            if (rc) {
                fprintf(stderr, "logits_dump: eval: %s\n", sdnpu_session_last_error(s));
                return 1;
            }
            for (int r = 0; r < n; r++) {
                const float *l = logits + (size_t)r * (size_t)nv;
                int32_t best = 0;
                float mx = l[0];
                for (int32_t v = 1; v < nv; v++)
                    if (l[v] > mx) mx = l[v], best = v;
                double sum = 0;
                for (int32_t v = 0; v < nv; v++) sum += exp((double)l[v] - mx);
                double lse = mx + log(sum);
                amax[done + r] = best;
                for (int k = 0; k < TOPN; k++) {
                    int32_t id = top[(size_t)(done + r) * TOPN + k];
                    lp[(size_t)(done + r) * TOPN + k] = (id >= 0 && id < nv) ? (double)l[id] - lse : NAN;
                }
            }
        }
        printf("A");
        for (int i = 0; i < n_tok; i++) printf(" %d", amax[i]);
        printf("\n");
        for (int i = 0; i < n_tok; i++) {
            printf("L %d", i);
            for (int k = 0; k < TOPN; k++) printf(" %.6f", lp[(size_t)i * TOPN + k]);
            printf("\n");
        }
        /* Greedy continuation: the last prompt position's argmax, fed back. */
        printf("G");
        int32_t tok = amax[n_tok - 1];
        for (int g = 0; g < n_gen; g++) {
            printf(" %d", tok);
            if (g + 1 == n_gen) break;
            if (sdnpu_session_eval(s, &tok, 1, logits, (size_t)nv)) {
                fprintf(stderr, "logits_dump: eval: %s\n", sdnpu_session_last_error(s));
                return 1;
            }
            int32_t best = 0;
            for (int32_t v = 1; v < nv; v++)
                if (logits[v] > logits[best]) best = v;
            tok = best;
        }
        printf("\n");
        fflush(stdout);
        free(toks);
        free(top);
        free(amax);
        free(lp);
    }
    free(logits);
    sdnpu_session_free(s);
    sdnpu_model_free(model);
    return 0;
}
