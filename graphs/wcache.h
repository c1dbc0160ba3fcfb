/*
 * graphs/wcache.h - the weight cache's file (private to graphs/; the
 * store, graphs/weights.h, decides when to read and write it).
 *
 * Layout, little-endian: a 64-byte header (magic "SDNPUWC1", format
 * version, packed layout version, the key's name and id, the entry count,
 * the data's bytes, an XXH3-64 checksum of the table and data, and an
 * XXH3-64 of the header's first 56 bytes), a table of one 40-byte record
 * per packed weight (type, n_out, n_in, offset and bytes in the data), then
 * the data from the next 4 KiB boundary. Every field is checked against
 * what the model expects before a byte of the data is used.
 */
#ifndef SD_WCACHE_H
#define SD_WCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "graphs/weights.h"

struct sd_wcache_entry {
    uint32_t type;
    int64_t n_out, n_in;
    uint64_t off, bytes; /* in the data */
};

/* The data of a cache file mapped read-only: its pages are the page
 * cache's (nothing copied, and every process using the model shares them). */
struct sd_wcache_map {
    void *base;          /* the mapping, the whole file */
    size_t len;
    const uint8_t *data; /* the data, 4 KiB-aligned */
};

/* Map path if its header, key and table are want[0..n)'s, its data
 * data_bytes and its checksum holds. SDNPU_ERR_NOT_FOUND: no file;
 * SDNPU_ERR_FORMAT: a file that is not what it should be (the message
 * says what); SDNPU_ERR_IO: it could not be read or mapped. The file must
 * not be changed in place while mapped (sd_wcache_write replaces it
 * whole, so a mapped file is never changed: its readers keep the old). */
int sd_wcache_map(const char *path, const struct sd_wcache_key *key, const struct sd_wcache_entry *want, int32_t n,
                  size_t data_bytes, struct sd_wcache_map *out, struct sd_err *err);
void sd_wcache_unmap(struct sd_wcache_map *m);
/* Write the file whole under a temporary name, then rename it into place,
 * so a reader never sees half a file (and the checksum catches a crash's). */
int sd_wcache_write(const char *path, const struct sd_wcache_key *key, const struct sd_wcache_entry *t, int32_t n,
                    const uint8_t *data, size_t data_bytes, struct sd_err *err);

#endif /* SD_WCACHE_H */
