/* tests/tools/make_tiny_models.c - write the tiny test models of every
 * family into a directory, for the conformance script (llama.cpp loads the
 * same files). Usage: make_tiny_models DIR [CONTEXT_LENGTH] (default
 * 2048; a longer one lets a test grow a context past the default 4,096). */
#include <stdio.h>
#include <stdlib.h>

#include "util_tiny_model.h"

int main(int argc, char **argv) {
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: make_tiny_models DIR [CONTEXT_LENGTH]\n");
        return 2;
    }
    const int32_t n_ctx = argc == 3 ? atoi(argv[2]) : 0;
    if (argc == 3 && (n_ctx < 16 || n_ctx > (1 << 24))) {
        fprintf(stderr, "make_tiny_models: CONTEXT_LENGTH %s is not in [16, 2^24]\n", argv[2]);
        return 2;
    }
    const char *archs[] = {"llama", "qwen2", "gemma3"};
    for (int i = 0; i < 3; i++) {
        struct sdt_tiny_opts o = {.arch = archs[i], .n_ctx_train = n_ctx};
        char path[4096];
        snprintf(path, sizeof path, "%s/tiny-%s.gguf", argv[1], archs[i]);
        if (sdt_tiny_write(&o, path)) {
            fprintf(stderr, "make_tiny_models: cannot write %s\n", path);
            return 1;
        }
        printf("%s\n", path);
    }
    return 0;
}
