/*
 * tok/internal.h - pieces the tokenizer files share: Unicode category
 * flags, the GPT-2 byte-to-unicode map and the BPE pre-tokenizers; the
 * vocabulary's layout and the state of one tokenize call, which every file
 * of the tokenizer reads; and the few functions that cross from one of its
 * files to another (sd_tok_*). Private to the files of tok/.
 */
#ifndef SD_TOK_INTERNAL_H
#define SD_TOK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/base.h"
#include "tok/tokenizer.h"

/* --------------------------------------------------------- categories */

/* Code point flags, bit-compatible with llama.cpp's unicode_cpt_flags so the
 * pre-tokenizers read like their reference. Every valid code point has at
 * least one category bit, so flags == 0 means "outside the text". */
enum {
    SD_CPT_UNDEFINED = 0x0001,   /* Cn */
    SD_CPT_NUMBER = 0x0002,      /* \p{N} */
    SD_CPT_LETTER = 0x0004,      /* \p{L} */
    SD_CPT_SEPARATOR = 0x0008,   /* \p{Z} */
    SD_CPT_ACCENT_MARK = 0x0010, /* \p{M} */
    SD_CPT_PUNCTUATION = 0x0020, /* \p{P} */
    SD_CPT_SYMBOL = 0x0040,      /* \p{S} */
    SD_CPT_CONTROL = 0x0080,     /* \p{C} except Cn */
    SD_CPT_WHITESPACE = 0x0100   /* \s: the Unicode White_Space property */
};

uint16_t sd_cpt_flags(uint32_t cp);

/* ------------------------------------------------------ pre-tokenizers */

enum sd_pretok {
    SD_PRETOK_GPT2 = 1,
    SD_PRETOK_LLAMA3,
    SD_PRETOK_QWEN2,
    SD_PRETOK_QWEN35,
    SD_PRETOK_REGEX /* a PCRE2 expression */
};

/* Growable scratch owned by one tokenize call. */
struct sd_tok_scratch {
    uint32_t *cpt;   /* [n_cpt] code points of the current fragment */
    uint16_t *flags; /* [n_cpt] their sd_cpt_flags */
    uint32_t *boff;  /* [n_cpt + 1] byte offset of each code point */
    size_t cap_cpt;
    uint32_t *words; /* [n_words] byte offset where each word ends */
    size_t n_words, cap_words;
    uint32_t *words2; /* second buffer for chained regexes */
    size_t cap_words2;
};

/* Ensure *p (elements of size elem) holds at least need elements. */
int sd_tok_grow(void **p, size_t *cap, size_t need, size_t elem);

/* A pre-tokenizer: a list of expressions applied in turn. Expressions that
 * llama.cpp runs through a hand-written splitter (GPT-2, Llama 3, Qwen2,
 * Qwen3.5) run through the same state machine here; the rest through PCRE2. */
struct sd_regex_list;
int sd_regex_list_create(const char *const *exprs, int n, struct sd_regex_list **out, struct sd_err *err);
void sd_regex_list_free(struct sd_regex_list *rl);
/* Split text[0..len) (valid UTF-8, len < 2^32) like llama.cpp's
 * unicode_regex_split: each expression cuts every current segment into its
 * matches and the gaps between them. The word ends (byte offsets) land in
 * s->words[0..s->n_words). Thread-safe: rl is only read. */
int sd_regex_list_split(const struct sd_regex_list *rl, const char *text, size_t len,
                        struct sd_tok_scratch *s);

/* ------------------------------------------------------- the vocabulary */

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

/* Hashing: the piece map, the word cache and the SPM memo hash texts with
 * sd_tok_hash_bytes; the merge map and the trie hash integer keys with
 * sd_tok_mix64. */

static inline uint64_t sd_tok_hash_bytes(const char *s, size_t n) {
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

static inline uint64_t sd_tok_mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDull;
    x ^= x >> 33;
    x *= 0xC4CEB9FE1A85EC53ull;
    x ^= x >> 33;
    return x;
}

static inline uint32_t sd_tok_pow2_at_least(uint64_t n) {
    uint64_t c = 16;
    while (c < n)
        c <<= 1;
    return (uint32_t)c;
}

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

static inline const char *sd_tok_piece_text(const struct sd_vocab *v, int32_t id, uint32_t *len) {
    *len = v->poff[id + 1] - v->poff[id] - 1;
    return v->ptext + v->poff[id];
}

/* The piece id of text s[0..n) (a token or, for BPE, a merge part), -1 if
 * none; h is sd_tok_hash_bytes(s, n). In vocab.c. */
int32_t sd_tok_map_find_h(const struct sd_vocab *v, const char *s, size_t n, uint64_t h);
int32_t sd_tok_map_find(const struct sd_vocab *v, const char *s, size_t n);

/* File the rule l + r -> result (rank: its place in the file) at load. In bpe.c, beside the
 * merge loop that is the map's only reader. */
void sd_tok_merge_put(struct sd_vocab *v, int32_t l, int32_t r, int32_t rank, int32_t result);

/* Build the special tokens' matching order and trie at load. In
 * special.c, beside the partition that is their only reader. */
int sd_tok_build_specials(struct sd_vocab *v);

/* Work out the bytes each token decodes to, into one arena (v->dec, v->dp)
 * at load. In decode.c, beside the decoders that only copy from it. */
int sd_tok_build_decoded(struct sd_vocab *v);

/* The GPT-2 byte-to-unicode map: printable Latin-1 bytes stand for
 * themselves, the rest for U+0100 upwards in byte order. In bpe.c. */
void sd_tok_gpt2_byte_map(uint32_t map[256]);

/* A tokenizer.ggml.pre value: the pre-tokenizer's expressions, and whether
 * llama.cpp ignores merges (a whole word that is a token is taken as is)
 * or adds BOS for it. */
struct sd_tok_pre {
    const char *name;
    const char *const *exprs;
    int n_exprs;
    unsigned flags;
};
enum { PRE_IGNORE_MERGES = 1, PRE_ADD_BOS = 2 };

/* The pre-tokenizer named name, NULL if llama.cpp knows none by it; and the
 * marks llama.cpp gives tokens by their texts (EOT, EOM, FIM, EOG, control),
 * set once the file's own ids and types are read. In names.c. */
const struct sd_tok_pre *sd_tok_pre_find(const char *name);
void sd_tok_mark_by_name(struct sd_vocab *v);

/* ------------------------------------------------- one tokenize call */

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

static inline int sd_tok_emit(struct run *r, int32_t id) {
    struct sd_tokvec *o = r->out;
    if (o->n == o->cap && sd_tok_grow((void **)&o->ids, &o->cap, o->n + 1, sizeof *o->ids))
        return SDNPU_ERR_OOM;
    o->ids[o->n++] = id;
    return SDNPU_OK;
}

/* ---- the merge queue
 *
 * A binary heap of candidate merges (spm: by score, else by rank) that the
 * merge loops of spm.c and bpe.c push and pop for every pair. It is here,
 * static inline, and not in a file of its own, because a call into another
 * file for each pair made SPM encoding measurably slower: the heap's work
 * per pair is small beside a call (see docs/benchmarks.md). */

static inline bool sd_tok_spm_before(const struct bigram *a, const struct bigram *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}
static inline bool sd_tok_bpe_before(const struct bigram *a, const struct bigram *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static inline int sd_tok_heap_push(struct run *r, const struct bigram *bg, bool spm) {
    if (r->n_heap == r->cap_heap &&
        sd_tok_grow((void **)&r->heap, &r->cap_heap, r->n_heap + 1, sizeof *r->heap))
        return SDNPU_ERR_OOM;
    size_t i = r->n_heap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!(spm ? sd_tok_spm_before(bg, &r->heap[p]) : sd_tok_bpe_before(bg, &r->heap[p]))) break;
        r->heap[i] = r->heap[p];
        i = p;
    }
    r->heap[i] = *bg;
    return SDNPU_OK;
}

static inline struct bigram sd_tok_heap_pop(struct run *r, bool spm) {
    struct bigram top = r->heap[0];
    struct bigram last = r->heap[--r->n_heap];
    size_t n = r->n_heap, i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && (spm ? sd_tok_spm_before(&r->heap[c + 1], &r->heap[c])
                              : sd_tok_bpe_before(&r->heap[c + 1], &r->heap[c])))
            c++;
        if (!(spm ? sd_tok_spm_before(&r->heap[c], &last) : sd_tok_bpe_before(&r->heap[c], &last))) break;
        r->heap[i] = r->heap[c];
        i = c;
    }
    if (n) r->heap[i] = last;
    return top;
}

/* Tokenize the word w[0..len) with fn, or copy its ids from the call's word
 * cache, which SPM and BPE both use. In wordcache.c. */
int sd_tok_cached_word(struct run *r, const char *w, uint32_t len,
                       int (*fn)(struct run *, const char *, uint32_t));

/* Tokenize one raw fragment (no special tokens in it): spm.c and bpe.c. */
int sd_tok_spm_fragment(struct run *r, const char *text, size_t len);
int sd_tok_bpe_fragment(struct run *r, const char *text, size_t len);

/* Split the whole text into special tokens and raw fragments (special.c),
 * handing each fragment to sd_tok_flush_raw (tokenizer.c), which runs the
 * vocabulary's algorithm on it. */
int sd_tok_partition(struct run *r, uint32_t len);
int sd_tok_flush_raw(struct run *r);

#endif /* SD_TOK_INTERNAL_H */
