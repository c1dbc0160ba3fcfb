/* tests/test_request.c - sdnpu_session_request: the prompt it builds from
 * documents and an instruction, its history, its switches. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sdnpu.h"
#include "util_common.h"
#include "util_tiny_model.h"


static struct sdnpu_model *tiny(void) {
    char path[256];
    snprintf(path, sizeof path, "%s/test_request_tiny.gguf", SD_BUILD_DIR);
    struct sdt_tiny_opts o = {.arch = "gemma3"};
    assert_int_equal(sdt_tiny_write(&o, path), 0);
    struct sdnpu_model *m = NULL;
    char err[256];
    assert_int_equal(sdnpu_model_load(path, sdnpu_model_default_params(), &m, err, sizeof err), SDNPU_OK);
    return m;
}

/* A request equals generate() on the documents and instruction joined by
 * blank lines (the base-model layout), on a fresh context. */
static void test_request_prompt(void **state) {
    (void)state;
    struct sdnpu_model *m = tiny();
    struct sdnpu_session *s;
    assert_int_equal(sdnpu_session_create(m, sdnpu_session_default_params(), &s), SDNPU_OK);
    const char *docs[] = {"abc abd abe abc abd", "xyz xyz abc"};
    struct sdnpu_request r = sdnpu_request_default_params();
    assert_int_equal(r.gen.spec.drafter, SDNPU_DRAFTER_SAM);
    assert_false(r.gen.spec.reuse || r.gen.spec.calibration || r.gen.spec.graph_switching);
    assert_true(r.gen.adaptive); /* cost-aware drafting is on unless turned off */
    r.instruction = "TL;DR:";
    r.documents = docs;
    r.n_documents = 2;
    r.gen.n_predict = 12;
    struct sdt_text a = {0}, b = {0};
    r.gen.on_text = sdt_collect;
    r.gen.user = &a;
    struct sdnpu_stats st;
    /* Something already in the context must not leak into the request. */
    assert_int_equal(sdnpu_session_eval(s, (const sdnpu_token[]){5, 6, 7}, 3, NULL, 0), SDNPU_OK);
    assert_int_equal(sdnpu_session_request(s, &r, &st), SDNPU_OK);
    assert_true(st.n_generated > 0);
    int32_t n_prompt = st.n_prompt_tokens;
    sdnpu_session_reset(s);
    const char *joined = "abc abd abe abc abd\n\nxyz xyz abc\n\nTL;DR:";
    struct sdnpu_generate_params gp = r.gen;
    gp.spec = (struct sdnpu_spec){SDNPU_DRAFTER_NONE, false, false, false};
    gp.user = &b;
    assert_int_equal(sdnpu_session_generate(s, joined, strlen(joined), &gp, &st), SDNPU_OK);
    assert_int_equal(st.n_prompt_tokens, n_prompt);
    assert_int_equal(a.n, b.n);
    assert_memory_equal(a.buf, b.buf, a.n);
    sdnpu_session_free(s);
    sdnpu_model_free(m);
}

/* The generated text and prompt length of one request on a fresh session. */
static int32_t request_text(struct sdnpu_session *s, const struct sdnpu_request *r, struct sdt_text *t) {
    struct sdnpu_request q = *r;
    q.gen.on_text = sdt_collect;
    q.gen.user = t;
    struct sdnpu_stats st;
    assert_int_equal(sdnpu_session_request(s, &q, &st), SDNPU_OK);
    return st.n_prompt_tokens;
}

/* The user's text for an instruction-tuned model: each document between
 * tag lines, a blank line after each, then the text; the size probed as
 * every buffer of the API is. */
static void test_documents_format(void **state) {
    (void)state;
    const char *docs[] = {"first\nnotes", "", "third"};
    const char *want = "<document>\nfirst\nnotes\n</document>\n\n<document>\n\n</document>\n\n"
                       "<document>\nthird\n</document>\n\nWhat now?";
    char buf[256];
    size_t n = 0;
    assert_int_equal(sdnpu_documents_format(docs, 3, "What now?", NULL, 0, &n), SDNPU_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(n, strlen(want) + 1);
    memset(buf, 'x', sizeof buf);
    assert_int_equal(sdnpu_documents_format(docs, 3, "What now?", buf, strlen(want), &n),
                     SDNPU_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(n, strlen(want) + 1);
    assert_int_equal(buf[0], 'x'); /* nothing written where it does not fit */
    assert_int_equal(sdnpu_documents_format(docs, 3, "What now?", buf, strlen(want) + 1, &n), SDNPU_OK);
    assert_int_equal(n, strlen(want));
    assert_string_equal(buf, want);
    /* No documents: the text alone. */
    assert_int_equal(sdnpu_documents_format(NULL, 0, "Hi", buf, sizeof buf, &n), SDNPU_OK);
    assert_string_equal(buf, "Hi");
    assert_int_equal(n, 2);
}

/* A tiny qwen2 model with chat_template, written as BUILD/name, loaded. */
static struct sdnpu_model *chat_model(const char *name, const char *chat_template) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", SD_BUILD_DIR, name);
    struct sdt_tiny_opts o = {.arch = "qwen2", .chat_template = chat_template};
    assert_int_equal(sdt_tiny_write(&o, path), 0);
    struct sdnpu_model *m = NULL;
    char err[256];
    assert_int_equal(sdnpu_model_load(path, sdnpu_model_default_params(), &m, err, sizeof err), SDNPU_OK);
    return m;
}

/* An instruction-tuned model (a file with a chat template): the request is
 * a system turn (the request's own, else the default task statement) and a
 * user turn of the documents in tags and the instruction: the same prompt
 * and output as generate() with chat on and that system text. */
static void test_request_chat_turns(void **state) {
    (void)state;
    struct sdnpu_model *m = chat_model("test_request_chatml.gguf",
                                       "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
                                       "<|im_end|>\n{% endfor %}");
    assert_true(sdnpu_model_has_chat_template(m));
    struct sdnpu_session *s;
    assert_int_equal(sdnpu_session_create(m, sdnpu_session_default_params(), &s), SDNPU_OK);
    const char *docs[] = {"abc abd abe abc abd", "xyz xyz abc"};
    const char *user =
        "<document>\nabc abd abe abc abd\n</document>\n\n<document>\nxyz xyz abc\n</document>\n\n"
        "Summarize.";
    struct sdnpu_request r = sdnpu_request_default_params();
    r.instruction = "Summarize.";
    r.documents = docs;
    r.n_documents = 2;
    r.gen.n_predict = 8;
    const char *systems[] = {NULL, "Be brief."};
    for (int k = 0; k < 2; k++) {
        r.gen.system = systems[k];
        struct sdt_text a = {0}, b = {0};
        int32_t n_req = request_text(s, &r, &a);
        sdnpu_session_reset(s);
        struct sdnpu_generate_params gp = r.gen;
        gp.chat = true;
        gp.system = k ? systems[k] : "You are a helpful assistant. Answer from the documents the user gives.";
        gp.on_text = sdt_collect;
        gp.user = &b;
        struct sdnpu_stats st;
        assert_int_equal(sdnpu_session_generate(s, user, strlen(user), &gp, &st), SDNPU_OK);
        assert_int_equal(st.n_prompt_tokens, n_req);
        assert_int_equal(a.n, b.n);
        assert_memory_equal(a.buf, b.buf, a.n);
        /* Without the system turn the prompt is shorter: it was there. */
        sdnpu_session_reset(s);
        gp.system = NULL;
        gp.on_text = NULL;
        assert_int_equal(sdnpu_session_generate(s, user, strlen(user), &gp, &st), SDNPU_OK);
        assert_true(st.n_prompt_tokens < n_req);
    }
    sdnpu_session_free(s);
    sdnpu_model_free(m);
}

/* A template with a system turn of its own (as Qwen2's): generate()
 * without system text renders it, with "" none; a request takes the
 * request API's turn, or none for "" (as `sdnpu summarize` asks). */
static void test_request_system_turns(void **state) {
    (void)state;
    struct sdnpu_model *m = chat_model("test_request_default_system.gguf",
                                       "{% if messages[0]['role'] != 'system' %}{{ "
                                       "'<|im_start|>system\\nBe terse.<|im_end|>\\n' }}{% endif %}"
                                       "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
                                       "<|im_end|>\n{% endfor %}");
    struct sdnpu_session *s;
    assert_int_equal(sdnpu_session_create(m, sdnpu_session_default_params(), &s), SDNPU_OK);
    const char *user = "<document>\nabc abd abe abc abd\n</document>\n\nSummarize.";
    struct sdnpu_generate_params gp = sdnpu_request_default_params().gen; /* greedy, as a request */
    gp.chat = true;
    gp.n_predict = 8;
    gp.new_context = true;
    const char *systems[] = {NULL, "Be terse.", ""};
    int32_t n[3];
    struct sdt_text none = {0};
    for (int k = 0; k < 3; k++) {
        gp.system = systems[k];
        gp.on_text = k == 2 ? sdt_collect : NULL;
        gp.user = &none;
        struct sdnpu_stats st;
        assert_int_equal(sdnpu_session_generate(s, user, strlen(user), &gp, &st), SDNPU_OK);
        n[k] = st.n_prompt_tokens;
    }
    assert_int_equal(n[0], n[1]); /* NULL: the template's text, as a system message */
    assert_true(n[2] < n[0]);     /* "": no system turn */
    const char *docs[] = {"abc abd abe abc abd"};
    struct sdnpu_request r = sdnpu_request_default_params();
    r.instruction = "Summarize.";
    r.documents = docs;
    r.n_documents = 1;
    r.gen.n_predict = 8;
    struct sdt_text a = {0};
    assert_true(request_text(s, &r, &a) > n[0]); /* the request API's turn, longer than the template's */
    r.gen.system = "";
    memset(&a, 0, sizeof a);
    assert_int_equal(request_text(s, &r, &a), n[2]);
    assert_int_equal(a.n, none.n);
    assert_memory_equal(a.buf, none.buf, a.n);
    sdnpu_session_free(s);
    sdnpu_model_free(m);
}

static void test_request_history_and_switches(void **state) {
    (void)state;
    struct sdnpu_model *m = tiny();
    struct sdnpu_session *s;
    assert_int_equal(sdnpu_session_create(m, sdnpu_session_default_params(), &s), SDNPU_OK);
    char hist[256];
    snprintf(hist, sizeof hist, "%s/test_request_history.bin", SD_BUILD_DIR);
    unlink(hist);
    struct sdnpu_request r = sdnpu_request_default_params();
    r.instruction = "ab ab ab";
    r.history_path = hist;
    r.gen.n_predict = 6;
    assert_int_equal(sdnpu_session_request(s, &r, NULL), SDNPU_OK);
    assert_int_equal(access(hist, R_OK), 0); /* the reply was recorded */
    r.history_path = NULL;
    sdnpu_session_reset(s);
    assert_int_equal(sdnpu_session_eval(s, (const sdnpu_token[]){5, 6}, 2, NULL, 0), SDNPU_OK);
    /* The reuse switch runs the method with "+reuse": the same text. */
    {
        struct sdnpu_request q = r;
        struct sdt_text a = {0}, b = {0};
        q.gen.n_predict = 24;
        q.gen.on_text = sdt_collect;
        q.gen.user = &a;
        struct sdnpu_stats st;
        assert_int_equal(sdnpu_session_request(s, &q, &st), SDNPU_OK);
        assert_int_equal(st.n_reuse_drafted, 0);
        q.gen.spec.reuse = true;
        q.gen.user = &b;
        assert_int_equal(sdnpu_session_request(s, &q, &st), SDNPU_OK);
        assert_true(st.n_reuse_accepted <= st.n_reuse_drafted && st.n_reuse_drafted <= st.n_drafted);
        assert_int_equal(a.n, b.n);
        assert_memory_equal(a.buf, b.buf, a.n);
        /* The calibration switch: the same text again, with a calibrated store built. */
        struct sdt_text c = {0};
        q.gen.spec.calibration = true;
        q.gen.user = &c;
        assert_int_equal(sdnpu_session_request(s, &q, &st), SDNPU_OK);
        assert_true(st.n_calib_records > 0 && st.calib_bytes > 0 && st.calib_ms >= 0);
        assert_int_equal(a.n, c.n);
        assert_memory_equal(a.buf, c.buf, a.n);
        /* Reuse and calibration need a drafter. */
        q.gen.spec.drafter = SDNPU_DRAFTER_NPU_VANILLA;
        q.gen.spec.calibration = false;
        assert_int_equal(sdnpu_session_request(s, &q, NULL), SDNPU_ERR_INVALID_ARG);
        assert_non_null(strstr(sdnpu_session_last_error(s), "reuse"));
        q.gen.spec.reuse = false;
        q.gen.spec.calibration = true;
        assert_int_equal(sdnpu_session_request(s, &q, NULL), SDNPU_ERR_INVALID_ARG);
        assert_non_null(strstr(sdnpu_session_last_error(s), "calib needs a drafting drafter"));
        /* Graph switching, and the full method, in each mode of a session:
         * the same text (the context is the same: reset and prefill again). */
        for (int32_t mode = 0; mode < 3; mode++) {
            struct sdnpu_session_params sp = sdnpu_session_default_params();
            sp.graph_switch = (enum sdnpu_graph_switch)mode;
            struct sdnpu_session *s2;
            assert_int_equal(sdnpu_session_create(m, sp, &s2), SDNPU_OK);
            const char *specs[] = {"sam-tree+switch", "sdnpu", "none+switch"};
            for (int k = 0; k < 3; k++) {
                static struct sdt_text t;
                t.n = 0;
                struct sdnpu_request w = q;
                w.gen.user = &t;
                assert_int_equal(sdnpu_spec_parse(specs[k], &w.gen.spec, NULL, 0), SDNPU_OK);
                sdnpu_session_reset(s2);
                assert_int_equal(sdnpu_session_eval(s2, (const sdnpu_token[]){5, 6}, 2, NULL, 0), SDNPU_OK);
                assert_int_equal(sdnpu_session_request(s2, &w, &st), SDNPU_OK);
                assert_int_equal(a.n, t.n);
                assert_memory_equal(a.buf, t.buf, a.n);
            }
            sdnpu_session_free(s2);
        }
        {
            struct sdnpu_session_params sp = sdnpu_session_default_params();
            struct sdnpu_session *s3 = NULL;
            sp.graph_switch = (enum sdnpu_graph_switch)3; /* no such mode */
            assert_int_equal(sdnpu_session_create(m, sp, &s3), SDNPU_ERR_INVALID_ARG);
            assert_non_null(strstr(sdnpu_model_last_error(m), "graph_switch 3"));
        }
    }
    assert_int_equal(sdnpu_session_request(NULL, &r, NULL), SDNPU_ERR_INVALID_ARG);
    assert_int_equal(sdnpu_session_request(s, NULL, NULL), SDNPU_ERR_INVALID_ARG);
    r.n_documents = 1;
    assert_int_equal(sdnpu_session_request(s, &r, NULL), SDNPU_ERR_INVALID_ARG);
    r.gen.spec.drafter = (enum sdnpu_drafter)99;
    r.n_documents = 0;
    sdnpu_session_reset(s);
    assert_int_equal(sdnpu_session_request(s, &r, NULL), SDNPU_ERR_INVALID_ARG);
    assert_int_equal(sdnpu_session_n_past(s), 0); /* an unknown drafter evaluates nothing */
    sdnpu_session_free(s);
    sdnpu_model_free(m);
    unlink(hist);
}

/* The spec text: every drafter and stage, any order; the canonical text
 * parses back to the same struct; bad text is named. */
static void test_spec_parse(void **state) {
    (void)state;
    struct sdnpu_spec sp;
    char err[256], buf[64];
    const struct {
        const char *text, *canon;
        enum sdnpu_drafter d;
        bool reuse, calib, sw;
    } ok[] = {
        {NULL, "none", SDNPU_DRAFTER_NONE, 0, 0, 0},
        {"", "none", SDNPU_DRAFTER_NONE, 0, 0, 0},
        {"cpu-vanilla", "none", SDNPU_DRAFTER_NONE, 0, 0, 0},
        {"npu-vanilla", "npu-vanilla", SDNPU_DRAFTER_NPU_VANILLA, 0, 0, 0},
        {"pld+reuse", "pld+reuse", SDNPU_DRAFTER_PLD, 1, 0, 0},
        {"sam+calib+reuse", "sam+reuse+calib", SDNPU_DRAFTER_SAM, 1, 1, 0},
        {"sam-tree+switch+reuse", "sam-tree+reuse+switch", SDNPU_DRAFTER_SAM_TREE, 1, 0, 1},
        {"sdnpu", "sam-tree+reuse+calib+switch", SDNPU_DRAFTER_SAM_TREE, 1, 1, 1},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        assert_int_equal(sdnpu_spec_parse(ok[i].text, &sp, err, sizeof err), SDNPU_OK);
        assert_int_equal(sp.drafter, ok[i].d);
        assert_int_equal(sp.reuse, ok[i].reuse);
        assert_int_equal(sp.calibration, ok[i].calib);
        assert_int_equal(sp.graph_switching, ok[i].sw);
        size_t n_buf = 0;
        assert_int_equal(sdnpu_spec_str(sp, buf, sizeof buf, &n_buf), SDNPU_OK);
        assert_int_equal(n_buf, strlen(ok[i].canon));
        assert_string_equal(buf, ok[i].canon);
        struct sdnpu_spec back;
        assert_int_equal(sdnpu_spec_parse(buf, &back, NULL, 0), SDNPU_OK);
        assert_true(back.drafter == sp.drafter && back.reuse == sp.reuse && back.calibration == sp.calibration &&
                    back.graph_switching == sp.graph_switching);
    }
    size_t need = 0;
    assert_int_equal(sdnpu_spec_str(sp, buf, 4, &need), SDNPU_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(need, strlen("sam-tree+reuse+calib+switch") + 1);
    assert_int_equal(sdnpu_spec_str(sp, NULL, 0, &need), SDNPU_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(need, strlen("sam-tree+reuse+calib+switch") + 1);
    assert_int_equal(sdnpu_spec_str(sp, buf, sizeof buf, NULL), SDNPU_ERR_INVALID_ARG);
    const struct {
        const char *text, *says;
    } bad[] = {{"sam+", "empty"},           {"+reuse", "empty"},       {"sam++reuse", "empty"},
               {"reuse", "unknown drafter"}, {"sam+sam", "unknown stage"}, {"sam+reuse+reuse", "twice"},
               {"SAM", "unknown drafter"},   {"sam+calibration", "unknown stage 'calibration'"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(sdnpu_spec_parse(bad[i].text, &sp, err, sizeof err), SDNPU_ERR_INVALID_ARG);
        assert_non_null(strstr(err, bad[i].says));
    }
    assert_int_equal(sdnpu_spec_parse("sam", NULL, NULL, 0), SDNPU_ERR_INVALID_ARG);
    /* What a build can run. */
    assert_int_equal(sdnpu_spec_parse("npu-vanilla+reuse", &sp, NULL, 0), SDNPU_OK);
    assert_int_equal(sdnpu_spec_check(sp, err, sizeof err), SDNPU_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "reuse needs a drafting drafter"));
    assert_int_equal(sdnpu_spec_parse("sam-tree+reuse", &sp, NULL, 0), SDNPU_OK);
    assert_int_equal(sdnpu_spec_check(sp, err, sizeof err), SDNPU_OK);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_parse),         cmocka_unit_test(test_documents_format),
        cmocka_unit_test(test_request_chat_turns), cmocka_unit_test(test_request_system_turns),
        cmocka_unit_test(test_request_prompt),     cmocka_unit_test(test_request_history_and_switches),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
