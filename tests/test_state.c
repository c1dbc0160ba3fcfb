/* tests/test_state.c - saved sessions (sdnpu_session_save and
 * sdnpu_session_load): a loaded context continues bit-identically, and
 * every damaged, foreign, hostile or unreadable file is refused with a
 * status and a message, the session left as it was; a context moved to a
 * cache of another size (sdnpu_session_set_n_ctx) continues alike. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/base.h"
#include "sdnpu.h"
#include "util_common.h"
#include "util_tiny_model.h"

/* The tiny qwen2 model's shape (tests/util_tiny_model.h's defaults): what
 * docs/state.md's layout gives for its files, computed here from the
 * documented format rather than taken from the code under test. */
enum { N_LAYER = 2, N_HEAD_KV = 2, KV_DIM = N_HEAD_KV * 64, N_VOCAB = 384, HEADER = 128 };
/* The KV element types: the ggml order's fp16 keys, the fast kernels'
 * (the default) integer keys, whose scales follow the 16-bit values. */
enum { KV_FP16 = 1, KV_I16 = 2 };

static size_t kv_bytes(size_t n_tokens, int type) {
    return (size_t)N_LAYER * 2 * n_tokens * KV_DIM * 2 +
           (type == KV_I16 ? (size_t)N_LAYER * n_tokens * N_HEAD_KV * 4 : 0);
}
static size_t state_bytes_of(size_t n_tokens, int type) {
    size_t kv_off = (HEADER + 4 * n_tokens + 63) / 64 * 64;
    return kv_off + kv_bytes(n_tokens, type) + 8;
}
static size_t state_bytes(size_t n_tokens) { return state_bytes_of(n_tokens, KV_I16); }
static size_t kv_offset(size_t n_tokens) { return (HEADER + 4 * n_tokens + 63) / 64 * 64; }

static struct sdnpu_model *tiny_model(const char *name, struct sdt_tiny_opts o) {
    char path[256];
    snprintf(path, sizeof path, "%s/test_state_%s.gguf", SD_BUILD_DIR, name);
    if (!o.arch) o.arch = "qwen2";
    struct sdnpu_model *m = sdt_tiny_load(&o, path);
    assert_non_null(m);
    return m;
}

static struct sdnpu_model *model_a(void) { return tiny_model("a", (struct sdt_tiny_opts){0}); }

static struct sdnpu_session *session_with(struct sdnpu_model *m, int32_t n_ctx, const char *kernels) {
    struct sdnpu_session_params p = sdnpu_session_default_params();
    p.n_ctx = n_ctx;
    p.n_threads = 1;
    p.kernels = kernels;
    struct sdnpu_session *s = NULL;
    assert_int_equal(sdnpu_session_create(m, p, &s), SDNPU_OK);
    return s;
}

static struct sdnpu_session *session(struct sdnpu_model *m, int32_t n_ctx) {
    return session_with(m, n_ctx, NULL);
}

static const char *tmp_path(const char *name) {
    static char paths[4][256];
    static int next;
    char *p = paths[next++ & 3];
    snprintf(p, 256, "%s/test_state_%s.bin", SD_BUILD_DIR, name);
    return p;
}

/* A prompt of n pseudo-random tokens of the vocabulary, BOS first. */
static void prompt(sdnpu_token *t, int n, uint64_t seed) {
    t[0] = 1;
    for (int i = 1; i < n; i++) t[i] = (sdnpu_token)(3 + sdt_rand_u64(&seed) % (N_VOCAB - 3));
}

static sdnpu_token argmax(const float *l) {
    sdnpu_token b = 0;
    for (int i = 1; i < N_VOCAB; i++)
        if (l[i] > l[b]) b = i;
    return b;
}

/* Greedy decoding by hand, on sdnpu_session_eval alone: evaluate `first`,
 * take the argmax of its logits as the next token, n times. toks[n] and
 * logits[n][N_VOCAB] receive each step's. */
static void greedy(struct sdnpu_session *s, sdnpu_token first, int n, sdnpu_token *toks, float *logits) {
    sdnpu_token t = first;
    for (int i = 0; i < n; i++) {
        float *l = logits + (size_t)i * N_VOCAB;
        assert_int_equal(sdnpu_session_eval(s, &t, 1, l, N_VOCAB), SDNPU_OK);
        toks[i] = t = argmax(l);
    }
}


/* sdnpu_session_generate, greedy, after the prompt text (may be ""): its
 * text and token count. */
static int32_t generate_after(struct sdnpu_session *s, const char *text, const char *spec, struct sdt_text *out) {
    struct sdnpu_generate_params gp = sdnpu_generate_default_params();
    gp.sampling.temperature = 0;
    gp.n_predict = 12;
    gp.on_text = sdt_collect;
    gp.user = out;
    if (spec) gp.spec = sdt_spec(spec);
    struct sdnpu_stats st;
    out->n = 0;
    assert_int_equal(sdnpu_session_generate(s, text, strlen(text), &gp, &st), SDNPU_OK);
    assert_true(st.n_generated > 0);
    return st.n_generated;
}

static int32_t generate(struct sdnpu_session *s, const char *spec, struct sdt_text *out) {
    return generate_after(s, " ab", spec, out);
}

enum { STEPS = 16 };

/* Each session of s[1..n) continues exactly as s[0]: the same greedy
 * tokens and the same logits, bit for bit, then the same generated text.
 * All of them advance. */
static void assert_same_continuations(struct sdnpu_session **s, int n) {
    static sdnpu_token t0[STEPS], t[STEPS];
    static float l0[STEPS * N_VOCAB], l[STEPS * N_VOCAB];
    static struct sdt_text x0, x;
    const int32_t n_past = sdnpu_session_n_past(s[0]);
    greedy(s[0], 40, STEPS, t0, l0);
    int32_t n_gen = generate(s[0], NULL, &x0);
    for (int i = 1; i < n; i++) {
        assert_int_equal(sdnpu_session_n_past(s[i]), n_past);
        greedy(s[i], 40, STEPS, t, l);
        assert_memory_equal(t0, t, sizeof t);
        assert_memory_equal(l0, l, sizeof l);
        assert_int_equal(generate(s[i], NULL, &x), n_gen);
        assert_int_equal(x.n, x0.n);
        assert_memory_equal(x.buf, x0.buf, x.n);
        assert_int_equal(sdnpu_session_n_past(s[i]), sdnpu_session_n_past(s[0]));
    }
}

static void assert_same_continuation(struct sdnpu_session *a, struct sdnpu_session *b) {
    assert_same_continuations((struct sdnpu_session *[]){a, b}, 2);
}

static uint8_t *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}


/* The file's last 8 bytes: XXH3-64 of everything before them. */
static void reseal(uint8_t *f, size_t n) { sd_put64(f + n - 8, XXH3_64bits(f, n - 8)); }

/* Save after evaluating a prompt, load into a fresh session: the two
 * continue identically, and as a third session that prefilled the same
 * tokens itself. The file is laid out as docs/state.md says. */
static void test_roundtrip(void **state) {
    (void)state;
    struct sdnpu_model *m = model_a();
    enum { N = 37 };
    sdnpu_token p[N];
    prompt(p, N, 7);
    struct sdnpu_session *a = session(m, 256), *b = session(m, 128), *c = session(m, 256);
    /* Each its own size; a context moves between sizes (b is smaller). */
    assert_int_equal(sdnpu_session_n_ctx(a), 256);
    assert_int_equal(sdnpu_session_n_ctx(b), 128);
    assert_int_equal(sdnpu_session_n_ctx(NULL), 0);
    /* The default (0: 4,096) and a larger one are capped at the model's
     * own context, 2,048 tokens here (tests/util_tiny_model.h). */
    struct sdnpu_session *d = session(m, 0), *e = session(m, 1 << 20);
    assert_int_equal(sdnpu_session_n_ctx(d), 2048);
    assert_int_equal(sdnpu_session_n_ctx(e), 2048);
    sdnpu_session_free(d);
    sdnpu_session_free(e);
    assert_int_equal(sdnpu_session_eval(a, p, N, NULL, 0), SDNPU_OK);
    const char *path = tmp_path("roundtrip");
    assert_int_equal(sdnpu_session_save(a, path), SDNPU_OK);

    size_t n;
    uint8_t *f = read_file(path, &n);
    assert_int_equal(n, state_bytes(N));
    assert_memory_equal(f, "SDNPUSES", 8);
    assert_int_equal(sd_get32(f + 8), 1);
    assert_int_equal(sd_get32(f + 12), HEADER);
    assert_string_equal((const char *)f + 16, "qwen2");
    assert_int_equal(sd_get32(f + 48), N_LAYER);
    assert_int_equal(sd_get32(f + 72), KV_I16);
    assert_int_equal(sd_get32(f + 76), N);
    assert_int_equal(sd_get64(f + 88), kv_bytes(N, KV_I16));
    assert_memory_equal(f + HEADER, p, sizeof p);
    free(f);

    /* b held another context: the load replaces it whole. */
    sdnpu_token other[5] = {1, 50, 60, 70, 80};
    assert_int_equal(sdnpu_session_eval(b, other, 5, NULL, 0), SDNPU_OK);
    assert_int_equal(sdnpu_session_load(b, path), SDNPU_OK);
    assert_int_equal(sdnpu_session_n_past(b), N);
    assert_string_equal(sdnpu_session_last_error(b), "");
    /* The saved session and the loaded one continue as a session that
     * prefilled the tokens itself. */
    assert_int_equal(sdnpu_session_eval(c, p, N, NULL, 0), SDNPU_OK);
    assert_same_continuations((struct sdnpu_session *[]){c, a, b}, 3);

    /* Saved after generation (with drafting, whose greedy verification
     * leaves no logits behind) and loaded again over the same session. */
    struct sdt_text t;
    generate(a, "sam", &t);
    assert_int_equal(sdnpu_session_save(a, path), SDNPU_OK);
    assert_int_equal(sdnpu_session_load(b, path), SDNPU_OK);
    assert_same_continuation(a, b);

    /* A loaded context continues without a prompt too: the next-token
     * logits, which the file does not hold, are computed again from its
     * last token, as the saved session holds them after its prefill. */
    sdnpu_token r[9];
    prompt(r, 9, 17);
    sdnpu_session_reset(a);
    assert_int_equal(sdnpu_session_eval(a, r, 9, NULL, 0), SDNPU_OK);
    assert_int_equal(sdnpu_session_save(a, path), SDNPU_OK);
    assert_int_equal(sdnpu_session_load(b, path), SDNPU_OK);
    struct sdt_text ta, tb;
    assert_int_equal(generate_after(a, "", NULL, &ta), generate_after(b, "", NULL, &tb));
    assert_int_equal(ta.n, tb.n);
    assert_memory_equal(ta.buf, tb.buf, ta.n);
    assert_same_continuation(a, b);

    /* An empty context saves and loads as one. */
    sdnpu_session_reset(a);
    assert_int_equal(sdnpu_session_save(a, path), SDNPU_OK);
    f = read_file(path, &n);
    assert_int_equal(n, state_bytes(0));
    free(f);
    assert_int_equal(sdnpu_session_load(b, path), SDNPU_OK);
    assert_int_equal(sdnpu_session_n_past(b), 0);
    unlink(path);
    sdnpu_session_free(a);
    sdnpu_session_free(b);
    sdnpu_session_free(c);
    sdnpu_model_free(m);
}

/* A file saved by either kernels loads into a session of the other: the
 * ggml order's fp16 keys (type 1) are quantized into the fast kernels'
 * integer keys, and integer keys (type 2) become fp16 values; sessions that
 * load the same file continue alike, and a session saves its own type. */
static void test_other_kernels(void **state) {
    (void)state;
    struct sdnpu_model *m = model_a();
    enum { N = 21 };
    sdnpu_token p[N];
    prompt(p, N, 31);
    const char *p16 = tmp_path("fp16"), *pi = tmp_path("i16");
    struct sdnpu_session *g = session_with(m, 128, "ggml"), *f = session(m, 128);
    assert_int_equal(sdnpu_session_eval(g, p, N, NULL, 0), SDNPU_OK);
    assert_int_equal(sdnpu_session_eval(f, p, N, NULL, 0), SDNPU_OK);
    assert_int_equal(sdnpu_session_save(g, p16), SDNPU_OK);
    assert_int_equal(sdnpu_session_save(f, pi), SDNPU_OK);
    size_t n;
    uint8_t *b = read_file(p16, &n);
    assert_int_equal(n, state_bytes_of(N, KV_FP16));
    assert_int_equal(sd_get32(b + 72), KV_FP16);
    free(b);
    b = read_file(pi, &n);
    assert_int_equal(n, state_bytes_of(N, KV_I16));
    assert_int_equal(sd_get32(b + 72), KV_I16);
    free(b);
    struct sdnpu_session *f1 = session(m, 128), *f2 = session(m, 64), *g1 = session_with(m, 128, "ggml"),
                         *g2 = session_with(m, 64, "ggml");
    assert_int_equal(sdnpu_session_load(f1, p16), SDNPU_OK);
    assert_int_equal(sdnpu_session_load(f2, p16), SDNPU_OK);
    assert_int_equal(sdnpu_session_load(g1, pi), SDNPU_OK);
    assert_int_equal(sdnpu_session_load(g2, pi), SDNPU_OK);
    assert_int_equal(sdnpu_session_n_past(f1), N);
    assert_int_equal(sdnpu_session_n_past(g1), N);
    assert_same_continuation(f1, f2);
    assert_same_continuation(g1, g2);
    sdnpu_session_free(g), sdnpu_session_free(f), sdnpu_session_free(f1), sdnpu_session_free(f2);
    sdnpu_session_free(g1), sdnpu_session_free(g2);
    sdnpu_model_free(m);
}

/* The state belongs to the model's content, not to its file: the same
 * model written again at another path (another modification time) takes
 * it. */
static void test_copied_model(void **state) {
    (void)state;
    struct sdnpu_model *m = model_a();
    struct sdnpu_model *copy = tiny_model("a_copy", (struct sdt_tiny_opts){0});
    sdnpu_token p[20];
    prompt(p, 20, 11);
    struct sdnpu_session *a = session(m, 128), *b = session(copy, 128);
    assert_int_equal(sdnpu_session_eval(a, p, 20, NULL, 0), SDNPU_OK);
    const char *path = tmp_path("copied");
    assert_int_equal(sdnpu_session_save(a, path), SDNPU_OK);
    assert_int_equal(sdnpu_session_load(b, path), SDNPU_OK);
    assert_same_continuation(a, b);
    unlink(path);
    sdnpu_session_free(a);
    sdnpu_session_free(b);
    sdnpu_model_free(copy);
    sdnpu_model_free(m);
}

/* A refused load: the status, the message holds `want` (and the path),
 * and the session still holds its n_past tokens. */
static void refused(struct sdnpu_session *s, const char *path, int status, const char *want) {
    int32_t n_past = sdnpu_session_n_past(s);
    int rc = sdnpu_session_load(s, path);
    const char *msg = sdnpu_session_last_error(s);
    if (rc != status || !strstr(msg, want))
        fail_msg("load of %s: %s \"%s\", expected %s with \"%s\"", path, sdnpu_status_str(rc), msg,
                 sdnpu_status_str(status), want);
    assert_non_null(strstr(msg, path));
    assert_int_equal(sdnpu_session_n_past(s), n_past);
}

/* Files of other models: each field that differs is named. */
static void test_other_model(void **state) {
    (void)state;
    struct sdnpu_model *m = model_a();
    struct {
        const char *name, *want;
        struct sdt_tiny_opts o;
    } others[] = {
        {"layers", "n_layer 3 (this model: 2)", {.n_layer = 3}},
        {"kv_heads", "n_head_kv 1 (this model: 2)", {.n_head_kv = 1}},
        {"seed", "model hash", {.seed = 43}},
        {"llama", "architecture llama (this model: qwen2)", {.arch = "llama"}},
    };
    struct sdnpu_session *s = session(m, 128);
    sdnpu_token p[12];
    prompt(p, 12, 3);
    assert_int_equal(sdnpu_session_eval(s, p, 12, NULL, 0), SDNPU_OK);
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        struct sdnpu_model *om = tiny_model(others[i].name, others[i].o);
        struct sdnpu_session *os = session(om, 128);
        assert_int_equal(sdnpu_session_eval(os, p, 9, NULL, 0), SDNPU_OK);
        const char *path = tmp_path(others[i].name);
        assert_int_equal(sdnpu_session_save(os, path), SDNPU_OK);
        refused(s, path, SDNPU_ERR_FORMAT, "the state file is for another model");
        refused(s, path, SDNPU_ERR_FORMAT, others[i].want);
        /* ... and the other way round. */
        assert_int_equal(sdnpu_session_save(s, path), SDNPU_OK);
        refused(os, path, SDNPU_ERR_FORMAT, "for another model");
        unlink(path);
        sdnpu_session_free(os);
        sdnpu_model_free(om);
    }
    sdnpu_session_free(s);
    sdnpu_model_free(m);
}

/* Every kind of bad file, each refused with a status and a message, the
 * session as it was: afterwards it still continues as a session that saw
 * none of them. */
static void test_refusals(void **state) {
    (void)state;
    struct sdnpu_model *m = model_a();
    enum { N = 6 };
    sdnpu_token p[N];
    prompt(p, N, 5);
    struct sdnpu_session *s = session(m, 64), *ref = session(m, 64);
    assert_int_equal(sdnpu_session_eval(s, p, N, NULL, 0), SDNPU_OK);
    const char *good = tmp_path("good"), *bad = tmp_path("bad");
    assert_int_equal(sdnpu_session_save(s, good), SDNPU_OK);
    /* s now holds another context, which every refusal must leave. */
    sdnpu_token q[9];
    prompt(q, 9, 99);
    sdnpu_session_reset(s);
    assert_int_equal(sdnpu_session_eval(s, q, 9, NULL, 0), SDNPU_OK);
    assert_int_equal(sdnpu_session_eval(ref, q, 9, NULL, 0), SDNPU_OK);
    size_t n;
    uint8_t *f = read_file(good, &n);
    assert_int_equal(n, state_bytes(N));
    uint8_t *g = malloc(n + 64);
    assert_non_null(g);

    /* Truncated at every length through the header, the tokens and the
     * KV cache's first bytes, then every 61 bytes. */
    for (size_t len = 0; len < n; len += len < kv_offset(N) + 64 ? 1 : 61) {
        write_file(bad, f, len);
        refused(s, bad, SDNPU_ERR_FORMAT, "truncated");
    }
    write_file(bad, f, 100);
    refused(s, bad, SDNPU_ERR_FORMAT, "truncated: 100 bytes");
    write_file(bad, f, n - 1);
    refused(s, bad, SDNPU_ERR_FORMAT, "but the file is only");
    /* A byte too many. */
    memcpy(g, f, n);
    g[n] = 0;
    write_file(bad, g, n + 1);
    refused(s, bad, SDNPU_ERR_FORMAT, "too long");

    /* One bit flipped anywhere in the header: refused, whichever field it
     * hits; in the tokens, the padding, the KV cache or the checksum: the
     * checksum says so. */
    for (size_t bit = 0; bit < (size_t)HEADER * 8; bit++) {
        memcpy(g, f, n);
        g[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        write_file(bad, g, n);
        refused(s, bad, SDNPU_ERR_FORMAT, "");
    }
    for (size_t byte = HEADER; byte < n; byte += (byte < kv_offset(N) ? 1 : 97)) {
        memcpy(g, f, n);
        g[byte] ^= (uint8_t)(1u << (byte % 8));
        write_file(bad, g, n);
        refused(s, bad, SDNPU_ERR_FORMAT, "checksum mismatch: the file is damaged");
    }
    memcpy(g, f, n);
    g[n - 1] ^= 0x80;
    write_file(bad, g, n);
    refused(s, bad, SDNPU_ERR_FORMAT, "checksum mismatch");

    /* Particular header fields. */
    memcpy(g, f, n);
    g[3] = 'X';
    write_file(bad, g, n);
    refused(s, bad, SDNPU_ERR_FORMAT, "not a saved session (bad magic)");
    memcpy(g, f, n);
    sd_put32(g + 8, 2);
    write_file(bad, g, n);
    refused(s, bad, SDNPU_ERR_FORMAT, "format version 2; this build reads version 1");
    memcpy(g, f, n);
    sd_put32(g + 72, 0);
    write_file(bad, g, n);
    refused(s, bad, SDNPU_ERR_FORMAT, "KV element type 0");

    /* A hostile count under a header that is otherwise right (its KV
     * offset and size follow the count, as a writer would make them): the
     * file's size refuses it before anything is allocated. */
    sdt_alloc_install();
    static const uint32_t hostile[] = {N + 1, 100, 4096, 1u << 20, 0x7fffffffu, 0x80000000u, 0xffffffffu};
    for (size_t i = 0; i < sizeof hostile / sizeof hostile[0]; i++) {
        uint32_t h = hostile[i];
        memcpy(g, f, n);
        sd_put32(g + 76, h);
        sd_put64(g + 80, kv_offset(h));
        sd_put64(g + 88, (uint64_t)kv_bytes(h, KV_I16));
        write_file(bad, g, n);
        char want[96];
        snprintf(want, sizeof want, "truncated: it holds %u tokens", h);
        sdt_alloc_fail_after(-1);
        refused(s, bad, SDNPU_ERR_FORMAT, want);
        refused(s, bad, SDNPU_ERR_FORMAT, "but the file is only");
        assert_int_equal(sdt_alloc_count(), 0);
    }
    sdnpu_allocator_set(NULL);

    /* Files that pass their checksum (resealed with XXH3-64, as the format
     * says) but are wrong inside: a checksum is no signature. */
    memcpy(g, f, n);
    sd_put32(g + HEADER + 4 * 3, N_VOCAB);
    reseal(g, n);
    write_file(bad, g, n);
    refused(s, bad, SDNPU_ERR_FORMAT, "token 384 at index 3 is outside the vocabulary (0..383)");
    memcpy(g, f, n);
    sd_put32(g + HEADER, (uint32_t)-5);
    reseal(g, n);
    write_file(bad, g, n);
    refused(s, bad, SDNPU_ERR_FORMAT, "token -5 at index 0");
    memcpy(g, f, n);
    sd_put32(g + 8, 2);
    reseal(g, n);
    write_file(bad, g, n);
    refused(s, bad, SDNPU_ERR_FORMAT, "format version 2");
    /* The seal itself is the one the format names: resealing the file
     * unchanged gives the file. */
    memcpy(g, f, n);
    reseal(g, n);
    assert_memory_equal(g, f, n);

    /* No file, a directory, a file that cannot be read. */
    refused(s, "/nonexistent/state.bin", SDNPU_ERR_NOT_FOUND, "cannot open");
    refused(s, SD_BUILD_DIR, SDNPU_ERR_IO, "a directory, not a state file");
    refused(s, "/dev/null", SDNPU_ERR_IO, "not a regular file");
    assert_int_equal(sdnpu_session_load(s, NULL), SDNPU_ERR_INVALID_ARG);
    assert_int_equal(sdnpu_session_load(NULL, good), SDNPU_ERR_INVALID_ARG);
    assert_int_equal(sdnpu_session_save(NULL, good), SDNPU_ERR_INVALID_ARG);
    assert_int_equal(sdnpu_session_save(s, NULL), SDNPU_ERR_INVALID_ARG);

    /* Larger than the session's context. */
    struct sdnpu_session *small = session(m, 4);
    refused(small, good, SDNPU_ERR_CONTEXT_FULL, "the state file holds 6 tokens, the session's context is 4");
    sdnpu_session_free(small);

    /* After all of that, s holds its own context still. */
    assert_same_continuation(s, ref);
    free(g);
    free(f);
    unlink(good);
    unlink(bad);
    sdnpu_session_free(s);
    sdnpu_session_free(ref);
    sdnpu_model_free(m);
}

/* Saves that cannot be written leave no file behind and the old one as it
 * was. */
static void test_save_errors(void **state) {
    (void)state;
    struct sdnpu_model *m = model_a();
    struct sdnpu_session *s = session(m, 64);
    sdnpu_token p[5] = {1, 10, 20, 30, 40};
    assert_int_equal(sdnpu_session_eval(s, p, 5, NULL, 0), SDNPU_OK);
    assert_int_equal(sdnpu_session_save(s, "/nonexistent/dir/state.bin"), SDNPU_ERR_IO);
    assert_non_null(strstr(sdnpu_session_last_error(s), "cannot create"));
    /* The name is a directory: the rename fails, the temporary goes. */
    char dir[256];
    snprintf(dir, sizeof dir, "%s/test_state_dir", SD_BUILD_DIR);
    mkdir(dir, 0755);
    assert_int_equal(sdnpu_session_save(s, dir), SDNPU_ERR_IO);
    assert_non_null(strstr(sdnpu_session_last_error(s), "cannot rename"));
    DIR *d = opendir(SD_BUILD_DIR);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));) assert_null(strstr(e->d_name, "test_state_dir.tmp"));
    closedir(d);
    rmdir(dir);
    assert_int_equal(sdnpu_session_n_past(s), 5);
    sdnpu_session_free(s);
    sdnpu_model_free(m);
}

/* Every allocation of a save and a load may fail: each failure is
 * SDNPU_ERR_OOM with a message, the session and the file on disk as they
 * were, and nothing leaks. */
static void test_alloc_failures(void **state) {
    (void)state;
    sdt_alloc_install();
    long base = sdt_alloc_live();
    struct sdnpu_model *m = model_a();
    struct sdnpu_session *a = session(m, 64), *b = session(m, 64), *ref = session(m, 64);
    sdnpu_token p[10], q[4] = {1, 9, 8, 7};
    prompt(p, 10, 21);
    assert_int_equal(sdnpu_session_eval(a, p, 10, NULL, 0), SDNPU_OK);
    assert_int_equal(sdnpu_session_eval(b, q, 4, NULL, 0), SDNPU_OK);
    assert_int_equal(sdnpu_session_eval(ref, q, 4, NULL, 0), SDNPU_OK);
    const char *path = tmp_path("alloc"), *old = tmp_path("alloc_old");
    assert_int_equal(sdnpu_session_save(b, old), SDNPU_OK);
    size_t n_old;
    uint8_t *f_old = read_file(old, &n_old);
    int saved = 0, loaded = 0;
    for (long fail = 0; fail < 100 && !saved; fail++) {
        /* Over the file of b's: a failed save leaves it whole. */
        write_file(path, f_old, n_old);
        sdt_alloc_fail_after(fail);
        int rc = sdnpu_session_save(a, path);
        sdt_alloc_fail_after(-1);
        if (rc == SDNPU_OK) {
            saved = 1;
            break;
        }
        assert_int_equal(rc, SDNPU_ERR_OOM);
        assert_non_null(strstr(sdnpu_session_last_error(a), "out of memory"));
        size_t n;
        uint8_t *f = read_file(path, &n);
        assert_int_equal(n, n_old);
        assert_memory_equal(f, f_old, n);
        free(f);
    }
    assert_true(saved);
    for (long fail = 0; fail < 100 && !loaded; fail++) {
        sdt_alloc_fail_after(fail);
        int rc = sdnpu_session_load(b, path);
        sdt_alloc_fail_after(-1);
        if (rc == SDNPU_OK) {
            loaded = 1;
            break;
        }
        assert_int_equal(rc, SDNPU_ERR_OOM);
        assert_non_null(strstr(sdnpu_session_last_error(b), "out of memory"));
        assert_int_equal(sdnpu_session_n_past(b), 4);
        assert_same_continuation(b, ref);
        /* Back to the context the next try starts from. */
        sdnpu_session_reset(b);
        sdnpu_session_reset(ref);
        assert_int_equal(sdnpu_session_eval(b, q, 4, NULL, 0), SDNPU_OK);
        assert_int_equal(sdnpu_session_eval(ref, q, 4, NULL, 0), SDNPU_OK);
    }
    assert_true(loaded);
    assert_same_continuation(a, b);
    free(f_old);
    unlink(path);
    unlink(old);
    sdnpu_session_free(a);
    sdnpu_session_free(b);
    sdnpu_session_free(ref);
    sdnpu_model_free(m);
    assert_int_equal(sdt_alloc_live(), base);
    sdnpu_allocator_set(NULL);
}

/* sdnpu_session_set_n_ctx: a context moved to a larger cache, or a
 * smaller one that holds it, continues as a session made that large; a
 * size that cannot hold it, a bad size and every failed allocation leave
 * the session as it was. */
static void check_resized(struct sdnpu_session *a, struct sdnpu_session *ref, int32_t n_ctx) {
    assert_int_equal(sdnpu_session_set_n_ctx(a, n_ctx), SDNPU_OK);
    assert_int_equal(sdnpu_session_n_ctx(a), n_ctx);
    assert_same_continuation(ref, a);
}

/* A resize keeps the model's shared weights held: the new runtime takes
 * them before the old one gives them back (else the store drops them and
 * packs them again on the next step). Alone on its model, so the bytes are
 * this session's. */
static void test_resize_keeps_weights(void **state) {
    (void)state;
    struct sdnpu_model *m = model_a();
    struct sdnpu_session *a = session(m, 64);
    sdnpu_token p[20];
    prompt(p, 20, 51);
    assert_int_equal(sdnpu_session_eval(a, p, 20, NULL, 0), SDNPU_OK);
    struct sdt_text t;
    generate_after(a, "", "sam", &t); /* the decode graphs too */
    const size_t held = sdnpu_model_shared_weight_bytes(m);
    assert_true(held > 0);
    assert_int_equal(sdnpu_session_set_n_ctx(a, 256), SDNPU_OK);
    assert_int_equal(sdnpu_model_shared_weight_bytes(m), held);
    sdnpu_session_free(a);
    assert_int_equal(sdnpu_model_shared_weight_bytes(m), 0);
    sdnpu_model_free(m);
}

static void test_resize(void **state) {
    (void)state;
    struct sdnpu_model *m = model_a();
    struct sdnpu_session *a = session(m, 64), *ref = session(m, 512);
    sdnpu_token p[40], big[100];
    prompt(p, 40, 31);
    prompt(big, 100, 32);
    assert_int_equal(sdnpu_session_eval(a, p, 40, NULL, 0), SDNPU_OK);
    assert_int_equal(sdnpu_session_eval(ref, p, 40, NULL, 0), SDNPU_OK);
    /* After drafting, whose last token may be held but not evaluated. */
    struct sdt_text ta, tr;
    assert_int_equal(generate_after(a, "", "sam", &ta), generate_after(ref, "", "sam", &tr));
    const int32_t held = sdnpu_session_n_past(a);
    check_resized(a, ref, 256);
    /* Nothing to move: the same size. Smaller, but holding it. */
    check_resized(a, ref, 256);
    check_resized(a, ref, sdnpu_session_n_past(a) + 40); /* room for a continuation */
    /* Refused, the session as it was. */
    const int32_t n_ctx = sdnpu_session_n_ctx(a);
    assert_int_equal(sdnpu_session_set_n_ctx(a, sdnpu_session_n_past(a) - 1), SDNPU_ERR_CONTEXT_FULL);
    assert_non_null(strstr(sdnpu_session_last_error(a), "holds"));
    assert_int_equal(sdnpu_session_set_n_ctx(a, 0), SDNPU_ERR_INVALID_ARG);
    assert_int_equal(sdnpu_session_set_n_ctx(NULL, 64), SDNPU_ERR_INVALID_ARG);
    assert_int_equal(sdnpu_session_n_ctx(a), n_ctx);
    assert_true(sdnpu_session_n_past(a) > held);
    check_resized(a, ref, 400);
    /* Capped at the model's context (the tiny model's context_length, 2,048). */
    assert_int_equal(sdnpu_model_n_ctx_train(m), 2048);
    assert_int_equal(sdnpu_model_n_ctx_train(NULL), 0);
    assert_int_equal(sdnpu_session_set_n_ctx(a, 1 << 24), SDNPU_OK);
    assert_int_equal(sdnpu_session_n_ctx(a), 2048);
    assert_same_continuation(ref, a);
    /* A prompt that does not fit fits once the context grows. */
    struct sdnpu_session *b = session(m, 64);
    assert_int_equal(sdnpu_session_eval(b, big, 100, NULL, 0), SDNPU_ERR_CONTEXT_FULL);
    assert_int_equal(sdnpu_session_set_n_ctx(b, 128), SDNPU_OK);
    assert_int_equal(sdnpu_session_eval(b, big, 100, NULL, 0), SDNPU_OK);
    sdnpu_session_free(b);
    /* sdnpu_session_reserve: nothing where the room is there; else twice
     * the size or the need in whole 4,096s, at most the cap (or the
     * model's); refused, nothing changed, past the cap. */
    b = session(m, 64);
    assert_int_equal(sdnpu_session_eval(b, p, 40, NULL, 0), SDNPU_OK);
    assert_int_equal(sdnpu_session_reserve(b, 64, 0), SDNPU_OK);
    assert_int_equal(sdnpu_session_n_ctx(b), 64);
    assert_int_equal(sdnpu_session_reserve(b, 100, 300), SDNPU_OK);
    assert_int_equal(sdnpu_session_n_ctx(b), 300);
    assert_int_equal(sdnpu_session_reserve(b, 301, 300), SDNPU_ERR_CONTEXT_FULL);
    assert_int_equal(sdnpu_session_reserve(b, 5000, 0), SDNPU_ERR_CONTEXT_FULL);
    assert_non_null(strstr(sdnpu_session_last_error(b), "grows to 2048 at most"));
    assert_int_equal(sdnpu_session_n_ctx(b), 300);
    assert_int_equal(sdnpu_session_reserve(NULL, 10, 0), SDNPU_ERR_INVALID_ARG);
    assert_int_equal(sdnpu_session_reserve(b, 400, 0), SDNPU_OK);
    assert_int_equal(sdnpu_session_n_ctx(b), 2048);
    assert_int_equal(sdnpu_session_n_past(b), 40);
    sdnpu_session_reset(ref);
    assert_int_equal(sdnpu_session_eval(ref, p, 40, NULL, 0), SDNPU_OK);
    assert_same_continuation(ref, b);
    sdnpu_session_free(b);
    sdnpu_session_free(a);
    sdnpu_session_free(ref);
    sdnpu_model_free(m);
}

static void test_resize_alloc_failures(void **state) {
    (void)state;
    sdt_alloc_install();
    long base = sdt_alloc_live();
    struct sdnpu_model *m = model_a();
    struct sdnpu_session *a = session(m, 64), *ref = session(m, 64);
    sdnpu_token p[20];
    prompt(p, 20, 41);
    assert_int_equal(sdnpu_session_eval(a, p, 20, NULL, 0), SDNPU_OK);
    assert_int_equal(sdnpu_session_eval(ref, p, 20, NULL, 0), SDNPU_OK);
    int resized = 0;
    for (long fail = 0; fail < 400 && !resized; fail++) {
        sdt_alloc_fail_after(fail);
        int rc = sdnpu_session_set_n_ctx(a, 256);
        sdt_alloc_fail_after(-1);
        if (rc == SDNPU_OK) {
            resized = 1;
            break;
        }
        assert_int_equal(rc, SDNPU_ERR_OOM);
        assert_non_null(strstr(sdnpu_session_last_error(a), "out of memory"));
        assert_int_equal(sdnpu_session_n_ctx(a), 64);
        assert_same_continuation(ref, a);
        /* Back to the context the next try starts from. */
        sdnpu_session_reset(a);
        sdnpu_session_reset(ref);
        assert_int_equal(sdnpu_session_eval(a, p, 20, NULL, 0), SDNPU_OK);
        assert_int_equal(sdnpu_session_eval(ref, p, 20, NULL, 0), SDNPU_OK);
    }
    assert_true(resized);
    assert_int_equal(sdnpu_session_n_ctx(a), 256);
    assert_same_continuation(ref, a);
    sdnpu_session_free(a);
    sdnpu_session_free(ref);
    sdnpu_model_free(m);
    assert_int_equal(sdt_alloc_live(), base);
    sdnpu_allocator_set(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_other_kernels),
        cmocka_unit_test(test_copied_model),
        cmocka_unit_test(test_other_model),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_save_errors),
        cmocka_unit_test(test_alloc_failures),
        cmocka_unit_test(test_resize),
        cmocka_unit_test(test_resize_alloc_failures),
        cmocka_unit_test(test_resize_keeps_weights),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
