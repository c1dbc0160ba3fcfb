/*
 * server/tools.h - inside the server (server.h is the face): OpenAI's
 * tools in a chat request, over the model's own tool layout
 * (sdnpu_model_chat_tools: Qwen2.5's, calls written as a line
 * "<tool_call>", one line of JSON {"name": ..., "arguments": {...}} and a
 * line "</tool_call>").
 *
 * A request's tools are listed to the model in its system turn
 * (sdnpu_chat_format_tools). tool_choice "auto" (the default) lets the
 * model choose: its reply is read back for calls after it ends, and a
 * stream holds back the text from where a call may begin. "required" or
 * a named function forces one call: the assistant's turn is opened with
 * "<tool_call>" and a line break, and the reply is held to a JSON Schema
 * of the call (each tool's name, as a tag, then its parameters), so the
 * call is well formed by construction. "none" lists no tools.
 */
#ifndef SD_SERVER_TOOLS_H
#define SD_SERVER_TOOLS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "server/jobs.h"

/* The opening line of a forced call, written after the assistant's turn
 * is opened. */
#define TOOL_CALL_OPEN "<tool_call>\n"

/* Read "tools" and "tool_choice" of a chat request into j (j->tools,
 * j->tool_call, and for a forced call j->schema). Returns 0, or the HTTP
 * status with the reason in msg. */
int sd_srv_tools_parse(json_t *root, struct job *j, char *msg, size_t cap);

/* A message of role "tool", or an assistant's with "tool_calls", as the
 * model reads it: the content (malloc'd; *role set to "tool" or
 * "assistant"), or NULL with the reason in msg (out of memory too). */
char *sd_srv_tools_message(json_t *m, size_t i, const char **role, char *msg, size_t cap);

/* How many bytes of a reply's text so far (n bytes, NUL-terminated) may
 * be sent as content while the model may still start a call (the first
 * from of them are content already: a stream's sent part): up to a
 * "<tool_call>", a fenced JSON block not closed yet or closed on a call,
 * or what could begin one, white space before it held back too (a closed
 * fenced block that is no call is content). *calling is set once a call
 * has begun (nothing more is content). */
size_t sd_srv_tools_sendable(const struct job *j, const char *text, size_t n, size_t from, bool *calling);

/* The calls in a finished reply (text, n bytes): an array of OpenAI
 * tool_calls objects (ids from the job's), and in *content_len the bytes
 * of text before them that are the message's content; NULL where the
 * reply calls nothing (or a call is not well formed: then all of it is
 * content). forced: the reply is the call's JSON alone. */
json_t *sd_srv_tools_calls(const struct job *j, const char *text, size_t n, bool forced, size_t *content_len);

#endif /* SD_SERVER_TOOLS_H */
