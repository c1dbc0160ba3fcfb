/* tests/fuzz/fuzz_json.c - the JSON grammar (grammar/grammar.h) against
 * jansson on any bytes. A model's output under SDNPU_FORMAT_JSON is what
 * a client's strict parser then reads: the recogniser must call complete
 * exactly the texts the reference (tests/util_json.h) reads as one object,
 * never refuse a prefix of one (the model could not finish it), and say
 * the same fed in pieces, as tokens bring the bytes. */
#include <string.h>

#include "fuzz.h"
#include "grammar/grammar.h"
#include "util_json.h"

static bool viable(const uint8_t *data, size_t n) {
    struct sd_json j;
    sd_json_init(&j);
    return sd_json_feed(&j, (const char *)data, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct sd_json j;
    sd_json_init(&j);
    const bool whole = sd_json_feed(&j, (const char *)data, size) && sd_json_complete(&j);
    const bool ref = sdt_json_object_ok((const char *)data, size);
    FUZZ_CHECK(whole == ref);
    if (ref && size <= 1024)
        for (size_t k = 0; k < size; k++)
            FUZZ_CHECK(viable(data, k));
    /* In pieces of 1 to 7 bytes, the lengths taken from the data itself. */
    sd_json_init(&j);
    bool fed = true;
    for (size_t at = 0; at < size && fed;) {
        size_t len = 1 + data[at] % 7;
        if (len > size - at) len = size - at;
        fed = sd_json_feed(&j, (const char *)data + at, len);
        at += len;
    }
    FUZZ_CHECK((fed && sd_json_complete(&j)) == ref);
    return 0;
}
