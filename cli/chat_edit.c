/*
 * cli/chat_edit.c - `sdnpu chat`'s line editor on a terminal, on libedit
 * (BSD licence): emacs keys (arrows, Home/End, Ctrl-A/E/K/W, Ctrl-R to
 * search back; ~/.editrc may rebind them, "bind -v" for vi keys), and a
 * history of the lines typed that Up recalls, kept across runs in
 * $XDG_STATE_HOME/sdnpu/chat_history (~/.local/state/sdnpu/chat_history;
 * $SDNPU_CHAT_HISTORY names another file, and set empty keeps none).
 *
 * Only the command links libedit: the library reads no terminal.
 *
 * Signals. libedit's own handlers (EL_SIGNAL) put the terminal back in
 * its normal mode on Ctrl-Z and in editing mode on fg, redraw the line on
 * a resize, and pass SIGINT on to the chat's handler, which sets the flag
 * given to cli_chat_editor_open. That handler does not restart reads, so
 * Ctrl-C at the prompt ends el_gets at once, and the flag tells that end
 * from Ctrl-D's: the chat drops the line and prompts again.
 */
#include <errno.h>
#include <histedit.h>
#include <langinfo.h>
#include <locale.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chat.h"

#define HISTORY_SIZE 1000

struct cli_chat_editor {
    EditLine *el;
    History *h;
    const char *prompt;
    volatile sig_atomic_t *interrupted;
    char *history_file; /* NULL: history in memory only */
    bool added;         /* a line was added: the file is written back */
};

static char *prompt_fn(EditLine *el) {
    struct cli_chat_editor *e = NULL;
    el_get(el, EL_CLIENTDATA, (void *)&e);
    return (char *)(e && e->prompt ? e->prompt : "");
}

/* The history file: $SDNPU_CHAT_HISTORY, else under $XDG_STATE_HOME, else
 * under ~/.local/state. NULL for none. */
static char *history_path(void) {
    const char *env = getenv("SDNPU_CHAT_HISTORY");
    if (env) return *env ? dup_n(env, strlen(env)) : NULL;
    struct str p = {0};
    const char *state = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
    if (state && *state) {
        str_adds(&p, state);
    } else if (home && *home) {
        str_adds(&p, home);
        str_adds(&p, "/.local/state");
    } else {
        return NULL;
    }
    str_adds(&p, "/sdnpu/chat_history");
    return p.p;
}

/* Make the folders above path (private: the history holds what was typed).
 * Returns 0, or -1 with errno set. */
static int make_parents(const char *path) {
    char *p = dup_n(path, strlen(path));
    int rc = 0;
    for (char *s = strchr(p + 1, '/'); s && rc == 0; s = strchr(s + 1, '/')) {
        *s = '\0';
        if (mkdir(p, 0700) != 0 && errno != EEXIST) rc = -1;
        *s = '/';
    }
    free(p);
    return rc;
}

struct cli_chat_editor *cli_chat_editor_open(volatile sig_atomic_t *interrupted) {
    /* libedit works in wide characters and converts with the locale; the
     * chat's text is UTF-8 whatever the environment says. Only LC_CTYPE
     * changes: numbers still print and parse as in C. */
    if (!setlocale(LC_CTYPE, "") || strcmp(nl_langinfo(CODESET), "UTF-8") != 0)
        setlocale(LC_CTYPE, "C.UTF-8");
    struct cli_chat_editor *e = calloc(1, sizeof *e);
    if (e) {
        e->interrupted = interrupted;
        e->el = el_init("sdnpu", stdin, stdout, stderr);
        e->h = history_init();
    }
    if (!e || !e->el || !e->h) {
        fprintf(stderr, "sdnpu chat: no line editing (libedit could not start); reading plain lines\n");
        cli_chat_editor_close(e);
        return NULL;
    }
    HistEvent ev;
    history(e->h, &ev, H_SETSIZE, HISTORY_SIZE);
    history(e->h, &ev, H_SETUNIQUE, 1);
    e->history_file = history_path();
    if (e->history_file) history(e->h, &ev, H_LOAD, e->history_file); /* none yet is fine */
    el_set(e->el, EL_CLIENTDATA, e);
    el_set(e->el, EL_EDITOR, "emacs");
    el_set(e->el, EL_SIGNAL, 1);
    el_set(e->el, EL_PROMPT, prompt_fn);
    el_set(e->el, EL_HIST, history, e->h);
    el_source(e->el, NULL); /* ~/.editrc, where there is one */
    return e;
}

ssize_t cli_chat_editor_read(struct cli_chat_editor *e, const char *prompt, char **line, size_t *cap,
                             size_t max, bool *too_long) {
    e->prompt = prompt;
    *too_long = false;
    fflush(stdout);
    int n = 0;
    errno = 0;
    const char *l = el_gets(e->el, &n);
    if (!l || n <= 0) {
        if (*e->interrupted) errno = EINTR;
        return -1;
    }
    size_t len = (size_t)n;
    if (len >= max) {
        *too_long = true;
        return 0;
    }
    if (len + 1 > *cap) {
        char *p = realloc(*line, len + 1);
        if (!p) {
            fprintf(stderr, "sdnpu chat: out of memory\n");
            exit(1);
        }
        *line = p;
        *cap = len + 1;
    }
    memcpy(*line, l, len);
    (*line)[len] = '\0';
    size_t text = len;
    while (text && ((*line)[text - 1] == '\n' || (*line)[text - 1] == '\r'))
        text--;
    if (text) {
        HistEvent ev;
        char *entry = dup_n(*line, text);
        history(e->h, &ev, H_ENTER, entry);
        free(entry);
        e->added = true;
    }
    return (ssize_t)len;
}

void cli_chat_editor_close(struct cli_chat_editor *e) {
    if (!e) return;
    if (e->h && e->history_file && e->added) {
        HistEvent ev;
        if (make_parents(e->history_file) != 0 || history(e->h, &ev, H_SAVE, e->history_file) < 0)
            fprintf(stderr, "sdnpu chat: cannot keep the history in '%s'\n", e->history_file);
    }
    if (e->el) el_end(e->el);
    if (e->h) history_end(e->h);
    free(e->history_file);
    free(e);
}
