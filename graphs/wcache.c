/* graphs/wcache.c - reading and writing the weight cache's file
 * (graphs/wcache.h). */
#define _DEFAULT_SOURCE /* MAP_POPULATE */
#include "graphs/wcache.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "graphs/packed.h"

#define MAGIC "SDNPUWC1"
#define FORMAT_VERSION 1u
/* The packed layout's version (graphs/packed.h; it depends on the CPU:
 * q5's fifth bits), bumped there whenever the layout changes. */
#define LAYOUT_VERSION sd_packed_layout_version()
#define HEADER_BYTES 64
#define RECORD_BYTES 40
#define CHUNK ((size_t)8 << 20)

struct header {
    uint32_t version, layout;
    uint64_t name, id, n, data_bytes, checksum;
};


static size_t data_offset(int32_t n) { return (HEADER_BYTES + (size_t)n * RECORD_BYTES + 4095) & ~(size_t)4095; }

static void encode_header(uint8_t *b, const struct header *h) {
    memset(b, 0, HEADER_BYTES);
    memcpy(b, MAGIC, 8);
    sd_put32(b + 8, h->version);
    sd_put32(b + 12, h->layout);
    sd_put64(b + 16, h->name);
    sd_put64(b + 24, h->id);
    sd_put64(b + 32, h->n);
    sd_put64(b + 40, h->data_bytes);
    sd_put64(b + 48, h->checksum);
    sd_put64(b + 56, XXH3_64bits(b, 56));
}

static void encode_table(uint8_t *b, const struct sd_wcache_entry *t, int32_t n) {
    memset(b, 0, (size_t)n * RECORD_BYTES);
    for (int32_t i = 0; i < n; i++, b += RECORD_BYTES) {
        sd_put32(b, t[i].type);
        sd_put64(b + 8, (uint64_t)t[i].n_out);
        sd_put64(b + 16, (uint64_t)t[i].n_in);
        sd_put64(b + 24, t[i].off);
        sd_put64(b + 32, t[i].bytes);
    }
}

/* Read exactly n bytes at off, or say why not. */
static int read_at(int fd, void *dst, size_t n, size_t off, struct sd_err *err) {
    uint8_t *p = dst;
    while (n) {
        ssize_t got = pread(fd, p, n, (off_t)off);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return sd_err_set(err, SDNPU_ERR_IO, "read failed: %s", strerror(errno));
        if (got == 0) return sd_err_set(err, SDNPU_ERR_FORMAT, "truncated while reading");
        p += got;
        off += (size_t)got;
        n -= (size_t)got;
    }
    return SDNPU_OK;
}

/* The header against what this model and build expect. */
static int check_header(const uint8_t *b, const struct sd_wcache_key *key, int32_t n, size_t data_bytes,
                        uint64_t *checksum, struct sd_err *err) {
    if (memcmp(b, MAGIC, 8)) return sd_err_set(err, SDNPU_ERR_FORMAT, "not a weight cache file (bad magic)");
    if (sd_get64(b + 56) != XXH3_64bits(b, 56)) return sd_err_set(err, SDNPU_ERR_FORMAT, "its header is damaged");
    if (sd_get32(b + 8) != FORMAT_VERSION)
        return sd_err_set(err, SDNPU_ERR_FORMAT, "format version %u, this build reads %u", sd_get32(b + 8), FORMAT_VERSION);
    if (sd_get32(b + 12) != LAYOUT_VERSION)
        return sd_err_set(err, SDNPU_ERR_FORMAT, "packed for layout %u, these kernels use %u", sd_get32(b + 12),
                          LAYOUT_VERSION);
    if (sd_get64(b + 16) != key->name || sd_get64(b + 24) != key->id)
        return sd_err_set(err, SDNPU_ERR_FORMAT, "made from another model file or another version of it");
    if (sd_get64(b + 32) != (uint64_t)n)
        return sd_err_set(err, SDNPU_ERR_FORMAT, "holds %llu weights, the model has %d",
                          (unsigned long long)sd_get64(b + 32), n);
    if (sd_get64(b + 40) != data_bytes)
        return sd_err_set(err, SDNPU_ERR_FORMAT, "holds %llu bytes of weights, the model needs %zu",
                          (unsigned long long)sd_get64(b + 40), data_bytes);
    *checksum = sd_get64(b + 48);
    return SDNPU_OK;
}

static int check_table(const uint8_t *b, const struct sd_wcache_entry *want, int32_t n, struct sd_err *err) {
    uint8_t *mine = sd_malloc((size_t)n * RECORD_BYTES + 1);
    if (!mine) return sd_err_set(err, SDNPU_ERR_OOM, "out of memory checking the weight cache");
    encode_table(mine, want, n);
    int32_t bad = -1;
    for (int32_t i = 0; i < n && bad < 0; i++)
        if (memcmp(mine + (size_t)i * RECORD_BYTES, b + (size_t)i * RECORD_BYTES, RECORD_BYTES)) bad = i;
    sd_free(mine);
    if (bad >= 0)
        return sd_err_set(err, SDNPU_ERR_FORMAT, "weight %d's type, shape or place is not the model's", bad);
    return SDNPU_OK;
}

#if defined(MADV_HUGEPAGE) && defined(MADV_POPULATE_READ)
/* Files under this size are left as they are: a few 2 MiB pages. */
#define REFRESH_MIN_BYTES ((size_t)16 << 20)

/* Where the page cache holds the file in small folios already (read so
 * before the advice was given, or by another program), the advice changes
 * nothing until they are dropped. A mapping mostly in 4 KiB pages drops
 * the file from the page cache and reads it again, once (the next start
 * finds it in 2 MiB pages), where the system gives it 2 MiB pages: some
 * of the mapping is in them already, or a dropped 4 MiB window comes back
 * in them. Not where none does (a file system without large folios,
 * transparent huge pages off); pages another process maps stay as they
 * are (a drop leaves them). */
static void refresh_small_pages(int fd, uint8_t *base, size_t size) {
    const size_t huge = (size_t)2 << 20, win = 2 * huge, off = size / 2 / huge * huge;
    if (size < REFRESH_MIN_BYTES || ((uintptr_t)base & (huge - 1))) return; /* before reading /proc */
    const long long before = sd_mapped_huge_bytes(base);
    if (before < 0 || (size_t)before >= size / 2) return;
    if (before == 0 && (madvise(base + off, win, MADV_DONTNEED) ||
                        posix_fadvise(fd, (off_t)off, (off_t)win, POSIX_FADV_DONTNEED) ||
                        madvise(base + off, win, MADV_POPULATE_READ) || sd_mapped_huge_bytes(base) < (long long)huge))
        return;
    SD_LOGI("the weight cache was in the page cache in 4 KiB pages; reading it again in 2 MiB pages");
    (void)madvise(base, size, MADV_DONTNEED);
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    (void)madvise(base, size, MADV_POPULATE_READ); /* else each page faults in when read */
}
#endif

/* The file mapped whole, read-only, and read in, with the advice to map
 * it in 2 MiB pages given before any page is read. Where the page cache
 * has lost part of the file, a fault of a plain mapping reads it back in
 * small folios, which the mapping can only hold in 4 KiB pages: every
 * decoding step then walks the page tables for its weights (the 1.5B
 * decoded 24-27 tokens/s so, 28-35 mapped in 2 MiB pages, on the Zen 4
 * guest). With the advice the lost parts come back in 2 MiB folios. */
static void *map_file(int fd, size_t size) {
#if defined(MADV_HUGEPAGE) && defined(MADV_POPULATE_READ)
    void *base = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (base == MAP_FAILED) return base;
    (void)madvise(base, size, MADV_HUGEPAGE);
    if (!madvise(base, size, MADV_POPULATE_READ)) {
        refresh_small_pages(fd, base, size);
        return base;
    }
    munmap(base, size); /* a kernel before 5.14: populated as the mapping is made */
#endif
    return mmap(NULL, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
}

/* The file mapped whole, read-only, its checksum run over the table and
 * the data in place. */
static int map_data(int fd, size_t size, size_t off, size_t data_bytes, const uint8_t *table, size_t table_bytes,
                    uint64_t checksum, struct sd_wcache_map *out, struct sd_err *err) {
    void *base = map_file(fd, size);
    if (base == MAP_FAILED) return sd_err_set(err, SDNPU_ERR_IO, "cannot map: %s", strerror(errno));
    XXH3_state_t *st = XXH3_createState();
    if (!st) {
        munmap(base, size);
        return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for a checksum");
    }
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, table, table_bytes);
    XXH3_64bits_update(st, (const uint8_t *)base + off, data_bytes);
    const bool ok = XXH3_64bits_digest(st) == checksum;
    XXH3_freeState(st);
    if (!ok) {
        munmap(base, size);
        return sd_err_set(err, SDNPU_ERR_FORMAT, "checksum mismatch: the file is damaged");
    }
    *out = (struct sd_wcache_map){base, size, (const uint8_t *)base + off};
    return SDNPU_OK;
}

int sd_wcache_map(const char *path, const struct sd_wcache_key *key, const struct sd_wcache_entry *want, int32_t n,
                  size_t data_bytes, struct sd_wcache_map *out, struct sd_err *err) {
    *out = (struct sd_wcache_map){0};
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return sd_err_set(err, e == ENOENT ? SDNPU_ERR_NOT_FOUND : SDNPU_ERR_IO, "cannot open: %s", strerror(e));
    }
    const size_t off = data_offset(n), table_bytes = (size_t)n * RECORD_BYTES, size = off + data_bytes;
    uint8_t head[HEADER_BYTES];
    uint64_t checksum = 0;
    uint8_t *table = NULL;
    struct stat stt;
    int rc;
    if (fstat(fd, &stt)) rc = sd_err_set(err, SDNPU_ERR_IO, "cannot stat: %s", strerror(errno));
    else if (!S_ISREG(stt.st_mode)) rc = sd_err_set(err, SDNPU_ERR_FORMAT, "not a regular file");
    else if ((size_t)stt.st_size != size)
        rc = sd_err_set(err, SDNPU_ERR_FORMAT, "%s: %lld bytes, expected %zu",
                        (size_t)stt.st_size < size ? "truncated" : "too long", (long long)stt.st_size, size);
    else if (!(rc = read_at(fd, head, HEADER_BYTES, 0, err)) &&
             !(rc = check_header(head, key, n, data_bytes, &checksum, err))) {
        table = sd_malloc(table_bytes + 1);
        if (!table) rc = sd_err_set(err, SDNPU_ERR_OOM, "out of memory reading the weight cache");
        else if (!(rc = read_at(fd, table, table_bytes, HEADER_BYTES, err)) && !(rc = check_table(table, want, n, err)))
            rc = map_data(fd, size, off, data_bytes, table, table_bytes, checksum, out, err);
    }
    sd_free(table);
    close(fd); /* the mapping keeps the file */
    return rc;
}

void sd_wcache_unmap(struct sd_wcache_map *m) {
    if (m->base) munmap(m->base, m->len);
    *m = (struct sd_wcache_map){0};
}

static int write_all(int fd, const void *src, size_t n, struct sd_err *err) {
    const uint8_t *p = src;
    while (n) {
        ssize_t put = write(fd, p, SD_MIN(n, CHUNK));
        if (put < 0 && errno == EINTR) continue;
        if (put < 0) return sd_err_set(err, SDNPU_ERR_IO, "write failed: %s", strerror(errno));
        p += put;
        n -= (size_t)put;
    }
    return SDNPU_OK;
}

int sd_wcache_write(const char *path, const struct sd_wcache_key *key, const struct sd_wcache_entry *t, int32_t n,
                    const uint8_t *data, size_t data_bytes, struct sd_err *err) {
    const size_t off = data_offset(n), table_bytes = (size_t)n * RECORD_BYTES;
    uint8_t *lead = sd_calloc(1, off); /* header, table and the padding up to the data */
    char tmp[4200];
    if (!lead) return sd_err_set(err, SDNPU_ERR_OOM, "out of memory writing the weight cache");
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp) {
        sd_free(lead);
        return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "path too long");
    }
    encode_table(lead + HEADER_BYTES, t, n);
    XXH3_state_t *st = XXH3_createState();
    int rc = st ? SDNPU_OK : sd_err_set(err, SDNPU_ERR_OOM, "out of memory for a checksum");
    if (!rc) {
        XXH3_64bits_reset(st);
        XXH3_64bits_update(st, lead + HEADER_BYTES, table_bytes);
        XXH3_64bits_update(st, data, data_bytes);
        struct header h = {FORMAT_VERSION, LAYOUT_VERSION, key->name, key->id, (uint64_t)n, data_bytes,
                           XXH3_64bits_digest(st)};
        encode_header(lead, &h);
        XXH3_freeState(st);
    }
    int fd = -1;
    if (!rc && (fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0)
        rc = sd_err_set(err, SDNPU_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
    if (!rc) rc = write_all(fd, lead, off, err);
    if (!rc) rc = write_all(fd, data, data_bytes, err);
    if (fd >= 0 && close(fd) && !rc) rc = sd_err_set(err, SDNPU_ERR_IO, "write failed: %s", strerror(errno));
    if (!rc && rename(tmp, path)) rc = sd_err_set(err, SDNPU_ERR_IO, "cannot rename into place: %s", strerror(errno));
    if (rc && fd >= 0) unlink(tmp);
    sd_free(lead);
    return rc;
}
