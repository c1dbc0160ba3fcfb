/*
 * engine/chat.h - chat formats for the supported families. A template in a
 * GGUF file is Jinja source; sdnpu never executes it, it only recognizes
 * which family's format it is by its markers and renders that format itself.
 */
#ifndef SD_CHAT_H
#define SD_CHAT_H

#include <stddef.h>

#include <stdbool.h>

#include "base/base.h"

enum sd_chat_format {
    SD_CHAT_PLAIN = 0, /* "User: content" lines: base models, and the fallback */
    SD_CHAT_GEMMA,     /* <start_of_turn>user ... <end_of_turn> */
    SD_CHAT_CHATML,    /* <|im_start|>user ... <|im_end|> (Qwen) */
    SD_CHAT_LLAMA3,    /* <|start_header_id|>user<|end_header_id|> ... <|eot_id|> */
    SD_CHAT_LLAMA2     /* [INST] ... [/INST] */
};

struct sd_chat_msg {
    const char
        *role; /* "system", "user", "assistant"; "tool" (a tool's result) where the format calls tools */
    const char *content; /* NULL: "" for a turn; a system message says "no system turn at all" */
};

/* A model's chat format: its family's markers, and the system turn its
 * template opens a conversation with where the messages bring none (Qwen2
 * and Qwen2.5: "You are Qwen, created by Alibaba Cloud. You are a helpful
 * assistant."), which the model was tuned to see. */
struct sd_chat {
    enum sd_chat_format format;
    char *default_system; /* NULL: the template has none; else sd_malloc'd */
    /* The template calls tools in Qwen2.5's layout (ChatML, <tool_call>):
     * the text it writes after the system text and before the tools
     * ("\n\n# Tools\n\n... <tools>"), and after them ("\n</tools>\n\n...
     * <|im_end|>\n"), read from its literals (the 1.5B's differs from the
     * 0.5B's); NULL where it calls none. sd_malloc'd. */
    char *tools_head, *tools_tail;
};

/* Recognize the model's format from its tokenizer.chat_template (NULL: the
 * file has none; it is a base model and gets PLAIN), and its default system
 * text. *recognized is false when it fell back to PLAIN from a template it
 * does not know. Returns SDNPU_OK, or SDNPU_ERR_OOM (*out is then empty). */
int sd_chat_detect(const char *chat_template, struct sd_chat *out, bool *recognized);
void sd_chat_free(struct sd_chat *c);
const char *sd_chat_format_name(enum sd_chat_format f);

/* Render messages as the model's template does, ending with the
 * assistant's turn opened when add_assistant; the default system turn
 * first where the first message is not a system one. A system message
 * with NULL content renders nothing, so that opening with one is how a
 * caller asks for no system turn at all. The BOS token is not
 * written (the tokenizer adds it). Returns the byte count, or the negative
 * of the size needed (including the NUL). */
int64_t sd_chat_render(const struct sd_chat *c, const struct sd_chat_msg *msgs, size_t n, bool add_assistant,
                       char *buf, size_t cap);
/* The same with tools the model may call (c->tools_head): tools, each tool's
 * JSON on a line of its own, goes into the system turn (after the first
 * system message's text, else after the template's own system text) as
 * the template writes it; NULL renders as sd_chat_render. Messages of
 * role "tool" become <tool_response> blocks in a user turn (consecutive
 * ones in one) with or without tools. */
int64_t sd_chat_render_tools(const struct sd_chat *c, const struct sd_chat_msg *msgs, size_t n,
                             const char *tools, bool add_assistant, char *buf, size_t cap);
/* One user turn, the assistant's opened, under a system text as a
 * generation reads it (sdnpu_generate_params' system): NULL, the
 * template's own system turn if it has one; "", no system turn at all;
 * else that text as the system message. Returns as sd_chat_render. */
int64_t sd_chat_render_turn(const struct sd_chat *c, const char *system, const char *user, char *buf,
                            size_t cap);

/* The text that ends the assistant's turn in this format: a special
 * token's text, or for PLAIN the start of the next user line (a stop
 * string; "" if none). */
const char *sd_chat_end_of_turn(enum sd_chat_format f);

#endif
