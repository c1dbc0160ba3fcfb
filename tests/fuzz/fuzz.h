/*
 * tests/fuzz/fuzz.h - fuzz targets for everything that reads outside input.
 *
 * Each tests/fuzz/fuzz_*.c defines LLVMFuzzerTestOneInput. Built with clang
 * and -fsanitize=fuzzer (scripts/fuzz) it is a libFuzzer target; built with
 * tests/fuzz/replay.c (any compiler, CTest's fuzz_replay_* tests) it runs
 * once over every file of its seed corpus, tests/fuzz/corpus/NAME/, so the
 * corpus keeps being checked where clang is not installed. A target aborts
 * (FUZZ_CHECK) when an invariant breaks; a crash, a leak or a sanitizer
 * report is a finding too.
 */
#ifndef SD_FUZZ_H
#define SD_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond)                                                                                               \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                                   \
            abort();                                                                                                   \
        }                                                                                                              \
    } while (0)

/* data written to path whole, as the file a reader under test opens. */
static inline void fuzz_write_file(const char *path, const uint8_t *data, size_t size) {
    FILE *f = fopen(path, "wb");
    FUZZ_CHECK(f != NULL);
    FUZZ_CHECK(fwrite(data, 1, size, f) == size);
    fclose(f);
}

/* stderr to /dev/null while a target calls code that reports on it (a
 * loader's messages), so that the fuzzer's log holds its own lines:
 * fuzz_quiet returns what fuzz_loud puts back. */
#include <fcntl.h>
#include <unistd.h>
static inline int fuzz_quiet(void) {
    fflush(stderr);
    int saved = dup(2), null = open("/dev/null", O_WRONLY);
    FUZZ_CHECK(saved >= 0 && null >= 0);
    dup2(null, 2);
    close(null);
    return saved;
}

static inline void fuzz_loud(int saved) {
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
}

#endif
