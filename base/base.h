/*
 * base/base.h - the primitives every sdnpu folder uses: the allocator hook,
 * error records, logging, overflow-checked arithmetic, a clock, and the
 * greedy choice (argmax) of a vector scanned in pieces.
 *
 * Why a folder of its own: DESIGN.md lets a folder reach another only through
 * its header, and these pieces are needed by all of them (the GGUF reader,
 * the graph backends, the drafters), so they live below all of them.
 */
#ifndef SD_BASE_H
#define SD_BASE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sdnpu.h"

#if defined(__GNUC__)
#define SD_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define SD_UNUSED __attribute__((unused))
#else
#define SD_PRINTF(a, b)
#define SD_UNUSED
#endif

#define SD_MIN(a, b) ((a) < (b) ? (a) : (b))
#define SD_MAX(a, b) ((a) > (b) ? (a) : (b))
#define SD_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ------------------------------------------------------------ allocation */

/* All heap memory goes through these, so sdnpu_allocator_set() and the
 * failure-injection tests see every allocation. sd_malloc(0) returns a
 * unique non-NULL pointer. */
void *sd_malloc(size_t size);
void *sd_calloc(size_t count, size_t size); /* overflow-checked, zeroed */
void *sd_realloc(void *ptr, size_t size);
void sd_free(void *ptr);
char *sd_strdup(const char *s);
char *sd_strndup(const char *s, size_t n);
/* Hand the heap's free pages back to the system where the C library can
 * (glibc's malloc_trim; nothing under another C library or an allocator of
 * the application's): after a large structure was replaced by a smaller
 * one, what the heap kept of it stays counted in the process's memory
 * otherwise (about half of a shrunk session's cache: docs/benchmarks.md,
 * "A grown context given back"). Costs a walk of the heap. */
void sd_heap_trim(void);
/* 64-byte aligned memory for kernels; free with sd_aligned_free. */
void *sd_aligned_alloc(size_t size);
/* The same, zeroed; where the C library's allocator is in use a large
 * block's pages are the system's zero pages until written, so memory and
 * time grow with what is written, not with size (the KV cache). */
void *sd_aligned_zalloc(size_t size);
void sd_aligned_free(void *ptr);
/* Ask for transparent huge pages over the whole 2 MiB pages of [p, p + n)
 * (where the system leaves them to madvise), before the memory is first
 * touched: a buffer read once a pass (weights, the KV cache) then takes one
 * page fault and one TLB entry per 2 MiB instead of per 4 KiB. A refusal
 * changes nothing but speed. */
void sd_advise_huge_pages(void *p, size_t n);
/* Give back the whole pages inside [p, p + n) (the pages at its ends may
 * hold other data): they leave the process's resident memory. In a
 * private read-only file mapping a later read faults them in again from
 * the file; in allocated memory it would read zeros, so there only pages
 * nothing reads again may go (a spare certificate's, graphs/weights.c). */
void sd_drop_pages(const void *p, size_t n);
/* Bytes of the file mapping that holds p mapped in 2 MiB pages
 * (FilePmdMapped in /proc/self/smaps), or -1 where the system does not
 * say. */
long long sd_mapped_huge_bytes(const void *p);
/* The same for any field of /proc/self/smaps counted in kB (for anonymous
 * memory in 2 MiB pages, "AnonHugePages"), of the mapping that holds p. */
long long sd_smaps_bytes(const void *p, const char *field);

/* ---------------------------------------------------------------- errors */

#define SD_ERR_MSG_MAX 512

/* An error record owned by whoever asked for the work (a handle, a test).
 * Internal functions take a `struct sd_err *` (may be NULL) and return an
 * enum sdnpu_status; on failure they fill the record. */
struct sd_err {
    int status;
    char msg[SD_ERR_MSG_MAX];
};

/* Fill err (if not NULL) and return status, so call sites read
 *     return sd_err_set(err, SDNPU_ERR_FORMAT, "tensor %s: ...", name);
 */
int sd_err_set(struct sd_err *err, int status, const char *fmt, ...) SD_PRINTF(3, 4);
/* Put "prefix: " in front of the message already in err. */
void sd_err_prefix(struct sd_err *err, const char *fmt, ...) SD_PRINTF(2, 3);
void sd_err_clear(struct sd_err *err);

/* ------------------------------------------------------------------- log */

void sd_log(enum sdnpu_log_level level, const char *fmt, ...) SD_PRINTF(2, 3);
#define SD_LOGE(...) sd_log(SDNPU_LOG_ERROR, __VA_ARGS__)
#define SD_LOGW(...) sd_log(SDNPU_LOG_WARN, __VA_ARGS__)
#define SD_LOGI(...) sd_log(SDNPU_LOG_INFO, __VA_ARGS__)
#define SD_LOGD(...) sd_log(SDNPU_LOG_DEBUG, __VA_ARGS__)

/* -------------------------------------------------- checked arithmetic */

static inline bool sd_add_ovf(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_add_overflow(a, b, out);
}
static inline bool sd_mul_ovf(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_mul_overflow(a, b, out);
}
static inline bool sd_mul_ovf_size(size_t a, size_t b, size_t *out) {
    return __builtin_mul_overflow(a, b, out);
}

/* ------------------------------------------- little-endian file fields */

/* The fields of sdnpu's own file formats (the weight cache, saved
 * sessions), stored little-endian as the machines it runs on are. */
static inline void sd_put32(uint8_t *p, uint32_t v) { __builtin_memcpy(p, &v, 4); }
static inline void sd_put64(uint8_t *p, uint64_t v) { __builtin_memcpy(p, &v, 8); }
static inline uint32_t sd_get32(const uint8_t *p) {
    uint32_t v;
    __builtin_memcpy(&v, p, 4);
    return v;
}
static inline uint64_t sd_get64(const uint8_t *p) {
    uint64_t v;
    __builtin_memcpy(&v, p, 8);
    return v;
}

/* ----------------------------------------------------------------- time */

/* Monotonic milliseconds. */
double sd_time_ms(void);

/* Number of online CPU cores (at least 1). */
int sd_n_cores(void);

/* Peak resident set size of this process in bytes (0 if unknown). */
size_t sd_peak_rss(void);

/* --------------------------------------------------------------- argmax */

/* The greedy token: the first index of the largest value, NaNs never
 * winning, except that a NaN at index 0 does (nothing compares greater
 * than it). One definition for sample/'s sd_argmax over a whole vector and
 * for the heads that take each row's argmax piece by piece while its
 * logits are still in cache: they must agree bit for bit, or speculative
 * output would differ from plain greedy output. */
struct sd_amax {
    float v;   /* the largest value so far */
    int32_t i; /* its first index; -1 while every value seen was NaN */
    bool nan0; /* the value at index 0 was NaN */
};
void sd_amax_init(struct sd_amax *a);
/* Values x[0 .. n) at indices i0 .. i0 + n, all after the indices seen. */
void sd_amax_scan(struct sd_amax *a, const float *x, int64_t n, int64_t i0);
/* Fold in b, a scan of other indices, before or after a's: the larger
 * value, the smaller index of a tie, so that threads that took a head's
 * pieces in any order agree with one scan of them all. */
void sd_amax_merge(struct sd_amax *a, const struct sd_amax *b);
/* The chosen index (0 where index 0 was NaN or nothing was seen). */
int32_t sd_amax_index(const struct sd_amax *a);
/* The chosen index of x[0 .. n) in one scan. */
int32_t sd_amax_of(const float *x, int64_t n);

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

/* Length of the longest prefix of buf[0..n) that ends on a whole UTF-8
 * sequence: a stream holds back the bytes of a character not finished yet.
 * Only the tail is looked at; bytes that can never form a character count
 * as whole (they are let through to be replaced where text must be valid). */
size_t sd_utf8_complete(const char *buf, size_t n);

/* A NUL-terminated copy of s[0..n) with every ill-formed subpart replaced
 * by U+FFFD, from sd_malloc (free with sd_free); NULL when out of memory.
 * *out_len (if not NULL) is its length without the NUL. */
char *sd_utf8_clean(const char *s, size_t n, size_t *out_len);

#endif /* SD_BASE_H */
