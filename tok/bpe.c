/*
 * tok/bpe.c - byte-level BPE, as llama.cpp's
 * llm_tokenizer_bpe_session: the pre-tokenizer's words (pretok.c) merge
 * pairwise by rank over GPT-2-encoded bytes; and the merge map the ranks
 * come from.
 *
 * The merge map is here and not with the piece map because this loop is
 * its only reader: rules are filed at load (sd_tok_merge_put) and looked up
 * by a pair of integer piece ids, never by text.
 */
#include "tok/tokenizer.h"

#include <string.h>

#include "tok/internal.h"

/* ------------------------------------------------ GPT-2 byte map */

/* The GPT-2 byte-to-unicode map: printable Latin-1 bytes stand for
 * themselves, the rest for U+0100 upwards in byte order. */
void sd_tok_gpt2_byte_map(uint32_t map[256]) {
    int n = 0;
    for (int b = 0; b < 256; b++) {
        bool self = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        map[b] = self ? (uint32_t)b : (uint32_t)(256 + n++);
    }
}

/* ------------------------------------------------------- BPE merge map */

static const struct merge_slot *merge_find(const struct sd_vocab *v, int32_t l, int32_t r) {
    uint64_t key1 = ((uint64_t)(uint32_t)l << 32 | (uint32_t)r) + 1;
    for (uint32_t i = (uint32_t)sd_tok_mix64(key1) & v->merge_mask;; i = (i + 1) & v->merge_mask) {
        const struct merge_slot *m = &v->merges[i];
        if (m->key1 == key1) return m;
        if (!m->key1) return NULL;
    }
}

/* First rule wins, as std::map::emplace in llama.cpp's bpe_ranks. */
void sd_tok_merge_put(struct sd_vocab *v, int32_t l, int32_t r, int32_t rank, int32_t result) {
    uint64_t key1 = ((uint64_t)(uint32_t)l << 32 | (uint32_t)r) + 1;
    for (uint32_t i = (uint32_t)sd_tok_mix64(key1) & v->merge_mask;; i = (i + 1) & v->merge_mask) {
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

/* ---- byte-level BPE (llm_tokenizer_bpe_session) */

static int bpe_try_bigram(struct run *r, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return SDNPU_OK;
    int32_t pl = r->sym[left].piece, pr = r->sym[right].piece;
    if (pl < 0 || pr < 0) return SDNPU_OK;
    const struct merge_slot *m = merge_find(r->v, pl, pr);
    if (!m) return SDNPU_OK;
    struct bigram bg = {0.0f, m->rank, left, r->sym[left].n + r->sym[right].n, m->result};
    return sd_tok_heap_push(r, &bg, false);
}

static int bpe_emit_symbol(struct run *r, const char *w, const struct sym *sy) {
    const struct sd_vocab *v = r->v;
    if (sy->piece >= 0 && sy->piece < v->n_tokens) return sd_tok_emit(r, sy->piece);
    /* Not a token: llama.cpp looks up each byte of the GPT-2 encoded text
     * as a one-byte token and drops those it cannot find. */
    for (uint32_t k = 0; k < sy->n; k++) {
        uint8_t b = (uint8_t)w[sy->off + k];
        for (int j = 0; j < v->byte_enc_len[b]; j++) {
            int32_t id = v->single_byte_tok[(uint8_t)v->byte_enc[b][j]];
            int rc;
            if (id >= 0 && (rc = sd_tok_emit(r, id))) return rc;
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
            int32_t id = sd_tok_map_find(v, r->esc, o);
            if (id >= 0 && id < v->n_tokens) return sd_tok_emit(r, id);
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
        struct bigram bg = sd_tok_heap_pop(r, false);
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

int sd_tok_bpe_fragment(struct run *r, const char *text, size_t len) {
    int rc = sd_regex_list_split(r->v->regex, text, len, &r->s);
    if (rc) return rc;
    uint32_t start = 0;
    for (size_t k = 0; k < r->s.n_words; k++) {
        uint32_t end = r->s.words[k];
        if (end > start && (rc = sd_tok_cached_word(r, text + start, end - start, bpe_word))) return rc;
        start = end;
    }
    return SDNPU_OK;
}
