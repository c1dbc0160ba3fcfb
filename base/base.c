/* base/base.c - allocator hook, error records, logging, clock. */
#define _GNU_SOURCE
#include "base.h"

#include <math.h>
#include <stdio.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------ allocation */

static void *libc_malloc(size_t size, void *user) {
    (void)user;
    return malloc(size);
}
static void *libc_realloc(void *ptr, size_t size, void *user) {
    (void)user;
    return realloc(ptr, size);
}
static void libc_free(void *ptr, void *user) {
    (void)user;
    free(ptr);
}

static struct sdnpu_allocator g_alloc = {libc_malloc, libc_realloc, libc_free, NULL};

void sdnpu_allocator_set(const struct sdnpu_allocator *alloc) {
    if (alloc && alloc->malloc_fn && alloc->realloc_fn && alloc->free_fn) {
        g_alloc = *alloc;
    } else {
        g_alloc = (struct sdnpu_allocator){libc_malloc, libc_realloc, libc_free, NULL};
    }
}

void sd_heap_trim(void) {
#if defined(__GLIBC__)
    if (g_alloc.malloc_fn == libc_malloc) malloc_trim(0);
#endif
}

void *sd_malloc(size_t size) { return g_alloc.malloc_fn(size ? size : 1, g_alloc.user); }

/* total zeroed bytes. The C library's calloc leaves a block it maps fresh
 * from the system untouched, its pages zero until first written (glibc:
 * every block past the mmap threshold, which is at most 32 MiB), so such a
 * buffer costs memory and time only as it fills; an application's
 * allocator has no calloc, and its blocks are zeroed here. */
static void *zeroed(size_t total) {
    if (g_alloc.malloc_fn == libc_malloc) return calloc(1, total ? total : 1);
    void *p = sd_malloc(total);
    if (p) memset(p, 0, total);
    return p;
}

void *sd_calloc(size_t count, size_t size) {
    size_t total;
    if (sd_mul_ovf_size(count, size, &total)) return NULL;
    return zeroed(total);
}

void *sd_realloc(void *ptr, size_t size) { return g_alloc.realloc_fn(ptr, size ? size : 1, g_alloc.user); }

void sd_free(void *ptr) {
    if (ptr) g_alloc.free_fn(ptr, g_alloc.user);
}

char *sd_strndup(const char *s, size_t n) {
    char *d = sd_malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

char *sd_strdup(const char *s) { return sd_strndup(s, strlen(s)); }

/* The aligned block keeps the pointer the allocator returned just before the
 * aligned address, so sd_aligned_free can hand it back. raw holds size +
 * ALIGN_PAD bytes. */
#define ALIGN_PAD ((size_t)64 + sizeof(void *))

static void *aligned_in(unsigned char *raw) {
    if (!raw) return NULL;
    uintptr_t a = ((uintptr_t)raw + sizeof(void *) + 63) & ~(uintptr_t)63;
    ((void **)a)[-1] = raw;
    return (void *)a;
}

void *sd_aligned_alloc(size_t size) {
    size_t total;
    if (__builtin_add_overflow(size, ALIGN_PAD, &total)) return NULL;
    return aligned_in(sd_malloc(total));
}

void *sd_aligned_zalloc(size_t size) {
    size_t total;
    if (__builtin_add_overflow(size, ALIGN_PAD, &total)) return NULL;
    return aligned_in(zeroed(total));
}

void sd_aligned_free(void *ptr) {
    if (ptr) sd_free(((void **)ptr)[-1]);
}

void sd_advise_huge_pages(void *p, size_t n) {
#ifdef MADV_HUGEPAGE
    const uintptr_t huge = (uintptr_t)2 << 20;
    uintptr_t a = ((uintptr_t)p + huge - 1) & ~(huge - 1), e = ((uintptr_t)p + n) & ~(huge - 1);
    if (e > a) (void)madvise((void *)a, e - a, MADV_HUGEPAGE);
#else
    (void)p;
    (void)n;
#endif
}

long long sd_smaps_bytes(const void *p, const char *field) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    char line[4608]; /* a whole line: a mapping's path is at most 4,096 bytes */
    const size_t fl = strlen(field);
    long long kb = -1;
    bool in = false;
    while (fgets(line, sizeof line, f)) {
        unsigned long long a, b;
        char dash;
        if (sscanf(line, "%llx%c%llx ", &a, &dash, &b) == 3 && dash == '-') {
            if (in) break; /* the next mapping */
            in = (uintptr_t)p >= a && (uintptr_t)p < b;
        } else if (in && !strncmp(line, field, fl) && line[fl] == ':' &&
                   sscanf(line + fl + 1, "%lld kB", &kb) == 1) {
            break;
        }
    }
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

long long sd_mapped_huge_bytes(const void *p) { return sd_smaps_bytes(p, "FilePmdMapped"); }

void sd_drop_pages(const void *p, size_t n) {
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)p + page - 1) & ~(page - 1), e = ((uintptr_t)p + n) & ~(page - 1);
    if (e > a) (void)madvise((void *)a, e - a, MADV_DONTNEED);
}

/* ---------------------------------------------------------------- errors */

int sd_err_set(struct sd_err *err, int status, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->status = status;
    }
    return status;
}

void sd_err_prefix(struct sd_err *err, const char *fmt, ...) {
    if (!err) return;
    char pre[SD_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    char old[SD_ERR_MSG_MAX];
    memcpy(old, err->msg, sizeof old);
    /* Both parts fit the record only when short; the message is cut at the
     * record's size, which is what a reader sees anyway. */
    size_t n = strnlen(pre, sizeof err->msg - 3);
    memcpy(err->msg, pre, n);
    memcpy(err->msg + n, ": ", 2);
    size_t room = sizeof err->msg - n - 3;
    size_t m = strnlen(old, room);
    memcpy(err->msg + n + 2, old, m);
    err->msg[n + 2 + m] = '\0';
}

void sd_err_clear(struct sd_err *err) {
    if (err) {
        err->status = 0;
        err->msg[0] = '\0';
    }
}

const char *sdnpu_status_str(enum sdnpu_status status) {
    switch (status) {
    case SDNPU_OK: return "SDNPU_OK";
    case SDNPU_ERR_INVALID_ARG: return "SDNPU_ERR_INVALID_ARG";
    case SDNPU_ERR_IO: return "SDNPU_ERR_IO";
    case SDNPU_ERR_FORMAT: return "SDNPU_ERR_FORMAT";
    case SDNPU_ERR_UNSUPPORTED: return "SDNPU_ERR_UNSUPPORTED";
    case SDNPU_ERR_OOM: return "SDNPU_ERR_OOM";
    case SDNPU_ERR_CONTEXT_FULL: return "SDNPU_ERR_CONTEXT_FULL";
    case SDNPU_ERR_BUFFER_TOO_SMALL: return "SDNPU_ERR_BUFFER_TOO_SMALL";
    case SDNPU_ERR_INVALID_UTF8: return "SDNPU_ERR_INVALID_UTF8";
    case SDNPU_ERR_NOT_FOUND: return "SDNPU_ERR_NOT_FOUND";
    case SDNPU_ERR_BACKEND: return "SDNPU_ERR_BACKEND";
    case SDNPU_ERR_STATE: return "SDNPU_ERR_STATE";
    case SDNPU_ABORTED: return "SDNPU_ABORTED";
    }
    return "SDNPU_(unknown status)";
}

const char *sdnpu_version(void) { return "0.1.0"; }

/* ------------------------------------------------------------------- log */

static void default_log(enum sdnpu_log_level level, const char *msg, void *user) {
    (void)user;
    static const char *names[] = {"error", "warning", "info", "debug"};
    const char *env = getenv("SDNPU_LOG");
    int max = env ? atoi(env) : SDNPU_LOG_WARN;
    if ((int)level <= max) fprintf(stderr, "sdnpu: %s: %s\n", names[level & 3], msg);
}

static sdnpu_log_cb g_log = default_log;
static void *g_log_user;

void sdnpu_log_set(sdnpu_log_cb cb, void *user) {
    g_log = cb ? cb : default_log;
    g_log_user = cb ? user : NULL;
}

void sd_log(enum sdnpu_log_level level, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    g_log(level, buf, g_log_user);
}

/* ----------------------------------------------------------------- time */

double sd_time_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

int sd_n_cores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

size_t sd_peak_rss(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (size_t)ru.ru_maxrss * 1024u;
}

/* ---------------------------------------------------------------- argmax */

void sd_amax_init(struct sd_amax *a) {
    a->v = -INFINITY;
    a->i = -1;
    a->nan0 = false;
}

/* Eight running maxima, then the first index holding their maximum: the
 * answer of one running argmax without its chain of dependent compares. */
void sd_amax_scan(struct sd_amax *a, const float *x, int64_t n, int64_t i0) {
    if (n <= 0) return;
    if (i0 == 0 && x[0] != x[0]) a->nan0 = true;
    float m[8];
    for (int k = 0; k < 8; k++) m[k] = -INFINITY;
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int k = 0; k < 8; k++) m[k] = x[j + k] > m[k] ? x[j + k] : m[k];
    for (; j < n; j++) m[0] = x[j] > m[0] ? x[j] : m[0];
    float best = m[0];
    for (int k = 1; k < 8; k++) best = m[k] > best ? m[k] : best;
    if (a->i >= 0 && !(best > a->v)) return; /* an earlier index keeps ties */
    for (j = 0; j < n; j++)
        if (x[j] == best) {
            a->v = best;
            a->i = (int32_t)(i0 + j);
            return;
        }
}

void sd_amax_merge(struct sd_amax *a, const struct sd_amax *b) {
    a->nan0 = a->nan0 || b->nan0;
    if (b->i >= 0 && (a->i < 0 || b->v > a->v || (b->v == a->v && b->i < a->i))) {
        a->v = b->v;
        a->i = b->i;
    }
}

int32_t sd_amax_index(const struct sd_amax *a) { return a->nan0 || a->i < 0 ? 0 : a->i; }

int32_t sd_amax_of(const float *x, int64_t n) {
    struct sd_amax a;
    sd_amax_init(&a);
    sd_amax_scan(&a, x, n, 0);
    return sd_amax_index(&a);
}
