/* tests/fuzz/fuzz_transcript.c - `sdnpu chat`'s /load on any file (a
 * transcript is a text file anyone may have edited). A load either fails,
 * leaving the conversation as it was, or gives records that /save writes
 * and /load reads back the same: system, each turn's documents, message
 * and reply, the documents for the next message and the held text. The
 * first byte, odd, loads as for a model with a chat template. */
#include <string.h>
#include <unistd.h>

#include "cli/chat.h"
#include "fuzz.h"

static bool same(const char *a, const char *b) { return (!a && !b) || (a && b && strcmp(a, b) == 0); }

static void release(struct chat *c, char *held) {
    cli_chat_transcript_clear(c);
    free(c->turns);
    free(c->system);
    str_free(&c->pending);
    free(held);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[256], again[256];
    if (!path[0]) {
        snprintf(path, sizeof path, "/tmp/sdnpu-fuzz-transcript-%d.txt", (int)getpid());
        snprintf(again, sizeof again, "/tmp/sdnpu-fuzz-transcript-%d-again.txt", (int)getpid());
    }
    fuzz_write_file(path, data, size);
    const bool templ = size && (data[0] & 1);
    struct chat c = {.templ = templ}, d = {.templ = templ};
    char *held = NULL, *held2 = NULL;
    const int err = fuzz_quiet();
    int rc = cli_chat_transcript_load(&c, path, &held);
    bool saved = false, reloaded = false;
    if (rc == 0) {
        saved = cli_chat_transcript_save(&c, again, held) == 0;
        reloaded = saved && cli_chat_transcript_load(&d, again, &held2) == 0;
    }
    fuzz_loud(err);
    unlink(path);
    unlink(again);
    if (rc) {
        FUZZ_CHECK(c.n_turns == 0 && c.turns == NULL && c.system == NULL && c.pending.n == 0 && held == NULL);
        return 0;
    }
    FUZZ_CHECK(saved && reloaded);
    FUZZ_CHECK(d.n_turns == c.n_turns && same(d.system, c.system) && same(held2, held));
    FUZZ_CHECK(d.pending.n == c.pending.n &&
               (!c.pending.n || memcmp(d.pending.p, c.pending.p, c.pending.n) == 0));
    for (size_t i = 0; i < c.n_turns; i++) {
        FUZZ_CHECK(same(d.turns[i].user, c.turns[i].user) && same(d.turns[i].context, c.turns[i].context));
        FUZZ_CHECK(same(d.turns[i].assistant, c.turns[i].assistant));
    }
    release(&c, held);
    release(&d, held2);
    return 0;
}
