/* grammar/grammar.c - a vocabulary's token texts and the mask they give
 * under a JSON state (grammar/grammar.h). */
#include <math.h>
#include <string.h>

#include "grammar/grammar.h"

struct sd_grammar {
    int32_t n_vocab;
    char *bytes;   /* every token's text, one after another */
    uint32_t *off; /* [n_vocab + 1] token i's text: bytes[off[i] .. off[i + 1]) */
    uint8_t *eog;  /* [n_vocab] ends generation */
    uint8_t *text; /* [n_vocab] enum sd_json_text: the token inside a free string */
};

/* Two passes over the vocabulary: the sizes, then the texts. */
static int read_texts(struct sd_grammar *g, sd_piece_fn piece, const void *ud, struct sd_err *err) {
    char small[256];
    size_t total = 0;
    for (int32_t i = 0; i < g->n_vocab; i++) {
        int32_t n = piece(ud, i, small, sizeof small);
        g->off[i] = (uint32_t)total;
        total += (size_t)(n < 0 ? -n : n);
        if (total > UINT32_MAX)
            return sd_err_set(err, SDNPU_ERR_FORMAT, "grammar: the token texts exceed 4 GB");
    }
    g->off[g->n_vocab] = (uint32_t)total;
    g->bytes = sd_malloc(total ? total : 1);
    if (!g->bytes)
        return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for the grammar's %zu token bytes", total);
    for (int32_t i = 0; i < g->n_vocab; i++) {
        size_t len = g->off[i + 1] - g->off[i];
        if (len && piece(ud, i, g->bytes + g->off[i], len) != (int32_t)len)
            return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "grammar: token %d's text changed length", i);
    }
    return SDNPU_OK;
}

int sd_grammar_create(int32_t n_vocab, sd_piece_fn piece, sd_eog_fn eog, const void *ud,
                      struct sd_grammar **out, struct sd_err *err) {
    *out = NULL;
    if (n_vocab <= 0) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "grammar: vocabulary size %d", n_vocab);
    struct sd_grammar *g = sd_calloc(1, sizeof *g);
    if (!g) return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for the grammar");
    g->n_vocab = n_vocab;
    g->off = sd_malloc(((size_t)n_vocab + 1) * sizeof *g->off);
    g->eog = sd_calloc((size_t)n_vocab, 1);
    g->text = sd_malloc((size_t)n_vocab);
    int rc = !g->off || !g->eog || !g->text
                 ? sd_err_set(err, SDNPU_ERR_OOM, "out of memory for the grammar's token table")
                 : read_texts(g, piece, ud, err);
    if (rc) {
        sd_grammar_free(g);
        return rc;
    }
    for (int32_t i = 0; i < n_vocab; i++) {
        g->eog[i] = eog(ud, i);
        g->text[i] = (uint8_t)sd_json_text_class(g->bytes + g->off[i], g->off[i + 1] - g->off[i]);
    }
    *out = g;
    return SDNPU_OK;
}

void sd_grammar_free(struct sd_grammar *g) {
    if (!g) return;
    sd_free(g->bytes);
    sd_free(g->off);
    sd_free(g->eog);
    sd_free(g->text);
    sd_free(g);
}

bool sd_grammar_allows(const struct sd_grammar *g, const struct sd_json *j, int32_t tok) {
    if (tok < 0 || tok >= g->n_vocab) return false;
    if (g->eog[tok]) return sd_json_dead(j) || sd_json_complete(j);
    size_t len = g->off[tok + 1] - g->off[tok];
    if (len == 0 || sd_json_dead(j)) return false;
    struct sd_json t = *j;
    return sd_json_feed(&t, g->bytes + g->off[tok], len);
}

/* Which first bytes the state allows, and which first two: a bit for
 * each pair, so that a token's test is one lookup rather than branches a
 * predictor cannot learn (half of a BPE vocabulary begins with a space,
 * in no order). The second byte is tried after the first FILTER_SLOTS
 * allowed first bytes (at most 256 one-byte feeds each); after any other,
 * every second byte passes and the token is fed. */
#define FILTER_SLOTS 32
struct prefix_filter {
    bool first[256];
    uint64_t pair[256 * 256 / 64]; /* bit (first << 8 | second) */
};

/* Feed t the one byte c. */
static bool feed_one(struct sd_json *t, int c) {
    const char b = (char)c;
    return sd_json_feed(t, &b, 1);
}

static void filter_make(const struct sd_json *j, struct prefix_filter *f) {
    int slots = 0;
    memset(f->pair, 0, sizeof f->pair);
    for (int c = 0; c < 256; c++) {
        struct sd_json t = *j;
        f->first[c] = feed_one(&t, c);
        if (!f->first[c]) continue;
        uint64_t *row = f->pair + 4 * c;
        if (slots == FILTER_SLOTS) {
            memset(row, 0xFF, 4 * sizeof *row);
            continue;
        }
        slots++;
        for (int d = 0; d < 256; d++) {
            struct sd_json u = t;
            row[d / 64] |= (uint64_t)feed_one(&u, d) << (d % 64);
        }
    }
}

/* Whether a text of len bytes may still be allowed. */
static bool filter_passes(const struct prefix_filter *f, const unsigned char *s, size_t len) {
    if (len < 2) return len == 1 && f->first[s[0]];
    const unsigned k = (unsigned)s[0] << 8 | s[1];
    return f->pair[k / 64] >> (k % 64) & 1;
}

/* Token i's verdict after j (not an end token), as sd_grammar_allows gives
 * it, without feeding most tokens whole (Qwen's 151,936 tokens: 1.3-4.7
 * ms a row that way, 0.25-0.51 ms this way; bench/bench_grammar.c): inside
 * a free string (f NULL) the token's class answers unless it closes the
 * string; elsewhere a token whose first two bytes f refuses is refused
 * (most of a vocabulary begins with a letter, or with a space and a
 * letter). The rest are fed. */
static bool may_come(const struct sd_grammar *g, const struct sd_json *j, const struct prefix_filter *f,
                     int32_t i) {
    if (!f)
        return g->text[i] == SD_TEXT_STAYS || (g->text[i] == SD_TEXT_LEAVES && sd_grammar_allows(g, j, i));
    return filter_passes(f, (const unsigned char *)g->bytes + g->off[i], g->off[i + 1] - g->off[i]) &&
           sd_grammar_allows(g, j, i);
}

/* Every token but the end tokens masked by may_come; how many were kept.
 * Called with f NULL and with a filter, so that each call site's loop is
 * compiled for its own case (the test of f leaves the loop). */
static int32_t mask_tokens(const struct sd_grammar *g, const struct sd_json *j, const struct prefix_filter *f,
                           float *logits) {
    int32_t kept = 0;
    for (int32_t i = 0; i < g->n_vocab; i++) {
        if (g->eog[i]) continue;
        if (may_come(g, j, f, i))
            kept++;
        else
            logits[i] = -INFINITY;
    }
    return kept;
}

void sd_grammar_mask(const struct sd_grammar *g, const struct sd_json *j, float *logits) {
    struct prefix_filter filter;
    int32_t kept;
    if (sd_json_free_text(j)) {
        kept = mask_tokens(g, j, NULL, logits);
    } else {
        filter_make(j, &filter);
        kept = mask_tokens(g, j, &filter, logits);
    }
    /* The end may come where the object is complete, or where nothing
     * else can. */
    const bool end = sd_json_dead(j) || sd_json_complete(j) || kept == 0;
    for (int32_t i = 0; i < g->n_vocab; i++)
        if (g->eog[i] && !end) logits[i] = -INFINITY;
}

/* Trying the best tokens one by one finds the answer in a few tries when
 * the model already writes JSON; past that, one pass masks them all. */
#define ARGMAX_TRIES 16

int32_t sd_grammar_argmax(const struct sd_grammar *g, const struct sd_json *j, float *logits) {
    for (int32_t t = 0; t < ARGMAX_TRIES; t++) {
        int32_t best = sd_amax_of(logits, g->n_vocab);
        if (logits[best] == -INFINITY) break;
        if (sd_grammar_allows(g, j, best)) return best;
        logits[best] = -INFINITY;
    }
    sd_grammar_mask(g, j, logits);
    return sd_amax_of(logits, g->n_vocab);
}

bool sd_grammar_advance(const struct sd_grammar *g, struct sd_json *j, int32_t tok) {
    if (!sd_grammar_allows(g, j, tok)) {
        sd_json_kill(j);
        return false;
    }
    if (!g->eog[tok]) sd_json_feed(j, g->bytes + g->off[tok], g->off[tok + 1] - g->off[tok]);
    return true;
}
