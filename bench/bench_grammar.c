/* bench/bench_grammar.c - what the JSON grammar's mask costs a sampled row
 * on a real vocabulary (grammar/grammar.h): sd_grammar_mask, which answers
 * most tokens by their string class or their first byte, against feeding
 * every token whole (sd_grammar_allows token by token: the mask as it was
 * before stop 97, and its reference), in the same run, at the states a
 * reply passes through. The two must agree on every token that does not
 * end generation (checked; exit status 1 otherwise).
 *
 * Times are the best of --reps runs (default 7) of this thread's CPU time.
 *
 * Build (not part of CMake; from the repository root, after cmake --build build):
 *   gcc -std=c11 -O2 -I include -I . bench/bench_grammar.c build/libsdnpu.a \
 *       -ljansson -lpcre2-8 -lutf8proc -lm -lpthread -o /tmp/bench_grammar
 *   /tmp/bench_grammar [-m models/default.gguf] [--reps N] [--json out.json]
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "gguf/gguf.h"
#include "grammar/grammar.h"
#include "tok/tokenizer.h"

static double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int32_t token_text(const void *ud, int32_t id, char *buf, size_t cap) {
    return sd_token_to_piece(ud, id, false, buf, cap);
}
static bool token_ends(const void *ud, int32_t id) { return sd_vocab_is_eog(ud, id); }

/* A state of a reply: the bytes before it, under the schema or not. */
struct state {
    const char *name, *before;
    bool schema;
};
static const char k_schema[] =
    "{\"type\":\"object\",\"properties\":{\"title\":{\"type\":\"string\"},"
    "\"kind\":{\"enum\":[\"feature\",\"fix\",\"docs\"]},\"count\":{\"type\":\"integer\"}},"
    "\"required\":[\"title\",\"kind\",\"count\"]}";
static const struct state k_states[] = {
    {"before the object", "", false},
    {"after '{' (a key or '}')", "{", false},
    {"inside a key", "{\"ti", false},
    {"after a key (':')", "{\"title\"", false},
    {"after ':' (a value)", "{\"title\": ", false},
    {"inside a string value", "{\"title\": \"Git 2.33 adds", false},
    {"inside a number", "{\"count\": 12", false},
    {"after a value (',' or '}')", "{\"count\": 12,", false},
    {"schema: a property name", "{\"ti", true},
    {"schema: inside a free string", "{\"title\": \"Git 2.33 adds", true},
    {"schema: an enum value", "{\"title\": \"x\", \"kind\": \"fe", true},
};

struct opts {
    const char *model, *json;
    int reps;
};

static int parse(int argc, char **argv, struct opts *o) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc)
            o->model = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            o->reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json") && i + 1 < argc)
            o->json = argv[++i];
        else {
            fprintf(stderr, "usage: bench_grammar [-m MODEL] [--reps N] [--json OUT]\n");
            return 1;
        }
    }
    return o->reps < 1;
}

/* The best of reps runs of the mask (whole: token by token) after j, in ms;
 * the masked logits left in l. */
static double time_mask(const struct sd_grammar *g, const struct sd_json *j, int32_t n, bool whole, int reps,
                        float *l) {
    double best = INFINITY;
    for (int r = 0; r < reps; r++) {
        for (int32_t i = 0; i < n; i++)
            l[i] = 0.0f;
        const double t0 = cpu_ms();
        if (whole) {
            for (int32_t i = 0; i < n; i++)
                if (!sd_grammar_allows(g, j, i)) l[i] = -INFINITY;
        } else {
            sd_grammar_mask(g, j, l);
        }
        best = SD_MIN(best, cpu_ms() - t0);
    }
    return best;
}

struct row {
    double whole_ms, mask_ms;
    int32_t kept;
};

/* One state: both masks timed, compared token by token. */
static int measure(const struct sd_grammar *g, const struct sd_vocab *v, const struct sd_schema *sc,
                   const struct state *st, int32_t n, int reps, float *la, float *lb, struct row *r) {
    struct sd_json j;
    sd_json_init_schema(&j, st->schema ? sc : NULL);
    if (!sd_json_feed(&j, st->before, strlen(st->before))) {
        fprintf(stderr, "bench_grammar: the state \"%s\" is not viable\n", st->name);
        return 1;
    }
    r->whole_ms = time_mask(g, &j, n, true, reps, la);
    r->mask_ms = time_mask(g, &j, n, false, reps, lb);
    r->kept = 0;
    for (int32_t i = 0; i < n; i++) {
        if (sd_vocab_is_eog(v, i)) continue;
        if ((la[i] == 0.0f) != (lb[i] == 0.0f)) {
            fprintf(stderr, "bench_grammar: %s: token %d: mask %d, whole %d\n", st->name, i, lb[i] == 0.0f,
                    la[i] == 0.0f);
            return 1;
        }
        r->kept += lb[i] == 0.0f;
    }
    return 0;
}

static void report(const struct opts *o, int32_t n, const struct row *rows) {
    const size_t ns = SD_ARRAY_LEN(k_states);
    printf("\nthe JSON grammar's mask, %s (%d tokens), one thread, best of %d (ms)\n\n", o->model, (int)n,
           o->reps);
    printf("| state | tokens allowed | every token fed whole | sd_grammar_mask | speed-up "
           "|\n|---|---:|---:|---:|---:|\n");
    for (size_t k = 0; k < ns; k++)
        printf("| %s | %d | %.3f | %.3f | %.1fx |\n", k_states[k].name, (int)rows[k].kept, rows[k].whole_ms,
               rows[k].mask_ms, rows[k].whole_ms / rows[k].mask_ms);
    FILE *f = o->json ? fopen(o->json, "w") : NULL;
    if (o->json && !f) fprintf(stderr, "bench_grammar: cannot write %s\n", o->json);
    if (!f) return;
    fprintf(f, "{\"model\": \"%s\", \"n_vocab\": %d, \"reps\": %d, \"states\": [", o->model, (int)n, o->reps);
    for (size_t k = 0; k < ns; k++)
        fprintf(f, "%s\n  {\"state\": \"%s\", \"kept\": %d, \"whole_ms\": %.4f, \"mask_ms\": %.4f}",
                k ? "," : "", k_states[k].name, (int)rows[k].kept, rows[k].whole_ms, rows[k].mask_ms);
    fprintf(f, "]}\n");
    fclose(f);
}

int main(int argc, char **argv) {
    struct opts o = {.model = "models/default.gguf", .reps = 7};
    if (parse(argc, argv, &o)) return 1;
    struct sd_err err = {0};
    struct sd_gguf *gg = NULL;
    struct sd_vocab *v = NULL;
    struct sd_grammar *g = NULL;
    struct sd_schema *sc = NULL;
    if (sd_gguf_open(o.model, true, &gg, &err) || sd_vocab_load(gg, &v, &err) ||
        sd_schema_compile(k_schema, strlen(k_schema), &sc, &err)) {
        fprintf(stderr, "bench_grammar: %s\n", err.msg);
        return 1;
    }
    const int32_t n = sd_vocab_n_tokens(v);
    const double t0 = cpu_ms();
    if (sd_grammar_create(n, token_text, token_ends, v, &g, &err)) {
        fprintf(stderr, "bench_grammar: %s\n", err.msg);
        return 1;
    }
    fprintf(stderr, "read %d token texts and classes in %.1f ms\n", (int)n, cpu_ms() - t0);
    float *la = malloc(sizeof *la * (size_t)n), *lb = malloc(sizeof *lb * (size_t)n);
    struct row rows[SD_ARRAY_LEN(k_states)];
    int rc = !la || !lb;
    for (size_t k = 0; k < SD_ARRAY_LEN(k_states) && !rc; k++)
        rc = measure(g, v, sc, &k_states[k], n, o.reps, la, lb, &rows[k]);
    if (!rc) report(&o, n, rows);
    free(la);
    free(lb);
    sd_grammar_free(g);
    sd_schema_free(sc);
    sd_vocab_free(v);
    sd_gguf_close(gg);
    return rc;
}
