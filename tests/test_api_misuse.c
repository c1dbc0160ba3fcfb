/* tests/test_api_misuse.c - the public API used wrongly or hard: NULL
 * arguments to every function, calls in an unexpected order, bad history
 * paths, cancelling from another thread, and many sessions over one model
 * on several threads (outputs must equal serial runs). test_api.c covers
 * status names, probing, vocab-only sessions, callback stops and
 * allocation failure; this file does not repeat those. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sdnpu.h"
#include "util_common.h"
#include "util_tiny_model.h"

static const char *tiny(void) {
    static char path[256];
    if (!path[0]) {
        snprintf(path, sizeof path, "%s/test_api_misuse_tiny.gguf", SD_BUILD_DIR);
        struct sdt_tiny_opts o = {.arch = "gemma3"};
        assert_int_equal(sdt_tiny_write(&o, path), 0);
    }
    return path;
}

static struct sdnpu_model *load_tiny(void) {
    struct sdnpu_model *m = NULL;
    char err[256];
    assert_int_equal(sdnpu_model_load(tiny(), sdnpu_model_default_params(), &m, err, sizeof err), SDNPU_OK);
    return m;
}

static struct sdnpu_session *session_of(struct sdnpu_model *m, int32_t n_ctx, int32_t n_threads) {
    struct sdnpu_session_params sp = sdnpu_session_default_params();
    sp.n_ctx = n_ctx;
    sp.n_threads = n_threads;
    struct sdnpu_session *s = NULL;
    assert_int_equal(sdnpu_session_create(m, sp, &s), SDNPU_OK);
    return s;
}

/* Generated text, collected by the streaming callback. */
struct out {
    char text[4096];
    size_t n;
};

static bool collect(const char *piece, size_t len, void *user) {
    struct out *o = user;
    size_t room = sizeof o->text - 1 - o->n;
    size_t k = len < room ? len : room;
    memcpy(o->text + o->n, piece, k);
    o->n += k;
    o->text[o->n] = '\0';
    return true;
}

/* Generate from a fresh (reset) context and return the status. */
static int gen(struct sdnpu_session *s, const char *prompt, int32_t n_predict, float temp, const char *spec,
               struct out *o, struct sdnpu_stats *st) {
    struct sdnpu_generate_params gp = sdnpu_generate_default_params();
    gp.n_predict = n_predict;
    gp.sampling.temperature = temp;
    gp.spec = sdt_spec(spec);
    gp.on_text = collect;
    gp.user = o;
    o->n = 0;
    o->text[0] = '\0';
    return sdnpu_session_generate(s, prompt, strlen(prompt), &gp, st);
}

/* ------------------------------------------------------------ NULL args */

static void test_null_arguments(void **state) {
    (void)state;
    /* Functions without a handle. */
    char ver[32];
    snprintf(ver, sizeof ver, "%d.%d.%d", SDNPU_VERSION_MAJOR, SDNPU_VERSION_MINOR, SDNPU_VERSION_PATCH);
    assert_string_equal(sdnpu_version(), ver);
    sdnpu_log_set(NULL, NULL);
    sdnpu_allocator_set(NULL);
    static const enum sdnpu_status all[] = {
        SDNPU_OK,           SDNPU_ERR_INVALID_ARG,      SDNPU_ERR_IO,           SDNPU_ERR_FORMAT,
        SDNPU_ERR_UNSUPPORTED, SDNPU_ERR_OOM,           SDNPU_ERR_CONTEXT_FULL, SDNPU_ERR_BUFFER_TOO_SMALL,
        SDNPU_ERR_INVALID_UTF8, SDNPU_ERR_NOT_FOUND,    SDNPU_ERR_BACKEND,      SDNPU_ERR_STATE,
        SDNPU_ABORTED};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        const char *name = sdnpu_status_str(all[i]);
        assert_non_null(name);
        assert_memory_equal(name, "SDNPU_", 6);
    }

    /* A NULL model. */
    assert_int_equal(sdnpu_model_n_vocab(NULL), 0);
    assert_non_null(sdnpu_model_arch(NULL));
    assert_false(sdnpu_model_has_chat_template(NULL));
    size_t n = 7;
    char text[16];
    sdnpu_token t[4] = {1, 2, 3, 4};
    assert_int_equal(sdnpu_detokenize(NULL, t, 1, false, text, sizeof text, &n), SDNPU_ERR_INVALID_ARG);
    struct sdnpu_chat_message msg = {"user", "hi"};
    assert_int_equal(sdnpu_chat_format(NULL, &msg, 1, true, text, sizeof text, &n), SDNPU_ERR_INVALID_ARG);
    /* Documents: NULL text, count or list, a NULL document, NULL buf with room. */
    const char *docs[] = {"a", NULL};
    assert_int_equal(sdnpu_documents_format(docs, 1, NULL, text, sizeof text, &n), SDNPU_ERR_INVALID_ARG);
    assert_int_equal(sdnpu_documents_format(docs, 1, "q", text, sizeof text, NULL), SDNPU_ERR_INVALID_ARG);
    assert_int_equal(sdnpu_documents_format(NULL, 1, "q", text, sizeof text, &n), SDNPU_ERR_INVALID_ARG);
    assert_int_equal(sdnpu_documents_format(docs, 2, "q", text, sizeof text, &n), SDNPU_ERR_INVALID_ARG);
    assert_int_equal(sdnpu_documents_format(docs, 1, "q", NULL, 4, &n), SDNPU_ERR_INVALID_ARG);
    char big[64];
    assert_int_equal(sdnpu_documents_format(docs, 1, "q", big, sizeof big, &n), SDNPU_OK);
    /* Load: no out pointer; no error buffer. */
    assert_int_equal(sdnpu_model_load(tiny(), sdnpu_model_default_params(), NULL, NULL, 0),
                     SDNPU_ERR_INVALID_ARG);
    struct sdnpu_model *bad = (struct sdnpu_model *)0x1;
    assert_int_equal(sdnpu_model_load("/nonexistent/y.gguf", sdnpu_model_default_params(), &bad, NULL, 0),
                     SDNPU_ERR_NOT_FOUND);
    assert_null(bad);

    /* A real model, NULL or inconsistent pointers beside it. */
    struct sdnpu_model *m = load_tiny();
    assert_int_equal(sdnpu_tokenize(m, "a", 1, 0, t, 4, NULL), SDNPU_ERR_INVALID_ARG);
    assert_int_equal(sdnpu_tokenize(m, NULL, 1, 0, t, 4, &n), SDNPU_ERR_INVALID_ARG);
    assert_int_equal(sdnpu_tokenize(m, "a", 1, 0, NULL, 4, &n), SDNPU_ERR_INVALID_ARG);
    /* NULL text of length 0 is the empty text; NULL tokens with cap 0 probe. */
    assert_int_equal(sdnpu_tokenize(m, NULL, 0, 0, t, 4, &n), SDNPU_OK);
    assert_int_equal(n, 0);
    assert_int_equal(sdnpu_tokenize(m, "abc", 3, 0, NULL, 0, &n), SDNPU_ERR_BUFFER_TOO_SMALL);
    assert_true(n > 0);
    assert_int_equal(sdnpu_detokenize(m, t, 1, false, text, sizeof text, NULL), SDNPU_ERR_INVALID_ARG);
    assert_int_equal(sdnpu_detokenize(m, NULL, 1, false, text, sizeof text, &n), SDNPU_ERR_INVALID_ARG);
    assert_int_equal(sdnpu_detokenize(m, t, 1, false, NULL, 4, &n), SDNPU_ERR_INVALID_ARG);
    sdnpu_token oov[1] = {sdnpu_model_n_vocab(m)};
    assert_int_equal(sdnpu_detokenize(m, oov, 1, false, text, sizeof text, &n), SDNPU_ERR_INVALID_ARG);
    sdnpu_token neg[1] = {-1};
    assert_int_equal(sdnpu_detokenize(m, neg, 1, false, text, sizeof text, &n), SDNPU_ERR_INVALID_ARG);
    assert_int_equal(sdnpu_chat_format(m, NULL, 1, true, text, sizeof text, &n), SDNPU_ERR_INVALID_ARG);
    assert_int_equal(sdnpu_chat_format(m, &msg, 1, true, text, sizeof text, NULL), SDNPU_ERR_INVALID_ARG);
    struct sdnpu_chat_message no_role = {NULL, "hi"};
    assert_int_equal(sdnpu_chat_format(m, &no_role, 1, true, text, sizeof text, &n), SDNPU_ERR_INVALID_ARG);
    /* Tools: bad arguments first, then a model whose template calls none. */
    assert_false(sdnpu_model_chat_tools(NULL));
    assert_false(sdnpu_model_chat_tools(m));
    assert_int_equal(sdnpu_chat_format_tools(NULL, &msg, 1, "[]", true, text, sizeof text, &n),
                     SDNPU_ERR_INVALID_ARG);
    assert_int_equal(sdnpu_chat_format_tools(m, &msg, 1, NULL, true, text, sizeof text, &n),
                     SDNPU_ERR_INVALID_ARG);
    assert_int_equal(sdnpu_chat_format_tools(m, &no_role, 1, "[]", true, text, sizeof text, &n),
                     SDNPU_ERR_INVALID_ARG);
    assert_int_equal(sdnpu_chat_format_tools(m, &msg, 1, "[]", true, text, sizeof text, &n),
                     SDNPU_ERR_UNSUPPORTED);
    assert_int_equal(sdnpu_session_create(m, sdnpu_session_default_params(), NULL), SDNPU_ERR_INVALID_ARG);

    /* A NULL session. */
    struct sdnpu_generate_params gp = sdnpu_generate_default_params();
    struct sdnpu_stats st;
    assert_int_equal(sdnpu_session_n_past(NULL), 0);
    assert_int_equal(sdnpu_session_generate(NULL, "a", 1, &gp, &st), SDNPU_ERR_INVALID_ARG);
    assert_int_equal(sdnpu_session_set_history(NULL, "/tmp/x"), SDNPU_ERR_INVALID_ARG);
    assert_int_equal(sdnpu_session_set_history(NULL, NULL), SDNPU_ERR_INVALID_ARG);

    /* A real session, NULL pointers beside it. */
    struct sdnpu_session *s = session_of(m, 256, 1);
    assert_int_equal(sdnpu_session_generate(s, "a", 1, NULL, &st), SDNPU_ERR_INVALID_ARG);
    assert_int_equal(sdnpu_session_generate(s, NULL, 3, &gp, &st), SDNPU_ERR_INVALID_ARG);
    assert_int_equal(sdnpu_session_eval(s, NULL, 3, NULL, 0), SDNPU_ERR_INVALID_ARG);
    assert_int_equal(sdnpu_session_n_past(s), 0);
    /* Stats may be NULL. */
    gp.n_predict = 2;
    assert_int_equal(sdnpu_session_generate(s, "ab", 2, &gp, NULL), SDNPU_OK);
    sdnpu_session_free(s);
    sdnpu_model_free(m);
}

/* ---------------------------------------------------------- wrong order */

static void test_wrong_order(void **state) {
    (void)state;
    struct sdnpu_model *m = load_tiny();
    struct sdnpu_session *s = session_of(m, 64, 1);
    struct out o, ref;
    struct sdnpu_stats st;

    /* An empty prompt on an empty session starts from the BOS token alone
     * (the tiny vocabulary adds one). */
    assert_int_equal(gen(s, "", 4, 0.0f, NULL, &o, &st), SDNPU_OK);
    assert_int_equal(st.n_prompt_tokens, 1);
    sdnpu_session_reset(s);
    assert_int_equal(sdnpu_session_n_past(s), 0);

    /* Eval before anything else: nothing, then bad tokens, then a short
     * logits buffer; none of them changes the context. */
    assert_int_equal(sdnpu_session_eval(s, NULL, 0, NULL, 0), SDNPU_OK);
    assert_int_equal(sdnpu_session_n_past(s), 0);
    sdnpu_token bad[2] = {5, sdnpu_model_n_vocab(m)};
    assert_int_equal(sdnpu_session_eval(s, bad, 2, NULL, 0), SDNPU_ERR_INVALID_ARG);
    assert_non_null(strstr(sdnpu_session_last_error(s), "vocabulary"));
    assert_int_equal(sdnpu_session_n_past(s), 0);
    sdnpu_token toks[8];
    size_t n = 0;
    assert_int_equal(sdnpu_tokenize(m, "abc", 3, SDNPU_TOKENIZE_ADD_SPECIAL, toks, 8, &n), SDNPU_OK);
    float logits[4];
    assert_int_equal(sdnpu_session_eval(s, toks, n, logits, 4), SDNPU_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(sdnpu_session_n_past(s), 0);
    /* A good eval, then generate with an empty prompt continues it. */
    assert_int_equal(sdnpu_session_eval(s, toks, n, NULL, 0), SDNPU_OK);
    assert_int_equal(sdnpu_session_n_past(s), (int32_t)n);
    assert_int_equal(gen(s, "", 6, 0.0f, NULL, &o, &st), SDNPU_OK);
    assert_int_equal(st.n_prompt_tokens, 0);

    /* Reset, then generate: the same as a fresh session. */
    sdnpu_session_reset(s);
    assert_int_equal(sdnpu_session_n_past(s), 0);
    assert_int_equal(gen(s, "abc", 6, 0.0f, NULL, &o, &st), SDNPU_OK);
    struct sdnpu_session *fresh = session_of(m, 64, 1);
    assert_int_equal(gen(fresh, "abc", 6, 0.0f, NULL, &ref, &st), SDNPU_OK);
    assert_string_equal(o.text, ref.text);
    sdnpu_session_free(fresh);
    /* Reset twice, and reset of a fresh session, are harmless. */
    sdnpu_session_reset(s);
    sdnpu_session_reset(s);

    /* A prompt longer than the context: nothing is evaluated, and the
     * session still works afterwards. */
    char longp[200];
    memset(longp, 'x', sizeof longp - 1);
    longp[sizeof longp - 1] = '\0';
    assert_int_equal(gen(s, longp, 4, 0.0f, NULL, &o, &st), SDNPU_ERR_CONTEXT_FULL);
    assert_int_equal(sdnpu_session_n_past(s), 0);
    assert_true(strlen(sdnpu_session_last_error(s)) > 0);
    assert_int_equal(gen(s, "abc", 6, 0.0f, NULL, &o, &st), SDNPU_OK);
    assert_string_equal(o.text, ref.text);

    /* Generating until the context is full ends with stop reason 4, not an
     * error; the next generate reports the full context. */
    assert_int_equal(gen(s, "ab", -1, 0.0f, NULL, &o, &st), SDNPU_OK);
    if (st.stop_reason == SDNPU_STOP_CONTEXT_FULL) {
        assert_int_equal(gen(s, "more", 4, 0.0f, NULL, &o, &st), SDNPU_ERR_CONTEXT_FULL);
    }

    /* An unknown drafter (the struct filled by hand): an error naming it;
     * nothing is evaluated and the session goes on. */
    sdnpu_session_reset(s);
    {
        struct sdnpu_generate_params gp = sdnpu_generate_default_params();
        gp.spec.drafter = (enum sdnpu_drafter)77;
        assert_int_equal(sdnpu_session_generate(s, "abc", 3, &gp, &st), SDNPU_ERR_INVALID_ARG);
        assert_non_null(strstr(sdnpu_session_last_error(s), "drafter 77"));
        assert_int_equal(sdnpu_session_n_past(s), 0);
    }
    sdnpu_session_reset(s);
    assert_int_equal(gen(s, "abc", 6, 0.0f, "sam", &o, &st), SDNPU_OK);
    assert_string_equal(o.text, ref.text);

    /* Session parameters out of range. */
    struct sdnpu_session_params sp = sdnpu_session_default_params();
    sp.n_batch = 1 << 20;
    struct sdnpu_session *s2 = (struct sdnpu_session *)0x1;
    assert_int_equal(sdnpu_session_create(m, sp, &s2), SDNPU_ERR_INVALID_ARG);
    assert_null(s2);
    assert_true(strlen(sdnpu_model_last_error(m)) > 0);

    /* Drafting's tuning: a bad value is refused at create, named. */
    static const struct {
        int32_t est, lead, min_match;
        const char *calib, *says;
    } tuning[] = {
        {7, -1, 2, NULL, "policy_estimator 7"},
        {0, -2, 2, NULL, "calib_lead -2"},
        {0, -1, 0, NULL, "calib_min_match 0"},
        {0, -1, 2, "top_k=3,depth=2", "unknown parameter 'depth'"},
        {0, -1, 2, "top_k=3;prefix=2", "expected name=value"},
        {0, -1, 2, "top_k=1e30", "expected name=value"},
        {0, -1, 2, "top_k=9", "top_k 9"},
    };
    for (size_t i = 0; i < sizeof tuning / sizeof tuning[0]; i++) {
        sp = sdnpu_session_default_params();
        sp.policy_estimator = (enum sdnpu_policy_estimator)tuning[i].est;
        sp.calib_lead = tuning[i].lead;
        sp.calib_min_match = tuning[i].min_match;
        sp.calib_params = tuning[i].calib;
        assert_int_equal(sdnpu_session_create(m, sp, &s2), SDNPU_ERR_INVALID_ARG);
        assert_null(s2);
        assert_non_null(strstr(sdnpu_model_last_error(m), tuning[i].says));
    }
    /* Good tuning drafts otherwise, never changing the output. */
    sp = sdnpu_session_default_params();
    sp.policy_estimator = SDNPU_POLICY_ESTIMATOR_GLOBAL;
    sp.calib_lead = 0;
    sp.calib_min_match = 3;
    sp.calib_params = "top_k=2,min_prob=0.1,max_depth=4";
    assert_int_equal(sdnpu_session_create(m, sp, &s2), SDNPU_OK);
    assert_int_equal(gen(s2, "abc", 6, 0.0f, "sam-tree+calib+reuse", &o, &st), SDNPU_OK);
    assert_string_equal(o.text, ref.text);
    sdnpu_session_free(s2);

    sdnpu_session_free(s);
    sdnpu_model_free(m);
}

/* -------------------------------------------------------------- history */

static long size_of(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

static void test_history_paths(void **state) {
    (void)state;
    struct sdnpu_model *m = load_tiny();
    struct sdnpu_session *s = session_of(m, 256, 1);
    struct out o, ref;
    struct sdnpu_stats st;
    assert_int_equal(gen(s, "abc", 6, 0.0f, NULL, &ref, &st), SDNPU_OK);

    /* Detaching when nothing is attached is fine. */
    assert_int_equal(sdnpu_session_set_history(s, NULL), SDNPU_OK);
    /* A path in a missing directory, and a directory: errors that name the
     * path; the session is unchanged and still generates. */
    const char *missing = "/nonexistent-sdnpu-dir/sub/history.bin";
    int rc = sdnpu_session_set_history(s, missing);
    assert_true(rc < 0);
    assert_non_null(strstr(sdnpu_session_last_error(s), missing));
    char dir[256];
    snprintf(dir, sizeof dir, "%s", SD_BUILD_DIR);
    rc = sdnpu_session_set_history(s, dir);
    assert_true(rc < 0);
    assert_true(strlen(sdnpu_session_last_error(s)) > 0);
    sdnpu_session_reset(s);
    assert_int_equal(gen(s, "abc", 6, 0.0f, NULL, &o, &st), SDNPU_OK);
    assert_string_equal(o.text, ref.text);

    /* A good history grows with each response; once detached it does not. */
    char path[256];
    snprintf(path, sizeof path, "%s/test_api_misuse.history", SD_BUILD_DIR);
    unlink(path);
    assert_int_equal(sdnpu_session_set_history(s, path), SDNPU_OK);
    sdnpu_session_reset(s);
    assert_int_equal(gen(s, "abc", 6, 0.0f, "sam", &o, &st), SDNPU_OK);
    long after_one = size_of(path);
    assert_true(after_one > 0);
    sdnpu_session_reset(s);
    assert_int_equal(gen(s, "abc", 6, 0.0f, "sam", &o, &st), SDNPU_OK);
    assert_string_equal(o.text, ref.text); /* drafting from history never changes greedy output */
    long after_two = size_of(path);
    assert_true(after_two > after_one);
    assert_int_equal(sdnpu_session_set_history(s, NULL), SDNPU_OK);
    sdnpu_session_reset(s);
    assert_int_equal(gen(s, "abc", 6, 0.0f, NULL, &o, &st), SDNPU_OK);
    assert_int_equal(size_of(path), after_two);
    /* Attaching a second time replaces the first (no leak, no double close). */
    assert_int_equal(sdnpu_session_set_history(s, path), SDNPU_OK);
    assert_int_equal(sdnpu_session_set_history(s, path), SDNPU_OK);
    sdnpu_session_free(s); /* freeing with a history attached closes it */
    unlink(path);
    sdnpu_model_free(m);
}

/* ------------------------------------------------------------- replies */

/* One greedy request with every draft verified (so the drafts, and with
 * them the counts, depend on the stores alone): its accepted draft tokens,
 * and its text in o. */
static int32_t accepted_run(struct sdnpu_session *s, const char *prompt, bool forget, float temp, struct out *o) {
    struct sdnpu_generate_params gp = sdnpu_generate_default_params();
    gp.n_predict = 40;
    gp.sampling.temperature = temp;
    gp.spec = sdt_spec("sam");
    gp.adaptive = false;
    gp.forget = forget;
    gp.on_text = collect;
    gp.user = o;
    o->n = 0;
    o->text[0] = '\0';
    struct sdnpu_stats st;
    sdnpu_session_reset(s);
    assert_int_equal(sdnpu_session_generate(s, prompt, strlen(prompt), &gp, &st), SDNPU_OK);
    return st.n_accepted;
}

static struct sdnpu_session *session_with_replies(struct sdnpu_model *m, int64_t bytes) {
    struct sdnpu_session_params sp = sdnpu_session_default_params();
    sp.n_ctx = 256;
    sp.n_threads = 1;
    sp.replies_bytes = bytes;
    struct sdnpu_session *s = NULL;
    assert_int_equal(sdnpu_session_create(m, sp, &s), SDNPU_OK);
    return s;
}

/* The replies store: a session drafts from its own earlier replies (the
 * same prompt again accepts more), never changes the output, and keeps
 * nothing with replies_bytes < 0, with forget, or after forget_replies; a
 * sampled request does not draft from it. A bound smaller than a reply
 * costs the store, not the request. */
static void test_replies_store(void **state) {
    (void)state;
    /* A qwen2 of this seed writes 40 tokens without repeating itself, so
     * the output store alone drafts nearly nothing. */
    char path[256];
    snprintf(path, sizeof path, "%s/test_api_misuse_qwen2.gguf", SD_BUILD_DIR);
    struct sdnpu_model *m = sdt_tiny_load(&(struct sdt_tiny_opts){.arch = "qwen2", .seed = 1}, path);
    assert_non_null(m);
    const char *prompt = "the quick brown fox";
    struct out first, again;

    struct sdnpu_session *none = session_with_replies(m, -1);
    int32_t base = accepted_run(none, prompt, false, 0.0f, &first);
    assert_int_equal(accepted_run(none, prompt, false, 0.0f, &again), base); /* nothing kept */
    assert_string_equal(again.text, first.text);
    sdnpu_session_free(none);

    struct sdnpu_session *s = session_with_replies(m, 0);
    assert_int_equal(accepted_run(s, prompt, true, 0.0f, &again), base); /* forget: not kept */
    assert_int_equal(accepted_run(s, prompt, false, 0.0f, &again), base);
    int32_t with = accepted_run(s, prompt, false, 0.0f, &again); /* drafts from the reply before */
    assert_string_equal(again.text, first.text);
    assert_true(with > base);
    /* A sampled request drafts from the request alone: the same output and
     * counts for its seed as on a session without replies. */
    struct out sampled;
    none = session_with_replies(m, -1);
    int32_t sampled_base = accepted_run(none, prompt, false, 0.9f, &sampled);
    sdnpu_session_free(none);
    assert_int_equal(accepted_run(s, prompt, false, 0.9f, &again), sampled_base);
    assert_string_equal(again.text, sampled.text);
    sdnpu_session_forget_replies(s);
    assert_int_equal(accepted_run(s, prompt, false, 0.0f, &again), base);
    sdnpu_session_forget_replies(NULL);
    sdnpu_session_free(s);

    /* 40 tokens are a 180-byte record: a 100-byte store cannot hold one. */
    struct sdnpu_session *small = session_with_replies(m, 100);
    assert_int_equal(accepted_run(small, prompt, false, 0.0f, &again), base);
    assert_int_equal(accepted_run(small, prompt, false, 0.0f, &again), base);
    assert_string_equal(again.text, first.text);
    sdnpu_session_free(small);
    sdnpu_model_free(m);
    unlink(path);
}

/* ---------------------------------------------------------------- cancel */

static void nap(void) {
    struct timespec ts = {0, 100000}; /* 0.1 ms */
    nanosleep(&ts, NULL);
}

struct cancel_ctx {
    struct sdnpu_session *s;
    atomic_int started;   /* the callback has seen text */
    atomic_int cancelled; /* the other thread has called cancel */
    int pieces;
};

/* Wait, in the generating thread, until the other thread has cancelled: so
 * the cancel lands while generate is running, whatever the timing. */
static bool wait_for_cancel(const char *piece, size_t len, void *user) {
    struct cancel_ctx *c = user;
    (void)piece;
    (void)len;
    c->pieces++;
    atomic_store(&c->started, 1);
    while (!atomic_load(&c->cancelled)) nap();
    return true;
}

static void *canceller(void *arg) {
    struct cancel_ctx *c = arg;
    while (!atomic_load(&c->started)) nap();
    sdnpu_session_cancel(c->s);
    atomic_store(&c->cancelled, 1);
    return NULL;
}

static void test_cancel_from_thread(void **state) {
    (void)state;
    struct sdnpu_model *m = load_tiny();
    struct sdnpu_session *s = session_of(m, 1024, 1);
    struct out ref, o;
    struct sdnpu_stats st;
    assert_int_equal(gen(s, "abc", 8, 0.0f, NULL, &ref, &st), SDNPU_OK);

    /* A cancel while idle does not stop the next generate. */
    sdnpu_session_reset(s);
    sdnpu_session_cancel(s);
    assert_int_equal(gen(s, "abc", 8, 0.0f, NULL, &o, &st), SDNPU_OK);
    assert_string_equal(o.text, ref.text);

    static const char *const methods[] = {NULL, "sam-tree"};
    for (size_t k = 0; k < 2; k++) {
        sdnpu_session_reset(s);
        struct cancel_ctx c = {.s = s};
        atomic_init(&c.started, 0);
        atomic_init(&c.cancelled, 0);
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, canceller, &c), 0);
        struct sdnpu_generate_params gp = sdnpu_generate_default_params();
        gp.n_predict = 1000; /* far more than runs before the cancel */
        gp.sampling.temperature = 0.0f;
        gp.spec = sdt_spec(methods[k]);
        gp.on_text = wait_for_cancel;
        gp.user = &c;
        int rc = sdnpu_session_generate(s, "abc", 3, &gp, &st);
        assert_int_equal(pthread_join(th, NULL), 0);
        assert_int_equal(rc, SDNPU_ABORTED);
        assert_int_equal(st.stop_reason, SDNPU_STOP_CALLBACK);
        assert_true(st.n_generated < 1000);
        assert_true(c.pieces >= 1);
        /* The context holds the prompt and what was generated. */
        assert_true(sdnpu_session_n_past(s) >= st.n_prompt_tokens);
        assert_true(sdnpu_session_n_past(s) <= st.n_prompt_tokens + st.n_generated);

        /* Still usable: continue, and after a reset the same output as ever. */
        assert_int_equal(gen(s, " more", 4, 0.0f, NULL, &o, &st), SDNPU_OK);
        sdnpu_session_reset(s);
        assert_int_equal(gen(s, "abc", 8, 0.0f, methods[k], &o, &st), SDNPU_OK);
        assert_string_equal(o.text, ref.text);
    }
    sdnpu_session_free(s);
    sdnpu_model_free(m);
}

/* sdnpu_session_eval stopped by a cancel from another thread. The other
 * thread cancels every 0.1 ms from just before the call until it returns
 * (the call clears a cancel made before it), so a cancel lands during one
 * of the chunks unless that thread is not scheduled for the whole call:
 * the attempt is then repeated. */
/* A session of prefill chunks of 16 tokens (one thread, 1,024 of
 * context): a prompt of a few hundred tokens is many chunks. */
static struct sdnpu_session_params chunked_params(void) {
    struct sdnpu_session_params sp = sdnpu_session_default_params();
    sp.n_ctx = 1024;
    sp.n_threads = 1;
    sp.n_batch = 16;
    return sp;
}

struct eval_canceller {
    struct sdnpu_session *s;
    atomic_int done;
};

static void *cancel_until_done(void *arg) {
    struct eval_canceller *c = arg;
    while (!atomic_load(&c->done)) {
        sdnpu_session_cancel(c->s);
        nap();
    }
    return NULL;
}

static void test_cancel_eval(void **state) {
    (void)state;
    struct sdnpu_model *m = load_tiny();
    const struct sdnpu_session_params sp = chunked_params();
    struct sdnpu_session *s = NULL;
    assert_int_equal(sdnpu_session_create(m, sp, &s), SDNPU_OK);
    enum { N = 960 }; /* 60 chunks */
    const int32_t nv = sdnpu_model_n_vocab(m);
    sdnpu_token toks[N];
    for (int i = 0; i < N; i++) toks[i] = (sdnpu_token)((i * 7 + 3) % nv);
    float *ref = malloc(sizeof(float) * N * (size_t)nv), *got = malloc(sizeof(float) * N * (size_t)nv);
    assert_non_null(ref);
    assert_non_null(got);
    assert_int_equal(sdnpu_session_eval(s, toks, N, ref, (size_t)N * (size_t)nv), SDNPU_OK);

    /* A cancel made while nothing runs does not stop the next eval. */
    sdnpu_session_reset(s);
    sdnpu_session_cancel(s);
    assert_int_equal(sdnpu_session_eval(s, toks, N, got, (size_t)N * (size_t)nv), SDNPU_OK);
    assert_memory_equal(got, ref, sizeof(float) * N * (size_t)nv);

    int aborted = 0;
    for (int attempt = 0; attempt < 50 && !aborted; attempt++) {
        sdnpu_session_reset(s);
        assert_int_equal(sdnpu_session_eval(s, toks, 8, NULL, 0), SDNPU_OK); /* held before the call */
        struct eval_canceller c = {.s = s};
        atomic_init(&c.done, 0);
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, cancel_until_done, &c), 0);
        int rc = sdnpu_session_eval(s, toks + 8, N - 8, NULL, 0);
        atomic_store(&c.done, 1);
        assert_int_equal(pthread_join(th, NULL), 0);
        if (rc == SDNPU_OK) {
            assert_int_equal(sdnpu_session_n_past(s), N);
            continue;
        }
        assert_int_equal(rc, SDNPU_ABORTED);
        assert_non_null(strstr(sdnpu_session_last_error(s), "cancelled"));
        aborted++;
        /* None of the call's tokens kept; the eight before it stay, and
         * evaluating the rest then gives a fresh eval's logits, bit for bit. */
        assert_int_equal(sdnpu_session_n_past(s), 8);
        assert_int_equal(sdnpu_session_eval(s, toks + 8, N - 8, got, (size_t)(N - 8) * (size_t)nv), SDNPU_OK);
        assert_memory_equal(got, ref + (size_t)8 * (size_t)nv, sizeof(float) * (N - 8) * (size_t)nv);
        assert_int_equal(sdnpu_session_n_past(s), N);
    }
    assert_int_equal(aborted, 1);
    free(ref);
    free(got);
    sdnpu_session_free(s);
    sdnpu_model_free(m);
}

/* ------------------------------------------------------ prefill progress */

/* What on_progress saw, after the collected text (collect's struct out
 * first, so one user pointer serves both callbacks). */
struct watched {
    struct out o;
    int32_t calls, last_done, total;
    bool ordered;                 /* done rose at every call, within one total */
    int32_t stop_at;              /* at this call (1-based): return false, or cancel */
    struct sdnpu_session *cancel; /* cancel this session there instead of returning false */
};

static bool on_progress(int32_t done, int32_t total, void *user) {
    struct watched *w = user;
    if (done <= w->last_done || done > total || (w->calls && total != w->total)) w->ordered = false;
    w->calls++;
    w->last_done = done;
    w->total = total;
    if (w->calls != w->stop_at) return true;
    if (w->cancel) sdnpu_session_cancel(w->cancel); /* as a Ctrl-C handler does */
    return w->cancel != NULL;
}

static int gen_watched(struct sdnpu_session *s, const char *prompt, const char *spec, struct watched *w,
                       struct sdnpu_stats *st) {
    struct sdnpu_generate_params gp = sdnpu_generate_default_params();
    gp.n_predict = 8;
    gp.sampling.temperature = 0.0f;
    gp.spec = sdt_spec(spec);
    gp.on_text = collect;
    gp.on_prefill = on_progress;
    gp.user = w;
    w->ordered = true;
    return sdnpu_session_generate(s, prompt, strlen(prompt), &gp, st);
}

/* The prompt's prefill reports each chunk, in order, up to its total, and
 * changes nothing; a callback saying no, or a cancel, stops the request
 * between chunks with nothing generated and the context as before, and
 * the session then answers as ever. */
static void test_prefill_progress(void **state) {
    (void)state;
    struct sdnpu_model *m = load_tiny();
    const struct sdnpu_session_params sp = chunked_params();
    struct sdnpu_session *s = NULL;
    assert_int_equal(sdnpu_session_create(m, sp, &s), SDNPU_OK);
    const char *prompt = "the quick brown fox jumps over the lazy dog, and the dog sleeps on in the sun. "
                         "the quick brown fox jumps over the lazy dog again.";
    struct out ref;
    struct sdnpu_stats st;
    assert_int_equal(gen(s, prompt, 8, 0.0f, NULL, &ref, &st), SDNPU_OK);
    const int32_t n_prompt = st.n_prompt_tokens;
    assert_true(n_prompt > 3 * sp.n_batch);

    static const char *const methods[] = {NULL, "sam-tree+calib"};
    for (size_t k = 0; k < 2; k++) {
        sdnpu_session_reset(s);
        struct watched w = {0};
        assert_int_equal(gen_watched(s, prompt, methods[k], &w, &st), SDNPU_OK);
        assert_true(w.ordered);
        assert_int_equal(w.calls, (n_prompt + sp.n_batch - 1) / sp.n_batch);
        assert_int_equal(w.last_done, n_prompt);
        assert_int_equal(w.total, n_prompt);
        assert_string_equal(w.o.text, ref.text);

        for (int c = 0; c < 2; c++) {
            sdnpu_session_reset(s);
            struct watched stop = {.stop_at = 2, .cancel = c ? s : NULL};
            assert_int_equal(gen_watched(s, prompt, methods[k], &stop, &st), SDNPU_ABORTED);
            assert_int_equal(stop.calls, 2);
            assert_int_equal(st.stop_reason, SDNPU_STOP_PREFILL);
            assert_int_equal(st.n_generated, 0);
            assert_int_equal(stop.o.n, 0);
            assert_true(st.prefill_ms > 0 && st.peak_rss_bytes > 0 && st.prepared_bytes > 0);
            assert_int_equal(sdnpu_session_n_past(s), 0);
            /* The next request on the same context, and a continuation. */
            struct watched again = {0};
            assert_int_equal(gen_watched(s, prompt, methods[k], &again, &st), SDNPU_OK);
            assert_string_equal(again.o.text, ref.text);
            assert_int_equal(again.last_done, n_prompt);
        }
    }

    /* A continuation stopped in its prefill leaves the conversation as it
     * was, the last reply's pending token included: continuing it then
     * gives what a session that never saw the stop gives. */
    struct sdnpu_session *twin = NULL;
    assert_int_equal(sdnpu_session_create(m, sp, &twin), SDNPU_OK);
    struct out o1, o2;
    assert_int_equal(gen(twin, "abc", 8, 0.0f, NULL, &o1, &st), SDNPU_OK);
    sdnpu_session_reset(s);
    assert_int_equal(gen(s, "abc", 8, 0.0f, NULL, &o2, &st), SDNPU_OK);
    const int32_t held = sdnpu_session_n_past(s);
    struct watched stop = {.stop_at = 2};
    struct sdnpu_generate_params gp = sdnpu_generate_default_params();
    gp.n_predict = 8;
    gp.sampling.temperature = 0.0f;
    gp.on_text = collect;
    gp.on_prefill = on_progress;
    gp.user = &stop;
    assert_int_equal(sdnpu_session_generate(s, prompt, strlen(prompt), &gp, &st), SDNPU_ABORTED);
    assert_int_equal(st.stop_reason, SDNPU_STOP_PREFILL);
    assert_int_equal(sdnpu_session_n_past(s), held);
    struct out a, b;
    gp.on_prefill = NULL;
    gp.user = &a;
    a.n = 0, a.text[0] = '\0';
    assert_int_equal(sdnpu_session_generate(s, prompt, strlen(prompt), &gp, &st), SDNPU_OK);
    gp.user = &b;
    b.n = 0, b.text[0] = '\0';
    assert_int_equal(sdnpu_session_generate(twin, prompt, strlen(prompt), &gp, &st), SDNPU_OK);
    assert_string_equal(a.text, b.text);
    sdnpu_session_free(twin);
    sdnpu_session_free(s);
    sdnpu_model_free(m);
}

/* ------------------------------------------------------------ concurrency */

#define N_PROMPTS 6
#define N_WORKERS 4

static const char *const g_prompts[N_PROMPTS] = {
    "abc", "hello world", "the quick brown fox", "zzzz", "a b c d e f", "Once upon a time",
};

/* Prompt i runs with these settings: greedy and sampled, with and without
 * drafting, so drafters and samplers run on several threads at once. */
static void settings(int i, float *temp, const char **spec) {
    *temp = (i % 2) ? 0.8f : 0.0f;
    *spec = (i % 3) == 0 ? NULL : (i % 3) == 1 ? "sam" : "sam-tree";
}

struct worker {
    struct sdnpu_model *m;
    int id;
    struct out outs[N_PROMPTS];
    int rc[N_PROMPTS];
};

static void *work(void *arg) {
    struct worker *w = arg;
    struct sdnpu_session_params sp = sdnpu_session_default_params();
    sp.n_ctx = 256;
    sp.n_threads = 1;
    struct sdnpu_session *s = NULL;
    if (sdnpu_session_create(w->m, sp, &s) != SDNPU_OK) {
        for (int i = 0; i < N_PROMPTS; i++) w->rc[i] = -100;
        return NULL;
    }
    /* Each worker takes the prompts in its own order. */
    for (int j = 0; j < N_PROMPTS; j++) {
        int i = (j + w->id) % N_PROMPTS;
        float temp;
        const char *spec;
        settings(i, &temp, &spec);
        struct sdnpu_stats st;
        sdnpu_session_reset(s);
        w->rc[i] = gen(s, g_prompts[i], 24, temp, spec, &w->outs[i], &st);
    }
    sdnpu_session_free(s);
    return NULL;
}

static void test_concurrent_sessions(void **state) {
    (void)state;
    struct sdnpu_model *m = load_tiny();
    /* Serial references, each from a fresh context. */
    static struct out ref[N_PROMPTS];
    struct sdnpu_session *s = session_of(m, 256, 1);
    for (int i = 0; i < N_PROMPTS; i++) {
        float temp;
        const char *spec;
        settings(i, &temp, &spec);
        struct sdnpu_stats st;
        sdnpu_session_reset(s);
        assert_int_equal(gen(s, g_prompts[i], 24, temp, spec, &ref[i], &st), SDNPU_OK);
        assert_true(ref[i].n > 0);
    }
    sdnpu_session_free(s);

    static struct worker w[N_WORKERS];
    pthread_t th[N_WORKERS];
    for (int k = 0; k < N_WORKERS; k++) {
        memset(&w[k], 0, sizeof w[k]);
        w[k].m = m;
        w[k].id = k;
        assert_int_equal(pthread_create(&th[k], NULL, work, &w[k]), 0);
    }
    for (int k = 0; k < N_WORKERS; k++) assert_int_equal(pthread_join(th[k], NULL), 0);
    for (int k = 0; k < N_WORKERS; k++)
        for (int i = 0; i < N_PROMPTS; i++) {
            assert_int_equal(w[k].rc[i], SDNPU_OK);
            if (strcmp(w[k].outs[i].text, ref[i].text) != 0)
                fail_msg("worker %d, prompt %d ('%s'): '%s' != serial '%s'", k, i, g_prompts[i],
                         w[k].outs[i].text, ref[i].text);
        }
    sdnpu_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_null_arguments),     cmocka_unit_test(test_wrong_order),
        cmocka_unit_test(test_history_paths),      cmocka_unit_test(test_cancel_from_thread),
        cmocka_unit_test(test_prefill_progress), cmocka_unit_test(test_cancel_eval),
        cmocka_unit_test(test_concurrent_sessions),  cmocka_unit_test(test_replies_store),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
