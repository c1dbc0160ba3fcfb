/* server/tools.c - OpenAI's tools over the model's tool layout
 * (server/tools.h). */
#include "server/tools.h"

#include "base/base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOOL_TAG "<tool_call>"
#define TOOL_CALL_CLOSE "</tool_call>"
#define MAX_TOOLS 128

/* ---------------------------------------------------------------- requests */

/* Tool i: {"type": "function", "function": {"name": a non-empty string,
 * "description"?, "parameters"?: an object}}. */
static int check_tool(json_t *t, size_t i, char *msg, size_t cap) {
    json_t *f = json_object_get(t, "function"), *name = json_object_get(f, "name"),
           *params = json_object_get(f, "parameters");
    if (!json_is_object(t) || !json_is_string(json_object_get(t, "type")) ||
        strcmp(json_string_value(json_object_get(t, "type")), "function"))
        return sd_srv_bad(msg, cap, "'tools[%zu]' must be an object with \"type\": \"function\"", i);
    if (!json_is_object(f) || !json_is_string(name) || json_string_length(name) == 0)
        return sd_srv_bad(msg, cap, "'tools[%zu].function' must be an object with a non-empty string 'name'",
                          i);
    if (params && !json_is_object(params))
        return sd_srv_bad(msg, cap, "'tools[%zu].function.parameters' must be a JSON Schema object", i);
    /* The arguments are an object (the call's layout): a schema of another type could not be called. */
    json_t *type = json_object_get(params, "type");
    bool object = !type;
    for (size_t k = 0; !object && k < (json_is_array(type) ? json_array_size(type) : 1); k++) {
        const char *tn = json_string_value(json_is_array(type) ? json_array_get(type, k) : type);
        object = tn && !strcmp(tn, "object");
    }
    if (!object) return sd_srv_bad(msg, cap, "'tools[%zu].function.parameters' must allow an object", i);
    return 0;
}

/* Tool i's name is not an earlier tool's: a call names one tool. */
static int check_name(json_t *tools, size_t i, char *msg, size_t cap) {
    const char *name =
        json_string_value(json_object_get(json_object_get(json_array_get(tools, i), "function"), "name"));
    for (size_t k = 0; k < i; k++)
        if (!strcmp(name, json_string_value(json_object_get(
                              json_object_get(json_array_get(tools, k), "function"), "name"))))
            return sd_srv_bad(msg, cap, "'tools[%zu]' is named \"%s\" as 'tools[%zu]' is", i, name, k);
    return 0;
}

/* The schema of one call of tool t: {"name": its name, "arguments": its
 * parameters (an object: any where it gives none)}, the name first as the
 * layout writes it, and a tag that tells the tools apart. */
static json_t *call_schema(json_t *t) {
    json_t *f = json_object_get(t, "function"), *params = json_object_get(f, "parameters");
    json_t *args = params ? json_deep_copy(params) : json_pack("{s:s}", "type", "object");
    return json_pack("{s:s, s:{s:{s:O}, s:o}, s:[s, s]}", "type", "object", "properties", "name", "const",
                     json_object_get(f, "name"), "arguments", args, "required", "name", "arguments");
}

/* For a forced call, j->schema: one call of the named tool (name NULL:
 * of any), checked against the grammar's subset. */
static int forced_schema(json_t *tools, const char *name, struct job *j, char *msg, size_t cap) {
    json_t *alts = json_array();
    size_t picked = 0;
    for (size_t i = 0; alts && i < json_array_size(tools); i++) {
        json_t *t = json_array_get(tools, i);
        const char *ti = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
        if (name && strcmp(name, ti)) continue;
        if (json_array_append_new(alts, call_schema(t))) {
            json_decref(alts);
            return sd_srv_bad(msg, cap, "out of memory for the tools");
        }
        picked++;
    }
    json_t *sch = picked == 1 ? json_incref(json_array_get(alts, 0)) : json_pack("{s:O}", "oneOf", alts);
    json_decref(alts);
    if (name && picked == 0) {
        json_decref(sch);
        return sd_srv_bad(msg, cap, "'tool_choice' names \"%s\", which 'tools' does not define", name);
    }
    j->schema = sch ? json_dumps(sch, JSON_COMPACT) : NULL;
    json_decref(sch);
    if (!j->schema) return sd_srv_bad(msg, cap, "out of memory for the tools");
    char err[512];
    if (sdnpu_json_schema_check(j->schema, err, sizeof err))
        return sd_srv_bad(msg, cap, "'tools': a forced call must be held to the tools' parameters, and %s",
                          err);
    return 0;
}

/* tool_choice: "none", "auto", "required", or {"type": "function",
 * "function": {"name": ...}} (*name then that name). */
static int parse_choice(json_t *root, const char **mode, const char **name, char *msg, size_t cap) {
    json_t *c = json_object_get(root, "tool_choice");
    *mode = "auto", *name = NULL;
    if (!c || json_is_null(c)) return 0;
    if (json_is_string(c)) {
        *mode = json_string_value(c);
        if (!strcmp(*mode, "none") || !strcmp(*mode, "auto") || !strcmp(*mode, "required")) return 0;
    } else if (json_is_object(c)) {
        *name = json_string_value(json_object_get(json_object_get(c, "function"), "name"));
        *mode = "required";
        if (*name) return 0;
    }
    return sd_srv_bad(msg, cap,
                      "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                      "\"function\": {\"name\": ...}}");
}

int sd_srv_tools_parse(json_t *root, struct job *j, char *msg, size_t cap) {
    json_t *tools = json_object_get(root, "tools");
    const char *mode, *name;
    int rc = parse_choice(root, &mode, &name, msg, cap);
    if (rc || !tools || json_is_null(tools) || !strcmp(mode, "none")) return rc;
    if (!json_is_array(tools) || json_array_size(tools) == 0 || json_array_size(tools) > MAX_TOOLS)
        return sd_srv_bad(msg, cap, "'tools' must be an array of 1 to %d tools", MAX_TOOLS);
    for (size_t i = 0; i < json_array_size(tools); i++)
        if ((rc = check_tool(json_array_get(tools, i), i, msg, cap)) || (rc = check_name(tools, i, msg, cap)))
            return rc;
    if (!(j->tools = json_dumps(tools, JSON_COMPACT)))
        return sd_srv_bad(msg, cap, "out of memory for the tools");
    if (strcmp(mode, "required")) return 0;
    if (j->schema || j->json)
        return sd_srv_bad(
            msg, cap, "a forced tool call ('tool_choice') and 'response_format' cannot be asked together");
    j->tool_call = true;
    return forced_schema(tools, name, j, msg, cap);
}

/* One call as the template writes an assistant's call: the name as it
 * is between quotes, the arguments as json.dumps writes them (an OpenAI
 * client sends them as a string of JSON), between the tag lines. */
static char *call_text(json_t *call, size_t i, size_t k, char *msg, size_t cap) {
    json_t *f = json_object_get(call, "function"), *name = json_object_get(f, "name"),
           *args = json_object_get(f, "arguments");
    if (!json_is_string(name))
        return sd_srv_bad(msg, cap, "messages[%zu].tool_calls[%zu].function must have a string 'name'", i, k),
               NULL;
    json_t *obj = json_is_string(args) ? json_loads(json_string_value(args), 0, NULL) : json_incref(args);
    char *a = json_is_object(obj) ? json_dumps(obj, 0) : NULL, *out = NULL;
    const size_t len = a ? strlen(a) + json_string_length(name) + 64 : 0;
    if (!json_is_object(obj))
        sd_srv_bad(msg, cap,
                   "messages[%zu].tool_calls[%zu].function.arguments must be a JSON object (or its text)", i,
                   k);
    else if (!a || !(out = malloc(len)))
        sd_srv_bad(msg, cap, "out of memory");
    else
        snprintf(out, len, TOOL_CALL_OPEN "{\"name\": \"%s\", \"arguments\": %s}\n" TOOL_CALL_CLOSE,
                 json_string_value(name), a);
    json_decref(obj);
    free(a);
    return out;
}

/* text + sep + more, freeing text (malloc'd); NULL when out of memory. */
static char *joined(char *text, const char *sep, const char *more) {
    const size_t a = strlen(text), b = strlen(sep), c = strlen(more);
    char *out = realloc(text, a + b + c + 1);
    if (!out) {
        free(text);
        return NULL;
    }
    memcpy(out + a, sep, b);
    memcpy(out + a + b, more, c + 1);
    return out;
}

char *sd_srv_tools_message(json_t *m, size_t i, const char **role, char *msg, size_t cap) {
    json_t *content = json_object_get(m, "content"), *calls = json_object_get(m, "tool_calls");
    const bool tool = !strcmp(json_string_value(json_object_get(m, "role")), "tool");
    *role = tool ? "tool" : "assistant";
    if (tool && !json_is_string(content))
        return sd_srv_bad(msg, cap, "messages[%zu].content must be a string", i), NULL;
    if (!tool && !json_is_array(calls))
        return sd_srv_bad(msg, cap, "messages[%zu].tool_calls must be an array", i), NULL;
    if (content && !json_is_null(content) && !json_is_string(content))
        return sd_srv_bad(msg, cap, "messages[%zu].content must be a string or null", i), NULL;
    char *text = strdup(json_is_string(content) ? json_string_value(content) : "");
    for (size_t k = 0; !tool && text && k < json_array_size(calls); k++) {
        char *c = call_text(json_array_get(calls, k), i, k, msg, cap);
        if (!c) {
            free(text);
            return NULL;
        }
        text = joined(text, *text ? "\n" : "", c);
        free(c);
    }
    if (!text) sd_srv_bad(msg, cap, "out of memory");
    return text;
}

/* ------------------------------------------------------------------ replies */

static bool blank(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

/* How a call is set off in a reply: between the layout's tags, or (the
 * Coder models' habit when they choose for themselves) in a fenced JSON
 * block. Either way its JSON is {"name": one of the tools, "arguments":
 * {...}}; anything else is content. */
static const struct {
    const char *open, *close;
} k_forms[] = {{TOOL_TAG, TOOL_CALL_CLOSE}, {"```json", "```"}};

/* p past white space and then s, if s comes there. */
static bool take(const char **p, const char *end, const char *s) {
    const char *q = *p;
    while (q < end && blank(*q))
        q++;
    const size_t k = strlen(s);
    if ((size_t)(end - q) < k || memcmp(q, s, k)) return false;
    *p = q + k;
    return true;
}

static bool is_tool(json_t *tools, const char *name) {
    for (size_t i = 0; name && i < json_array_size(tools); i++)
        if (!strcmp(name, json_string_value(json_object_get(
                              json_object_get(json_array_get(tools, i), "function"), "name"))))
            return true;
    return false;
}

/* The call whose JSON follows p (white space first) before end: {"name":
 * one of the tools, "arguments": an object} as an OpenAI tool_calls
 * entry, *p moved past it. NULL where there is none. */
static json_t *read_call(const struct job *j, json_t *tools, size_t index, const char **p, const char *end) {
    take(p, end, "");
    json_error_t e;
    json_t *v = json_loadb(*p, (size_t)(end - *p), JSON_DISABLE_EOF_CHECK | JSON_REJECT_DUPLICATES, &e);
    json_t *name = json_object_get(v, "name"), *args = json_object_get(v, "arguments");
    char *a = json_is_object(args) && is_tool(tools, json_string_value(name)) ? json_dumps(args, JSON_COMPACT)
                                                                              : NULL;
    json_t *call = NULL;
    if (a) {
        char id[80];
        snprintf(id, sizeof id, "call_%s_%zu", j->id, index);
        call = json_pack("{s:s, s:s, s:{s:O, s:s}}", "id", id, "type", "function", "function", "name", name,
                         "arguments", a);
        *p += e.position;
    }
    free(a);
    json_decref(v);
    return call;
}

/* The next call at p in one of the forms (forced: its JSON alone, the
 * prompt having opened it), *p moved past it and its closing. */
static json_t *next_call(const struct job *j, json_t *tools, size_t index, bool forced, const char **p,
                         const char *end) {
    size_t f = 0;
    while (!forced && f < SD_ARRAY_LEN(k_forms) && !take(p, end, k_forms[f].open))
        f++;
    if (f == SD_ARRAY_LEN(k_forms)) return NULL;
    json_t *c = read_call(j, tools, index, p, end);
    if (c && !forced) take(p, end, k_forms[f].close); /* a reply cut after the JSON lacks it */
    return c;
}

/* Which form's opening starts at p (n bytes on): its index, *whole
 * whether all of it is there (else the text ends inside it); -1: none. */
static int form_at(const char *p, size_t n, bool *whole) {
    for (size_t f = 0; f < SD_ARRAY_LEN(k_forms); f++) {
        const size_t k = strlen(k_forms[f].open), m = n < k ? n : k;
        if (memcmp(p, k_forms[f].open, m)) continue;
        *whole = m == k;
        return (int)f;
    }
    return -1;
}

enum fence { FENCE_OPEN, FENCE_CALL, FENCE_TEXT };

/* The fenced JSON block at p (n bytes on): not closed yet, a call, or
 * text (*len then its bytes, the closing fence with them). */
static enum fence fence_at(const struct job *j, const char *p, size_t n, size_t *len) {
    const char *q = p + strlen(k_forms[1].open), *end = p + n, *close = NULL;
    for (const char *c = q; !close && c + 3 <= end; c++)
        if (!memcmp(c, "```", 3)) close = c;
    if (!close) return FENCE_OPEN;
    json_t *tools = json_loads(j->tools, 0, NULL), *call = read_call(j, tools, 0, &q, close);
    const bool is_call = call && take(&q, close, "") && q == close;
    json_decref(call);
    json_decref(tools);
    *len = (size_t)(close + 3 - p);
    return is_call ? FENCE_CALL : FENCE_TEXT;
}

size_t sd_srv_tools_sendable(const struct job *j, const char *text, size_t n, size_t from, bool *calling) {
    size_t i = from, len;
    bool whole = false;
    for (; i < n; i++) {
        const int f = form_at(text + i, n - i, &whole);
        if (f < 0) continue;
        const enum fence k = f == 1 && whole ? fence_at(j, text + i, n - i, &len) : FENCE_OPEN;
        if (k == FENCE_TEXT) {
            i += len - 1; /* a fenced block that is no call is content */
            continue;
        }
        *calling = whole && (f == 0 || k == FENCE_CALL);
        break;
    }
    while (i > from && blank(text[i - 1]))
        i--;
    return i;
}

json_t *sd_srv_tools_calls(const struct job *j, const char *text, size_t n, bool forced,
                           size_t *content_len) {
    bool calling = forced;
    const size_t before = forced ? 0 : sd_srv_tools_sendable(j, text, n, 0, &calling);
    const char *p = text + before, *end = text + n;
    json_t *tools = calling ? json_loads(j->tools, 0, NULL) : NULL, *calls = tools ? json_array() : NULL;
    bool ok = calls != NULL;
    while (ok && (forced ? json_array_size(calls) == 0 : take(&p, end, "") && p < end)) {
        json_t *c = next_call(j, tools, json_array_size(calls), forced, &p, end);
        ok = c && !json_array_append_new(calls, c);
    }
    if (ok) take(&p, end, "");
    json_decref(tools);
    if (!ok || p < end) { /* not well formed: the text stays content */
        json_decref(calls);
        *content_len = n;
        return NULL;
    }
    *content_len = before;
    return calls;
}
