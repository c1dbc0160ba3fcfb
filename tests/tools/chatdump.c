/*
 * tests/tools/chatdump.c - print what sdnpu_chat_format renders for a file
 * of conversations, for the chat-template conformance script
 * (tests/conformance/chat_conformance.py).
 *
 *     chatdump MODEL FILE
 *
 * FILE holds one JSON object per line: "messages", an array of objects
 * with string members "role" and "content", "open", whether to open
 * the assistant's turn, and optionally "tools", an array of tool objects
 * (then sdnpu_chat_format_tools renders it). For each line chatdump prints one JSON line,
 * {"text": "..."}, or {"error": "message"}. The model is loaded with its
 * vocabulary only.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "sdnpu.h"

#define MAX_MSGS 64

/* One conversation rendered; the line's JSON result. */
static json_t *render(const struct sdnpu_model *m, const json_t *conv) {
    const json_t *arr = json_object_get(conv, "messages");
    size_t n = json_array_size(arr);
    if (!json_is_array(arr) || n > MAX_MSGS)
        return json_pack("{s:s}", "error", "messages: an array of at most 64");
    struct sdnpu_chat_message msgs[MAX_MSGS];
    for (size_t i = 0; i < n; i++) {
        const json_t *msg = json_array_get(arr, i);
        msgs[i].role = json_string_value(json_object_get(msg, "role"));
        msgs[i].content = json_string_value(json_object_get(msg, "content"));
        if (!msgs[i].role || !msgs[i].content)
            return json_pack("{s:s}", "error", "a message without role or content");
    }
    const bool open = json_is_true(json_object_get(conv, "open"));
    const json_t *tools = json_object_get(conv, "tools");
    char *tools_json = tools ? json_dumps(tools, JSON_COMPACT) : NULL;
    size_t need = 0;
    if (tools_json)
        sdnpu_chat_format_tools(m, msgs, n, tools_json, open, NULL, 0, &need);
    else
        sdnpu_chat_format(m, msgs, n, open, NULL, 0, &need);
    char *buf = need ? malloc(need) : NULL;
    size_t len = 0;
    enum sdnpu_status rc = !buf ? SDNPU_ERR_OOM
                           : tools_json
                               ? sdnpu_chat_format_tools(m, msgs, n, tools_json, open, buf, need, &len)
                               : sdnpu_chat_format(m, msgs, n, open, buf, need, &len);
    free(tools_json);
    json_t *out =
        rc ? json_pack("{s:s}", "error", sdnpu_status_str(rc)) : json_pack("{s:s%}", "text", buf, len);
    free(buf);
    return out;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: chatdump MODEL FILE\n");
        return 2;
    }
    struct sdnpu_model_params mp = sdnpu_model_default_params();
    mp.vocab_only = true;
    struct sdnpu_model *m = NULL;
    char err[512];
    if (sdnpu_model_load(argv[1], mp, &m, err, sizeof err)) {
        fprintf(stderr, "chatdump: %s\n", err);
        return 1;
    }
    FILE *f = fopen(argv[2], "r");
    if (!f) {
        fprintf(stderr, "chatdump: cannot open %s\n", argv[2]);
        sdnpu_model_free(m);
        return 1;
    }
    json_error_t jerr;
    json_t *conv;
    int rc = 0;
    while ((conv = json_loadf(f, JSON_DISABLE_EOF_CHECK, &jerr))) {
        json_t *out = render(m, conv);
        char *line = json_dumps(out, JSON_COMPACT);
        if (!line)
            rc = 1;
        else
            puts(line);
        free(line);
        json_decref(out);
        json_decref(conv);
    }
    if (!feof(f)) { /* stopped at a line that is no JSON */
        fprintf(stderr, "chatdump: %s:%d: %s\n", argv[2], jerr.line, jerr.text);
        rc = 1;
    }
    fclose(f);
    sdnpu_model_free(m);
    return rc;
}
