/*
 * base/utf8.c - UTF-8 decoding, validation, replacement and completion:
 * one definition for the tokenizer, the streaming session, the server's
 * JSON and the chat transcript, so that all of them draw the line between
 * valid and invalid text in the same place (Unicode table 3-7).
 */
#include <string.h>

#include "base/base.h"

int sd_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    uint8_t b0 = s[0];
    if (b0 < 0x80) {
        *cp = b0;
        return 1;
    }
    /* The second byte's allowed range depends on the lead byte (table 3-7);
     * later continuation bytes are always 80..BF. */
    int len;
    uint8_t lo = 0x80, hi = 0xBF;
    uint32_t c;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        len = 2;
        c = b0 & 0x1Fu;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        len = 3;
        c = b0 & 0x0Fu;
        if (b0 == 0xE0) lo = 0xA0;
        if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        len = 4;
        c = b0 & 0x07u;
        if (b0 == 0xF0) lo = 0x90;
        if (b0 == 0xF4) hi = 0x8F;
    } else {
        return -1;
    }
    for (int i = 1; i < len; i++) {
        if ((size_t)i >= n) return -i;
        uint8_t b = s[i];
        if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return -i;
        c = (c << 6) | (b & 0x3Fu);
    }
    *cp = c;
    return len;
}

size_t sd_utf8_validate(const char *str, size_t n) {
    const uint8_t *s = (const uint8_t *)str;
    size_t i = 0;
    while (i < n) {
        /* ASCII runs dominate real text: test eight bytes at a time. */
        if (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (!(w & 0x8080808080808080ull)) {
                i += 8;
                continue;
            }
        }
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        int l = sd_utf8_decode(s + i, n - i, &cp);
        if (l < 0) return i;
        i += (size_t)l;
    }
    return n;
}

size_t sd_utf8_replaced_len(const char *str, size_t n) {
    const uint8_t *s = (const uint8_t *)str;
    size_t out = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int l = sd_utf8_decode(s + i, n - i, &cp);
        if (l < 0) {
            out += 3;
            i += (size_t)-l;
        } else {
            out += (size_t)l;
            i += (size_t)l;
        }
    }
    return out;
}

void sd_utf8_replace(const char *str, size_t n, char *dst) {
    const uint8_t *s = (const uint8_t *)str;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int l = sd_utf8_decode(s + i, n - i, &cp);
        if (l < 0) {
            memcpy(dst, "\xEF\xBF\xBD", 3);
            dst += 3;
            i += (size_t)-l;
        } else {
            memcpy(dst, s + i, (size_t)l);
            dst += l;
            i += (size_t)l;
        }
    }
}

int sd_utf8_encode(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t sd_utf8_complete(const char *buf, size_t n) {
    size_t i = n, back = 0;
    while (i > 0 && back < 4) {
        unsigned char c = (unsigned char)buf[i - 1];
        if ((c & 0xC0) != 0x80) { /* a lead byte or ASCII */
            size_t need = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
            return (back + 1 >= need) ? n : i - 1;
        }
        i--;
        back++;
    }
    return n;
}

char *sd_utf8_clean(const char *s, size_t n, size_t *out_len) {
    size_t len = sd_utf8_replaced_len(s, n);
    char *out = sd_malloc(len + 1);
    if (!out) return NULL;
    sd_utf8_replace(s, n, out);
    out[len] = '\0';
    if (out_len) *out_len = len;
    return out;
}
