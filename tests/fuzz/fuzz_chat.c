/* tests/fuzz/fuzz_chat.c - chat-template recognition and rendering on any
 * template text and messages: the input is split at NUL bytes into the
 * template, then alternating roles' contents. The probe for the size must
 * agree with what is written. */
#include <string.h>

#include "engine/chat.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size + 1);
    FUZZ_CHECK(buf != NULL);
    memcpy(buf, data, size);
    buf[size] = '\0';
    const char *templ = size && data[0] == 0 ? NULL : buf; /* a leading NUL: no template */
    bool known;
    struct sd_chat chat;
    if (sd_chat_detect(templ, &chat, &known)) {
        free(buf);
        return 0; /* out of memory */
    }
    const enum sd_chat_format f = chat.format;
    FUZZ_CHECK(sd_chat_format_name(f) != NULL && sd_chat_end_of_turn(f) != NULL);
    FUZZ_CHECK(!chat.default_system || f == SD_CHAT_CHATML);
    static const char *roles[3] = {"system", "user", "assistant"};
    struct sd_chat_msg msgs[16];
    size_t n = 0;
    for (char *p = buf + strlen(buf) + 1; p < buf + size + 1 && n < 16; p += strlen(p) + 1)
        msgs[n] = (struct sd_chat_msg){roles[n % 3], p}, n++;
    for (int open = 0; open < 2; open++) {
        int64_t need = sd_chat_render(&chat, msgs, n, open, NULL, 0);
        FUZZ_CHECK(need < 0);
        char *out = malloc((size_t)-need);
        FUZZ_CHECK(out != NULL);
        int64_t got = sd_chat_render(&chat, msgs, n, open, out, (size_t)-need);
        FUZZ_CHECK(got == -need - 1 && out[got] == '\0');
        free(out);
    }
    sd_chat_free(&chat);
    free(buf);
    return 0;
}
