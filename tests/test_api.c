/* tests/test_api.c - the public API's contract: NULL handles, wrong order,
 * status names, buffer probing, failure messages, allocation failure, a
 * dirty heap. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sdnpu.h"
#include "util_common.h"
#include "util_tiny_model.h"

static const char *tiny(void) {
    static char path[256];
    snprintf(path, sizeof path, "%s/test_api_tiny.gguf", SD_BUILD_DIR);
    struct sdt_tiny_opts o = {.arch = "gemma3"};
    assert_int_equal(sdt_tiny_write(&o, path), 0);
    return path;
}

static void test_status_names(void **state) {
    (void)state;
    assert_string_equal(sdnpu_status_str(SDNPU_OK), "SDNPU_OK");
    assert_string_equal(sdnpu_status_str(SDNPU_ERR_CONTEXT_FULL), "SDNPU_ERR_CONTEXT_FULL");
    assert_string_equal(sdnpu_status_str(SDNPU_ABORTED), "SDNPU_ABORTED");
    assert_non_null(sdnpu_status_str((enum sdnpu_status)12345));
}

static void test_null_handles(void **state) {
    (void)state;
    sdnpu_model_free(NULL);
    sdnpu_session_free(NULL);
    sdnpu_session_cancel(NULL);
    sdnpu_session_reset(NULL);
    assert_string_equal(sdnpu_model_last_error(NULL), "");
    assert_string_equal(sdnpu_session_last_error(NULL), "");
    size_t n;
    sdnpu_token t[4];
    assert_int_equal(sdnpu_tokenize(NULL, "a", 1, 0, t, 4, &n), SDNPU_ERR_INVALID_ARG);
    assert_int_equal(sdnpu_session_eval(NULL, t, 1, NULL, 0), SDNPU_ERR_INVALID_ARG);
    struct sdnpu_session *s = (struct sdnpu_session *)0x1;
    assert_int_equal(sdnpu_session_create(NULL, sdnpu_session_default_params(), &s), SDNPU_ERR_INVALID_ARG);
    assert_null(s);
    struct sdnpu_model *m = (struct sdnpu_model *)0x1;
    char err[256];
    assert_int_equal(sdnpu_model_load(NULL, sdnpu_model_default_params(), &m, err, sizeof err), SDNPU_ERR_INVALID_ARG);
    assert_null(m);
    assert_int_equal(sdnpu_model_load("/nonexistent/x.gguf", sdnpu_model_default_params(), &m, err, sizeof err),
                     SDNPU_ERR_NOT_FOUND);
    assert_non_null(strstr(err, "/nonexistent/x.gguf"));
}

static void test_probing(void **state) {
    (void)state;
    struct sdnpu_model *m;
    char err[256];
    assert_int_equal(sdnpu_model_load(tiny(), sdnpu_model_default_params(), &m, err, sizeof err), SDNPU_OK);
    size_t n = 0;
    sdnpu_token t[64];
    assert_int_equal(sdnpu_tokenize(m, "abc def", 7, SDNPU_TOKENIZE_ADD_SPECIAL, t, 1, &n),
                     SDNPU_ERR_BUFFER_TOO_SMALL);
    size_t need = n;
    assert_true(need > 1);
    assert_int_equal(sdnpu_tokenize(m, "abc def", 7, SDNPU_TOKENIZE_ADD_SPECIAL, t, need, &n), SDNPU_OK);
    assert_int_equal(n, need);
    char text[64];
    size_t nb;
    assert_int_equal(sdnpu_detokenize(m, t, n, false, text, 2, &nb), SDNPU_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(nb, 7);
    assert_int_equal(sdnpu_detokenize(m, t, n, false, text, sizeof text, &nb), SDNPU_OK);
    assert_memory_equal(text, "abc def", 7);
    /* Invalid UTF-8 names the offset. */
    assert_int_equal(sdnpu_tokenize(m, "ab\xff", 3, 0, t, 64, &n), SDNPU_ERR_INVALID_UTF8);
    assert_non_null(strstr(sdnpu_model_last_error(m), "2"));
    assert_int_equal(sdnpu_tokenize(m, "ab\xff", 3, SDNPU_TOKENIZE_REPLACE_INVALID, t, 64, &n), SDNPU_OK);
    /* Chat formatting probes the same way. */
    struct sdnpu_chat_message msg = {"user", "Hi"};
    assert_int_equal(sdnpu_chat_format(m, &msg, 1, true, text, 4, &nb), SDNPU_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(sdnpu_chat_format(m, &msg, 1, true, text, sizeof text, &nb), SDNPU_OK);
    /* The tiny file has turn markers in its vocabulary but no template: a
     * base model, given the plain script. */
    assert_string_equal(text, "User: Hi\nAssistant:");
    assert_false(sdnpu_model_has_chat_template(m));
    sdnpu_model_free(m);
}

/* The format comes from the file's template, recognized by its markers. */
static void test_chat_detect(void **state) {
    (void)state;
    static const struct {
        const char *templ, *want;
    } cases[] = {
        {"{% for m in messages %}<start_of_turn>{{ m.role }}\n{{ m.content }}<end_of_turn>\n{% endfor %}",
         "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"},
        {"{% for m in messages %}{{'<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>'}}{% endfor %}",
         "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"},
        {"{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>{% endfor %}",
         "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
        {"{% for m in messages %}### {{ m.role }}: {{ m.content }}{% endfor %}", "User: Hi\nAssistant:"},
    };
    char path[256];
    snprintf(path, sizeof path, "%s/test_api_tiny_templ.gguf", SD_BUILD_DIR);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct sdt_tiny_opts o = {.arch = "gemma3", .chat_template = cases[i].templ};
        assert_int_equal(sdt_tiny_write(&o, path), 0);
        struct sdnpu_model_params mp = sdnpu_model_default_params();
        mp.vocab_only = true;
        struct sdnpu_model *m;
        char err[256];
        assert_int_equal(sdnpu_model_load(path, mp, &m, err, sizeof err), SDNPU_OK);
        assert_true(sdnpu_model_has_chat_template(m));
        struct sdnpu_chat_message msg = {"user", "Hi"};
        char text[256];
        size_t nb;
        assert_int_equal(sdnpu_chat_format(m, &msg, 1, true, text, sizeof text, &nb), SDNPU_OK);
        assert_string_equal(text, cases[i].want);
        sdnpu_model_free(m);
    }
    /* A template that calls tools: the tools' JSON written in the system
     * turn as json.dumps writes it; not an array of objects refused; an
     * empty array renders as no tools. */
    struct sdt_tiny_opts o = {.arch = "gemma3",
                              .chat_template = "'<|im_start|>system\\n' \"\\n\\n# Tools\\n<tools>\" "
                                               "\"\\n</tools>\\n<tool_call><|im_end|>\\n\" <tool_response>"};
    assert_int_equal(sdt_tiny_write(&o, path), 0);
    struct sdnpu_model_params mp = sdnpu_model_default_params();
    mp.vocab_only = true;
    struct sdnpu_model *m;
    char err[256], text[512];
    size_t nb;
    assert_int_equal(sdnpu_model_load(path, mp, &m, err, sizeof err), SDNPU_OK);
    assert_true(sdnpu_model_chat_tools(m));
    struct sdnpu_chat_message msg = {"user", "Hi"};
    assert_int_equal(sdnpu_chat_format_tools(m, &msg, 1, "[{\"b\":[1,\"\u00e9\"],\"a\":{}}]", true, text,
                                             sizeof text, &nb),
                     SDNPU_OK);
    assert_string_equal(
        text, "<|im_start|>system\n\n\n# Tools\n<tools>\n{\"b\": [1, \"\xc3\xa9\"], \"a\": {}}\n"
              "</tools>\n<tool_call><|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    assert_int_equal(sdnpu_chat_format_tools(m, &msg, 1, "{}", true, text, sizeof text, &nb),
                     SDNPU_ERR_INVALID_ARG);
    assert_int_equal(sdnpu_chat_format_tools(m, &msg, 1, "[1]", true, text, sizeof text, &nb),
                     SDNPU_ERR_INVALID_ARG);
    assert_int_equal(sdnpu_chat_format_tools(m, &msg, 1, "[", true, text, sizeof text, &nb),
                     SDNPU_ERR_INVALID_ARG);
    assert_int_equal(sdnpu_chat_format_tools(m, &msg, 1, "[]", true, text, sizeof text, &nb), SDNPU_OK);
    assert_string_equal(text, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    sdnpu_model_free(m);
}

static void test_vocab_only_session(void **state) {
    (void)state;
    struct sdnpu_model_params mp = sdnpu_model_default_params();
    mp.vocab_only = true;
    struct sdnpu_model *m;
    char err[256];
    assert_int_equal(sdnpu_model_load(tiny(), mp, &m, err, sizeof err), SDNPU_OK);
    struct sdnpu_session *s = (struct sdnpu_session *)0x1;
    assert_int_equal(sdnpu_session_create(m, sdnpu_session_default_params(), &s), SDNPU_ERR_STATE);
    assert_null(s);
    assert_non_null(strstr(sdnpu_model_last_error(m), "vocab_only"));
    sdnpu_model_free(m);
}

static bool stop_after_3(const char *piece, size_t len, void *user) {
    int *n = user;
    (void)piece;
    (void)len;
    return ++*n < 3;
}

static void test_callback_stops(void **state) {
    (void)state;
    struct sdnpu_model *m;
    char err[256];
    assert_int_equal(sdnpu_model_load(tiny(), sdnpu_model_default_params(), &m, err, sizeof err), SDNPU_OK);
    struct sdnpu_session *s;
    assert_int_equal(sdnpu_session_create(m, sdnpu_session_default_params(), &s), SDNPU_OK);
    struct sdnpu_generate_params gp = sdnpu_generate_default_params();
    int calls = 0;
    gp.n_predict = 50;
    gp.on_text = stop_after_3;
    gp.user = &calls;
    struct sdnpu_stats st;
    assert_int_equal(sdnpu_session_generate(s, "abc", 3, &gp, &st), SDNPU_ABORTED);
    assert_int_equal(calls, 3);
    assert_int_equal(st.stop_reason, SDNPU_STOP_CALLBACK);
    sdnpu_session_free(s);
    sdnpu_model_free(m);
}

/* Every allocation of load + session + generate may fail: each failure is a
 * status, and nothing leaks. */
static void test_alloc_failures(void **state) {
    (void)state;
    const char *path = tiny();
    sdt_alloc_install();
    long base = sdt_alloc_live();
    int ok = 0;
    for (long fail = 0; fail < 4000 && !ok; fail++) {
        sdt_alloc_fail_after(fail);
        struct sdnpu_model *m = NULL;
        char err[256];
        int rc = sdnpu_model_load(path, sdnpu_model_default_params(), &m, err, sizeof err);
        if (rc == SDNPU_OK) {
            struct sdnpu_session *s = NULL;
            rc = sdnpu_session_create(m, sdnpu_session_default_params(), &s);
            if (rc == SDNPU_OK) {
                struct sdnpu_generate_params gp = sdnpu_generate_default_params();
                gp.n_predict = 4;
                rc = sdnpu_session_generate(s, "ab", 2, &gp, NULL);
                ok = rc >= 0;
                if (rc < 0) assert_int_equal(rc, SDNPU_ERR_OOM);
                sdnpu_session_free(s);
            } else {
                assert_int_equal(rc, SDNPU_ERR_OOM);
                assert_null(s);
            }
            sdnpu_model_free(m);
        } else {
            assert_int_equal(rc, SDNPU_ERR_OOM);
            assert_null(m);
        }
        sdt_alloc_fail_after(-1);
        assert_int_equal(sdt_alloc_live(), base);
    }
    assert_true(ok);
    sdnpu_allocator_set(NULL);
}

/* A reply's text (as streamed) and its accepted drafts. */
struct dirty_run {
    char text[4096];
    size_t len;
    int32_t accepted;
};

static bool collect_text(const char *piece, size_t len, void *user) {
    struct dirty_run *r = user;
    if (r->len + len >= sizeof r->text) return false;
    memcpy(r->text + r->len, piece, len);
    r->len += len;
    r->text[r->len] = 0;
    return true;
}

/* One reply of the model at path, greedy or sampled (seeded), plain or
 * drafted with the paper's whole method (every draft verified), under
 * whatever allocator is installed, into out. */
static void dirty_reply(const char *path, const char *spec, float temperature, struct dirty_run *out) {
    struct sdnpu_model *m;
    char err[256];
    if (sdnpu_model_load(path, sdnpu_model_default_params(), &m, err, sizeof err) != SDNPU_OK)
        fail_msg("%s: %s", path, err);
    struct sdnpu_session *s;
    assert_int_equal(sdnpu_session_create(m, sdnpu_session_default_params(), &s), SDNPU_OK);
    struct sdnpu_generate_params gp = sdnpu_generate_default_params();
    assert_int_equal(sdnpu_spec_parse(spec, &gp.spec, err, sizeof err), SDNPU_OK);
    gp.n_predict = 48;
    gp.sampling.temperature = temperature;
    gp.adaptive = false;
    gp.on_text = collect_text;
    gp.user = out;
    out->len = 0;
    out->text[0] = 0;
    static const char prompt[] = "the cat sat on the mat. the cat sat on the mat. the cat sat on the";
    struct sdnpu_stats st;
    assert_int_equal(sdnpu_session_generate(s, prompt, sizeof prompt - 1, &gp, &st), SDNPU_OK);
    out->accepted = st.n_accepted;
    sdnpu_session_free(s);
    sdnpu_model_free(m);
}

/* The replies of path's model on a clean heap and on heaps of each of
 * fills, greedy or sampled, plain and drafted: the same bytes and accepted
 * drafts on every heap, drafts accepted, greedy drafting plain decoding's. */
static void dirty_heaps(const char *path, float temperature, const int *fills, size_t n_fills) {
    static const char *const specs[] = {"none", "sdnpu"};
    struct dirty_run ref[2], got;
    for (size_t k = 0; k < 2; k++) {
        dirty_reply(path, specs[k], temperature, &ref[k]);
        assert_true(ref[k].len > 0);
        sdt_alloc_install();
        for (size_t f = 0; f < n_fills; f++) {
            sdt_alloc_fill(fills[f]);
            dirty_reply(path, specs[k], temperature, &got);
            if (got.len != ref[k].len || memcmp(got.text, ref[k].text, got.len) ||
                got.accepted != ref[k].accepted)
                fail_msg(
                    "%s, %s, temperature %.1f, heap of 0x%02X: %zu bytes, %d accepted; clean heap: %zu, %d",
                    path, specs[k], (double)temperature, fills[f], got.len, got.accepted, ref[k].len,
                    ref[k].accepted);
        }
        sdt_alloc_fill(-1);
        sdnpu_allocator_set(NULL);
    }
    assert_true(ref[1].accepted > 0);
    if (temperature == 0.0f) {
        assert_int_equal(ref[0].len, ref[1].len);
        assert_memory_equal(ref[0].text, ref[1].text, ref[0].len);
    }
}

/* No buffer is read before it is written: with every block the engine
 * allocates full of 0x00, 0xFF (NaN in every float format) or 0xA5, load,
 * prefill, plain decoding and verified drafts of the tiny gemma3 and qwen2
 * models give a clean heap's replies, greedy and sampled. */
static void test_dirty_heap(void **state) {
    (void)state;
    static const char *const archs[] = {"gemma3", "qwen2"};
    static const int fills[] = {0x00, 0xFF, 0xA5};
    for (size_t a = 0; a < 2; a++) {
        char path[256];
        snprintf(path, sizeof path, "%s/test_api_dirty_%s.gguf", SD_BUILD_DIR, archs[a]);
        struct sdt_tiny_opts o = {.arch = archs[a]};
        assert_int_equal(sdt_tiny_write(&o, path), 0);
        dirty_heaps(path, 0.0f, fills, 3);
        dirty_heaps(path, 0.8f, fills, 3);
    }
}

/* The same on the default model, whose kernels, certified head and
 * attention tiles the tiny models' shapes do not all reach (greedy; the
 * sanitizer run, SDNPU_TEST_NO_MODEL, skips it). */
static void test_dirty_heap_real(void **state) {
    (void)state;
    if (!sdt_file_exists(SD_DEFAULT_MODEL) || getenv("SDNPU_TEST_NO_MODEL")) skip();
    static const int fills[] = {0xFF, 0xA5};
    dirty_heaps(SD_DEFAULT_MODEL, 0.0f, fills, 2);
}

int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_names),
        cmocka_unit_test(test_null_handles),
        cmocka_unit_test(test_probing),
        cmocka_unit_test(test_chat_detect),
        cmocka_unit_test(test_vocab_only_session),
        cmocka_unit_test(test_callback_stops),
        cmocka_unit_test(test_alloc_failures),
        cmocka_unit_test(test_dirty_heap),
        cmocka_unit_test(test_dirty_heap_real),
    };
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
