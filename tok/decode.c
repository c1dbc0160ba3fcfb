/*
 * tok/decode.c - decoding: token ids back to text (sd_token_to_piece,
 * sd_detokenize).
 *
 * What each token decodes to (U+2581 -> space, GPT-2 characters -> bytes,
 * <0xNN> -> the byte) is worked out once at load (build_decoded in
 * vocab.c) into one arena, so decoding copies a piece per token; all
 * that is left here is hiding control tokens and undoing SPM's prefix space.
 */
#include "tok/tokenizer.h"

#include <string.h>

#include "tok/internal.h"

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
