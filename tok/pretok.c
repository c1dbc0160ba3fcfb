/*
 * tok/pretok.c - BPE pre-tokenizers: cut a text fragment into the
 * words that byte-pair merges then work inside.
 *
 * The expressions of GPT-2, Llama 3, Qwen2 and Qwen3.5 are hand-written
 * state machines, transcribed from llama.cpp's unicode_regex_split_custom_*
 * because those, not the regular expressions they stand for, are what the
 * models are run with there: they differ from a true regex engine at the
 * edges (an apostrophe contraction inside a word, the end of a fragment),
 * and token-for-token agreement with llama.cpp is the contract. They are
 * also several times faster than a regex engine. Any other pre-tokenizer
 * runs its expressions through PCRE2 (JIT-compiled where available).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <string.h>

#include "tok/internal.h"

int sd_tok_grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return SDNPU_OK;
    size_t n = *cap ? *cap : 64;
    while (n < need) {
        if (n > SIZE_MAX / 2) return SDNPU_ERR_OOM;
        n *= 2;
    }
    size_t bytes;
    if (sd_mul_ovf_size(n, elem, &bytes)) return SDNPU_ERR_OOM;
    void *q = sd_realloc(*p, bytes);
    if (!q) return SDNPU_ERR_OOM;
    *p = q;
    *cap = n;
    return SDNPU_OK;
}

/* Decode the fragment into code points, flags and byte offsets. The text is
 * valid UTF-8 (the caller validated or replaced it). */
static int decode_fragment(const char *text, size_t len, struct sd_tok_scratch *s, size_t *n_out) {
    size_t need = len + 1;
    size_t cap = s->cap_cpt;
    if (need > cap) {
        size_t c1 = cap, c2 = cap, c3 = cap;
        if (sd_tok_grow((void **)&s->cpt, &c1, need, sizeof *s->cpt) ||
            sd_tok_grow((void **)&s->flags, &c2, need, sizeof *s->flags) ||
            sd_tok_grow((void **)&s->boff, &c3, need, sizeof *s->boff))
            return SDNPU_ERR_OOM;
        /* All three grew to the same power of two; keep the smallest in case
         * a later one failed after an earlier one succeeded. */
        s->cap_cpt = SD_MIN(c1, SD_MIN(c2, c3));
    }
    const uint8_t *u = (const uint8_t *)text;
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        int l = sd_utf8_decode(u + i, len - i, &cp);
        if (l < 0) { /* cannot happen on validated input; stay safe */
            cp = 0xFFFD;
            l = -l;
        }
        s->cpt[n] = cp;
        s->flags[n] = sd_cpt_flags(cp);
        s->boff[n] = (uint32_t)i;
        n++;
        i += (size_t)l;
    }
    s->boff[n] = (uint32_t)len;
    *n_out = n;
    return SDNPU_OK;
}

#define OUT_OF_RANGE 0xFFFFFFFFu

struct split {
    const uint32_t *cpt;
    const uint16_t *flags;
    const uint32_t *boff;
    size_t n;
    size_t prev_end;
    uint32_t base;   /* byte offset of the segment in the fragment */
    uint32_t *words; /* out: word ends, relative to the fragment */
    size_t n_words;
};

static inline uint32_t get_cpt(const struct split *sp, size_t pos) {
    return pos < sp->n ? sp->cpt[pos] : OUT_OF_RANGE;
}
static inline uint16_t get_flags(const struct split *sp, size_t pos) {
    return pos < sp->n ? sp->flags[pos] : 0;
}
static inline size_t add_token(struct split *sp, size_t end) {
    size_t len = end - sp->prev_end;
    if (len > 0) sp->words[sp->n_words++] = sp->base + sp->boff[end];
    sp->prev_end = end;
    return len;
}
static inline uint32_t ascii_lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

enum { F_WS = SD_CPT_WHITESPACE, F_L = SD_CPT_LETTER, F_N = SD_CPT_NUMBER, F_M = SD_CPT_ACCENT_MARK };

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S) */
static void split_gpt2(struct split *sp) {
    const size_t n = sp->n;
    for (size_t pos = 0; pos < n;) {
        const uint32_t cpt = get_cpt(sp, pos);
        const uint16_t flags = get_flags(sp, pos);

        if (cpt == '\'' && pos + 1 < n) {
            uint32_t nx = get_cpt(sp, pos + 1);
            if (nx == 's' || nx == 't' || nx == 'm' || nx == 'd') {
                pos += add_token(sp, pos + 2);
                continue;
            }
            if (pos + 2 < n) {
                uint32_t nn = get_cpt(sp, pos + 2);
                if ((nx == 'r' && nn == 'e') || (nx == 'v' && nn == 'e') || (nx == 'l' && nn == 'l')) {
                    pos += add_token(sp, pos + 3);
                    continue;
                }
            }
        }

        uint16_t f2 = (cpt == ' ') ? get_flags(sp, pos + 1) : flags;
        if (f2 & F_L) { /* <space>?\p{L}+ */
            pos += (cpt == ' ');
            while (f2 & F_L)
                f2 = get_flags(sp, ++pos);
            add_token(sp, pos);
            continue;
        }
        if (f2 & F_N) { /* <space>?\p{N}+ */
            pos += (cpt == ' ');
            while (f2 & F_N)
                f2 = get_flags(sp, ++pos);
            add_token(sp, pos);
            continue;
        }
        if (!(f2 & (F_WS | F_L | F_N)) && f2) { /* <space>?[^\s\p{L}\p{N}]+ */
            pos += (cpt == ' ');
            while (!(f2 & (F_WS | F_L | F_N)) && f2)
                f2 = get_flags(sp, ++pos);
            add_token(sp, pos);
            continue;
        }

        size_t nws = 0;
        while (get_flags(sp, pos + nws) & F_WS)
            nws++;
        if (nws > 1 && get_cpt(sp, pos + nws) != OUT_OF_RANGE) { /* \s+(?!\S) */
            pos += nws - 1;
            add_token(sp, pos);
            continue;
        }
        if (nws > 0) { /* \s+ */
            pos += nws;
            add_token(sp, pos);
            continue;
        }
        add_token(sp, ++pos); /* no match: one code point alone */
    }
}

/* Llama 3:  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *           ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * Qwen2 is the same with \p{N} alone (max_digits 1); Qwen3.5 also lets
 * letter runs take combining marks (letter = \p{L}\p{M}). */
static void split_llama3(struct split *sp, size_t max_digits, uint16_t letter) {
    const size_t n = sp->n;
    for (size_t pos = 0; pos < n;) {
        const uint32_t cpt = get_cpt(sp, pos);
        const uint16_t flags = get_flags(sp, pos);

        if (cpt == '\'' && pos + 1 < n) {
            uint32_t nx = ascii_lower(get_cpt(sp, pos + 1));
            if (nx == 's' || nx == 't' || nx == 'm' || nx == 'd') {
                pos += add_token(sp, pos + 2);
                continue;
            }
            if (pos + 2 < n) {
                uint32_t nn = ascii_lower(get_cpt(sp, pos + 2));
                if ((nx == 'r' && nn == 'e') || (nx == 'v' && nn == 'e') || (nx == 'l' && nn == 'l')) {
                    pos += add_token(sp, pos + 3);
                    continue;
                }
            }
        }

        /* [^\r\n\p{L}\p{N}]?\p{L}+ */
        if (!(cpt == '\r' || cpt == '\n' || (flags & F_N))) {
            if ((flags & letter) || (get_flags(sp, pos + 1) & letter)) {
                pos++;
                while (get_flags(sp, pos) & letter)
                    pos++;
                add_token(sp, pos);
                continue;
            }
        }

        /* \p{N}{1,max_digits} */
        if (flags & F_N) {
            size_t ini = pos;
            while (get_flags(sp, pos) & F_N) {
                if (++pos - ini >= max_digits) {
                    add_token(sp, pos);
                    ini = pos;
                }
            }
            add_token(sp, pos);
            continue;
        }

        /* <space>?[^\s\p{L}\p{N}]+[\r\n]* */
        uint16_t f2 = (cpt == ' ') ? get_flags(sp, pos + 1) : flags;
        if (!(f2 & (F_WS | letter | F_N)) && flags) {
            pos += (cpt == ' ');
            while (!(f2 & (F_WS | letter | F_N)) && f2)
                f2 = get_flags(sp, ++pos);
            uint32_t c2 = get_cpt(sp, pos);
            while (c2 == '\r' || c2 == '\n')
                c2 = get_cpt(sp, ++pos);
            add_token(sp, pos);
            continue;
        }

        size_t nws = 0, last_rn = 0;
        while (get_flags(sp, pos + nws) & F_WS) {
            uint32_t c2 = get_cpt(sp, pos + nws);
            if (c2 == '\r' || c2 == '\n') last_rn = pos + nws + 1;
            nws++;
        }
        if (last_rn > 0) { /* \s*[\r\n]+ */
            pos = last_rn;
            add_token(sp, pos);
            continue;
        }
        if (nws > 1 && get_cpt(sp, pos + nws) != OUT_OF_RANGE) { /* \s+(?!\S) */
            pos += nws - 1;
            add_token(sp, pos);
            continue;
        }
        if (nws > 0) { /* \s+ */
            pos += nws;
            add_token(sp, pos);
            continue;
        }
        add_token(sp, ++pos);
    }
}

/* Split text[0..len) with a hand-written pre-tokenizer, appending the word
 * ends (plus base) to s->words. */
static int split_custom(enum sd_pretok kind, const char *text, size_t len, uint32_t base,
                        struct sd_tok_scratch *s) {
    size_t n;
    int rc = decode_fragment(text, len, s, &n);
    if (rc) return rc;
    /* At most one word per code point. */
    if (sd_tok_grow((void **)&s->words, &s->cap_words, s->n_words + n + 1, sizeof *s->words))
        return SDNPU_ERR_OOM;
    struct split sp = {s->cpt, s->flags, s->boff, n, 0, base, s->words + s->n_words, 0};
    switch (kind) {
    case SD_PRETOK_GPT2:
        split_gpt2(&sp);
        break;
    case SD_PRETOK_LLAMA3:
        split_llama3(&sp, 3, F_L);
        break;
    case SD_PRETOK_QWEN2:
        split_llama3(&sp, 1, F_L);
        break;
    case SD_PRETOK_QWEN35:
        split_llama3(&sp, 1, F_L | F_M);
        break;
    default:
        return SDNPU_ERR_INVALID_ARG;
    }
    s->n_words += sp.n_words;
    return SDNPU_OK;
}

/* ------------------------------------------------------- expression lists */

/* The expressions llama.cpp runs through its hand-written splitters
 * (unicode_regex_split_custom). */
static const struct {
    const char *expr;
    enum sd_pretok kind;
} k_custom[] = {
    {"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)", SD_PRETOK_GPT2},
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
     "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     SD_PRETOK_LLAMA3},
    {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
     "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     SD_PRETOK_LLAMA3},
    {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
     "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     SD_PRETOK_QWEN2},
    {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}|"
     " "
     "?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     SD_PRETOK_QWEN35},
};

struct sd_regex_step {
    enum sd_pretok custom; /* SD_PRETOK_REGEX: run code */
    pcre2_code *code;
};

struct sd_regex_list {
    pcre2_general_context *gctx;
    struct sd_regex_step *steps; /* [n] */
    int n;
};

static void *pcre_malloc(PCRE2_SIZE size, void *user) {
    (void)user;
    return sd_malloc(size);
}
static void pcre_free(void *p, void *user) {
    (void)user;
    sd_free(p);
}

int sd_regex_list_create(const char *const *exprs, int n, struct sd_regex_list **out, struct sd_err *err) {
    *out = NULL;
    struct sd_regex_list *rl = sd_calloc(1, sizeof *rl);
    if (!rl) return sd_err_set(err, SDNPU_ERR_OOM, "pre-tokenizer: out of memory");
    rl->gctx = pcre2_general_context_create(pcre_malloc, pcre_free, NULL);
    rl->steps = sd_calloc((size_t)n, sizeof *rl->steps);
    pcre2_compile_context *cctx = rl->gctx ? pcre2_compile_context_create(rl->gctx) : NULL;
    if (!rl->gctx || !rl->steps || !cctx) {
        sd_regex_list_free(rl);
        return sd_err_set(err, SDNPU_ERR_OOM, "pre-tokenizer: out of memory");
    }
    for (int i = 0; i < n; i++) {
        rl->n = i + 1;
        rl->steps[i].custom = SD_PRETOK_REGEX;
        for (size_t k = 0; k < SD_ARRAY_LEN(k_custom); k++)
            if (!strcmp(exprs[i], k_custom[k].expr)) rl->steps[i].custom = k_custom[k].kind;
        if (rl->steps[i].custom != SD_PRETOK_REGEX) continue;
        int ecode;
        PCRE2_SIZE eoff;
        rl->steps[i].code = pcre2_compile((PCRE2_SPTR)exprs[i], PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                                          &ecode, &eoff, cctx);
        if (!rl->steps[i].code) {
            char msg[128];
            pcre2_get_error_message(ecode, (PCRE2_UCHAR *)msg, sizeof msg);
            pcre2_compile_context_free(cctx);
            sd_regex_list_free(rl);
            if (ecode == PCRE2_ERROR_HEAPLIMIT || ecode == PCRE2_ERROR_NOMEMORY)
                return sd_err_set(err, SDNPU_ERR_OOM, "pre-tokenizer: out of memory");
            return sd_err_set(err, SDNPU_ERR_FORMAT, "pre-tokenizer expression %d at offset %zu: %s", i,
                              (size_t)eoff, msg);
        }
        /* The JIT is an optimization only: without it (no JIT support on
         * this platform, or no memory for it) the interpreter runs. */
        (void)pcre2_jit_compile(rl->steps[i].code, PCRE2_JIT_COMPLETE);
    }
    pcre2_compile_context_free(cctx);
    *out = rl;
    return SDNPU_OK;
}

void sd_regex_list_free(struct sd_regex_list *rl) {
    if (!rl) return;
    if (rl->steps) {
        for (int i = 0; i < rl->n; i++)
            pcre2_code_free(rl->steps[i].code);
        sd_free(rl->steps);
    }
    pcre2_general_context_free(rl->gctx);
    sd_free(rl);
}

static int push_word(struct sd_tok_scratch *s, uint32_t end) {
    if (sd_tok_grow((void **)&s->words, &s->cap_words, s->n_words + 1, sizeof *s->words))
        return SDNPU_ERR_OOM;
    s->words[s->n_words++] = end;
    return SDNPU_OK;
}

/* One PCRE2 expression over one segment: its matches and the gaps between
 * them become words, as llama.cpp's unicode_regex_split_stl does. */
static int split_regex_segment(const pcre2_code *code, pcre2_match_data *md, const char *text,
                               uint32_t seg_start, uint32_t seg_end, struct sd_tok_scratch *s) {
    int rc = SDNPU_OK;
    PCRE2_SPTR subj = (PCRE2_SPTR)(text + seg_start);
    PCRE2_SIZE slen = seg_end - seg_start, at = 0, prev = 0;
    while (at <= slen) {
        int m = pcre2_match(code, subj, slen, at, PCRE2_NO_UTF_CHECK, md, NULL);
        if (m == PCRE2_ERROR_NOMATCH) break;
        if (m < 0)
            return (m == PCRE2_ERROR_NOMEMORY || m == PCRE2_ERROR_HEAPLIMIT) ? SDNPU_ERR_OOM
                                                                             : SDNPU_ERR_INVALID_ARG;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        PCRE2_SIZE ms = ov[0], me = ov[1];
        if (me == ms) { /* an empty match cuts nothing; step one code point */
            at = ms + 1;
            while (at < slen && (subj[at] & 0xC0) == 0x80)
                at++;
            continue;
        }
        if (ms > prev && (rc = push_word(s, seg_start + (uint32_t)ms))) return rc;
        if ((rc = push_word(s, seg_start + (uint32_t)me))) return rc;
        prev = at = me;
    }
    if (prev < slen) rc = push_word(s, seg_end);
    return rc;
}

int sd_regex_list_split(const struct sd_regex_list *rl, const char *text, size_t len,
                        struct sd_tok_scratch *s) {
    s->n_words = 0;
    if (len == 0) return SDNPU_OK;
    /* The common case: one hand-written splitter over the whole fragment. */
    if (rl->n == 1 && rl->steps[0].custom != SD_PRETOK_REGEX)
        return split_custom(rl->steps[0].custom, text, len, 0, s);
    int rc = push_word(s, (uint32_t)len);
    if (rc) return rc;
    for (int r = 0; r < rl->n; r++) {
        const struct sd_regex_step *st = &rl->steps[r];
        pcre2_match_data *md = NULL;
        if (st->custom == SD_PRETOK_REGEX) {
            md = pcre2_match_data_create_from_pattern(st->code, rl->gctx);
            if (!md) return SDNPU_ERR_OOM;
        }
        /* The current segments move to words2; the new cut goes to words. */
        uint32_t *tmp = s->words2;
        size_t tcap = s->cap_words2;
        s->words2 = s->words;
        s->cap_words2 = s->cap_words;
        s->words = tmp;
        s->cap_words = tcap;
        size_t n_seg = s->n_words;
        s->n_words = 0;
        uint32_t seg_start = 0;
        for (size_t k = 0; k < n_seg && rc == SDNPU_OK; k++) {
            uint32_t seg_end = s->words2[k];
            if (st->custom == SD_PRETOK_REGEX)
                rc = split_regex_segment(st->code, md, text, seg_start, seg_end, s);
            else
                rc = split_custom(st->custom, text + seg_start, seg_end - seg_start, seg_start, s);
            seg_start = seg_end;
        }
        pcre2_match_data_free(md);
        if (rc) return rc;
    }
    return SDNPU_OK;
}
