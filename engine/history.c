/*
 * engine/history.c - the history store: crash-safe append-only record file,
 * damage detection and healing on load, eviction of the oldest records by
 * atomic rewrite, and feeding records to a suffix automaton (history.h).
 */
#include "engine/history.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* Files beyond this are refused rather than read into memory: a history is
 * bounded by max_bytes (8 MiB by default), so a 1 GiB file is not one. */
#define HIST_MAX_FILE ((uint64_t)1 << 30)

/* ---------------------------------------------------------------- CRC-32 */

/* The table for the reflected polynomial 0xEDB88320 (zlib's CRC-32), kept as
 * a constant so there is no lazy initialization to race on. */
static const uint32_t crc_table[256] = {
    0x00000000u, 0x77073096u, 0xee0e612cu, 0x990951bau, 0x076dc419u, 0x706af48fu, 0xe963a535u, 0x9e6495a3u,
    0x0edb8832u, 0x79dcb8a4u, 0xe0d5e91eu, 0x97d2d988u, 0x09b64c2bu, 0x7eb17cbdu, 0xe7b82d07u, 0x90bf1d91u,
    0x1db71064u, 0x6ab020f2u, 0xf3b97148u, 0x84be41deu, 0x1adad47du, 0x6ddde4ebu, 0xf4d4b551u, 0x83d385c7u,
    0x136c9856u, 0x646ba8c0u, 0xfd62f97au, 0x8a65c9ecu, 0x14015c4fu, 0x63066cd9u, 0xfa0f3d63u, 0x8d080df5u,
    0x3b6e20c8u, 0x4c69105eu, 0xd56041e4u, 0xa2677172u, 0x3c03e4d1u, 0x4b04d447u, 0xd20d85fdu, 0xa50ab56bu,
    0x35b5a8fau, 0x42b2986cu, 0xdbbbc9d6u, 0xacbcf940u, 0x32d86ce3u, 0x45df5c75u, 0xdcd60dcfu, 0xabd13d59u,
    0x26d930acu, 0x51de003au, 0xc8d75180u, 0xbfd06116u, 0x21b4f4b5u, 0x56b3c423u, 0xcfba9599u, 0xb8bda50fu,
    0x2802b89eu, 0x5f058808u, 0xc60cd9b2u, 0xb10be924u, 0x2f6f7c87u, 0x58684c11u, 0xc1611dabu, 0xb6662d3du,
    0x76dc4190u, 0x01db7106u, 0x98d220bcu, 0xefd5102au, 0x71b18589u, 0x06b6b51fu, 0x9fbfe4a5u, 0xe8b8d433u,
    0x7807c9a2u, 0x0f00f934u, 0x9609a88eu, 0xe10e9818u, 0x7f6a0dbbu, 0x086d3d2du, 0x91646c97u, 0xe6635c01u,
    0x6b6b51f4u, 0x1c6c6162u, 0x856530d8u, 0xf262004eu, 0x6c0695edu, 0x1b01a57bu, 0x8208f4c1u, 0xf50fc457u,
    0x65b0d9c6u, 0x12b7e950u, 0x8bbeb8eau, 0xfcb9887cu, 0x62dd1ddfu, 0x15da2d49u, 0x8cd37cf3u, 0xfbd44c65u,
    0x4db26158u, 0x3ab551ceu, 0xa3bc0074u, 0xd4bb30e2u, 0x4adfa541u, 0x3dd895d7u, 0xa4d1c46du, 0xd3d6f4fbu,
    0x4369e96au, 0x346ed9fcu, 0xad678846u, 0xda60b8d0u, 0x44042d73u, 0x33031de5u, 0xaa0a4c5fu, 0xdd0d7cc9u,
    0x5005713cu, 0x270241aau, 0xbe0b1010u, 0xc90c2086u, 0x5768b525u, 0x206f85b3u, 0xb966d409u, 0xce61e49fu,
    0x5edef90eu, 0x29d9c998u, 0xb0d09822u, 0xc7d7a8b4u, 0x59b33d17u, 0x2eb40d81u, 0xb7bd5c3bu, 0xc0ba6cadu,
    0xedb88320u, 0x9abfb3b6u, 0x03b6e20cu, 0x74b1d29au, 0xead54739u, 0x9dd277afu, 0x04db2615u, 0x73dc1683u,
    0xe3630b12u, 0x94643b84u, 0x0d6d6a3eu, 0x7a6a5aa8u, 0xe40ecf0bu, 0x9309ff9du, 0x0a00ae27u, 0x7d079eb1u,
    0xf00f9344u, 0x8708a3d2u, 0x1e01f268u, 0x6906c2feu, 0xf762575du, 0x806567cbu, 0x196c3671u, 0x6e6b06e7u,
    0xfed41b76u, 0x89d32be0u, 0x10da7a5au, 0x67dd4accu, 0xf9b9df6fu, 0x8ebeeff9u, 0x17b7be43u, 0x60b08ed5u,
    0xd6d6a3e8u, 0xa1d1937eu, 0x38d8c2c4u, 0x4fdff252u, 0xd1bb67f1u, 0xa6bc5767u, 0x3fb506ddu, 0x48b2364bu,
    0xd80d2bdau, 0xaf0a1b4cu, 0x36034af6u, 0x41047a60u, 0xdf60efc3u, 0xa867df55u, 0x316e8eefu, 0x4669be79u,
    0xcb61b38cu, 0xbc66831au, 0x256fd2a0u, 0x5268e236u, 0xcc0c7795u, 0xbb0b4703u, 0x220216b9u, 0x5505262fu,
    0xc5ba3bbeu, 0xb2bd0b28u, 0x2bb45a92u, 0x5cb36a04u, 0xc2d7ffa7u, 0xb5d0cf31u, 0x2cd99e8bu, 0x5bdeae1du,
    0x9b64c2b0u, 0xec63f226u, 0x756aa39cu, 0x026d930au, 0x9c0906a9u, 0xeb0e363fu, 0x72076785u, 0x05005713u,
    0x95bf4a82u, 0xe2b87a14u, 0x7bb12baeu, 0x0cb61b38u, 0x92d28e9bu, 0xe5d5be0du, 0x7cdcefb7u, 0x0bdbdf21u,
    0x86d3d2d4u, 0xf1d4e242u, 0x68ddb3f8u, 0x1fda836eu, 0x81be16cdu, 0xf6b9265bu, 0x6fb077e1u, 0x18b74777u,
    0x88085ae6u, 0xff0f6a70u, 0x66063bcau, 0x11010b5cu, 0x8f659effu, 0xf862ae69u, 0x616bffd3u, 0x166ccf45u,
    0xa00ae278u, 0xd70dd2eeu, 0x4e048354u, 0x3903b3c2u, 0xa7672661u, 0xd06016f7u, 0x4969474du, 0x3e6e77dbu,
    0xaed16a4au, 0xd9d65adcu, 0x40df0b66u, 0x37d83bf0u, 0xa9bcae53u, 0xdebb9ec5u, 0x47b2cf7fu, 0x30b5ffe9u,
    0xbdbdf21cu, 0xcabac28au, 0x53b39330u, 0x24b4a3a6u, 0xbad03605u, 0xcdd70693u, 0x54de5729u, 0x23d967bfu,
    0xb3667a2eu, 0xc4614ab8u, 0x5d681b02u, 0x2a6f2b94u, 0xb40bbe37u, 0xc30c8ea1u, 0x5a05df1bu, 0x2d02ef8du,
};

uint32_t sd_crc32(uint32_t crc, const void *data, size_t n) {
    const uint8_t *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++)
        crc = crc_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

/* -------------------------------------------------------------- records */

static inline void put_u32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static inline uint32_t get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* One record in memory: a single block holding the header, the tokens and
 * a NUL-terminated copy of the text. */
struct hist_rec {
    size_t n_tok;
    size_t text_len;
    int32_t *tok; /* [n_tok], inside this block */
    char *text;   /* [text_len + 1], inside this block */
};

static uint64_t rec_bytes(size_t n_tok, size_t text_len) {
    return SD_HISTORY_RECORD_OVERHEAD + 4 * (uint64_t)n_tok + text_len;
}

static struct hist_rec *rec_new(size_t n_tok, size_t text_len) {
    struct hist_rec *r = sd_malloc(sizeof *r + n_tok * sizeof(int32_t) + text_len + 1);
    if (!r) return NULL;
    r->n_tok = n_tok;
    r->text_len = text_len;
    r->tok = (int32_t *)(r + 1);
    r->text = (char *)(r->tok + n_tok);
    r->text[text_len] = '\0';
    return r;
}

/* Encode r into buf[rec_bytes(r)]: the layout of history.h. */
static void rec_encode(const struct hist_rec *r, uint8_t *buf) {
    uint32_t payload = (uint32_t)(8 + 4 * r->n_tok + r->text_len);
    put_u32(buf, SD_HISTORY_MAGIC);
    put_u32(buf + 4, payload);
    put_u32(buf + 8, (uint32_t)r->n_tok);
    put_u32(buf + 12, (uint32_t)r->text_len);
    uint8_t *q = buf + 16;
    for (size_t i = 0; i < r->n_tok; i++, q += 4)
        put_u32(q, (uint32_t)r->tok[i]);
    memcpy(q, r->text, r->text_len);
    put_u32(buf + 8 + payload, sd_crc32(0, buf, 8 + (size_t)payload));
}

/* Check the record starting at buf (avail bytes left in the file). Returns
 * its encoded length, or 0 and a reason. Only a record that passes every
 * check is used, so damage anywhere in it (header, payload, CRC) is caught:
 * the CRC covers the header too. */
static size_t rec_check(const uint8_t *buf, size_t avail, const char **why) {
    if (avail < 4) return *why = "short record header", 0;
    if (get_u32(buf) != SD_HISTORY_MAGIC) return *why = "bad magic", 0;
    if (avail < 8) return *why = "short record header", 0;
    uint32_t payload = get_u32(buf + 4);
    if (payload < 8 || payload > SD_HISTORY_MAX_PAYLOAD) return *why = "impossible payload length", 0;
    if ((uint64_t)payload + 12 > avail) return *why = "short record (file ends inside it)", 0;
    uint32_t n_tok = get_u32(buf + 8), text_len = get_u32(buf + 12);
    if (8 + 4 * (uint64_t)n_tok + text_len != payload)
        return *why = "token and text sizes disagree with the length", 0;
    if (get_u32(buf + 8 + payload) != sd_crc32(0, buf, 8 + (size_t)payload)) return *why = "CRC mismatch", 0;
    for (uint32_t i = 0; i < n_tok; i++)
        if (get_u32(buf + 16 + 4 * (size_t)i) > INT32_MAX) return *why = "negative token id", 0;
    return (size_t)payload + 12;
}

static struct hist_rec *rec_decode(const uint8_t *buf) {
    uint32_t n_tok = get_u32(buf + 8), text_len = get_u32(buf + 12);
    struct hist_rec *r = rec_new(n_tok, text_len);
    if (!r) return NULL;
    for (uint32_t i = 0; i < n_tok; i++)
        r->tok[i] = (int32_t)get_u32(buf + 16 + 4 * (size_t)i);
    memcpy(r->text, buf + 16 + 4 * (size_t)n_tok, text_len);
    return r;
}

/* ----------------------------------------------------------------- handle */

struct sd_history {
    char *path;     /* NULL: in memory only */
    char *tmp_path; /* path + ".tmp", the eviction rewrite's scratch file */
    int fd;         /* O_APPEND descriptor of path; -1 in memory */
    struct sd_history_params p;
    struct hist_rec **rec; /* [cap] oldest first */
    size_t n, cap;
    uint64_t bytes; /* encoded size of rec[0..n): the file's length */
    struct sd_history_report report;
};

struct sd_history_params sd_history_default_params(void) {
    struct sd_history_params p = {.max_bytes = 8u << 20, .max_records = 0, .fsync = true};
    return p;
}

static int grow_recs(struct sd_history *h, size_t need, struct sd_err *err) {
    if (need <= h->cap) return SDNPU_OK;
    size_t cap = h->cap ? h->cap : 16;
    while (cap < need)
        cap *= 2;
    struct hist_rec **r = sd_realloc(h->rec, cap * sizeof *r);
    if (!r) return sd_err_set(err, SDNPU_ERR_OOM, "history: out of memory for %zu records", cap);
    h->rec = r;
    h->cap = cap;
    return SDNPU_OK;
}

/* Forget the k oldest records (memory only). */
static void drop_oldest(struct sd_history *h, size_t k) {
    for (size_t i = 0; i < k; i++) {
        h->bytes -= rec_bytes(h->rec[i]->n_tok, h->rec[i]->text_len);
        sd_free(h->rec[i]);
    }
    memmove(h->rec, h->rec + k, (h->n - k) * sizeof *h->rec);
    h->n -= k;
}

/* How many of the oldest records must go so that `extra` more bytes and
 * extra_n more records fit. When a bound is hit, eviction goes down to 3/4
 * of it, so one rewrite pays for many appends. */
static size_t evict_count(const struct sd_history *h, uint64_t extra, size_t extra_n) {
    uint64_t mb = h->p.max_bytes;
    uint64_t mr = h->p.max_records;
    bool over = (mb && h->bytes + extra > mb) || (mr && h->n + extra_n > mr);
    if (!over) return 0;
    uint64_t tb = mb ? SD_MAX(extra, mb / 4 * 3) : UINT64_MAX;
    uint64_t tr = mr ? SD_MAX((uint64_t)extra_n, mr / 4 * 3) : UINT64_MAX;
    size_t k = 0;
    uint64_t bytes = h->bytes;
    while (k < h->n && (bytes + extra > tb || h->n - k + extra_n > tr)) {
        bytes -= rec_bytes(h->rec[k]->n_tok, h->rec[k]->text_len);
        k++;
    }
    return k;
}

/* ------------------------------------------------------------- file I/O */

static const struct sd_history_io real_io = {write, fsync, ftruncate};
static const struct sd_history_io *io = &real_io;

void sd_history_set_io(const struct sd_history_io *hooks) { io = hooks ? hooks : &real_io; }

static int write_all(int fd, const uint8_t *buf, size_t n) {
    while (n > 0) {
        ssize_t w = io->write(fd, buf, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        buf += w;
        n -= (size_t)w;
    }
    return 0;
}

/* fsync the directory holding path, so a rename in it is durable. Some
 * filesystems cannot fsync a directory (EINVAL); there is nothing more to
 * do then. */
static int fsync_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash) {
        dir[0] = '.';
        dir[1] = '\0';
    } else {
        size_t n = slash == path ? 1 : (size_t)(slash - path);
        if (n >= sizeof dir) return 0;
        memcpy(dir, path, n);
        dir[n] = '\0';
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    if (rc < 0 && (errno == EINVAL || errno == ENOTSUP)) rc = 0;
    close(fd);
    return rc;
}

static int open_append(const char *path) { return open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600); }

/* Replace the file by records rec[skip..n) plus `add` (may be NULL): write
 * PATH.tmp, fsync it, rename it over PATH, fsync the directory, reopen. A
 * crash at any point leaves the old file or the new one whole. On failure
 * the old file and descriptor stay in use. */
static int rewrite_file(struct sd_history *h, size_t skip, const struct hist_rec *add, struct sd_err *err) {
    size_t max = add ? (size_t)rec_bytes(add->n_tok, add->text_len) : 0;
    for (size_t i = skip; i < h->n; i++)
        max = SD_MAX(max, (size_t)rec_bytes(h->rec[i]->n_tok, h->rec[i]->text_len));
    uint8_t *buf = sd_malloc(max);
    if (!buf)
        return sd_err_set(err, SDNPU_ERR_OOM, "history %s: out of memory for a %zu-byte record", h->path,
                          max);
    int fd = open(h->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) goto fail_open;
    for (size_t i = skip; i <= h->n; i++) {
        const struct hist_rec *r = i < h->n ? h->rec[i] : add;
        if (!r) break;
        rec_encode(r, buf);
        if (write_all(fd, buf, (size_t)rec_bytes(r->n_tok, r->text_len)) < 0) goto fail_io;
    }
    if (io->fsync(fd) < 0) goto fail_io;
    if (close(fd) < 0) {
        fd = -1;
        goto fail_io;
    }
    fd = -1;
    if (rename(h->tmp_path, h->path) < 0) goto fail_io;
    /* From here the new file is in place; a failed directory fsync only
     * means the rename might not survive a power cut. */
    if (fsync_dir(h->path) < 0)
        SD_LOGW("history %s: fsync of the directory failed: %s", h->path, strerror(errno));
    int nfd = open_append(h->path);
    if (nfd < 0) goto fail_reopen;
    close(h->fd);
    h->fd = nfd;
    sd_free(buf);
    return SDNPU_OK;
fail_reopen:
    sd_free(buf);
    /* The old descriptor now names the unlinked old file; appending there
     * would be lost, so the handle stops writing. */
    close(h->fd);
    h->fd = -1;
    return sd_err_set(err, SDNPU_ERR_IO, "history %s: reopen after rewrite failed: %s", h->path,
                      strerror(errno));
fail_io:
    sd_err_set(err, SDNPU_ERR_IO, "history %s: rewrite via %s failed: %s", h->path, h->tmp_path,
               strerror(errno));
    if (fd >= 0) close(fd);
    unlink(h->tmp_path);
    sd_free(buf);
    return SDNPU_ERR_IO;
fail_open:
    sd_free(buf);
    return sd_err_set(err, SDNPU_ERR_IO, "history %s: cannot create %s: %s", h->path, h->tmp_path,
                      strerror(errno));
}

static int read_file(int fd, const char *path, uint8_t **out, size_t *size, struct sd_err *err) {
    struct stat stb;
    if (fstat(fd, &stb) < 0)
        return sd_err_set(err, SDNPU_ERR_IO, "history %s: stat: %s", path, strerror(errno));
    if ((uint64_t)stb.st_size > HIST_MAX_FILE)
        return sd_err_set(err, SDNPU_ERR_UNSUPPORTED, "history %s: %lld bytes is beyond the %llu-byte limit",
                          path, (long long)stb.st_size, (unsigned long long)HIST_MAX_FILE);
    size_t n = (size_t)stb.st_size;
    uint8_t *buf = sd_malloc(n);
    if (!buf) return sd_err_set(err, SDNPU_ERR_OOM, "history %s: out of memory for %zu bytes", path, n);
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, buf + got, n - got, (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            sd_free(buf);
            return sd_err_set(err, SDNPU_ERR_IO, "history %s: read: %s", path, strerror(errno));
        }
        if (r == 0) break; /* shrank meanwhile: parse what there is */
        got += (size_t)r;
    }
    *out = buf;
    *size = got;
    return SDNPU_OK;
}

static void report_add(struct sd_history_report *rep, const char *fmt, ...) SD_PRINTF(2, 3);
static void report_add(struct sd_history_report *rep, const char *fmt, ...) {
    size_t used = strlen(rep->msg);
    if (used + 3 >= sizeof rep->msg) return;
    if (used) {
        memcpy(rep->msg + used, "; ", 3);
        used += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rep->msg + used, sizeof rep->msg - used, fmt, ap);
    va_end(ap);
}

/* Parse buf into records (see history.h for the damage policy). Sets
 * *middle when a damaged region was skipped with good records after it,
 * *good_end to the end of the last good record. */
static int parse(struct sd_history *h, const uint8_t *buf, size_t size, bool *middle, size_t *good_end,
                 struct sd_err *err) {
    struct sd_history_report *rep = &h->report;
    size_t off = 0;
    /* Resynchronizing CRCs candidate records; a file crafted with many
     * plausible headers could make that quadratic, so the work is capped
     * and whatever is left past the cap counts as a damaged tail. */
    uint64_t resync_budget = 16 * (uint64_t)size + (1u << 20);
    *middle = false;
    while (off < size) {
        const char *why = NULL;
        size_t len = rec_check(buf + off, size - off, &why);
        if (len == 0) {
            /* Resynchronize: the next offset where a whole good record
             * starts. Candidates are found by the magic's first byte. */
            size_t q = off + 1;
            bool found = false;
            const char *why2;
            while (q + SD_HISTORY_RECORD_OVERHEAD <= size) {
                const uint8_t *m = memchr(buf + q, 'S', size - q);
                if (!m) break;
                q = (size_t)(m - buf);
                if (q + SD_HISTORY_RECORD_OVERHEAD > size) break;
                /* Only a magic with a self-consistent header gets as far as
                 * the CRC, so only that is charged. */
                if (get_u32(buf + q) == SD_HISTORY_MAGIC &&
                    get_u32(buf + q + 4) == 8 + 4 * (uint64_t)get_u32(buf + q + 8) + get_u32(buf + q + 12)) {
                    uint64_t cost = SD_MIN((uint64_t)get_u32(buf + q + 4), (uint64_t)(size - q));
                    if (cost > resync_budget) break;
                    resync_budget -= cost;
                }
                if (rec_check(buf + q, size - q, &why2)) {
                    found = true;
                    break;
                }
                q++;
            }
            if (rep->bad_offset < 0) rep->bad_offset = (int64_t)off;
            rep->n_bad_regions++;
            if (found) {
                report_add(
                    rep, "damaged record at byte %zu (%s): skipped %zu bytes to the good record at byte %zu",
                    off, why, q - off, q);
                rep->bytes_dropped += (int64_t)(q - off);
                *middle = true;
                off = q;
                continue;
            }
            report_add(rep, "torn or damaged tail at byte %zu (%s): dropped %zu bytes", off, why, size - off);
            rep->bytes_dropped += (int64_t)(size - off);
            break;
        }
        int rc = grow_recs(h, h->n + 1, err);
        if (rc) return rc;
        struct hist_rec *r = rec_decode(buf + off);
        if (!r)
            return sd_err_set(err, SDNPU_ERR_OOM, "history %s: out of memory for record %zu", h->path, h->n);
        h->rec[h->n++] = r;
        h->bytes += len;
        off += len;
        *good_end = off;
    }
    return SDNPU_OK;
}

/* ------------------------------------------------------------------ API */

int sd_history_open(const char *path, const struct sd_history_params *p, struct sd_history **out,
                    struct sd_err *err) {
    if (!out) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "history: NULL output pointer");
    *out = NULL;
    int rc;
    uint8_t *buf = NULL;
    struct sd_history *h = sd_calloc(1, sizeof *h);
    if (!h) return sd_err_set(err, SDNPU_ERR_OOM, "history: out of memory");
    h->fd = -1;
    h->p = p ? *p : sd_history_default_params();
    h->report.bad_offset = -1;
    if (!path) goto done;

    size_t n = strlen(path);
    h->path = sd_strdup(path);
    h->tmp_path = sd_malloc(n + 5);
    if (!h->path || !h->tmp_path) {
        rc = sd_err_set(err, SDNPU_ERR_OOM, "history: out of memory");
        goto fail;
    }
    memcpy(h->tmp_path, path, n);
    memcpy(h->tmp_path + n, ".tmp", 5);
    h->fd = open_append(path);
    if (h->fd < 0) {
        rc = sd_err_set(err, SDNPU_ERR_IO, "history %s: open: %s", path, strerror(errno));
        goto fail;
    }
    size_t size = 0, good_end = 0;
    bool middle = false;
    rc = read_file(h->fd, path, &buf, &size, err);
    if (rc) goto fail;
    rc = parse(h, buf, size, &middle, &good_end, err);
    if (rc) goto fail;
    sd_free(buf);
    buf = NULL;

    size_t k = evict_count(h, 0, 0);
    if (k) {
        h->report.n_evicted = (int32_t)k;
        SD_LOGI("history %s: evicting the %zu oldest records to fit the bounds", path, k);
    }
    if (middle || k) {
        rc = rewrite_file(h, k, NULL, err);
        if (rc) goto fail;
        drop_oldest(h, k);
        h->report.healed = h->report.bad_offset >= 0;
    } else if (good_end < size) {
        if (io->ftruncate(h->fd, (off_t)good_end) < 0 || (h->p.fsync && io->fsync(h->fd) < 0)) {
            rc = sd_err_set(err, SDNPU_ERR_IO, "history %s: cutting the damaged tail at byte %zu failed: %s",
                            path, good_end, strerror(errno));
            goto fail;
        }
        h->report.healed = true;
    }
    if (h->report.bad_offset >= 0) SD_LOGW("history %s: %s", path, h->report.msg);
done:
    *out = h;
    return SDNPU_OK;
fail:
    sd_free(buf);
    sd_history_close(h);
    return rc;
}

void sd_history_close(struct sd_history *h) {
    if (!h) return;
    if (h->fd >= 0) close(h->fd);
    for (size_t i = 0; i < h->n; i++)
        sd_free(h->rec[i]);
    sd_free(h->rec);
    sd_free(h->path);
    sd_free(h->tmp_path);
    sd_free(h);
}

int sd_history_append(struct sd_history *h, const int32_t *tok, size_t n, const char *text, size_t text_len,
                      struct sd_err *err) {
    if (!h || (!tok && n)) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "history: NULL argument");
    if (!text) text_len = 0;
    const char *name = h->path ? h->path : "(memory)";
    for (size_t i = 0; i < n; i++)
        if (tok[i] < 0)
            return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "history %s: token %zu is negative (%d)", name, i,
                              (int)tok[i]);
    if (n > SD_HISTORY_MAX_PAYLOAD / 4 || text_len > SD_HISTORY_MAX_PAYLOAD ||
        8 + 4 * (uint64_t)n + text_len > SD_HISTORY_MAX_PAYLOAD)
        return sd_err_set(err, SDNPU_ERR_INVALID_ARG,
                          "history %s: record of %zu tokens and %zu text bytes is too large", name, n,
                          text_len);
    uint64_t size = rec_bytes(n, text_len);
    if (h->p.max_bytes && size > h->p.max_bytes)
        return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "history %s: a %llu-byte record exceeds max_bytes %llu",
                          name, (unsigned long long)size, (unsigned long long)h->p.max_bytes);
    if (h->path && h->fd < 0)
        return sd_err_set(err, SDNPU_ERR_IO, "history %s: the file was lost by a failed rewrite; reopen",
                          name);

    int rc = grow_recs(h, h->n + 1, err);
    if (rc) return rc;
    struct hist_rec *r = rec_new(n, text_len);
    if (!r) return sd_err_set(err, SDNPU_ERR_OOM, "history %s: out of memory for a record", name);
    if (n) memcpy(r->tok, tok, n * sizeof *tok);
    if (text_len) memcpy(r->text, text, text_len);

    size_t k = evict_count(h, size, 1);
    if (h->path && k) {
        /* The new record rides along in the rewrite: one atomic step. */
        rc = rewrite_file(h, k, r, err);
        if (rc) goto fail;
    } else if (h->path) {
        uint8_t *buf = sd_malloc((size_t)size);
        if (!buf) {
            rc = sd_err_set(err, SDNPU_ERR_OOM, "history %s: out of memory for a record", name);
            goto fail;
        }
        rec_encode(r, buf);
        /* One write() per record: a crash leaves at most this record torn,
         * at the tail, where the next open finds and cuts it. */
        int wrc = write_all(h->fd, buf, (size_t)size);
        sd_free(buf);
        if (wrc < 0 || (h->p.fsync && io->fsync(h->fd) < 0)) {
            rc = sd_err_set(err, SDNPU_ERR_IO, "history %s: append: %s", name, strerror(errno));
            /* Take a partial record back off; if that fails too, the next
             * open drops it as a torn tail. */
            if (io->ftruncate(h->fd, (off_t)h->bytes) < 0)
                SD_LOGW("history %s: cannot cut a failed append", name);
            goto fail;
        }
    }
    drop_oldest(h, k);
    h->rec[h->n++] = r;
    h->bytes += size;
    return SDNPU_OK;
fail:
    sd_free(r);
    return rc;
}

size_t sd_history_n_records(const struct sd_history *h) { return h ? h->n : 0; }
uint64_t sd_history_bytes(const struct sd_history *h) { return h ? h->bytes : 0; }
const struct sd_history_report *sd_history_report(const struct sd_history *h) {
    return h ? &h->report : NULL;
}

int sd_history_record(const struct sd_history *h, size_t i, struct sd_history_record *out) {
    if (!h || !out || i >= h->n) return SDNPU_ERR_INVALID_ARG;
    const struct hist_rec *r = h->rec[i];
    *out = (struct sd_history_record){r->tok, r->n_tok, r->text, r->text_len};
    return SDNPU_OK;
}

int sd_history_to_sam(const struct sd_history *h, struct sd_sam *sam, struct sd_err *err) {
    if (!h || !sam) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "history: NULL argument");
    size_t total = 0;
    for (size_t i = 0; i < h->n; i++)
        total += h->rec[i]->n_tok + 1;
    int rc = sd_sam_reserve(sam, total, err);
    for (size_t i = 0; rc == SDNPU_OK && i < h->n; i++) {
        rc = sd_sam_append_record(sam, h->rec[i]->tok, h->rec[i]->n_tok, err);
    }
    if (rc == SDNPU_OK) rc = sd_sam_freeze(sam, err);
    if (rc) sd_err_prefix(err, "history to suffix automaton");
    return rc;
}
