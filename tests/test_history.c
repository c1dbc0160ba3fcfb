/* tests/test_history.c - the history store: CRC-32 against the standard
 * check values, the on-disk layout byte by byte, round trips, a torn tail at
 * every byte offset of the last record, flipped bytes in a middle record
 * (resynchronization), eviction, feeding a suffix automaton, bad input,
 * allocation failures, and a real crash test: a writer process SIGKILLed at
 * a random moment must lose no record it reported as written. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine/history.h"
#include "util_common.h"

/* Warnings go to the log callback: captured here, so the tests can check
 * that damage is reported and the test output stays quiet. */
static int g_warnings;
static char g_last_warning[1024];
static void capture_log(enum sdnpu_log_level level, const char *msg, void *user) {
    (void)user;
    if (level != SDNPU_LOG_WARN) return;
    g_warnings++;
    snprintf(g_last_warning, sizeof g_last_warning, "%s", msg);
}

/* ---------------------------------------------------------------- files */

static const char *tmp_path(void) {
    static char path[8][64];
    static int next;
    char *p = path[next++ & 7];
    snprintf(p, 64, "/tmp/sdnpu-hist-XXXXXX");
    int fd = mkstemp(p);
    assert_true(fd >= 0);
    close(fd);
    return p;
}

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)sz + 1);
    assert_int_equal(fread(b, 1, (size_t)sz, f), (size_t)sz);
    fclose(f);
    *n = (size_t)sz;
    return b;
}

static void spit(const char *path, const uint8_t *b, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
}

static size_t file_size(const char *path) {
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return (size_t)st.st_size;
}

static void cleanup(const char *path) {
    char tmp[80];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    unlink(path);
    unlink(tmp);
}

static struct sd_history *open_ok(const char *path, const struct sd_history_params *p) {
    struct sd_history *h = NULL;
    struct sd_err err = {0};
    int rc = sd_history_open(path, p, &h, &err);
    if (rc) fail_msg("open %s: %s", path ? path : "(memory)", err.msg);
    return h;
}

/* Record k of the test corpus: k+1 tokens 1000k + j, text "r<k>" for even k. */
static void corpus_append(struct sd_history *h, int k) {
    int32_t tok[64];
    char text[16];
    for (int j = 0; j <= k; j++)
        tok[j] = 1000 * k + j;
    int tl = k % 2 ? 0 : snprintf(text, sizeof text, "r%d", k);
    struct sd_err err = {0};
    if (sd_history_append(h, tok, (size_t)k + 1, tl ? text : NULL, (size_t)tl, &err))
        fail_msg("append: %s", err.msg);
}

static void corpus_check(const struct sd_history *h, size_t i, int k) {
    struct sd_history_record r;
    assert_int_equal(sd_history_record(h, i, &r), SDNPU_OK);
    assert_int_equal(r.n_tok, (size_t)k + 1);
    for (int j = 0; j <= k; j++)
        assert_int_equal(r.tok[j], 1000 * k + j);
    char text[16];
    int tl = k % 2 ? 0 : snprintf(text, sizeof text, "r%d", k);
    assert_int_equal(r.text_len, (size_t)tl);
    assert_string_equal(r.text, tl ? text : "");
}

static size_t corpus_bytes(int k) {
    return SD_HISTORY_RECORD_OVERHEAD + 4 * ((size_t)k + 1) + (k % 2 ? 0 : (k >= 10 ? 3 : 2));
}

/* ----------------------------------------------------------------- CRC */

static void test_crc32(void **state) {
    (void)state;
    /* The standard check values of CRC-32/ISO-HDLC (zlib's crc32). */
    assert_int_equal(sd_crc32(0, "123456789", 9), 0xCBF43926u);
    assert_int_equal(sd_crc32(0, "", 0), 0);
    assert_int_equal(sd_crc32(0, "a", 1), 0xE8B7BE43u);
    const char *fox = "The quick brown fox jumps over the lazy dog";
    assert_int_equal(sd_crc32(0, fox, strlen(fox)), 0x414FA339u);
    /* Chained equals whole. */
    assert_int_equal(sd_crc32(sd_crc32(0, fox, 10), fox + 10, strlen(fox) - 10), 0x414FA339u);
}

/* ----------------------------------------------------------- round trip */

static void test_layout(void **state) {
    (void)state;
    const char *path = tmp_path();
    struct sd_history *h = open_ok(path, NULL);
    int32_t tok[2] = {7, 262143};
    assert_int_equal(sd_history_append(h, tok, 2, "hi", 2, NULL), SDNPU_OK);
    sd_history_close(h);
    size_t n;
    uint8_t *b = slurp(path, &n);
    /* magic, P = 8 + 8 + 2 = 18, n = 2, text_len = 2, 7, 262143, "hi", CRC */
    const uint8_t want[] = {'S', 'D', 'H', '1', 18, 0, 0, 0,    2,    0, 0, 0,   2,
                            0,   0,   0,   7,   0,  0, 0, 0xff, 0xff, 3, 0, 'h', 'i'};
    assert_int_equal(n, sizeof want + 4);
    assert_memory_equal(b, want, sizeof want);
    uint32_t crc = sd_crc32(0, want, sizeof want);
    assert_int_equal(b[26] | b[27] << 8 | b[28] << 16 | (uint32_t)b[29] << 24, crc);
    free(b);
    cleanup(path);
}

static void test_round_trip(void **state) {
    (void)state;
    const char *path = tmp_path();
    for (int pass = 0; pass < 2; pass++) {
        const char *pth = pass ? NULL : path;
        struct sd_history *h = open_ok(pth, NULL);
        size_t bytes = 0;
        for (int k = 0; k < 12; k++) {
            corpus_append(h, k);
            bytes += corpus_bytes(k);
        }
        int32_t none = 0;
        assert_int_equal(sd_history_append(h, &none, 0, NULL, 0, NULL), SDNPU_OK); /* empty record */
        bytes += SD_HISTORY_RECORD_OVERHEAD;
        assert_int_equal(sd_history_n_records(h), 13);
        assert_int_equal(sd_history_bytes(h), bytes);
        for (int k = 0; k < 12; k++)
            corpus_check(h, (size_t)k, k);
        sd_history_close(h);
        if (pass) break;
        assert_int_equal(file_size(path), bytes);
        h = open_ok(path, NULL);
        assert_int_equal(sd_history_n_records(h), 13);
        for (int k = 0; k < 12; k++)
            corpus_check(h, (size_t)k, k);
        const struct sd_history_report *rep = sd_history_report(h);
        assert_int_equal(rep->bad_offset, -1);
        assert_string_equal(rep->msg, "");
        assert_false(rep->healed);
        struct sd_history_record r;
        assert_int_equal(sd_history_record(h, 12, &r), SDNPU_OK);
        assert_int_equal(r.n_tok, 0);
        assert_int_equal(sd_history_record(h, 13, &r), SDNPU_ERR_INVALID_ARG);
        sd_history_close(h);
    }
    cleanup(path);
}

/* ------------------------------------------------------------- damage */

/* Every proper prefix of the last record: the earlier records survive, the
 * report names the offset, the file is cut back, and appends work. */
static void test_torn_tail_every_offset(void **state) {
    (void)state;
    const char *path = tmp_path();
    struct sd_history *h = open_ok(path, NULL);
    for (int k = 0; k < 3; k++)
        corpus_append(h, k + 4);
    sd_history_close(h);
    size_t n;
    uint8_t *full = slurp(path, &n);
    size_t last = n - corpus_bytes(6);
    char needle[64];
    snprintf(needle, sizeof needle, "byte %zu", last);
    for (size_t cut = last + 1; cut < n; cut++) {
        spit(path, full, cut);
        h = open_ok(path, NULL);
        assert_int_equal(sd_history_n_records(h), 2);
        corpus_check(h, 0, 4);
        corpus_check(h, 1, 5);
        const struct sd_history_report *rep = sd_history_report(h);
        assert_int_equal(rep->bad_offset, (int64_t)last);
        assert_int_equal(rep->bytes_dropped, (int64_t)(cut - last));
        assert_int_equal(rep->n_bad_regions, 1);
        assert_true(rep->healed);
        if (!strstr(rep->msg, needle)) fail_msg("cut %zu: message '%s' lacks '%s'", cut, rep->msg, needle);
        assert_non_null(strstr(g_last_warning, needle)); /* and it was logged */
        assert_int_equal(file_size(path), last);
        corpus_append(h, 9);
        sd_history_close(h);
        h = open_ok(path, NULL);
        assert_int_equal(sd_history_n_records(h), 3);
        corpus_check(h, 2, 9);
        assert_int_equal(sd_history_report(h)->bad_offset, -1);
        sd_history_close(h);
    }
    /* Cut exactly at a record boundary: a clean, shorter file. */
    spit(path, full, last);
    h = open_ok(path, NULL);
    assert_int_equal(sd_history_n_records(h), 2);
    assert_int_equal(sd_history_report(h)->bad_offset, -1);
    sd_history_close(h);
    /* Garbage after the last record is a damaged tail too. */
    uint8_t *junk = malloc(n + 7);
    memcpy(junk, full, n);
    memcpy(junk + n, "garbage", 7);
    spit(path, junk, n + 7);
    h = open_ok(path, NULL);
    assert_int_equal(sd_history_n_records(h), 3);
    assert_int_equal(sd_history_report(h)->bad_offset, (int64_t)n);
    assert_int_equal(file_size(path), n);
    sd_history_close(h);
    free(junk);
    free(full);
    cleanup(path);
}

/* Every single-byte corruption of the middle record: the CRC (or the magic
 * or the length check) catches it, the reader resynchronizes on the next
 * record, so the first and the last survive; the file is rewritten without
 * the damage. */
static void test_corrupt_middle(void **state) {
    (void)state;
    const char *path = tmp_path();
    struct sd_history *h = open_ok(path, NULL);
    for (int k = 0; k < 3; k++)
        corpus_append(h, k + 4);
    sd_history_close(h);
    size_t n;
    uint8_t *full = slurp(path, &n);
    size_t mid = corpus_bytes(4), mid_end = mid + corpus_bytes(5);
    uint8_t *bad = malloc(n);
    for (size_t off = mid; off < mid_end; off++) {
        for (int flip = 0; flip < 2; flip++) {
            memcpy(bad, full, n);
            bad[off] ^= flip ? 0x80 : 0x01;
            spit(path, bad, n);
            h = open_ok(path, NULL);
            if (sd_history_n_records(h) != 2)
                fail_msg("flip at %zu: %zu records", off, sd_history_n_records(h));
            corpus_check(h, 0, 4);
            corpus_check(h, 1, 6);
            const struct sd_history_report *rep = sd_history_report(h);
            assert_int_equal(rep->bad_offset, (int64_t)mid);
            assert_int_equal(rep->bytes_dropped, (int64_t)(mid_end - mid));
            assert_int_equal(rep->n_bad_regions, 1);
            assert_true(rep->healed);
            char needle[64];
            snprintf(needle, sizeof needle, "byte %zu", mid);
            assert_non_null(strstr(rep->msg, needle));
            sd_history_close(h);
            /* Healed: the file now holds just the two good records. */
            assert_int_equal(file_size(path), n - (mid_end - mid));
            h = open_ok(path, NULL);
            assert_int_equal(sd_history_n_records(h), 2);
            assert_int_equal(sd_history_report(h)->bad_offset, -1);
            sd_history_close(h);
        }
    }
    /* Two damaged regions (first and last record) and a good one between. */
    memcpy(bad, full, n);
    bad[3] ^= 0xff;
    bad[n - 1] ^= 0xff;
    spit(path, bad, n);
    h = open_ok(path, NULL);
    assert_int_equal(sd_history_n_records(h), 1);
    corpus_check(h, 0, 5);
    assert_int_equal(sd_history_report(h)->bad_offset, 0);
    assert_int_equal(sd_history_report(h)->n_bad_regions, 2);
    sd_history_close(h);
    free(bad);
    free(full);
    cleanup(path);
}

/* A record whose CRC is right but whose content is not (a negative token,
 * sizes that disagree) is damage too: the CRC only proves the bytes are
 * what some writer wrote. */
static void test_bad_content(void **state) {
    (void)state;
    const char *path = tmp_path();
    uint8_t rec[28] = {'S', 'D', 'H', '1', 16, 0, 0, 0, 2,    0,    0,    0,
                       0,   0,   0,   0,   1,  0, 0, 0, 0xff, 0xff, 0xff, 0xff};
    uint32_t crc = sd_crc32(0, rec, 24);
    for (int i = 0; i < 4; i++)
        rec[24 + i] = (uint8_t)(crc >> (8 * i));
    spit(path, rec, sizeof rec);
    struct sd_history *h = open_ok(path, NULL);
    assert_int_equal(sd_history_n_records(h), 0);
    assert_non_null(strstr(sd_history_report(h)->msg, "negative token"));
    sd_history_close(h);
    assert_int_equal(file_size(path), 0);
    /* Sizes that disagree with the payload length. */
    rec[8] = 1;
    crc = sd_crc32(0, rec, 24);
    for (int i = 0; i < 4; i++)
        rec[24 + i] = (uint8_t)(crc >> (8 * i));
    spit(path, rec, sizeof rec);
    h = open_ok(path, NULL);
    assert_int_equal(sd_history_n_records(h), 0);
    assert_non_null(strstr(sd_history_report(h)->msg, "disagree"));
    sd_history_close(h);
    /* Not a history file at all. */
    const char *txt = "Dear diary, today I wrote no records at all.\n";
    spit(path, (const uint8_t *)txt, strlen(txt));
    h = open_ok(path, NULL);
    assert_int_equal(sd_history_n_records(h), 0);
    assert_int_equal(sd_history_report(h)->bad_offset, 0);
    assert_non_null(strstr(sd_history_report(h)->msg, "bad magic"));
    sd_history_close(h);
    cleanup(path);
}

static void test_bad_args(void **state) {
    (void)state;
    struct sd_err err = {0};
    struct sd_history *h = NULL;
    assert_int_equal(sd_history_open("/nonexistent-dir/x/history", NULL, &h, &err), SDNPU_ERR_IO);
    assert_null(h);
    assert_non_null(strstr(err.msg, "/nonexistent-dir/x/history"));
    assert_int_equal(sd_history_open("/tmp", NULL, &h, &err), SDNPU_ERR_IO); /* a directory */
    h = open_ok(NULL, NULL);
    int32_t neg[] = {1, -1};
    assert_int_equal(sd_history_append(h, neg, 2, NULL, 0, &err), SDNPU_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "negative"));
    assert_int_equal(sd_history_append(h, NULL, 3, NULL, 0, &err), SDNPU_ERR_INVALID_ARG);
    assert_int_equal(sd_history_n_records(h), 0);
    sd_history_close(h);
    sd_history_close(NULL);
    struct sd_history_params p = sd_history_default_params();
    p.max_bytes = 100;
    h = open_ok(NULL, &p);
    int32_t big[40] = {0};
    assert_int_equal(sd_history_append(h, big, 40, NULL, 0, &err), SDNPU_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "max_bytes"));
    sd_history_close(h);
}

/* ------------------------------------------------------------- eviction */

static void test_eviction(void **state) {
    (void)state;
    const char *path = tmp_path();
    struct sd_history_params p = sd_history_default_params();
    p.max_bytes = 1000;
    p.fsync = false;
    struct sd_history *h = open_ok(path, &p);
    int first = 0;
    for (int k = 0; k < 60; k++) {
        corpus_append(h, k % 20);
        uint64_t bytes = sd_history_bytes(h);
        assert_true(bytes <= p.max_bytes);
        assert_int_equal(file_size(path), bytes);
        /* What is left is always the newest records, in order. */
        size_t nr = sd_history_n_records(h);
        first = k + 1 - (int)nr;
        for (size_t i = 0; i < nr; i++)
            corpus_check(h, i, (first + (int)i) % 20);
    }
    assert_true(first > 0);
    char tmp[80];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_false(sdt_file_exists(tmp));
    sd_history_close(h);
    /* Reopen: the same records. */
    h = open_ok(path, &p);
    size_t nr = sd_history_n_records(h);
    for (size_t i = 0; i < nr; i++)
        corpus_check(h, i, (first + (int)i) % 20);
    sd_history_close(h);
    /* Reopen with a tighter bound: the oldest go at once. */
    p.max_bytes = 300;
    h = open_ok(path, &p);
    assert_true(sd_history_bytes(h) <= 300);
    assert_true(sd_history_report(h)->n_evicted > 0);
    assert_int_equal(file_size(path), sd_history_bytes(h));
    size_t nr2 = sd_history_n_records(h);
    for (size_t i = 0; i < nr2; i++)
        corpus_check(h, i, (first + (int)(nr - nr2) + (int)i) % 20);
    sd_history_close(h);
    /* A record-count bound, in memory. */
    p = sd_history_default_params();
    p.max_records = 8;
    h = open_ok(NULL, &p);
    for (int k = 0; k < 30; k++) {
        corpus_append(h, k);
        nr = sd_history_n_records(h);
        assert_true(nr <= 8);
        for (size_t i = 0; i < nr; i++)
            corpus_check(h, i, k + 1 - (int)nr + (int)i);
    }
    sd_history_close(h);
    cleanup(path);
}

/* ------------------------------------------------------- automaton feed */

static void test_to_sam(void **state) {
    (void)state;
    struct sd_history *h = open_ok(NULL, NULL);
    int32_t a[] = {1, 2}, b[] = {3, 4}, c[] = {2, 3, 9};
    assert_int_equal(sd_history_append(h, a, 2, NULL, 0, NULL), SDNPU_OK);
    assert_int_equal(sd_history_append(h, b, 2, NULL, 0, NULL), SDNPU_OK);
    struct sd_sam *s = NULL;
    assert_int_equal(sd_sam_create(0, &s, NULL), SDNPU_OK);
    assert_int_equal(sd_history_to_sam(h, s, NULL), SDNPU_OK);
    assert_true(sd_sam_frozen(s));
    const int32_t want[] = {1, 2, SD_SAM_SEP, 3, 4, SD_SAM_SEP};
    assert_int_equal(sd_sam_n_tokens(s), 6);
    assert_memory_equal(sd_sam_text(s), want, sizeof want);
    /* "2 3" spans two records: only "3" matches. */
    struct sd_sam_cursor cur;
    sd_sam_cursor_reset(&cur);
    sd_sam_cursor_advance(s, &cur, 2);
    sd_sam_cursor_advance(s, &cur, 3);
    assert_int_equal(cur.len, 1);
    /* Once a record really holds "2 3", it matches. */
    assert_int_equal(sd_history_append(h, c, 3, NULL, 0, NULL), SDNPU_OK);
    sd_sam_clear(s);
    assert_int_equal(sd_history_to_sam(h, s, NULL), SDNPU_OK);
    sd_sam_cursor_reset(&cur);
    sd_sam_cursor_advance(s, &cur, 2);
    sd_sam_cursor_advance(s, &cur, 3);
    assert_int_equal(cur.len, 2);
    assert_int_equal(sd_sam_count(s, cur.state), 1);
    sd_sam_free(s);
    sd_history_close(h);
}

/* ------------------------------------------------- allocation failures */

static void test_alloc_failure_sweep(void **state) {
    (void)state;
    const char *path = tmp_path();
    struct sd_history_params p = sd_history_default_params();
    p.fsync = false;
    p.max_bytes = 350; /* 8 records are 312 bytes: the append below evicts (rewrite path) */
    struct sd_history *h = open_ok(path, &p);
    for (int k = 0; k < 8; k++)
        corpus_append(h, k);
    sd_history_close(h);
    size_t n0;
    uint8_t *before = slurp(path, &n0);
    long base = sdt_alloc_live();
    int failures = 0;
    for (long f = 0;; f++) {
        struct sd_err err = {0};
        h = NULL;
        sdt_alloc_fail_after(f);
        int rc = sd_history_open(path, &p, &h, &err);
        if (rc) {
            assert_int_equal(rc, SDNPU_ERR_OOM);
            assert_null(h);
            assert_true(strlen(err.msg) > 0);
        } else {
            rc = sd_history_append(h, (const int32_t[]){5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, 12, "x",
                                   1, &err);
            if (rc) assert_int_equal(rc, SDNPU_ERR_OOM);
            sd_history_close(h);
        }
        sdt_alloc_fail_after(-1);
        assert_int_equal(sdt_alloc_live(), base);
        if (rc == SDNPU_OK) break;
        /* A failed open or append leaves the file as it was. */
        size_t n1;
        uint8_t *after = slurp(path, &n1);
        assert_int_equal(n1, n0);
        assert_memory_equal(after, before, n0);
        free(after);
        failures++;
    }
    assert_true(failures >= 3);
    h = open_ok(path, &p);
    struct sd_history_record r;
    assert_int_equal(sd_history_record(h, sd_history_n_records(h) - 1, &r), SDNPU_OK);
    assert_int_equal(r.n_tok, 12);
    sd_history_close(h);
    free(before);
    cleanup(path);
}

/* ----------------------------------------------------------- crash test */

/* Record k's content: the same function as tests/tools/history_writer.c. */
static uint64_t hw_mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static size_t hw_record(uint64_t k, int32_t *tok, char *text, size_t *text_len) {
    uint64_t h = hw_mix(k);
    size_t n = (h % 8 == 0) ? 1 + (size_t)(hw_mix(h) % 65536) : (size_t)(hw_mix(h) % 600);
    for (size_t j = 0; j < n; j++)
        tok[j] = (int32_t)(hw_mix(h ^ (j + 1)) % 262144);
    *text_len = (k % 2) ? (size_t)snprintf(text, 64, "response %llu", (unsigned long long)k) : 0;
    return n;
}

/* The forked-function writer: the tool's loop, reporting on fd. */
static void writer_child(const char *path, int fd, bool sync) {
    struct sd_history_params p = sd_history_default_params();
    p.max_bytes = 0;
    p.fsync = sync;
    struct sd_history *h = NULL;
    if (sd_history_open(path, &p, &h, NULL)) _exit(1);
    int32_t *tok = malloc(65536 * sizeof *tok);
    char text[64], line[32];
    for (;;) {
        size_t tl;
        uint64_t k = sd_history_n_records(h);
        size_t n = hw_record(k, tok, text, &tl);
        if (sd_history_append(h, tok, n, tl ? text : NULL, tl, NULL)) _exit(1);
        int len = snprintf(line, sizeof line, "%zu\n", sd_history_n_records(h));
        if (write(fd, line, (size_t)len) != len) _exit(1);
    }
}

static const char *writer_tool(void) {
    static char path[512];
    const char *env = getenv("SDNPU_HISTORY_WRITER");
    if (env && access(env, X_OK) == 0) return env;
#ifdef SD_BUILD_DIR
    snprintf(path, sizeof path, "%s/tests/history_writer", SD_BUILD_DIR);
    if (access(path, X_OK) == 0) return path;
#endif
    (void)path;
    return NULL;
}

/* One round: start a writer on path, let it report at least `min` records,
 * wait a random while, SIGKILL it, and return the last count it reported. */
static long crash_round(const char *path, const char *tool, bool sync, uint64_t *rng, bool *killed) {
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(pfd[0]);
        if (tool) {
            if (dup2(pfd[1], 1) < 0) _exit(1);
            execl(tool, tool, path, "-1", sync ? "1" : "0", (char *)NULL);
            _exit(127);
        }
        writer_child(path, pfd[1], sync);
        _exit(0);
    }
    close(pfd[1]);
    FILE *in = fdopen(pfd[0], "r");
    long last = 0, v;
    long min = 1 + (long)(sdt_rand_u64(rng) % 20);
    long start = -1;
    while (fscanf(in, "%ld", &v) == 1) {
        if (start < 0) start = v;
        last = v;
        if (last - start + 1 >= min) break;
    }
    /* A random moment: often inside the next write or fsync. */
    struct timespec ts = {0, (long)(sdt_rand_u64(rng) % 3000) * 1000};
    nanosleep(&ts, NULL);
    *killed = kill(pid, SIGKILL) == 0;
    while (fscanf(in, "%ld", &v) == 1)
        last = v;
    fclose(in);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFSIGNALED(status)) fail_msg("writer exited with status %d before the kill", WEXITSTATUS(status));
    return last;
}

static void crash_test(const char *tool, int rounds, uint64_t seed) {
    const char *path = tmp_path();
    uint64_t rng = seed;
    int32_t *tok = malloc(65536 * sizeof *tok);
    char text[64];
    int torn = 0;
    for (int round = 0; round < rounds; round++) {
        bool killed;
        /* Without fsync the writer spends its time in write(), so kills
         * land inside one more often and leave torn tails to heal. */
        bool sync = round % 2 == 0;
        long reported = crash_round(path, tool, sync, &rng, &killed);
        assert_true(killed);
        struct sd_history_params p = sd_history_default_params();
        p.max_bytes = 0;
        struct sd_history *h = open_ok(path, &p);
        size_t n = sd_history_n_records(h);
        /* Everything reported is there; at most one more record finished
         * between its write and the report. */
        if ((long)n < reported || (long)n > reported + 1)
            fail_msg("round %d: %zu records, writer reported %ld", round, n, reported);
        for (size_t k = 0; k < n; k++) {
            size_t tl;
            size_t m = hw_record(k, tok, text, &tl);
            struct sd_history_record r;
            assert_int_equal(sd_history_record(h, k, &r), SDNPU_OK);
            if (r.n_tok != m || memcmp(r.tok, tok, m * sizeof *tok) != 0 || r.text_len != tl ||
                memcmp(r.text, text, tl) != 0)
                fail_msg("round %d: record %zu differs from what was written", round, k);
        }
        torn += sd_history_report(h)->bad_offset >= 0;
        assert_int_equal(file_size(path), sd_history_bytes(h)); /* healed before the next writer */
        sd_history_close(h);
    }
    print_message("crash test (%s): %d rounds, %d left a torn tail\n", tool ? "history_writer" : "fork",
                  rounds, torn);
    free(tok);
    cleanup(path);
}

static void test_crash_forked(void **state) {
    (void)state;
    crash_test(NULL, 8, 11);
}

static void test_crash_tool(void **state) {
    (void)state;
    const char *tool = writer_tool();
    if (!tool) {
        print_message("history_writer not built (set SDNPU_HISTORY_WRITER): skipped\n");
        skip();
    }
    crash_test(tool, 8, 12);
}

/* ------------------------------------------------------------ I/O faults */

/* The fault the fake system calls give once armed (then they disarm). */
enum fault { F_SHORT, F_ENOSPC, F_EIO, F_FSYNC, F_SHORT_NO_CUT, F_N };
static enum fault g_fault;
static bool g_armed, g_half_written;

static ssize_t fake_write(int fd, const void *b, size_t n) {
    if (!g_armed || g_fault == F_FSYNC) return write(fd, b, n);
    if ((g_fault == F_SHORT || g_fault == F_SHORT_NO_CUT) && !g_half_written && n > 1) {
        /* Half the record reaches the disk, then the disk is full. */
        g_half_written = true;
        ssize_t w = write(fd, b, n / 2);
        if (w > 0) return w;
    }
    errno = g_fault == F_EIO ? EIO : ENOSPC;
    return -1;
}

static int fake_fsync(int fd) {
    if (g_armed && g_fault == F_FSYNC) {
        errno = EIO;
        return -1;
    }
    return fsync(fd);
}

static int fake_ftruncate(int fd, off_t len) {
    if (g_armed && g_fault == F_SHORT_NO_CUT) {
        errno = EIO;
        return -1;
    }
    return ftruncate(fd, len);
}

/* Each fault during the 4th append: the append fails with SDNPU_ERR_IO,
 * the history goes on working (a 5th append succeeds), and on the next
 * open exactly the acknowledged records 1, 2, 3 and 5 load, whole. When
 * even cutting the failed record back fails (F_SHORT_NO_CUT), its half
 * stays on disk and the next open skips it as damage. */
static void test_io_faults(void **state) {
    (void)state;
    static const struct sd_history_io fake = {fake_write, fake_fsync, fake_ftruncate};
    static const char *names[F_N] = {"short write", "ENOSPC", "EIO", "fsync", "short write, cut fails"};
    sd_history_set_io(&fake);
    for (int f = 0; f < F_N; f++) {
        const char *path = tmp_path();
        struct sd_history_params hp = sd_history_default_params();
        struct sd_history *h;
        struct sd_err err = {0};
        assert_int_equal(sd_history_open(path, &hp, &h, &err), SDNPU_OK);
        int32_t tok[40];
        for (int r = 1; r <= 5; r++) {
            for (int i = 0; i < 40; i++) tok[i] = r * 100 + i;
            g_fault = (enum fault)f;
            g_armed = r == 4;
            g_half_written = false;
            int rc = sd_history_append(h, tok, 40, "text", 4, &err);
            g_armed = false;
            if (rc != (r == 4 ? SDNPU_ERR_IO : SDNPU_OK))
                fail_msg("%s: append %d gave %d (%s)", names[f], r, rc, err.msg);
            if (r == 4) assert_non_null(strstr(err.msg, "append"));
        }
        assert_int_equal(sd_history_n_records(h), 4);
        sd_history_close(h);
        assert_int_equal(sd_history_open(path, &hp, &h, &err), SDNPU_OK);
        static const int want[4] = {1, 2, 3, 5};
        if (sd_history_n_records(h) != 4) fail_msg("%s: %zu records after reopening", names[f], sd_history_n_records(h));
        for (size_t i = 0; i < 4; i++) {
            struct sd_history_record rec;
            assert_int_equal(sd_history_record(h, i, &rec), SDNPU_OK);
            assert_int_equal(rec.n_tok, 40);
            for (int k = 0; k < 40; k++) assert_int_equal(rec.tok[k], want[i] * 100 + k);
            assert_string_equal(rec.text, "text");
        }
        bool damaged = sd_history_report(h)->bad_offset >= 0;
        if (damaged != (f == F_SHORT_NO_CUT)) fail_msg("%s: damage reported: %d", names[f], damaged);
        sd_history_close(h);
        unlink(path);
    }
    sd_history_set_io(NULL);
}

int main(void) {
    sdt_alloc_install();
    sdnpu_log_set(capture_log, NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32),          cmocka_unit_test(test_layout),
        cmocka_unit_test(test_round_trip),     cmocka_unit_test(test_torn_tail_every_offset),
        cmocka_unit_test(test_corrupt_middle), cmocka_unit_test(test_bad_content),
        cmocka_unit_test(test_bad_args),       cmocka_unit_test(test_eviction),
        cmocka_unit_test(test_to_sam),         cmocka_unit_test(test_alloc_failure_sweep),
        cmocka_unit_test(test_crash_forked),   cmocka_unit_test(test_crash_tool),
        cmocka_unit_test(test_io_faults),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
