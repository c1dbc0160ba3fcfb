/*
 * tok/spm.c - SentencePiece BPE, as llama.cpp's
 * llm_tokenizer_spm_session: spaces become U+2581, then the characters of
 * each word merge pairwise by token score, with byte fallback for what no
 * token covers.
 *
 * Only "llama" vocabularies run it. It is fast because the escaped text is
 * cut before every U+2581 that no token spans (spm_find_blocks in
 * vocab.c finds the exceptions), so each word merges alone and repeats
 * come from the word cache; and because the same short strings, looked up
 * over and over, come from a per-call memo.
 */
#include "tok/tokenizer.h"

#include <string.h>

#include "tok/internal.h"

/* Text -> piece id through the call's memo (struct memo_entry says why). */
static inline int32_t lookup(struct run *r, const char *s, uint32_t n) {
    uint64_t h = sd_tok_hash_bytes(s, n);
    if (!r->memo || n > MEMO_MAX) return sd_tok_map_find_h(r->v, s, n, h);
    struct memo_entry *e = &r->memo[(uint32_t)(h >> 20) & r->memo_mask];
    if (e->hash == h && e->len == n && !memcmp(e->text, s, n)) return e->id;
    int32_t id = sd_tok_map_find_h(r->v, s, n, h);
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
    return sd_tok_heap_push(r, &bg, true);
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
        struct bigram bg = sd_tok_heap_pop(r, true);
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
            if ((rc = sd_tok_emit(r, id))) return rc;
            continue;
        }
        /* Byte fallback. llama.cpp's rev_merge re-segmentation can only
         * apply to a symbol that is not a token, and every merged symbol is
         * a token, so on valid UTF-8 only single characters arrive here. A
         * byte with no token at all becomes UNK (llama.cpp would throw). */
        for (uint32_t k = 0; k < sy->n; k++) {
            int32_t b = v->byte_tok[(uint8_t)e[sy->off + k]];
            if (b < 0) b = v->unk;
            if (b >= 0 && (rc = sd_tok_emit(r, b))) return rc;
        }
    }
    return SDNPU_OK;
}

int sd_tok_spm_fragment(struct run *r, const char *text, size_t len) {
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
        if (i > ws && (rc = sd_tok_cached_word(r, e + ws, i - ws, spm_word))) return rc;
        ws = i;
        i += 2;
    }
    return sd_tok_cached_word(r, e + ws, (uint32_t)elen - ws, spm_word);
}
