/* tests/fuzz/fuzz_gguf.c - the GGUF reader (header, metadata, tensor
 * table) and the vocabulary loaded from its metadata, on any bytes. */
#include <string.h>

#include "gguf/gguf.h"
#include "tok/tokenizer.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct sd_gguf *g = NULL;
    struct sd_err err = {0};
    if (sd_gguf_open_buffer(data, size, &g, &err) != SDNPU_OK) {
        FUZZ_CHECK(g == NULL && err.msg[0] != '\0');
        return 0;
    }
    char buf[256];
    for (int64_t i = 0; i < sd_gguf_n_kv(g); i++) {
        FUZZ_CHECK(sd_gguf_key_name(g, i) != NULL);
        sd_gguf_value_str(g, i, buf, sizeof buf);
        FUZZ_CHECK(memchr(buf, '\0', sizeof buf) != NULL);
    }
    for (int64_t i = 0; i < sd_gguf_n_tensors(g); i++) {
        const struct sd_gguf_tensor *t = sd_gguf_tensor(g, i);
        FUZZ_CHECK(t != NULL);
        FUZZ_CHECK(sd_gguf_find_tensor(g, t->name) != NULL);
    }
    struct sd_vocab *v = NULL;
    if (sd_vocab_load(g, &v, &err) == SDNPU_OK) {
        struct sd_tokvec tv = {0};
        if (sd_tokenize(v, "Hello world", 11, SD_TOK_ADD_SPECIAL, &tv, &err) == SDNPU_OK) {
            char out[512];
            sd_detokenize(v, tv.ids, tv.n, false, out, sizeof out);
        }
        sd_tokvec_free(&tv);
        sd_vocab_free(v);
    }
    sd_gguf_close(g);
    return 0;
}
