/* tests/fuzz/fuzz_openai.c - the server's request bodies (server/openai.c)
 * on any bytes: the first byte picks completions or chat. A body is either
 * a job or an HTTP error status with a message. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "server/jobs.h"
#include "server/server.h"
#include "server/tools.h"

/* With tools, the body's own bytes as a reply (server/tools.h): calls
 * read out of it, or none and all of it content; a stream's sendable part
 * never past it. */
static void read_reply(const struct job *j, const char *text, size_t n) {
    char *t = malloc(n + 1); /* replies are NUL-terminated */
    FUZZ_CHECK(t != NULL);
    memcpy(t, text, n);
    t[n] = 0;
    for (int forced = 0; forced < 2; forced++) {
        size_t content = n + 1;
        json_t *calls = sd_srv_tools_calls(j, t, n, forced, &content);
        FUZZ_CHECK(calls ? json_array_size(calls) > 0 && content <= n : content == n);
        json_decref(calls);
    }
    bool calling = false;
    FUZZ_CHECK(sd_srv_tools_sendable(j, t, n, 0, &calling) <= n);
    free(t);
}

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
        FUZZ_CHECK(!j->tool_call || (j->tools && j->schema));
        if (j->tools) read_reply(j, (const char *)data + 1, size - 1);
    } else {
        FUZZ_CHECK(st >= 400 && st < 600 && msg[0] != '\0');
        char *e = sd_srv_openai_error(msg, st);
        FUZZ_CHECK(e != NULL);
        free(e);
    }
    sd_srv_job_release(j);
    return 0;
}
