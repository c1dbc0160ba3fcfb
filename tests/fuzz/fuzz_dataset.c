/* tests/fuzz/fuzz_dataset.c - the dataset line reader (jansson, then the
 * fields' checks) and the prompts built from what it accepts, on any bytes:
 * sdnpu eval reads datasets with them. */
#include <string.h>

#include "cli/dataset.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *text = (const char *)data;
    char err[256] = "";
    struct ds_sample s;
    memset(&s, 0, sizeof s);
    if (cli_ds_parse_line(text, size, &s, err, sizeof err) == 0) {
        FUZZ_CHECK(s.id != NULL);
        char *prompt = NULL;
        size_t len = 0;
        const char *stops[DS_MAX_STOPS];
        size_t n_stops = 0;
        if (cli_ds_build_prompt(&s, &prompt, &len, stops, &n_stops) == 0)
            FUZZ_CHECK(prompt && strlen(prompt) <= len);
        free(prompt);
        cli_ds_sample_free(&s);
    } else {
        FUZZ_CHECK(err[0] != '\0');
        FUZZ_CHECK(s.id == NULL);
    }
    return 0;
}
