/*
 * tok/vocab.c - the vocabulary: the piece map (every text the hot
 * loops look up, hashed once into an open-addressing table) and loading it
 * all from a GGUF file's tokenizer.ggml.* keys, plus the sd_vocab_* queries.
 *
 * The map and the loader live together because only loading writes the map
 * (BPE merge parts that are not tokens join it as the rules are read);
 * afterwards the vocabulary is read-only and the other files only look up
 * (sd_tok_map_find). The load also infers the marks llama.cpp infers from
 * token texts (EOG, control, FIM) and works out the bytes each token decodes
 * to, so that the decoders in decode.c only copy.
 */
#include "tok/tokenizer.h"

#include <stdio.h>
#include <string.h>

#include "tok/internal.h"

struct vocab_pre {
    const char *name;
    const char *const *exprs;
    int n_exprs;
    unsigned flags;
};
enum { PRE_IGNORE_MERGES = 1, PRE_ADD_BOS = 2 };

/* ----------------------------------------------------------- the map */

int32_t sd_tok_map_find_h(const struct sd_vocab *v, const char *s, size_t n, uint64_t h) {
    uint32_t tag = (uint32_t)(h >> 32);
    for (uint32_t i = (uint32_t)h & v->map_mask;; i = (i + 1) & v->map_mask) {
        uint64_t e = v->map[i];
        if (!e) return -1;
        if ((uint32_t)(e >> 32) != tag) continue;
        int32_t id = (int32_t)(uint32_t)e - 1;
        uint32_t l;
        const char *t = sd_tok_piece_text(v, id, &l);
        if (l == n && !memcmp(t, s, n)) return id;
    }
}

int32_t sd_tok_map_find(const struct sd_vocab *v, const char *s, size_t n) {
    return sd_tok_map_find_h(v, s, n, sd_tok_hash_bytes(s, n));
}

/* Insert id under its text unless the text is there already (BPE merge
 * parts that are not tokens). */
static void map_put(struct sd_vocab *v, int32_t id) {
    uint32_t n;
    const char *s = sd_tok_piece_text(v, id, &n);
    uint64_t h = sd_tok_hash_bytes(s, n);
    uint32_t tag = (uint32_t)(h >> 32);
    for (uint32_t i = (uint32_t)h & v->map_mask;; i = (i + 1) & v->map_mask) {
        uint64_t e = v->map[i];
        if (!e) {
            v->map[i] = (uint64_t)tag << 32 | (uint32_t)(id + 1);
            v->map_used++;
            return;
        }
        if ((uint32_t)(e >> 32) != tag) continue;
        uint32_t l;
        const char *t = sd_tok_piece_text(v, (int32_t)(uint32_t)e - 1, &l);
        if (l == n && !memcmp(t, s, n)) return;
    }
}

/* (Re)build the map over all pieces. Inserting 262k keys in id order
 * writes all over a 4 MB table, one cache miss each; inserting them in the
 * order of their home slots (a radix sort of the hashes first) walks the
 * table once. Linear probing does not care about the order, and equal
 * texts share a home slot, so sorting by (slot, id) keeps "the last id
 * wins" for duplicates. */
struct map_rec {
    uint64_t hash;
    int32_t id;
    uint32_t home;
};

static int map_rebuild(struct sd_vocab *v, uint32_t cap) {
    size_t n = (size_t)v->n_pieces;
    uint64_t *m = sd_calloc(cap, sizeof *m);
    struct map_rec *a = sd_malloc(n * sizeof *a + 1), *b = sd_malloc(n * sizeof *b + 1);
    uint32_t *count = sd_malloc((2048 + 1) * sizeof *count);
    if (!m || !a || !b || !count) {
        sd_free(m), sd_free(a), sd_free(b), sd_free(count);
        return SDNPU_ERR_OOM;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t len;
        const char *t = sd_tok_piece_text(v, (int32_t)i, &len);
        a[i].hash = sd_tok_hash_bytes(t, len);
        a[i].id = (int32_t)i;
        a[i].home = (uint32_t)a[i].hash & (cap - 1);
    }
    /* LSD radix sort on home, 11 bits a pass; stable, so ids stay in order. */
    for (uint32_t shift = 0; shift < 32 && (cap - 1) >> shift; shift += 11) {
        memset(count, 0, (2048 + 1) * sizeof *count);
        for (size_t i = 0; i < n; i++)
            count[((a[i].home >> shift) & 2047) + 1]++;
        for (int d = 0; d < 2048; d++)
            count[d + 1] += count[d];
        for (size_t i = 0; i < n; i++)
            b[count[(a[i].home >> shift) & 2047]++] = a[i];
        struct map_rec *t = a;
        a = b;
        b = t;
    }
    sd_free(v->map);
    v->map = m;
    v->map_mask = cap - 1;
    v->map_used = 0;
    for (size_t k = 0; k < n; k++) {
        uint32_t tag = (uint32_t)(a[k].hash >> 32);
        uint64_t e_new = (uint64_t)tag << 32 | (uint32_t)(a[k].id + 1);
        for (uint32_t i = a[k].home;; i = (i + 1) & v->map_mask) {
            uint64_t e = m[i];
            if (!e) {
                m[i] = e_new;
                v->map_used++;
                break;
            }
            if ((uint32_t)(e >> 32) != tag) continue;
            uint32_t l1, l2;
            const char *t1 = sd_tok_piece_text(v, (int32_t)(uint32_t)e - 1, &l1);
            const char *t2 = sd_tok_piece_text(v, a[k].id, &l2);
            if (l1 == l2 && !memcmp(t1, t2, l1)) {
                m[i] = e_new;
                break;
            }
        }
    }
    sd_free(a), sd_free(b), sd_free(count);
    return SDNPU_OK;
}

/* Append a piece text (BPE merge parts that are not tokens). */
static int piece_add(struct sd_vocab *v, const char *s, size_t n, int32_t *id) {
    if (v->n_pieces == INT32_MAX - 1 || v->ptext_size + n + 1 > MAX_ARENA_BYTES) return SDNPU_ERR_FORMAT;
    if (sd_tok_grow((void **)&v->ptext, &v->ptext_cap, v->ptext_size + n + 1, 1)) return SDNPU_ERR_OOM;
    size_t cap = (size_t)v->cap_pieces;
    if (sd_tok_grow((void **)&v->poff, &cap, (size_t)v->n_pieces + 2, sizeof *v->poff)) return SDNPU_ERR_OOM;
    v->cap_pieces = (int32_t)SD_MIN(cap, (size_t)INT32_MAX);
    if ((uint64_t)(v->map_used + 1) * 2 > (uint64_t)v->map_mask + 1) {
        int rc = map_rebuild(v, (v->map_mask + 1) * 2);
        if (rc) return rc;
    }
    memcpy(v->ptext + v->ptext_size, s, n);
    v->ptext[v->ptext_size + n] = 0;
    v->ptext_size += n + 1;
    v->poff[v->n_pieces + 1] = (uint32_t)v->ptext_size;
    *id = v->n_pieces++;
    map_put(v, *id);
    return SDNPU_OK;
}

static int piece_intern(struct sd_vocab *v, const char *s, size_t n, int32_t *id) {
    *id = sd_tok_map_find(v, s, n);
    if (*id >= 0) return SDNPU_OK;
    return piece_add(v, s, n, id);
}

/* ------------------------------------------------------------ loading */

static const char *const k_re_default[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|]+",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    "\\p{N}+",
    "[0-9][0-9][0-9]",
};
static const char *const k_re_gpt2[] = {
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
};
static const char *const k_re_llama3[] = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
static const char *const k_re_qwen2[] = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
static const char *const k_re_qwen35[] = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| "
    "?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
static const char *const k_re_starcoder[] = {
    "\\p{N}",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
};
static const char *const k_re_falcon[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|`]+",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    "[0-9][0-9][0-9]",
};

#define PRE(name, re, flags)                                                                                 \
    { name, re, (int)SD_ARRAY_LEN(re), flags }
/* tokenizer.ggml.pre values, grouped as llama.cpp groups them. */
static const struct vocab_pre k_pre[] = {
    PRE("default", k_re_default, 0),
    PRE("llama3", k_re_llama3, PRE_IGNORE_MERGES | PRE_ADD_BOS),
    PRE("llama-v3", k_re_llama3, PRE_IGNORE_MERGES | PRE_ADD_BOS),
    PRE("llama-bpe", k_re_llama3, PRE_IGNORE_MERGES | PRE_ADD_BOS),
    PRE("falcon3", k_re_llama3, PRE_IGNORE_MERGES | PRE_ADD_BOS),
    PRE("falcon-h1", k_re_llama3, PRE_IGNORE_MERGES | PRE_ADD_BOS),
    PRE("pixtral", k_re_llama3, PRE_IGNORE_MERGES | PRE_ADD_BOS),
    PRE("midm-2.0", k_re_llama3, PRE_IGNORE_MERGES | PRE_ADD_BOS),
    PRE("lfm2", k_re_llama3, PRE_IGNORE_MERGES | PRE_ADD_BOS),
    PRE("jina-v5-nano", k_re_llama3, PRE_IGNORE_MERGES | PRE_ADD_BOS),
    PRE("dbrx", k_re_llama3, 0),
    PRE("smaug-bpe", k_re_llama3, 0),
    PRE("qwen2", k_re_qwen2, 0),
    PRE("deepseek-r1-qwen", k_re_qwen2, 0),
    PRE("kormo", k_re_qwen2, 0),
    PRE("f2llmv2", k_re_qwen2, 0),
    PRE("stablelm2", k_re_qwen2, 0),
    PRE("megrez", k_re_qwen2, 0),
    PRE("hunyuan", k_re_qwen2, 0),
    PRE("solar-open", k_re_qwen2, 0),
    PRE("qwen35", k_re_qwen35, 0),
    PRE("gpt-2", k_re_gpt2, 0),
    PRE("phi-2", k_re_gpt2, 0),
    PRE("jina-es", k_re_gpt2, 0),
    PRE("jina-de", k_re_gpt2, 0),
    PRE("gigachat", k_re_gpt2, 0),
    PRE("jina-v2-es", k_re_gpt2, 0),
    PRE("jina-v2-de", k_re_gpt2, 0),
    PRE("a.x-4.0", k_re_gpt2, 0),
    PRE("mellum", k_re_gpt2, 0),
    PRE("modern-bert", k_re_gpt2, 0),
    PRE("mpt", k_re_gpt2, 0),
    PRE("olmo", k_re_gpt2, 0),
    PRE("jais", k_re_gpt2, 0),
    PRE("trillion", k_re_gpt2, 0),
    PRE("granite-docling", k_re_gpt2, 0),
    PRE("exaone4", k_re_gpt2, 0),
    PRE("jina-v1-en", k_re_gpt2, 0),
    PRE("jina-v2-code", k_re_gpt2, 0),
    PRE("roberta-bpe", k_re_gpt2, 0),
    PRE("starcoder", k_re_starcoder, 0),
    PRE("refact", k_re_starcoder, 0),
    PRE("command-r", k_re_starcoder, 0),
    PRE("smollm", k_re_starcoder, 0),
    PRE("codeshell", k_re_starcoder, 0),
    PRE("exaone", k_re_starcoder, 0),
    PRE("minerva-7b", k_re_starcoder, 0),
    PRE("mellum2", k_re_starcoder, 0),
    PRE("falcon", k_re_falcon, 0),
};
#undef PRE

/* Names llama.cpp recognizes by text (llama_vocab::impl::load). */
static const char *const k_eot_names[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<\xef\xbd\x9c"
    "end\xe2\x96\x81"
    "of\xe2\x96\x81"
    "sentence\xef\xbd\x9c>",
    "<end_of_utterance>",
};
static const char *const k_eog_names[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<\xef\xbd\x9c"
    "end\xe2\x96\x81"
    "of\xe2\x96\x81"
    "sentence\xef\xbd\x9c>",
    "[e~[",
};
static const char *const k_fim_names[] = {
    /* pre, suf, mid, pad, rep, sep: only their CONTROL marking matters here */
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<PRE>",
    "\xe2\x96\x81<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<SUF>",
    "\xe2\x96\x81<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<MID>",
    "\xe2\x96\x81<MID>",
    "<|code_middle|>",
    "<|middle|>",
    "<|fim_pad|>",
    "<fim-pad>",
    "<fim_pad>",
    "<PAD>",
    "[PAD]",
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
    "<|file_sep|>",
};
/* FIM pad/rep/sep also end generation in llama.cpp. */
static const char *const k_fim_eog_names[] = {
    "<|fim_pad|>",   "<fim-pad>",  "<fim_pad>", "<PAD>",      "[PAD]",        "<|fim_repo|>",
    "<|repo_name|>", "<fim-repo>", "<REPO>",    "<reponame>", "<|file_sep|>",
};

static int32_t find_cstr(const struct sd_vocab *v, const char *s) {
    int32_t id = sd_tok_map_find(v, s, strlen(s));
    return id < v->n_tokens ? id : -1;
}

/* An optional token-id key; a value outside the vocabulary keeps the
 * default, as llama.cpp does (with a warning). */
static int opt_token_id(const struct sd_gguf *g, const char *key, int32_t n_tokens, int32_t *id,
                        struct sd_err *err) {
    uint32_t u;
    struct sd_err e;
    sd_err_clear(&e);
    int rc = sd_gguf_get_u32(g, key, &u, &e);
    if (rc == SDNPU_ERR_NOT_FOUND) return SDNPU_OK;
    if (rc) {
        if (err) *err = e;
        return rc;
    }
    if (u >= (uint32_t)n_tokens) {
        SD_LOGW("tokenizer: %s = %u is outside the vocabulary (%d tokens); using %d", key, u, (int)n_tokens,
                (int)*id);
        return SDNPU_OK;
    }
    *id = (int32_t)u;
    return SDNPU_OK;
}

static int opt_bool(const struct sd_gguf *g, const char *key, bool *b, struct sd_err *err) {
    struct sd_err e;
    sd_err_clear(&e);
    bool val;
    int rc = sd_gguf_get_bool(g, key, &val, &e);
    if (rc == SDNPU_ERR_NOT_FOUND) return SDNPU_OK;
    if (rc) {
        if (err) *err = e;
        return rc;
    }
    *b = val;
    return SDNPU_OK;
}

/* The GPT-2 byte-to-unicode map: printable Latin-1 bytes stand for
 * themselves, the rest for U+0100 upwards in byte order. */
static void gpt2_byte_map(uint32_t map[256]) {
    int n = 0;
    for (int b = 0; b < 256; b++) {
        bool self = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        map[b] = self ? (uint32_t)b : (uint32_t)(256 + n++);
    }
}

static uint8_t hexval(char c) {
    if (c >= '0' && c <= '9') return (uint8_t)(c - '0');
    if (c >= 'a' && c <= 'f') return (uint8_t)(c - 'a' + 10);
    if (c >= 'A' && c <= 'F') return (uint8_t)(c - 'A' + 10);
    return 0xFF;
}

/* The bytes each token stands for in decoded text (llama.cpp's
 * token_to_piece with special = true). */
static int build_decoded(struct sd_vocab *v) {
    uint32_t gmap[256];
    int16_t rev[512]; /* GPT-2 character -> byte */
    gpt2_byte_map(gmap);
    for (int i = 0; i < 512; i++)
        rev[i] = -1;
    for (int b = 0; b < 256; b++)
        rev[gmap[b]] = (int16_t)b;

    size_t cap = v->poff[v->n_tokens] + 16;
    v->dec = sd_malloc(cap);
    v->dp = sd_malloc((size_t)v->n_tokens * sizeof *v->dp);
    if (!v->dec || !v->dp) return SDNPU_ERR_OOM;
    size_t o = 0;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        size_t start = o;
        uint32_t len;
        const char *t = sd_tok_piece_text(v, id, &len);
        uint8_t a = v->attr[id];
        /* Every branch writes at most len bytes. */
        if (a & TA_SPECIAL) {
            memcpy(v->dec + o, t, len);
            o += len;
        } else if (a & TA_NORMAL) {
            if (v->kind == SD_VOCAB_SPM) { /* U+2581 -> space */
                for (uint32_t k = 0; k < len;) {
                    if (k + 3 <= len && !memcmp(t + k, "\xe2\x96\x81", 3)) {
                        v->dec[o++] = ' ';
                        k += 3;
                    } else {
                        v->dec[o++] = t[k++];
                    }
                }
            } else { /* GPT-2 characters -> bytes */
                for (uint32_t k = 0; k < len;) {
                    uint32_t cp;
                    int l = sd_utf8_decode((const uint8_t *)t + k, len - k, &cp);
                    if (l < 0) { /* not UTF-8: keep the byte */
                        v->dec[o++] = t[k++];
                        continue;
                    }
                    if (cp < 512 && rev[cp] >= 0) {
                        v->dec[o++] = (char)rev[cp];
                    } else {
                        /* llama.cpp writes an "[UNK_BYTE_0x..]" marker here;
                         * the character itself is more useful. */
                        memcpy(v->dec + o, t + k, (size_t)l);
                        o += (size_t)l;
                    }
                    k += (uint32_t)l;
                }
            }
        } else if (a & TA_BYTE) {
            if (len == 6 && !memcmp(t, "<0x", 3) && t[5] == '>' && hexval(t[3]) < 16 && hexval(t[4]) < 16) {
                v->dec[o++] = (char)(hexval(t[3]) << 4 | hexval(t[4]));
            } else {
                memcpy(v->dec + o, t, len);
                o += len;
            }
        }
        /* UNUSED or undefined types decode to nothing, as in llama.cpp. */
        v->dp[id].off = (uint32_t)start;
        v->dp[id].len = (uint32_t)(o - start);
        v->dp[id].attr = a;
    }
    memset(v->dec + o, 0, cap - o); /* the spare tail that sd_detokenize's 16-byte copies may read */
    return SDNPU_OK;
}

static int load_merges(struct sd_vocab *v, const struct sd_gguf *g, struct sd_err *err) {
    int64_t ki = sd_gguf_find_key(g, "tokenizer.ggml.merges");
    if (ki < 0) return sd_err_set(err, SDNPU_ERR_FORMAT, "tokenizer.ggml.merges: missing (required by gpt2)");
    enum sd_gguf_type et;
    uint64_t n;
    int rc = sd_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n, NULL, err);
    if (rc) return rc;
    if (et != SD_GGUF_STRING)
        return sd_err_set(err, SDNPU_ERR_FORMAT,
                          "tokenizer.ggml.merges: array of %s, expected array of string",
                          sd_gguf_type_name(et));
    if (n > ((uint64_t)1 << 28))
        return sd_err_set(err, SDNPU_ERR_FORMAT, "tokenizer.ggml.merges: %llu rules (at most 2^28)",
                          (unsigned long long)n);
    v->merge_mask = sd_tok_pow2_at_least(n * 2 + 16) - 1;
    v->merges = sd_calloc((size_t)v->merge_mask + 1, sizeof *v->merges);
    if (!v->merges)
        return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for %llu merges", (unsigned long long)n);
    char *tmp = NULL;
    size_t tmp_cap = 0;
    for (uint64_t i = 0; i < n; i++) {
        const char *s;
        size_t len;
        if ((rc = sd_gguf_arr_str_at(g, ki, i, &s, &len))) {
            sd_free(tmp);
            return sd_err_set(err, rc, "tokenizer.ggml.merges[%llu]: unreadable", (unsigned long long)i);
        }
        /* "first second", split at the first space after position 0 (a
         * rule may merge a space itself). */
        const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
        if (!sp) continue; /* llama.cpp files it as ("", ""), which never matches */
        size_t l1 = (size_t)(sp - s), l2 = len - l1 - 1;
        int32_t pl, pr, res;
        if (sd_tok_grow((void **)&tmp, &tmp_cap, len, 1)) {
            sd_free(tmp);
            return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for the merges");
        }
        memcpy(tmp, s, l1);
        memcpy(tmp + l1, sp + 1, l2);
        if ((rc = piece_intern(v, s, l1, &pl)) || (rc = piece_intern(v, sp + 1, l2, &pr)) ||
            (rc = piece_intern(v, tmp, l1 + l2, &res))) {
            sd_free(tmp);
            return sd_err_set(err, rc, "tokenizer.ggml.merges[%llu]: %s", (unsigned long long)i,
                              rc == SDNPU_ERR_OOM ? "out of memory" : "too many distinct texts");
        }
        sd_tok_merge_put(v, pl, pr, (int32_t)i, res);
    }
    sd_free(tmp);
    return SDNPU_OK;
}

static void spm_find_blocks(struct sd_vocab *v) {
    v->spm_split = true;
    v->n_spm_block = 0;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        uint32_t len;
        const char *t = sd_tok_piece_text(v, id, &len);
        for (uint32_t i = 1; i + 3 <= len; i++) {
            if ((uint8_t)t[i] != 0xE2 || (uint8_t)t[i + 1] != 0x96 || (uint8_t)t[i + 2] != 0x81) continue;
            uint32_t k = i - 1, cp;
            while (k > 0 && ((uint8_t)t[k] & 0xC0) == 0x80)
                k--;
            bool known = false;
            if (sd_utf8_decode((const uint8_t *)t + k, i - k, &cp) != (int)(i - k) ||
                v->n_spm_block == SD_ARRAY_LEN(v->spm_block)) {
                v->spm_split = false; /* too irregular to reason about: no cuts */
                return;
            }
            for (uint32_t b = 0; b < v->n_spm_block; b++)
                known |= v->spm_block[b] == cp;
            if (!known) v->spm_block[v->n_spm_block++] = cp;
        }
    }
}

void sd_vocab_free(struct sd_vocab *v) {
    if (!v) return;
    sd_free(v->ptext);
    sd_free(v->poff);
    sd_free(v->score);
    sd_free(v->attr);
    sd_free(v->map);
    sd_free(v->dec);
    sd_free(v->dp);
    sd_free(v->spec);
    sd_free(v->best_any);
    sd_free(v->best_ud);
    sd_free(v->edges);
    sd_free(v->l2);
    sd_free(v->merges);
    sd_regex_list_free(v->regex);
    sd_free(v);
}

int sd_vocab_load(const struct sd_gguf *g, struct sd_vocab **out, struct sd_err *err) {
    int rc;
    const char *s;
    size_t len;
    if (!out) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "sd_vocab_load: NULL out");
    *out = NULL;
    if (!g) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "sd_vocab_load: NULL file");
    struct sd_vocab *v = sd_calloc(1, sizeof *v);
    if (!v) return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for the vocabulary");

    /* ---- which algorithm */
    if ((rc = sd_gguf_get_str(g, "tokenizer.ggml.model", &s, &len, err))) {
        if (rc == SDNPU_ERR_NOT_FOUND)
            rc = sd_err_set(err, SDNPU_ERR_FORMAT, "tokenizer.ggml.model: missing");
        goto fail;
    }
    const struct vocab_pre *pre = NULL;
    if (len == 5 && !memcmp(s, "llama", 5)) {
        v->kind = SD_VOCAB_SPM;
        v->bos = 1, v->eos = 2, v->unk = 0;
        v->add_bos = true;
        v->add_space_prefix = true;
    } else if (len == 4 && !memcmp(s, "gpt2", 4)) {
        v->kind = SD_VOCAB_BPE;
        v->bos = 11, v->eos = 11, v->unk = -1;
    } else {
        rc =
            sd_err_set(err, SDNPU_ERR_UNSUPPORTED,
                       "tokenizer.ggml.model '%.*s' is not supported (llama, gpt2)", (int)SD_MIN(len, 64), s);
        goto fail;
    }
    v->eot = v->eom = v->pad = -1;
    snprintf(v->pre, sizeof v->pre, "default");
    if (sd_gguf_get_str(g, "tokenizer.ggml.pre", &s, &len, NULL) == SDNPU_OK && len > 0) {
        snprintf(v->pre, sizeof v->pre, "%.*s", (int)SD_MIN(len, sizeof v->pre - 1), s);
    }
    if (v->kind == SD_VOCAB_BPE) {
        for (size_t i = 0; i < SD_ARRAY_LEN(k_pre); i++)
            if (!strcmp(v->pre, k_pre[i].name)) pre = &k_pre[i];
        if (!pre) {
            rc = sd_err_set(err, SDNPU_ERR_UNSUPPORTED, "tokenizer.ggml.pre '%s' is not supported", v->pre);
            goto fail;
        }
        v->ignore_merges = pre->flags & PRE_IGNORE_MERGES;
        if (pre->flags & PRE_ADD_BOS) v->add_bos = true;
    }
    /* Only the SPM path of llama.cpp's tokenize adds the prefix space. */
    if (v->kind == SD_VOCAB_SPM &&
        (rc = opt_bool(g, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix, err)))
        goto fail;

    /* ---- the token texts */
    int64_t ki = sd_gguf_find_key(g, "tokenizer.ggml.tokens");
    enum sd_gguf_type et;
    uint64_t n;
    if (ki < 0) {
        rc = sd_err_set(err, SDNPU_ERR_FORMAT, "tokenizer.ggml.tokens: missing");
        goto fail;
    }
    if ((rc = sd_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, NULL, err))) goto fail;
    if (et != SD_GGUF_STRING) {
        rc = sd_err_set(err, SDNPU_ERR_FORMAT, "tokenizer.ggml.tokens: array of %s, expected array of string",
                        sd_gguf_type_name(et));
        goto fail;
    }
    if (n == 0 || n > INT32_MAX / 2) {
        rc = sd_err_set(err, SDNPU_ERR_FORMAT, "tokenizer.ggml.tokens: %llu tokens", (unsigned long long)n);
        goto fail;
    }
    v->n_tokens = (int32_t)n;

    size_t total = 0;
    char empty[32];
    for (uint64_t i = 0; i < n; i++) {
        if ((rc = sd_gguf_arr_str_at(g, ki, i, &s, &len))) {
            rc = sd_err_set(err, rc, "tokenizer.ggml.tokens[%llu]: unreadable", (unsigned long long)i);
            goto fail;
        }
        /* llama.cpp names empty tokens "[EMPTY_<id>]". */
        if (len == 0) len = (size_t)snprintf(empty, sizeof empty, "[EMPTY_%llu]", (unsigned long long)i);
        if (len > ((size_t)1 << 20)) {
            rc = sd_err_set(err, SDNPU_ERR_FORMAT, "tokenizer.ggml.tokens[%llu]: %zu bytes, more than 1 MiB",
                            (unsigned long long)i, len);
            goto fail;
        }
        total += len + 1;
        if (total > MAX_ARENA_BYTES / 2) {
            rc = sd_err_set(err, SDNPU_ERR_FORMAT, "tokenizer.ggml.tokens: texts exceed %zu bytes",
                            MAX_ARENA_BYTES / 2);
            goto fail;
        }
    }
    v->ptext_cap = total + 64;
    v->ptext = sd_malloc(v->ptext_cap);
    v->cap_pieces = v->n_tokens + 2;
    v->poff = sd_malloc((size_t)v->cap_pieces * sizeof *v->poff);
    v->score = sd_calloc((size_t)n, sizeof *v->score);
    v->attr = sd_malloc((size_t)n);
    if (!v->ptext || !v->poff || !v->score || !v->attr) {
        rc = sd_err_set(err, SDNPU_ERR_OOM, "out of memory for %llu tokens", (unsigned long long)n);
        goto fail;
    }
    size_t o = 0;
    v->poff[0] = 0;
    for (uint64_t i = 0; i < n; i++) {
        sd_gguf_arr_str_at(g, ki, i, &s, &len);
        if (len == 0) {
            len = (size_t)snprintf(empty, sizeof empty, "[EMPTY_%llu]", (unsigned long long)i);
            s = empty;
        }
        memcpy(v->ptext + o, s, len);
        v->ptext[o + len] = 0;
        o += len + 1;
        v->poff[i + 1] = (uint32_t)o;
        if (len > v->max_len) v->max_len = (uint32_t)len;
    }
    v->ptext_size = o;
    v->n_pieces = v->n_tokens;
    if (map_rebuild(v, sd_tok_pow2_at_least(n * 2))) {
        rc = sd_err_set(err, SDNPU_ERR_OOM, "out of memory for %llu tokens", (unsigned long long)n);
        goto fail;
    }

    /* ---- scores and types */
    const void *data;
    if (sd_gguf_find_key(g, "tokenizer.ggml.scores") >= 0) {
        if ((rc = sd_gguf_get_arr(g, "tokenizer.ggml.scores", &et, &n, &data, err))) goto fail;
        if (et != SD_GGUF_FLOAT32 && et != SD_GGUF_INT32) {
            rc = sd_err_set(err, SDNPU_ERR_FORMAT, "tokenizer.ggml.scores: array of %s, expected float32",
                            sd_gguf_type_name(et));
            goto fail;
        }
        if (n < (uint64_t)v->n_tokens) {
            rc = sd_err_set(err, SDNPU_ERR_FORMAT, "tokenizer.ggml.scores: %llu scores for %d tokens",
                            (unsigned long long)n, (int)v->n_tokens);
            goto fail;
        }
        const uint8_t *p = data;
        for (int32_t i = 0; i < v->n_tokens; i++) {
            uint32_t bits = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 | (uint32_t)p[4 * i + 2] << 16 |
                            (uint32_t)p[4 * i + 3] << 24;
            if (et == SD_GGUF_FLOAT32) {
                memcpy(&v->score[i], &bits, 4);
            } else {
                v->score[i] = (float)(int32_t)bits;
            }
        }
    }
    memset(v->attr, TA_NORMAL, (size_t)v->n_tokens);
    if (sd_gguf_find_key(g, "tokenizer.ggml.token_type") >= 0) {
        if ((rc = sd_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &n, &data, err))) goto fail;
        if (et != SD_GGUF_INT32) {
            rc = sd_err_set(err, SDNPU_ERR_FORMAT, "tokenizer.ggml.token_type: array of %s, expected int32",
                            sd_gguf_type_name(et));
            goto fail;
        }
        if (n < (uint64_t)v->n_tokens) {
            rc = sd_err_set(err, SDNPU_ERR_FORMAT, "tokenizer.ggml.token_type: %llu types for %d tokens",
                            (unsigned long long)n, (int)v->n_tokens);
            goto fail;
        }
        const uint8_t *p = data;
        for (int32_t i = 0; i < v->n_tokens; i++) {
            int32_t t = (int32_t)((uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 |
                                  (uint32_t)p[4 * i + 2] << 16 | (uint32_t)p[4 * i + 3] << 24);
            static const uint8_t k_attr[7] = {0,         TA_NORMAL, TA_UNKNOWN, TA_CONTROL, TA_USER_DEFINED,
                                              TA_UNUSED, TA_BYTE};
            v->attr[i] = (t >= 0 && t <= 6) ? k_attr[t] : 0;
        }
    }

    /* ---- merges (BPE) */
    if (v->kind == SD_VOCAB_BPE && (rc = load_merges(v, g, err))) goto fail;

    /* ---- special token ids */
    static const char *const k_id_keys[] = {
        "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",     "tokenizer.ggml.eot_token_id",
        "tokenizer.ggml.eom_token_id", "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id",
    };
    int32_t *ids[] = {&v->bos, &v->eos, &v->eot, &v->eom, &v->unk, &v->pad};
    for (size_t i = 0; i < SD_ARRAY_LEN(ids); i++) {
        if (*ids[i] >= v->n_tokens) *ids[i] = -1;
        if ((rc = opt_token_id(g, k_id_keys[i], v->n_tokens, ids[i], err))) goto fail;
    }
    if ((rc = opt_bool(g, "tokenizer.ggml.add_bos_token", &v->add_bos, err))) goto fail;
    if ((rc = opt_bool(g, "tokenizer.ggml.add_eos_token", &v->add_eos, err))) goto fail;

    /* ---- attributes llama.cpp infers from token texts */
    if (v->eot < 0) {
        int32_t best = -1;
        for (size_t i = 0; i < SD_ARRAY_LEN(k_eot_names); i++) {
            int32_t id = find_cstr(v, k_eot_names[i]);
            if (id >= 0 && (best < 0 || id < best)) best = id;
        }
        v->eot = best;
        if (best >= 0) v->attr[best] |= TA_CONTROL;
    }
    if (v->eom < 0) {
        v->eom = find_cstr(v, "<|eom_id|>");
        if (v->eom >= 0) v->attr[v->eom] |= TA_CONTROL;
    }
    for (size_t i = 0; i < SD_ARRAY_LEN(k_fim_names); i++) {
        int32_t id = find_cstr(v, k_fim_names[i]);
        if (id >= 0) v->attr[id] |= TA_CONTROL;
    }
    for (int32_t i = 0; i < v->n_tokens; i++) {
        if ((v->attr[i] & TA_CONTROL) && strstr(v->ptext + v->poff[i], "unused")) v->attr[i] |= TA_UNUSED;
    }
    for (size_t i = 0; i < SD_ARRAY_LEN(k_eog_names); i++) {
        int32_t id = find_cstr(v, k_eog_names[i]);
        if (id >= 0) v->attr[id] |= TA_CONTROL | TA_EOG;
    }
    for (size_t i = 0; i < SD_ARRAY_LEN(k_fim_eog_names); i++) {
        int32_t id = find_cstr(v, k_fim_eog_names[i]);
        if (id >= 0) v->attr[id] |= TA_EOG;
    }
    static const char *const k_gptoss_ud[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};
    for (size_t i = 0; i < SD_ARRAY_LEN(k_gptoss_ud); i++) {
        int32_t id = find_cstr(v, k_gptoss_ud[i]);
        if (id >= 0) v->attr[id] = TA_USER_DEFINED;
    }
    if (v->eos >= 0) v->attr[v->eos] |= TA_EOG;
    if (v->eot >= 0) v->attr[v->eot] |= TA_EOG;
    if (v->eom >= 0) v->attr[v->eom] |= TA_EOG;

    /* ---- lookup structures */
    if ((rc = sd_tok_build_specials(v))) {
        rc = sd_err_set(err, rc, "out of memory for the special tokens");
        goto fail;
    }
    for (int b = 0; b < 256; b++) {
        char buf[8];
        snprintf(buf, sizeof buf, "<0x%02X>", b);
        v->byte_tok[b] = find_cstr(v, buf);
        if (v->byte_tok[b] < 0) {
            buf[0] = (char)b;
            int32_t id = sd_tok_map_find(v, buf, 1);
            v->byte_tok[b] = id < v->n_tokens ? id : -1;
        }
    }
    if (v->kind == SD_VOCAB_SPM) spm_find_blocks(v);
    if (v->kind == SD_VOCAB_BPE) {
        uint32_t gmap[256];
        gpt2_byte_map(gmap);
        for (int b = 0; b < 256; b++) {
            char buf[4];
            v->byte_enc_len[b] = (uint8_t)sd_utf8_encode(gmap[b], buf);
            memcpy(v->byte_enc[b], buf, v->byte_enc_len[b]);
            v->byte_piece[b] = sd_tok_map_find(v, buf, v->byte_enc_len[b]);
            buf[0] = (char)b;
            int32_t id = sd_tok_map_find(v, buf, 1);
            v->single_byte_tok[b] = id < v->n_tokens ? id : -1;
        }
        if ((rc = sd_regex_list_create(pre->exprs, pre->n_exprs, &v->regex, err))) goto fail;
    }
    if ((rc = build_decoded(v))) {
        rc = sd_err_set(err, rc, "out of memory for the decoded pieces");
        goto fail;
    }
    *out = v;
    return SDNPU_OK;
fail:
    sd_vocab_free(v);
    return rc;
}

/* ------------------------------------------------------------ queries */

enum sd_vocab_kind sd_vocab_kind(const struct sd_vocab *v) { return v->kind; }
const char *sd_vocab_pre(const struct sd_vocab *v) { return v->pre; }
int32_t sd_vocab_n_tokens(const struct sd_vocab *v) { return v ? v->n_tokens : 0; }
int32_t sd_vocab_bos(const struct sd_vocab *v) { return v->bos; }
int32_t sd_vocab_eos(const struct sd_vocab *v) { return v->eos; }
int32_t sd_vocab_eot(const struct sd_vocab *v) { return v->eot; }

bool sd_vocab_is_eog(const struct sd_vocab *v, int32_t id) {
    return v && id >= 0 && id < v->n_tokens && (v->attr[id] & TA_EOG);
}

int32_t sd_vocab_find(const struct sd_vocab *v, const char *text, size_t len) {
    if (!v || (!text && len)) return -1;
    int32_t id = sd_tok_map_find(v, text ? text : "", len);
    return id < v->n_tokens ? id : -1;
}

const char *sd_vocab_text(const struct sd_vocab *v, int32_t id, size_t *len) {
    if (!v || id < 0 || id >= v->n_tokens) {
        if (len) *len = 0;
        return NULL;
    }
    uint32_t l;
    const char *t = sd_tok_piece_text(v, id, &l);
    if (len) *len = l;
    return t;
}

enum sd_token_type sd_vocab_type(const struct sd_vocab *v, int32_t id) {
    if (!v || id < 0 || id >= v->n_tokens) return SD_TOKEN_UNUSED;
    uint8_t a = v->attr[id];
    if (a & TA_UNKNOWN) return SD_TOKEN_UNKNOWN;
    if (a & TA_CONTROL) return SD_TOKEN_CONTROL;
    if (a & TA_USER_DEFINED) return SD_TOKEN_USER_DEFINED;
    if (a & TA_BYTE) return SD_TOKEN_BYTE;
    if (a & TA_NORMAL) return SD_TOKEN_NORMAL;
    return SD_TOKEN_UNUSED;
}

float sd_vocab_score(const struct sd_vocab *v, int32_t id) {
    return (v && id >= 0 && id < v->n_tokens) ? v->score[id] : 0.0f;
}

int32_t sd_vocab_unk(const struct sd_vocab *v) { return v->unk; }
bool sd_vocab_add_bos(const struct sd_vocab *v) { return v->add_bos; }
bool sd_vocab_add_eos(const struct sd_vocab *v) { return v->add_eos; }
