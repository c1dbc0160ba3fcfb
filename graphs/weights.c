/* graphs/weights.c - the shared store of prepared weights (graphs/weights.h);
 * the cache file's format is graphs/wcache.c's. */
#include "graphs/weights.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "graphs/cert.h"
#include "graphs/packed.h"
#include "graphs/wcache.h"

/* One packed weight of the model. Its data is its own buffer, or a place
 * in the cached model (the blob) while the store is backed by a cache. */
struct entry {
    const struct sd_weight *w; /* the model's */
    size_t bytes;              /* sd_packed_bytes, and a certificate's */
    size_t cert_off;           /* where the output's certificate follows its copy (0: none) */
    size_t off;                /* its place in the blob */
    void *own;
    const void *data;          /* own, into the blob, or NULL while not built */
    int32_t refs;              /* holders holding it */
};

struct sd_wstore {
    const struct sd_model *m;
    pthread_mutex_t mu;
    struct entry *e;
    int32_t n;
    int32_t n_held;            /* entries with refs > 0 */
    size_t bytes;              /* held now: own buffers, or the blob */
    /* The cache (use_cache): every entry lives in one blob, read from or
     * written to path. */
    bool use_cache;
    char *path;
    struct sd_wcache_key key;
    uint8_t *blob;              /* packed here (no valid file) ... */
    struct sd_wcache_map map;   /* ... or the file mapped */
    size_t blob_bytes;
    const char *state;
    /* Head "exact" on a model that "auto" certifies: the certificate's
     * bytes, which the cache file holds all the same (one file for both
     * modes, where each switch rebuilt it: 4.7 s on the 1.5B), and
     * whether the output's entry carries them so (never read then). */
    size_t spare_cert;
    bool cert_spare;
};

struct sd_wholder {
    struct sd_wstore *ws;
    int32_t *count;            /* [ws->n] takes not yet dropped */
    int32_t n_held;            /* entries with count > 0 */
    size_t own_bytes;          /* their bytes, without a cache */
};

bool sd_head_mode_parse(const char *s, enum sd_head_mode *out) {
    if (!s || strcmp(s, "auto") == 0) *out = SD_HEAD_AUTO;
    else if (strcmp(s, "exact") == 0) *out = SD_HEAD_EXACT;
    else if (strcmp(s, "certified") == 0) *out = SD_HEAD_CERTIFIED;
    else return false;
    return true;
}

bool sd_weights_mode_parse(const char *s, enum sd_weights_mode *out) {
    if (!s || strcmp(s, "shared") == 0) *out = SD_WEIGHTS_SHARED;
    else if (strcmp(s, "private") == 0) *out = SD_WEIGHTS_PRIVATE;
    else return false;
    return true;
}

/* ---------------------------------------------------------------- packing */

/* Groups [g0, g1) of w (16 outputs each) packed into dst, and its
 * certificate's groups where it has one, split over the threads that run
 * the job. */
struct pack_job {
    const struct sd_weight *w;
    uint8_t *dst;
    uint8_t *cert;    /* NULL, or where w's certificate is built too ... */
    uint8_t *scratch; /* ... with each thread's scratch, scratch_bytes apart */
    size_t scratch_bytes;
    int64_t g0, g1;
};

static void pack_job_run(void *ctx, int ith, int nth) {
    const struct pack_job *j = ctx;
    const struct sd_weight *w = j->w;
    int64_t a, b;
    sd_split(j->g1 - j->g0, ith, nth, &a, &b);
    sd_pack_groups(w->type, w->data, w->row_bytes, w->n_out, w->n_in, j->dst, j->g0 + a, j->g0 + b);
    if (j->cert)
        sd_cert_build(w->type, w->data, w->row_bytes, w->n_out, w->n_in, j->cert, j->g0 + a, j->g0 + b,
                      j->scratch + (size_t)ith * j->scratch_bytes);
}

static void pack_range(struct sd_pool *pool, struct pack_job *j) {
    if (pool) sd_pool_run(pool, pack_job_run, j);
    else pack_job_run(j, 0, 1);
}

void sd_weight_pack(struct sd_pool *pool, const struct sd_weight *w, void *dst) {
    struct pack_job j = {.w = w, .dst = dst, .g1 = (w->n_out + SD_PK_COLS - 1) / SD_PK_COLS};
    pack_range(pool, &j);
}

/* Groups a slice of packing covers: 8,192 outputs, 8 MB of q8_0 rows of
 * 896 values. */
#define PACK_SLICE_GROUPS 512

/* Pack entry e into dst, giving back the model file's pages of each slice
 * of rows as soon as it is packed: nothing reads the GGUF rows of a packed
 * weight again but the embedding's look-ups (a tied output) and a
 * calibration head's gather, which fault in what they touch; and slice by
 * slice, the file's pages never add more than a slice to the resident
 * memory (the whole 145 MB output projection of Qwen2.5-0.5B did, beside
 * its packed copy). */
static int pack_entry(const struct sd_wstore *ws, const struct entry *e, struct sd_pool *pool, void *dst,
                      struct sd_err *err) {
    const struct sd_weight *w = e->w;
    const int64_t n_groups = (w->n_out + SD_PK_COLS - 1) / SD_PK_COLS;
    struct pack_job j = {.w = w, .dst = dst};
    if (e->cert_off) { /* the pool's threads allocate nothing: their scratch is made here */
        j.cert = (uint8_t *)dst + e->cert_off;
        j.scratch_bytes = sd_cert_scratch_bytes(w->type, w->n_in);
        j.scratch = sd_malloc((size_t)(pool ? sd_pool_n_threads(pool) : 1) * j.scratch_bytes);
        if (!j.scratch) return sd_err_set(err, SDNPU_ERR_OOM, "out of memory certifying the output projection");
    }
    for (int64_t g0 = 0; g0 < n_groups; g0 += PACK_SLICE_GROUPS) {
        j.g0 = g0;
        j.g1 = SD_MIN(n_groups, g0 + PACK_SLICE_GROUPS);
        pack_range(pool, &j);
        if (!ws->m->file_mapped) continue;
        const int64_t r0 = g0 * SD_PK_COLS, r1 = SD_MIN(w->n_out, j.g1 * SD_PK_COLS);
        sd_drop_pages((const uint8_t *)w->data + (size_t)r0 * w->row_bytes, (size_t)(r1 - r0) * w->row_bytes);
    }
    sd_free(j.scratch);
    return SDNPU_OK;
}

/* ---------------------------------------------------------------- the store */

static void add_entry(struct sd_wstore *ws, const struct sd_weight *w) {
    size_t bytes = sd_packed_bytes(w->type, w->n_out, w->n_in);
    if (bytes == 0 || !w->data) return;
    for (int32_t i = 0; i < ws->n; i++)
        if (ws->e[i].w->data == w->data) return; /* one matrix under two names */
    ws->e[ws->n++] = (struct entry){.w = w, .bytes = bytes};
}

/* The certificate after e's packed copy, on a 64-byte boundary. */
static void place_certificate(struct entry *e, size_t cert) {
    e->cert_off = (e->bytes + 63) & ~(size_t)63;
    e->bytes = e->cert_off + cert;
}

/* The output's entry (the last) carries its certificate where head says
 * (graphs/weights.h: "auto" where it adds at most a quarter); "exact"
 * where "auto" would certify keeps its size for a cache file. */
static void add_certificate(struct sd_wstore *ws, enum sd_head_mode head) {
    if (ws->n == 0 || ws->e[ws->n - 1].w != &ws->m->output) return;
    struct entry *e = &ws->e[ws->n - 1];
    const size_t cert = sd_cert_bytes(e->w->type, e->w->n_out, e->w->n_in);
    size_t all = 0;
    for (int32_t i = 0; i < ws->n; i++) all += ws->e[i].bytes;
    const bool by_auto = cert > 0 && cert <= all / 4;
    if (head == SD_HEAD_EXACT)
        ws->spare_cert = by_auto ? cert : 0;
    else if (head == SD_HEAD_CERTIFIED ? cert > 0 : by_auto)
        place_certificate(e, cert);
}

bool sd_wstore_certified(const struct sd_wstore *ws) {
    for (int32_t i = 0; ws && !ws->cert_spare && i < ws->n; i++)
        if (ws->e[i].cert_off) return true;
    return false;
}

int sd_wstore_create(const struct sd_model *m, enum sd_head_mode head, struct sd_wstore **out, struct sd_err *err) {
    *out = NULL;
    struct sd_wstore *ws = sd_calloc(1, sizeof *ws);
    const size_t cap = (size_t)m->cfg.n_layer * 7 + 1;
    if (ws) ws->e = sd_calloc(cap, sizeof *ws->e);
    if (!ws || !ws->e) {
        sd_free(ws);
        return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for the weight store");
    }
    ws->m = m;
    ws->state = "none";
    for (int32_t il = 0; il < m->cfg.n_layer; il++) {
        const struct sd_layer *L = &m->layers[il];
        const struct sd_weight *w[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < SD_ARRAY_LEN(w); i++) add_entry(ws, w[i]);
    }
    add_entry(ws, &m->output);
    add_certificate(ws, head);
    pthread_mutex_init(&ws->mu, NULL);
    *out = ws;
    return SDNPU_OK;
}

void sd_wstore_free(struct sd_wstore *ws) {
    if (!ws) return;
    for (int32_t i = 0; i < ws->n; i++) sd_aligned_free(ws->e[i].own);
    sd_aligned_free(ws->blob);
    sd_wcache_unmap(&ws->map);
    pthread_mutex_destroy(&ws->mu);
    sd_free(ws->path);
    sd_free(ws->e);
    sd_free(ws);
}

/* Make dir and its parents (mode 0700: the cache is the user's). */
static int make_dirs(const char *dir, struct sd_err *err) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "weight cache directory: path too long");
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p) continue;
        const char c = *p;
        *p = '\0';
        if (mkdir(path, 0700) && errno != EEXIST)
            return sd_err_set(err, SDNPU_ERR_IO, "weight cache directory %s: %s", path, strerror(errno));
        if (!(*p = c)) break;
    }
    return SDNPU_OK;
}

int sd_wstore_use_cache(struct sd_wstore *ws, const char *dir, const struct sd_wcache_key *key, struct sd_err *err) {
    int rc = make_dirs(dir, err);
    if (rc) return rc;
    char name[64];
    snprintf(name, sizeof name, "/%016llx.sdw", (unsigned long long)key->name);
    char *path = sd_malloc(strlen(dir) + strlen(name) + 1);
    if (!path) return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for the weight cache's path");
    strcpy(path, dir);
    strcat(path, name);
    pthread_mutex_lock(&ws->mu);
    if (ws->use_cache || ws->n_held) {
        pthread_mutex_unlock(&ws->mu);
        sd_free(path);
        return SDNPU_OK;
    }
    ws->use_cache = true;
    ws->path = path;
    ws->key = *key;
    if (ws->spare_cert) {
        place_certificate(&ws->e[ws->n - 1], ws->spare_cert);
        ws->cert_spare = true;
    }
    size_t off = 0;
    for (int32_t i = 0; i < ws->n; i++) {
        ws->e[i].off = off;
        off += (ws->e[i].bytes + 63) & ~(size_t)63;
    }
    ws->blob_bytes = off;
    pthread_mutex_unlock(&ws->mu);
    return SDNPU_OK;
}

const char *sd_wstore_cache_state(const struct sd_wstore *ws) { return ws ? ws->state : "none"; }

size_t sd_wstore_bytes(struct sd_wstore *ws) {
    pthread_mutex_lock(&ws->mu);
    size_t n = ws->bytes;
    pthread_mutex_unlock(&ws->mu);
    return n;
}

/* The cache file's table: each entry's type, shape and place. */
static void cache_table(const struct sd_wstore *ws, struct sd_wcache_entry *t) {
    for (int32_t i = 0; i < ws->n; i++)
        t[i] = (struct sd_wcache_entry){.type = (uint32_t)ws->e[i].w->type,
                                        .n_out = ws->e[i].w->n_out,
                                        .n_in = ws->e[i].w->n_in,
                                        .off = ws->e[i].off,
                                        .bytes = ws->e[i].bytes};
}

/* Under the lock: the whole packed model packed here and written to the
 * cache file, in ws->blob. */
static int pack_blob(struct sd_wstore *ws, struct sd_pool *pool, const struct sd_wcache_entry *t,
                     struct sd_err *err) {
    ws->blob = sd_aligned_alloc(ws->blob_bytes ? ws->blob_bytes : 64);
    if (!ws->blob)
        return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for the packed weights (%zu bytes)", ws->blob_bytes);
    sd_advise_huge_pages(ws->blob, ws->blob_bytes);
    for (int32_t i = 0; i < ws->n; i++) {
        int rc = pack_entry(ws, &ws->e[i], pool, ws->blob + ws->e[i].off, err);
        if (rc) {
            sd_aligned_free(ws->blob);
            ws->blob = NULL;
            return rc;
        }
    }
    struct sd_err why = {0};
    int rc = sd_wcache_write(ws->path, &ws->key, t, ws->n, ws->blob, ws->blob_bytes, &why);
    ws->state = rc ? "failed" : "built";
    if (rc) SD_LOGW("weight cache %s: %s; the weights were packed without it", ws->path, why.msg);
    return SDNPU_OK;
}

/* What the cached model occupies, without a spare certificate's pages,
 * which nothing reads. */
static size_t cached_bytes(const struct sd_wstore *ws) {
    return ws->blob_bytes - (ws->cert_spare ? ws->spare_cert : 0);
}

/* Under the lock: bring in the whole packed model, mapped from the cache
 * file if it is valid (no copy: its pages are the page cache's, shared
 * with every process of the model, where reading it into memory of our
 * own cost a second copy and zeroing each page first, 1.5 s of a 1 GB
 * model's start), else packed here and written there. */
static int load_blob(struct sd_wstore *ws, struct sd_pool *pool, struct sd_err *err) {
    struct sd_wcache_entry *t = sd_calloc((size_t)ws->n, sizeof *t);
    if (!t) return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for the weight cache's table");
    cache_table(ws, t);
    struct sd_err why = {0};
    int rc = sd_wcache_map(ws->path, &ws->key, t, ws->n, ws->blob_bytes, &ws->map, &why);
    if (rc == SDNPU_OK) {
        ws->state = "loaded";
    } else {
        if (rc != SDNPU_ERR_NOT_FOUND) SD_LOGW("weight cache %s: %s; rebuilding it", ws->path, why.msg);
        rc = pack_blob(ws, pool, t, err);
    }
    sd_free(t);
    if (rc) return rc;
    const uint8_t *base = ws->blob ? ws->blob : ws->map.data;
    for (int32_t i = 0; i < ws->n; i++) ws->e[i].data = base + ws->e[i].off;
    if (ws->cert_spare) { /* built for the file, or read in by its checksum: never read again */
        const struct entry *o = &ws->e[ws->n - 1];
        sd_drop_pages((const uint8_t *)o->data + o->cert_off, ws->spare_cert);
    }
    ws->bytes = cached_bytes(ws);
    return SDNPU_OK;
}

/* ---------------------------------------------------------------- holders */

int sd_wholder_create(struct sd_wstore *ws, struct sd_wholder **out, struct sd_err *err) {
    struct sd_wholder *h = sd_calloc(1, sizeof *h);
    if (h) h->count = sd_calloc((size_t)ws->n + 1, sizeof *h->count);
    if (!h || !h->count) {
        sd_free(h);
        return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for a weight holder");
    }
    h->ws = ws;
    *out = h;
    return SDNPU_OK;
}

static int32_t find(const struct sd_wstore *ws, const struct sd_weight *w) {
    for (int32_t i = 0; i < ws->n; i++)
        if (ws->e[i].w->data == w->data && ws->e[i].w->type == w->type && ws->e[i].w->n_out == w->n_out)
            return i;
    return -1;
}

bool sd_wholder_has(const struct sd_wholder *h, const struct sd_weight *w) { return find(h->ws, w) >= 0; }

const void *sd_wholder_cert(const struct sd_wholder *h, const struct sd_weight *w, const void *data) {
    const int32_t i = find(h->ws, w);
    return i >= 0 && h->ws->e[i].cert_off && !h->ws->cert_spare ? (const uint8_t *)data + h->ws->e[i].cert_off
                                                                : NULL;
}

/* Under the lock: the last holder of entry i let it go. Without a cache
 * its buffer goes; with one, the blob goes with the last entry held. */
static void let_go(struct sd_wstore *ws, int32_t i) {
    struct entry *e = &ws->e[i];
    if (--e->refs) return;
    ws->n_held--;
    if (e->own) {
        sd_aligned_free(e->own);
        e->own = NULL;
        e->data = NULL;
        ws->bytes -= e->bytes;
    }
    if ((ws->blob || ws->map.base) && ws->n_held == 0) {
        sd_aligned_free(ws->blob);
        ws->blob = NULL;
        sd_wcache_unmap(&ws->map);
        ws->bytes = 0;
        for (int32_t k = 0; k < ws->n; k++) ws->e[k].data = NULL;
    }
}

/* Under the lock: make entry i's data, alone or with the whole blob. */
static int build(struct sd_wstore *ws, int32_t i, struct sd_pool *pool, struct sd_err *err) {
    struct entry *e = &ws->e[i];
    if (ws->use_cache) return load_blob(ws, pool, err);
    e->own = sd_aligned_alloc(e->bytes);
    if (!e->own) return sd_err_set(err, SDNPU_ERR_OOM, "out of memory packing a weight (%zu bytes)", e->bytes);
    sd_advise_huge_pages(e->own, e->bytes); /* packing faults its pages in 2 MiB at a time */
    int rc = pack_entry(ws, e, pool, e->own, err);
    if (rc) {
        sd_aligned_free(e->own);
        e->own = NULL;
        return rc;
    }
    e->data = e->own;
    ws->bytes += e->bytes;
    return SDNPU_OK;
}

int sd_wholder_take(struct sd_wholder *h, const struct sd_weight *w, struct sd_pool *pool, const void **data,
                    struct sd_err *err) {
    struct sd_wstore *ws = h->ws;
    const int32_t i = find(ws, w);
    if (i < 0) return sd_err_set(err, SDNPU_ERR_STATE, "a weight the store does not hold was asked for");
    pthread_mutex_lock(&ws->mu);
    struct entry *e = &ws->e[i];
    int rc = e->data ? SDNPU_OK : build(ws, i, pool, err);
    if (rc == SDNPU_OK) {
        if (h->count[i]++ == 0) {
            h->n_held++;
            h->own_bytes += e->bytes;
            if (e->refs++ == 0) ws->n_held++;
        }
        *data = e->data;
    }
    pthread_mutex_unlock(&ws->mu);
    return rc;
}

void sd_wholder_drop(struct sd_wholder *h, const struct sd_weight *w) {
    struct sd_wstore *ws = h->ws;
    const int32_t i = find(ws, w);
    if (i < 0) return;
    pthread_mutex_lock(&ws->mu);
    if (h->count[i] > 0 && --h->count[i] == 0) {
        h->n_held--;
        h->own_bytes -= ws->e[i].bytes;
        let_go(ws, i);
    }
    pthread_mutex_unlock(&ws->mu);
}

void sd_wholder_free(struct sd_wholder *h) {
    if (!h) return;
    struct sd_wstore *ws = h->ws;
    pthread_mutex_lock(&ws->mu);
    for (int32_t i = 0; i < ws->n; i++)
        if (h->count[i]) let_go(ws, i);
    pthread_mutex_unlock(&ws->mu);
    sd_free(h->count);
    sd_free(h);
}

/* Under the lock: what the holder counts as its own. With a cache the blob
 * is one allocation, counted whole by every holder of any part of it. */
static size_t held_locked(const struct sd_wholder *h) {
    if (h->ws->use_cache) return h->n_held ? cached_bytes(h->ws) : 0;
    return h->own_bytes;
}

size_t sd_wholder_need(struct sd_wholder *h, const struct sd_weight *const *w, int32_t n) {
    struct sd_wstore *ws = h->ws;
    size_t need = 0;
    bool any = false;
    pthread_mutex_lock(&ws->mu);
    for (int32_t k = 0; k < n; k++) {
        const int32_t i = find(ws, w[k]);
        if (i < 0 || h->count[i]) continue;
        bool twice = false; /* one matrix under two names counts once */
        for (int32_t j = 0; j < k; j++) twice |= find(ws, w[j]) == i;
        if (!twice) need += ws->e[i].bytes;
        any = true;
    }
    if (ws->use_cache) need = any && !h->n_held ? cached_bytes(ws) : 0;
    pthread_mutex_unlock(&ws->mu);
    return need;
}

size_t sd_wholder_bytes(struct sd_wholder *h) {
    pthread_mutex_lock(&h->ws->mu);
    size_t n = held_locked(h);
    pthread_mutex_unlock(&h->ws->mu);
    return n;
}
