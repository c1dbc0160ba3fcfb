/*
 * engine/tok_unicode.c - UTF-8 validation and replacement, and the Unicode
 * category flags the BPE pre-tokenizers test.
 *
 * Categories come from utf8proc. llama.cpp ships its own table generated
 * from a slightly newer Unicode release than the utf8proc on our target
 * systems (15.0); the code points Unicode 15.1 assigned are patched in below
 * so that both engines split text the same way.
 */
#include <string.h>

#include <utf8proc.h>

#include "engine/tok_internal.h"

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

/* ASCII: the general category of each byte, plus White_Space. */
static const uint16_t k_ascii_flags[128] = {
    0x080, 0x080, 0x080, 0x080, 0x080, 0x080, 0x080, 0x080, 0x080, 0x180, 0x180, 0x180, 0x180, 0x180, 0x080,
    0x080, 0x080, 0x080, 0x080, 0x080, 0x080, 0x080, 0x080, 0x080, 0x080, 0x080, 0x080, 0x080, 0x080, 0x080,
    0x080, 0x080, 0x108, 0x020, 0x020, 0x020, 0x040, 0x020, 0x020, 0x020, 0x020, 0x020, 0x020, 0x040, 0x020,
    0x020, 0x020, 0x020, 0x002, 0x002, 0x002, 0x002, 0x002, 0x002, 0x002, 0x002, 0x002, 0x002, 0x020, 0x020,
    0x040, 0x040, 0x040, 0x020, 0x020, 0x004, 0x004, 0x004, 0x004, 0x004, 0x004, 0x004, 0x004, 0x004, 0x004,
    0x004, 0x004, 0x004, 0x004, 0x004, 0x004, 0x004, 0x004, 0x004, 0x004, 0x004, 0x004, 0x004, 0x004, 0x004,
    0x004, 0x020, 0x020, 0x020, 0x040, 0x020, 0x040, 0x004, 0x004, 0x004, 0x004, 0x004, 0x004, 0x004, 0x004,
    0x004, 0x004, 0x004, 0x004, 0x004, 0x004, 0x004, 0x004, 0x004, 0x004, 0x004, 0x004, 0x004, 0x004, 0x004,
    0x004, 0x004, 0x004, 0x020, 0x040, 0x020, 0x040, 0x080,
};

static bool is_white_space(uint32_t cp) {
    /* Unicode White_Space beyond ASCII (PropList.txt). */
    switch (cp) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
        return true;
    default:
        return cp >= 0x2000 && cp <= 0x200A;
    }
}

uint16_t sd_cpt_flags(uint32_t cp) {
    if (cp < 128) return k_ascii_flags[cp];
    if (cp > 0x10FFFF) return 0;
    uint16_t f;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
        f = SD_CPT_LETTER;
        break;
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
        f = SD_CPT_ACCENT_MARK;
        break;
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
        f = SD_CPT_NUMBER;
        break;
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
        f = SD_CPT_PUNCTUATION;
        break;
    case UTF8PROC_CATEGORY_SM:
    case UTF8PROC_CATEGORY_SC:
    case UTF8PROC_CATEGORY_SK:
    case UTF8PROC_CATEGORY_SO:
        f = SD_CPT_SYMBOL;
        break;
    case UTF8PROC_CATEGORY_ZS:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
        f = SD_CPT_SEPARATOR;
        break;
    case UTF8PROC_CATEGORY_CN:
        /* Unicode 15.1 additions: CJK Extension I and the new ideographic
         * description characters. */
        if (cp >= 0x2EBF0 && cp <= 0x2EE5D)
            f = SD_CPT_LETTER;
        else if ((cp >= 0x2FFC && cp <= 0x2FFF) || cp == 0x31EF)
            f = SD_CPT_SYMBOL;
        else
            f = SD_CPT_UNDEFINED;
        break;
    default: /* Cc, Cf, Cs, Co */
        f = SD_CPT_CONTROL;
        break;
    }
    if (is_white_space(cp)) f |= SD_CPT_WHITESPACE;
    return f;
}
