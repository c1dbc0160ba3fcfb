/*
 * engine/tok_internal.h - pieces the tokenizer files share: UTF-8 decoding,
 * Unicode category flags, the GPT-2 byte-to-unicode map and the BPE
 * pre-tokenizers. Private to engine/tokenizer.c, tok_unicode.c, tok_pretok.c.
 */
#ifndef SD_TOK_INTERNAL_H
#define SD_TOK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

/* ---------------------------------------------------------------- UTF-8 */

/* Decode one code point from s[0..n), n >= 1. Returns the length (1..4) of a
 * well-formed sequence (Unicode table 3-7: no overlongs, no surrogates, at
 * most U+10FFFF) and sets *cp; otherwise returns minus the length of the
 * maximal subpart of an ill-formed sequence (1..3), which is what one U+FFFD
 * replaces under the Unicode "maximal subpart" practice (as Python's
 * bytes.decode(errors="replace") does). */
int sd_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp);

/* Offset of the first byte of the first ill-formed sequence, or n. */
size_t sd_utf8_validate(const char *s, size_t n);

/* Bytes needed to hold s[0..n) with every ill-formed subpart replaced by
 * U+FFFD (EF BF BD), and the replacement itself into dst. */
size_t sd_utf8_replaced_len(const char *s, size_t n);
void sd_utf8_replace(const char *s, size_t n, char *dst);

/* Encode cp (<= 0x10FFFF) into out[0..4); returns the length. */
int sd_utf8_encode(uint32_t cp, char *out);

/* --------------------------------------------------------- categories */

/* Code point flags, bit-compatible with llama.cpp's unicode_cpt_flags so the
 * pre-tokenizers read like their reference. Every valid code point has at
 * least one category bit, so flags == 0 means "outside the text". */
enum {
    SD_CPT_UNDEFINED = 0x0001,   /* Cn */
    SD_CPT_NUMBER = 0x0002,      /* \p{N} */
    SD_CPT_LETTER = 0x0004,      /* \p{L} */
    SD_CPT_SEPARATOR = 0x0008,   /* \p{Z} */
    SD_CPT_ACCENT_MARK = 0x0010, /* \p{M} */
    SD_CPT_PUNCTUATION = 0x0020, /* \p{P} */
    SD_CPT_SYMBOL = 0x0040,      /* \p{S} */
    SD_CPT_CONTROL = 0x0080,     /* \p{C} except Cn */
    SD_CPT_WHITESPACE = 0x0100   /* \s: the Unicode White_Space property */
};

uint16_t sd_cpt_flags(uint32_t cp);

/* ------------------------------------------------------ pre-tokenizers */

enum sd_pretok {
    SD_PRETOK_GPT2 = 1,
    SD_PRETOK_LLAMA3,
    SD_PRETOK_QWEN2,
    SD_PRETOK_QWEN35,
    SD_PRETOK_REGEX /* a PCRE2 expression */
};

/* Growable scratch owned by one tokenize call. */
struct sd_tok_scratch {
    uint32_t *cpt;   /* [n_cpt] code points of the current fragment */
    uint16_t *flags; /* [n_cpt] their sd_cpt_flags */
    uint32_t *boff;  /* [n_cpt + 1] byte offset of each code point */
    size_t cap_cpt;
    uint32_t *words; /* [n_words] byte offset where each word ends */
    size_t n_words, cap_words;
    uint32_t *words2; /* second buffer for chained regexes */
    size_t cap_words2;
};

/* Ensure *p (elements of size elem) holds at least need elements. */
int sd_tok_grow(void **p, size_t *cap, size_t need, size_t elem);

/* A pre-tokenizer: a list of expressions applied in turn. Expressions that
 * llama.cpp runs through a hand-written splitter (GPT-2, Llama 3, Qwen2,
 * Qwen3.5) run through the same state machine here; the rest through PCRE2. */
struct sd_regex_list;
int sd_regex_list_create(const char *const *exprs, int n, struct sd_regex_list **out, struct sd_err *err);
void sd_regex_list_free(struct sd_regex_list *rl);
/* Split text[0..len) (valid UTF-8, len < 2^32) like llama.cpp's
 * unicode_regex_split: each expression cuts every current segment into its
 * matches and the gaps between them. The word ends (byte offsets) land in
 * s->words[0..s->n_words). Thread-safe: rl is only read. */
int sd_regex_list_split(const struct sd_regex_list *rl, const char *text, size_t len,
                        struct sd_tok_scratch *s);

#endif /* SD_TOK_INTERNAL_H */
