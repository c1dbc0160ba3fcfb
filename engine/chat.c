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

int sd_chat_detect(const char *t, struct sd_chat *out, bool *recognized) {
    *out = (struct sd_chat){family(t, recognized), NULL};
    return out->format == SD_CHAT_CHATML ? chatml_default_system(t, &out->default_system) : SDNPU_OK;
}

void sd_chat_free(struct sd_chat *c) {
    sd_free(c->default_system);
    c->default_system = NULL;
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
    struct out o = {buf, cap, 0};
    const enum sd_chat_format f = c->format;
    const char *system = NULL;
    /* As the template: its own system turn where the messages open
     * without one (only ChatML's is recognized, sd_chat_detect). */
    if (c->default_system && (n == 0 || strcmp(msgs[0].role, "system"))) {
        put(&o, "<|im_start|>system\n");
        put(&o, c->default_system);
        put(&o, "<|im_end|>\n");
    }
    for (size_t i = 0; i < n; i++) {
        const char *role = msgs[i].role, *content = msgs[i].content ? msgs[i].content : "";
        bool is_system = !strcmp(role, "system"), is_user = !strcmp(role, "user");
        if (is_system && !msgs[i].content) continue; /* no system turn, the template's own left out above */
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
