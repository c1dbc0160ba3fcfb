/*
 * draft/pld.c - prompt lookup decoding, the n-gram baseline (draft.h).
 *
 * A linear scan from the end of the text backwards: the first hit is the
 * most recent occurrence, which is what PLD proposes. No index is kept, so
 * the cost grows with the text; the benchmark shows by how much.
 */
#include "draft/draft.h"

int32_t sd_pld_lookup(const int32_t *text, size_t n_text, int32_t max_ngram, int32_t min_ngram, int32_t *out,
                      int32_t max, int32_t *ngram) {
    if (ngram) *ngram = 0;
    if (!text || !out || max <= 0 || n_text < 2) return 0;
    if (min_ngram < 1) min_ngram = 1;
    for (int32_t n = max_ngram; n >= min_ngram; n--) {
        /* The n-gram and at least one earlier end position must fit. */
        if ((size_t)n + 1 > n_text) continue;
        const int32_t *pat = text + n_text - (size_t)n; /* [n] the text's last n tokens */
        int32_t tail = pat[n - 1];
        /* e is the end of a candidate occurrence; e <= n_text - 2 so at
         * least one token follows it. */
        for (size_t e = n_text - 1; e-- > (size_t)n - 1;) {
            if (text[e] != tail) continue;
            int32_t k = 1;
            while (k < n && text[e - (size_t)k] == pat[n - 1 - k])
                k++;
            if (k < n) continue;
            int32_t m = 0;
            for (size_t j = e + 1; j < n_text && m < max; j++)
                out[m++] = text[j];
            if (ngram) *ngram = n;
            return m;
        }
    }
    return 0;
}
