/*
 * cli/chat_transcript.c - `sdnpu chat`'s conversation as records: its turns,
 * the text it renders to for the model, and its transcript files.
 *
 * Transcript files (/save, /load) are UTF-8 text, one record a line:
 *
 *     # sdnpu chat transcript 2
 *     system: You answer briefly.
 *     context: text of a document attached to the next user message
 *     user: What is in the document?
 *     assistant: A license.\nIt has two parts.
 *     held: User: What is in the document?\n...
 *
 * A record is "ROLE: TEXT" with ROLE one of system, context, user,
 * assistant, held. In TEXT a backslash escapes: \n newline, \r carriage
 * return, \t tab, \\ backslash. Blank lines and lines starting with '#'
 * are skipped. context records attach to the next user record; an
 * assistant record answers the user record before it.
 *
 * Version 1 wrote each assistant record without its leading white space,
 * which /load put back as one space for a model without a chat template;
 * version 2 (the first line says which) writes the reply as it is, so
 * that the conversation renders to the same text after /load.
 *
 * held (version 2) is written when /save also saved the session beside the
 * transcript (FILE.session): it is the exact text that session holds,
 * every token of every reply included (the stop text that the assistant
 * records leave out, say). /load restores that session and evaluates the
 * next message only past this text, as the chat that saved it would have.
 * Version 1 files have no held record; /load replays them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "cli.h"

/* ---------------------------------------------------------------- turns */

void cli_chat_turn_free(struct turn *t) {
    free(t->context);
    free(t->user);
    free(t->assistant);
    memset(t, 0, sizeof *t);
}

void cli_chat_transcript_clear(struct chat *c) {
    for (size_t i = 0; i < c->n_turns; i++)
        cli_chat_turn_free(&c->turns[i]);
    c->n_turns = 0;
}

struct turn *cli_chat_turn_push(struct chat *c) {
    if (c->n_turns == c->cap_turns) {
        size_t cap = c->cap_turns ? c->cap_turns * 2 : 16;
        struct turn *t = realloc(c->turns, cap * sizeof *t);
        if (!t) {
            fprintf(stderr, "sdnpu chat: out of memory\n");
            exit(1);
        }
        c->turns = t;
        c->cap_turns = cap;
    }
    struct turn *t = &c->turns[c->n_turns++];
    memset(t, 0, sizeof *t);
    return t;
}

/* ------------------------------------------------------------ rendering */

/* The user's text of a turn with its documents in front, between tags as
 * every surface gives them (sdnpu_documents_format). */
static void user_content(const struct turn *t, struct str *out) {
    if (!t->context) {
        str_adds(out, t->user);
        return;
    }
    const char *docs[] = {t->context};
    size_t need = 0;
    sdnpu_documents_format(docs, 1, t->user, NULL, 0, &need);
    char *text = malloc(need);
    if (!text || sdnpu_documents_format(docs, 1, t->user, text, need, &need) != SDNPU_OK) {
        fprintf(stderr, "sdnpu chat: out of memory\n");
        exit(1);
    }
    str_add(out, text, need);
    free(text);
}

/* Render the conversation. With open, the last turn's answer is left open
 * for the model to write; without, every turn is rendered as answered.
 * Returns 0, or a status after printing why. */
int cli_chat_render(const struct chat *c, bool open, struct str *out) {
    str_clear(out);
    if (!c->templ) {
        if (c->system && *c->system) {
            str_adds(out, c->system);
            str_adds(out, "\n\n");
        }
        for (size_t i = 0; i < c->n_turns; i++) {
            const struct turn *t = &c->turns[i];
            str_adds(out, "User: ");
            user_content(t, out);
            str_adds(out, "\nAssistant:");
            if (open && i + 1 == c->n_turns) break;
            /* The reply exactly as generated, its leading space included
             * (version 1 transcripts save it without; /load puts one back). */
            str_adds(out, t->assistant ? t->assistant : "");
            str_adds(out, "\n");
        }
        return 0;
    }
    size_t n_msgs = 0, cap = 1 + 2 * c->n_turns;
    struct sdnpu_chat_message *msgs = calloc(cap, sizeof *msgs);
    struct str *contents = calloc(c->n_turns + 1, sizeof *contents);
    if (!msgs || !contents) {
        fprintf(stderr, "sdnpu chat: out of memory\n");
        exit(1);
    }
    /* --system "": no system turn at all, as `sdnpu run --system ""`; no
     * --system: the template's own. */
    if (c->system) msgs[n_msgs++] = (struct sdnpu_chat_message){"system", *c->system ? c->system : NULL};
    for (size_t i = 0; i < c->n_turns; i++) {
        const struct turn *t = &c->turns[i];
        user_content(t, &contents[i]);
        msgs[n_msgs++] = (struct sdnpu_chat_message){"user", str_c(&contents[i])};
        if (open && i + 1 == c->n_turns) break;
        msgs[n_msgs++] = (struct sdnpu_chat_message){"assistant", t->assistant ? t->assistant : ""};
    }
    size_t need = 0;
    int rc = sdnpu_chat_format(c->model, msgs, n_msgs, open, NULL, 0, &need);
    if (rc == SDNPU_ERR_BUFFER_TOO_SMALL || rc == SDNPU_OK) {
        char *buf = malloc(need + 1);
        if (!buf) {
            fprintf(stderr, "sdnpu chat: out of memory\n");
            exit(1);
        }
        size_t n = 0;
        rc = sdnpu_chat_format(c->model, msgs, n_msgs, open, buf, need + 1, &n);
        if (rc == SDNPU_OK) str_add(out, buf, n);
        free(buf);
    }
    if (rc) fprintf(stderr, "sdnpu chat: cannot format the conversation: %s\n", sdnpu_status_str(rc));
    for (size_t i = 0; i < c->n_turns; i++)
        str_free(&contents[i]);
    free(contents);
    free(msgs);
    return rc;
}

/* ----------------------------------------------------------- transcripts */

static void put_escaped(FILE *f, const char *role, const char *text) {
    fprintf(f, "%s: ", role);
    for (const char *p = text; *p; p++) {
        switch (*p) {
        case '\n':
            fputs("\\n", f);
            break;
        case '\r':
            fputs("\\r", f);
            break;
        case '\t':
            fputs("\\t", f);
            break;
        case '\\':
            fputs("\\\\", f);
            break;
        default:
            fputc(*p, f);
        }
    }
    fputc('\n', f);
}

int cli_chat_transcript_save(const struct chat *c, const char *path, const char *held) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "sdnpu chat: cannot write '%s': %s\n", path, strerror(errno));
        return 1;
    }
    fprintf(f, "# sdnpu chat transcript 2\n");
    if (c->system) put_escaped(f, "system", c->system);
    for (size_t i = 0; i < c->n_turns; i++) {
        const struct turn *t = &c->turns[i];
        if (t->context) put_escaped(f, "context", t->context);
        put_escaped(f, "user", t->user);
        if (t->assistant) put_escaped(f, "assistant", t->assistant);
    }
    if (c->pending.n) put_escaped(f, "context", c->pending.p);
    if (held) put_escaped(f, "held", held);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        fprintf(stderr, "sdnpu chat: writing '%s' failed: %s\n", path, strerror(errno));
        return 1;
    }
    fprintf(stderr, "saved %zu turns to %s\n", c->n_turns, path);
    return 0;
}

/* Undo put_escaped on s[0..n) in place; returns the new length. */
static size_t unescape(char *s, size_t n) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\\' && i + 1 < n) {
            char e = s[++i];
            s[o++] = e == 'n' ? '\n' : e == 'r' ? '\r' : e == 't' ? '\t' : e;
        } else {
            s[o++] = s[i];
        }
    }
    s[o] = '\0';
    return o;
}

/* A transcript as it is read: the conversation so far (in a chat of its
 * own, so that c changes only once the whole file has been read), the
 * system and held records, and the format's version. */
struct reading {
    struct chat tmp;
    char *system, *held;
    bool have_system;
    int version;
};

static void reading_free(struct reading *R) {
    cli_chat_transcript_clear(&R->tmp);
    free(R->tmp.turns);
    str_free(&R->tmp.pending);
    free(R->system);
    free(R->held);
}

/* An assistant record: the reply of the last user record. */
static int take_assistant(struct reading *R, const struct chat *c, const char *where, const char *text,
                          size_t tl) {
    struct chat *t = &R->tmp;
    if (t->n_turns == 0 || t->turns[t->n_turns - 1].assistant) {
        fprintf(stderr, "sdnpu chat: %s: an assistant record with no user record before it\n", where);
        return 1;
    }
    struct str a = {0};
    /* A base model's reply follows "Assistant:" with a space; put back the
     * one version 1 took off. */
    if (R->version < 2 && !c->templ && tl && !is_space(text[0])) str_adds(&a, " ");
    str_add(&a, text, tl);
    t->turns[t->n_turns - 1].assistant = a.p;
    return 0;
}

/* One record, its role and its text (unescaped, tl bytes); where is
 * "FILE:LINE" for the messages. 0, or 1 said. */
static int take_record(struct reading *R, const struct chat *c, const char *where, const char *role,
                       const char *text, size_t tl) {
    if (!strcmp(role, "system")) {
        free(R->system);
        R->system = dup_n(text, tl);
        R->have_system = true;
    } else if (!strcmp(role, "context")) {
        if (R->tmp.pending.n) str_adds(&R->tmp.pending, "\n\n");
        str_add(&R->tmp.pending, text, tl);
    } else if (!strcmp(role, "user")) {
        struct turn *t = cli_chat_turn_push(&R->tmp);
        t->user = dup_n(text, tl);
        if (R->tmp.pending.n) {
            t->context = R->tmp.pending.p;
            R->tmp.pending = (struct str){0};
        }
    } else if (!strcmp(role, "assistant")) {
        return take_assistant(R, c, where, text, tl);
    } else if (!strcmp(role, "held")) {
        free(R->held);
        R->held = dup_n(text, tl);
    } else {
        fprintf(stderr, "sdnpu chat: %s: unknown role '%.40s' (system, context, user, assistant, held)\n",
                where, role);
        return 1;
    }
    return 0;
}

/* The lines of buf (NUL-terminated, changed in place) into R: comments
 * and blank lines skipped, the first line's version read. 0, or 1 said. */
static int read_lines(struct reading *R, const struct chat *c, const char *path, char *buf) {
    int line_no = 0;
    for (char *p = buf; *p;) {
        char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        char *next = nl ? nl + 1 : p + n;
        line_no++;
        if (n && p[n - 1] == '\r') n--;
        p[n] = '\0';
        if (line_no == 1 && sscanf(p, "# sdnpu chat transcript %d", &R->version) != 1) R->version = 1;
        char where[4200];
        snprintf(where, sizeof where, "%s:%d", path, line_no);
        char *colon = n == 0 || p[0] == '#' ? NULL : strchr(p, ':');
        if (n && p[0] != '#' && !colon) {
            fprintf(stderr, "sdnpu chat: %s: expected 'ROLE: TEXT'\n", where);
            return 1;
        }
        if (colon) {
            *colon = '\0';
            char *text = colon + 1;
            if (*text == ' ') text++;
            if (take_record(R, c, where, p, text, unescape(text, strlen(text)))) return 1;
        }
        p = next;
    }
    return 0;
}

/* Parse a transcript into c (replacing its conversation). The file is
 * untrusted: any malformed line is reported with its number and nothing
 * is changed. */
int cli_chat_transcript_load(struct chat *c, const char *path, char **held) {
    *held = NULL;
    size_t len = 0;
    char *buf = cli_read_file(path, &len);
    if (!buf) return 1;
    if (memchr(buf, '\0', len)) {
        fprintf(stderr, "sdnpu chat: '%s' is not a text file (it holds a NUL byte)\n", path);
        free(buf);
        return 1;
    }
    struct reading R = {.tmp.model = c->model, .version = 1};
    const int err = read_lines(&R, c, path, buf);
    free(buf);
    if (err) {
        reading_free(&R);
        return 1;
    }
    cli_chat_transcript_clear(c);
    free(c->turns);
    c->turns = R.tmp.turns;
    c->n_turns = R.tmp.n_turns;
    c->cap_turns = R.tmp.cap_turns;
    str_free(&c->pending);
    c->pending = R.tmp.pending;
    if (R.have_system) {
        free(c->system);
        c->system = R.system;
    } else {
        free(R.system);
    }
    *held = R.held;
    fprintf(stderr, "loaded %zu turns from %s\n", c->n_turns, path);
    return 0;
}
