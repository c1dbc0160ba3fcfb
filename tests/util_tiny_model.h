/* tests/util_tiny_model.h - tiny GGUF models with deterministic
 * pseudo-random weights for each supported family, so forward-pass tests
 * run in milliseconds and llama.cpp can load the very same files. */
#ifndef SD_TEST_TINY_MODEL_H
#define SD_TEST_TINY_MODEL_H

#include <stdint.h>

#include "sdnpu.h"

struct sdt_tiny_opts {
    const char *arch;  /* "llama", "qwen2", "gemma3" */
    uint64_t seed;
    int32_t n_layer;   /* default 2 (gemma3: 6, so one global layer) */
    int32_t d_model;   /* default 256 (K-quant rows need multiples of 256) */
    int32_t n_ff;      /* default 512 */
    int32_t n_head;    /* default 4 */
    int32_t n_head_kv; /* default 2 */
    int32_t n_vocab;   /* default 384: 3 specials + 256 bytes + pieces */
    int32_t swa_window; /* gemma3, default 8 so short tests cross it */
    int32_t n_ctx_train; /* the context_length written, default 2048 */
    const char *omit_tensor; /* if set, this tensor is left out (bad-input tests) */
    const char *bad_shape_tensor; /* if set, this tensor gets a wrong shape */
    int32_t weight_types;    /* 0: mixed quantized types; 1: all F32 */
    const char *chat_template; /* if set, written as tokenizer.chat_template */
};

/* Fill unset fields with the defaults for o->arch. */
void sdt_tiny_defaults(struct sdt_tiny_opts *o);

/* Write the model to path. Returns 0 on success. */
int sdt_tiny_write(const struct sdt_tiny_opts *o, const char *path);
/* Write the model to path and load it with the default parameters; NULL
 * (after printing why) when either fails. */
struct sdnpu_model *sdt_tiny_load(const struct sdt_tiny_opts *o, const char *path);

#endif
