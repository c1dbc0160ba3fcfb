/*
 * draft/draft.h - retrieval drafters for speculative decoding: the suffix
 * automaton store, the draft tree handed to the verifier, and the drafters
 * (pld, sam, sam-tree) behind one vtable.
 *
 * How the pieces fit (DESIGN.md item 2, paper sections 2.2 and 3.1):
 *
 *   context tokens --> sd_sam (context store, frozen after prefill)
 *   history file   --> sd_sam (history store, built once, shared read-only)
 *   earlier replies --> sd_sam (replies store: the session's own answers to
 *                      earlier requests, read-only during a request)
 *   calibration    --> sd_sam (calibrated sequences, shared read-only)
 *   output tokens  --> sd_sam (output store, grows by one token per accept)
 *
 * A drafter keeps one matching cursor per store: the longest suffix of the
 * generated text (context + output) that occurs in that store, advanced in
 * amortized O(1) per token. A draft step reads the continuation after the
 * longest match (the main path) and, for sam-tree, adds siblings from the
 * other occurrences and the other stores.
 *
 * Threading: nothing here locks. A drafter and the stores it owns belong to
 * one thread (the decoding loop). A store attached with sd_drafter_attach is
 * only read, so one frozen history store can serve several drafters at once.
 *
 * Memory: every allocation goes through the sd_malloc hook. Sizes are
 * reserved at create time from a hint, so the token loop does not allocate
 * unless the hint was too small (then storage doubles, amortized O(1)).
 */
#ifndef SD_DRAFT_H
#define SD_DRAFT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

/* ======================================================= suffix automaton */

/*
 * The suffix automaton (SAM) of a token text: the smallest automaton whose
 * paths from the root spell exactly the substrings of the text. Each state
 * is a class of substrings with the same set of end positions (endpos); len
 * is the longest string in the class, the suffix link points to the class of
 * the longest suffix that is in another class.
 *
 * Built online (Blumer et al.; the generalized form, so a text may hold
 * several records): amortized O(1) states and edge updates per token.
 * Transitions live in one open-addressing hash table keyed by (state, token),
 * because vocabularies are 262,144 wide and dense rows would cost 1 MiB per
 * state; each state also keeps a list of its edges so they can be listed.
 *
 * Separators: a negative token (SD_SAM_SEP) is stored in the text but gets
 * no transition, so no match ever crosses it. The history store puts one
 * after each record.
 *
 * End positions, counts and recency. first_end (the end of the first
 * occurrence) is exact online: it never changes once a state exists.
 * last_end, cont_end and count are exact only after sd_sam_freeze(), which
 * sums them up the suffix-link tree in one O(states) pass (counting sort by
 * len). Keeping them exact online would cost a walk up the suffix-link path
 * per token, Theta(n) per token on repetitive text (a^n), so:
 *   - the context, history and calibration stores are static during a
 *     request and are frozen once;
 *   - the output store grows, is never frozen, and ranks by recency only:
 *     count reads 0 and last_end is the most recent end position recorded
 *     when the state was created or became the end of the text (a real end
 *     position, maybe not the newest). first_end stays exact.
 * Appending to a frozen automaton unfreezes it (the sums would be stale).
 */

#define SD_SAM_SEP ((int32_t)-1)

struct sd_sam;

/* A matching cursor: the state holding the longest suffix of the text read
 * so far that occurs in the store, and that suffix's length. The state is
 * 0 (the root) and len 0 when nothing matches. */
struct sd_sam_cursor {
    int32_t state;
    int32_t len;
};

/* Create an empty automaton with room for n_tokens_hint tokens (0 is fine).
 * Returns SDNPU_OK or SDNPU_ERR_OOM; *out is NULL on failure. */
int sd_sam_create(size_t n_tokens_hint, struct sd_sam **out, struct sd_err *err);
void sd_sam_free(struct sd_sam *s); /* NULL is fine */
/* Forget the text; capacity is kept (no allocation). */
void sd_sam_clear(struct sd_sam *s);
/* Make room for n_tokens more tokens, so appends up to then do not allocate
 * (except on pathological edge counts). SDNPU_ERR_OOM leaves s unchanged. */
int sd_sam_reserve(struct sd_sam *s, size_t n_tokens, struct sd_err *err);

/* Append one token (SD_SAM_SEP or any negative value: a separator).
 * track (may be NULL) is a cursor into this automaton that must stay valid:
 * if the append splits its state, it is moved to the new state. Returns
 * SDNPU_OK, SDNPU_ERR_OOM (s unchanged, still consistent) or
 * SDNPU_ERR_CONTEXT_FULL (more than INT32_MAX-1 tokens). */
int sd_sam_append(struct sd_sam *s, int32_t tok, struct sd_sam_cursor *track, struct sd_err *err);
/* Append n tokens; on failure the first k < n are in (s stays consistent). */
int sd_sam_append_n(struct sd_sam *s, const int32_t *tok, size_t n, struct sd_err *err);
/* Append one record: n tokens and a separator after them, so no match
 * crosses into the next record (the history and replies stores). On
 * failure the record may be partly in (s stays consistent). */
int sd_sam_append_record(struct sd_sam *s, const int32_t *tok, size_t n, struct sd_err *err);
/* Compute exact count, last_end and cont_end for every state. O(states).
 * SDNPU_ERR_OOM leaves s unfrozen and otherwise unchanged. */
int sd_sam_freeze(struct sd_sam *s, struct sd_err *err);
bool sd_sam_frozen(const struct sd_sam *s);

size_t sd_sam_n_tokens(const struct sd_sam *s);
const int32_t *sd_sam_text(const struct sd_sam *s); /* [n_tokens], separators included */
size_t sd_sam_n_states(const struct sd_sam *s);     /* root included */
size_t sd_sam_n_edges(const struct sd_sam *s);
size_t sd_sam_memory(const struct sd_sam *s); /* bytes held */

/* State queries. st must be in [0, n_states); 0 is the root. */
int32_t sd_sam_len(const struct sd_sam *s, int32_t st);
int32_t sd_sam_link(const struct sd_sam *s, int32_t st); /* -1 for the root */
/* The state reached from st by tok, or -1. O(1) expected. */
int32_t sd_sam_next(const struct sd_sam *s, int32_t st, int32_t tok);
int32_t sd_sam_degree(const struct sd_sam *s, int32_t st); /* outgoing edges */
int32_t sd_sam_first_end(const struct sd_sam *s, int32_t st);
int32_t sd_sam_last_end(const struct sd_sam *s, int32_t st);
/* Number of end positions (occurrences); 0 when not frozen. */
int32_t sd_sam_count(const struct sd_sam *s, int32_t st);
/* An end position e of st's strings that has a continuation (e+1 < n_tokens
 * and text[e+1] is not a separator), preferring the most recent; -1 if none.
 * Frozen: the exact most recent one. Not frozen: last_end, else first_end,
 * whichever has a continuation. */
int32_t sd_sam_cont_end(const struct sd_sam *s, int32_t st);
/* Copy up to max tokens that follow end position e, stopping at a separator
 * or the end of the text. Returns the number copied. */
int32_t sd_sam_continuation(const struct sd_sam *s, int32_t e, int32_t *out, int32_t max);

/* The end-position index, for choosing among a state's occurrences by
 * where they are (the context store's; O(states + tokens) time, three
 * int32 per state and token of memory, so the large history store goes
 * without). A later append makes it stale until built again. */
int sd_sam_index_ends(struct sd_sam *s, struct sd_err *err);
bool sd_sam_indexed(const struct sd_sam *s);
/* The first end position >= pos of st's strings that has a continuation,
 * or -1 (also when the index is stale or was not built). O(count of st). */
int32_t sd_sam_end_from(const struct sd_sam *s, int32_t st, int32_t pos);

/* The k best successors of st (distinct next tokens after its strings),
 * ranked by count (descending; all 0 when not frozen), then recency
 * (last_end of the target, descending), then token id. Tokens equal to
 * `exclude` are skipped (pass SD_SAM_SEP to skip none). Writes tok[i] and
 * to[i] (the target state); returns how many, <= k. O(degree * k). */
int32_t sd_sam_top_edges(const struct sd_sam *s, int32_t st, int32_t k, int32_t exclude, int32_t *tok,
                         int32_t *to);

/* Cursor: matching statistics. advance() reads one token of the generated
 * text: follow suffix links until the token extends the match. Amortized
 * O(1) per token (len grows by at most 1 per call). A separator resets it. */
void sd_sam_cursor_reset(struct sd_sam_cursor *c);
void sd_sam_cursor_advance(const struct sd_sam *s, struct sd_sam_cursor *c, int32_t tok);

/* ============================================================ draft tree */

/* Drafts deeper than this are cut to it (scratch buffers are fixed at
 * create time, so drafting never allocates). */
#define SD_DRAFT_MAX_DEPTH 256

/* Drafting knobs. budget counts draft nodes only: a verifier whose static
 * graph holds L rows including the root (the last accepted token) passes
 * budget = L - 1. max_depth beyond SD_DRAFT_MAX_DEPTH is cut to it. */
struct sd_draft_params {
    int32_t max_depth;     /* longest root-to-leaf path (16) */
    int32_t max_branch;    /* most children per node, root included (4) */
    int32_t budget;        /* most nodes in the tree (32) */
    int32_t branch_levels; /* main-path levels that get siblings, root = level 0 (3) */
    int32_t min_match;     /* shortest matched suffix worth drafting from (1) */
    int32_t pld_max_ngram; /* pld tries n-grams from this length ... (3) */
    int32_t pld_min_ngram; /* ... down to this one (1) */
    /* Where calibrated sequences (SD_DRAFT_STORE_CALIB) stand among the
     * stores. calib_lead -1: after every other store, whatever the match
     * (the default: measured on the datasets, a calibrated sequence that
     * displaces a context match is accepted less often; see
     * docs/benchmarks-stages.md); 0: by match length, losing ties; N > 0:
     * first once the match is N long.
     * sam-tree adds the calibrated continuation as a side branch whatever
     * the rank. A calibrated candidate needs a match of calib_min_match. */
    int32_t calib_min_match; /* (2) */
    int32_t calib_lead;      /* (-1) */
    /* Which occurrence of the matched suffix the context store drafts
     * from. follow (true): the first at or after the place in the context
     * that the last accepted draft was copied from, so a summary that
     * works through a document drafts from where it is; the most recent
     * one when there is none after it. false: always the most recent.
     * Measured in docs/acceptance.md ("Which occurrence, and earlier replies"). */
    bool follow;
};
struct sd_draft_params sd_draft_default_params(void);

/* Where a path's tokens came from. The order is the tie-break for equally
 * long matches: calibrated sequences are model-aligned, the context is the
 * request's own text, the output repeats itself, history is the user's,
 * and the replies (what the model answered to this session's earlier
 * requests: its own phrasing and formats, e.g. a UI agent's actions) are
 * about other requests. */
enum sd_draft_store {
    SD_DRAFT_STORE_CALIB = 0,
    SD_DRAFT_STORE_CONTEXT = 1,
    SD_DRAFT_STORE_OUTPUT = 2,
    SD_DRAFT_STORE_HISTORY = 3,
    SD_DRAFT_STORE_REPLIES = 4,
    SD_DRAFT_STORE_COUNT = 5,
    SD_DRAFT_STORE_NONE = -1,
};

/*
 * The draft tree handed to the verifier. The root is the last accepted
 * token and is not stored. Node i holds tok[i]; parent[i] < i, or -1 for a
 * child of the root, so parents always precede children and the nodes can
 * be laid out as batch rows in index order. depth[i] is 1 for the root's
 * children (the position offset after the root). Siblings have distinct
 * tokens. Nodes 0 .. n_main-1 are the main path (a chain: parent[i] = i-1),
 * the continuation of the longest match, so a linear verifier can use just
 * them.
 */
struct sd_draft_tree {
    int32_t n;       /* nodes in use */
    int32_t cap;     /* array capacity */
    int32_t n_main;  /* length of the main path */
    int32_t *tok;    /* [cap] */
    int32_t *parent; /* [cap] */
    int32_t *depth;  /* [cap] */
    /* Private links for merging chains: first child and next sibling of each
     * node, and the root's first child; -1 for none. */
    int32_t *first_child;  /* [cap] */
    int32_t *next_sibling; /* [cap] */
    int32_t root_child;
    /* What the main path came from (for stats): store and matched length. */
    int32_t main_store; /* enum sd_draft_store, or SD_DRAFT_STORE_NONE */
    int32_t main_match;
};

/* Allocate arrays for cap nodes (cap >= 1). SDNPU_ERR_OOM leaves t zeroed. */
int sd_draft_tree_init(struct sd_draft_tree *t, int32_t cap, struct sd_err *err);
void sd_draft_tree_free(struct sd_draft_tree *t); /* t zeroed; a zeroed t is fine */
void sd_draft_tree_clear(struct sd_draft_tree *t);
/* The child of `parent` (-1: the root) holding tok, or -1. */
int32_t sd_draft_tree_child(const struct sd_draft_tree *t, int32_t parent, int32_t tok);
int32_t sd_draft_tree_n_children(const struct sd_draft_tree *t, int32_t parent);
/* The child of parent holding tok: the existing one, or a new node. -1 when
 * a new node would break the budget (min of p->budget and cap), the depth
 * limit or the branching limit. */
int32_t sd_draft_tree_add(struct sd_draft_tree *t, int32_t parent, int32_t tok,
                          const struct sd_draft_params *p);
/* Add the chain tok[0..n) under parent, sharing any existing prefix. Stops
 * at the first token that does not fit. Returns how many of the n tokens
 * are on the tree afterwards (shared or new). */
int32_t sd_draft_tree_add_chain(struct sd_draft_tree *t, int32_t parent, const int32_t *tok, int32_t n,
                                const struct sd_draft_params *p);
/* Check the invariants above against p (p may be NULL: structure only).
 * SDNPU_OK, or SDNPU_ERR_STATE with a message naming the broken node. */
int sd_draft_tree_validate(const struct sd_draft_tree *t, const struct sd_draft_params *p,
                           struct sd_err *err);

/* ================================================================ pld */

/* Prompt lookup decoding (Saxena 2023): for n from max_ngram down to
 * min_ngram, find the most recent earlier occurrence of the text's last n
 * tokens and copy up to max tokens that followed it (the copy may run into
 * the n-gram itself, as LZ77 copies do). Returns the number copied (0: no
 * n-gram recurs) and sets *ngram (may be NULL) to the n that matched.
 * O(n_text * max_ngram) per call: the baseline the automata are measured
 * against. */
int32_t sd_pld_lookup(const int32_t *text, size_t n_text, int32_t max_ngram, int32_t min_ngram, int32_t *out,
                      int32_t max, int32_t *ngram);

/* ============================================================== drafters */

struct sd_drafter;

/*
 * The drafter interface the decoding loop sees. Per request:
 *   reset; observe_context (once or more, prompt and documents in order);
 *   then per step: draft, verify (elsewhere), observe_output per accepted
 *   token. Every function returns SDNPU_OK or a negative status and fills
 *   err; after a failure the drafter is still valid, the failed token
 *   unobserved (drafts may be worse until reset, never wrong).
 */
struct sd_drafter_i {
    const char *name;
    int (*reset)(struct sd_drafter *self, struct sd_err *err);
    int (*observe_context)(struct sd_drafter *self, const int32_t *tok, size_t n, struct sd_err *err);
    int (*observe_output)(struct sd_drafter *self, int32_t tok, struct sd_err *err);
    /* Fill out (cleared first). An empty tree (n = 0) is a valid answer. */
    int (*draft)(struct sd_drafter *self, const struct sd_draft_params *p, struct sd_draft_tree *out,
                 struct sd_err *err);
    /* Attach a read-only store (history, replies or calibration; NULL detaches).
     * The drafter borrows it: it must outlive the drafter or the next
     * attach. pld takes the calibration store only; a store a drafter does
     * not search is refused with SDNPU_ERR_UNSUPPORTED. */
    int (*attach)(struct sd_drafter *self, enum sd_draft_store which, const struct sd_sam *sam,
                  struct sd_err *err);
    void (*destroy)(struct sd_drafter *self);
};

/* The base every drafter starts with. */
struct sd_drafter {
    const struct sd_drafter_i *vt;
};

/* Create a drafter by name: "pld" (prompt lookup), "sam" (suffix automata,
 * linear draft), "sam-tree" (suffix automata, draft tree). n_tokens_hint is
 * the expected context + output length, reserved up front. Returns
 * SDNPU_ERR_NOT_FOUND for an unknown name, SDNPU_ERR_OOM. */
int sd_drafter_create(const char *name, size_t n_tokens_hint, struct sd_drafter **out, struct sd_err *err);
void sd_drafter_free(struct sd_drafter *d); /* NULL is fine */
const char *sd_drafter_name(const struct sd_drafter *d);

/* Thin wrappers over the vtable, so call sites read as verbs. */
int sd_drafter_reset(struct sd_drafter *d, struct sd_err *err);
/* SDNPU_ERR_STATE once output has been observed (context comes first). */
int sd_drafter_observe_context(struct sd_drafter *d, const int32_t *tok, size_t n, struct sd_err *err);
int sd_drafter_observe_output(struct sd_drafter *d, int32_t tok, struct sd_err *err);
int sd_drafter_draft(struct sd_drafter *d, const struct sd_draft_params *p, struct sd_draft_tree *out,
                     struct sd_err *err);
/* which is SD_DRAFT_STORE_HISTORY, _REPLIES or _CALIB. Attaching after
 * context was observed re-reads the last 256 generated tokens into the new
 * store's cursor. The store should be frozen (ranking by count needs it). */
int sd_drafter_attach(struct sd_drafter *d, enum sd_draft_store which, const struct sd_sam *sam,
                      struct sd_err *err);

#endif /* SD_DRAFT_H */
