/*
 * tok/unicode.c - the Unicode category flags the BPE pre-tokenizers
 * test (UTF-8 itself is base/'s).
 *
 * Categories come from utf8proc. llama.cpp ships its own table generated
 * from a slightly newer Unicode release than the utf8proc on our target
 * systems (15.0); the code points Unicode 15.1 assigned are patched in below
 * so that both engines split text the same way.
 */
#include <string.h>

#include <utf8proc.h>

#include "tok/internal.h"


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
