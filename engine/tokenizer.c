/*
 * engine/tokenizer.c - vocabulary loading, tokenization and decoding.
 *
 * The behaviour to match is llama.cpp's (src/llama-vocab.cpp): the same
 * special-token partition, the same SentencePiece bigram merging by score,
 * the same byte-level BPE merging by rank after the same pre-tokenizer.
 * Where llama.cpp's code and the idea it stands for disagree, the code wins,
 * and a comment says so. The data structures are our own: every string the
 * hot loops look up is hashed once into open-addressing tables at load, BPE
 * merges are looked up by a pair of integer piece ids, and one tokenize call
 * allocates only a few scratch arrays that grow with the input.
 *
 * Speed comes from cutting text into words that provably merge alone (BPE:
 * the pre-tokenizer's words; SPM: the pieces between U+2581s that no token
 * spans) and, on long texts, remembering each word's ids for the rest of
 * the call. The special-token partition finds every candidate match in one
 * pass with a trie and resolves only clusters of overlapping matches.
 *
 * A vocabulary is immutable after sd_vocab_load, so any number of threads
 * may tokenize and decode with it at once.
 */
#include "engine/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tok_internal.h"

/* Token attributes, as llama.cpp's llama_token_attr, plus our EOG mark. */
enum {
    TA_UNKNOWN = 1 << 0,
    TA_UNUSED = 1 << 1,
    TA_NORMAL = 1 << 2,
    TA_CONTROL = 1 << 3,
    TA_USER_DEFINED = 1 << 4,
    TA_BYTE = 1 << 5,
    TA_EOG = 1 << 7
};
#define TA_SPECIAL (TA_CONTROL | TA_USER_DEFINED | TA_UNKNOWN) /* split out before the model runs */

/* Hard limits that keep every offset in 32 bits. */
#define MAX_TEXT_BYTES ((size_t)1 << 30)      /* one tokenize call */
#define MAX_ARENA_BYTES ((size_t)0xF0000000u) /* all token texts together */

/* ------------------------------------------------------------- hashing */

static inline uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 0x243F6A8885A308D3ull ^ ((uint64_t)n * 0x9E3779B97F4A7C15ull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    if (n) memcpy(&w, s, n);
    h = (h ^ w) * 0x94D049BB133111EBull;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    return h;
}

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDull;
    x ^= x >> 33;
    x *= 0xC4CEB9FE1A85EC53ull;
    x ^= x >> 33;
    return x;
}

static uint32_t pow2_at_least(uint64_t n) {
    uint64_t c = 16;
    while (c < n)
        c <<= 1;
    return (uint32_t)c;
}

/* ---------------------------------------------------------- vocabulary */

struct merge_slot {
    uint64_t key1; /* ((uint64_t)left << 32 | right) + 1; 0 = empty */
    int32_t rank;
    int32_t result; /* piece id of left+right */
};

/* One token's decoded bytes; one 8-byte load per token when decoding. */
struct dpiece {
    uint32_t off;
    uint32_t len : 24; /* token texts are at most 1 MiB (checked at load) */
    uint32_t attr : 8; /* TA_* of the token */
};

struct vocab_pre {
    const char *name;
    const char *const *exprs;
    int n_exprs;
    unsigned flags;
};
enum { PRE_IGNORE_MERGES = 1, PRE_ADD_BOS = 2 };

struct sd_vocab {
    enum sd_vocab_kind kind;
    char pre[64];
    int32_t n_tokens;

    /* Pieces: the token texts (ids 0..n_tokens-1), then for BPE any text a
     * merge rule names that is not a token (ids n_tokens..n_pieces-1). Each
     * text is followed by a NUL. */
    char *ptext; /* [ptext_size] */
    size_t ptext_size, ptext_cap;
    uint32_t *poff; /* [n_pieces + 1] */
    int32_t n_pieces, cap_pieces;
    uint32_t max_len; /* longest token text */

    float *score;  /* [n_tokens] */
    uint8_t *attr; /* [n_tokens] TA_* */

    /* Text -> piece id. Slot: tag (high 32 bits of the hash) << 32 | id + 1. */
    uint64_t *map; /* [map_mask + 1] */
    uint32_t map_mask;
    int32_t map_used;

    /* What each token decodes to (render_special = true). */
    char *dec;         /* [dec_size] */
    struct dpiece *dp; /* [n_tokens]: where each token's bytes are in dec */

    /* Special tokens in llama.cpp's matching order (longest text first;
     * equal lengths by id), and a trie over their texts. Node 0 is the
     * root; a node's best_* is the rank of the first token in that order
     * whose text ends there (all special tokens / user-defined ones). */
    int32_t *spec; /* [n_spec] rank -> token id */
    int32_t n_spec;
    int32_t n_nodes;
    int32_t *best_any; /* [n_nodes] */
    int32_t *best_ud;  /* [n_nodes] */
    int32_t root_child[256];
    int32_t n_l1;    /* the root's children */
    int32_t *l2;     /* [n_l1][256] their children */
    uint64_t *edges; /* [edge_mask + 1]: (node << 8 | byte) + 1 << 32 | child; 0 empty */
    uint32_t edge_mask;
    bool start_any[256], start_ud[256];
    bool has_ud;

    int32_t bos, eos, eot, eom, unk, pad;
    bool add_bos, add_eos, add_space_prefix, ignore_merges;

    /* SPM: the token for each byte (<0xNN>, else the byte itself, else -1). */
    int32_t byte_tok[256];
    /* SPM: merges never join across a U+2581 unless a token has U+2581
     * after its first character; the characters that precede U+2581 inside
     * such tokens block a cut there. With them known, text is cut into
     * words before every other U+2581, and words can be cached. */
    bool spm_split;
    uint32_t n_spm_block;
    uint32_t spm_block[32];

    /* BPE */
    struct merge_slot *merges; /* [merge_mask + 1] */
    uint32_t merge_mask;
    int32_t byte_piece[256]; /* piece id of the GPT-2 character of each byte, -1 none */
    char byte_enc[256][2];   /* that character's UTF-8 (1 or 2 bytes) */
    uint8_t byte_enc_len[256];
    int32_t single_byte_tok[256]; /* token whose text is this one byte, -1 none */
    struct sd_regex_list *regex;
};

/* ----------------------------------------------------------- the map */

static inline const char *piece_text(const struct sd_vocab *v, int32_t id, uint32_t *len) {
    *len = v->poff[id + 1] - v->poff[id] - 1;
    return v->ptext + v->poff[id];
}

static int32_t map_find_h(const struct sd_vocab *v, const char *s, size_t n, uint64_t h) {
    uint32_t tag = (uint32_t)(h >> 32);
    for (uint32_t i = (uint32_t)h & v->map_mask;; i = (i + 1) & v->map_mask) {
        uint64_t e = v->map[i];
        if (!e) return -1;
        if ((uint32_t)(e >> 32) != tag) continue;
        int32_t id = (int32_t)(uint32_t)e - 1;
        uint32_t l;
        const char *t = piece_text(v, id, &l);
        if (l == n && !memcmp(t, s, n)) return id;
    }
}

static int32_t map_find(const struct sd_vocab *v, const char *s, size_t n) {
    return map_find_h(v, s, n, hash_bytes(s, n));
}

/* Insert id under its text unless the text is there already (BPE merge
 * parts that are not tokens). */
static void map_put(struct sd_vocab *v, int32_t id) {
    uint32_t n;
    const char *s = piece_text(v, id, &n);
    uint64_t h = hash_bytes(s, n);
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
        const char *t = piece_text(v, (int32_t)(uint32_t)e - 1, &l);
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
        const char *t = piece_text(v, (int32_t)i, &len);
        a[i].hash = hash_bytes(t, len);
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
            const char *t1 = piece_text(v, (int32_t)(uint32_t)e - 1, &l1);
            const char *t2 = piece_text(v, a[k].id, &l2);
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
    *id = map_find(v, s, n);
    if (*id >= 0) return SDNPU_OK;
    return piece_add(v, s, n, id);
}

/* ------------------------------------------------------- BPE merge map */

static const struct merge_slot *merge_find(const struct sd_vocab *v, int32_t l, int32_t r) {
    uint64_t key1 = ((uint64_t)(uint32_t)l << 32 | (uint32_t)r) + 1;
    for (uint32_t i = (uint32_t)mix64(key1) & v->merge_mask;; i = (i + 1) & v->merge_mask) {
        const struct merge_slot *m = &v->merges[i];
        if (m->key1 == key1) return m;
        if (!m->key1) return NULL;
    }
}

/* First rule wins, as std::map::emplace in llama.cpp's bpe_ranks. */
static void merge_put(struct sd_vocab *v, int32_t l, int32_t r, int32_t rank, int32_t result) {
    uint64_t key1 = ((uint64_t)(uint32_t)l << 32 | (uint32_t)r) + 1;
    for (uint32_t i = (uint32_t)mix64(key1) & v->merge_mask;; i = (i + 1) & v->merge_mask) {
        struct merge_slot *m = &v->merges[i];
        if (m->key1 == key1) return;
        if (!m->key1) {
            m->key1 = key1;
            m->rank = rank;
            m->result = result;
            return;
        }
    }
}

/* ------------------------------------------------------ special trie */

/* Children of the root and of its children are in direct tables (the walk
 * from every space of a text usually ends at depth two); deeper edges are
 * hashed. The root's children are nodes 1..n_l1. */
static inline int32_t trie_child(const struct sd_vocab *v, int32_t node, uint8_t b) {
    if (node == 0) return v->root_child[b];
    if (node <= v->n_l1) return v->l2[(size_t)(node - 1) * 256 + b];
    uint64_t key1 = ((uint64_t)(uint32_t)node << 8 | b) + 1;
    for (uint32_t i = (uint32_t)mix64(key1) & v->edge_mask;; i = (i + 1) & v->edge_mask) {
        uint64_t e = v->edges[i];
        if (!e) return -1;
        if (e >> 32 == key1) return (int32_t)(uint32_t)e;
    }
}

static void trie_set_child(struct sd_vocab *v, int32_t node, uint8_t b, int32_t child) {
    if (node == 0) {
        v->root_child[b] = child;
        return;
    }
    if (node <= v->n_l1) {
        v->l2[(size_t)(node - 1) * 256 + b] = child;
        return;
    }
    uint64_t key1 = ((uint64_t)(uint32_t)node << 8 | b) + 1;
    for (uint32_t i = (uint32_t)mix64(key1) & v->edge_mask;; i = (i + 1) & v->edge_mask) {
        if (!v->edges[i]) {
            v->edges[i] = key1 << 32 | (uint32_t)child;
            return;
        }
    }
}

/* The matching order is sorted as (length, id) keys packed into 64-bit
 * integers, since C11 qsort cannot pass the vocabulary to a comparator.
 * llama.cpp sorts by length alone with std::sort, so its order among
 * equal-length tokens is unspecified; it matters only for two such tokens
 * that overlap in the text (a suffix of one is a prefix of the other), of
 * which the vocabularies we know have none. */
static int u64_cmp(const void *pa, const void *pb) {
    uint64_t a = *(const uint64_t *)pa, b = *(const uint64_t *)pb;
    return a < b ? -1 : (a > b);
}

static int build_specials(struct sd_vocab *v) {
    int32_t n = 0;
    size_t total = 1;
    for (int32_t i = 0; i < v->n_tokens; i++) {
        if (v->attr[i] & TA_SPECIAL) {
            n++;
            total += v->poff[i + 1] - v->poff[i];
        }
    }
    for (int b = 0; b < 256; b++)
        v->root_child[b] = -1;
    v->n_spec = n;
    v->spec = sd_malloc((size_t)n * sizeof *v->spec);
    uint64_t *keys = sd_malloc((size_t)n * sizeof *keys);
    v->best_any = sd_malloc(total * sizeof *v->best_any);
    v->best_ud = sd_malloc(total * sizeof *v->best_ud);
    v->edge_mask = pow2_at_least((uint64_t)total * 2) - 1;
    v->edges = sd_calloc((size_t)v->edge_mask + 1, sizeof *v->edges);
    if (!v->spec || !keys || !v->best_any || !v->best_ud || !v->edges) {
        sd_free(keys);
        return SDNPU_ERR_OOM;
    }
    n = 0;
    for (int32_t i = 0; i < v->n_tokens; i++) {
        if (!(v->attr[i] & TA_SPECIAL)) continue;
        uint64_t len = v->poff[i + 1] - v->poff[i] - 1;
        /* Longest first, then by id: (~len) sorts descending lengths. */
        keys[n++] = (uint64_t)(0xFFFFFFFFu - (uint32_t)len) << 32 | (uint32_t)i;
    }
    qsort(keys, (size_t)n, sizeof *keys, u64_cmp);
    v->n_nodes = 1;
    v->best_any[0] = v->best_ud[0] = INT32_MAX;
    for (int32_t r = 0; r < n; r++) { /* the root's children first: nodes 1..n_l1 */
        uint32_t len;
        const char *t = piece_text(v, (int32_t)(uint32_t)keys[r], &len);
        if (len && v->root_child[(uint8_t)t[0]] < 0) {
            int32_t c = v->n_nodes++;
            v->best_any[c] = v->best_ud[c] = INT32_MAX;
            v->root_child[(uint8_t)t[0]] = c;
        }
    }
    v->n_l1 = v->n_nodes - 1;
    v->l2 = sd_malloc((size_t)v->n_l1 * 256 * sizeof *v->l2 + 1);
    if (!v->l2) {
        sd_free(keys);
        return SDNPU_ERR_OOM;
    }
    for (size_t i = 0; i < (size_t)v->n_l1 * 256; i++)
        v->l2[i] = -1;
    for (int32_t r = 0; r < n; r++) {
        int32_t id = (int32_t)(uint32_t)keys[r];
        v->spec[r] = id;
        uint32_t len;
        const char *t = piece_text(v, id, &len);
        if (len == 0) continue;
        bool ud = (v->attr[id] & TA_USER_DEFINED) && !(v->attr[id] & (TA_CONTROL | TA_UNKNOWN));
        int32_t node = 0;
        for (uint32_t k = 0; k < len; k++) {
            int32_t c = trie_child(v, node, (uint8_t)t[k]);
            if (c < 0) {
                c = v->n_nodes++;
                v->best_any[c] = v->best_ud[c] = INT32_MAX;
                trie_set_child(v, node, (uint8_t)t[k], c);
            }
            node = c;
        }
        if (v->best_any[node] == INT32_MAX) v->best_any[node] = r;
        if (ud && v->best_ud[node] == INT32_MAX) v->best_ud[node] = r;
        v->start_any[(uint8_t)t[0]] = true;
        if (ud) {
            v->start_ud[(uint8_t)t[0]] = true;
            v->has_ud = true;
        }
    }
    sd_free(keys);
    return SDNPU_OK;
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
    int32_t id = map_find(v, s, strlen(s));
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
        const char *t = piece_text(v, id, &len);
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
    v->merge_mask = pow2_at_least(n * 2 + 16) - 1;
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
        merge_put(v, pl, pr, (int32_t)i, res);
    }
    sd_free(tmp);
    return SDNPU_OK;
}

static void spm_find_blocks(struct sd_vocab *v) {
    v->spm_split = true;
    v->n_spm_block = 0;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        uint32_t len;
        const char *t = piece_text(v, id, &len);
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
    if (map_rebuild(v, pow2_at_least(n * 2))) {
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
    if ((rc = build_specials(v))) {
        rc = sd_err_set(err, rc, "out of memory for the special tokens");
        goto fail;
    }
    for (int b = 0; b < 256; b++) {
        char buf[8];
        snprintf(buf, sizeof buf, "<0x%02X>", b);
        v->byte_tok[b] = find_cstr(v, buf);
        if (v->byte_tok[b] < 0) {
            buf[0] = (char)b;
            int32_t id = map_find(v, buf, 1);
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
            v->byte_piece[b] = map_find(v, buf, v->byte_enc_len[b]);
            buf[0] = (char)b;
            int32_t id = map_find(v, buf, 1);
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
    int32_t id = map_find(v, text ? text : "", len);
    return id < v->n_tokens ? id : -1;
}

const char *sd_vocab_text(const struct sd_vocab *v, int32_t id, size_t *len) {
    if (!v || id < 0 || id >= v->n_tokens) {
        if (len) *len = 0;
        return NULL;
    }
    uint32_t l;
    const char *t = piece_text(v, id, &l);
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

void sd_tokvec_free(struct sd_tokvec *tv) {
    if (!tv) return;
    sd_free(tv->ids);
    tv->ids = NULL;
    tv->n = tv->cap = 0;
}

/* ---------------------------------------------------------- tokenize */

struct sym {
    int32_t prev, next;
    uint32_t off, n; /* bytes of the symbol in the fragment; n == 0: merged away */
    int32_t piece;   /* BPE: piece id of the text, -1 if none */
};

/* A candidate merge of sym[left] with its right neighbour. SPM orders by
 * score (higher first), BPE by rank (lower first); ties by position. */
struct bigram {
    float score;
    int32_t rank;
    int32_t left;
    uint32_t size;  /* bytes of left+right when queued: a stale entry fails this */
    int32_t result; /* BPE: the merged piece */
};

struct task {
    uint32_t start, end;
    int32_t min_rank; /* tokens ranked at or before this cannot occur here */
    int32_t token;    /* >= 0: emit this token; else resolve the gap */
};

struct wc_entry {
    uint32_t text_off, len, ids_off, n_ids;
};

struct wcache {
    bool on;
    uint64_t *slot; /* [mask + 1]: tag << 32 | entry + 1; 0 = empty */
    uint32_t mask;
    struct wc_entry *ent;
    size_t n_ent, cap_ent;
    char *text; /* the words, back to back */
    size_t n_text, cap_text;
    int32_t *ids; /* their ids, back to back */
    size_t n_ids, cap_ids;
};

/* A direct-mapped memo of recent text -> id look-ups for one call: SPM asks
 * for the same short strings ("th", "\xe2\x96\x81the") over and over, and
 * the vocabulary's table is megabytes away in memory. */
#define MEMO_MAX 22
struct memo_entry {
    uint64_t hash;
    int32_t id;
    uint8_t len;
    char text[MEMO_MAX];
};

struct run {
    const struct sd_vocab *v;
    struct wcache wc;
    struct memo_entry *memo; /* [memo_mask + 1], NULL: off */
    uint32_t memo_mask;
    struct sd_tokvec *out;
    bool parse_special;
    bool prev_special;           /* SPM space prefix: the last fragment was a token */
    const char *text;            /* the whole (valid UTF-8) input */
    uint32_t raw_start, raw_end; /* pending raw fragment, not yet tokenized */
    bool raw_pending;
    struct sd_tok_scratch s;
    char *esc;
    size_t cap_esc;
    struct sym *sym;
    size_t cap_sym;
    struct bigram *heap;
    size_t cap_heap, n_heap;
    struct task *task;
    size_t cap_task, n_task;
};

static inline int emit(struct run *r, int32_t id) {
    struct sd_tokvec *o = r->out;
    if (o->n == o->cap && sd_tok_grow((void **)&o->ids, &o->cap, o->n + 1, sizeof *o->ids))
        return SDNPU_ERR_OOM;
    o->ids[o->n++] = id;
    return SDNPU_OK;
}

static inline bool spm_before(const struct bigram *a, const struct bigram *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}
static inline bool bpe_before(const struct bigram *a, const struct bigram *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static int heap_push(struct run *r, const struct bigram *bg, bool spm) {
    if (r->n_heap == r->cap_heap &&
        sd_tok_grow((void **)&r->heap, &r->cap_heap, r->n_heap + 1, sizeof *r->heap))
        return SDNPU_ERR_OOM;
    size_t i = r->n_heap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!(spm ? spm_before(bg, &r->heap[p]) : bpe_before(bg, &r->heap[p]))) break;
        r->heap[i] = r->heap[p];
        i = p;
    }
    r->heap[i] = *bg;
    return SDNPU_OK;
}

static struct bigram heap_pop(struct run *r, bool spm) {
    struct bigram top = r->heap[0];
    struct bigram last = r->heap[--r->n_heap];
    size_t n = r->n_heap, i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n &&
            (spm ? spm_before(&r->heap[c + 1], &r->heap[c]) : bpe_before(&r->heap[c + 1], &r->heap[c])))
            c++;
        if (!(spm ? spm_before(&r->heap[c], &last) : bpe_before(&r->heap[c], &last))) break;
        r->heap[i] = r->heap[c];
        i = c;
    }
    if (n) r->heap[i] = last;
    return top;
}

static inline int32_t lookup(struct run *r, const char *s, uint32_t n) {
    uint64_t h = hash_bytes(s, n);
    if (!r->memo || n > MEMO_MAX) return map_find_h(r->v, s, n, h);
    struct memo_entry *e = &r->memo[(uint32_t)(h >> 20) & r->memo_mask];
    if (e->hash == h && e->len == n && !memcmp(e->text, s, n)) return e->id;
    int32_t id = map_find_h(r->v, s, n, h);
    e->hash = h;
    e->len = (uint8_t)n;
    e->id = id;
    memcpy(e->text, s, n);
    return id;
}

/* ---- SentencePiece BPE (llm_tokenizer_spm_session) */

static int spm_try_bigram(struct run *r, const char *t, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return SDNPU_OK;
    uint32_t size = r->sym[left].n + r->sym[right].n;
    if (size > r->v->max_len) return SDNPU_OK;
    int32_t id = lookup(r, t + r->sym[left].off, size);
    if (id < 0) return SDNPU_OK;
    struct bigram bg = {r->v->score[id], 0, left, size, id};
    return heap_push(r, &bg, true);
}

/* Merge the characters of e[0..elen) (escaped text) into tokens. */
static int spm_word(struct run *r, const char *e, uint32_t elen) {
    const struct sd_vocab *v = r->v;
    int rc;
    /* One symbol per UTF-8 character. */
    if (sd_tok_grow((void **)&r->sym, &r->cap_sym, elen, sizeof *r->sym)) return SDNPU_ERR_OOM;
    int32_t n = 0;
    static const uint8_t k_len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    for (uint32_t i = 0; i < elen;) {
        uint32_t l = SD_MIN((uint32_t)k_len[(uint8_t)e[i] >> 4], elen - i);
        r->sym[n] = (struct sym){n - 1, -1, i, l, -1};
        i += l;
        if (i < elen) r->sym[n].next = n + 1;
        n++;
    }
    r->n_heap = 0;
    for (int32_t i = 1; i < n; i++)
        if ((rc = spm_try_bigram(r, e, i - 1, i))) return rc;
    while (r->n_heap) {
        struct bigram bg = heap_pop(r, true);
        struct sym *L = &r->sym[bg.left];
        if (L->n == 0 || L->next < 0) continue;
        struct sym *R = &r->sym[L->next];
        if (R->n == 0 || L->n + R->n != bg.size) continue;
        L->n += R->n;
        R->n = 0;
        L->next = R->next;
        if (R->next >= 0) r->sym[R->next].prev = bg.left;
        if ((rc = spm_try_bigram(r, e, L->prev, bg.left))) return rc;
        if ((rc = spm_try_bigram(r, e, bg.left, L->next))) return rc;
    }
    for (int32_t i = 0; i != -1 && n > 0; i = r->sym[i].next) {
        const struct sym *sy = &r->sym[i];
        int32_t id = lookup(r, e + sy->off, sy->n);
        if (id >= 0 && id < v->n_tokens) {
            if ((rc = emit(r, id))) return rc;
            continue;
        }
        /* Byte fallback. llama.cpp's rev_merge re-segmentation can only
         * apply to a symbol that is not a token, and every merged symbol is
         * a token, so on valid UTF-8 only single characters arrive here. A
         * byte with no token at all becomes UNK (llama.cpp would throw). */
        for (uint32_t k = 0; k < sy->n; k++) {
            int32_t b = v->byte_tok[(uint8_t)e[sy->off + k]];
            if (b < 0) b = v->unk;
            if (b >= 0 && (rc = emit(r, b))) return rc;
        }
    }
    return SDNPU_OK;
}

/* ---- the per-call word cache
 *
 * Text repeats its words, and a word always tokenizes the same way, so one
 * tokenize call of a long text remembers the ids of each short word it has
 * merged. The cache belongs to the call (the vocabulary stays read-only and
 * thread-safe); failing to grow it only turns it off. */

#define WC_MAX_WORD 64

static bool wc_lookup(struct run *r, const char *w, uint32_t len, uint64_t h, int *rc) {
    struct wcache *c = &r->wc;
    uint32_t tag = (uint32_t)(h >> 32);
    for (uint32_t i = (uint32_t)h & c->mask;; i = (i + 1) & c->mask) {
        uint64_t s = c->slot[i];
        if (!s) return false;
        if ((uint32_t)(s >> 32) != tag) continue;
        const struct wc_entry *e = &c->ent[(uint32_t)s - 1];
        if (e->len != len || memcmp(c->text + e->text_off, w, len)) continue;
        struct sd_tokvec *o = r->out;
        if (sd_tok_grow((void **)&o->ids, &o->cap, o->n + e->n_ids, sizeof *o->ids)) {
            *rc = SDNPU_ERR_OOM;
            return true;
        }
        memcpy(o->ids + o->n, c->ids + e->ids_off, e->n_ids * sizeof *o->ids);
        o->n += e->n_ids;
        *rc = SDNPU_OK;
        return true;
    }
}

static void wc_insert(struct run *r, const char *w, uint32_t len, uint64_t h, const int32_t *ids,
                      uint32_t n) {
    struct wcache *c = &r->wc;
    if (c->n_ent >= (c->mask + 1) / 2) return; /* full: keep what is there */
    if (sd_tok_grow((void **)&c->ent, &c->cap_ent, c->n_ent + 1, sizeof *c->ent) ||
        sd_tok_grow((void **)&c->text, &c->cap_text, c->n_text + len, 1) ||
        sd_tok_grow((void **)&c->ids, &c->cap_ids, c->n_ids + n, sizeof *c->ids)) {
        c->on = false;
        return;
    }
    struct wc_entry *e = &c->ent[c->n_ent];
    e->text_off = (uint32_t)c->n_text;
    e->len = len;
    e->ids_off = (uint32_t)c->n_ids;
    e->n_ids = n;
    memcpy(c->text + c->n_text, w, len);
    c->n_text += len;
    memcpy(c->ids + c->n_ids, ids, n * sizeof *ids);
    c->n_ids += n;
    uint32_t i = (uint32_t)h & c->mask;
    while (c->slot[i])
        i = (i + 1) & c->mask;
    c->slot[i] = (h >> 32) << 32 | (uint32_t)(c->n_ent + 1);
    c->n_ent++;
}

static int cached_word(struct run *r, const char *w, uint32_t len,
                       int (*fn)(struct run *, const char *, uint32_t)) {
    if (!r->wc.on || len > WC_MAX_WORD) return fn(r, w, len);
    uint64_t h = hash_bytes(w, len);
    int rc;
    if (wc_lookup(r, w, len, h, &rc)) return rc;
    size_t n0 = r->out->n;
    if ((rc = fn(r, w, len))) return rc;
    wc_insert(r, w, len, h, r->out->ids + n0, (uint32_t)(r->out->n - n0));
    return SDNPU_OK;
}

static int spm_fragment(struct run *r, const char *text, size_t len) {
    const struct sd_vocab *v = r->v;
    int rc;
    /* Spaces become U+2581; a prefix space goes first if the vocabulary
     * asks for one and this fragment starts the text or follows a token. */
    bool prefix = v->add_space_prefix && r->prev_special;
    size_t n_sp = 0;
    for (size_t i = 0; i < len; i++)
        n_sp += text[i] == ' ';
    size_t elen = len + 2 * n_sp + (prefix ? 3 : 0);
    if (elen > UINT32_MAX) return SDNPU_ERR_INVALID_ARG;
    if (sd_tok_grow((void **)&r->esc, &r->cap_esc, elen, 1)) return SDNPU_ERR_OOM;
    char *e = r->esc;
    size_t o = 0;
    if (prefix) memcpy(e, "\xe2\x96\x81", 3), o = 3;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(e + o, "\xe2\x96\x81", 3);
            o += 3;
        } else {
            e[o++] = text[i];
        }
    }
    if (!v->spm_split) return spm_word(r, e, (uint32_t)elen);
    /* Cut before each U+2581 that no token can span (see spm_blocked). */
    uint32_t ws = 0;
    for (uint32_t i = 1; i + 3 <= elen; i++) {
        if ((uint8_t)e[i] != 0xE2 || (uint8_t)e[i + 1] != 0x96 || (uint8_t)e[i + 2] != 0x81) continue;
        if (v->n_spm_block) {
            uint32_t k = i - 1;
            while (k > ws && ((uint8_t)e[k] & 0xC0) == 0x80)
                k--;
            uint32_t cp;
            if (sd_utf8_decode((const uint8_t *)e + k, i - k, &cp) <= 0) continue;
            bool blocked = false;
            for (uint32_t b = 0; b < v->n_spm_block; b++)
                blocked |= v->spm_block[b] == cp;
            if (blocked) continue;
        }
        if (i > ws && (rc = cached_word(r, e + ws, i - ws, spm_word))) return rc;
        ws = i;
        i += 2;
    }
    return cached_word(r, e + ws, (uint32_t)elen - ws, spm_word);
}

/* ---- byte-level BPE (llm_tokenizer_bpe_session) */

static int bpe_try_bigram(struct run *r, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return SDNPU_OK;
    int32_t pl = r->sym[left].piece, pr = r->sym[right].piece;
    if (pl < 0 || pr < 0) return SDNPU_OK;
    const struct merge_slot *m = merge_find(r->v, pl, pr);
    if (!m) return SDNPU_OK;
    struct bigram bg = {0.0f, m->rank, left, r->sym[left].n + r->sym[right].n, m->result};
    return heap_push(r, &bg, false);
}

static int bpe_emit_symbol(struct run *r, const char *w, const struct sym *sy) {
    const struct sd_vocab *v = r->v;
    if (sy->piece >= 0 && sy->piece < v->n_tokens) return emit(r, sy->piece);
    /* Not a token: llama.cpp looks up each byte of the GPT-2 encoded text
     * as a one-byte token and drops those it cannot find. */
    for (uint32_t k = 0; k < sy->n; k++) {
        uint8_t b = (uint8_t)w[sy->off + k];
        for (int j = 0; j < v->byte_enc_len[b]; j++) {
            int32_t id = v->single_byte_tok[(uint8_t)v->byte_enc[b][j]];
            int rc;
            if (id >= 0 && (rc = emit(r, id))) return rc;
        }
    }
    return SDNPU_OK;
}

static int bpe_word(struct run *r, const char *w, uint32_t len) {
    const struct sd_vocab *v = r->v;
    int rc;
    if (v->ignore_merges) {
        /* A word that is a token as a whole skips the merges. */
        size_t need = (size_t)len * 2;
        if (need <= v->max_len) {
            if (sd_tok_grow((void **)&r->esc, &r->cap_esc, need, 1)) return SDNPU_ERR_OOM;
            size_t o = 0;
            for (uint32_t i = 0; i < len; i++) {
                uint8_t b = (uint8_t)w[i];
                memcpy(r->esc + o, v->byte_enc[b], v->byte_enc_len[b]);
                o += v->byte_enc_len[b];
            }
            int32_t id = map_find(v, r->esc, o);
            if (id >= 0 && id < v->n_tokens) return emit(r, id);
        }
    }
    if (sd_tok_grow((void **)&r->sym, &r->cap_sym, len, sizeof *r->sym)) return SDNPU_ERR_OOM;
    for (uint32_t i = 0; i < len; i++)
        r->sym[i] = (struct sym){(int32_t)i - 1, i + 1 < len ? (int32_t)i + 1 : -1, i, 1,
                                 v->byte_piece[(uint8_t)w[i]]};
    if (len == 1) return bpe_emit_symbol(r, w, &r->sym[0]);
    r->n_heap = 0;
    for (int32_t i = 1; i < (int32_t)len; i++)
        if ((rc = bpe_try_bigram(r, i - 1, i))) return rc;
    while (r->n_heap) {
        struct bigram bg = heap_pop(r, false);
        struct sym *L = &r->sym[bg.left];
        if (L->n == 0 || L->next < 0) continue;
        struct sym *R = &r->sym[L->next];
        if (R->n == 0 || L->n + R->n != bg.size) continue;
        L->n += R->n;
        L->piece = bg.result;
        R->n = 0;
        L->next = R->next;
        if (R->next >= 0) r->sym[R->next].prev = bg.left;
        if ((rc = bpe_try_bigram(r, L->prev, bg.left))) return rc;
        if ((rc = bpe_try_bigram(r, bg.left, L->next))) return rc;
    }
    for (int32_t i = 0; i != -1; i = r->sym[i].next)
        if ((rc = bpe_emit_symbol(r, w, &r->sym[i]))) return rc;
    return SDNPU_OK;
}

static int bpe_fragment(struct run *r, const char *text, size_t len) {
    int rc = sd_regex_list_split(r->v->regex, text, len, &r->s);
    if (rc) return rc;
    uint32_t start = 0;
    for (size_t k = 0; k < r->s.n_words; k++) {
        uint32_t end = r->s.words[k];
        if (end > start && (rc = cached_word(r, text + start, end - start, bpe_word))) return rc;
        start = end;
    }
    return SDNPU_OK;
}

/* ---- fragments and the special-token partition */

static int flush_raw(struct run *r) {
    if (!r->raw_pending) return SDNPU_OK;
    r->raw_pending = false;
    const char *t = r->text + r->raw_start;
    size_t len = r->raw_end - r->raw_start;
    int rc = r->v->kind == SD_VOCAB_SPM ? spm_fragment(r, t, len) : bpe_fragment(r, t, len);
    r->prev_special = false;
    return rc;
}

/* Raw text pieces that touch are one fragment, as in llama.cpp, where only
 * a matched special token ends a fragment. */
static int add_raw(struct run *r, uint32_t start, uint32_t end) {
    if (end <= start) return SDNPU_OK;
    if (r->raw_pending && r->raw_end == start) {
        r->raw_end = end;
        return SDNPU_OK;
    }
    int rc = flush_raw(r);
    if (rc) return rc;
    r->raw_pending = true;
    r->raw_start = start;
    r->raw_end = end;
    return SDNPU_OK;
}

static int add_special(struct run *r, int32_t id) {
    int rc = flush_raw(r);
    if (rc) return rc;
    r->prev_special = true;
    return emit(r, id);
}

static int push_task(struct run *r, struct task t) {
    if (r->n_task == r->cap_task &&
        sd_tok_grow((void **)&r->task, &r->cap_task, r->n_task + 1, sizeof *r->task))
        return SDNPU_ERR_OOM;
    r->task[r->n_task++] = t;
    return SDNPU_OK;
}

/* Resolve one cluster of overlapping special-token matches, [start, end).
 *
 * llama.cpp (tokenizer_st_partition) takes the special tokens one by one,
 * longest first, and cuts each of its leftmost non-overlapping occurrences
 * out of whatever raw fragments remain. Equivalently: within a raw gap, the
 * first token in that order that occurs anywhere in the gap takes all its
 * leftmost non-overlapping occurrences, and the pieces between them are
 * resolved the same way with the tokens after it. Matches that do not
 * overlap cannot affect each other, so each cluster is resolved alone; the
 * rescans stay inside it. */
static int resolve_cluster(struct run *r, uint32_t start, uint32_t end) {
    const struct sd_vocab *v = r->v;
    const uint8_t *t = (const uint8_t *)r->text;
    const bool *start_tab = r->parse_special ? v->start_any : v->start_ud;
    const int32_t *best_tab = r->parse_special ? v->best_any : v->best_ud;
    int rc;
    r->n_task = 0;
    if ((rc = push_task(r, (struct task){start, end, -1, -1}))) return rc;
    while (r->n_task) {
        struct task tk = r->task[--r->n_task];
        if (tk.token >= 0) {
            if ((rc = add_special(r, tk.token))) return rc;
            continue;
        }
        int32_t best = INT32_MAX;
        uint32_t best_pos = 0;
        for (uint32_t p = tk.start; p < tk.end; p++) {
            if (!start_tab[t[p]]) continue;
            int32_t node = 0;
            for (uint32_t q = p; q < tk.end; q++) {
                node = trie_child(v, node, t[q]);
                if (node < 0) break;
                int32_t rk = best_tab[node];
                if (rk > tk.min_rank && rk < best) {
                    best = rk;
                    best_pos = p;
                }
            }
        }
        if (best == INT32_MAX) {
            if ((rc = add_raw(r, tk.start, tk.end))) return rc;
            continue;
        }
        /* Queue gap, token, gap, token, ..., gap; then reverse so the stack
         * pops them in text order. */
        int32_t id = v->spec[best];
        uint32_t tl;
        const char *tt = piece_text(v, id, &tl);
        size_t base = r->n_task;
        uint32_t cur = tk.start, p = best_pos;
        for (;;) {
            if ((rc = push_task(r, (struct task){cur, p, best, -1}))) return rc;
            if ((rc = push_task(r, (struct task){0, 0, best, id}))) return rc;
            cur = p + tl;
            /* next occurrence in [cur, end) */
            bool found = false;
            for (uint32_t q = cur; q + tl <= tk.end; q++) {
                if (t[q] == (uint8_t)tt[0] && !memcmp(t + q, tt, tl)) {
                    p = q;
                    found = true;
                    break;
                }
            }
            if (!found) break;
        }
        if ((rc = push_task(r, (struct task){cur, tk.end, best, -1}))) return rc;
        for (size_t i = base, j = r->n_task - 1; i < j; i++, j--) {
            struct task x = r->task[i];
            r->task[i] = r->task[j];
            r->task[j] = x;
        }
    }
    return SDNPU_OK;
}

static int partition(struct run *r, uint32_t len) {
    const struct sd_vocab *v = r->v;
    const bool *start_tab = r->parse_special ? v->start_any : v->start_ud;
    const int32_t *best_tab = r->parse_special ? v->best_any : v->best_ud;
    const uint8_t *t = (const uint8_t *)r->text;
    bool any = r->parse_special ? v->n_spec > 0 : v->has_ud;
    if (!any) return add_raw(r, 0, len);
    int rc;
    uint32_t done = 0;       /* text before this is handled */
    uint32_t cs = 0, ce = 0; /* the open cluster, empty if ce == 0 */
    for (uint32_t p = 0; p < len; p++) {
        if (!start_tab[t[p]]) continue;
        int32_t node = 0;
        uint32_t mend = 0;
        for (uint32_t q = p; q < len; q++) {
            node = trie_child(v, node, t[q]);
            if (node < 0) break;
            if (best_tab[node] != INT32_MAX) mend = q + 1;
        }
        if (!mend) continue;
        if (ce && p >= ce) { /* the open cluster cannot grow any more */
            if ((rc = add_raw(r, done, cs)) || (rc = resolve_cluster(r, cs, ce))) return rc;
            done = ce;
            ce = 0;
        }
        if (!ce) {
            cs = p;
            ce = mend;
        } else if (mend > ce) {
            ce = mend;
        }
    }
    if (ce) {
        if ((rc = add_raw(r, done, cs)) || (rc = resolve_cluster(r, cs, ce))) return rc;
        done = ce;
    }
    return add_raw(r, done, len);
}

int sd_tokenize(const struct sd_vocab *v, const char *text, size_t len, unsigned flags, struct sd_tokvec *out,
                struct sd_err *err) {
    if (!v || !out || (!text && len))
        return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "sd_tokenize: NULL argument");
    if (len > MAX_TEXT_BYTES)
        return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "text of %zu bytes is longer than the %zu-byte limit",
                          len, MAX_TEXT_BYTES);
    const size_t n0 = out->n;
    char *owned = NULL;
    size_t bad = sd_utf8_validate(text, len);
    if (bad < len) {
        if (!(flags & SD_TOK_REPLACE_INVALID)) {
            return sd_err_set(err, SDNPU_ERR_INVALID_UTF8, "invalid UTF-8 at byte offset %zu (byte 0x%02x)",
                              bad, (unsigned)(uint8_t)text[bad]);
        }
        size_t rlen = sd_utf8_replaced_len(text, len);
        if (rlen > MAX_TEXT_BYTES)
            return sd_err_set(err, SDNPU_ERR_INVALID_ARG,
                              "text of %zu bytes is longer than the %zu-byte limit", rlen, MAX_TEXT_BYTES);
        owned = sd_malloc(rlen);
        if (!owned) return sd_err_set(err, SDNPU_ERR_OOM, "out of memory tokenizing %zu bytes", len);
        sd_utf8_replace(text, len, owned);
        text = owned;
        len = rlen;
    }

    struct run r;
    memset(&r, 0, sizeof r);
    r.v = v;
    r.out = out;
    r.parse_special = flags & SD_TOK_PARSE_SPECIAL;
    r.prev_special = true; /* the first fragment gets the SPM prefix space */
    r.text = text ? text : "";
    /* The word cache pays for itself on long texts only. */
    if (len >= 4096) {
        uint32_t cap = pow2_at_least(SD_MIN((uint64_t)len / 8, (uint64_t)1 << 16));
        r.wc.slot = sd_calloc(cap, sizeof *r.wc.slot);
        r.wc.mask = cap - 1;
        r.wc.on = r.wc.slot != NULL;
        r.memo = sd_calloc(4096, sizeof *r.memo);
        r.memo_mask = 4095;
    }
    int rc = SDNPU_OK;
    bool add = flags & SD_TOK_ADD_SPECIAL;
    if (add && v->add_bos && v->bos >= 0) rc = emit(&r, v->bos);
    if (!rc && len) rc = partition(&r, (uint32_t)len);
    if (!rc) rc = flush_raw(&r);
    if (!rc && add && v->add_eos && v->eos >= 0) rc = emit(&r, v->eos);

    sd_free(r.s.cpt);
    sd_free(r.s.flags);
    sd_free(r.s.boff);
    sd_free(r.s.words);
    sd_free(r.s.words2);
    sd_free(r.esc);
    sd_free(r.sym);
    sd_free(r.heap);
    sd_free(r.task);
    sd_free(r.memo);
    sd_free(r.wc.slot);
    sd_free(r.wc.ent);
    sd_free(r.wc.text);
    sd_free(r.wc.ids);
    sd_free(owned);
    if (rc) {
        out->n = n0;
        if (rc == SDNPU_ERR_OOM) return sd_err_set(err, rc, "out of memory tokenizing %zu bytes", len);
        return sd_err_set(err, rc, "tokenizing %zu bytes failed: %s", len, sdnpu_status_str(rc));
    }
    return SDNPU_OK;
}

/* ------------------------------------------------------------- decode */

static inline const char *decoded(const struct sd_vocab *v, int32_t id, bool render_special, uint32_t *len,
                                  uint8_t *attr) {
    struct dpiece d = v->dp[id];
    *attr = (uint8_t)d.attr;
    *len = (!render_special && (d.attr & (TA_CONTROL | TA_UNKNOWN))) ? 0 : d.len;
    return v->dec + d.off;
}

int32_t sd_token_to_piece(const struct sd_vocab *v, int32_t id, bool render_special, char *buf, size_t cap) {
    if (!v || id < 0 || id >= v->n_tokens) return 0;
    uint32_t len;
    uint8_t attr;
    const char *p = decoded(v, id, render_special, &len, &attr);
    if (len > cap) return -(int32_t)len;
    if (len) memcpy(buf, p, len);
    return (int32_t)len;
}

int64_t sd_detokenize(const struct sd_vocab *v, const int32_t *ids, size_t n, bool render_special, char *buf,
                      size_t cap) {
    if (!v || (!ids && n)) return 0;
    size_t total = 0;
    /* With add_space_prefix, tokenize put one space before the text and
     * after every special token; take exactly those away again. */
    bool strip = v->add_space_prefix;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= v->n_tokens) continue;
        uint32_t len;
        uint8_t attr;
        const char *p = decoded(v, id, render_special, &len, &attr);
        if (attr & TA_SPECIAL) {
            strip = v->add_space_prefix;
        } else {
            if (strip && len > 0 && p[0] == ' ') p++, len--;
            strip = false;
        }
        if (total + 16 <= cap && len <= 16) {
            /* Most pieces are short: one fixed-size copy (the arena has 16
             * spare bytes at its end, and buf room for them). */
            memcpy(buf + total, p, 16);
        } else if (total + len <= cap && len) {
            memcpy(buf + total, p, len);
        }
        total += len;
    }
    if (total > cap) return -(int64_t)total;
    return (int64_t)total;
}
