/* tests/test_weights.c - shared prepared weights (graphs/weights.h): the
 * graphs of every L, both heads and two backends read one packed copy,
 * counted once and freed with the last graph; shared and private weights
 * compute the same bits; giving back the model file's pages leaves the
 * weights intact (and never touches a heap copy); the weight cache file is
 * written, read back bit for bit, and every damaged, stale, truncated or
 * hostile file is reported and rebuilt, and one file serves heads "auto"
 * and "exact"; a session computes the same tokens
 * with shared, private and cached weights. */
#define _XOPEN_SOURCE 700 /* realpath */
#define _DEFAULT_SOURCE /* MAP_POPULATE, MADV_HUGEPAGE, MADV_POPULATE_READ */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "base/base.h"
#include "engine/api.h"
#include "graphs/cert.h"
#include "graphs/packed.h"
#include "graphs/weights.h"
#include "sdnpu.h"
#include "util_common.h"
#include "util_tiny_model.h"

enum { L = 4, CTX = 64 };

static const char *tiny_path(const char *arch) {
    static char path[256];
    snprintf(path, sizeof path, "%s/test_weights_tiny_%s.gguf", SD_BUILD_DIR, arch);
    struct sdt_tiny_opts o = {.arch = arch};
    assert_int_equal(sdt_tiny_write(&o, path), 0);
    return path;
}

static struct sdnpu_model *load(const char *path, bool mmap) { return sdt_model(path, 2, mmap); }

/* The packed bytes of every distinct packable weight of m, summed
 * independently of the store. */
/* The output's entry in a store: its packed bytes, and where the store
 * certifies it (a q6_K or q8_0 head, graphs/cert.h) the certificate after
 * them on a 64-byte boundary. */
static size_t output_bytes(const struct sd_model *m, const struct sd_wstore *ws) {
    const struct sd_weight *o = &m->output;
    const size_t packed = sd_packed_bytes(o->type, o->n_out, o->n_in);
    return sd_wstore_certified(ws) ? ((packed + 63) & ~(size_t)63) + sd_cert_bytes(o->type, o->n_out, o->n_in)
                                   : packed;
}

static size_t packed_total(const struct sd_model *m, const struct sd_wstore *ws) {
    size_t n = 0;
    for (int32_t il = 0; il < m->cfg.n_layer; il++) {
        const struct sd_layer *Ly = &m->layers[il];
        const struct sd_weight *w[] = {&Ly->wq, &Ly->wk, &Ly->wv, &Ly->wo, &Ly->w_gate, &Ly->w_up, &Ly->w_down};
        for (size_t i = 0; i < 7; i++) n += sd_packed_bytes(w[i]->type, w[i]->n_out, w[i]->n_in);
    }
    return n + output_bytes(m, ws);
}

/* A block graph over every layer and a head, both of L rows, run on the
 * same rows: the head's logits [L][n_vocab] into out. */
static void run_model(struct sd_backend *be, int32_t rows_n, float *out) {
    const struct sd_model *w = be->m;
    struct sd_err e = {0};
    const struct sd_graph_shape bs = {SD_GRAPH_BLOCK, 0, w->cfg.n_layer, rows_n, CTX, NULL, 0};
    const struct sd_graph_shape hs = {SD_GRAPH_HEAD, 0, 0, rows_n, CTX, NULL, 0};
    struct sd_graph b, h;
    assert_int_equal(sd_graph_prepare(be, &bs, SIZE_MAX, &b, &e), SDNPU_OK);
    assert_int_equal(sd_graph_prepare(be, &hs, SIZE_MAX, &h, &e), SDNPU_OK);
    struct sd_kv_cache kv;
    assert_int_equal(sd_kv_create(w, CTX, sd_backend_kv_keys(be), &kv, &e), SDNPU_OK);
    struct sd_row rows[L];
    memset(rows, 0, sizeof rows);
    for (int32_t r = 0; r < rows_n; r++) rows[r] = (struct sd_row){.token = 7 + 3 * r, .pos = r, .slot = r, .n_prefix = r + 1};
    float *x = malloc(sizeof(float) * (size_t)w->cfg.d_model * L);
    sd_embed_rows(w, rows, rows_n, x);
    assert_int_equal(sd_graph_run(&b, &kv, rows, 0, x, NULL, &e), SDNPU_OK);
    assert_int_equal(sd_graph_run(&h, &kv, rows, 0, x, out, &e), SDNPU_OK);
    free(x);
    sd_kv_free(&kv);
    sd_graph_release(&b);
    sd_graph_release(&h);
}

/* Shared and private weights compute the same bits, and the file's pages
 * given back after packing read back intact: the private backend, run
 * after the shared one dropped them, re-reads the file. With the model in
 * heap memory (no mapping) nothing may be dropped at all. */
static void test_shared_equals_private(void **state) {
    (void)state;
    const char *archs[] = {"llama", "qwen2", "gemma3"};
    for (size_t a = 0; a < 3; a++) {
        for (int mm = 0; mm < 2; mm++) {
            struct sdnpu_model *m = load(tiny_path(archs[a]), mm);
            assert_int_equal(m->m->file_mapped, mm == 1);
            struct sd_pool *pool;
            struct sd_err e = {0};
            assert_int_equal(sd_pool_create(2, &pool, &e), SDNPU_OK);
            const size_t nl = (size_t)m->m->cfg.n_vocab * L;
            float *shared = malloc(nl * sizeof(float)), *priv = malloc(nl * sizeof(float));
            struct sd_backend *be;
            assert_int_equal(sd_backend_cpu_create(m->m, pool, SD_KERNELS_FAST, m->weights, &be, &e), SDNPU_OK);
            run_model(be, L, shared);
            sd_backend_free(be);
            assert_int_equal(sd_wstore_bytes(m->weights), 0); /* freed with the last graph */
            assert_int_equal(sd_backend_cpu_create(m->m, pool, SD_KERNELS_FAST, NULL, &be, &e), SDNPU_OK);
            run_model(be, L, priv);
            sd_backend_free(be);
            assert_memory_equal(shared, priv, nl * sizeof(float));
            free(shared);
            free(priv);
            sd_pool_free(pool);
            sdnpu_model_free(m);
        }
    }
}

/* One copy: graphs of two row counts, both heads and a second backend take
 * the store's weights once; the accounts count them once; the copy lives
 * until the last holder lets go. */
static void test_one_copy(void **state) {
    (void)state;
    struct sdnpu_model *m = load(tiny_path("qwen2"), true);
    const struct sd_model *w = m->m;
    struct sd_pool *p1, *p2;
    struct sd_err e = {0};
    assert_int_equal(sd_pool_create(2, &p1, &e), SDNPU_OK);
    assert_int_equal(sd_pool_create(1, &p2, &e), SDNPU_OK);
    struct sd_backend *b1, *b2;
    assert_int_equal(sd_backend_cpu_create(w, p1, SD_KERNELS_FAST, m->weights, &b1, &e), SDNPU_OK);
    assert_int_equal(sd_backend_cpu_create(w, p2, SD_KERNELS_FAST, m->weights, &b2, &e), SDNPU_OK);
    const size_t total = packed_total(w, m->weights);
    assert_true(total > 0);
    struct sd_graph g[4];
    const int32_t rows[2] = {1, L};
    for (int i = 0; i < 2; i++) {
        const struct sd_graph_shape bs = {SD_GRAPH_BLOCK, 0, w->cfg.n_layer, rows[i], CTX, NULL, 0};
        const struct sd_graph_shape hs = {SD_GRAPH_HEAD, 0, 0, rows[i], CTX, NULL, 0};
        const size_t before = sd_backend_shared_bytes(b1);
        const size_t est = b1->i->estimate(b1, &bs, 0);
        assert_int_equal(sd_graph_prepare(b1, &bs, SIZE_MAX, &g[2 * i], &e), SDNPU_OK);
        /* The estimate is exactly what preparing added: the block's weights the first time, none the second. */
        assert_int_equal(est, g[2 * i].prepared_bytes + sd_backend_shared_bytes(b1) - before);
        assert_int_equal(sd_graph_prepare(b1, &hs, SIZE_MAX, &g[2 * i + 1], &e), SDNPU_OK);
    }
    assert_int_equal(sd_wstore_bytes(m->weights), total);
    /* A graph's own bytes hold no weights: the 4-row block owns its scratch only. */
    assert_true(g[2].prepared_bytes < total / 4);
    /* The second backend takes the same copy: the store does not grow. */
    struct sd_graph g2;
    const struct sd_graph_shape all = {SD_GRAPH_BLOCK, 0, w->cfg.n_layer, 2, CTX, NULL, 0};
    assert_int_equal(sd_graph_prepare(b2, &all, SIZE_MAX, &g2, &e), SDNPU_OK);
    assert_int_equal(sd_wstore_bytes(m->weights), total);
    for (int i = 0; i < 4; i++) sd_graph_release(&g[i]);
    /* b2 still holds the blocks' weights: only the head's went. */
    assert_int_equal(sd_wstore_bytes(m->weights), total - output_bytes(w, m->weights));
    sd_graph_release(&g2);
    assert_int_equal(sd_wstore_bytes(m->weights), 0);
    sd_backend_free(b1);
    sd_backend_free(b2);
    sd_pool_free(p1);
    sd_pool_free(p2);
    sdnpu_model_free(m);
}

/* A calibration head's subset, gathered from the shared packed copy once
 * the backend holds it, computes the full head's logits at its tokens bit
 * for bit, and takes nothing more from the store; before the full head is
 * held it gathers the file's rows, with the same result. */
static void test_subset_from_store(void **state) {
    (void)state;
    const char *archs[] = {"llama", "gemma3"};
    for (size_t a = 0; a < 2; a++) {
        struct sdnpu_model *m = load(tiny_path(archs[a]), true);
        const struct sd_model *w = m->m;
        struct sd_pool *pool;
        struct sd_backend *be;
        struct sd_err e = {0};
        assert_int_equal(sd_pool_create(2, &pool, &e), SDNPU_OK);
        assert_int_equal(sd_backend_cpu_create(w, pool, SD_KERNELS_FAST, m->weights, &be, &e), SDNPU_OK);
        const int32_t subset[] = {300, 3, 17, 16, 255, 4, 383, 128, 64, 65};
        const int32_t ns = (int32_t)SD_ARRAY_LEN(subset);
        const struct sd_graph_shape full = {SD_GRAPH_HEAD, 0, 0, L, CTX, NULL, 0};
        const struct sd_graph_shape part = {SD_GRAPH_HEAD, 0, 0, L, CTX, subset, ns};
        struct sd_graph before, h, hs;
        assert_int_equal(sd_graph_prepare(be, &part, SIZE_MAX, &before, &e), SDNPU_OK); /* from the file */
        assert_int_equal(sd_wstore_bytes(m->weights), 0);
        assert_int_equal(sd_graph_prepare(be, &full, SIZE_MAX, &h, &e), SDNPU_OK);
        const size_t held = sd_wstore_bytes(m->weights);
        assert_int_equal(sd_graph_prepare(be, &part, SIZE_MAX, &hs, &e), SDNPU_OK); /* from the store */
        assert_int_equal(sd_wstore_bytes(m->weights), held);
        assert_int_equal(hs.prepared_bytes, before.prepared_bytes);
        const size_t d = (size_t)w->cfg.d_model, nv = (size_t)w->cfg.n_vocab;
        float *x = malloc(sizeof(float) * d * L), *lf = malloc(sizeof(float) * nv * L);
        float *l1 = malloc(sizeof(float) * (size_t)ns * L), *l2 = malloc(sizeof(float) * (size_t)ns * L);
        uint64_t seed = 5 + a;
        for (size_t i = 0; i < d * L; i++) x[i] = sdt_rand_float(&seed);
        assert_int_equal(sd_graph_run(&h, NULL, NULL, 0, x, lf, &e), SDNPU_OK);
        assert_int_equal(sd_graph_run(&before, NULL, NULL, 0, x, l1, &e), SDNPU_OK);
        assert_int_equal(sd_graph_run(&hs, NULL, NULL, 0, x, l2, &e), SDNPU_OK);
        assert_memory_equal(l1, l2, sizeof(float) * (size_t)ns * L);
        for (int32_t r = 0; r < L; r++)
            for (int32_t j = 0; j < ns; j++) assert_true(l2[r * ns + j] == lf[(size_t)r * nv + (size_t)subset[j]]);
        free(x), free(lf), free(l1), free(l2);
        sd_graph_release(&before);
        sd_graph_release(&hs);
        sd_graph_release(&h);
        sd_backend_free(be);
        sd_pool_free(pool);
        sdnpu_model_free(m);
    }
}

/* ------------------------------------------------------------- the cache */

static char g_dir[256];

static void cache_dir(const char *name) {
    snprintf(g_dir, sizeof g_dir, "%s/test_weights_cache_%s", SD_BUILD_DIR, name);
    char cmd[320];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    assert_int_equal(system(cmd), 0);
}

static const char *cache_file(struct sd_wcache_key k) {
    static char path[320];
    snprintf(path, sizeof path, "%s/%016llx.sdw", g_dir, (unsigned long long)k.name);
    return path;
}

/* Whether p lies in a mapping of the file at path, and (huge) whether that
 * mapping asks for 2 MiB pages (VmFlags "hg"), by /proc/self/smaps. */
static bool mapped_from(const void *p, const char *path, bool *huge) {
    char *real = realpath(path, NULL);
    FILE *f = fopen("/proc/self/smaps", "r");
    assert_non_null(f);
    char line[4608], name[4096];
    bool in = false;
    unsigned long long a, b;
    if (huge) *huge = false;
    while (fgets(line, sizeof line, f)) {
        name[0] = '\0';
        if (sscanf(line, "%llx-%llx %*s %*s %*s %*s %4095s", &a, &b, name) >= 2) {
            if (in) break; /* the next mapping's entry */
            in = (uintptr_t)p >= a && (uintptr_t)p < b && real && strcmp(name, real) == 0;
        } else if (in && huge && !strncmp(line, "VmFlags:", 8)) {
            *huge = strstr(line, " hg") != NULL;
        }
    }
    fclose(f);
    free(real);
    return in;
}

/* A new store of head mode head backed by the cache in g_dir (key k), and
 * a holder of it. */
static struct sd_wholder *cache_holder_as(struct sdnpu_model *m, struct sd_wcache_key k,
                                          enum sd_head_mode head, struct sd_wstore **ws) {
    struct sd_wholder *h;
    struct sd_err e = {0};
    assert_int_equal(sd_wstore_create(m->m, head, ws, &e), SDNPU_OK);
    assert_int_equal(sd_wstore_use_cache(*ws, g_dir, &k, &e), SDNPU_OK);
    assert_int_equal(sd_wholder_create(*ws, &h, &e), SDNPU_OK);
    return h;
}

static struct sd_wholder *cache_holder(struct sdnpu_model *m, struct sd_wcache_key k, struct sd_wstore **ws) {
    return cache_holder_as(m, k, SD_HEAD_AUTO, ws);
}

/* Take every weight of a new store backed by the cache in g_dir (key k),
 * each compared with a fresh pack of it: returns the state the cache
 * reached ("built", "loaded", "failed"). Loaded, the weights are the
 * file's pages mapped (no copy), and unmapped when the store goes. */
static const char *take_all(struct sdnpu_model *m, struct sd_wcache_key k) {
    struct sd_wstore *ws;
    struct sd_wholder *h = cache_holder(m, k, &ws);
    struct sd_err e = {0};
    const struct sd_model *w = m->m;
    const void *first = NULL;
    for (int32_t il = 0; il < w->cfg.n_layer; il++) {
        const struct sd_layer *Ly = &w->layers[il];
        const struct sd_weight *ww[] = {&Ly->wq, &Ly->wk, &Ly->wv, &Ly->wo, &Ly->w_gate, &Ly->w_up, &Ly->w_down};
        for (size_t i = 0; i < 7; i++) {
            if (!sd_wholder_has(h, ww[i])) continue;
            const void *data;
            assert_int_equal(sd_wholder_take(h, ww[i], NULL, &data, &e), SDNPU_OK);
            if (!first) first = data;
            const size_t n = sd_packed_bytes(ww[i]->type, ww[i]->n_out, ww[i]->n_in);
            void *fresh = sd_aligned_alloc(n);
            sd_weight_pack(NULL, ww[i], fresh);
            assert_memory_equal(data, fresh, n);
            sd_aligned_free(fresh);
        }
    }
    static char state[16];
    snprintf(state, sizeof state, "%s", sd_wstore_cache_state(ws));
    assert_non_null(first);
    bool huge = false;
    const bool loaded = strcmp(state, "loaded") == 0;
    assert_true(mapped_from(first, cache_file(k), &huge) == loaded);
    /* The advice for 2 MiB pages, given before the pages are read, where
     * the kernel has transparent huge pages. */
    if (loaded && access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) == 0) assert_true(huge);
    sd_wholder_free(h);
    assert_false(mapped_from(first, cache_file(k), NULL));
    sd_wstore_free(ws);
    return state;
}

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) ? -1 : (long)st.st_size;
}

/* Change the byte at off (from the end if negative) by xor. */
static void flip(const char *path, long off, unsigned char x) {
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, off, off < 0 ? SEEK_END : SEEK_SET), 0);
    int c = fgetc(f);
    assert_int_equal(fseek(f, -1, SEEK_CUR), 0);
    fputc(c ^ x, f);
    fclose(f);
}

static void test_cache_roundtrip(void **state) {
    (void)state;
    struct sdnpu_model *m = load(tiny_path("llama"), true);
    cache_dir("roundtrip");
    const struct sd_wcache_key k = m->cache_key;
    assert_string_equal(take_all(m, k), "built");
    const long size = file_size(cache_file(k));
    assert_true(size > (long)packed_total(m->m, m->weights));
    assert_string_equal(take_all(m, k), "loaded");
    /* Another version of the model file (a new id) rebuilds it. */
    struct sd_wcache_key other = k;
    other.id ^= 1;
    assert_string_equal(take_all(m, other), "built");
    assert_string_equal(take_all(m, other), "loaded");
    assert_string_equal(take_all(m, k), "built");
    /* A file packed with q5's fifth bits in the other layout (another
     * CPU's, graphs/packed.h) is rebuilt, not read. */
    const enum sd_pk_bits here = sd_packed_bits(),
                          there = here == SD_PK_BITS_SLICED ? SD_PK_BITS_MASKS : SD_PK_BITS_SLICED;
    sd_packed_set_bits(there);
    fprintf(stderr, "(expect a warning) a file of the other bit layout:\n");
    assert_string_equal(take_all(m, k), "built");
    assert_string_equal(take_all(m, k), "loaded");
    sd_packed_set_bits(here);
    fprintf(stderr, "(expect a warning) and back:\n");
    assert_string_equal(take_all(m, k), "built");
    sdnpu_model_free(m);
}

/* The cache file's pages dropped from the page cache and read back in
 * 4 KiB pieces in a scattered order: the page cache holds it in 4 KiB
 * folios. */
static void read_in_small_pages(const char *path, long size) {
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(fdatasync(fd), 0); /* a drop leaves dirty pages */
    assert_int_equal(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
    assert_int_equal(posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM), 0);
    const long pages = size / 4096;
    char buf[4096];
    for (long i = 0; i < pages; i++) assert_true(pread(fd, buf, sizeof buf, (i * 7919) % pages * 4096) > 0);
    close(fd);
}

/* Bytes in 2 MiB pages of a mapping of the file: plain (as it lies in the
 * page cache), or advised and read after the file is dropped (what this
 * system gives a file read whole: 0 where it has no large folios for it). */
static long long huge_bytes_mapped(const char *path, long size, bool fresh) {
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    if (fresh) {
        assert_int_equal(fdatasync(fd), 0);
        assert_int_equal(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
    }
    void *p = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE | (fresh ? 0 : MAP_POPULATE), fd, 0);
    assert_true(p != MAP_FAILED);
    if (fresh) {
        (void)madvise(p, (size_t)size, MADV_HUGEPAGE);
        (void)madvise(p, (size_t)size, MADV_POPULATE_READ);
    }
    const long long n = sd_mapped_huge_bytes(p);
    munmap(p, (size_t)size);
    close(fd);
    return n;
}

/* Bytes in 2 MiB pages of the loaded cache's mapping (key k). */
static long long huge_bytes_loaded(struct sdnpu_model *m, struct sd_wcache_key k) {
    struct sd_wstore *ws;
    struct sd_wholder *h = cache_holder(m, k, &ws);
    struct sd_err e = {0};
    const void *data = NULL;
    assert_int_equal(sd_wholder_take(h, &m->m->layers[0].w_up, NULL, &data, &e), SDNPU_OK);
    assert_string_equal(sd_wstore_cache_state(ws), "loaded");
    const long long n = sd_mapped_huge_bytes(data);
    sd_wholder_free(h);
    sd_wstore_free(ws);
    return n;
}

/* A page cache that holds the cache file in 4 KiB pages (an older sdnpu's
 * faults, another program's small reads) is read again in 2 MiB pages at
 * the next load. Skipped where the system gives a file read whole no
 * 2 MiB pages, or small reads no 4 KiB folios. */
static void test_cache_small_pages(void **state) {
    (void)state;
    char path[256];
    snprintf(path, sizeof path, "%s/test_weights_wide_llama.gguf", SD_BUILD_DIR);
    struct sdt_tiny_opts o = {.arch = "llama", .n_layer = 2, .d_model = 1024, .n_ff = 4096};
    assert_int_equal(sdt_tiny_write(&o, path), 0);
    struct sdnpu_model *m = load(path, true);
    cache_dir("small_pages");
    const struct sd_wcache_key k = m->cache_key;
    assert_string_equal(take_all(m, k), "built");
    const char *file = cache_file(k);
    const long size = file_size(file);
    assert_true(size >= 16L << 20);
    if (huge_bytes_mapped(file, size, true) <= 0) {
        print_message("[  SKIPPED ] this file system or kernel gives the file no 2 MiB pages\n");
        sdnpu_model_free(m);
        return;
    }
    read_in_small_pages(file, size);
    if (huge_bytes_mapped(file, size, false) >= size / 4) {
        print_message("[  SKIPPED ] reading in 4 KiB pieces left the file in large folios here\n");
        sdnpu_model_free(m);
        return;
    }
    assert_true(huge_bytes_loaded(m, k) >= size / 2);
    sdnpu_model_free(m);
}

/* The output's copy and certificate under head mode head, from the cache
 * in g_dir (key k): the state the cache reached, and where the store
 * certifies, the certificate held to the one a store without a cache
 * builds; where it does not, none given. */
static const char *take_head(struct sdnpu_model *m, struct sd_wcache_key k, enum sd_head_mode head,
                             const void *want_cert, size_t cert_bytes) {
    struct sd_wstore *ws;
    struct sd_wholder *h = cache_holder_as(m, k, head, &ws);
    struct sd_err e = {0};
    const struct sd_weight *o = &m->m->output;
    const void *data;
    assert_int_equal(sd_wholder_take(h, o, NULL, &data, &e), SDNPU_OK);
    const void *cert = sd_wholder_cert(h, o, data);
    assert_true(sd_wstore_certified(ws) == (head != SD_HEAD_EXACT));
    assert_true((cert != NULL) == (head != SD_HEAD_EXACT));
    if (cert)
        assert_memory_equal(cert, want_cert, cert_bytes);
    else
        assert_true(sd_wstore_bytes(ws) + cert_bytes <= (size_t)file_size(cache_file(k))); /* not counted */
    static char state[16];
    snprintf(state, sizeof state, "%s", sd_wstore_cache_state(ws));
    sd_wholder_free(h);
    sd_wstore_free(ws);
    return state;
}

/* "auto" and "exact" read one cache file, whichever wrote it: a switch of
 * head mode does not rebuild it. */
static void test_cache_heads(void **state) {
    (void)state;
    struct sdnpu_model *m = load(tiny_path("qwen2"), true);
    const struct sd_weight *o = &m->m->output;
    struct sd_wstore *plain;
    struct sd_wholder *ph;
    struct sd_err e = {0};
    const void *pdata;
    assert_int_equal(sd_wstore_create(m->m, SD_HEAD_AUTO, &plain, &e), SDNPU_OK);
    assert_int_equal(sd_wholder_create(plain, &ph, &e), SDNPU_OK);
    assert_int_equal(sd_wholder_take(ph, o, NULL, &pdata, &e), SDNPU_OK);
    const void *want = sd_wholder_cert(ph, o, pdata);
    assert_non_null(want); /* "auto" certifies this model's head */
    const size_t n = sd_cert_bytes(o->type, o->n_out, o->n_in);
    const struct sd_wcache_key k = m->cache_key;
    const enum sd_head_mode first[] = {SD_HEAD_EXACT, SD_HEAD_AUTO};
    for (int f = 0; f < 2; f++) {
        cache_dir("heads");
        assert_string_equal(take_head(m, k, first[f], want, n), "built");
        const long size = file_size(cache_file(k));
        assert_string_equal(take_head(m, k, first[1 - f], want, n), "loaded");
        assert_string_equal(take_head(m, k, first[f], want, n), "loaded");
        assert_int_equal(file_size(cache_file(k)), size);
    }
    sd_wholder_free(ph);
    sd_wstore_free(plain);
    sdnpu_model_free(m);
}

/* Every damaged file is refused (the weights still right), rebuilt, and
 * read back the next time. */
static void test_cache_damaged(void **state) {
    (void)state;
    struct sdnpu_model *m = load(tiny_path("gemma3"), true);
    cache_dir("damaged");
    const struct sd_wcache_key k = m->cache_key;
    assert_string_equal(take_all(m, k), "built");
    const char *path = cache_file(k);
    const long size = file_size(path);
    struct {
        const char *what;
        long off;
        unsigned char x;
        long truncate_to;
    } cases[] = {
        {"a bit in the data", -1, 0x10, -1},   {"a bit in the middle", size / 2, 0x01, -1},
        {"the magic", 0, 0xff, -1},            {"the format version", 8, 0x01, -1},
        {"the layout", 12, 0x01, -1},          {"the key", 20, 0x01, -1},
        {"the entry count", 32, 0x80, -1},     {"the checksum", 50, 0x01, -1},
        {"a table record", 64 + 8, 0x01, -1},  {"truncated to its header", 0, 0, 64},
        {"truncated by a byte", 0, 0, size - 1}, {"empty", 0, 0, 0},
    };
    for (size_t i = 0; i < SD_ARRAY_LEN(cases); i++) {
        if (cases[i].truncate_to >= 0) assert_int_equal(truncate(path, cases[i].truncate_to), 0);
        else flip(path, cases[i].off, cases[i].x);
        fprintf(stderr, "(expect a warning) %s:\n", cases[i].what);
        assert_string_equal(take_all(m, k), "built");
        assert_int_equal(file_size(path), size);
        assert_string_equal(take_all(m, k), "loaded");
    }
    /* A hostile header whose own hash holds: sizes and counts from the file
     * are checked against the model's, never used to read or allocate. */
    FILE *f = fopen(path, "r+b");
    unsigned char h[64];
    assert_int_equal(fread(h, 1, 64, f), 64);
    uint64_t big = UINT64_MAX / 2;
    memcpy(h + 32, &big, 8);
    memcpy(h + 40, &big, 8);
    uint64_t hh = XXH3_64bits(h, 56);
    memcpy(h + 56, &hh, 8);
    rewind(f);
    assert_int_equal(fwrite(h, 1, 64, f), 64);
    fclose(f);
    assert_string_equal(take_all(m, k), "built");
    /* A file longer than it should be. */
    f = fopen(path, "ab");
    fputc(0, f);
    fclose(f);
    assert_string_equal(take_all(m, k), "built");
    assert_string_equal(take_all(m, k), "loaded");
    sdnpu_model_free(m);
}

/* A cache that cannot be written costs only the cache. */
static void test_cache_unwritable(void **state) {
    (void)state;
    struct sdnpu_model *m = load(tiny_path("qwen2"), true);
    cache_dir("unwritable");
    const struct sd_wcache_key k = m->cache_key;
    assert_int_equal(mkdir(g_dir, 0700), 0);
    /* Its file's place taken by a directory: neither read nor renamed into. */
    assert_int_equal(mkdir(cache_file(k), 0700), 0);
    assert_string_equal(take_all(m, k), "failed");
    assert_string_equal(take_all(m, k), "failed");
    /* A directory path under a regular file cannot be made. */
    struct sd_wstore *ws;
    struct sd_err e = {0};
    assert_int_equal(sd_wstore_create(m->m, SD_HEAD_AUTO, &ws, &e), SDNPU_OK);
    char below[400];
    snprintf(below, sizeof below, "%s/x", SD_BUILD_DIR "/CMakeCache.txt");
    assert_int_equal(sd_wstore_use_cache(ws, below, &k, &e), SDNPU_ERR_IO);
    assert_non_null(strstr(e.msg, "weight cache directory"));
    sd_wstore_free(ws);
    sdnpu_model_free(m);
}

/* ------------------------------------------------------------- sessions */

static bool collect(const char *piece, size_t len, void *user) {
    char *buf = user;
    const size_t have = strlen(buf);
    if (have + len < 4096) memcpy(buf + have, piece, len), buf[have + len] = '\0';
    return true;
}

/* Greedy text of a speculative generation, into out [4096]; *prepared
 * the session's prepared bytes. */
static void generate(struct sdnpu_model *m, const char *weights, const char *cache, char *out, size_t *prepared) {
    struct sdnpu_session_params sp = sdnpu_session_default_params();
    sp.n_ctx = 256;
    sp.n_batch = 16;
    sp.weights = weights;
    sp.weight_cache = cache;
    struct sdnpu_session *s = NULL;
    assert_int_equal(sdnpu_session_create(m, sp, &s), SDNPU_OK);
    struct sdnpu_generate_params gp = sdnpu_generate_default_params();
    gp.n_predict = 24;
    gp.sampling.temperature = 0;
    gp.spec = sdt_spec("sam-tree");
    gp.on_text = collect;
    gp.user = out;
    out[0] = '\0';
    const char *prompt = "abc abd abc abd abc abe the cat the cat";
    struct sdnpu_stats st;
    int rc = sdnpu_session_generate(s, prompt, strlen(prompt), &gp, &st);
    assert_true(rc == SDNPU_OK);
    assert_true(st.n_generated > 0);
    *prepared = st.prepared_bytes;
    sdnpu_session_free(s);
}

static void test_session_modes(void **state) {
    (void)state;
    struct sdnpu_model *m = load(tiny_path("qwen2"), true);
    cache_dir("session");
    static char a[4096], b[4096], c[4096], d[4096];
    size_t pa, pb, pc, pd;
    generate(m, "private", NULL, a, &pa);
    generate(m, NULL, NULL, b, &pb);
    generate(m, "shared", g_dir, c, &pc);
    assert_string_equal(sd_wstore_cache_state(m->weights), "built");
    generate(m, "shared", g_dir, d, &pd);
    assert_string_equal(sd_wstore_cache_state(m->weights), "loaded");
    assert_true(strlen(a) > 0);
    assert_string_equal(a, b);
    assert_string_equal(a, c);
    assert_string_equal(a, d);
    assert_true(pb < pa); /* G1, G2, G0 and both heads held one copy */
    assert_int_equal(pc, pd);
    /* A cache directory that cannot be made: the session works without it. */
    char below[400];
    snprintf(below, sizeof below, "%s/x", SD_BUILD_DIR "/CMakeCache.txt");
    static char e[4096];
    size_t pe;
    generate(m, "shared", below, e, &pe);
    assert_string_equal(a, e);
    struct sdnpu_session_params sp = sdnpu_session_default_params();
    sp.weights = "copied";
    struct sdnpu_session *s = NULL;
    assert_int_equal(sdnpu_session_create(m, sp, &s), SDNPU_ERR_INVALID_ARG);
    assert_non_null(strstr(sdnpu_model_last_error(m), "weights \"copied\""));
    sdnpu_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shared_equals_private), cmocka_unit_test(test_one_copy),
        cmocka_unit_test(test_subset_from_store),     cmocka_unit_test(test_cache_roundtrip),
        cmocka_unit_test(test_cache_small_pages),     cmocka_unit_test(test_cache_heads),
        cmocka_unit_test(test_cache_damaged),         cmocka_unit_test(test_cache_unwritable),
        cmocka_unit_test(test_session_modes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
