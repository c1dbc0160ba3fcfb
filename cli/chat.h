/*
 * cli/chat.h - inside `sdnpu chat` (cli/cli.h is the command's face): the
 * conversation's state, shared by the loop that reads messages and
 * commands (cli/chat_main.c), the turns that talk to the session
 * (cli/chat.c), the conversation's records (cli/chat_transcript.c:
 * turns, rendering, transcript files) and the terminal's line editor
 * (cli/chat_edit.c).
 *
 * The small string helpers are static inline so that they stay out of the
 * command's global names; the functions shared are named cli_chat_*.
 */
#ifndef SD_CLI_CHAT_H
#define SD_CLI_CHAT_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "sdnpu.h"

/* ------------------------------------------------------------- strings */

/* A growable NUL-terminated byte string. Running out of memory in the
 * command is reported and ends it: there is nothing sensible to go on with. */
struct str {
    char *p;
    size_t n, cap;
};

static inline void str_add(struct str *s, const char *p, size_t n) {
    if (s->n + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 256;
        while (cap < s->n + n + 1)
            cap *= 2;
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

static inline void str_adds(struct str *s, const char *p) { str_add(s, p, strlen(p)); }
static inline void str_clear(struct str *s) {
    s->n = 0;
    if (s->p) s->p[0] = '\0';
}
static inline const char *str_c(const struct str *s) { return s->p ? s->p : ""; }

static inline void str_free(struct str *s) {
    free(s->p);
    s->p = NULL;
    s->n = s->cap = 0;
}

static inline char *dup_n(const char *p, size_t n) {
    struct str s = {0};
    str_add(&s, p, n);
    return s.p;
}

static inline bool is_space(char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r'; }

/* ---------------------------------------------------------------- state */

struct turn {
    char *context; /* documents attached before the message, or NULL */
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
    int32_t n_ctx0; /* the context it started with (ctx_auto: /reset goes back to it) */
    bool ctx_auto; /* -c not given: the context grows to fit (grow_context) */
    const char *prompt_cache; /* --prompt-cache FILE, or NULL */
    bool cache_fresh;         /* the session holds the loaded prompt cache, not the conversation */
    bool cache_saved;         /* the first turn's context went to prompt_cache */
    bool templ; /* the model has a chat template */
    bool tty;   /* stdin is a terminal: show prompts */
    /* The line editor; NULL: plain reads (stdin or stdout not a terminal). */
    struct cli_chat_editor *editor;
    char *system;
    struct turn *turns;
    size_t n_turns, cap_turns;
    struct str pending; /* documents for the next message */
    struct str held;    /* the text the session holds, when !dirty */
    bool dirty;
    char *spec; /* the method's text as given (its struct is gp.spec), NULL for none */
    char *history;
    struct sdnpu_stats last;
    char last_spec[64]; /* the method the last request ran */
    bool have_last;
    struct totals tot;
};

/* ------------------------------------------------ the conversation's records */

/* Free a turn's texts and zero it. */
void cli_chat_turn_free(struct turn *t);
/* Forget every turn (the system text and pending documents stay). */
void cli_chat_transcript_clear(struct chat *c);
/* A new, empty turn at the end of the conversation. */
struct turn *cli_chat_turn_push(struct chat *c);
/* Render the conversation. With open, the last turn's answer is left open
 * for the model to write; without, every turn is rendered as answered.
 * Returns 0, or a status after printing why. */
int cli_chat_render(const struct chat *c, bool open, struct str *out);
/* Write the conversation to path as a transcript. held, when not NULL, is
 * the text a session saved beside it holds (a "held" record). Returns 0,
 * or 1 after printing why. */
int cli_chat_transcript_save(const struct chat *c, const char *path, const char *held);
/* Read the transcript at path into c, replacing its conversation (the
 * session is not touched: the caller restores or replays it). *held
 * receives the text of its "held" record (the caller frees it), or NULL
 * where it has none. The file is untrusted: any malformed line is reported
 * with its number, nothing is changed, and 1 is returned; 0 when loaded. */
int cli_chat_transcript_load(struct chat *c, const char *path, char **held);

/* ------------------------------------------------------ turns (cli/chat.c) */

/* Set by Ctrl-C (the signal handler); the reply stops, the read drops its
 * half-typed message. */
extern volatile sig_atomic_t cli_chat_interrupted;
/* SIGINT's handler: SA_RESTART (while generating: writes go on) or not
 * (while reading: the read is interrupted). */
void cli_chat_install_sigint(bool restart);
/* *dst = a copy of src (NULL: none), the old one freed. */
void cli_chat_set_str(char **dst, const char *src);
/* One message as a turn: rendered, evaluated, answered (streamed), in a
 * larger context where it does not fit and may grow. Returns 0, or 1 when
 * the turn failed (said on stderr). */
int cli_chat_turn(struct chat *c, const char *msg);
/* The prompt cache (--prompt-cache), read once at the start. */
void cli_chat_load_prompt_cache(struct chat *c);
/* /save and /load: the transcript at path, the session at path.session. */
void cli_chat_save(struct chat *c, const char *path);
void cli_chat_load(struct chat *c, const char *path);
/* /stats. */
void cli_chat_print_stats(const struct chat *c);

/* --------------------------------------------------- the line editor */

/* Open the line editor on the terminal (stdin and stdout are terminals).
 * *interrupted is the flag the chat's SIGINT handler sets: a read it
 * interrupts ends. Returns NULL, after saying why, where libedit cannot
 * start: the chat then reads plain lines. Loads the history file. */
struct cli_chat_editor *cli_chat_editor_open(volatile sig_atomic_t *interrupted);
/* Show prompt and read one line into *line (grown as needed; *cap its
 * size), its newline kept, and add it to the history. As cli_getline:
 * returns the length; -1 at end of input (Ctrl-D on an empty line), or
 * with errno EINTR when Ctrl-C interrupted it; a line of max bytes or more
 * is dropped with *too_long set. */
ssize_t cli_chat_editor_read(struct cli_chat_editor *e, const char *prompt, char **line, size_t *cap,
                             size_t max, bool *too_long);
/* Save the history file and close the editor. NULL does nothing. */
void cli_chat_editor_close(struct cli_chat_editor *e);

#endif /* SD_CLI_CHAT_H */
