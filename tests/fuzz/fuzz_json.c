/* tests/fuzz/fuzz_json.c - the CLI's JSON reader and the dataset line
 * parser (sdnpu eval reads datasets with them) on any bytes. */
#include <string.h>

#include "cli/dataset.h"
#include "cli/json.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *text = (const char *)data;
    struct json_value v;
    char err[256] = "";
    if (json_parse(text, size, &v, err, sizeof err) == 0) json_free(&v);
    else FUZZ_CHECK(err[0] != '\0');
    struct ds_sample s;
    memset(&s, 0, sizeof s);
    err[0] = '\0';
    if (ds_parse_line(text, size, &s, err, sizeof err) == 0) {
        FUZZ_CHECK(s.id != NULL);
        char *prompt = NULL;
        size_t len = 0;
        const char *stops[DS_MAX_STOPS];
        size_t n_stops = 0;
        if (ds_build_prompt(&s, &prompt, &len, stops, &n_stops) == 0) FUZZ_CHECK(prompt && strlen(prompt) <= len);
        free(prompt);
        ds_sample_free(&s);
    } else {
        FUZZ_CHECK(err[0] != '\0');
    }
    return 0;
}
