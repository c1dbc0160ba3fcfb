/*
 * tests/test_tokenizer.c - the tokenizer.
 *
 * Two tiny vocabularies built in memory with the test GGUF writer (one
 * SentencePiece, one byte-level BPE) cover the algorithms, the special-token
 * partition, bad files, decoding and allocation failure without any model
 * file. The real model, when present, adds examples and a round-trip sweep.
 *
 * Every expected id list below was produced by llama.cpp (llama-cpp-python
 * 0.3.36, llama_tokenize) on the same vocabulary: for the tiny ones, a GGUF
 * with the same tokens written by gguf-py; for Gemma, models/gemma3-270m.gguf.
 * The merges were also checked by hand, as the comments walk through.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gguf/gguf.h"
#include "tok/tokenizer.h"
#include "util_common.h"
#include "util_gguf_writer.h"

#ifndef SD_GEMMA_MODEL
#define SD_GEMMA_MODEL "models/gemma3-270m.gguf"
#endif

#define U2581 "\xe2\x96\x81"

/* ------------------------------------------------------- tiny vocabs */

/* SentencePiece: <unk> <s> </s>, 256 byte tokens (ids 3..258), then: */
enum {
    SPM_SP = 259, /* "▁"   -1.0 */
    SPM_A,        /* "a"   -2.0 */
    SPM_B,        /* "b"   -2.0 */
    SPM_C,        /* "c"   -2.0 */
    SPM_AB,       /* "ab"  -1.5 */
    SPM_BC,       /* "bc"  -1.0 */
    SPM_ABC,      /* "abc" -0.5 */
    SPM_SPA,      /* "▁a"  -0.8 */
    SPM_SEP,      /* "<sep>"  user-defined */
    SPM_X,        /* "<|x|>"  control */
    SPM_QRS,      /* "qrs"    user-defined */
    SPM_PQ,       /* "pq"     user-defined */
    SPM_ZZ,       /* "zz"     user-defined */
    SPM_N
};
#define SPM_BYTE(b) (3 + (b))

struct spm_opts {
    const char *model;   /* tokenizer.ggml.model */
    bool drop_tokens;    /* no tokenizer.ggml.tokens */
    bool scores_short;   /* fewer scores than tokens */
    bool types_as_float; /* token_type of the wrong element type */
    bool empty_token;    /* token 260 is "" */
};

static uint8_t *build_spm(const struct spm_opts *o, size_t *size) {
    static char bytes[256][8];
    const char *toks[SPM_N];
    float scores[SPM_N];
    int32_t types[SPM_N];
    toks[0] = "<unk>", toks[1] = "<s>", toks[2] = "</s>";
    types[0] = 2, types[1] = 3, types[2] = 3;
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        toks[SPM_BYTE(b)] = bytes[b];
        types[SPM_BYTE(b)] = 6;
    }
    const char *rest[] = {U2581,     "a",     "b",     "c",   "ab", "bc", "abc",
                          U2581 "a", "<sep>", "<|x|>", "qrs", "pq", "zz"};
    const float rest_scores[] = {-1.0f, -2.0f, -2.0f, -2.0f, -1.5f, -1.0f, -0.5f, -0.8f, 0, 0, 0, 0, 0};
    const int32_t rest_types[] = {1, 1, 1, 1, 1, 1, 1, 1, 4, 3, 4, 4, 4};
    for (int i = 0; i < SPM_N - SPM_SP; i++) {
        toks[SPM_SP + i] = rest[i];
        types[SPM_SP + i] = rest_types[i];
    }
    for (int i = 0; i < SPM_N; i++)
        scores[i] = i < SPM_SP ? 0.0f : rest_scores[i - SPM_SP];
    if (o && o->empty_token) toks[SPM_A] = "";

    struct sdt_gguf_writer *w = sdt_gw_new();
    sdt_gw_kv_str(w, "general.architecture", "llama");
    if (!o || o->model) sdt_gw_kv_str(w, "tokenizer.ggml.model", o && o->model ? o->model : "llama");
    if (!o || !o->drop_tokens) sdt_gw_kv_str_arr(w, "tokenizer.ggml.tokens", toks, SPM_N);
    sdt_gw_kv_arr(w, "tokenizer.ggml.scores", SD_GGUF_FLOAT32, scores,
                  o && o->scores_short ? SPM_N - 1 : SPM_N);
    if (o && o->types_as_float)
        sdt_gw_kv_arr(w, "tokenizer.ggml.token_type", SD_GGUF_FLOAT32, scores, SPM_N);
    else
        sdt_gw_kv_arr(w, "tokenizer.ggml.token_type", SD_GGUF_INT32, types, SPM_N);
    size_t n;
    uint8_t *b = sdt_gw_bytes(w, &n);
    assert_non_null(b);
    uint8_t *copy = malloc(n);
    assert_non_null(copy);
    memcpy(copy, b, n);
    sdt_gw_free(w);
    *size = n;
    return copy;
}

/* Byte-level BPE: the 256 GPT-2 byte characters (id = byte), then: */
enum { BPE_GT = 256, BPE_HE, BPE_GTHE, BPE_LO, BPE_LOW, BPE_EOT, BPE_TOOL, BPE_N };

static int utf8_put(char *o, uint32_t cp) {
    if (cp < 0x80) return o[0] = (char)cp, 1;
    o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

struct bpe_opts {
    const char *pre;
    bool no_merges;
};

static uint8_t *build_bpe(const struct bpe_opts *o, size_t *size) {
    static char chars[256][4];
    const char *toks[BPE_N];
    int32_t types[BPE_N];
    int n_extra = 0;
    for (int b = 0; b < 256; b++) {
        bool self = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        uint32_t cp = self ? (uint32_t)b : (uint32_t)(256 + n_extra++);
        chars[b][utf8_put(chars[b], cp)] = 0;
        toks[b] = chars[b];
        types[b] = 1;
    }
    const char *rest[] = {"\xc4\xa0t", "he", "\xc4\xa0the", "lo", "low", "<|endoftext|>", "<tool>"};
    for (int i = 0; i < BPE_N - BPE_GT; i++) {
        toks[BPE_GT + i] = rest[i];
        types[BPE_GT + i] = 1;
    }
    types[BPE_EOT] = 3;
    types[BPE_TOOL] = 4;
    const char *merges[] = {"\xc4\xa0 t", "h e", "\xc4\xa0t he", "l o", "lo w"};

    struct sdt_gguf_writer *w = sdt_gw_new();
    sdt_gw_kv_str(w, "general.architecture", "qwen2");
    sdt_gw_kv_str(w, "tokenizer.ggml.model", "gpt2");
    sdt_gw_kv_str(w, "tokenizer.ggml.pre", o && o->pre ? o->pre : "qwen2");
    sdt_gw_kv_str_arr(w, "tokenizer.ggml.tokens", toks, BPE_N);
    sdt_gw_kv_arr(w, "tokenizer.ggml.token_type", SD_GGUF_INT32, types, BPE_N);
    if (!o || !o->no_merges) sdt_gw_kv_str_arr(w, "tokenizer.ggml.merges", merges, 5);
    sdt_gw_kv_u32(w, "tokenizer.ggml.bos_token_id", BPE_EOT);
    sdt_gw_kv_u32(w, "tokenizer.ggml.eos_token_id", BPE_EOT);
    size_t n;
    uint8_t *b = sdt_gw_bytes(w, &n);
    assert_non_null(b);
    uint8_t *copy = malloc(n);
    assert_non_null(copy);
    memcpy(copy, b, n);
    sdt_gw_free(w);
    *size = n;
    return copy;
}

struct loaded {
    uint8_t *bytes;
    struct sd_gguf *g;
    struct sd_vocab *v;
};

static int load_bytes(uint8_t *bytes, size_t size, struct loaded *l, struct sd_err *err) {
    memset(l, 0, sizeof *l);
    l->bytes = bytes;
    sd_err_clear(err);
    int rc = sd_gguf_open_buffer(bytes, size, &l->g, err);
    if (rc) return rc;
    return sd_vocab_load(l->g, &l->v, err);
}

static void unload(struct loaded *l) {
    sd_vocab_free(l->v);
    sd_gguf_close(l->g);
    free(l->bytes);
    memset(l, 0, sizeof *l);
}

static void load_spm(struct loaded *l) {
    size_t n;
    uint8_t *b = build_spm(NULL, &n);
    struct sd_err err;
    int rc = load_bytes(b, n, l, &err);
    if (rc) fail_msg("%s", err.msg);
}

static void load_bpe(struct loaded *l, const char *pre) {
    size_t n;
    struct bpe_opts o = {pre, false};
    uint8_t *b = build_bpe(&o, &n);
    struct sd_err err;
    int rc = load_bytes(b, n, l, &err);
    if (rc) fail_msg("%s", err.msg);
}

/* Tokenize and compare with expected ids (n_exp of them). */
static void check_ids(const struct sd_vocab *v, const char *text, size_t len, unsigned flags,
                      const int32_t *exp, size_t n_exp) {
    struct sd_tokvec tv = {0};
    struct sd_err err;
    sd_err_clear(&err);
    int rc = sd_tokenize(v, text, len, flags, &tv, &err);
    if (rc) fail_msg("tokenize '%s': %s", text, err.msg);
    if (tv.n != n_exp || (n_exp && memcmp(tv.ids, exp, n_exp * sizeof *exp))) {
        print_error("text '%s' flags %u\n  expected:", text, flags);
        for (size_t i = 0; i < n_exp; i++)
            print_error(" %d", exp[i]);
        print_error("\n  got:     ");
        for (size_t i = 0; i < tv.n; i++)
            print_error(" %d", tv.ids[i]);
        print_error("\n");
        sd_tokvec_free(&tv);
        fail();
    }
    sd_tokvec_free(&tv);
}
#define CHECK(v, text, flags, ...)                                                                           \
    do {                                                                                                     \
        const int32_t exp_[] = {__VA_ARGS__};                                                                \
        check_ids(v, text, strlen(text), flags, exp_, sizeof exp_ / sizeof exp_[0]);                         \
    } while (0)
#define CHECK_EMPTY(v, text, flags) check_ids(v, text, strlen(text), flags, NULL, 0)

enum { ADD = SD_TOK_ADD_SPECIAL, PARSE = SD_TOK_PARSE_SPECIAL, REPL = SD_TOK_REPLACE_INVALID };

/* decode(ids) as a NUL-terminated string in buf */
static const char *decode(const struct sd_vocab *v, const int32_t *ids, size_t n, bool special, char *buf,
                          size_t cap) {
    int64_t r = sd_detokenize(v, ids, n, special, buf, cap - 1);
    assert_true(r >= 0);
    buf[r] = 0;
    return buf;
}

/* ---------------------------------------------------------- SPM tests */

static void test_spm_merges(void **state) {
    (void)state;
    struct loaded l;
    load_spm(&l);
    const struct sd_vocab *v = l.v;
    assert_int_equal(sd_vocab_kind(v), SD_VOCAB_SPM);
    assert_int_equal(sd_vocab_n_tokens(v), SPM_N);
    assert_int_equal(sd_vocab_bos(v), 1); /* llama defaults: bos 1, eos 2, unk 0 */
    assert_int_equal(sd_vocab_eos(v), 2);
    assert_int_equal(sd_vocab_unk(v), 0);
    /* "▁abc": bigrams ▁a -0.8, ab -1.5, bc -1.0. ▁a merges first, then bc;
     * ab is stale by then. */
    CHECK(v, "abc", 0, SPM_SPA, SPM_BC);
    CHECK(v, "abc", ADD, 1, SPM_SPA, SPM_BC);
    /* "▁ab▁c": ▁a, then nothing joins b, ▁ or c. */
    CHECK(v, "ab c", 0, SPM_SPA, SPM_B, SPM_SP, SPM_C);
    /* No "é" token: its two UTF-8 bytes fall back to byte tokens. */
    CHECK(v, "\xc3\xa9", 0, SPM_SP, SPM_BYTE(0xC3), SPM_BYTE(0xA9));
    CHECK(v, "a  b", 0, SPM_SPA, SPM_SP, SPM_SP, SPM_B);
    CHECK_EMPTY(v, "", 0);
    CHECK(v, "", ADD, 1);
    unload(&l);
}

static void test_spm_special(void **state) {
    (void)state;
    struct loaded l;
    load_spm(&l);
    const struct sd_vocab *v = l.v;
    /* User-defined tokens are split out even without PARSE; the text after
     * a token gets the prefix space again. */
    CHECK(v, "<sep>abc", 0, SPM_SEP, SPM_SPA, SPM_BC);
    /* Control tokens only with PARSE. Without: "▁x<|x|>abc" is merged as
     * text (no ▁ before "abc", so it becomes the "abc" token). */
    CHECK(v, "x<|x|>abc", 0, SPM_SP, SPM_BYTE('x'), SPM_BYTE('<'), SPM_BYTE('|'), SPM_BYTE('x'),
          SPM_BYTE('|'), SPM_BYTE('>'), SPM_ABC);
    CHECK(v, "x<|x|>abc", ADD | PARSE, 1, SPM_SP, SPM_BYTE('x'), SPM_X, SPM_SPA, SPM_BC);
    /* Longest special first: "qrs" claims its match before "pq" is tried,
     * so "pq" no longer fits in "pqrs". */
    CHECK(v, "pqrs", 0, SPM_SP, SPM_BYTE('p'), SPM_QRS);
    CHECK(v, "pqrspq", 0, SPM_SP, SPM_BYTE('p'), SPM_QRS, SPM_PQ);
    /* Leftmost non-overlapping matches of one token. */
    CHECK(v, "zzzzz", 0, SPM_ZZ, SPM_ZZ, SPM_SP, SPM_BYTE('z'));
    unload(&l);
}

static void test_spm_decode(void **state) {
    (void)state;
    struct loaded l;
    load_spm(&l);
    const struct sd_vocab *v = l.v;
    char buf[256];
    const int32_t ids[] = {1, SPM_SPA, SPM_BC};
    /* add_space_prefix: the space tokenize added comes off again; the BOS
     * renders only with render_special. */
    assert_string_equal(decode(v, ids, 3, false, buf, sizeof buf), "abc");
    assert_string_equal(decode(v, ids, 3, true, buf, sizeof buf), "<s>abc");
    const int32_t ids2[] = {SPM_SPA, SPM_B, SPM_SP, SPM_C, SPM_SEP, SPM_SPA, SPM_BYTE(0xC3), SPM_BYTE(0xA9)};
    assert_string_equal(decode(v, ids2, 8, false, buf, sizeof buf), "ab c<sep>a\xc3\xa9");
    /* pieces */
    char p[8];
    assert_int_equal(sd_token_to_piece(v, SPM_SPA, false, p, sizeof p), 2);
    assert_memory_equal(p, " a", 2);
    assert_int_equal(sd_token_to_piece(v, SPM_BYTE(0x41), false, p, sizeof p), 1);
    assert_int_equal(p[0], 'A');
    assert_int_equal(sd_token_to_piece(v, 1, false, p, sizeof p), 0);       /* control, not rendered */
    assert_int_equal(sd_token_to_piece(v, 1, true, p, sizeof p), 3);        /* "<s>" */
    assert_int_equal(sd_token_to_piece(v, SPM_SEP, false, p, sizeof p), 5); /* user-defined: always */
    assert_int_equal(sd_token_to_piece(v, 0, false, p, sizeof p), 0);       /* unknown, not rendered */
    assert_int_equal(sd_token_to_piece(v, -1, true, p, sizeof p), 0);
    assert_int_equal(sd_token_to_piece(v, SPM_N, true, p, sizeof p), 0);
    /* probing */
    assert_int_equal(sd_token_to_piece(v, SPM_SEP, false, p, 4), -5);
    assert_int_equal(sd_token_to_piece(v, SPM_SEP, false, NULL, 0), -5);
    assert_int_equal(sd_token_to_piece(v, SPM_SEP, false, p, 5), 5);
    assert_int_equal(sd_detokenize(v, ids2, 8, false, NULL, 0), -12);
    assert_int_equal(sd_detokenize(v, ids2, 8, false, buf, 11), -12);
    assert_int_equal(sd_detokenize(v, ids2, 8, false, buf, 12), 12);
    assert_int_equal(sd_detokenize(v, NULL, 0, false, NULL, 0), 0);
    /* queries */
    assert_int_equal(sd_vocab_find(v, "<sep>", 5), SPM_SEP);
    assert_int_equal(sd_vocab_find(v, "nope", 4), -1);
    assert_int_equal(sd_vocab_type(v, SPM_SEP), SD_TOKEN_USER_DEFINED);
    assert_int_equal(sd_vocab_type(v, SPM_X), SD_TOKEN_CONTROL);
    assert_int_equal(sd_vocab_type(v, 0), SD_TOKEN_UNKNOWN);
    assert_int_equal(sd_vocab_type(v, SPM_BYTE(7)), SD_TOKEN_BYTE);
    assert_int_equal(sd_vocab_type(v, SPM_AB), SD_TOKEN_NORMAL);
    size_t tl;
    assert_string_equal(sd_vocab_text(v, SPM_AB, &tl), "ab");
    assert_int_equal(tl, 2);
    assert_true(sd_vocab_score(v, SPM_ABC) == -0.5f);
    assert_true(sd_vocab_is_eog(v, 2));
    assert_false(sd_vocab_is_eog(v, 1));
    unload(&l);
}

/* ---------------------------------------------------------- BPE tests */

static void test_bpe_merges(void **state) {
    (void)state;
    struct loaded l;
    load_bpe(&l, NULL);
    const struct sd_vocab *v = l.v;
    assert_int_equal(sd_vocab_kind(v), SD_VOCAB_BPE);
    assert_string_equal(sd_vocab_pre(v), "qwen2");
    /* Words "the", " low": h+e -> he (t he has no rule); l+o -> lo, lo+w -> low. */
    CHECK(v, "the low", 0, 't', BPE_HE, ' ', BPE_LOW);
    /* " the": Ġ+t (rank 0), h+e (rank 1), Ġt+he (rank 2). */
    CHECK(v, " the", 0, BPE_GTHE);
    /* qwen2 adds no BOS; the user-defined <tool> is split out always, the
     * control <|endoftext|> with PARSE only. */
    CHECK(v, " the", ADD, BPE_GTHE);
    CHECK(v, "<tool>the<|endoftext|>", 0, BPE_TOOL, 't', BPE_HE, '<', '|', 'e', 'n', 'd', 'o', 'f', 't', 'e',
          'x', 't', '|', '>');
    CHECK(v, "<tool>the<|endoftext|>", ADD | PARSE, BPE_TOOL, 't', BPE_HE, BPE_EOT);
    /* Byte-level: é is two bytes; digits are single (qwen2). */
    CHECK(v, "\xc3\xa9 12", 0, 0xC3, 0xA9, ' ', '1', '2');
    CHECK(v, "it's  \n\n x", 0, 'i', 't', '\'', 's', ' ', ' ', '\n', '\n', ' ', 'x');
    char buf[64];
    const int32_t ids[] = {BPE_TOOL, 't', BPE_HE, BPE_EOT, 0xC3, 0xA9, BPE_GTHE};
    assert_string_equal(decode(v, ids, 7, true, buf, sizeof buf), "<tool>the<|endoftext|>\xc3\xa9 the");
    assert_string_equal(decode(v, ids, 7, false, buf, sizeof buf), "<tool>the\xc3\xa9 the");
    assert_true(sd_vocab_is_eog(v, BPE_EOT)); /* eos, and named like an end-of-text token */
    unload(&l);

    /* llama-bpe: ignore_merges, and llama.cpp adds BOS even without the key. */
    load_bpe(&l, "llama-bpe");
    CHECK(l.v, " the", ADD, BPE_EOT, BPE_GTHE);
    CHECK(l.v, "12345", 0, '1', '2', '3', '4', '5'); /* digits in threes, but no merges for them */
    unload(&l);
    /* gpt-2 and the PCRE2 "default" expressions */
    load_bpe(&l, "gpt-2");
    CHECK(l.v, "the low", 0, 't', BPE_HE, ' ', BPE_LOW);
    unload(&l);
    load_bpe(&l, "default");
    CHECK(l.v, "the low!!", 0, 't', BPE_HE, ' ', BPE_LOW, '!', '!');
    unload(&l);
}

/* ------------------------------------------------------- invalid UTF-8 */

static void test_invalid_utf8(void **state) {
    (void)state;
    struct loaded l;
    load_bpe(&l, NULL);
    const struct sd_vocab *v = l.v;
    struct sd_tokvec tv = {0};
    struct sd_err err;
    /* Pre-filled output: a failure leaves it as it was. */
    assert_int_equal(sd_tokenize(v, "he", 2, 0, &tv, &err), SDNPU_OK);
    assert_int_equal(tv.n, 1);
    static const struct {
        const char *s;
        size_t len, off;
    } bad[] = {
        {"ab\xff"
         "cd",
         5, 2},                     /* not a lead byte */
        {"abc\x80", 4, 3},          /* lone continuation */
        {"\xe2\x82", 2, 0},         /* truncated at the end */
        {"x\xe2\x82y", 4, 1},       /* truncated inside */
        {"\xc0\xaf", 2, 0},         /* overlong */
        {"ok\xed\xa0\x80", 5, 2},   /* surrogate */
        {"\xf4\x90\x80\x80", 4, 0}, /* above U+10FFFF */
        {"hello\xf8", 6, 5},        /* never valid */
        {"12345678\xc3", 9, 8},     /* after an ASCII block */
    };
    for (size_t i = 0; i < SD_ARRAY_LEN(bad); i++) {
        sd_err_clear(&err);
        assert_int_equal(sd_tokenize(v, bad[i].s, bad[i].len, ADD | PARSE, &tv, &err),
                         SDNPU_ERR_INVALID_UTF8);
        assert_int_equal(err.status, SDNPU_ERR_INVALID_UTF8);
        char want[64];
        snprintf(want, sizeof want, "byte offset %zu ", bad[i].off);
        if (!strstr(err.msg, want)) fail_msg("case %zu: '%s' lacks '%s'", i, err.msg, want);
        assert_int_equal(tv.n, 1);
    }
    /* Replace mode: each maximal ill-formed subpart becomes one U+FFFD (EF
     * BF BD), so the ids equal those of the replaced text. */
    static const struct {
        const char *s;
        size_t len;
        const char *repl;
    } rep[] = {
        {"ab\xff"
         "cd",
         5,
         "ab\xef\xbf\xbd"
         "cd"},
        {"x\xe2\x82y", 4, "x\xef\xbf\xbdy"},         /* E2 82 is one subpart */
        {"\xc0\xaf", 2, "\xef\xbf\xbd\xef\xbf\xbd"}, /* C0 is never valid, AF alone */
        {"ok\xed\xa0\x80", 5, "ok\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xf0\x9f\x98", 3, "\xef\xbf\xbd"},
    };
    for (size_t i = 0; i < SD_ARRAY_LEN(rep); i++) {
        struct sd_tokvec a = {0}, b = {0};
        assert_int_equal(sd_tokenize(v, rep[i].s, rep[i].len, REPL, &a, &err), SDNPU_OK);
        assert_int_equal(sd_tokenize(v, rep[i].repl, strlen(rep[i].repl), 0, &b, &err), SDNPU_OK);
        assert_int_equal(a.n, b.n);
        assert_memory_equal(a.ids, b.ids, a.n * sizeof *a.ids);
        char buf[64];
        assert_string_equal(decode(v, a.ids, a.n, false, buf, sizeof buf), rep[i].repl);
        sd_tokvec_free(&a);
        sd_tokvec_free(&b);
    }
    /* bad arguments */
    assert_int_equal(sd_tokenize(v, NULL, 3, 0, &tv, &err), SDNPU_ERR_INVALID_ARG);
    assert_int_equal(sd_tokenize(v, "x", 1, 0, NULL, &err), SDNPU_ERR_INVALID_ARG);
    assert_int_equal(sd_tokenize(NULL, "x", 1, 0, &tv, &err), SDNPU_ERR_INVALID_ARG);
    assert_int_equal(sd_tokenize(v, NULL, 0, 0, &tv, &err), SDNPU_OK);
    sd_tokvec_free(&tv);
    unload(&l);
}

/* ---------------------------------------------------------- bad files */

static void expect_load_error(uint8_t *bytes, size_t n, int status, const char *needle) {
    struct loaded l;
    struct sd_err err;
    int rc = load_bytes(bytes, n, &l, &err);
    if (rc != status || !strstr(err.msg, needle))
        fail_msg("want %s with '%s', got %s: '%s'", sdnpu_status_str(status), needle, sdnpu_status_str(rc),
                 err.msg);
    assert_null(l.v);
    unload(&l);
}

static void test_bad_vocab(void **state) {
    (void)state;
    size_t n;
    struct spm_opts o = {0};
    o.model = NULL;
    /* no tokenizer.ggml.model at all */
    struct sdt_gguf_writer *w = sdt_gw_new();
    sdt_gw_kv_str(w, "general.architecture", "llama");
    uint8_t *b = sdt_gw_bytes(w, &n);
    uint8_t *copy = malloc(n);
    memcpy(copy, b, n);
    sdt_gw_free(w);
    expect_load_error(copy, n, SDNPU_ERR_FORMAT, "tokenizer.ggml.model");

    o.model = "bert";
    b = build_spm(&o, &n);
    expect_load_error(b, n, SDNPU_ERR_UNSUPPORTED, "bert");
    o.model = "llama";
    o.drop_tokens = true;
    b = build_spm(&o, &n);
    expect_load_error(b, n, SDNPU_ERR_FORMAT, "tokenizer.ggml.tokens");
    o.drop_tokens = false;
    o.scores_short = true;
    b = build_spm(&o, &n);
    expect_load_error(b, n, SDNPU_ERR_FORMAT, "tokenizer.ggml.scores");
    o.scores_short = false;
    o.types_as_float = true;
    b = build_spm(&o, &n);
    expect_load_error(b, n, SDNPU_ERR_FORMAT, "tokenizer.ggml.token_type");

    struct bpe_opts bo = {"no-such-pre", false};
    b = build_bpe(&bo, &n);
    expect_load_error(b, n, SDNPU_ERR_UNSUPPORTED, "no-such-pre");
    bo.pre = NULL;
    bo.no_merges = true;
    b = build_bpe(&bo, &n);
    expect_load_error(b, n, SDNPU_ERR_FORMAT, "tokenizer.ggml.merges");

    /* An empty token text is named [EMPTY_<id>], as llama.cpp does. */
    struct loaded l;
    struct sd_err err;
    o.types_as_float = false;
    o.empty_token = true;
    b = build_spm(&o, &n);
    assert_int_equal(load_bytes(b, n, &l, &err), SDNPU_OK);
    assert_int_equal(sd_vocab_find(l.v, "[EMPTY_260]", 11), SPM_A);
    unload(&l);
}

/* ------------------------------------------------- allocation failure */

/* A text that goes through every path: long enough for the word cache,
 * specials of both kinds, spaces, bytes without tokens, bad UTF-8. */
static char *long_text(size_t *len) {
    const char *parts[] = {"abc ab c ", "<sep>",  "pqrs",          "zzzzz",  "<|x|>", "the low ",
                           "\xc3\xa9",  "<tool>", "<|endoftext|>", "  \n\t", "\xff"};
    size_t cap = 8192, n = 0;
    char *t = malloc(cap);
    uint64_t s = 7;
    while (n < 6000) {
        const char *p = parts[sdt_rand_u64(&s) % SD_ARRAY_LEN(parts)];
        size_t l = strlen(p);
        memcpy(t + n, p, l);
        n += l;
    }
    *len = n;
    return t;
}

static void alloc_sweep(bool bpe) {
    size_t n, tlen;
    uint8_t *bytes = bpe ? build_bpe(NULL, &n) : build_spm(NULL, &n);
    char *text = long_text(&tlen);
    /* Reference results with no failures. */
    struct loaded ref;
    struct sd_err err;
    uint8_t *ref_bytes = malloc(n);
    memcpy(ref_bytes, bytes, n);
    assert_int_equal(load_bytes(ref_bytes, n, &ref, &err), SDNPU_OK);
    struct sd_tokvec want = {0};
    assert_int_equal(sd_tokenize(ref.v, text, tlen, ADD | PARSE | REPL, &want, &err), SDNPU_OK);

    sdt_alloc_install();
    long base = sdt_alloc_live();
    bool loaded_ok = false;
    long k_fail = 0, j_fail = 0; /* failures injected, to know the sweep reached something */
    for (long k = 0; !loaded_ok; k++) {
        struct sd_gguf *g = NULL;
        struct sd_vocab *v = NULL;
        sdt_alloc_fail_after(k);
        sd_err_clear(&err);
        int rc = sd_gguf_open_buffer(bytes, n, &g, &err);
        if (rc == SDNPU_OK) rc = sd_vocab_load(g, &v, &err);
        if (rc == SDNPU_OK) {
            loaded_ok = true;
            /* Now fail inside tokenize, at every allocation it makes. */
            bool done = false;
            for (long j = 0; !done; j++) {
                struct sd_tokvec tv = {0};
                sdt_alloc_fail_after(j);
                int r2 = sd_tokenize(v, text, tlen, ADD | PARSE | REPL, &tv, &err);
                sdt_alloc_fail_after(-1);
                if (r2 == SDNPU_OK) {
                    done = true;
                    assert_int_equal(tv.n, want.n);
                    assert_memory_equal(tv.ids, want.ids, want.n * sizeof *want.ids);
                } else {
                    assert_int_equal(r2, SDNPU_ERR_OOM);
                    assert_int_equal(tv.n, 0);
                    j_fail++;
                }
                sd_tokvec_free(&tv);
                assert_true(j < 100000);
            }
        } else {
            assert_int_equal(rc, SDNPU_ERR_OOM);
            assert_null(v);
            k_fail++;
        }
        sdt_alloc_fail_after(-1);
        sd_vocab_free(v);
        sd_gguf_close(g);
        assert_int_equal(sdt_alloc_live(), base);
        assert_true(k < 100000);
    }
    sdnpu_allocator_set(NULL);
    assert_true(k_fail >= 10); /* the vocabulary makes a dozen or more allocations */
    assert_true(j_fail >= 5);  /* tokenize: output, scratch, word cache, memo */
    sd_tokvec_free(&want);
    unload(&ref);
    free(bytes);
    free(text);
}

static void test_alloc_failure_spm(void **state) {
    (void)state;
    alloc_sweep(false);
}

static void test_alloc_failure_bpe(void **state) {
    (void)state;
    alloc_sweep(true);
}

/* -------------------------------------------------------- the real model */

static struct loaded g_gemma;

static bool have_gemma(void) {
    if (g_gemma.v) return true;
    if (!sdt_file_exists(SD_GEMMA_MODEL)) return false;
    struct sd_err err;
    sd_err_clear(&err);
    if (sd_gguf_open(SD_GEMMA_MODEL, true, &g_gemma.g, &err) || sd_vocab_load(g_gemma.g, &g_gemma.v, &err))
        fail_msg("%s: %s", SD_GEMMA_MODEL, err.msg);
    return true;
}

static void test_gemma_examples(void **state) {
    (void)state;
    if (!have_gemma()) {
        skip();
        return;
    }
    const struct sd_vocab *v = g_gemma.v;
    assert_int_equal(sd_vocab_n_tokens(v), 262144);
    assert_int_equal(sd_vocab_bos(v), 2);
    assert_int_equal(sd_vocab_eos(v), 1);
    assert_int_equal(sd_vocab_eot(v), 106);
    assert_true(sd_vocab_is_eog(v, 1));
    assert_true(sd_vocab_is_eog(v, 106));
    assert_false(sd_vocab_is_eog(v, 105));
    assert_int_equal(sd_vocab_find(v, "<start_of_turn>", 15), 105);
    assert_int_equal(sd_vocab_type(v, 105), SD_TOKEN_CONTROL);
    assert_int_equal(sd_vocab_type(v, 107), SD_TOKEN_USER_DEFINED);
    assert_string_equal(sd_vocab_pre(v), "default");

    CHECK(v, "Hello world", 0, 9259, 1902);
    CHECK(v, "Hello world", ADD, 2, 9259, 1902);
    CHECK(v, "Hello, world! How are you?", 0, 9259, 236764, 1902, 236888, 2088, 659, 611, 236881);
    CHECK(v, "  two  spaces\n\nnewline\ttab", 0, 138, 13498, 138, 35220, 108, 73481, 255968, 4823);
    CHECK(v, "<start_of_turn>user\nhi<end_of_turn>", 0, 236820, 3041, 236779, 1340, 236779, 887, 236813, 2364,
          107, 2202, 236820, 643, 236779, 1340, 236779, 887, 236813);
    CHECK(v, "<start_of_turn>user\nhi<end_of_turn>", ADD | PARSE, 2, 105, 2364, 107, 2202, 106);
    CHECK(v,
          "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e "
          "\xf0\x9f\x98\x80\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80"
          "\x8d\xf0\x9f\x91\xa7 \xc3\xa9",
          0, 94951, 163543, 243874, 237243, 243767, 237243, 244814, 1559);
    CHECK(v, "def f(x):\n    return x + 1\n", 0, 2063, 517, 236769, 236781, 1473, 107, 140, 2060, 1123, 900,
          236743, 236770, 107);
    CHECK(v, "1234567890", 0, 236770, 236778, 236800, 236812, 236810, 236825, 236832, 236828, 236819, 236771);
    CHECK(v, "<table><tr>", ADD, 2, 168, 173);
    CHECK(v, "<bos>x", ADD | PARSE, 2, 2, 236781); /* llama.cpp warns about the double BOS, and keeps it */
    CHECK(v, "", ADD | PARSE, 2);
    CHECK_EMPTY(v, "", 0);
    /* Replace mode: "ab\xff" "cd" tokenizes as "ab\uFFFDcd" (llama.cpp, same text). */
    struct sd_tokvec tv = {0};
    struct sd_err err;
    assert_int_equal(sd_tokenize(v,
                                 "ab\xff"
                                 "cd",
                                 5, REPL, &tv, &err),
                     SDNPU_OK);
    const int32_t want[] = {596, 238479, 2692};
    assert_int_equal(tv.n, 3);
    assert_memory_equal(tv.ids, want, sizeof want);
    tv.n = 0;
    assert_int_equal(sd_tokenize(v, "x\xff\xfey", 4, REPL, &tv, &err), SDNPU_OK);
    const int32_t want2[] = {236781, 38914, 236762};
    assert_int_equal(tv.n, 3);
    assert_memory_equal(tv.ids, want2, sizeof want2);
    sd_tokvec_free(&tv);
    char buf[64];
    const int32_t ids[] = {2, 105, 2364, 107, 2202, 106};
    assert_string_equal(decode(v, ids, 6, true, buf, sizeof buf),
                        "<bos><start_of_turn>user\nhi<end_of_turn>");
    assert_string_equal(decode(v, ids, 6, false, buf, sizeof buf), "user\nhi");
}

/* Random valid UTF-8 round-trips exactly (U+2581 excepted: SentencePiece
 * turns it into a space, in llama.cpp too). */
static void test_gemma_round_trip(void **state) {
    (void)state;
    if (!have_gemma()) {
        skip();
        return;
    }
    const struct sd_vocab *v = g_gemma.v;
    uint64_t seed = 42;
    char text[512], out[2048];
    struct sd_tokvec tv = {0};
    struct sd_err err;
    const char *pieces[] = {" ",
                            "  ",
                            "\n",
                            "\t",
                            "<start_of_turn>",
                            "<eos>",
                            "the",
                            "x",
                            "\xc3\xa9",
                            "1",
                            "\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9",
                            "<table>",
                            "\r\n",
                            "\xe3\x80\x80"};
    for (int iter = 0; iter < 3000; iter++) {
        size_t n = 0;
        int k = 1 + (int)(sdt_rand_u64(&seed) % 16);
        for (int j = 0; j < k; j++) {
            if (sdt_rand_u64(&seed) % 3) {
                const char *p = pieces[sdt_rand_u64(&seed) % SD_ARRAY_LEN(pieces)];
                memcpy(text + n, p, strlen(p));
                n += strlen(p);
            } else { /* a random code point, any plane */
                uint32_t cp = (uint32_t)(sdt_rand_u64(&seed) % 0x110000);
                if ((cp >= 0xD800 && cp < 0xE000) || cp == 0x2581 || cp == 0) cp = 'z';
                if (cp < 0x80)
                    text[n++] = (char)cp;
                else if (cp < 0x800)
                    text[n++] = (char)(0xC0 | cp >> 6), text[n++] = (char)(0x80 | (cp & 0x3F));
                else if (cp < 0x10000)
                    text[n++] = (char)(0xE0 | cp >> 12), text[n++] = (char)(0x80 | ((cp >> 6) & 0x3F)),
                    text[n++] = (char)(0x80 | (cp & 0x3F));
                else
                    text[n++] = (char)(0xF0 | cp >> 18), text[n++] = (char)(0x80 | ((cp >> 12) & 0x3F)),
                    text[n++] = (char)(0x80 | ((cp >> 6) & 0x3F)), text[n++] = (char)(0x80 | (cp & 0x3F));
            }
        }
        for (unsigned flags = 0; flags < 4; flags++) {
            tv.n = 0;
            assert_int_equal(sd_tokenize(v, text, n, flags, &tv, &err), SDNPU_OK);
            const int32_t *ids = tv.ids;
            size_t m = tv.n;
            if (flags & ADD) {
                assert_true(m >= 1 && ids[0] == 2);
                ids++, m--;
            }
            int64_t r = sd_detokenize(v, ids, m, true, out, sizeof out);
            if (r != (int64_t)n || memcmp(out, text, n)) fail_msg("round trip failed at iteration %d", iter);
        }
    }
    sd_tokvec_free(&tv);
}

static int teardown_all(void **state) {
    (void)state;
    unload(&g_gemma);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spm_merges),        cmocka_unit_test(test_spm_special),
        cmocka_unit_test(test_spm_decode),        cmocka_unit_test(test_bpe_merges),
        cmocka_unit_test(test_invalid_utf8),      cmocka_unit_test(test_bad_vocab),
        cmocka_unit_test(test_alloc_failure_spm), cmocka_unit_test(test_alloc_failure_bpe),
        cmocka_unit_test(test_gemma_examples),    cmocka_unit_test(test_gemma_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, teardown_all);
}
