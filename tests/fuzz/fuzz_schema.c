/* tests/fuzz/fuzz_schema.c - JSON Schemas (grammar/grammar.h's
 * sd_schema_compile) from untrusted requests, and what the recogniser
 * then accepts. The input is a schema, a NUL byte, and a document. Any
 * schema compiles or is refused with a message, never a crash; under a
 * compiled one, a document the recogniser completes is an object the
 * validator written from the specification (tests/util_json.h) accepts,
 * and a walk steered by the document's bytes through the bytes each state
 * allows never meets a dead end. */
#include <string.h>

#include "fuzz.h"
#include "grammar/grammar.h"
#include "util_json.h"

/* From the empty output, each step takes the allowed byte the next input
 * byte picks: some byte must always be allowed until the object closes. */
static void walk(const struct sd_schema *s, const uint8_t *steer, size_t n) {
    struct sd_json j;
    sd_json_init_schema(&j, s);
    for (size_t i = 0; i < n && !sd_json_complete(&j); i++) {
        unsigned char ok[256];
        const int n_ok = sdt_json_next_bytes(&j, ok);
        FUZZ_CHECK(n_ok > 0);
        char b = (char)ok[steer[i] % n_ok];
        FUZZ_CHECK(sd_json_feed(&j, &b, 1));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    if (!nul) return 0;
    const char *schema = (const char *)data;
    const uint8_t *doc = nul + 1;
    const size_t n_schema = (size_t)(nul - data), n_doc = size - n_schema - 1;
    struct sd_schema *s = NULL;
    struct sd_err err = {0};
    if (sd_schema_compile(schema, n_schema, &s, &err)) {
        FUZZ_CHECK(s == NULL && err.msg[0] != 0);
        return 0;
    }
    struct sd_json j;
    sd_json_init_schema(&j, s);
    if (sd_json_feed(&j, (const char *)doc, n_doc) && sd_json_complete(&j)) {
        FUZZ_CHECK(sdt_json_object_ok((const char *)doc, n_doc));
        FUZZ_CHECK(sdt_schema_valid_text(schema, (const char *)doc, n_doc));
    }
    walk(s, doc, n_doc < 512 ? n_doc : 512);
    sd_schema_free(s);
    return 0;
}
