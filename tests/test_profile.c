/* tests/test_profile.c - the graph profile: measured on a tiny model, saved
 * as JSON, read back equal; a stale key, a corrupt or missing file are
 * statuses; the head timed on rows greedy decoding computes; a session
 * left to choose its verification graph's rows takes them from a matching
 * profile beside its model file, whatever link names it. */
#define _XOPEN_SOURCE 700 /* realpath */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/api.h"
#include "engine/tools.h"
#include "sched/profile.h"
#include "util_tiny_model.h"

/* A tiny qwen2 model written to the build directory as name, loaded; its
 * profile's path beside it in json. */
static struct sdnpu_model *tiny_model(const char *name, char model[256], char json[300]) {
    snprintf(model, 256, "%s/%s", SD_BUILD_DIR, name);
    snprintf(json, 300, "%s.profile.json", model);
    struct sdt_tiny_opts o = {.arch = "qwen2"};
    assert_int_equal(sdt_tiny_write(&o, model), 0);
    struct sdnpu_model *m = NULL;
    char err[256];
    assert_int_equal(sdnpu_model_load(model, sdnpu_model_default_params(), &m, err, sizeof err), SDNPU_OK);
    return m;
}

static void test_profile_roundtrip(void **state) {
    (void)state;
    char model[256], json[300];
    struct sdnpu_model *m = tiny_model("test_profile_tiny.gguf", model, json);
    struct sd_pool *pool = NULL;
    struct sd_err e = {0};
    assert_int_equal(sd_pool_create(1, &pool, &e), SDNPU_OK);
    const int32_t Ls[] = {1, 4, 16};
    struct sd_profile p, q;
    const struct sd_profile_spec spec = {
        .backend = "cpu", .kernels = SD_KERNELS_FAST, .Ls = Ls, .n_L = 3, .reps = 2};
    assert_int_equal(sd_profile_measure(m->m, pool, &spec, &p, &e), SDNPU_OK);
    int32_t b0[SD_MAX_BLOCKS], b1[SD_MAX_BLOCKS];
    int32_t nb = sd_rt_plan_blocks(m->m, 0, b0, b1);
    assert_int_equal(p.n_blocks, nb);
    assert_int_equal(p.n_entries, (nb + 1) * 3);
    for (int32_t i = 0; i < p.n_entries; i++) {
        assert_true(p.entries[i].compute_ms >= 0 && p.entries[i].load_ms >= 0);
        assert_true(p.entries[i].bytes > 0);
    }
    /* A graph of more rows holds more scratch. */
    assert_true(p.entries[2].bytes > p.entries[0].bytes);
    sd_profile_key(model, "cpu (test)", 1, p.key, sizeof p.key);
    assert_int_equal(sd_profile_save(&p, json, &e), SDNPU_OK);
    assert_int_equal(sd_profile_load(json, p.key, &q, &e), SDNPU_OK);
    assert_int_equal(q.n_entries, p.n_entries);
    assert_int_equal(q.n_blocks, p.n_blocks);
    assert_int_equal(q.n_L, 3);
    for (int32_t i = 0; i < p.n_entries; i++) {
        assert_int_equal(q.entries[i].L, p.entries[i].L);
        assert_int_equal(q.entries[i].block, p.entries[i].block);
        assert_int_equal(q.entries[i].bytes, p.entries[i].bytes);
        assert_true(q.entries[i].compute_ms - p.entries[i].compute_ms < 1e-3);
    }
    double pass = sd_profile_pass_ms(&q, 4), sum = 0;
    for (int32_t i = 0; i < q.n_entries; i++)
        if (q.entries[i].L == 4 && q.entries[i].block >= 0) sum += q.entries[i].compute_ms;
    assert_true(pass == sum);
    assert_true(sd_profile_pass_ms(&q, 7) < 0);
    sd_profile_free(&q);
    /* Another machine, backend or model: stale. */
    assert_int_equal(sd_profile_load(json, "another key", &q, &e), SDNPU_ERR_STATE);
    assert_non_null(strstr(e.msg, "another model, machine or backend"));
    /* Entries that are not what a measurement makes: each a format error
     * naming what was wrong. */
    struct {
        int32_t entry;
        double compute_ms;
        int32_t block, l1, L;
        const char *says;
    } bad_entries[] = {
        {1, -1.0, 0, 0, 0, "entry 2: not a profile entry (compute_ms)"},
        {0, 1e9, 0, 0, 0, "entry 1: not a profile entry (compute_ms)"},
        {2, 0, -2, 0, 0, "entry 3: not a profile entry (block)"},
        {0, 0, 0, -1, 0, "entry 1: not a profile entry (l1)"},
        {3, 0, 0, 0, 300, "entry 4: not a profile entry (L)"},
        {1, 0, 0, 0, 1, "entry 2: a second time for its graph"}, /* (block 0, L 4) made (block 0, L 1) */
        {0, 0, 5, 0, 0, "no entry for block 0 at L=1"},
    };
    for (size_t c = 0; c < sizeof bad_entries / sizeof bad_entries[0]; c++) {
        struct sd_profile r = p;
        struct sd_profile_entry *x = &r.entries[bad_entries[c].entry], keep = *x;
        if (bad_entries[c].compute_ms) x->compute_ms = bad_entries[c].compute_ms;
        if (bad_entries[c].block) x->block = bad_entries[c].block;
        if (bad_entries[c].l1) x->l1 = x->l0 - 1;
        if (bad_entries[c].L) x->L = bad_entries[c].L;
        assert_int_equal(sd_profile_save(&r, json, &e), SDNPU_OK);
        *x = keep;
        assert_int_equal(sd_profile_load(json, p.key, &q, &e), SDNPU_ERR_FORMAT);
        if (!strstr(e.msg, bad_entries[c].says)) fail_msg("case %zu: %s", c, e.msg);
        assert_null(q.entries);
    }
    /* A head that is missing at a row count. */
    struct sd_profile r = p;
    r.n_entries--;
    assert_int_equal(sd_profile_save(&r, json, &e), SDNPU_OK);
    assert_int_equal(sd_profile_load(json, p.key, &q, &e), SDNPU_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "no entry for the head at L=16"));
    /* A corrupt entry line: a format error naming the line. */
    assert_int_equal(sd_profile_save(&p, json, &e), SDNPU_OK);
    FILE *f = fopen(json, "a");
    fputs("{\"block\": 0, \"l0\": oops}\n", f);
    fclose(f);
    assert_int_equal(sd_profile_load(json, p.key, &q, &e), SDNPU_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "not a profile: column"));
    unlink(json);
    assert_int_equal(sd_profile_load(json, p.key, &q, &e), SDNPU_ERR_NOT_FOUND);
    /* Bad row counts are refused before anything is measured. */
    const int32_t bad[] = {0};
    const struct sd_profile_spec worse = {
        .backend = "cpu", .kernels = SD_KERNELS_FAST, .Ls = bad, .n_L = 1, .reps = 1};
    assert_int_equal(sd_profile_measure(m->m, pool, &worse, &q, &e), SDNPU_ERR_INVALID_ARG);
    sd_profile_free(&p);
    sd_pool_free(pool);
    sdnpu_model_free(m);
}

/* Every entry's compute time set to cost(L) (blocks and head alike), the
 * profile saved under key, and the L2 a session with n_verify (0: its
 * choice) then prepares. */
static int32_t l2_with(struct sdnpu_model *m, const char *json, struct sd_profile *p, const double cost[7],
                       int32_t n_verify) {
    static const int32_t Ls[] = {1, 2, 3, 4, 8, 16, 32};
    for (int32_t i = 0; i < p->n_entries; i++)
        for (int j = 0; j < 7; j++)
            if (p->entries[i].L == Ls[j]) p->entries[i].compute_ms = cost[j];
    struct sd_err e = {0};
    assert_int_equal(sd_profile_save(p, json, &e), SDNPU_OK);
    struct sdnpu_session_params sp = sdnpu_session_default_params();
    sp.n_threads = 1;
    sp.n_verify = n_verify;
    struct sdnpu_session *s = NULL;
    assert_int_equal(sdnpu_session_create(m, sp, &s), SDNPU_OK);
    const int32_t L2 = sd_rt_n_verify(sd_tool_session_rt(s));
    sdnpu_session_free(s);
    return L2;
}

/* m's profile measured at L = 1, 2, 3, 4, 8, 16, 32 on one thread as `sdnpu
 * profile` measures it for a one-thread session of m (sd_tool_profile_target:
 * that session's key and weights); such a session, with no profile to read
 * yet, verifies 4 rows. */
static void measure_for_session(struct sdnpu_model *m, struct sd_profile *p) {
    struct sdnpu_session_params sp = sdnpu_session_default_params();
    sp.n_threads = 1;
    struct sdnpu_session *s = NULL;
    assert_int_equal(sdnpu_session_create(m, sp, &s), SDNPU_OK);
    assert_int_equal(sd_rt_n_verify(sd_tool_session_rt(s)), 4); /* no profile */
    sdnpu_session_free(s);
    char key[sizeof p->key];
    struct sd_wstore *weights = NULL;
    assert_int_equal(sd_tool_profile_target(m, sp, key, sizeof key, &weights), SDNPU_OK);
    assert_non_null(weights); /* sessions share the model's prepared weights by default */
    struct sd_err e = {0};
    struct sd_pool *pool = NULL;
    assert_int_equal(sd_pool_create(1, &pool, &e), SDNPU_OK);
    const int32_t Ls[] = {1, 2, 3, 4, 8, 16, 32};
    const struct sd_profile_spec spec = {
        .backend = "cpu", .kernels = SD_KERNELS_FAST, .weights = weights, .Ls = Ls, .n_L = 7, .reps = 1};
    assert_int_equal(sd_profile_measure(m->m, pool, &spec, p, &e), SDNPU_OK);
    memcpy(p->key, key, sizeof key);
    sd_pool_free(pool);
}

/* The profile without its entries of L rows (as one made before L was
 * measured). */
static void drop_rows(struct sd_profile *p, int32_t L) {
    int32_t n = 0;
    for (int32_t i = 0; i < p->n_entries; i++)
        if (p->entries[i].L != L) p->entries[n++] = p->entries[i];
    p->n_entries = n;
    n = 0;
    for (int32_t i = 0; i < p->n_L; i++)
        if (p->Ls[i] != L) p->Ls[n++] = p->Ls[i];
    p->n_L = n;
}

/* n_verify 0 (the default): 4; 3 where a step of 4 rows costs more than
 * 1.06x one of 3, and then 2 where a step of 3 costs more than 1.12x one of
 * 2; else doubled to 8 where a step of 8 rows costs at most 1.09x one of 4
 * and on while a step of twice the rows costs at most 1.05x one of half;
 * 4 without a profile or without its 3-row steps; a caller's n_verify
 * whatever the profile says. Costs at L = 1, 2, 3, 4, 8, 16, 32. */
static void test_profile_chooses_l2(void **state) {
    (void)state;
    char model[256], json[300];
    struct sdnpu_model *m = tiny_model("test_profile_l2.gguf", model, json);
    unlink(json);
    assert_int_equal(sdnpu_session_default_params().n_verify, 0);
    struct sd_profile p;
    measure_for_session(m, &p);
    assert_int_equal(l2_with(m, json, &p, (const double[7]){1.0, 1.7, 1.85, 1.9, 2.0, 2.08, 4.2}, 0), 16);
    assert_int_equal(sd_session_verify_rows(&p), 16);
    assert_int_equal(l2_with(m, json, &p, (const double[7]){1.0, 1.7, 1.85, 1.9, 2.0, 2.04, 2.1}, 0), 32);
    assert_int_equal(l2_with(m, json, &p, (const double[7]){1.0, 1.7, 1.85, 1.9, 2.0, 2.2, 2.3}, 0), 8);
    assert_int_equal(l2_with(m, json, &p, (const double[7]){1.0, 1.7, 1.85, 1.9, 2.0, 2.04, 2.1}, 8), 8);
    /* 8 rows at 1.32x and 1.41x of 4, as the instruct models on a CPU
     * with AVX-512 VNNI and no matrix unit: 4; at 1.08x, 8; at 1.10x, 4. */
    assert_int_equal(l2_with(m, json, &p, (const double[7]){1.0, 1.05, 1.08, 1.1, 1.452, 2.4, 4.0}, 0), 4);
    assert_int_equal(l2_with(m, json, &p, (const double[7]){1.0, 1.05, 1.08, 1.1, 1.551, 2.4, 4.0}, 0), 4);
    assert_int_equal(l2_with(m, json, &p, (const double[7]){1.0, 1.05, 1.08, 1.1, 1.188, 2.4, 4.0}, 0), 8);
    assert_int_equal(l2_with(m, json, &p, (const double[7]){1.0, 1.05, 1.08, 1.1, 1.21, 2.4, 4.0}, 0), 4);
    assert_int_equal(l2_with(m, json, &p, (const double[7]){1.0, 1.05, 1.08, 1.1, 1.21, 2.4, 4.0}, 8), 8);
    /* The Zen 4 EPYC's profiles of stop 92: the 1.5B's 4 rows at 1.129x
     * its 3, so 3; the 0.5B's at 1.044x, so 4. */
    assert_int_equal(l2_with(m, json, &p, (const double[7]){1.0, 1.017, 1.029, 1.163, 1.812, 4.13, 8.0}, 0),
                     3);
    /* ... and what `sdnpu profile` says of it: each ratio that decided. */
    char why[256];
    assert_int_equal(sd_session_verify_rows_why(&p, why, sizeof why), 3);
    assert_string_equal(why, "a step of 4 rows costs 1.130 times one of 3 (above 1.06); "
                             "a step of 3 rows costs 1.012 times one of 2 (at most 1.12)");
    assert_int_equal(sd_session_verify_rows_why(&p, why, 40), 3); /* cut, not overrun */
    assert_int_equal(strlen(why), 39);
    assert_int_equal(l2_with(m, json, &p, (const double[7]){1.0, 1.013, 1.038, 1.083, 1.513, 2.744, 5.5}, 0),
                     4);
    /* AVX2 alone (the Zen 3 EPYC's 0.5B): 4 rows at 1.28x its 3 and 3 at
     * 1.17x its 2, so 2; then just over each bound and just under. */
    assert_int_equal(l2_with(m, json, &p, (const double[7]){1.0, 1.079, 1.262, 1.62, 2.84, 4.9, 9.0}, 0), 2);
    assert_int_equal(l2_with(m, json, &p, (const double[7]){1.0, 1.05, 1.15, 1.2305, 2.9, 5.4, 10.0}, 0), 3);
    assert_int_equal(l2_with(m, json, &p, (const double[7]){1.0, 1.05, 1.15, 1.2075, 2.9, 5.4, 10.0}, 0), 4);
    assert_int_equal(l2_with(m, json, &p, (const double[7]){1.0, 1.0, 1.13, 1.3, 2.9, 5.4, 10.0}, 0), 2);
    assert_int_equal(l2_with(m, json, &p, (const double[7]){1.0, 1.0, 1.11, 1.3, 2.9, 5.4, 10.0}, 0), 3);
    assert_int_equal(l2_with(m, json, &p, (const double[7]){1.0, 1.079, 1.262, 1.62, 2.84, 4.9, 9.0}, 4), 4);
    /* Another key (machine, backend, threads): the profile is not this session's. */
    struct sd_profile other = p;
    sd_profile_key(model, "another backend", 1, p.key, sizeof p.key);
    assert_int_equal(l2_with(m, json, &p, (const double[7]){1.0, 1.7, 1.85, 1.9, 2.0, 2.04, 2.1}, 0), 4);
    memcpy(p.key, other.key, sizeof p.key);
    /* A profile made before 3 rows were measured keeps 4, however dear. */
    drop_rows(&p, 3);
    assert_int_equal(l2_with(m, json, &p, (const double[7]){1.0, 1.05, 1.3, 1.6, 2.9, 5.4, 10.0}, 0), 4);
    unlink(json);
    sd_profile_free(&p);
    sdnpu_model_free(m);
}

/* A model loaded through a symbolic link (as models/default.gguf is) and
 * through its file's own name share the profile beside the file; one kept
 * beside the link (where profiles were kept before) is read when the file
 * has none, and the file's wins when both exist. */
static void test_profile_follows_links(void **state) {
    (void)state;
    char real[256], real_json[300], link[256], link_json[300], path[4096], found[4096];
    struct sdnpu_model *mr = tiny_model("test_profile_real.gguf", real, real_json);
    snprintf(link, sizeof link, "%s/test_profile_link.gguf", SD_BUILD_DIR);
    snprintf(link_json, sizeof link_json, "%s.profile.json", link);
    unlink(link);
    assert_int_equal(symlink("test_profile_real.gguf", link), 0);
    struct sdnpu_model *ml = NULL;
    char err[256];
    assert_int_equal(sdnpu_model_load(link, sdnpu_model_default_params(), &ml, err, sizeof err), SDNPU_OK);
    char *canon = realpath(real, NULL);
    assert_non_null(canon);
    char want[4096];
    snprintf(want, sizeof want, "%s.profile.json", canon);
    free(canon);
    assert_true(sd_profile_path(link, path, sizeof path));
    assert_string_equal(path, want);
    assert_true(sd_profile_path(real, path, sizeof path));
    assert_string_equal(path, want);
    /* A name that resolves to nothing: beside the name. */
    assert_true(sd_profile_path("no/such/model.gguf", path, sizeof path));
    assert_string_equal(path, "no/such/model.gguf.profile.json");
    assert_false(sd_profile_path(link, path, 8));
    unlink(want);
    unlink(link_json);

    struct sd_profile p;
    struct sd_err e = {0};
    measure_for_session(ml, &p);
    struct sdnpu_session_params sp = sdnpu_session_default_params();
    sp.n_threads = 1;
    struct sdnpu_session *s = NULL;
    /* Only beside the link: read, through either name of the file's. */
    assert_int_equal(l2_with(ml, link_json, &p, (const double[7]){1.0, 1.7, 1.8, 1.9, 2.0, 2.08, 4.2}, 0),
                     16);
    struct sd_profile q;
    assert_int_equal(sd_profile_load_for(link, p.key, &q, found, sizeof found, &e), SDNPU_OK);
    assert_string_equal(found, link_json);
    sd_profile_free(&q);
    /* Beside the file: the file's wins, and both names read it. */
    assert_int_equal(l2_with(ml, want, &p, (const double[7]){1.0, 1.7, 1.8, 1.9, 2.0, 2.04, 2.1}, 0), 32);
    assert_int_equal(sd_profile_load_for(real, p.key, &q, found, sizeof found, &e), SDNPU_OK);
    assert_string_equal(found, want);
    sd_profile_free(&q);
    assert_int_equal(sdnpu_session_create(mr, sp, &s), SDNPU_OK);
    assert_int_equal(sd_rt_n_verify(sd_tool_session_rt(s)), 32);
    sdnpu_session_free(s);
    /* Neither: not found. */
    unlink(want);
    unlink(link_json);
    assert_int_equal(sd_profile_load_for(link, p.key, &q, NULL, 0, &e), SDNPU_ERR_NOT_FOUND);
    sd_profile_free(&p);
    sdnpu_model_free(ml);
    sdnpu_model_free(mr);
    unlink(link);
}

/* k greedy tokens after toks[0, n), by a one-thread session of m: each
 * the first maximum of the logits sdnpu_session_eval gives. */
static void session_greedy(struct sdnpu_model *m, const int32_t *toks, int32_t n, int32_t k, int32_t *out) {
    struct sdnpu_session_params sp = sdnpu_session_default_params();
    sp.n_threads = 1;
    struct sdnpu_session *s = NULL;
    assert_int_equal(sdnpu_session_create(m, sp, &s), SDNPU_OK);
    const size_t V = (size_t)sdnpu_model_n_vocab(m);
    float *lg = malloc((size_t)n * V * sizeof *lg);
    assert_non_null(lg);
    assert_int_equal(sdnpu_session_eval(s, toks, (size_t)n, lg, (size_t)n * V), SDNPU_OK);
    const float *last = lg + (size_t)(n - 1) * V;
    for (int32_t i = 0; i < k; i++) {
        size_t best = 0;
        for (size_t t = 1; t < V; t++)
            if (last[t] > last[best]) best = t;
        out[i] = (int32_t)best;
        assert_int_equal(sdnpu_session_eval(s, &out[i], 1, lg, V), SDNPU_OK);
        last = lg;
    }
    free(lg);
    sdnpu_session_free(s);
}

/* The head is timed first on rows greedy decoding computes: the tokens the
 * profile decoded after a prompt, and after the text alone (its
 * SD_MAX_BATCH_ROWS rows, the tokens repeated), are a session's greedy
 * tokens after the same; a prompt longer than the profile reads is refused
 * before anything is measured. */
static void test_profile_decodes_own_rows(void **state) {
    (void)state;
    char model[256], json[300];
    struct sdnpu_model *m = tiny_model("test_profile_own.gguf", model, json);
    struct sd_pool *pool = NULL;
    struct sd_err e = {0};
    assert_int_equal(sd_pool_create(1, &pool, &e), SDNPU_OK);
    int32_t text[40], prompt[SD_PROFILE_MAX_PROMPT + 1], rows[SD_MAX_BATCH_ROWS], want[SD_PROFILE_MAX_REPS];
    for (int32_t i = 0; i < 40; i++)
        text[i] = 3 + (i * 37) % 250;
    for (int32_t i = 0; i <= SD_PROFILE_MAX_PROMPT; i++)
        prompt[i] = 3 + (i * 11 + 5) % 250;
    const int32_t Ls[] = {1, 2};
    struct sd_profile_spec spec = {.backend = "cpu",
                                   .kernels = SD_KERNELS_FAST,
                                   .Ls = Ls,
                                   .n_L = 2,
                                   .reps = 2,
                                   .tokens = text,
                                   .n_tokens = 40,
                                   .prompt = prompt,
                                   .n_prompt = 20};
    struct sd_profile p;
    assert_int_equal(sd_profile_measure(m->m, pool, &spec, &p, &e), SDNPU_OK);
    assert_true(p.n_decoded >= spec.reps && p.n_decoded <= SD_PROFILE_MAX_REPS);
    session_greedy(m, prompt, 20, p.n_decoded, want);
    assert_memory_equal(p.decoded, want, (size_t)p.n_decoded * sizeof *want);
    sd_profile_free(&p);
    spec.prompt = NULL;
    spec.n_prompt = 0;
    assert_int_equal(sd_profile_measure(m->m, pool, &spec, &p, &e), SDNPU_OK);
    for (int32_t r = 0; r < SD_MAX_BATCH_ROWS; r++)
        rows[r] = text[r % 40];
    session_greedy(m, rows, SD_MAX_BATCH_ROWS, p.n_decoded, want);
    assert_memory_equal(p.decoded, want, (size_t)p.n_decoded * sizeof *want);
    sd_profile_free(&p);
    spec.prompt = prompt;
    spec.n_prompt = SD_PROFILE_MAX_PROMPT + 1;
    assert_int_equal(sd_profile_measure(m->m, pool, &spec, &p, &e), SDNPU_ERR_INVALID_ARG);
    assert_non_null(strstr(e.msg, "prompt"));
    sd_pool_free(pool);
    sdnpu_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_profile_roundtrip), cmocka_unit_test(test_profile_chooses_l2),
        cmocka_unit_test(test_profile_follows_links), cmocka_unit_test(test_profile_decodes_own_rows)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
