/*
 * engine/history.h - the per-user history store: finished responses kept in
 * an append-only file (or in memory), read back as records, and fed to a
 * suffix automaton as the drafter's history store (paper section 3.1: "the
 * final response is ... stored in the database manager as a historical
 * context for future requests").
 *
 * File format (all integers little-endian), a sequence of records:
 *
 *   offset  size  field
 *   0       4     magic "SDH1" (0x53 0x44 0x48 0x31)
 *   4       4     payload length P (bytes)
 *   8       4     n_tokens
 *   12      4     text_len
 *   16      4*n   tokens (int32, each >= 0)
 *   16+4n   t     text (UTF-8 bytes as given, not NUL-terminated)
 *   8+P     4     CRC-32 (IEEE) of bytes [0, 8+P)
 *
 * where P = 8 + 4*n_tokens + text_len. No file header: every record stands
 * alone, so a reader can resynchronize on the next magic.
 *
 * Crash safety. A record is written with one write() and then fsync()ed
 * (when params.fsync), so a crash leaves at most one partial record, at
 * the tail. Eviction rewrites the file into PATH.tmp, fsyncs it, renames it
 * over PATH and fsyncs the directory, so a crash leaves either the old or
 * the new file, never a mix.
 *
 * Damage on load. A record is good when its magic, length, CRC and payload
 * all check out. At a bad record the reader looks for the next offset where
 * a good record starts:
 *   - found: the bytes in between are skipped (a corrupt middle record; the
 *     records after it are kept: resynchronizing loses one record, stopping
 *     would lose all later ones);
 *   - not found: everything from the bad offset on is a torn or corrupt
 *     tail and is dropped.
 * Either way the load succeeds with the good records, the damage is named
 * (byte offset and reason) in sd_history_report() and logged as a warning,
 * and the file is healed before any new append: truncated back to the last
 * good record when only the tail was bad, rewritten (as for eviction) when
 * a middle region was skipped.
 *
 * Threads and processes: a handle belongs to one thread at a time, and one
 * writer per file: two processes appending to one history file at once is
 * not supported (nothing locks it). Record views stay valid until the next
 * append or close.
 */
#ifndef SD_HISTORY_H
#define SD_HISTORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/base.h"
#include "draft/draft.h"

#define SD_HISTORY_MAGIC 0x31484453u   /* "SDH1" read as a little-endian u32 */
#define SD_HISTORY_RECORD_OVERHEAD 20u /* magic, P, n_tokens, text_len, CRC */
/* A record's payload limit (256 MiB): larger lengths are treated as damage,
 * so a flipped length byte cannot make the reader allocate gigabytes. */
#define SD_HISTORY_MAX_PAYLOAD (256u << 20)

struct sd_history_params {
    uint64_t max_bytes;   /* bound on the file (encoded records); 0: none. Default 8 MiB */
    uint32_t max_records; /* bound on the record count; 0: none. Default 0 */
    bool fsync;           /* fsync after each append (default true) */
};
struct sd_history_params sd_history_default_params(void);

/* What the last open found wrong with the file, if anything. */
struct sd_history_report {
    int64_t bad_offset;       /* byte offset of the first damaged record; -1: the file was clean */
    int64_t bytes_dropped;    /* damaged bytes skipped or cut off */
    int32_t n_bad_regions;    /* damaged regions (a torn tail counts as one) */
    int32_t n_evicted;        /* oldest records dropped to fit the bounds on open */
    bool healed;              /* the file on disk was repaired */
    char msg[SD_ERR_MSG_MAX]; /* "" when clean; else names each offset and reason */
};

struct sd_history;

/* Open (creating if missing) the history at path, or an in-memory history
 * when path is NULL. p may be NULL for the defaults. Damage is handled as
 * described above and is not an error. If the file holds more than the
 * bounds allow, the oldest records are evicted (and the file rewritten).
 * Returns SDNPU_OK, SDNPU_ERR_IO (open, read or repair failed: err names the
 * path and errno text), SDNPU_ERR_OOM, SDNPU_ERR_INVALID_ARG. *out is NULL
 * on failure. */
int sd_history_open(const char *path, const struct sd_history_params *p, struct sd_history **out,
                    struct sd_err *err);
/* Close the file and free everything. NULL is fine. */
void sd_history_close(struct sd_history *h);

/* Append one finished response: n tokens (each >= 0, n may be 0) and an
 * optional text (NULL or text_len 0: none). If the record would break a
 * bound, the oldest records are evicted first (down to 3/4 of each bound,
 * so the rewrite is amortized over many appends). Returns SDNPU_OK,
 * SDNPU_ERR_INVALID_ARG (negative token, or a record larger than
 * max_bytes by itself), SDNPU_ERR_IO (the history is unchanged in memory; a
 * partial record on disk is cut off again, or healed by the next open),
 * SDNPU_ERR_OOM. */
int sd_history_append(struct sd_history *h, const int32_t *tok, size_t n, const char *text, size_t text_len,
                      struct sd_err *err);

size_t sd_history_n_records(const struct sd_history *h);
uint64_t sd_history_bytes(const struct sd_history *h); /* encoded size of all records */
const struct sd_history_report *sd_history_report(const struct sd_history *h);

/* A view of record i (0 = oldest), valid until the next append or close. */
struct sd_history_record {
    const int32_t *tok;
    size_t n_tok;
    const char *text; /* NUL-terminated copy, "" when the record has none */
    size_t text_len;
};
/* SDNPU_OK, or SDNPU_ERR_INVALID_ARG when i is out of range. */
int sd_history_record(const struct sd_history *h, size_t i, struct sd_history_record *out);

/* Append every record to sam, each followed by SD_SAM_SEP so no match
 * crosses two records, then freeze it. On failure sam holds a prefix of the
 * records (clear it). Returns SDNPU_OK or the automaton's status. */
int sd_history_to_sam(const struct sd_history *h, struct sd_sam *sam, struct sd_err *err);

/* The system calls the store writes through, so tests can make them fail
 * (a short write, ENOSPC, EIO, a failed fsync or truncate) and check that
 * every record acknowledged before the fault loads afterwards and nothing
 * after it is half-read. NULL (the default) is the real calls. Process-wide,
 * like the allocator hook: set it before opening histories, from a test. */
struct sd_history_io {
    ssize_t (*write)(int fd, const void *buf, size_t n);
    int (*fsync)(int fd);
    int (*ftruncate)(int fd, off_t len);
};
void sd_history_set_io(const struct sd_history_io *io);

/* CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320), chainable: start
 * with crc = 0. sd_crc32(0, "123456789", 9) == 0xCBF43926. */
uint32_t sd_crc32(uint32_t crc, const void *data, size_t n);

#endif /* SD_HISTORY_H */
