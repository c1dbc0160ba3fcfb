/* tests/fuzz/fuzz_state.c - sdnpu_session_load on any file, into a
 * session of a tiny model that holds a context of its own. The first byte
 * picks the file: odd, the input itself; even, a valid state file of the
 * same model (12 tokens) with the rest of the input xored over it from its
 * start, so that damage reaches past the header's checks to the checksum
 * and the tokens. A load either succeeds, holding the tokens the file
 * names, or fails with a status and a message and leaves the session's
 * context as it was; an unchanged valid file always loads. */
#include <string.h>
#include <unistd.h>

#include "fuzz.h"
#include "sdnpu.h"
#include "util_tiny_model.h"

enum { N_CTX = 64, N_VALID = 12, N_HELD = 5 };

static struct sdnpu_model *g_model;
static struct sdnpu_session *g_session;
static uint8_t *g_valid, *g_buf; /* the valid file, and room for a damaged copy */
static size_t g_valid_n;
static char g_path[256];

static void quiet(enum sdnpu_log_level level, const char *msg, void *user) {
    (void)level;
    (void)msg;
    (void)user;
}

/* The model, a session and the valid file, made once per process. */
static void setup(void) {
    char model_path[256];
    snprintf(model_path, sizeof model_path, "/tmp/sdnpu-fuzz-state-%d.gguf", (int)getpid());
    snprintf(g_path, sizeof g_path, "/tmp/sdnpu-fuzz-state-%d.bin", (int)getpid());
    sdnpu_log_set(quiet, NULL);
    struct sdt_tiny_opts o = {.arch = "qwen2"};
    g_model = sdt_tiny_load(&o, model_path);
    FUZZ_CHECK(g_model != NULL);
    unlink(model_path); /* the mapping keeps it */
    struct sdnpu_session_params p = sdnpu_session_default_params();
    p.n_ctx = N_CTX;
    p.n_threads = 1;
    FUZZ_CHECK(sdnpu_session_create(g_model, p, &g_session) == SDNPU_OK);
    sdnpu_token t[N_VALID];
    for (int i = 0; i < N_VALID; i++) t[i] = (sdnpu_token)(1 + i * 31 % 380);
    FUZZ_CHECK(sdnpu_session_eval(g_session, t, N_VALID, NULL, 0) == SDNPU_OK);
    FUZZ_CHECK(sdnpu_session_save(g_session, g_path) == SDNPU_OK);
    FILE *f = fopen(g_path, "rb");
    FUZZ_CHECK(f != NULL);
    fseek(f, 0, SEEK_END);
    g_valid_n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    g_valid = malloc(g_valid_n);
    g_buf = malloc(g_valid_n);
    FUZZ_CHECK(g_valid && g_buf && fread(g_valid, 1, g_valid_n, f) == g_valid_n);
    fclose(f);
}

/* The session's context before each input: N_HELD tokens of its own. */
static void hold_context(void) {
    static const sdnpu_token held[N_HELD] = {1, 7, 8, 9, 10};
    sdnpu_session_reset(g_session);
    FUZZ_CHECK(sdnpu_session_eval(g_session, held, N_HELD, NULL, 0) == SDNPU_OK);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_model) setup();
    if (size == 0) return 0;
    const uint8_t *file;
    size_t n;
    bool unchanged = false;
    if (data[0] & 1) {
        file = data + 1;
        n = size - 1;
    } else {
        n = g_valid_n;
        memcpy(g_buf, g_valid, n);
        unchanged = true;
        for (size_t i = 1; i < size && i - 1 < n; i++) {
            g_buf[i - 1] ^= data[i];
            unchanged = unchanged && data[i] == 0;
        }
        file = g_buf;
    }
    FILE *f = fopen(g_path, "wb");
    FUZZ_CHECK(f != NULL);
    FUZZ_CHECK(fwrite(file, 1, n, f) == n);
    fclose(f);
    hold_context();
    int rc = sdnpu_session_load(g_session, g_path);
    const char *msg = sdnpu_session_last_error(g_session);
    if (rc == SDNPU_OK) {
        int32_t n_tokens;
        FUZZ_CHECK(n >= 80);
        memcpy(&n_tokens, file + 76, 4);
        FUZZ_CHECK(sdnpu_session_n_past(g_session) == n_tokens && n_tokens <= N_CTX);
        /* The loaded context runs: one more token on it. */
        if (n_tokens < N_CTX) {
            sdnpu_token t = 3;
            FUZZ_CHECK(sdnpu_session_eval(g_session, &t, 1, NULL, 0) == SDNPU_OK);
        }
    } else {
        FUZZ_CHECK(rc == SDNPU_ERR_FORMAT || rc == SDNPU_ERR_CONTEXT_FULL || rc == SDNPU_ERR_IO);
        FUZZ_CHECK(msg[0] != '\0');
        FUZZ_CHECK(sdnpu_session_n_past(g_session) == N_HELD);
    }
    FUZZ_CHECK(!unchanged || rc == SDNPU_OK);
    unlink(g_path);
    return 0;
}
