/*
 * engine/state.c - saved sessions: sdnpu_session_save and
 * sdnpu_session_load (docs/state.md has the file format).
 *
 * A state file is the session's context: its tokens and their KV cache,
 * under a header that names the model it belongs to, and an XXH3-64
 * checksum at the end over every byte before it. Little-endian throughout
 * (written and read with memcpy on little-endian hosts, as the weight
 * cache's file is):
 *
 *   offset  bytes  field
 *        0      8  magic "SDNPUSES"
 *        8      4  format version (1)
 *       12      4  header bytes (128)
 *       16     32  architecture name, NUL-padded
 *       48      4  n_layer
 *       52      4  n_head_kv
 *       56      4  head_dim
 *       60      4  n_vocab
 *       64      8  model hash: XXH3-64 of the GGUF's bytes before its tensor
 *                  data (header, metadata, tensor table)
 *       72      4  KV element type (1: fp16; 2: K as int16 levels with a
 *                  float scale a row, V fp16: the fast kernels' cache)
 *       76      4  n_tokens
 *       80      8  KV offset: 128 + 4 * n_tokens, rounded up to 64
 *       88      8  KV bytes: n_layer * 2 * n_tokens * n_head_kv * head_dim * 2,
 *                  and for type 2 n_layer * n_tokens * n_head_kv * 4 more
 *       96     32  reserved, zero
 *      128  4 * n  the tokens, int32
 *              ..  zero padding up to the KV offset
 *   KV off     ..  the KV cache, [n_layer][K, V][n_tokens][kv_dim] 16-bit
 *                  values, then for type 2 the K rows' scales,
 *                  [n_layer][n_tokens][n_head_kv] float (graphs/kv.h)
 *     end - 8   8  XXH3-64 of every byte before it
 *
 * Reading is for an untrusted file: every field is checked against the
 * model and the file's size before anything is allocated, the whole file
 * is read into a buffer of its own and checked there (checksum, tokens),
 * and only then does it replace the session's context, so that a refused
 * file leaves the session as it was.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "engine/api.h"
#include "gguf/gguf.h"

#define STATE_MAGIC "SDNPUSES"
#define STATE_VERSION 1u
#define HEADER_BYTES 128u
#define KV_FP16 1u
#define KV_I16 2u
#define ARCH_BYTES 32
/* The KV section starts on a 64-byte boundary, so that it is as aligned in
 * the read buffer as the cache it is copied into. */
#define KV_ALIGN 64u
#define IO_CHUNK ((size_t)8 << 20)

/* What makes a state file belong to a model. */
struct identity {
    char arch[ARCH_BYTES];
    uint32_t n_layer, n_head_kv, head_dim, n_vocab;
    uint64_t hash;
};

struct header {
    struct identity id;
    uint32_t version, header_bytes, kv_type, n_tokens;
    uint64_t kv_off, kv_bytes;
};


/* Reading [p, p + n) of a mapped model file faulted in the pages around it
 * too (up to 64 KiB, the kernel's fault-around), which the model gave back
 * after loading (engine/api.c): they are given back again, so that saving
 * and loading states does not grow the process by a window a tensor.
 * Pages the graphs read are faulted in again at their next read. The
 * windows of neighbouring tensors overlap and are given back in runs, one
 * call a run. */
struct give_back {
    uintptr_t lo, hi; /* the mapping */
    uintptr_t a, e;   /* the run so far, empty when a == e */
};

static void give_back_flush(struct give_back *gb) {
    if (gb->e > gb->a) sd_drop_pages((const void *)gb->a, gb->e - gb->a);
    gb->a = gb->e = 0;
}

static void give_back(struct give_back *gb, const void *p, size_t n) {
    if (!gb->hi) return; /* heap pages must never be dropped */
    const uintptr_t win = 64 << 10;
    uintptr_t a = (uintptr_t)p & ~(win - 1), e = ((uintptr_t)p + n + win - 1) & ~(win - 1);
    a = a < gb->lo ? gb->lo : a;
    e = e > gb->hi ? gb->hi : e;
    if (gb->e > gb->a && a <= gb->e && e >= gb->a) {
        gb->a = SD_MIN(gb->a, a);
        gb->e = SD_MAX(gb->e, e);
        return;
    }
    give_back_flush(gb);
    gb->a = a;
    gb->e = e;
}

#define SAMPLE_BYTES 256
/* The model's identity. The hash covers the GGUF's header, metadata and
 * tensor table (the hyperparameters, the vocabulary, every tensor's name,
 * type, shape and place) and the first bytes of every tensor's data, so
 * that two models that differ only in their weights (a fine-tune under
 * its base's metadata) differ here too: a few milliseconds and a page a
 * tensor, where hashing all the weights would take seconds. The file's
 * path and modification time are not part of it, so that a copied or
 * moved model still takes its states. */
static struct identity model_identity(const struct sdnpu_model *model) {
    const struct sd_model_config *c = &model->m->cfg;
    struct identity id = {0};
    snprintf(id.arch, sizeof id.arch, "%s", c->arch_name);
    id.n_layer = (uint32_t)c->n_layer;
    id.n_head_kv = (uint32_t)c->n_head_kv;
    id.head_dim = (uint32_t)c->head_dim;
    id.n_vocab = (uint32_t)c->n_vocab;
    const struct sd_gguf *g = model->file->gguf;
    const uint8_t *file = sd_gguf_bytes(g);
    struct give_back gb = {0};
    if (model->m->file_mapped) {
        gb.lo = (uintptr_t)file;
        gb.hi = gb.lo + sd_gguf_file_size(g);
    }
    uint64_t h = XXH3_64bits(file, sd_gguf_data_offset(g));
    give_back(&gb, file, sd_gguf_data_offset(g));
    for (int64_t i = 0; i < sd_gguf_n_tensors(g); i++) {
        const struct sd_gguf_tensor *t = sd_gguf_tensor(g, i);
        h = XXH3_64bits_withSeed(t->data, SD_MIN(t->nbytes, (size_t)SAMPLE_BYTES), h);
        give_back(&gb, t->data, SAMPLE_BYTES);
    }
    give_back_flush(&gb);
    id.hash = h;
    return id;
}

/* Where the KV section starts and how long it is for n tokens: the
 * arithmetic is in 64 bits and checked, because n comes from the file. */
static bool layout(const struct identity *id, uint32_t kv_type, uint64_t n, uint64_t *kv_off,
                   uint64_t *kv_bytes, uint64_t *total) {
    uint64_t t, kv_dim, scales = 0;
    if (sd_mul_ovf(n, 4, &t) || sd_add_ovf(t, HEADER_BYTES + KV_ALIGN - 1, &t)) return false;
    *kv_off = t & ~(uint64_t)(KV_ALIGN - 1);
    if (sd_mul_ovf(id->n_head_kv, id->head_dim, &kv_dim) || sd_mul_ovf(kv_dim, (uint64_t)id->n_layer * 4, &t) ||
        sd_mul_ovf(t, n, kv_bytes))
        return false;
    if (kv_type == KV_I16 && (sd_mul_ovf((uint64_t)id->n_layer * id->n_head_kv * 4, n, &scales) ||
                              sd_add_ovf(*kv_bytes, scales, kv_bytes)))
        return false;
    return !sd_add_ovf(*kv_off, *kv_bytes, &t) && !sd_add_ovf(t, 8, total);
}

static void encode_header(uint8_t *b, const struct header *h) {
    memset(b, 0, HEADER_BYTES);
    memcpy(b, STATE_MAGIC, 8);
    sd_put32(b + 8, h->version);
    sd_put32(b + 12, h->header_bytes);
    memcpy(b + 16, h->id.arch, ARCH_BYTES);
    sd_put32(b + 48, h->id.n_layer);
    sd_put32(b + 52, h->id.n_head_kv);
    sd_put32(b + 56, h->id.head_dim);
    sd_put32(b + 60, h->id.n_vocab);
    sd_put64(b + 64, h->id.hash);
    sd_put32(b + 72, h->kv_type);
    sd_put32(b + 76, h->n_tokens);
    sd_put64(b + 80, h->kv_off);
    sd_put64(b + 88, h->kv_bytes);
}

static void decode_header(const uint8_t *b, struct header *h) {
    memset(h, 0, sizeof *h);
    h->version = sd_get32(b + 8);
    h->header_bytes = sd_get32(b + 12);
    memcpy(h->id.arch, b + 16, ARCH_BYTES);
    h->id.n_layer = sd_get32(b + 48);
    h->id.n_head_kv = sd_get32(b + 52);
    h->id.head_dim = sd_get32(b + 56);
    h->id.n_vocab = sd_get32(b + 60);
    h->id.hash = sd_get64(b + 64);
    h->kv_type = sd_get32(b + 72);
    h->n_tokens = sd_get32(b + 76);
    h->kv_off = sd_get64(b + 80);
    h->kv_bytes = sd_get64(b + 88);
}

static int session_fail(struct sdnpu_session *s, const char *path) {
    if (path && !strstr(s->err.msg, path)) sd_err_prefix(&s->err, "%s", path);
    SD_LOGE("%s", s->err.msg);
    return s->err.status;
}

/* ------------------------------------------------------------ save */

static int write_all(int fd, const uint8_t *p, size_t n, struct sd_err *err) {
    while (n) {
        ssize_t put = write(fd, p, SD_MIN(n, IO_CHUNK));
        if (put < 0 && errno == EINTR) continue;
        if (put < 0) return sd_err_set(err, SDNPU_ERR_IO, "write failed: %s", strerror(errno));
        p += put;
        n -= (size_t)put;
    }
    return SDNPU_OK;
}

/* The rename is only durable once the directory holding it is on disk
 * too. A directory that cannot be opened or synced (some file systems
 * refuse) costs that guarantee, not the save. */
static void sync_dir_of(const char *path) {
    char dir[4200];
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    int fd = open(dir, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    if (fsync(fd)) SD_LOGD("%s: fsync of the directory failed: %s", dir, strerror(errno));
    close(fd);
}

enum sdnpu_status sdnpu_session_save(struct sdnpu_session *s, const char *path) {
    if (!s) return SDNPU_ERR_INVALID_ARG;
    sd_err_clear(&s->err);
    if (!path) {
        sd_err_set(&s->err, SDNPU_ERR_INVALID_ARG, "the state file's path is NULL");
        return session_fail(s, NULL);
    }
    /* A file holds evaluated tokens only: the last request's pending one is
     * evaluated first. */
    if (sd_session_flush_pending(s)) return session_fail(s, NULL);
    struct header h = {.id = model_identity(s->model),
                       .version = STATE_VERSION,
                       .header_bytes = HEADER_BYTES,
                       .kv_type = sd_rt_kv_keys(s->rt) == SD_KV_KEYS_I16 ? KV_I16 : KV_FP16,
                       .n_tokens = (uint32_t)s->n_past};
    uint64_t total = 0;
    /* The cache's own layout, checked against the one the file states: a
     * mismatch is a bug of this build, and no file is written. */
    if (!layout(&h.id, h.kv_type, h.n_tokens, &h.kv_off, &h.kv_bytes, &total) ||
        h.kv_bytes != sd_rt_kv_snapshot_bytes(s->rt, s->n_past)) {
        sd_err_set(&s->err, SDNPU_ERR_STATE, "the KV cache holds %zu bytes for %d tokens, the model's shape says %llu",
                   sd_rt_kv_snapshot_bytes(s->rt, s->n_past), s->n_past, (unsigned long long)h.kv_bytes);
        return session_fail(s, path);
    }
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp) {
        sd_err_set(&s->err, SDNPU_ERR_INVALID_ARG, "the path is too long (%zu bytes)", strlen(path));
        return session_fail(s, path);
    }
    /* The whole file is made in memory (its size is the KV snapshot's,
     * which has to be copied out of the cache anyway), checksummed in one
     * pass and written with one call per chunk. */
    uint8_t *buf = sd_calloc(1, (size_t)total);
    int fd = -1, rc = SDNPU_OK;
    if (!buf) {
        rc = sd_err_set(&s->err, SDNPU_ERR_OOM, "out of memory for the state file's %llu bytes",
                        (unsigned long long)total);
        goto fail;
    }
    encode_header(buf, &h);
    memcpy(buf + HEADER_BYTES, s->ctx_tokens, (size_t)h.n_tokens * 4);
    sd_rt_kv_snapshot(s->rt, s->n_past, buf + h.kv_off);
    sd_put64(buf + total - 8, XXH3_64bits(buf, (size_t)total - 8));
    if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0) {
        rc = sd_err_set(&s->err, SDNPU_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
        goto fail;
    }
    if ((rc = write_all(fd, buf, (size_t)total, &s->err))) goto fail_tmp;
    /* On disk before it takes the name: a crash leaves the old file or the
     * new one, never half of the new one under the name. */
    if (fsync(fd)) {
        rc = sd_err_set(&s->err, SDNPU_ERR_IO, "fsync failed: %s", strerror(errno));
        goto fail_tmp;
    }
    int closed = close(fd);
    fd = -1;
    if (closed) {
        rc = sd_err_set(&s->err, SDNPU_ERR_IO, "write failed: %s", strerror(errno));
        goto fail_tmp;
    }
    if (rename(tmp, path)) {
        rc = sd_err_set(&s->err, SDNPU_ERR_IO, "cannot rename %s into place: %s", tmp, strerror(errno));
        goto fail_tmp;
    }
    sync_dir_of(path);
    sd_free(buf);
    return SDNPU_OK;
fail_tmp:
    if (fd >= 0) close(fd);
    unlink(tmp);
fail:
    sd_free(buf);
    return session_fail(s, path);
}

/* ------------------------------------------------------------ load */

/* Read exactly n bytes at off, or say why not. */
static int read_at(int fd, uint8_t *p, size_t n, uint64_t off, struct sd_err *err) {
    while (n) {
        ssize_t got = pread(fd, p, SD_MIN(n, IO_CHUNK), (off_t)off);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return sd_err_set(err, SDNPU_ERR_IO, "read failed: %s", strerror(errno));
        if (got == 0)
            return sd_err_set(err, SDNPU_ERR_FORMAT, "truncated while it was read, at byte %llu",
                              (unsigned long long)off);
        p += got;
        off += (uint64_t)got;
        n -= (size_t)got;
    }
    return SDNPU_OK;
}

/* The file's architecture name, printable whatever bytes it holds. */
static void printable_arch(const char *in, char *out) {
    size_t i = 0;
    for (; i < ARCH_BYTES - 1 && in[i]; i++) out[i] = in[i] >= 0x20 && in[i] < 0x7f ? in[i] : '?';
    out[i] = '\0';
}

/* Append ", what" to a message under construction in buf [SD_ERR_MSG_MAX]. */
static void append(char *buf, const char *fmt, ...) SD_PRINTF(2, 3);
static void append(char *buf, const char *fmt, ...) {
    size_t n = strlen(buf);
    if (n && n + 2 < SD_ERR_MSG_MAX) {
        memcpy(buf + n, ", ", 3);
        n += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + n, SD_ERR_MSG_MAX - n, fmt, ap);
    va_end(ap);
}

/* The file's identity against the model's; the message names every field
 * that differs. */
static int check_identity(const struct identity *f, const struct identity *m, struct sd_err *err) {
    char arch[ARCH_BYTES], why[SD_ERR_MSG_MAX] = "";
    printable_arch(f->arch, arch);
    if (memcmp(f->arch, m->arch, ARCH_BYTES)) append(why, "architecture %s (this model: %s)", arch, m->arch);
    if (f->n_layer != m->n_layer) append(why, "n_layer %u (this model: %u)", f->n_layer, m->n_layer);
    if (f->n_head_kv != m->n_head_kv) append(why, "n_head_kv %u (this model: %u)", f->n_head_kv, m->n_head_kv);
    if (f->head_dim != m->head_dim) append(why, "head_dim %u (this model: %u)", f->head_dim, m->head_dim);
    if (f->n_vocab != m->n_vocab) append(why, "n_vocab %u (this model: %u)", f->n_vocab, m->n_vocab);
    if (f->hash != m->hash)
        append(why, "model hash %016llx (this model: %016llx)", (unsigned long long)f->hash,
               (unsigned long long)m->hash);
    if (!why[0]) return SDNPU_OK;
    return sd_err_set(err, SDNPU_ERR_FORMAT, "the state file is for another model: %s", why);
}

/* The header read from the file, against this build, the model and the
 * file's size. On success *total is the file's size. */
static int check_header(const uint8_t *b, const struct identity *model, uint64_t size, struct header *h,
                        uint64_t *total, struct sd_err *err) {
    if (memcmp(b, STATE_MAGIC, 8)) return sd_err_set(err, SDNPU_ERR_FORMAT, "not a saved session (bad magic)");
    decode_header(b, h);
    if (h->version != STATE_VERSION)
        return sd_err_set(err, SDNPU_ERR_FORMAT, "format version %u; this build reads version %u", h->version,
                          STATE_VERSION);
    if (h->header_bytes != HEADER_BYTES)
        return sd_err_set(err, SDNPU_ERR_FORMAT, "a header of %u bytes; version %u's is %u", h->header_bytes,
                          STATE_VERSION, HEADER_BYTES);
    int rc = check_identity(&h->id, model, err);
    if (rc) return rc;
    if (h->kv_type != KV_FP16 && h->kv_type != KV_I16)
        return sd_err_set(err, SDNPU_ERR_FORMAT,
                          "KV element type %u; this build reads %u (fp16) and %u (integer keys)", h->kv_type,
                          KV_FP16, KV_I16);
    uint64_t kv_off, kv_bytes;
    if (!layout(model, h->kv_type, h->n_tokens, &kv_off, &kv_bytes, total))
        return sd_err_set(err, SDNPU_ERR_FORMAT, "holds %u tokens, more than any file can", h->n_tokens);
    if (h->kv_off != kv_off || h->kv_bytes != kv_bytes)
        return sd_err_set(err, SDNPU_ERR_FORMAT,
                          "its KV section is %llu bytes at offset %llu; %u tokens make it %llu bytes at %llu",
                          (unsigned long long)h->kv_bytes, (unsigned long long)h->kv_off, h->n_tokens,
                          (unsigned long long)kv_bytes, (unsigned long long)kv_off);
    /* Before anything is allocated: a count from a damaged or hostile
     * header is refused by the file's own size. */
    if (size < *total)
        return sd_err_set(err, SDNPU_ERR_FORMAT,
                          "truncated: it holds %u tokens, which take %llu bytes, but the file is only %llu bytes",
                          h->n_tokens, (unsigned long long)*total, (unsigned long long)size);
    if (size > *total)
        return sd_err_set(err, SDNPU_ERR_FORMAT, "too long: %llu bytes, its %u tokens take %llu",
                          (unsigned long long)size, h->n_tokens, (unsigned long long)*total);
    return SDNPU_OK;
}

/* The whole file, checked: into *out (sd_malloc'd, the caller frees it). */
static int read_state(struct sdnpu_session *s, const char *path, struct header *h, uint8_t **out) {
    struct sd_err *err = &s->err;
    *out = NULL;
    /* O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused
     * below as not a regular file. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        return sd_err_set(err, e == ENOENT ? SDNPU_ERR_NOT_FOUND : SDNPU_ERR_IO, "cannot open: %s", strerror(e));
    }
    struct stat st;
    uint8_t head[HEADER_BYTES];
    uint8_t *buf = NULL;
    uint64_t total = 0;
    struct identity model = model_identity(s->model);
    int rc;
    if (fstat(fd, &st)) {
        rc = sd_err_set(err, SDNPU_ERR_IO, "cannot stat: %s", strerror(errno));
        goto done;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = sd_err_set(err, SDNPU_ERR_IO, "%s, not a state file",
                        S_ISDIR(st.st_mode) ? "a directory" : "not a regular file");
        goto done;
    }
    if ((uint64_t)st.st_size < HEADER_BYTES) {
        rc = sd_err_set(err, SDNPU_ERR_FORMAT, "truncated: %lld bytes, expected at least the %u of the header",
                        (long long)st.st_size, HEADER_BYTES);
        goto done;
    }
    if ((rc = read_at(fd, head, HEADER_BYTES, 0, err))) goto done;
    if ((rc = check_header(head, &model, (uint64_t)st.st_size, h, &total, err))) goto done;
    if (h->n_tokens > (uint32_t)s->n_ctx) {
        rc = sd_err_set(err, SDNPU_ERR_CONTEXT_FULL, "the state file holds %u tokens, the session's context is %d",
                        h->n_tokens, s->n_ctx);
        goto done;
    }
    if ((uint64_t)(size_t)total != total || !(buf = sd_malloc((size_t)total))) {
        rc = sd_err_set(err, SDNPU_ERR_OOM, "out of memory for the state file's %llu bytes",
                        (unsigned long long)total);
        goto done;
    }
    if ((rc = read_at(fd, buf, (size_t)total, 0, err))) goto done;
    /* The header that was checked must be the one the checksum covers. */
    if (memcmp(buf, head, HEADER_BYTES)) {
        rc = sd_err_set(err, SDNPU_ERR_IO, "the file changed while it was read");
        goto done;
    }
    if (sd_get64(buf + total - 8) != XXH3_64bits(buf, (size_t)total - 8)) {
        rc = sd_err_set(err, SDNPU_ERR_FORMAT, "checksum mismatch: the file is damaged");
        goto done;
    }
    /* A checksum is no signature: a file made to pass it is checked as
     * carefully as one that was damaged. The KV values are used as they
     * are; a forged cache can only make the model's output wrong. */
    const int32_t nv = (int32_t)model.n_vocab;
    for (uint32_t i = 0; i < h->n_tokens; i++) {
        int32_t t;
        memcpy(&t, buf + HEADER_BYTES + (size_t)i * 4, 4);
        if (t < 0 || t >= nv) {
            rc = sd_err_set(err, SDNPU_ERR_FORMAT, "token %d at index %u is outside the vocabulary (0..%d)", t, i,
                            nv - 1);
            goto done;
        }
    }
    *out = buf;
    buf = NULL;
done:
    sd_free(buf);
    close(fd);
    return rc;
}

enum sdnpu_status sdnpu_session_load(struct sdnpu_session *s, const char *path) {
    if (!s) return SDNPU_ERR_INVALID_ARG;
    sd_err_clear(&s->err);
    if (!path) {
        sd_err_set(&s->err, SDNPU_ERR_INVALID_ARG, "the state file's path is NULL");
        return session_fail(s, NULL);
    }
    struct header h;
    uint8_t *buf;
    if (read_state(s, path, &h, &buf)) return session_fail(s, path);
    /* Nothing can fail from here: the context is replaced whole. */
    const int32_t n = (int32_t)h.n_tokens;
    /* Either kind of keys: the other kind is converted (graphs/kv.h). */
    sd_rt_kv_restore(s->rt, buf + h.kv_off, h.kv_type == KV_I16 ? SD_KV_KEYS_I16 : SD_KV_KEYS_FP16, n, n);
    memcpy(s->ctx_tokens, buf + HEADER_BYTES, (size_t)n * 4);
    s->n_past = n;
    s->has_pending = false;
    /* The next-token logits are not saved (they are n_vocab floats the last
     * token's row gives back bit for bit): the session holds a context to
     * continue, and the stepper recomputes them from its last token when a
     * request starts without a prompt, as after a greedy verification step. */
    s->have_logits = n > 0;
    sd_step_logits_lost(&s->step);
    /* The calibration predictions belong to the context that was replaced. */
    s->calib_valid = 0;
    sd_free(buf);
    return SDNPU_OK;
}
