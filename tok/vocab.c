/*
 * tok/vocab.c - the vocabulary: the piece map (every text the hot
 * loops look up, hashed once into an open-addressing table) and loading it
 * all from a GGUF file's tokenizer.ggml.* keys, plus the sd_vocab_* queries.
 *
 * The map and the loader live together because only loading writes the map
 * (BPE merge parts that are not tokens join it as the rules are read);
 * afterwards the vocabulary is read-only and the other files only look up
 * (sd_tok_map_find). The load also marks tokens as llama.cpp does by their
 * texts (EOG, control, FIM: the tables are in names.c) and has decode.c
 * work out the bytes each token decodes to, so that decoding only copies.
 */
#include "tok/tokenizer.h"

#include <stdio.h>
#include <string.h>

#include "tok/internal.h"

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

/* ---- sd_vocab_load, step by step
 *
 * Each step reads what the steps before it set up: the algorithm first (it
 * sets the default ids and which pre-tokenizer BPE uses), then the token
 * texts (the piece map every later step looks up), their scores and types,
 * BPE's merges, the file's special ids, the marks llama.cpp infers from
 * texts, and last the tables the hot loops read. A step that fails has set
 * err; sd_vocab_load frees what the steps allocated. */

/* tokenizer.ggml.model and .pre: SPM or BPE, its default ids, and for BPE
 * the pre-tokenizer (*pre). */
static int load_model(struct sd_vocab *v, const struct sd_gguf *g, const struct sd_tok_pre **pre,
                      struct sd_err *err) {
    const char *s;
    size_t len;
    int rc = sd_gguf_get_str(g, "tokenizer.ggml.model", &s, &len, err);
    if (rc == SDNPU_ERR_NOT_FOUND) return sd_err_set(err, SDNPU_ERR_FORMAT, "tokenizer.ggml.model: missing");
    if (rc) return rc;
    if (len == 5 && !memcmp(s, "llama", 5)) {
        v->kind = SD_VOCAB_SPM;
        v->bos = 1, v->eos = 2, v->unk = 0;
        v->add_bos = true;
        v->add_space_prefix = true;
    } else if (len == 4 && !memcmp(s, "gpt2", 4)) {
        v->kind = SD_VOCAB_BPE;
        v->bos = 11, v->eos = 11, v->unk = -1;
    } else {
        return sd_err_set(err, SDNPU_ERR_UNSUPPORTED,
                          "tokenizer.ggml.model '%.*s' is not supported (llama, gpt2)", (int)SD_MIN(len, 64),
                          s);
    }
    v->eot = v->eom = v->pad = -1;
    snprintf(v->pre, sizeof v->pre, "default");
    if (sd_gguf_get_str(g, "tokenizer.ggml.pre", &s, &len, NULL) == SDNPU_OK && len > 0) {
        snprintf(v->pre, sizeof v->pre, "%.*s", (int)SD_MIN(len, sizeof v->pre - 1), s);
    }
    if (v->kind == SD_VOCAB_BPE) {
        *pre = sd_tok_pre_find(v->pre);
        if (!*pre)
            return sd_err_set(err, SDNPU_ERR_UNSUPPORTED, "tokenizer.ggml.pre '%s' is not supported", v->pre);
        v->ignore_merges = (*pre)->flags & PRE_IGNORE_MERGES;
        if ((*pre)->flags & PRE_ADD_BOS) v->add_bos = true;
    }
    /* Only the SPM path of llama.cpp's tokenize adds the prefix space. */
    if (v->kind == SD_VOCAB_SPM)
        return opt_bool(g, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix, err);
    return SDNPU_OK;
}

/* Token i's text; llama.cpp names empty tokens "[EMPTY_<id>]", which is
 * written into empty[32]. */
static void token_text(const struct sd_gguf *g, int64_t ki, uint64_t i, char empty[32], const char **s,
                       size_t *len) {
    sd_gguf_arr_str_at(g, ki, i, s, len);
    if (*len == 0) {
        *len = (size_t)snprintf(empty, 32, "[EMPTY_%llu]", (unsigned long long)i);
        *s = empty;
    }
}

/* tokenizer.ggml.tokens: an array of n strings, each readable and at most
 * 1 MiB, all together within the arena's limit; *total is the arena size
 * they need (each text and its NUL). */
static int check_tokens(const struct sd_gguf *g, int64_t *ki, uint64_t *n, size_t *total,
                        struct sd_err *err) {
    enum sd_gguf_type et;
    *ki = sd_gguf_find_key(g, "tokenizer.ggml.tokens");
    if (*ki < 0) return sd_err_set(err, SDNPU_ERR_FORMAT, "tokenizer.ggml.tokens: missing");
    int rc = sd_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, n, NULL, err);
    if (rc) return rc;
    if (et != SD_GGUF_STRING) {
        return sd_err_set(err, SDNPU_ERR_FORMAT,
                          "tokenizer.ggml.tokens: array of %s, expected array of string",
                          sd_gguf_type_name(et));
    }
    if (*n == 0 || *n > INT32_MAX / 2) {
        return sd_err_set(err, SDNPU_ERR_FORMAT, "tokenizer.ggml.tokens: %llu tokens",
                          (unsigned long long)*n);
    }
    *total = 0;
    for (uint64_t i = 0; i < *n; i++) {
        const char *s;
        size_t len;
        if ((rc = sd_gguf_arr_str_at(g, *ki, i, &s, &len))) {
            return sd_err_set(err, rc, "tokenizer.ggml.tokens[%llu]: unreadable", (unsigned long long)i);
        }
        if (len == 0) len = (size_t)snprintf(NULL, 0, "[EMPTY_%llu]", (unsigned long long)i);
        if (len > ((size_t)1 << 20)) {
            return sd_err_set(err, SDNPU_ERR_FORMAT,
                              "tokenizer.ggml.tokens[%llu]: %zu bytes, more than 1 MiB",
                              (unsigned long long)i, len);
        }
        *total += len + 1;
        if (*total > MAX_ARENA_BYTES / 2) {
            return sd_err_set(err, SDNPU_ERR_FORMAT, "tokenizer.ggml.tokens: texts exceed %zu bytes",
                              MAX_ARENA_BYTES / 2);
        }
    }
    return SDNPU_OK;
}

/* The token texts: checked, copied into the piece arena, and mapped. */
static int load_tokens(struct sd_vocab *v, const struct sd_gguf *g, struct sd_err *err) {
    int64_t ki;
    uint64_t n;
    size_t total = 0;
    int rc = check_tokens(g, &ki, &n, &total, err);
    if (rc) return rc;
    v->n_tokens = (int32_t)n;
    v->ptext_cap = total + 64;
    v->ptext = sd_malloc(v->ptext_cap);
    v->cap_pieces = v->n_tokens + 2;
    v->poff = sd_malloc((size_t)v->cap_pieces * sizeof *v->poff);
    v->score = sd_calloc((size_t)n, sizeof *v->score);
    v->attr = sd_malloc((size_t)n);
    if (!v->ptext || !v->poff || !v->score || !v->attr) {
        return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for %llu tokens", (unsigned long long)n);
    }
    size_t o = 0;
    v->poff[0] = 0;
    for (uint64_t i = 0; i < n; i++) {
        char empty[32];
        const char *s;
        size_t len;
        token_text(g, ki, i, empty, &s, &len);
        memcpy(v->ptext + o, s, len);
        v->ptext[o + len] = 0;
        o += len + 1;
        v->poff[i + 1] = (uint32_t)o;
        if (len > v->max_len) v->max_len = (uint32_t)len;
    }
    v->ptext_size = o;
    v->n_pieces = v->n_tokens;
    if (map_rebuild(v, sd_tok_pow2_at_least(n * 2))) {
        return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for %llu tokens", (unsigned long long)n);
    }
    return SDNPU_OK;
}

/* Element i of a packed little-endian array of 32-bit values. */
static uint32_t le32_at(const uint8_t *p, int32_t i) {
    return (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 | (uint32_t)p[4 * i + 2] << 16 |
           (uint32_t)p[4 * i + 3] << 24;
}

/* An optional per-token array: *data is NULL when key is absent; else it
 * must be of type want (or alt) and hold at least n_tokens elements. what
 * names the elements in the message ("scores"). */
static int token_array(const struct sd_vocab *v, const struct sd_gguf *g, const char *key,
                       enum sd_gguf_type want, enum sd_gguf_type alt, const char *what, enum sd_gguf_type *et,
                       const uint8_t **data, struct sd_err *err) {
    uint64_t n;
    const void *d;
    *data = NULL;
    if (sd_gguf_find_key(g, key) < 0) return SDNPU_OK;
    int rc = sd_gguf_get_arr(g, key, et, &n, &d, err);
    if (rc) return rc;
    if (*et != want && *et != alt) {
        return sd_err_set(err, SDNPU_ERR_FORMAT, "%s: array of %s, expected %s", key, sd_gguf_type_name(*et),
                          sd_gguf_type_name(want));
    }
    if (n < (uint64_t)v->n_tokens) {
        return sd_err_set(err, SDNPU_ERR_FORMAT, "%s: %llu %s for %d tokens", key, (unsigned long long)n,
                          what, (int)v->n_tokens);
    }
    *data = d;
    return SDNPU_OK;
}

/* tokenizer.ggml.scores (SPM's merge order; float32, or int32 in some
 * files) and tokenizer.ggml.token_type, both optional: without types every
 * token is normal. */
static int load_scores_types(struct sd_vocab *v, const struct sd_gguf *g, struct sd_err *err) {
    enum sd_gguf_type et;
    const uint8_t *p;
    int rc =
        token_array(v, g, "tokenizer.ggml.scores", SD_GGUF_FLOAT32, SD_GGUF_INT32, "scores", &et, &p, err);
    if (rc) return rc;
    for (int32_t i = 0; p && i < v->n_tokens; i++) {
        uint32_t bits = le32_at(p, i);
        if (et == SD_GGUF_FLOAT32) {
            memcpy(&v->score[i], &bits, 4);
        } else {
            v->score[i] = (float)(int32_t)bits;
        }
    }
    memset(v->attr, TA_NORMAL, (size_t)v->n_tokens);
    rc = token_array(v, g, "tokenizer.ggml.token_type", SD_GGUF_INT32, SD_GGUF_INT32, "types", &et, &p, err);
    if (rc) return rc;
    static const uint8_t k_attr[7] = {0,         TA_NORMAL, TA_UNKNOWN, TA_CONTROL, TA_USER_DEFINED,
                                      TA_UNUSED, TA_BYTE};
    for (int32_t i = 0; p && i < v->n_tokens; i++) {
        int32_t t = (int32_t)le32_at(p, i);
        v->attr[i] = (t >= 0 && t <= 6) ? k_attr[t] : 0;
    }
    return SDNPU_OK;
}

/* The file's special ids (each optional, out-of-range ones ignored) and
 * whether to add BOS / EOS. */
static int load_special_ids(struct sd_vocab *v, const struct sd_gguf *g, struct sd_err *err) {
    static const char *const k_id_keys[] = {
        "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",     "tokenizer.ggml.eot_token_id",
        "tokenizer.ggml.eom_token_id", "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id",
    };
    int32_t *ids[] = {&v->bos, &v->eos, &v->eot, &v->eom, &v->unk, &v->pad};
    int rc;
    for (size_t i = 0; i < SD_ARRAY_LEN(ids); i++) {
        if (*ids[i] >= v->n_tokens) *ids[i] = -1;
        if ((rc = opt_token_id(g, k_id_keys[i], v->n_tokens, ids[i], err))) return rc;
    }
    if ((rc = opt_bool(g, "tokenizer.ggml.add_bos_token", &v->add_bos, err))) return rc;
    return opt_bool(g, "tokenizer.ggml.add_eos_token", &v->add_eos, err);
}

/* SPM's byte fallback: the token of each byte, <0xNN> or else the byte's
 * own one-byte text. */
static void spm_byte_tokens(struct sd_vocab *v) {
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
}

/* Byte-level BPE's byte tables: each byte's GPT-2 character, its piece and
 * the token of the byte itself. */
static void bpe_byte_tables(struct sd_vocab *v) {
    uint32_t gmap[256];
    sd_tok_gpt2_byte_map(gmap);
    for (int b = 0; b < 256; b++) {
        char buf[4];
        v->byte_enc_len[b] = (uint8_t)sd_utf8_encode(gmap[b], buf);
        memcpy(v->byte_enc[b], buf, v->byte_enc_len[b]);
        v->byte_piece[b] = sd_tok_map_find(v, buf, v->byte_enc_len[b]);
        buf[0] = (char)b;
        int32_t id = sd_tok_map_find(v, buf, 1);
        v->single_byte_tok[b] = id < v->n_tokens ? id : -1;
    }
}

/* What the hot loops read: the special-token trie, the byte tables, SPM's
 * word cuts or BPE's pre-tokenizer, and the decoded pieces. */
static int build_lookups(struct sd_vocab *v, const struct sd_tok_pre *pre, struct sd_err *err) {
    int rc = sd_tok_build_specials(v);
    if (rc) return sd_err_set(err, rc, "out of memory for the special tokens");
    spm_byte_tokens(v);
    if (v->kind == SD_VOCAB_SPM) spm_find_blocks(v);
    if (v->kind == SD_VOCAB_BPE) {
        bpe_byte_tables(v);
        if ((rc = sd_regex_list_create(pre->exprs, pre->n_exprs, &v->regex, err))) return rc;
    }
    if ((rc = sd_tok_build_decoded(v))) return sd_err_set(err, rc, "out of memory for the decoded pieces");
    return SDNPU_OK;
}

int sd_vocab_load(const struct sd_gguf *g, struct sd_vocab **out, struct sd_err *err) {
    if (!out) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "sd_vocab_load: NULL out");
    *out = NULL;
    if (!g) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "sd_vocab_load: NULL file");
    struct sd_vocab *v = sd_calloc(1, sizeof *v);
    if (!v) return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for the vocabulary");
    const struct sd_tok_pre *pre = NULL; /* BPE's pre-tokenizer */
    int rc = load_model(v, g, &pre, err);
    if (!rc) rc = load_tokens(v, g, err);
    if (!rc) rc = load_scores_types(v, g, err);
    if (!rc && v->kind == SD_VOCAB_BPE) rc = load_merges(v, g, err);
    if (!rc) rc = load_special_ids(v, g, err);
    if (!rc) sd_tok_mark_by_name(v);
    if (!rc) rc = build_lookups(v, pre, err);
    if (rc) {
        sd_vocab_free(v);
        return rc;
    }
    *out = v;
    return SDNPU_OK;
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
