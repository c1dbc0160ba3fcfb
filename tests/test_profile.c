/* tests/test_profile.c - the graph profile: measured on a tiny model, saved
 * as JSON, read back equal; a stale key, a corrupt or missing file are
 * statuses; a session uses a matching profile beside its model. */
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
#include "sched/profile.h"
#include "util_tiny_model.h"

static void test_profile_roundtrip(void **state) {
    (void)state;
    char model[256], json[300];
    snprintf(model, sizeof model, "%s/test_profile_tiny.gguf", SD_BUILD_DIR);
    snprintf(json, sizeof json, "%s.profile.json", model);
    struct sdt_tiny_opts o = {.arch = "qwen2"};
    assert_int_equal(sdt_tiny_write(&o, model), 0);
    struct sdnpu_model *m = NULL;
    char err[256];
    assert_int_equal(sdnpu_model_load(model, sdnpu_model_default_params(), &m, err, sizeof err), SDNPU_OK);
    struct sd_pool *pool = NULL;
    struct sd_err e = {0};
    assert_int_equal(sd_pool_create(1, &pool, &e), SDNPU_OK);
    const int32_t Ls[] = {1, 4, 16};
    struct sd_profile p, q;
    assert_int_equal(sd_profile_measure(m->m, pool, "cpu", 0, SD_KERNELS_FAST, Ls, 3, 2, NULL, NULL, &p, &e), SDNPU_OK);
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
    /* A corrupt entry line: a format error naming the line. */
    FILE *f = fopen(json, "a");
    fputs("{\"block\": 0, \"l0\": oops}\n", f);
    fclose(f);
    assert_int_equal(sd_profile_load(json, p.key, &q, &e), SDNPU_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "not a profile entry"));
    unlink(json);
    assert_int_equal(sd_profile_load(json, p.key, &q, &e), SDNPU_ERR_NOT_FOUND);
    /* Bad row counts are refused before anything is measured. */
    const int32_t bad[] = {0};
    assert_int_equal(sd_profile_measure(m->m, pool, "cpu", 0, SD_KERNELS_FAST, bad, 1, 1, NULL, NULL, &q, &e), SDNPU_ERR_INVALID_ARG);
    sd_profile_free(&p);
    sd_pool_free(pool);
    sdnpu_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_profile_roundtrip)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
