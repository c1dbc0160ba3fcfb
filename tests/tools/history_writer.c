/*
 * tests/tools/history_writer.c - the victim of test_history's crash test.
 *
 * Opens the history at PATH (healing whatever an earlier kill left), then
 * appends records forever (or COUNT of them) and, after each append has
 * returned, prints the number of records now in the history on its own
 * line to stdout and flushes. The test SIGKILLs it at a random moment and
 * checks that every record it reported is in the file, intact.
 *
 * Record k's content is a function of k alone (hw_record below; the test
 * has the same function), so the reader can check every byte.
 *
 * Usage: history_writer PATH [COUNT] [FSYNC(0|1)]
 */
#include <stdio.h>
#include <stdlib.h>

#include "engine/history.h"

/* The same splitmix64 as tests/util_common.c, kept local so the content
 * function below is self-contained (the test copies it). */
static uint64_t hw_mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Record k: mostly small, sometimes up to 64k tokens (256 KiB), so that a
 * kill can land inside a long write. Fills tok (room for 65536) and text
 * (room for 64); returns the token count. */
static size_t hw_record(uint64_t k, int32_t *tok, char *text, size_t *text_len) {
    uint64_t h = hw_mix(k);
    size_t n = (h % 8 == 0) ? 1 + (size_t)(hw_mix(h) % 65536) : (size_t)(hw_mix(h) % 600);
    for (size_t j = 0; j < n; j++)
        tok[j] = (int32_t)(hw_mix(h ^ (j + 1)) % 262144);
    *text_len = (k % 2) ? (size_t)snprintf(text, 64, "response %llu", (unsigned long long)k) : 0;
    return n;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: history_writer PATH [COUNT] [FSYNC]\n");
        return 2;
    }
    long count = argc > 2 ? atol(argv[2]) : -1;
    struct sd_history_params p = sd_history_default_params();
    p.max_bytes = 0; /* no eviction: every record must survive */
    p.fsync = argc > 3 ? atoi(argv[3]) != 0 : true;
    struct sd_err err = {0};
    struct sd_history *h = NULL;
    if (sd_history_open(argv[1], &p, &h, &err)) {
        fprintf(stderr, "history_writer: %s\n", err.msg);
        return 1;
    }
    int32_t *tok = malloc(65536 * sizeof *tok);
    if (!tok) return 1;
    char text[64];
    for (long i = 0; count < 0 || i < count; i++) {
        size_t tl;
        uint64_t k = sd_history_n_records(h);
        size_t n = hw_record(k, tok, text, &tl);
        if (sd_history_append(h, tok, n, tl ? text : NULL, tl, &err)) {
            fprintf(stderr, "history_writer: %s\n", err.msg);
            return 1;
        }
        printf("%zu\n", sd_history_n_records(h));
        fflush(stdout);
    }
    free(tok);
    sd_history_close(h);
    return 0;
}
