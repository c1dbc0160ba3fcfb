/* tests/util_common.c - failure-injecting (and dirtying) allocator, temp
 * files, PRNG. */
#include "util_common.h"

#include "graphs/cpu/attention.h"
#include "graphs/quant.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sdnpu.h"

static long g_fail_after = -1;
static long g_count;
static long g_live;
static int g_fill = -1;

static void *t_malloc(size_t size, void *user) {
    (void)user;
    if (g_fail_after >= 0 && g_count >= g_fail_after) return NULL;
    g_count++;
    void *p = malloc(size);
    if (p) g_live++;
    if (p && g_fill >= 0) memset(p, g_fill, size);
    return p;
}

/* A grown block's new bytes get the fill from the old block's usable end
 * (what the C library may have handed out beyond the size asked keeps
 * whatever it held). */
static void *t_realloc(void *ptr, size_t size, void *user) {
    (void)user;
    if (g_fail_after >= 0 && g_count >= g_fail_after) return NULL;
    g_count++;
    const size_t old = ptr ? malloc_usable_size(ptr) : 0;
    void *p = realloc(ptr, size);
    if (p && !ptr) g_live++;
    if (p && g_fill >= 0 && size > old) memset((char *)p + old, g_fill, size - old);
    return p;
}

static void t_free(void *ptr, void *user) {
    (void)user;
    if (ptr) g_live--;
    free(ptr);
}

void sdt_alloc_install(void) {
    struct sdnpu_allocator a = {t_malloc, t_realloc, t_free, NULL};
    sdnpu_allocator_set(&a);
}

void sdt_alloc_fill(int byte) { g_fill = byte; }

void sdt_alloc_fail_after(long n) {
    g_fail_after = n;
    g_count = 0;
}

long sdt_alloc_live(void) { return g_live; }
long sdt_alloc_count(void) { return g_count; }

const char *sdt_write_temp(const void *data, size_t size) {
    static char paths[8][64];
    static int next;
    char *p = paths[next++ & 7];
    snprintf(p, 64, "/tmp/sdnpu-test-XXXXXX");
    int fd = mkstemp(p);
    if (fd < 0) return NULL;
    const unsigned char *b = data;
    while (size > 0) {
        ssize_t w = write(fd, b, size);
        if (w <= 0) {
            close(fd);
            return NULL;
        }
        b += w;
        size -= (size_t)w;
    }
    close(fd);
    return p;
}

uint64_t sdt_rand_u64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

float sdt_rand_float(uint64_t *s) { return (float)((double)(sdt_rand_u64(s) >> 11) * 0x1.0p-53 * 2.0 - 1.0); }

bool sdt_file_exists(const char *path) { return access(path, R_OK) == 0; }

struct sdnpu_spec sdt_spec(const char *text) {
    struct sdnpu_spec sp;
    char err[256];
    if (sdnpu_spec_parse(text, &sp, err, sizeof err) != SDNPU_OK) {
        fprintf(stderr, "test: bad spec text '%s': %s\n", text, err);
        abort();
    }
    return sp;
}

struct sdnpu_model *sdt_model(const char *path, int n_threads, bool use_mmap) {
    struct sdnpu_model_params mp = sdnpu_model_default_params();
    mp.n_threads = n_threads;
    mp.use_mmap = use_mmap;
    struct sdnpu_model *m = NULL;
    char err[512];
    if (sdnpu_model_load(path, mp, &m, err, sizeof err) != SDNPU_OK) {
        fprintf(stderr, "test: cannot load %s: %s\n", path, err);
        abort();
    }
    return m;
}

bool sdt_collect(const char *piece, size_t len, void *user) {
    struct sdt_text *t = user;
    if (t->n + len < sizeof t->buf) {
        memcpy(t->buf + t->n, piece, len);
        t->n += len;
    }
    return true;
}

bool sdt_use_impl(enum sdt_impl i) {
    if (i == SDT_SCALAR) return sd_quant_set_impl(SD_IMPL_SCALAR) == SD_IMPL_SCALAR;
    if (sd_quant_set_impl(SD_IMPL_AVX2) != SD_IMPL_AVX2) return false;
    const bool wide = i >= SDT_AVX512, vnni = i == SDT_AVX2_VNNI || i == SDT_AVX2_VNNI_GFNI,
               bf16 = i == SDT_AVX512_BF16, gfni = i == SDT_AVX2_VNNI_GFNI || i >= SDT_AVX512_GFNI;
    return sd_quant_set_avx512(wide) == wide && sd_quant_set_avxvnni(vnni) == vnni &&
           sd_quant_set_gfni(gfni) == gfni && sd_attn_set_bf16(bf16) == bf16;
}

void sdt_use_auto(void) {
    sd_quant_set_impl(SD_IMPL_AUTO);
    sd_quant_set_avx512(true);
    sd_quant_set_avxvnni(true);
    sd_quant_set_gfni(true);
    sd_attn_set_bf16(true);
}
