/* engine/chat.c - recognizing and rendering chat formats. */
#include "engine/chat.h"

#include <stdio.h>
#include <string.h>

static enum sd_chat_format family(const char *t, bool *recognized) {
    *recognized = true;
    /* No template in the file: a base model (the default Gemma 3 270M file
     * is one). Its vocabulary may still hold turn markers, but the model was
     * not trained on them (it answers a Gemma turn with noise), so the plain
     * script it can continue is the right format, not a fallback. */
    if (!t) return SD_CHAT_PLAIN;
    if (strstr(t, "<start_of_turn>")) return SD_CHAT_GEMMA;
    if (strstr(t, "<|im_start|>")) return SD_CHAT_CHATML;
    if (strstr(t, "<|start_header_id|>")) return SD_CHAT_LLAMA3;
    if (strstr(t, "[INST]")) return SD_CHAT_LLAMA2;
    *recognized = false;
    return SD_CHAT_PLAIN;
}

/* The end of a Jinja string literal that opened with quote q just before
 * s: the closing quote, or NULL if the template ends first. */
static const char *literal_end(const char *s, char q) {
    for (; *s && *s != q; s++)
        if (*s == '\\' && s[1]) s++;
    return *s ? s : NULL;
}

/* s[0..n) of a Jinja string literal with its escapes undone, as a C string
 * (sd_malloc'd); NULL when out of memory. */
static char *unescape(const char *s, size_t n) {
    char *out = sd_malloc(n + 1), *o = out;
    if (!out) return NULL;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '\\' && i + 1 < n) {
            c = s[++i];
            c = c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c;
        }
        *o++ = c;
    }
    *o = '\0';
    return out;
}

/* Where needle starts in [s, e), or NULL. */
static const char *find_in(const char *s, const char *e, const char *needle) {
    const size_t n = strlen(needle);
    for (; (size_t)(e - s) >= n; s++)
        if (!memcmp(s, needle, n)) return s;
    return NULL;
}

/* A ChatML template's default system turn, written whole in one string
 * literal: '<|im_start|>system\nYou are Qwen, ...<|im_end|>\n' (Qwen2,
 * Qwen2.5). The literals that open a system turn and go on with a message's
 * content (' + messages[0]['content']) are passed over. Each literal is
 * read once (a template is untrusted input). Sets *out to the text, or
 * leaves it NULL; returns SDNPU_ERR_OOM where the copy failed. */
static int chatml_default_system(const char *t, char **out) {
    static const char open[] = "<|im_start|>system\\n";
    for (const char *p = t; (p = strstr(p, open));) {
        const char *text = p + sizeof open - 1;
        if (p == t || (p[-1] != '\'' && p[-1] != '"')) {
            p = text;
            continue;
        }
        const char *end = literal_end(text, p[-1]), *stop = end ? find_in(text, end, "<|im_end|>") : NULL;
        if (stop) {
            *out = unescape(text, (size_t)(stop - text));
            return *out ? SDNPU_OK : SDNPU_ERR_OOM;
        }
        if (!end) break;
        p = end;
    }
    return SDNPU_OK;
}

/* The string literal of template t that holds needle, its escapes undone
 * (sd_malloc'd), or NULL where none does (or out of memory: *oom). */
static char *literal_with(const char *t, const char *needle, bool *oom) {
    const char *at = strstr(t, needle);
    for (const char *p = at ? at : t; at && p-- > t;) {
        if ((*p != '"' && *p != '\'') || (p > t && p[-1] == '\\')) continue;
        const char *end = literal_end(p + 1, *p);
        if (!end || end < at + strlen(needle)) continue; /* a quote inside, or another literal's */
        char *s = unescape(p + 1, (size_t)(end - p - 1));
        *oom = !s;
        return s;
    }
    return NULL;
}

/* Qwen2.5's tools layout: the literals around the tools (struct sd_chat);
 * both or neither. */
static int chatml_tools(const char *t, struct sd_chat *out) {
    bool oom = false;
    if (!strstr(t, "<tool_call>") || !strstr(t, "<tool_response>")) return SDNPU_OK;
    out->tools_head = literal_with(t, "# Tools", &oom);
    /* The closing tag and an escaped line break after it: the head names
     * <tools></tools> too. */
    if (!oom && out->tools_head) out->tools_tail = literal_with(t, "</tools>\\n", &oom);
    if (!out->tools_tail || !strstr(out->tools_head, "<tools>") || !strstr(out->tools_tail, "<tool_call>")) {
        sd_free(out->tools_head);
        sd_free(out->tools_tail);
        out->tools_head = out->tools_tail = NULL;
    }
    return oom ? SDNPU_ERR_OOM : SDNPU_OK;
}

int sd_chat_detect(const char *t, struct sd_chat *out, bool *recognized) {
    *out = (struct sd_chat){family(t, recognized), NULL, NULL, NULL};
    if (out->format != SD_CHAT_CHATML) return SDNPU_OK;
    int rc = chatml_default_system(t, &out->default_system);
    if (!rc) rc = chatml_tools(t, out);
    if (rc) sd_chat_free(out);
    return rc;
}

void sd_chat_free(struct sd_chat *c) {
    sd_free(c->default_system);
    sd_free(c->tools_head);
    sd_free(c->tools_tail);
    c->default_system = c->tools_head = c->tools_tail = NULL;
}

const char *sd_chat_format_name(enum sd_chat_format f) {
    switch (f) {
    case SD_CHAT_GEMMA: return "gemma";
    case SD_CHAT_CHATML: return "chatml";
    case SD_CHAT_LLAMA3: return "llama3";
    case SD_CHAT_LLAMA2: return "llama2";
    case SD_CHAT_PLAIN: break;
    }
    return "plain";
}

const char *sd_chat_end_of_turn(enum sd_chat_format f) {
    switch (f) {
    case SD_CHAT_GEMMA: return "<end_of_turn>";
    case SD_CHAT_CHATML: return "<|im_end|>";
    case SD_CHAT_LLAMA3: return "<|eot_id|>";
    case SD_CHAT_PLAIN: return "\nUser:";
    default: return "";
    }
}

/* A bounded appender that keeps counting past the end, for size probing. */
struct out {
    char *buf;
    size_t cap, n;
};

static void put(struct out *o, const char *s) {
    size_t len = strlen(s);
    if (o->n < o->cap) {
        size_t room = o->cap - o->n;
        memcpy(o->buf + o->n, s, len < room ? len : room);
    }
    o->n += len;
}

int64_t sd_chat_render_turn(const struct sd_chat *c, const char *system, const char *user, char *buf,
                            size_t cap) {
    struct sd_chat_msg msgs[2];
    size_t n = 0;
    if (system) msgs[n++] = (struct sd_chat_msg){"system", *system ? system : NULL};
    msgs[n++] = (struct sd_chat_msg){"user", user};
    return sd_chat_render(c, msgs, n, true, buf, cap);
}

int64_t sd_chat_render(const struct sd_chat *c, const struct sd_chat_msg *msgs, size_t n, bool add_assistant,
                       char *buf, size_t cap) {
    return sd_chat_render_tools(c, msgs, n, NULL, add_assistant, buf, cap);
}

/* Qwen2.5's system turn with tools, as its template writes it: the system
 * text, then the tools (one JSON object a line) between its own texts. */
static void put_tools_system(struct out *o, const struct sd_chat *c, const char *system, const char *tools) {
    put(o, "<|im_start|>system\n");
    put(o, system);
    put(o, c->tools_head);
    put(o, "\n");
    put(o, tools);
    put(o, c->tools_tail);
}

/* A tool's result (Qwen2.5's template): a <tool_response> block in a user
 * turn that consecutive results share. */
static void put_tool_result(struct out *o, const struct sd_chat_msg *msgs, size_t n, size_t i) {
    if (i == 0 || strcmp(msgs[i - 1].role, "tool")) put(o, "<|im_start|>user");
    put(o, "\n<tool_response>\n");
    put(o, msgs[i].content ? msgs[i].content : "");
    put(o, "\n</tool_response>");
    if (i + 1 == n || strcmp(msgs[i + 1].role, "tool")) put(o, "<|im_end|>\n");
}

int64_t sd_chat_render_tools(const struct sd_chat *c, const struct sd_chat_msg *msgs, size_t n,
                             const char *tools, bool add_assistant, char *buf, size_t cap) {
    struct out o = {buf, cap, 0};
    const enum sd_chat_format f = c->format;
    const char *system = NULL;
    const bool opens_system = n > 0 && !strcmp(msgs[0].role, "system");
    size_t i = 0;
    if (tools && c->tools_head) {
        /* The tools' system turn takes the first system message's place. */
        put_tools_system(&o, c,
                         opens_system && msgs[0].content ? msgs[0].content
                         : c->default_system             ? c->default_system
                                                         : "",
                         tools);
        i = opens_system;
    } else if (c->default_system && !opens_system) {
        /* As the template: its own system turn where the messages open
         * without one (only ChatML's is recognized, sd_chat_detect). */
        put(&o, "<|im_start|>system\n");
        put(&o, c->default_system);
        put(&o, "<|im_end|>\n");
    }
    for (; i < n; i++) {
        const char *role = msgs[i].role, *content = msgs[i].content ? msgs[i].content : "";
        bool is_system = !strcmp(role, "system"), is_user = !strcmp(role, "user");
        if (is_system && !msgs[i].content) continue; /* no system turn, the template's own left out above */
        if (c->tools_head && !strcmp(role, "tool")) {
            put_tool_result(&o, msgs, n, i);
            continue;
        }
        switch (f) {
        case SD_CHAT_GEMMA:
            /* Gemma has no system turn: the system text opens the first user turn. */
            if (is_system) {
                system = content;
                break;
            }
            put(&o, "<start_of_turn>");
            put(&o, is_user ? "user" : "model");
            put(&o, "\n");
            if (system && is_user) {
                put(&o, system);
                put(&o, "\n\n");
                system = NULL;
            }
            put(&o, content);
            put(&o, "<end_of_turn>\n");
            break;
        case SD_CHAT_CHATML:
            put(&o, "<|im_start|>");
            put(&o, role);
            put(&o, "\n");
            put(&o, content);
            put(&o, "<|im_end|>\n");
            break;
        case SD_CHAT_LLAMA3:
            put(&o, "<|start_header_id|>");
            put(&o, role);
            put(&o, "<|end_header_id|>\n\n");
            put(&o, content);
            put(&o, "<|eot_id|>");
            break;
        case SD_CHAT_LLAMA2:
            if (is_system) {
                system = content;
                break;
            }
            if (is_user) {
                put(&o, "[INST] ");
                if (system) {
                    put(&o, "<<SYS>>\n");
                    put(&o, system);
                    put(&o, "\n<</SYS>>\n\n");
                    system = NULL;
                }
                put(&o, content);
                put(&o, " [/INST]");
            } else {
                put(&o, " ");
                put(&o, content);
                put(&o, " </s>");
            }
            break;
        case SD_CHAT_PLAIN:
            /* The script `sdnpu chat` gives a base model: system text as a
             * paragraph of its own, then "User:" and "Assistant:" lines. */
            if (is_system) {
                put(&o, content);
                put(&o, "\n\n");
                break;
            }
            put(&o, is_user ? "User" : !strcmp(role, "assistant") ? "Assistant" : role);
            put(&o, ": ");
            put(&o, content);
            put(&o, "\n");
            break;
        }
    }
    if (add_assistant) {
        switch (f) {
        case SD_CHAT_GEMMA: put(&o, "<start_of_turn>model\n"); break;
        case SD_CHAT_CHATML: put(&o, "<|im_start|>assistant\n"); break;
        case SD_CHAT_LLAMA3: put(&o, "<|start_header_id|>assistant<|end_header_id|>\n\n"); break;
        case SD_CHAT_LLAMA2: break;
        case SD_CHAT_PLAIN: put(&o, "Assistant:"); break;
        }
    }
    if (o.n + 1 > cap) return -(int64_t)(o.n + 1);
    buf[o.n] = '\0';
    return (int64_t)o.n;
}
