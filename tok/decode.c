/*
 * tok/decode.c - decoding: token ids back to text (sd_token_to_piece,
 * sd_detokenize).
 *
 * What each token decodes to (U+2581 -> space, GPT-2 characters -> bytes,
 * <0xNN> -> the byte) is worked out once at load (sd_tok_build_decoded,
 * below) into one arena, so decoding copies a piece per token; all
 * that is left here is hiding control tokens and undoing SPM's prefix space.
 */
#include "tok/tokenizer.h"

#include <string.h>

#include "tok/internal.h"

/* ----------------------------------------------- at load: the arena */

static uint8_t hexval(char c) {
    if (c >= '0' && c <= '9') return (uint8_t)(c - '0');
    if (c >= 'a' && c <= 'f') return (uint8_t)(c - 'a' + 10);
    if (c >= 'A' && c <= 'F') return (uint8_t)(c - 'A' + 10);
    return 0xFF;
}

/* The bytes each token stands for in decoded text (llama.cpp's
 * token_to_piece with special = true), worked out once at load. */
int sd_tok_build_decoded(struct sd_vocab *v) {
    uint32_t gmap[256];
    int16_t rev[512]; /* GPT-2 character -> byte */
    sd_tok_gpt2_byte_map(gmap);
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
        const char *t = sd_tok_piece_text(v, id, &len);
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
