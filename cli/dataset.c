/* cli/dataset.c - JSONL evaluation datasets: load, validate, build prompts. */
#include "dataset.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli.h"

void cli_ds_sample_free(struct ds_sample *s) {
    if (!s) return;
    free(s->id);
    free(s->task);
    free(s->instruction);
    for (size_t i = 0; i < s->n_context; i++) free(s->context[i]);
    free(s->context);
    for (size_t i = 0; i < s->n_history; i++) free(s->history[i]);
    free(s->history);
    free(s->reference);
    memset(s, 0, sizeof *s);
}

/* The word a message uses for a value's type, as JSON names them. */
static const char *type_name(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "object";
    case JSON_ARRAY:
        return "array";
    case JSON_STRING:
        return "string";
    case JSON_INTEGER:
    case JSON_REAL:
        return "number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "boolean";
    default:
        return "null";
    }
}

/* A string member: NUL characters are refused because prompts are C strings. */
static int get_string(const json_t *obj, const char *key, bool required, bool nonempty, char **out, char *err,
                      size_t err_size) {
    const json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (!v || (!required && json_is_null(v))) {
        if (!required) return 0;
        snprintf(err, err_size, "missing field '%s'", key);
        return -1;
    }
    if (!json_is_string(v)) {
        snprintf(err, err_size, "field '%s': expected a string, got %s", key, type_name(v));
        return -1;
    }
    const char *s = json_string_value(v);
    size_t len = json_string_length(v);
    if (strlen(s) != len) {
        snprintf(err, err_size, "field '%s': the string holds a NUL character", key);
        return -1;
    }
    if (nonempty && len == 0) {
        snprintf(err, err_size, "field '%s': must not be empty", key);
        return -1;
    }
    if (!(*out = strndup(s, len))) {
        snprintf(err, err_size, "out of memory");
        return -1;
    }
    return 0;
}

static int get_string_list(const json_t *obj, const char *key, bool required, char ***out, size_t *n,
                           char *err, size_t err_size) {
    const json_t *v = json_object_get(obj, key);
    *out = NULL;
    *n = 0;
    if (!v || (!required && json_is_null(v))) {
        if (!required) return 0;
        snprintf(err, err_size, "missing field '%s'", key);
        return -1;
    }
    if (!json_is_array(v)) {
        snprintf(err, err_size, "field '%s': expected an array of strings, got %s", key, type_name(v));
        return -1;
    }
    size_t count = json_array_size(v);
    for (size_t i = 0; i < count; i++) {
        const json_t *it = json_array_get(v, i);
        if (!json_is_string(it)) {
            snprintf(err, err_size, "field '%s': item %zu is %s %s, expected a string", key, i + 1,
                     json_is_array(it) || json_is_object(it) ? "an" : "a", type_name(it));
            return -1;
        }
        if (strlen(json_string_value(it)) != json_string_length(it)) {
            snprintf(err, err_size, "field '%s': item %zu holds a NUL character", key, i + 1);
            return -1;
        }
    }
    if (count == 0) return 0;
    char **list = calloc(count, sizeof *list);
    if (!list) {
        snprintf(err, err_size, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < count; i++) {
        const json_t *it = json_array_get(v, i);
        if (!(list[i] = strndup(json_string_value(it), json_string_length(it)))) {
            for (size_t j = 0; j < i; j++) free(list[j]);
            free(list);
            snprintf(err, err_size, "out of memory");
            return -1;
        }
    }
    *out = list;
    *n = count;
    return 0;
}

/* jansson reads the line: exactly one value (trailing text is an error),
 * valid UTF-8, no duplicate keys. Any value is decoded so that a line that
 * is valid JSON but no object is told apart; numbers are doubles, as JSON
 * means them, so a long integer in an ignored member is no error; a \u0000
 * is decoded, to be refused by name in the field that holds it. */
#define DS_JSON_FLAGS (JSON_REJECT_DUPLICATES | JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL | JSON_ALLOW_NUL)

int cli_ds_parse_line(const char *line, size_t len, struct ds_sample *out, char *err, size_t err_size) {
    memset(out, 0, sizeof *out);
    json_error_t je;
    json_t *v = json_loadb(line, len, DS_JSON_FLAGS, &je);
    if (!v) {
        snprintf(err, err_size, "invalid JSON: column %d: %s", je.column, je.text);
        return -1;
    }
    if (!json_is_object(v)) {
        snprintf(err, err_size, "expected a JSON object, got %s", type_name(v));
        json_decref(v);
        return -1;
    }
    if (get_string(v, "id", true, true, &out->id, err, err_size) ||
        get_string(v, "task", true, true, &out->task, err, err_size) ||
        get_string(v, "instruction", true, false, &out->instruction, err, err_size) ||
        get_string_list(v, "context", true, &out->context, &out->n_context, err, err_size) ||
        get_string_list(v, "history", false, &out->history, &out->n_history, err, err_size) ||
        get_string(v, "reference", false, false, &out->reference, err, err_size)) {
        json_decref(v);
        cli_ds_sample_free(out);
        return -1;
    }
    json_decref(v);
    return 0;
}

void cli_ds_set_free(struct ds_set *set) {
    if (!set) return;
    for (size_t i = 0; i < set->n; i++) cli_ds_sample_free(&set->samples[i]);
    free(set->samples);
    free(set->path);
    free(set->name);
    memset(set, 0, sizeof *set);
}

static char *name_of(const char *path) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    size_t n = strlen(b);
    if (n > 6 && !strcmp(b + n - 6, ".jsonl")) n -= 6;
    return strndup(b, n);
}

/* The longest dataset line read (a sample with its documents). */
#define DS_MAX_LINE (16 << 20)

int cli_ds_load(const char *path, bool strict, FILE *diag, struct ds_set *out) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (diag) fprintf(diag, "%s: cannot open: %s\n", path, strerror(errno));
        return -1;
    }
    out->path = strdup(path);
    out->name = name_of(path);
    char *line = NULL;
    size_t line_cap = 0, cap = 0, lineno = 0;
    int rc = 0;
    if (!out->path || !out->name) goto oom;
    for (;;) {
        errno = 0;
        bool too_long;
        ssize_t n = cli_getline(f, &line, &line_cap, DS_MAX_LINE, &too_long);
        if (n < 0) {
            if (ferror(f)) {
                if (diag) fprintf(diag, "%s:%zu: read error: %s\n", path, lineno + 1, strerror(errno));
                rc = -1;
            }
            break;
        }
        lineno++;
        if (too_long) {
            if (diag) fprintf(diag, "%s:%zu: a line of %d MiB or more; skipped\n", path, lineno, DS_MAX_LINE >> 20);
            out->n_bad++;
            if (strict) {
                rc = -1;
                break;
            }
            continue;
        }
        size_t len = (size_t)n;
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) len--;
        const char *p = line;
        if (lineno == 1 && len >= 3 && !memcmp(p, "\xEF\xBB\xBF", 3)) p += 3, len -= 3; /* a UTF-8 BOM */
        size_t k = 0;
        while (k < len && (p[k] == ' ' || p[k] == '\t')) k++;
        if (k == len) continue; /* blank line */
        char err[300];
        struct ds_sample s;
        int bad = cli_ds_parse_line(p, len, &s, err, sizeof err);
        if (!bad) {
            for (size_t i = 0; i < out->n; i++) {
                if (!strcmp(out->samples[i].id, s.id)) {
                    snprintf(err, sizeof err, "field 'id': \"%.60s\" repeats the id of line %zu", s.id,
                             out->samples[i].line);
                    cli_ds_sample_free(&s);
                    bad = 1;
                    break;
                }
            }
        }
        if (bad) {
            if (!strcmp(err, "out of memory")) goto oom;
            if (diag) fprintf(diag, "%s:%zu: %s%s\n", path, lineno, err, strict ? "" : " (line skipped)");
            out->n_bad++;
            if (strict) {
                rc = -1;
                break;
            }
            continue;
        }
        s.line = lineno;
        if (out->n == cap) {
            size_t nc = cap ? cap * 2 : 32;
            struct ds_sample *ns = realloc(out->samples, nc * sizeof *ns);
            if (!ns) {
                cli_ds_sample_free(&s);
                goto oom;
            }
            out->samples = ns;
            cap = nc;
        }
        out->samples[out->n++] = s;
    }
    free(line);
    fclose(f);
    if (rc) cli_ds_set_free(out);
    return rc;
oom:
    if (diag) fprintf(diag, "%s:%zu: out of memory\n", path, lineno);
    free(line);
    fclose(f);
    cli_ds_set_free(out);
    return -1;
}

/* ------------------------------------------------------------- prompts */

struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
};

static void put(struct sbuf *b, const char *s) {
    size_t l = strlen(s);
    if (b->oom) return;
    if (b->n + l + 1 > b->cap) {
        size_t nc = (b->n + l + 1) * 2;
        char *np = realloc(b->p, nc);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, l + 1);
    b->n += l;
}

static void put_uint(struct sbuf *b, size_t v) {
    char num[24];
    snprintf(num, sizeof num, "%zu", v);
    put(b, num);
}

static int sbuf_take(struct sbuf *b, char **out, size_t *len) {
    if (b->oom || !b->p) {
        free(b->p);
        *out = NULL;
        return -1;
    }
    *out = b->p;
    *len = b->n;
    return 0;
}

/* The sample's context as every surface gives an instruct model its
 * documents (sdnpu_documents_format: each between <document> lines), then
 * text. */
static void put_documents(struct sbuf *b, const struct ds_sample *s, const char *text) {
    const char *const *docs = (const char *const *)s->context;
    size_t need = 0, n = 0;
    sdnpu_documents_format(docs, s->n_context, text, NULL, 0, &need); /* the size, NUL included */
    char *doc = need ? malloc(need) : NULL;
    if (!doc || sdnpu_documents_format(docs, s->n_context, text, doc, need, &n) != SDNPU_OK)
        b->oom = true;
    else
        put(b, doc);
    free(doc);
}

/* The thread of a tweet sample, one message a line. */
static void put_lines(struct sbuf *b, const struct ds_sample *s) {
    for (size_t i = 0; i < s->n_context; i++)
        put(b, s->context[i]), put(b, "\n");
}

int cli_ds_build_chat(const struct ds_sample *s, const char **system, char **user, size_t *len,
                  const char *stops[DS_MAX_STOPS], size_t *n_stops) {
    struct sbuf b = {0};
    *n_stops = 0;
    const char *task = s->task;
    if (!strcmp(task, "ui")) {
        /* The earlier steps are the task's state, as in the base prompt. */
        *system =
            "You operate a phone's user interface for the user. Reply with the next action only, on one "
            "line: tap(N, 'label') to tap screen element [N] whose label is 'label', or "
            "type(N, 'label', 'text') to type text into it.";
        put(&b, "Screen:\n");
        put_lines(&b, s);
        put(&b, "\nGoal: "), put(&b, s->instruction), put(&b, "\n");
        if (s->n_history) put(&b, "Actions so far:\n");
        for (size_t i = 0; i < s->n_history; i++)
            put(&b, s->history[i]), put(&b, "\n");
        put(&b, "Next action:");
        stops[(*n_stops)++] = "\n";
    } else if (!strcmp(task, "tweet")) {
        /* The user's earlier replies stay in the drafting store only. */
        *system = "You write short, friendly replies to social media threads, as the account the user names. "
                  "Reply with the new message's text only.";
        put(&b, "Thread:\n");
        put_lines(&b, s);
        if (*s->instruction) put(&b, "\n"), put(&b, s->instruction);
    } else if (!strcmp(task, "summary")) {
        /* What `sdnpu summarize` sends: no system turn, the document, then
         * its instruction (the dataset's is written to come first, as the
         * base model's prompt has it; before the document it made the 0.5B
         * copy the document back: docs/benchmarks.md, stop 87). */
        *system = "";
        put_documents(&b, s, CLI_SUMMARY_INSTRUCTION);
    } else {
        /* rag, and any other task: what the request API sends, its system
         * turn, the context as documents, then the instruction (rag's
         * question). */
        *system = SDNPU_REQUEST_SYSTEM;
        put_documents(&b, s, s->instruction);
    }
    return sbuf_take(&b, user, len);
}

int cli_ds_build_prompt(const struct ds_sample *s, char **prompt, size_t *len, const char *stops[DS_MAX_STOPS],
                    size_t *n_stops) {
    struct sbuf b = {0};
    *n_stops = 0;
    const char *task = s->task;
    if (!strcmp(task, "summary")) {
        /* As `sdnpu summarize` prompts a base model: the text, then a cue. */
        if (*s->instruction) put(&b, s->instruction), put(&b, "\n\n");
        for (size_t i = 0; i < s->n_context; i++) put(&b, s->context[i]), put(&b, "\n\n");
        put(&b, "TL;DR:");
        stops[(*n_stops)++] = "\n\n";
    } else if (!strcmp(task, "rag")) {
        for (size_t i = 0; i < s->n_context; i++) {
            put(&b, "Passage "), put_uint(&b, i + 1), put(&b, ":\n");
            put(&b, s->context[i]), put(&b, "\n\n");
        }
        put(&b, "Question: "), put(&b, s->instruction), put(&b, "\nAnswer:");
        stops[(*n_stops)++] = "\n\n";
        stops[(*n_stops)++] = "\nQuestion:";
    } else if (!strcmp(task, "ui")) {
        /* The earlier steps of the task are its state, so they are in the
         * prompt as well as in the drafting store; the next step is cued by
         * its number, which a base model continues more reliably than a
         * bare "Next action:". */
        put(&b, "Screen:\n");
        for (size_t i = 0; i < s->n_context; i++) put(&b, s->context[i]), put(&b, "\n");
        put(&b, "\nGoal: "), put(&b, s->instruction), put(&b, "\n");
        put(&b, "Actions are written as tap(N, 'label') or type(N, 'label', 'text').\n");
        for (size_t i = 0; i < s->n_history; i++)
            put(&b, "Step "), put_uint(&b, i + 1), put(&b, ": "), put(&b, s->history[i]), put(&b, "\n");
        put(&b, "Step "), put_uint(&b, s->n_history + 1), put(&b, ":");
        stops[(*n_stops)++] = "\n";
    } else if (!strcmp(task, "tweet")) {
        /* The user's earlier replies are only in the drafting store, as the
         * paper keeps them: a history of responses, not part of the request.
         * The cue names the replying account when the instruction does
         * ("@name's reply:"); a base model echoes the thread after a bare
         * "Reply:". It may begin with a newline, so only a blank line stops. */
        if (*s->instruction) put(&b, s->instruction), put(&b, "\n\n");
        put(&b, "Thread:\n");
        put_lines(&b, s);
        const char *at = strchr(s->instruction, '@');
        size_t hl = 0;
        while (at && (at[1 + hl] == '_' || (at[1 + hl] >= 'a' && at[1 + hl] <= 'z') ||
                      (at[1 + hl] >= 'A' && at[1 + hl] <= 'Z') || (at[1 + hl] >= '0' && at[1 + hl] <= '9')))
            hl++;
        if (at && hl > 0 && hl < 64) {
            char cue[80];
            snprintf(cue, sizeof cue, "\n%.*s's reply:", (int)hl + 1, at);
            put(&b, cue);
        } else {
            put(&b, "\nReply:");
        }
        stops[(*n_stops)++] = "\n\n";
    } else {
        if (*s->instruction) put(&b, s->instruction), put(&b, "\n\n");
        for (size_t i = 0; i < s->n_context; i++) put(&b, s->context[i]), put(&b, "\n\n");
        put(&b, "Answer:");
        stops[(*n_stops)++] = "\n\n";
    }
    return sbuf_take(&b, prompt, len);
}
