/*
 * cli/chat.c - `sdnpu chat`: a conversation over one session.
 *
 * Each message is one turn. The whole conversation is rendered as text (the
 * model's chat format when the file has a chat template, else a plain
 * "User: ...\nAssistant:" script that a base model continues); the session
 * already holds a prefix of that text, so only the new part is evaluated.
 * When what the session holds is no longer a prefix (an error, a loaded
 * transcript), the session is reset and the conversation is replayed.
 *
 * Stop strings are matched here rather than by the engine: the engine keeps
 * every generated token in the context, including those that make up a stop
 * string, but drops their text from the stream. Seeing every piece keeps
 * `held` (the text the session holds) exact.
 *
 * Transcript files (/save, /load) are UTF-8 text, one record a line:
 *
 *     # sdnpu chat transcript 1
 *     system: You answer briefly.
 *     context: text of a document attached to the next user message
 *     user: What is in the document?
 *     assistant: A license.\nIt has two parts.
 *
 * A record is "ROLE: TEXT" with ROLE one of system, context, user,
 * assistant. In TEXT a backslash escapes: \n newline, \r carriage return,
 * \t tab, \\ backslash. Blank lines and lines starting with '#' are
 * skipped. context records attach to the next user record; an assistant
 * record answers the user record before it.
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "cli.h"

/* The longest message line read from the terminal or a pipe. */
#define CHAT_MAX_LINE (1 << 20)
#include "sdnpu.h"

/* ------------------------------------------------------------- signals */

/* Ctrl-C stops the reply being generated, not the program. The handler
 * sets a flag the streaming callback reads and also calls
 * sdnpu_session_cancel, which only stores to a lock-free atomic int and so
 * is async-signal-safe; the session pointer is itself a lock-free atomic. */
static volatile sig_atomic_t g_interrupted;
static struct sdnpu_session *_Atomic g_target;

static void on_sigint(int sig) {
    (void)sig;
    g_interrupted = 1;
    struct sdnpu_session *s = atomic_load(&g_target);
    if (s) sdnpu_session_cancel(s);
}

/* While reading input, SIGINT interrupts the read (no SA_RESTART) so the
 * half-typed message can be dropped; while generating, writes restart. */
static void install_sigint(bool restart) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = restart ? SA_RESTART : 0;
    sigaction(SIGINT, &sa, NULL);
}

/* ------------------------------------------------------------- strings */

/* A growable NUL-terminated byte string. Running out of memory in the
 * command is reported and ends it: there is nothing sensible to go on with. */
struct str {
    char *p;
    size_t n, cap;
};

static void str_add(struct str *s, const char *p, size_t n) {
    if (s->n + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 256;
        while (cap < s->n + n + 1) cap *= 2;
        char *q = realloc(s->p, cap);
        if (!q) {
            fprintf(stderr, "sdnpu chat: out of memory\n");
            exit(1);
        }
        s->p = q;
        s->cap = cap;
    }
    if (n) memcpy(s->p + s->n, p, n);
    s->n += n;
    s->p[s->n] = '\0';
}

static void str_adds(struct str *s, const char *p) { str_add(s, p, strlen(p)); }
static void str_clear(struct str *s) {
    s->n = 0;
    if (s->p) s->p[0] = '\0';
}
static const char *str_c(const struct str *s) { return s->p ? s->p : ""; }

static void str_free(struct str *s) {
    free(s->p);
    s->p = NULL;
    s->n = s->cap = 0;
}

static char *dup_n(const char *p, size_t n) {
    struct str s = {0};
    str_add(&s, p, n);
    return s.p;
}

/* ---------------------------------------------------------------- state */

struct turn {
    char *context;   /* documents attached before the message, or NULL */
    char *user;
    char *assistant; /* NULL until answered */
};

struct totals {
    int32_t n_requests, n_generated, n_verify_steps, n_accepted;
    double decode_ms;
};

struct chat {
    struct sdnpu_model *model;
    struct sdnpu_session *s;
    struct sdnpu_generate_params gp;
    int32_t n_ctx;
    bool templ; /* the model has a chat template */
    bool tty;   /* stdin is a terminal: show prompts */
    char *system;
    struct turn *turns;
    size_t n_turns, cap_turns;
    struct str pending; /* documents for the next message */
    struct str held;    /* the text the session holds, when !dirty */
    bool dirty;
    char *spec;         /* the method's text as given (its struct is gp.spec), NULL for none */
    char *history;
    struct sdnpu_stats last;
    char last_spec[64]; /* the method the last request ran */
    bool have_last;
    struct totals tot;
};

/* The plain format stops where the model starts writing the user's turn. */
static const char *const plain_stops[] = {"\nUser:"};

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void turn_free(struct turn *t) {
    free(t->context);
    free(t->user);
    free(t->assistant);
    memset(t, 0, sizeof *t);
}

static void transcript_clear(struct chat *c) {
    for (size_t i = 0; i < c->n_turns; i++) turn_free(&c->turns[i]);
    c->n_turns = 0;
}

static struct turn *turn_push(struct chat *c) {
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

static void set_str(char **dst, const char *src) {
    free(*dst);
    *dst = src ? dup_n(src, strlen(src)) : NULL;
}

/* Copy p[0..n) with each invalid UTF-8 sequence replaced by U+FFFD. A model
 * can emit byte tokens that do not form characters; the transcript keeps
 * valid text so that it can be tokenized again when it is replayed. */
static char *utf8_clean(const char *p, size_t n) {
    size_t len = sd_utf8_replaced_len(p, n);
    char *o = malloc(len + 1);
    if (!o) return NULL;
    sd_utf8_replace(p, n, o);
    o[len] = '\0';
    return o;
}

/* ------------------------------------------------------------ rendering */

static bool is_space(char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r'; }

/* The user's text of a turn with its documents in front. */
static void user_content(const struct turn *t, struct str *out) {
    if (t->context) {
        str_adds(out, "Document:\n");
        str_adds(out, t->context);
        str_adds(out, "\n\n");
    }
    str_adds(out, t->user);
}

/* Render the conversation. With open, the last turn's answer is left open
 * for the model to write; without, every turn is rendered as answered.
 * Returns 0, or a status after printing why. */
static int render(const struct chat *c, bool open, struct str *out) {
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
             * (transcripts save it without; /load puts one back). */
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
    if (c->system && *c->system) msgs[n_msgs++] = (struct sdnpu_chat_message){"system", c->system};
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
    for (size_t i = 0; i < c->n_turns; i++) str_free(&contents[i]);
    free(contents);
    free(msgs);
    return rc;
}

/* Tokenize text and run it through the session, parsing special-token text
 * when the model has a chat template (generate parses it only in the turn it
 * wraps itself). *n_tokens receives the count. Prints why on failure. */
static int eval_text(struct chat *c, const char *text, size_t len, size_t *n_tokens) {
    uint32_t flags = (c->templ ? SDNPU_TOKENIZE_PARSE_SPECIAL : 0) |
                     (sdnpu_session_n_past(c->s) == 0 ? SDNPU_TOKENIZE_ADD_SPECIAL : 0);
    size_t n = 0;
    int rc = sdnpu_tokenize(c->model, text, len, flags, NULL, 0, &n);
    if (rc != SDNPU_OK && rc != SDNPU_ERR_BUFFER_TOO_SMALL) {
        fprintf(stderr, "sdnpu chat: cannot tokenize: %s: %s\n", sdnpu_status_str(rc),
                sdnpu_model_last_error(c->model));
        return rc;
    }
    sdnpu_token *toks = malloc((n ? n : 1) * sizeof *toks);
    if (!toks) {
        fprintf(stderr, "sdnpu chat: out of memory\n");
        exit(1);
    }
    rc = sdnpu_tokenize(c->model, text, len, flags, toks, n, &n);
    if (rc == SDNPU_OK && (rc = sdnpu_session_eval(c->s, toks, n, NULL, 0)) != SDNPU_OK)
        fprintf(stderr, "sdnpu chat: %s: %s\n", sdnpu_status_str(rc), sdnpu_session_last_error(c->s));
    free(toks);
    *n_tokens = n;
    return rc;
}

/* ------------------------------------------------------------ streaming */

struct reply {
    const char *const *stops;
    size_t n_stops;
    struct str all; /* the text of every token generated (all are in the context) */
    size_t shown;   /* bytes of all already printed or skipped */
    bool started;   /* something other than leading space was printed */
    bool stopped;   /* a stop string was found, at stop_at */
    size_t stop_at;
};

/* Print the reply up to byte upto, less leading space and (for now)
 * trailing space: a base model ends its turn with newlines before "User:". */
static void show(struct reply *r, size_t upto) {
    while (upto > r->shown && is_space(r->all.p[upto - 1])) upto--;
    const char *p = r->all.p + r->shown;
    size_t n = upto - r->shown;
    if (!r->started) { /* a plain reply begins with the space after "Assistant:" */
        while (n && is_space(*p)) p++, n--;
        r->started = n > 0;
    }
    fwrite(p, 1, n, stdout);
    fflush(stdout);
    r->shown = upto;
}

static bool on_piece(const char *piece, size_t len, void *user) {
    struct reply *r = user;
    size_t from = r->all.n;
    str_add(&r->all, piece, len);
    for (size_t i = 0; i < r->n_stops; i++) {
        size_t sl = strlen(r->stops[i]);
        size_t at = from >= sl ? from - sl + 1 : 0;
        for (; at + sl <= r->all.n; at++)
            if (!memcmp(r->all.p + at, r->stops[i], sl)) {
                if (at > r->shown) show(r, at);
                r->stopped = true;
                r->stop_at = at;
                return false;
            }
    }
    /* Hold back a tail that may still become a stop string. */
    size_t safe = r->all.n;
    for (size_t i = 0; i < r->n_stops; i++) {
        size_t sl = strlen(r->stops[i]);
        for (size_t k = sl - 1; k > 0; k--)
            if (k <= r->all.n && !memcmp(r->all.p + r->all.n - k, r->stops[i], k)) {
                if (r->all.n - k < safe) safe = r->all.n - k;
                break;
            }
    }
    if (safe > r->shown) show(r, safe);
    return !g_interrupted;
}

/* ---------------------------------------------------------------- turns */

/* Answer msg: render the conversation with it, evaluate what the session
 * does not hold yet, stream the reply. Returns 0, or 1 when the turn
 * failed (the message is dropped from the conversation). */
static int chat_turn(struct chat *c, const char *msg) {
    struct turn *t = turn_push(c);
    t->user = dup_n(msg, strlen(msg));
    if (c->pending.n) {
        t->context = c->pending.p;
        c->pending = (struct str){0};
    }
    struct str want = {0};
    if (render(c, true, &want)) {
        str_free(&want);
        goto fail_turn;
    }
    if (c->dirty || c->held.n > want.n || memcmp(str_c(&c->held), want.p, c->held.n) != 0) {
        sdnpu_session_reset(c->s);
        str_clear(&c->held);
        c->dirty = false;
    }
    const char *suffix = want.p + c->held.n;
    size_t suffix_len = want.n - c->held.n;

    struct reply r = {.stops = c->templ ? NULL : plain_stops, .n_stops = c->templ ? 0 : 1};
    struct sdnpu_generate_params gp = c->gp;
    gp.on_text = on_piece;
    gp.user = &r;
    struct sdnpu_stats st;
    memset(&st, 0, sizeof st);
    g_interrupted = 0;
    install_sigint(true);
    atomic_store(&g_target, c->s);
    int rc;
    bool reported = false; /* eval_text prints its own failures */
    if (c->templ) {
        double t0 = now_ms();
        size_t n = 0;
        rc = eval_text(c, suffix, suffix_len, &n);
        double ms = now_ms() - t0;
        reported = rc != SDNPU_OK;
        if (rc == SDNPU_OK) {
            str_add(&c->held, suffix, suffix_len);
            rc = sdnpu_session_generate(c->s, "", 0, &gp, &st);
            st.n_prompt_tokens = (int32_t)n;
            st.prefill_ms = ms;
            st.prompt_tokens_per_s = ms > 0 ? (double)n / (ms / 1e3) : 0;
        }
    } else {
        rc = sdnpu_session_generate(c->s, suffix, suffix_len, &gp, &st);
        if (rc >= 0) str_add(&c->held, suffix, suffix_len);
    }
    atomic_store(&g_target, NULL);
    install_sigint(false);

    if (rc == SDNPU_OK && r.all.n > r.shown) show(&r, r.all.n);
    if (r.started || rc >= 0) printf("\n");
    fflush(stdout);
    if (rc < 0) {
        if (!reported)
            fprintf(stderr, "sdnpu chat: %s: %s\n", sdnpu_status_str(rc), sdnpu_session_last_error(c->s));
        if (rc == SDNPU_ERR_CONTEXT_FULL)
            fprintf(stderr,
                    "sdnpu chat: the conversation does not fit the context (%d tokens); /reset to start "
                    "over, or use a larger -c\n",
                    c->n_ctx);
        /* A prompt that did not fit was not evaluated; any other failure may
         * leave the session out of step with the conversation. */
        if (rc != SDNPU_ERR_CONTEXT_FULL) c->dirty = true;
        str_free(&r.all);
        str_free(&want);
        goto fail_turn;
    }
    if (r.stopped) st.stop_reason = SDNPU_STOP_STRING; /* our stop string, not the callback */
    /* Every generated token is in the context: what the session holds is
     * the prompt and all of the text. */
    str_add(&c->held, str_c(&r.all), r.all.n);
    t->assistant = utf8_clean(str_c(&r.all), r.stopped ? r.stop_at : r.all.n);
    if (rc == SDNPU_ABORTED && !r.stopped) fprintf(stderr, "[stopped]\n");
    c->last = st;
    c->have_last = true;
    snprintf(c->last_spec, sizeof c->last_spec, "%s", c->spec ? c->spec : "none");
    c->tot.n_requests++;
    c->tot.n_generated += st.n_generated;
    c->tot.n_verify_steps += st.n_verify_steps;
    c->tot.n_accepted += st.n_accepted;
    c->tot.decode_ms += st.decode_ms;
    str_free(&r.all);
    str_free(&want);
    return 0;
fail_turn:
    /* Give the documents back for the next message. */
    t = &c->turns[c->n_turns - 1];
    if (t->context && !c->pending.n) {
        str_adds(&c->pending, t->context);
    }
    turn_free(t);
    c->n_turns--;
    return 1;
}

/* Evaluate the whole conversation now (after /load), so the next message
 * only adds its own text. */
static void replay(struct chat *c) {
    sdnpu_session_reset(c->s);
    str_clear(&c->held);
    c->dirty = false;
    struct str text = {0};
    if (render(c, false, &text) == 0 && text.n > 0) {
        size_t n = 0;
        double t0 = now_ms();
        int rc = eval_text(c, text.p, text.n, &n);
        if (rc == SDNPU_OK) {
            str_add(&c->held, text.p, text.n);
            fprintf(stderr, "replayed %zu tokens in %.0f ms\n", n, now_ms() - t0);
        } else {
            c->dirty = true;
            if (rc == SDNPU_ERR_CONTEXT_FULL)
                fprintf(stderr,
                        "sdnpu chat: the transcript does not fit the context (%d tokens); /reset, or use a "
                        "larger -c\n",
                        c->n_ctx);
        }
    }
    str_free(&text);
}

/* ----------------------------------------------------------- transcripts */

static void put_escaped(FILE *f, const char *role, const char *text) {
    fprintf(f, "%s: ", role);
    for (const char *p = text; *p; p++) {
        switch (*p) {
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        case '\\': fputs("\\\\", f); break;
        default: fputc(*p, f);
        }
    }
    fputc('\n', f);
}

static int save_transcript(const struct chat *c, const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "sdnpu chat: cannot write '%s': %s\n", path, strerror(errno));
        return 1;
    }
    fprintf(f, "# sdnpu chat transcript 1\n");
    if (c->system) put_escaped(f, "system", c->system);
    for (size_t i = 0; i < c->n_turns; i++) {
        const struct turn *t = &c->turns[i];
        if (t->context) put_escaped(f, "context", t->context);
        put_escaped(f, "user", t->user);
        if (t->assistant) {
            const char *a = t->assistant;
            while (is_space(*a)) a++;
            put_escaped(f, "assistant", a);
        }
    }
    if (c->pending.n) put_escaped(f, "context", c->pending.p);
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

/* Parse a transcript into c (replacing its conversation). The file is
 * untrusted: any malformed line is reported with its number and nothing
 * is changed. */
static int load_transcript(struct chat *c, const char *path) {
    size_t len = 0;
    char *buf = cli_read_file(path, &len);
    if (!buf) return 1;
    if (memchr(buf, '\0', len)) {
        fprintf(stderr, "sdnpu chat: '%s' is not a text file (it holds a NUL byte)\n", path);
        free(buf);
        return 1;
    }
    struct chat tmp = {0};
    tmp.model = c->model;
    char *system = NULL;
    bool have_system = false;
    int line_no = 0, err = 0;
    char *p = buf;
    while (*p && !err) {
        char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        char *next = nl ? nl + 1 : p + n;
        line_no++;
        if (n && p[n - 1] == '\r') n--;
        p[n] = '\0';
        if (n == 0 || p[0] == '#') {
            p = next;
            continue;
        }
        char *colon = strchr(p, ':');
        if (!colon) {
            fprintf(stderr, "sdnpu chat: %s:%d: expected 'ROLE: TEXT'\n", path, line_no);
            err = 1;
            break;
        }
        *colon = '\0';
        char *text = colon + 1;
        if (*text == ' ') text++;
        size_t tl = unescape(text, strlen(text));
        if (!strcmp(p, "system")) {
            free(system);
            system = dup_n(text, tl);
            have_system = true;
        } else if (!strcmp(p, "context")) {
            if (tmp.pending.n) str_adds(&tmp.pending, "\n\n");
            str_add(&tmp.pending, text, tl);
        } else if (!strcmp(p, "user")) {
            struct turn *t = turn_push(&tmp);
            t->user = dup_n(text, tl);
            if (tmp.pending.n) {
                t->context = tmp.pending.p;
                tmp.pending = (struct str){0};
            }
        } else if (!strcmp(p, "assistant")) {
            if (tmp.n_turns == 0 || tmp.turns[tmp.n_turns - 1].assistant) {
                fprintf(stderr, "sdnpu chat: %s:%d: an assistant record with no user record before it\n",
                        path, line_no);
                err = 1;
            } else {
                struct str a = {0};
                /* A base model's reply follows "Assistant:" with a space;
                 * put back the one save_transcript took off. */
                if (!c->templ && tl && !is_space(text[0])) str_adds(&a, " ");
                str_add(&a, text, tl);
                tmp.turns[tmp.n_turns - 1].assistant = a.p;
            }
        } else {
            fprintf(stderr, "sdnpu chat: %s:%d: unknown role '%.40s' (system, context, user, assistant)\n",
                    path, line_no, p);
            err = 1;
        }
        p = next;
    }
    free(buf);
    if (err) {
        transcript_clear(&tmp);
        free(tmp.turns);
        str_free(&tmp.pending);
        free(system);
        return 1;
    }
    transcript_clear(c);
    free(c->turns);
    c->turns = tmp.turns;
    c->n_turns = tmp.n_turns;
    c->cap_turns = tmp.cap_turns;
    str_free(&c->pending);
    c->pending = tmp.pending;
    if (have_system) {
        free(c->system);
        c->system = system;
    }
    fprintf(stderr, "loaded %zu turns from %s\n", c->n_turns, path);
    replay(c);
    return 0;
}

/* --------------------------------------------------------------- stats */

static void print_stats(const struct chat *c) {
    static const char *why[] = {"length", "end of turn", "stop string", "stopped", "context full", "repetition"};
    if (!c->have_last) {
        printf("no request yet\n");
    } else {
        const struct sdnpu_stats *st = &c->last;
        printf("last request: prompt %d tokens in %.0f ms (%.1f tok/s) | generated %d tokens in %.0f ms "
               "(%.1f tok/s)\n",
               st->n_prompt_tokens, st->prefill_ms, st->prompt_tokens_per_s, st->n_generated, st->decode_ms,
               st->gen_tokens_per_s);
        printf("  speculative: %s | %d model calls, acceptance %.2f tokens/call | drafted %d, accepted %d | "
               "drafting %.1f ms, in the model %.1f ms\n",
               c->last_spec, st->n_verify_steps, st->acceptance, st->n_drafted,
               st->n_accepted, st->draft_ms, st->verify_ms);
        if (st->n_graph_rows > 0)
            printf("  graph rows %lld (padding %.1f%%) | ", (long long)st->n_graph_rows,
                   100.0 * (double)st->n_pad_rows / (double)st->n_graph_rows);
        else
            printf("  ");
        printf("prepared graphs %.1f MiB (weights %s) | peak RSS %.0f MiB | stop: %s\n",
               (double)st->prepared_bytes / 1048576.0, st->shared_weight_bytes ? "shared" : "private",
               (double)st->peak_rss_bytes / 1048576.0,
               st->stop_reason >= 0 && st->stop_reason < 6 ? why[st->stop_reason] : "?");
    }
    const struct totals *t = &c->tot;
    printf(
        "session: %d requests, %d tokens generated (%.1f tok/s), acceptance %.2f tokens/call | context %d of "
        "%d tokens | method %s | history %s\n",
        t->n_requests, t->n_generated, t->decode_ms > 0 ? t->n_generated / (t->decode_ms / 1e3) : 0.0,
        t->n_verify_steps > 0 ? (double)(t->n_verify_steps + t->n_accepted) / t->n_verify_steps : 1.0,
        sdnpu_session_n_past(c->s), c->n_ctx, c->spec ? c->spec : "none", c->history ? c->history : "off");
}

/* ---------------------------------------------------------------- input */

static void chat_help(FILE *f) {
    fprintf(f, "Type a message and press Enter. End a line with \\ to continue on the next line, or put\n"
               "the message between lines that start and end with \"\"\". Start a message with // to send a\n"
               "literal /.\n\n"
               "  /help              this text\n"
               "  /reset             forget the conversation (the system text stays)\n"
               "  /context FILE      attach a document: it goes before your next message\n"
               "  /history FILE|off  use FILE as a store of earlier replies for drafting; replies are added\n"
               "  /stats             speed and acceptance of the last reply and of the session\n"
               "  /method NAME       speculative method: none, cpu-vanilla, npu-vanilla, pld, sam, sam-tree (+reuse)\n"
               "  /save FILE         write the conversation as a transcript\n"
               "  /load FILE         read a transcript and replay it into the session\n"
               "  /quit              leave (so does Ctrl-D); Ctrl-C stops a reply\n");
}

enum { IN_EOF = -1, IN_INTR = -2 };

/* Read one message (a line, a \-continued run of lines, or a """ block)
 * into out. Returns 0, IN_EOF, or IN_INTR when Ctrl-C dropped the input. */
static int read_message(const struct chat *c, struct str *out, char **line, size_t *line_cap) {
    str_clear(out);
    bool block = false, more = false;
    for (;;) {
        if (c->tty) {
            fputs(block || more ? "... " : "> ", stdout);
            fflush(stdout);
        }
        errno = 0;
        bool too_long;
        ssize_t n = cli_getline(stdin, line, line_cap, CHAT_MAX_LINE, &too_long);
        if (n >= 0 && too_long) {
            fprintf(stderr, "sdnpu chat: a line of %d MiB or more was dropped (use /context FILE for documents)\n",
                    CHAT_MAX_LINE >> 20);
            continue;
        }
        if (n < 0) {
            if (g_interrupted || errno == EINTR) {
                clearerr(stdin);
                g_interrupted = 0;
                return IN_INTR;
            }
            if (block || more) return 0; /* end of input ends the message too */
            return IN_EOF;
        }
        char *l = *line;
        size_t len = (size_t)n;
        while (len && (l[len - 1] == '\n' || l[len - 1] == '\r')) len--;
        l[len] = '\0';
        if (block) {
            bool end = len >= 3 && !memcmp(l + len - 3, "\"\"\"", 3);
            if (end) len -= 3;
            if (out->n || len) {
                if (out->n) str_adds(out, "\n");
                str_add(out, l, len);
            }
            if (end) return 0;
            continue;
        }
        if (!more && len >= 3 && !memcmp(l, "\"\"\"", 3)) {
            block = true;
            l += 3;
            len -= 3;
            bool end = len >= 3 && !memcmp(l + len - 3, "\"\"\"", 3);
            if (end) len -= 3;
            str_add(out, l, len);
            if (end) return 0;
            continue;
        }
        if (len && l[len - 1] == '\\') {
            str_add(out, l, len - 1);
            str_adds(out, "\n");
            more = true;
            continue;
        }
        str_add(out, l, len);
        return 0;
    }
}

/* ------------------------------------------------------------- commands */

/* Run a /command. Returns 1 to quit, 0 otherwise. */
static int command(struct chat *c, char *line) {
    char *arg = line + strcspn(line, " \t");
    if (*arg) *arg++ = '\0';
    while (is_space(*arg)) arg++;
    size_t al = strlen(arg);
    while (al && is_space(arg[al - 1])) arg[--al] = '\0';
    const char *cmd = line + 1;
    if (!strcmp(cmd, "quit") || !strcmp(cmd, "exit") || !strcmp(cmd, "q")) return 1;
    if (!strcmp(cmd, "help") || !strcmp(cmd, "?")) {
        chat_help(stdout);
    } else if (!strcmp(cmd, "reset")) {
        transcript_clear(c);
        str_clear(&c->pending);
        sdnpu_session_reset(c->s);
        str_clear(&c->held);
        c->dirty = false;
        fprintf(stderr, "conversation reset\n");
    } else if (!strcmp(cmd, "context")) {
        if (!*arg) {
            fprintf(stderr, "usage: /context FILE\n");
            return 0;
        }
        size_t n = 0;
        char *text = cli_read_file(arg, &n);
        if (!text) return 0;
        if (memchr(text, '\0', n)) {
            fprintf(stderr, "sdnpu chat: '%s' is not a text file (it holds a NUL byte)\n", arg);
        } else {
            if (c->pending.n) str_adds(&c->pending, "\n\n");
            str_add(&c->pending, text, n);
            fprintf(stderr, "attached %s (%zu bytes); it goes before your next message\n", arg, n);
        }
        free(text);
    } else if (!strcmp(cmd, "history")) {
        if (!*arg) {
            fprintf(stderr, "usage: /history FILE|off (now: %s)\n", c->history ? c->history : "off");
            return 0;
        }
        bool off = !strcmp(arg, "off");
        int rc = sdnpu_session_set_history(c->s, off ? NULL : arg);
        if (rc) {
            fprintf(stderr, "sdnpu chat: cannot use history '%s': %s: %s\n", arg, sdnpu_status_str(rc),
                    sdnpu_session_last_error(c->s));
            set_str(&c->history, NULL);
        } else {
            set_str(&c->history, off ? NULL : arg);
            fprintf(stderr, off ? "history off\n" : "history: %s\n", arg);
        }
    } else if (!strcmp(cmd, "stats")) {
        print_stats(c);
    } else if (!strcmp(cmd, "method")) {
        if (!*arg) {
            fprintf(stderr, "speculative method: %s (/method DRAFTER[+STAGE...]: none, cpu-vanilla, npu-vanilla, "
                            "pld, sam, sam-tree; + reuse)\n", c->spec ? c->spec : "none");
            return 0;
        }
        /* Parsed and checked here: a method the engine cannot run is
         * refused now and the current one kept. */
        struct sdnpu_spec sp;
        if (cli_parse_spec("/method", arg, &sp)) return 0;
        c->gp.spec = sp;
        set_str(&c->spec, arg);
        fprintf(stderr, "speculative method: %s (from the next message)\n", arg);
    } else if (!strcmp(cmd, "save")) {
        if (!*arg)
            fprintf(stderr, "usage: /save FILE\n");
        else
            save_transcript(c, arg);
    } else if (!strcmp(cmd, "load")) {
        if (!*arg)
            fprintf(stderr, "usage: /load FILE\n");
        else
            load_transcript(c, arg);
    } else {
        fprintf(stderr, "unknown command '/%s' (see /help)\n", cmd);
    }
    return 0;
}

/* ------------------------------------------------------------------ main */

/* The command prints every failure itself with the engine's message, so the
 * log's copy of errors is dropped; warnings still show. */
static void chat_log(enum sdnpu_log_level level, const char *msg, void *user) {
    (void)user;
    const char *env = getenv("SDNPU_LOG");
    int max = env ? atoi(env) : SDNPU_LOG_WARN;
    if (level == SDNPU_LOG_ERROR && max <= SDNPU_LOG_WARN) return;
    static const char *names[] = {"error", "warning", "info", "debug"};
    if ((int)level <= max) fprintf(stderr, "sdnpu: %s: %s\n", names[level & 3], msg);
}

static void chat_usage(FILE *f) {
    fprintf(
        f,
        "usage: sdnpu chat [options]\n\n"
        "A conversation with the model. Reads messages from the terminal or from stdin; a model\n"
        "without a chat template gets a plain 'User: ...\\nAssistant:' script.\n\n"
        "options:\n"
        "  -m, --model MODEL      a GGUF file, or an installed model by name (qwen2.5-coder-1.5b-instruct;\n"
        "                         scripts/setup --list-models); default: $SDNPU_MODEL or models/default.gguf\n"
        "      --system TEXT      system text, before the conversation\n"
        "      --spec METHOD      speculative decoding: none, cpu-vanilla, npu-vanilla, pld, sam, sam-tree (+reuse)\n"
        "                         (default none)\n"
        "      --draft-max N      most draft tokens per verification\n"
        "      --no-adaptive      verify every draft (default: only when it pays, by cost and acceptance)\n"
        "      --history FILE     earlier replies as a drafting store; replies are appended\n"
        "      --context FILE     attach a document to the first message\n"
        "  -n, --n-predict N      most tokens per reply (default 256; -1 = until the context is full)\n"
        CLI_HELP_SAMPLING CLI_HELP_SESSION
        "      --kernels K        cpu summation order: fast (default) or ggml\n"
        "      --weights, --weight-cache DIR, --no-weight-cache: as for run\n\n");
    chat_help(f);
    fprintf(f, "\nTranscripts (/save, /load) hold one record a line, 'ROLE: TEXT', ROLE one of system,\n"
               "context, user, assistant; in TEXT \\n is a newline, \\t a tab, \\\\ a backslash. Lines\n"
               "starting with # are comments.\n");
}

static void chat_free(struct chat *c) {
    transcript_clear(c);
    free(c->turns);
    str_free(&c->pending);
    str_free(&c->held);
    free(c->system);
    free(c->spec);
    free(c->history);
    sdnpu_session_free(c->s);
    sdnpu_model_free(c->model);
    sdnpu_log_set(NULL, NULL);
}

/* --seed as chat has always read it: any unsigned number strtoull takes. */
static int parse_seed(const char *flag, const char *v, void *field) {
    char *end;
    errno = 0;
    uint64_t seed = strtoull(v, &end, 10);
    if (errno || *end || end == v) {
        fprintf(stderr, "sdnpu chat: %s expects an integer, got '%s'\n", flag, v);
        return -1;
    }
    memcpy(field, &seed, sizeof seed);
    return 0;
}

struct chat_opts {
    struct cli_gen_opts g;
    const char *context;
};

static const struct cli_flag k_chat_flags[] = {
    {"--context", NULL, CLI_STR, CLI_AT(struct chat_opts, context)},
    {"--seed", NULL, CLI_FN, CLI_AT(struct chat_opts, g.gp.sampling.seed), .fn = parse_seed},
    {0},
};

int cli_chat(int argc, char **argv) {
    struct chat_opts o = {.g = cli_gen_default_opts()};
    const struct cli_parser parser = {
        "sdnpu chat", chat_usage, {CLI_GEN_GROUPS(&o.g), {k_chat_flags, &o}}, .style = CLI_SEE_HELP};
    int parsed = cli_parse_flags(&parser, argc, argv);
    if (parsed != CLI_PARSED) return parsed;
    const char *model_path = o.g.m.model, *history = o.g.history, *context = o.context;

    sdnpu_log_set(chat_log, NULL);
    struct chat c;
    memset(&c, 0, sizeof c);
    c.gp = o.g.gp;
    c.tty = isatty(0) != 0;
    model_path = cli_model(model_path);
    struct sdnpu_model_params mp = sdnpu_model_default_params();
    mp.n_threads = o.g.m.n_threads;
    char err[512];
    int rc = sdnpu_model_load(model_path, mp, &c.model, err, sizeof err);
    if (rc) {
        fprintf(stderr, "sdnpu chat: cannot load model: %s: %s\n", sdnpu_status_str(rc), err);
        cli_model_hint("sdnpu chat", o.g.m.model, model_path);
        return 1;
    }
    cli_weight_cache(&o.g.sp, model_path);
    rc = sdnpu_session_create(c.model, o.g.sp, &c.s);
    if (rc) {
        fprintf(stderr, "sdnpu chat: cannot make a session: %s: %s\n", sdnpu_status_str(rc),
                sdnpu_model_last_error(c.model));
        chat_free(&c);
        return 1;
    }
    c.n_ctx = o.g.sp.n_ctx > 0 ? o.g.sp.n_ctx : 4096;
    c.templ = sdnpu_model_has_chat_template(c.model);
    set_str(&c.system, o.g.system);
    set_str(&c.spec, o.g.spec);
    if (history) {
        if ((rc = sdnpu_session_set_history(c.s, history)) != SDNPU_OK) {
            fprintf(stderr, "sdnpu chat: cannot use history '%s': %s: %s\n", history, sdnpu_status_str(rc),
                    sdnpu_session_last_error(c.s));
            chat_free(&c);
            return 1;
        }
        set_str(&c.history, history);
    }
    if (context) {
        size_t n = 0;
        char *text = cli_read_file(context, &n);
        if (!text) {
            chat_free(&c);
            return 1;
        }
        str_add(&c.pending, text, n);
        free(text);
    }
    if (c.tty)
        fprintf(stderr, "sdnpu chat: %s (%s). /help for commands; Ctrl-C stops a reply, Ctrl-D leaves.\n",
                sdnpu_model_arch(c.model),
                c.templ ? "chat template" : "base model: plain User/Assistant script");

    install_sigint(false);
    struct str msg = {0};
    char *line = NULL;
    size_t line_cap = 0;
    int code = 0;
    for (;;) {
        int r = read_message(&c, &msg, &line, &line_cap);
        if (r == IN_EOF) break;
        if (r == IN_INTR) {
            if (c.tty) fprintf(stderr, "\n(/quit or Ctrl-D to leave)\n");
            continue;
        }
        char *m = msg.p ? msg.p : (char *)"";
        if (m[0] == '/' && m[1] != '/') {
            if (command(&c, m)) break;
            continue;
        }
        if (m[0] == '/') m++; /* "//..." sends a literal "/..." */
        size_t ml = strlen(m);
        while (ml && is_space(m[ml - 1])) ml--;
        if (ml == 0) continue;
        m[ml] = '\0';
        if (chat_turn(&c, m) && !c.tty) code = 1;
    }
    if (c.tty) fputc('\n', stdout);
    signal(SIGINT, SIG_DFL);
    free(line);
    str_free(&msg);
    chat_free(&c);
    return code;
}
