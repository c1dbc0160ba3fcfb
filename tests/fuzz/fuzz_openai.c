/* tests/fuzz/fuzz_openai.c - the server's request bodies (server/openai.c)
 * on any bytes: the first byte picks completions or chat. A body is either
 * a job or an HTTP error status with a message. */
#include <string.h>

#include "fuzz.h"
#include "server/jobs.h"
#include "server/server.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    /* The limits sd_srv_openai_parse reads, as sd_server_default_params sets them. */
    static const struct sd_server_params sp = {.max_tokens = 2048, .default_tokens = 256, .spec = "sam-tree"};
    struct job *j = sd_srv_job_new();
    FUZZ_CHECK(j != NULL);
    char msg[512] = "";
    enum job_kind kind = data[0] & 1 ? JOB_CHAT : JOB_COMPLETION;
    int st = sd_srv_openai_parse(kind, (const char *)data + 1, size - 1, &sp, j, msg, sizeof msg);
    if (st == 0) {
        FUZZ_CHECK(kind == JOB_CHAT ? j->n_msgs > 0 : j->prompt != NULL);
        FUZZ_CHECK(j->max_tokens >= 1 && j->max_tokens <= sp.max_tokens);
        FUZZ_CHECK(j->n_stops <= JOB_MAX_STOPS);
        FUZZ_CHECK(j->temperature >= 0 && j->temperature <= 2 && j->top_p >= 0 && j->top_p <= 1);
    } else {
        FUZZ_CHECK(st >= 400 && st < 600 && msg[0] != '\0');
        char *e = sd_srv_openai_error(msg, st);
        FUZZ_CHECK(e != NULL);
        free(e);
    }
    sd_srv_job_release(j);
    return 0;
}
