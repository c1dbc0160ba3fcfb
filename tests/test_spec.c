/* tests/test_spec.c - speculative decoding is lossless: for every method
 * the generated tokens equal plain greedy decoding's, token for token, on
 * the real model (24 context-heavy prompts) and on the tiny models; and
 * speculative sampling keeps the output distribution (chi-square against
 * plain sampling, fixed seeds). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/api.h"
#include "engine/tools.h"
#include "sdnpu.h"
#include "util_common.h"
#include "util_tiny_model.h"

/* "X:fixed" is X with cost-aware drafting off (every draft verified); the
 * others use the default, where the policy mixes one-row steps in by the
 * times it measures (so which drafts it skips depends on the machine).
 * "X:priced" decides by fixed prices instead (an 8-row pass at twice a
 * one-row one) and the request's own drafts, as a sampled request does:
 * the same mix of one-row and verified steps on every machine.
 * "X:guard" runs with the degeneration guard and is compared with plain
 * greedy decoding under the guard: same tokens, same stop. */
static const char *METHODS[] = {"pld",
                                "sam",
                                "sam-tree",
                                "sam+reuse",
                                "sam-tree+reuse",
                                "sam-tree:fixed",
                                "sam+reuse:fixed",
                                "sam-tree:guard",
                                "pld+reuse:guard",
                                "pld+calib",
                                "sam-tree+calib",
                                "sam+calib+reuse:fixed",
                                "sdnpu",
                                "pld+switch:priced"};
#define N_METHODS ((int)SD_ARRAY_LEN(METHODS))

/* "sdnpu" is sam-tree+reuse+calib+switch; "X+switch" runs with graph
 * switching (progressive, the default mode), whose one-row steps run the
 * one-row blocks with the L2-row head. */
static bool calibrated(const char *method) { return strstr(method, "+calib") || !strcmp(method, "sdnpu"); }

/* What the runs of each method added up to. */
struct tally {
    int acc[N_METHODS], steps[N_METHODS], rd[N_METHODS], ra[N_METHODS], plain[N_METHODS], calib[N_METHODS];
    int guard_stops; /* runs the guard stopped */
};

/* Whether run() wraps its prompt as a user turn in the model's chat format
 * (an instruction-tuned model gets its requests so). */
static bool g_chat;
static struct sdnpu_session_params run_params(void) {
    struct sdnpu_session_params sp = sdnpu_session_default_params();
    sp.n_ctx = 1024;
    sp.n_batch = 64;
    /* Every method runs the same prompts: the replies store would let each
     * draft from the one before, and the acceptance each drafter gets from
     * the request alone is what is checked. (It is tested in
     * test_api_misuse.) */
    sp.replies_bytes = -1;
    /* Not the profile's choice, which varies by machine: the drafts, and
     * so what :priced skips, depend on it. */
    sp.n_verify = 8;
    return sp;
}

/* Generate greedily with a method on s (of run_params()), as a request on a
 * new context: the prompt's tokens that s still holds from the request
 * before are kept and only the rest is prefilled (prefix reuse, exact by
 * batch invariance), so a prompt's document is prefilled once for all
 * its methods, not once each, and every comparison with plain decoding
 * checks the kept prefix too. Return the response tokens (the session's
 * context after the prompt). */
static int32_t run(struct sdnpu_session *s, const char *prompt, const char *spec, int n_predict, int32_t *out,
                   struct sdnpu_stats *st) {
    struct sdnpu_generate_params gp = sdnpu_generate_default_params();
    gp.new_context = true;
    gp.sampling.temperature = 0;
    gp.n_predict = n_predict;
    gp.chat = g_chat;
    char base[64];
    snprintf(base, sizeof base, "%s", spec);
    char *fixed = strstr(base, ":fixed"), *guard = strstr(base, ":guard"), *priced = strstr(base, ":priced");
    gp.adaptive = fixed == NULL;
    gp.stop_on_repeat = guard != NULL;
    if (fixed) *fixed = '\0';
    if (guard) *guard = '\0';
    if (priced) *priced = '\0';
    gp.spec = sdt_spec(base);
    const struct sd_policy measured = s->step.policy;
    if (priced) {
        sd_step_init_policy(&s->step, s->estimator, (double[2]){1.0, 2.0});
        s->fixed_prices = true;
    }
    int rc = sdnpu_session_generate(s, prompt, strlen(prompt), &gp, st);
    if (priced) {
        s->step.policy = measured;
        s->fixed_prices = false;
    }
    if (rc != SDNPU_OK) fail_msg("%s: %s", spec, sdnpu_session_last_error(s));
    int32_t n = st->n_generated;
    memcpy(out, s->ctx_tokens + st->n_prompt_tokens,
           (size_t)SD_MIN(n, s->n_past - st->n_prompt_tokens) * sizeof(int32_t));
    return n;
}

static void check_lossless(struct sdnpu_session *s, const char *prompt, int n_predict, struct tally *t) {
    int32_t plain[512], guarded[512], got[512];
    struct sdnpu_stats st_plain, st_guarded, st;
    int32_t n_plain = run(s, prompt, "none", n_predict, plain, &st_plain);
    int32_t n_guarded = run(s, prompt, "none:guard", n_predict, guarded, &st_guarded);
    for (size_t k = 0; k < SD_ARRAY_LEN(METHODS); k++) {
        bool g = strstr(METHODS[k], ":guard") != NULL;
        const int32_t *ref = g ? guarded : plain;
        const struct sdnpu_stats st0 = g ? st_guarded : st_plain;
        int32_t n0 = g ? n_guarded : n_plain;
        int32_t n = run(s, prompt, METHODS[k], n_predict, got, &st);
        if (n != n0) fail_msg("%s generated %d tokens, plain greedy %d", METHODS[k], n, n0);
        if (st.stop_reason != st0.stop_reason)
            fail_msg("%s stopped for reason %d, plain greedy for %d", METHODS[k], st.stop_reason, st0.stop_reason);
        t->guard_stops += g && st.stop_reason == SDNPU_STOP_REPETITION;
        int32_t n_cmp = SD_MIN(n, st0.n_prompt_tokens + n0 <= 1024 ? n : 0);
        for (int32_t i = 0; i < n_cmp && i < st.n_generated; i++)
            if (got[i] != ref[i] && i < n0 - 1)
                fail_msg("%s: token %d is %d, plain greedy gives %d", METHODS[k], i, got[i], ref[i]);
        t->acc[k] += st.n_accepted;
        t->steps[k] += st.n_verify_steps;
        t->rd[k] += st.n_reuse_drafted;
        t->ra[k] += st.n_reuse_accepted;
        t->plain[k] += st.n_plain_steps;
        t->calib[k] += st.n_calib_records;
        if (!calibrated(METHODS[k]) && st.n_calib_records != 0) fail_msg("%s calibrated", METHODS[k]);
        if (strstr(METHODS[k], ":fixed") && st.n_plain_steps != 0) fail_msg("%s skipped drafts", METHODS[k]);
        if (st.n_reuse_accepted > st.n_reuse_drafted || st.n_reuse_drafted > st.n_drafted)
            fail_msg("%s: reuse counts %d/%d of %d drafted", METHODS[k], st.n_reuse_accepted, st.n_reuse_drafted,
                     st.n_drafted);
        if (!strstr(METHODS[k], "+reuse") && strcmp(METHODS[k], "sdnpu") && st.n_reuse_drafted != 0) fail_msg("%s reused drafts", METHODS[k]);
    }
}

/* The reuse stage on a hand-made step: main path 5 6 7 8, the model takes
 * 5, then wants 9 instead of 6, but after 6 it predicts 7 and after 7 it
 * predicts 8: the run 7 8 is kept (eq. 3) with its lead 6, offered below
 * the root as 7 8 and as 6 7 8 (then below main-path nodes, when rows are
 * left), dropped once accepted or too old. */
static void test_reuse_stage(void **state) {
    (void)state;
    enum { NV = 16 };
    struct sd_draft_tree t;
    struct sd_err err = {0};
    assert_int_equal(sd_draft_tree_init(&t, 16, &err), SDNPU_OK);
    struct sd_draft_params dp = sd_draft_default_params();
    dp.budget = 7;
    const int32_t main_path[] = {5, 6, 7, 8};
    assert_int_equal(sd_draft_tree_add_chain(&t, -1, main_path, 4, &dp), 4);
    t.n_main = 4;
    /* Row r: the model's choice after the root (r = 0) or node r - 1. */
    const int32_t choice[] = {5, 9, 7, 8, 3};
    float logits[5 * NV];
    for (int r = 0; r < 5; r++)
        for (int v = 0; v < NV; v++) logits[r * NV + v] = v == choice[r] ? 1.0f : 0.0f;
    struct sd_reuse ru;
    sd_reuse_reset(&ru);
    int32_t path[8], n_acc, next;
    sd_verify_accept(&t, 4, logits, NULL, NV, NULL, NULL, path, &n_acc, &next);
    assert_int_equal(n_acc, 1);
    assert_int_equal(next, 9);
    sd_reuse_update(&ru, &t, 4, logits, NULL, NV, path, n_acc);
    assert_int_equal(ru.n, 2);
    assert_int_equal(ru.tok[0], 7);
    assert_int_equal(ru.tok[1], 8);
    assert_int_equal(ru.lead, 6);
    /* Next step: the drafter proposes 1 2; within the budget of 7 rows the
     * run goes below the root as 7 8 and as 6 7 8. */
    sd_draft_tree_clear(&t);
    const int32_t next_main[] = {1, 2};
    sd_draft_tree_add_chain(&t, -1, next_main, 2, &dp);
    t.n_main = 2;
    assert_int_equal(sd_reuse_fill(&ru, &t, &dp), 5);
    assert_int_equal(sd_draft_tree_validate(&t, &dp, &err), SDNPU_OK);
    assert_int_equal(sd_draft_tree_child(&t, -1, 7) >= 0, 1);
    assert_int_equal(sd_draft_tree_child(&t, sd_draft_tree_child(&t, -1, 7), 8) >= 0, 1);
    const int32_t c6 = sd_draft_tree_child(&t, -1, 6);
    assert_true(c6 >= 0);
    assert_true(sd_draft_tree_child(&t, sd_draft_tree_child(&t, c6, 7), 8) >= 0);
    assert_int_equal(t.n, 7);
    /* With a budget of 9, the run also goes below node 0. */
    sd_draft_tree_clear(&t);
    sd_draft_tree_add_chain(&t, -1, next_main, 2, &dp);
    t.n_main = 2;
    struct sd_draft_params dp9 = dp;
    dp9.budget = 9;
    ru.n_offered = 0;
    assert_int_equal(sd_reuse_fill(&ru, &t, &dp9), 7);
    assert_true(sd_draft_tree_child(&t, sd_draft_tree_child(&t, 0, 7), 8) >= 0);
    ru.age = 0;
    ru.n_offered = 0;
    sd_draft_tree_clear(&t);
    sd_draft_tree_add_chain(&t, -1, next_main, 2, &dp);
    t.n_main = 2;
    assert_int_equal(sd_reuse_fill(&ru, &t, &dp), 5);
    assert_int_equal(t.n, 7);
    assert_int_equal(ru.n_offered, 5);
    /* The model now takes 7 8 below the root: the run is used up. */
    const int32_t c7 = sd_draft_tree_child(&t, -1, 7), c8 = sd_draft_tree_child(&t, c7, 8);
    const int32_t acc_path[] = {c7, c8};
    sd_reuse_update(&ru, &t, t.n, logits, NULL, NV, acc_path, 2);
    assert_int_equal(ru.n_accepted, 2);
    assert_int_equal(ru.n, 0);
    /* A run nobody takes ages a step at a time, offered (below the root and
     * below node 0) only where the step has a draft, and is dropped after
     * SD_REUSE_MAX_AGE steps. */
    assert_int_equal(ru.lead, -1);
    ru.n = 1;
    ru.tok[0] = 4;
    ru.age = 0;
    for (int k = 0; k < SD_REUSE_MAX_AGE; k++) {
        assert_int_equal(ru.n, 1);
        sd_draft_tree_clear(&t);
        if (k % 2) {
            sd_draft_tree_add_chain(&t, -1, next_main, 1, &dp);
            t.n_main = 1;
        }
        assert_int_equal(sd_reuse_fill(&ru, &t, &dp), k % 2 ? 2 : 0);
        sd_reuse_update(&ru, &t, t.n, logits, NULL, NV, path, 0);
    }
    assert_int_equal(ru.n, 0);
    sd_draft_tree_free(&t);
}

/* Every method against plain decoding on the tiny model of arch, with
 * n_verify rows, over n_prompts repetitive prompts (so drafts exist and
 * some are rejected). */
static void lossless_tiny(const char *arch, int32_t n_verify, int n_prompts, uint64_t seed, struct tally *t) {
    char path[256];
    snprintf(path, sizeof path, "%s/test_spec_tiny_%s.gguf", SD_BUILD_DIR, arch);
    struct sdt_tiny_opts o = {.arch = arch};
    assert_int_equal(sdt_tiny_write(&o, path), 0);
    struct sdnpu_model *m;
    char err[256];
    assert_int_equal(sdnpu_model_load(path, sdnpu_model_default_params(), &m, err, sizeof err), SDNPU_OK);
    struct sdnpu_session *s;
    struct sdnpu_session_params sp = run_params();
    sp.n_verify = n_verify;
    assert_int_equal(sdnpu_session_create(m, sp, &s), SDNPU_OK);
    assert_int_equal(sd_rt_n_verify(sd_tool_session_rt(s)), n_verify);
    uint64_t rng = seed;
    for (int p = 0; p < n_prompts; p++) {
        char prompt[600];
        int n = 0;
        for (int w = 0; w < 60; w++) {
            int k = (int)(sdt_rand_u64(&rng) % 6);
            n += snprintf(prompt + n, sizeof prompt - (size_t)n, "%s",
                          (const char *[]){"ab ", "cd ", "ab cd ", "ef", "gh ", "abcd "}[k]);
        }
        check_lossless(s, prompt, 48, t);
    }
    sdnpu_session_free(s);
    sdnpu_model_free(m);
}

static void test_lossless_tiny(void **state) {
    (void)state;
    const char *archs[] = {"llama", "qwen2", "gemma3"};
    struct tally t = {0};
    for (int a = 0; a < 3; a++)
        lossless_tiny(archs[a], 8, 8, 11 + (uint64_t)a, &t);
    /* Three rows, which a profile chooses where a fourth costs much. */
    lossless_tiny("qwen2", 3, 4, 17, &t);
    for (int k = 0; k < N_METHODS; k++) {
        printf("tiny models, %s: %d draft tokens accepted over %d verification steps, %d drafts skipped "
               "(reuse: %d of %d rows)\n",
               METHODS[k], t.acc[k], t.steps[k], t.plain[k], t.ra[k], t.rd[k]);
        assert_true(t.steps[k] > 0);
        /* The reuse methods that verify every draft did refill rows on
         * these repetitive prompts (a cost-aware one verifies what the
         * measured times say pays, so whether it has padding to refill
         * depends on the machine's timing: not asserted); the calibrated
         * ones did store sequences. */
        if (strstr(METHODS[k], "+reuse") && strstr(METHODS[k], ":fixed")) assert_true(t.rd[k] > 0);
        if (calibrated(METHODS[k])) assert_true(t.calib[k] > 0);
    }
}

/* Every method on a real model, greedy: the same tokens and the same stop
 * as plain decoding, on the prompts of tests/data/spec_prompts.txt (a
 * document and an instruction or a cue; the last two ask for repetition,
 * so that the guard has something to stop). An instruction-tuned model gets
 * each as a user turn in its chat format and answers until its turn ends. */
/* tests/data/spec_prompts.txt read afresh (its callers cut it at the
 * separators "\n\x1e\n"). */
static char *spec_prompts(void) {
    char ppath[512];
    snprintf(ppath, sizeof ppath, "%s/spec_prompts.txt", SD_TEST_DATA);
    FILE *f = fopen(ppath, "rb");
    assert_non_null(f);
    static char buf[1 << 16];
    buf[fread(buf, 1, sizeof buf - 1, f)] = '\0';
    fclose(f);
    return buf;
}

static void lossless_real(const char *path, const char *label, int stride) {
    char *buf = spec_prompts();
    struct sdnpu_model *m;
    char err[256];
    assert_int_equal(sdnpu_model_load(path, sdnpu_model_default_params(), &m, err, sizeof err), SDNPU_OK);
    g_chat = sdnpu_model_has_chat_template(m);
    struct sdnpu_session *s;
    assert_int_equal(sdnpu_session_create(m, run_params(), &s), SDNPU_OK);
    struct tally t = {0};
    int n_total = 0, n_prompts = 0;
    for (const char *p = buf; (p = strstr(p, "\n\x1e\n")) != NULL; p += 3) n_total++;
    assert_true(n_total >= 26);
    /* Every stride-th prompt (each one prefills its document 16 times),
     * and the last two, which ask for repetition. */
    int i = 0;
    for (char *p = buf, *sep; (sep = strstr(p, "\n\x1e\n")) != NULL; p = sep + 3, i++) {
        *sep = '\0';
        if (i % stride && i < n_total - 2) continue;
        check_lossless(s, p, 48, &t);
        n_prompts++;
    }
    const bool chat = g_chat;
    g_chat = false;
    sdnpu_session_free(s);
    for (int k = 0; k < N_METHODS; k++) {
        printf("%s, %d prompts%s, %s: identical to plain greedy; %.2f tokens per model call, %d drafts "
               "skipped (reuse: %d of %d rows accepted)\n",
               label, n_prompts, chat ? " as chat turns" : "", METHODS[k],
               t.steps[k] ? (double)(t.steps[k] + t.acc[k]) / t.steps[k] : 0.0, t.plain[k], t.ra[k], t.rd[k]);
        assert_true(t.acc[k] > 0);
        if (calibrated(METHODS[k])) assert_true(t.calib[k] > 0);
        /* The priced runs did mix one-row steps with verified drafts, so
         * the equality above covers switching graphs mid-generation on
         * every machine. (Whether the measured runs skip any draft depends
         * on the machine: a fast 8-row pass verifies every one.) */
        if (strstr(METHODS[k], ":priced")) assert_true(t.plain[k] > 0);
    }
    /* The guard did stop some of these generations (so the equality of the
     * stops above is about real stops). */
    printf("%s: the degeneration guard stopped %d runs\n", label, t.guard_stops);
    assert_true(t.guard_stops > 0);
    sdnpu_model_free(m);
}

/* The sanitizer run of scripts/test sets SDNPU_TEST_NO_MODEL: a real model
 * under ASan takes many minutes; the normal build runs these. */
static void test_lossless_real(void **state) {
    (void)state;
    if (!sdt_file_exists(SD_DEFAULT_MODEL) || getenv("SDNPU_TEST_NO_MODEL")) skip();
    lossless_real(SD_DEFAULT_MODEL, "the default model (Qwen2.5-Coder-0.5B-Instruct)", 6);
}

static void test_lossless_gemma(void **state) {
    (void)state;
    if (!sdt_file_exists(SD_GEMMA_MODEL) || getenv("SDNPU_TEST_NO_MODEL")) skip();
    lossless_real(SD_GEMMA_MODEL, "Gemma 3 270M (base)", 8);
}

/* A model loaded with head h ("exact" or "certified"). */
static struct sdnpu_model *load_head(const char *path, const char *h) {
    struct sdnpu_model_params mp = sdnpu_model_default_params();
    mp.head = h;
    struct sdnpu_model *m;
    char err[256];
    if (sdnpu_model_load(path, mp, &m, err, sizeof err) != SDNPU_OK) fail_msg("%s: %s", path, err);
    return m;
}

/* A sampled request on a new context of s (the default sampler but top-k
 * 10, which a certified head computes from its copy; repeat penalty pen),
 * then 8 tokens more without a prompt sampled from every logit (top-k
 * off), both seeded: every token after the prompt into out (the last,
 * pending one included); returns how many. */
static int32_t sampled(struct sdnpu_session *s, const char *prompt, uint64_t seed, float pen, int32_t *out,
                       int32_t cap) {
    struct sdnpu_generate_params gp = sdnpu_generate_default_params();
    gp.new_context = true;
    gp.n_predict = 32;
    gp.chat = g_chat;
    gp.sampling.seed = seed;
    gp.sampling.top_k = 10;
    gp.sampling.repeat_penalty = pen;
    gp.spec = sdt_spec("none");
    struct sdnpu_stats st;
    assert_int_equal(sdnpu_session_generate(s, prompt, strlen(prompt), &gp, &st), SDNPU_OK);
    const int32_t n0 = st.n_prompt_tokens;
    gp.n_predict = 8;
    gp.sampling.top_k = 0;
    gp.new_context = false;
    assert_int_equal(sdnpu_session_generate(s, "", 0, &gp, &st), SDNPU_OK);
    const int32_t n = sdnpu_session_n_past(s) - n0; /* the reply, the next turn's template, its reply */
    assert_true(n <= cap);
    memcpy(out, s->ctx_tokens + n0, (size_t)n * sizeof *out);
    return n;
}

/* Greedy decoding with a certified head (graphs/cert.h) gives the whole
 * head's tokens, plain and speculative (one-row steps and verification
 * passes of the profile's rows), on every stride-th prompt of
 * tests/data/spec_prompts.txt. */
static void certified_real(const char *path, const char *label, int stride) {
    char *buf = spec_prompts();
    struct sdnpu_model *me = load_head(path, "exact"), *mc = load_head(path, "certified");
    struct sdnpu_session *se, *sc;
    assert_int_equal(sdnpu_session_create(me, run_params(), &se), SDNPU_OK);
    assert_int_equal(sdnpu_session_create(mc, run_params(), &sc), SDNPU_OK);
    g_chat = sdnpu_model_has_chat_template(me);
    const char *methods[] = {"none", "sam", "sam-tree"};
    int i = 0, n_prompts = 0, n_tokens = 0, n_sampled = 0;
    for (char *p = buf, *sep; (sep = strstr(p, "\n\x1e\n")) != NULL; p = sep + 3, i++) {
        *sep = '\0';
        if (i % stride) continue;
        for (size_t k = 0; k < SD_ARRAY_LEN(methods); k++) {
            int32_t a[512], b[512];
            struct sdnpu_stats sa, sb;
            const int32_t na = run(se, p, methods[k], 48, a, &sa), nb = run(sc, p, methods[k], 48, b, &sb);
            if (na != nb || sa.stop_reason != sb.stop_reason)
                fail_msg("%s, %s: %d tokens (stop %d) with the whole head, %d (stop %d) certified", label,
                         methods[k], na, sa.stop_reason, nb, sb.stop_reason);
            for (int32_t t = 0; t < na - 1; t++) /* run() gives the tokens in the context: all but the last */
                if (a[t] != b[t])
                    fail_msg("%s, %s: token %d is %d certified, %d whole", label, methods[k], t, b[t], a[t]);
            assert_true(sb.shared_weight_bytes > sa.shared_weight_bytes); /* the certificate is held */
            n_tokens += na;
        }
        /* Sampling from the certified head's top-k logits draws the same
         * tokens, with and without a repetition penalty (whose tokens it
         * computes whole), and a request after it that reads every logit
         * finds them all. */
        for (int pen = 0; pen < 2; pen++) {
            int32_t a[128], b[128];
            const int32_t na = sampled(se, p, 100 + (uint64_t)i, pen ? 1.3f : 1.0f, a, 128);
            const int32_t nb = sampled(sc, p, 100 + (uint64_t)i, pen ? 1.3f : 1.0f, b, 128);
            if (na != nb || memcmp(a, b, (size_t)na * sizeof *a))
                fail_msg("%s, sampling (penalty %d): %d tokens certified differ from the whole head's %d", label, pen,
                         nb, na);
            n_sampled += na;
        }
        n_prompts++;
    }
    g_chat = false;
    printf("%s: %d prompts, %d greedy and %d sampled tokens: the certified head gave the whole head's every "
           "token\n",
           label, n_prompts, n_tokens, n_sampled);
    assert_true(n_prompts >= 4);
    sdnpu_session_free(se);
    sdnpu_session_free(sc);
    sdnpu_model_free(me);
    sdnpu_model_free(mc);
}

static void test_certified_head_real(void **state) {
    (void)state;
    if (!sdt_file_exists(SD_DEFAULT_MODEL) || getenv("SDNPU_TEST_NO_MODEL")) skip();
    certified_real(SD_DEFAULT_MODEL, "the default model", 6);
    if (sdt_file_exists(SD_GEMMA_MODEL)) certified_real(SD_GEMMA_MODEL, "Gemma 3 270M", 8);
}

/* The first two generated tokens' joint outcome over many seeds, plain
 * sampling (mode 0) against speculative sampling with spec (mode 1),
 * compared by a two-sample chi-square test over bins with enough mass
 * (deterministic: fixed seeds). */
static void check_sampling_distribution(struct sdnpu_model *m, const char *prompt, bool chat, const char *spec,
                                        float temp, int32_t top_k, int runs, const char *label) {
    struct sdnpu_session_params sp = sdnpu_session_default_params();
    sp.n_ctx = 256;
    sp.n_batch = 32;
    struct sdnpu_session *s;
    assert_int_equal(sdnpu_session_create(m, sp, &s), SDNPU_OK);
    enum { BINS = 48 };
    int hist[2][BINS] = {{0}};
    int drafted = 0;
    for (int mode = 0; mode < 2; mode++) {
        for (int r = 0; r < runs; r++) {
            /* A new context each time; the prompt is prefilled once and then
             * kept (prefix reuse): its last token's logits, the ones sampled
             * from, are computed afresh by every request. */
            struct sdnpu_generate_params gp = sdnpu_generate_default_params();
            gp.new_context = true;
            gp.sampling.temperature = temp;
            gp.sampling.top_k = top_k;
            gp.sampling.top_p = 1.0f;
            gp.sampling.min_p = 0.0f;
            gp.sampling.seed = (uint64_t)r * 7919 + (uint64_t)mode * 104729;
            gp.n_predict = 3; /* the second token comes from a step that drafts (none drafts for the last) */
            gp.chat = chat;
            gp.adaptive = false; /* every draft verified: the residual draws are what is tested */
            gp.spec = sdt_spec(mode ? spec : "none");
            struct sdnpu_stats st;
            assert_int_equal(sdnpu_session_generate(s, prompt, strlen(prompt), &gp, &st), SDNPU_OK);
            drafted += st.n_drafted;
            int32_t np = st.n_prompt_tokens;
            /* Bin by the first two tokens (hashed into BINS). */
            uint32_t h = (uint32_t)s->ctx_tokens[np] * 31u + (st.n_generated > 1 ? (uint32_t)s->ctx_tokens[np + 1] : 0u);
            hist[mode][h % BINS]++;
        }
    }
    double chi = 0;
    int dof = -1;
    for (int b = 0; b < BINS; b++) {
        double a = hist[0][b], c = hist[1][b];
        if (a + c < 10) continue;
        chi += (a - c) * (a - c) / (a + c);
        dof++;
    }
    printf("%s: %s vs plain sampling: chi-square %.1f with %d degrees of freedom, %d tokens drafted\n", label, spec,
           chi, dof, drafted);
    assert_true(drafted > 0); /* the speculative runs did verify drafts */
    assert_true(dof >= 5);
    /* The 99.9% quantile of chi-square is below dof + 3.1 * sqrt(2 dof) + 10 for these dof. */
    assert_true(chi < dof + 3.1 * sqrt(2.0 * dof) + 10);
    sdnpu_session_free(s);
}

/* Speculative sampling draws from the same distribution as plain sampling,
 * on the tiny model. */
static void test_spec_sampling_distribution(void **state) {
    (void)state;
    char path[256];
    snprintf(path, sizeof path, "%s/test_spec_tiny_gemma3.gguf", SD_BUILD_DIR);
    struct sdt_tiny_opts o = {.arch = "gemma3", .seed = 3};
    assert_int_equal(sdt_tiny_write(&o, path), 0);
    struct sdnpu_model *m;
    char err[256];
    assert_int_equal(sdnpu_model_load(path, sdnpu_model_default_params(), &m, err, sizeof err), SDNPU_OK);
    check_sampling_distribution(m, "ab ab ab ab ab ab ab ab ab ab ab ab", false, "sam", 1.0f, 0, 800, "tiny gemma3");
    sdnpu_model_free(m);
}

/* The same on the default (instruction-tuned) model: a chat turn whose
 * answer the context drafts, sam-tree with calibration, top-k 40 as
 * llama.cpp's default (without a top-k cut every draw sorts all 151,936
 * candidates). */
static void test_spec_sampling_real(void **state) {
    (void)state;
    /* 400 requests, the prompt kept from one to the next: 46 s on an
     * AVX2-only 2-core Zen 3 (the sanitizer builds skip it with the other
     * real-model tests). */
    if (!sdt_file_exists(SD_DEFAULT_MODEL) || getenv("SDNPU_TEST_NO_MODEL")) skip();
    struct sdnpu_model *m;
    char err[256];
    assert_int_equal(sdnpu_model_load(SD_DEFAULT_MODEL, sdnpu_model_default_params(), &m, err, sizeof err), SDNPU_OK);
    const char *prompt = "Colors: red blue green red blue green red blue green yellow red blue.\n"
                         "Continue the list of colors with any colors you like.";
    check_sampling_distribution(m, prompt, true, "sam-tree+calib", 1.5f, 40, 200, "Qwen2.5-Coder-0.5B-Instruct");
    sdnpu_model_free(m);
}

/* The tiny Gemma 3 model of the default seed, written and loaded. */
static struct sdnpu_model *tiny_gemma3(void) {
    char path[256], err[256];
    snprintf(path, sizeof path, "%s/test_spec_tiny_gemma3.gguf", SD_BUILD_DIR);
    struct sdt_tiny_opts o = {.arch = "gemma3"};
    assert_int_equal(sdt_tiny_write(&o, path), 0);
    struct sdnpu_model *m;
    assert_int_equal(sdnpu_model_load(path, sdnpu_model_default_params(), &m, err, sizeof err), SDNPU_OK);
    return m;
}

/* A session after a greedy request of n tokens with spec, then a sampled
 * continuation of 16 tokens without a prompt into out; returns whether
 * the greedy request ended on a verification step (no logits kept). */
static bool continue_after(struct sdnpu_model *m, const char *spec, int n, int32_t out[16]) {
    struct sdnpu_session_params sp = sdnpu_session_default_params();
    sp.n_ctx = 256;
    struct sdnpu_session *s;
    assert_int_equal(sdnpu_session_create(m, sp, &s), SDNPU_OK);
    struct sdnpu_generate_params gp = sdnpu_generate_default_params();
    gp.sampling.temperature = 0;
    gp.n_predict = n;
    gp.adaptive = false;
    gp.spec = sdt_spec(spec);
    struct sdnpu_stats st;
    const char *prompt = "ab cd ab cd ab cd ab cd ab cd ab cd ab cd ab cd";
    assert_int_equal(sdnpu_session_generate(s, prompt, strlen(prompt), &gp, &st), SDNPU_OK);
    const bool stale = sd_step_logits_stale(&s->step);
    gp.sampling.temperature = 0.9f;
    gp.sampling.seed = 4242;
    gp.n_predict = 16;
    gp.spec = sdt_spec("none");
    /* The tokens held, a pending last one included (it sits at
     * ctx_tokens[n_past]: the continuation evaluates it first). */
    const int32_t n0 = sdnpu_session_n_past(s);
    assert_int_equal(sdnpu_session_generate(s, "", 0, &gp, &st), SDNPU_OK);
    assert_int_equal(st.n_prompt_tokens, 0);
    assert_int_equal(sdnpu_session_n_past(s) - n0, 16);
    memcpy(out, s->ctx_tokens + n0, 16 * sizeof *out);
    sdnpu_session_free(s);
    return stale;
}

/* Greedy verification keeps no logits (verify/step.c): a request that then
 * starts without a prompt, sampling, must draw from the same logits as
 * after plain decoding, so the same tokens for the same seed. */
static void test_continue_after_greedy_spec(void **state) {
    (void)state;
    struct sdnpu_model *m = tiny_gemma3();
    int tested = 0;
    for (int n = 16; n < 40; n++) {
        int32_t spec[16], plain[16];
        if (!continue_after(m, "sam-tree", n, spec)) continue; /* ended on a plain step: not the case */
        continue_after(m, "none", n, plain);
        for (int i = 0; i < 16; i++)
            if (spec[i] != plain[i])
                fail_msg("after %d tokens, continuation token %d: %d after speculation, %d after plain", n, i, spec[i],
                         plain[i]);
        tested++;
    }
    assert_true(tested > 0);
    sdnpu_model_free(m);
}

/* Greedy tokens of one request of n tokens on a reset session (s holds
 * them afterwards, a pending last one at ctx_tokens[n_past]). */
static int32_t greedy(struct sdnpu_session *s, const char *prompt, const char *spec, int n, bool fresh) {
    struct sdnpu_generate_params gp = sdnpu_generate_default_params();
    gp.sampling.temperature = 0;
    gp.n_predict = n;
    gp.adaptive = false;
    gp.spec = sdt_spec(spec);
    if (fresh) sdnpu_session_reset(s);
    struct sdnpu_stats st;
    assert_int_equal(sdnpu_session_generate(s, prompt, strlen(prompt), &gp, &st), SDNPU_OK);
    assert_int_equal(st.stop_reason, SDNPU_STOP_LENGTH); /* the tiny model never ends its text */
    return st.n_generated;
}

/* The token that ends a request is emitted without a model call and held
 * pending: a request of 2k tokens equals one of k continued by k, directly,
 * through sdnpu_session_eval of nothing, and through a saved and loaded
 * state; sdnpu_session_n_past counts the pending token. */
static void test_pending_token(void **state) {
    (void)state;
    char file[300];
    snprintf(file, sizeof file, "%s/test_spec_pending.state", SD_BUILD_DIR);
    struct sdnpu_model *m = tiny_gemma3();
    struct sdnpu_session_params sp = sdnpu_session_default_params();
    sp.n_ctx = 256;
    struct sdnpu_session *a, *b;
    assert_int_equal(sdnpu_session_create(m, sp, &a), SDNPU_OK);
    assert_int_equal(sdnpu_session_create(m, sp, &b), SDNPU_OK);
    const char *prompt = "ab cd ab cd ab cd ab cd ef";
    const char *specs[] = {"none", "sam-tree"};
    for (int k = 0; k < 2; k++) {
        assert_int_equal(greedy(a, prompt, "none", 24, true), 24);
        int32_t whole[24], n_all = sdnpu_session_n_past(a);
        memcpy(whole, a->ctx_tokens + n_all - 24, sizeof whole);
        /* Twelve, then twelve more: */
        for (int how = 0; how < 3; how++) {
            struct sdnpu_session *s = a;
            assert_int_equal(greedy(a, prompt, specs[k], 12, true), 12);
            assert_true(a->has_pending);
            assert_int_equal(sdnpu_session_n_past(a), a->n_past + 1);
            assert_int_equal(a->ctx_tokens[a->n_past], whole[11]);
            if (how == 1) assert_int_equal(sdnpu_session_eval(a, NULL, 0, NULL, 0), SDNPU_OK);
            if (how == 2) {
                assert_int_equal(sdnpu_session_save(a, file), SDNPU_OK);
                assert_int_equal(sdnpu_session_load(b, file), SDNPU_OK);
                s = b;
            }
            assert_true(!s->has_pending || how == 0);
            assert_int_equal(sdnpu_session_n_past(s), n_all - 12);
            assert_int_equal(greedy(s, "", specs[k], 12, false), 12);
            assert_int_equal(sdnpu_session_n_past(s), n_all);
            assert_memory_equal(s->ctx_tokens + n_all - 24, whole, sizeof whole);
        }
    }
    remove(file);
    sdnpu_session_free(a);
    sdnpu_session_free(b);
    sdnpu_model_free(m);
}

int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_continue_after_greedy_spec),
        cmocka_unit_test(test_pending_token),
        cmocka_unit_test(test_reuse_stage),
        cmocka_unit_test(test_lossless_tiny),
        cmocka_unit_test(test_spec_sampling_distribution),
        cmocka_unit_test(test_spec_sampling_real),
        cmocka_unit_test(test_lossless_real),
        cmocka_unit_test(test_lossless_gemma),
        cmocka_unit_test(test_certified_head_real),
    };
    if (argc > 1) cmocka_set_test_filter(argv[1]); /* e.g. "test_lossless_*" */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
