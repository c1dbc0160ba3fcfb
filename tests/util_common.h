/* tests/util_common.h - helpers shared by the test programs. */
#ifndef SD_TEST_UTIL_COMMON_H
#define SD_TEST_UTIL_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sdnpu.h"

/* Failure injection: after sdt_alloc_fail_after(n), the (n+1)-th allocation
 * through the sdnpu allocator fails (n < 0 disables). sdt_alloc_live() is the
 * number of blocks allocated and not yet freed, to check for leaks. */
void sdt_alloc_install(void);
void sdt_alloc_fail_after(long n);
/* Dirty memory: after sdt_alloc_fill(b) with b in [0, 255], every block the
 * installed allocator hands out (and the grown part of a reallocated one)
 * is full of the byte b, as a reused heap's may be, so that a buffer read
 * before it is written shows; b < 0 leaves blocks as malloc gives them. */
void sdt_alloc_fill(int byte);
long sdt_alloc_live(void);
long sdt_alloc_count(void);

/* Write bytes to a fresh temporary file; returns a path owned by a static
 * ring of buffers (valid for the next 8 calls). */
const char *sdt_write_temp(const void *data, size_t size);

/* Deterministic pseudo-random numbers (splitmix64). */
uint64_t sdt_rand_u64(uint64_t *state);
float sdt_rand_float(uint64_t *state); /* uniform in [-1, 1) */

/* The kernels' implementation a test runs: scalar, AVX2, AVX2 with the
 * packed kernels on AVX-VNNI, that with GFNI's unpacking, AVX2 with
 * AVX-512 VNNI, that with GFNI's unpacking, or that with attention's p.V
 * on AVX512_BF16 too; false where
 * this CPU has not got it (nothing changes then). sdt_use_auto puts the
 * default back. */
enum sdt_impl {
    SDT_SCALAR = 0,
    SDT_AVX2 = 1,
    SDT_AVX2_VNNI = 2,
    SDT_AVX2_VNNI_GFNI = 3,
    SDT_AVX512 = 4,
    SDT_AVX512_GFNI = 5,
    SDT_AVX512_BF16 = 6,
    SDT_N_IMPLS = 7
};
bool sdt_use_impl(enum sdt_impl i);
void sdt_use_auto(void);

/* True if the file exists and is readable. */
bool sdt_file_exists(const char *path);

/* Load a model with n_threads threads (0: the default), mapped or read
 * into memory; aborts the test program, saying why, when it does not load. */
struct sdnpu_model *sdt_model(const char *path, int n_threads, bool use_mmap);

/* A speculative-decoding spec from its text ("sam-tree+reuse"), as the
 * command line gives it; aborts the test program on text that does not
 * parse (a test's own typo). */
struct sdnpu_spec;
struct sdnpu_spec sdt_spec(const char *text);

/* A streaming callback's text, kept (up to its buffer) for comparing: pass
 * sdt_collect as on_text and a zeroed struct sdt_text as user. */
struct sdt_text {
    char buf[8192];
    size_t n;
};
bool sdt_collect(const char *piece, size_t len, void *user);

#endif
