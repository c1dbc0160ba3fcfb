/* tests/tools/make_tiny_models.c - write the tiny test models of every
 * family into a directory, for the conformance script (llama.cpp loads the
 * same files). Usage: make_tiny_models DIR */
#include <stdio.h>

#include "util_tiny_model.h"

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: make_tiny_models DIR\n");
        return 2;
    }
    const char *archs[] = {"llama", "qwen2", "gemma3"};
    for (int i = 0; i < 3; i++) {
        struct sdt_tiny_opts o = {.arch = archs[i]};
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
