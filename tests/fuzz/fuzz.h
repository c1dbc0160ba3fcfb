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

#endif
