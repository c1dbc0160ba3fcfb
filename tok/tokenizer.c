/*
 * tok/tokenizer.c - the tokenizer's entry: sd_tokenize, which checks the
 * text, sets up one call's scratch and hands fragments to SPM or BPE.
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
 *
 * The tokenizer is split by idea; internal.h holds what they share:
 *   vocab.c      the piece map and loading from GGUF (+ the queries)
 *   names.c      what llama.cpp knows by name: pre-tokenizers, EOG/FIM texts
 *   special.c    the special-token trie and the partition of input text
 *   spm.c        SentencePiece merges by score
 *   bpe.c        byte-level BPE merges by rank, the merge map, GPT-2 bytes
 *   wordcache.c  the word cache SPM and BPE share
 *   decode.c     token ids back to text (and the decoded pieces, at load)
 *   pretok.c     the BPE pre-tokenizers
 *   unicode.c    Unicode categories (UTF-8 itself is base/'s)
 */
#include "tok/tokenizer.h"

#include <string.h>

#include "tok/internal.h"

/* ---------------------------------------------------------- tokenize */

/* A raw fragment is done once the next special token (or the end of the
 * text) is reached; the vocabulary's algorithm takes it from here. */
int sd_tok_flush_raw(struct run *r) {
    if (!r->raw_pending) return SDNPU_OK;
    r->raw_pending = false;
    const char *t = r->text + r->raw_start;
    size_t len = r->raw_end - r->raw_start;
    int rc = r->v->kind == SD_VOCAB_SPM ? sd_tok_spm_fragment(r, t, len) : sd_tok_bpe_fragment(r, t, len);
    r->prev_special = false;
    return rc;
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
        uint32_t cap = sd_tok_pow2_at_least(SD_MIN((uint64_t)len / 8, (uint64_t)1 << 16));
        r.wc.slot = sd_calloc(cap, sizeof *r.wc.slot);
        r.wc.mask = cap - 1;
        r.wc.on = r.wc.slot != NULL;
        r.memo = sd_calloc(4096, sizeof *r.memo);
        r.memo_mask = 4095;
    }
    int rc = SDNPU_OK;
    bool add = flags & SD_TOK_ADD_SPECIAL;
    if (add && v->add_bos && v->bos >= 0) rc = sd_tok_emit(&r, v->bos);
    if (!rc && len) rc = sd_tok_partition(&r, (uint32_t)len);
    if (!rc) rc = sd_tok_flush_raw(&r);
    if (!rc && add && v->add_eos && v->eos >= 0) rc = sd_tok_emit(&r, v->eos);

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

void sd_tokvec_free(struct sd_tokvec *tv) {
    if (!tv) return;
    sd_free(tv->ids);
    tv->ids = NULL;
    tv->n = tv->cap = 0;
}
