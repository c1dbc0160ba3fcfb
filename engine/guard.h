/*
 * engine/guard.h - the degeneration guard: when the output starts repeating
 * itself. A session's own affair: it watches emitted text.
 */
#ifndef SD_GUARD_H
#define SD_GUARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"


/*
 * A small base model under greedy decoding falls into loops: "It is a free
 * operating system." thirty times, or one line of a list again and again.
 * The guard watches the output as it is emitted and says when it starts
 * repeating itself:
 *   - a sentence equal to an earlier sentence of the same output, compared
 *     with runs of whitespace collapsed, if it has SD_GUARD_MIN_SENTENCE
 *     characters or more ("Yes." twice is no loop). A sentence ends at a
 *     newline, or at a token ending in '.', '!' or '?' (closing quotes and
 *     brackets aside) when the next token starts with whitespace, so "2.36"
 *     and "e.g.," do not end one;
 *   - a loop without sentence ends: the last SD_GUARD_NGRAM tokens already
 *     occurred in the output.
 * Whole sentences catch the loops seen here (each repeats a sentence or a
 * line within a few dozen tokens) and never fire on an output that merely
 * says similar things twice; the n-gram rule catches what has no
 * punctuation ("the the the ...", a cycle of list items run together), and
 * 16 tokens (about 12 words) identical twice in one short answer is not
 * something a summary or a reply does on purpose. The prompt is not
 * watched: quoting a document is what a summary does.
 *
 * Both rules are functions of the output's prefix, decided token by token
 * in output order, so every decoding method stops at the same token:
 * speculative decoding stays lossless. The guard also keeps the last
 * sentence boundary, so the caller can hold back the sentence in progress
 * and drop a repeated one whole. It allocates at reset (from a size hint)
 * and only when an output outgrows it.
 */
#define SD_GUARD_NGRAM 16
#define SD_GUARD_MIN_SENTENCE 12

struct sd_guard {
    int32_t *tok;          /* [cap] the output's tokens */
    size_t n_tok, cap;
    uint64_t *ngram;       /* [ngram_cap] open addressing: hash of SD_GUARD_NGRAM tokens (0: empty) */
    int32_t *ngram_end;    /* [ngram_cap] where that n-gram ended */
    uint64_t *sent;        /* [sent_cap] open addressing: hashes of finished sentences (0: empty) */
    size_t ngram_cap, sent_cap, n_ngram, n_sent;
    size_t n_bytes;        /* output bytes pushed */
    size_t kept_tok;       /* tokens up to the last sentence boundary */
    size_t kept_bytes;     /* bytes up to it */
    uint64_t sent_hash;    /* the sentence in progress, whitespace collapsed */
    size_t sent_len;
    bool sent_space;       /* a whitespace run waits to be hashed as one space */
    bool pending_end;      /* the last token ended in . ! ? */
};

/* Make g empty with room for n_hint output tokens. SDNPU_ERR_OOM leaves it
 * freeable. A zeroed struct is a valid argument. */
int sd_guard_reset(struct sd_guard *g, size_t n_hint, struct sd_err *err);
void sd_guard_free(struct sd_guard *g); /* zeroes g */
/* Push the next output token and its text. *repeats is set when the output
 * now repeats itself; the caller then keeps the output up to kept_tok
 * tokens and kept_bytes bytes. SDNPU_ERR_OOM (nothing pushed) when the
 * output outgrew the hint and growing failed. */
int sd_guard_push(struct sd_guard *g, int32_t tok, const char *piece, size_t len, bool *repeats,
                  struct sd_err *err);

#endif
