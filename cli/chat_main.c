/*
 * cli/chat_main.c - `sdnpu chat`'s loop: its options, reading a message
 * (a line, a \-continued run, a """ block), the slash commands, and
 * each message handed to cli/chat.c as a turn.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "chat.h"
#include "cli.h"

/* The longest message line read from the terminal or a pipe. */
#define CHAT_MAX_LINE (1 << 20)

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
               "  /method NAME       speculative method: none, cpu-vanilla, npu-vanilla, pld, sam, sam-tree "
               "(+reuse)\n"
               "  /save FILE         write the conversation to FILE (a transcript) and the session to\n"
               "                     FILE.session\n"
               "  /load FILE         read them back and go on from where /save was; a transcript without\n"
               "                     its session is evaluated again\n"
               "  /quit              leave (so does Ctrl-D); Ctrl-C stops a reply\n\n"
               "At a terminal the line is edited as in a shell (arrows, Ctrl-A/E/K/W, Ctrl-R searches\n"
               "back), Up recalls earlier lines, kept in $XDG_STATE_HOME/sdnpu/chat_history\n"
               "(~/.local/state/sdnpu/chat_history; SDNPU_CHAT_HISTORY=FILE, or empty for none).\n");
}

/* After /reset, a context grown for a document (without -c) goes back to
 * its start, and its KV cache's memory to the system: the next document
 * grows it again if it must. */
static void shrink_context(struct chat *c) {
    if (!c->ctx_auto || c->n_ctx <= c->n_ctx0) return;
    if (sdnpu_session_set_n_ctx(c->s, c->n_ctx0) != SDNPU_OK) return; /* it stays as it was */
    fprintf(stderr, "the context goes back from %d to %d tokens\n", c->n_ctx, c->n_ctx0);
    c->n_ctx = c->n_ctx0;
}

enum { IN_EOF = -1, IN_INTR = -2 };

/* Read one message (a line, a \-continued run of lines, or a """ block)
 * into out. Returns 0, IN_EOF, or IN_INTR when Ctrl-C dropped the input. */
static int read_message(const struct chat *c, struct str *out, char **line, size_t *line_cap) {
    str_clear(out);
    cli_chat_interrupted = 0; /* a Ctrl-C that stopped the last reply is spent */
    bool block = false, more = false;
    for (;;) {
        const char *prompt = block || more ? "... " : "> ";
        if (c->tty && !c->editor) {
            fputs(prompt, stdout);
            fflush(stdout);
        }
        errno = 0;
        bool too_long;
        ssize_t n = c->editor
                        ? cli_chat_editor_read(c->editor, prompt, line, line_cap, CHAT_MAX_LINE, &too_long)
                        : cli_getline(stdin, line, line_cap, CHAT_MAX_LINE, &too_long);
        if (n >= 0 && too_long) {
            fprintf(stderr,
                    "sdnpu chat: a line of %d MiB or more was dropped (use /context FILE for documents)\n",
                    CHAT_MAX_LINE >> 20);
            continue;
        }
        if (n < 0) {
            if (cli_chat_interrupted || errno == EINTR) {
                clearerr(stdin);
                cli_chat_interrupted = 0;
                return IN_INTR;
            }
            if (block || more) return 0; /* end of input ends the message too */
            return IN_EOF;
        }
        char *l = *line;
        size_t len = (size_t)n;
        while (len && (l[len - 1] == '\n' || l[len - 1] == '\r'))
            len--;
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
    while (is_space(*arg))
        arg++;
    size_t al = strlen(arg);
    while (al && is_space(arg[al - 1]))
        arg[--al] = '\0';
    const char *cmd = line + 1;
    if (!strcmp(cmd, "quit") || !strcmp(cmd, "exit") || !strcmp(cmd, "q")) return 1;
    if (!strcmp(cmd, "help") || !strcmp(cmd, "?")) {
        chat_help(stdout);
    } else if (!strcmp(cmd, "reset")) {
        cli_chat_transcript_clear(c);
        str_clear(&c->pending);
        sdnpu_session_reset(c->s);
        c->cache_fresh = false;
        str_clear(&c->held);
        c->dirty = false;
        fprintf(stderr, "conversation reset\n");
        shrink_context(c);
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
            cli_chat_set_str(&c->history, NULL);
        } else {
            cli_chat_set_str(&c->history, off ? NULL : arg);
            fprintf(stderr, off ? "history off\n" : "history: %s\n", arg);
        }
    } else if (!strcmp(cmd, "stats")) {
        cli_chat_print_stats(c);
    } else if (!strcmp(cmd, "method")) {
        if (!*arg) {
            fprintf(stderr,
                    "speculative method: %s (/method DRAFTER[+STAGE...]: none, cpu-vanilla, npu-vanilla, "
                    "pld, sam, sam-tree; + reuse)\n",
                    c->spec ? c->spec : "none");
            return 0;
        }
        /* Parsed and checked here: a method the engine cannot run is
         * refused now and the current one kept. */
        struct sdnpu_spec sp;
        if (cli_parse_spec("/method", arg, &sp)) return 0;
        c->gp.spec = sp;
        cli_chat_set_str(&c->spec, arg);
        fprintf(stderr, "speculative method: %s (from the next message)\n", arg);
    } else if (!strcmp(cmd, "save")) {
        if (!*arg)
            fprintf(stderr, "usage: /save FILE\n");
        else
            cli_chat_save(c, arg);
    } else if (!strcmp(cmd, "load")) {
        if (!*arg)
            fprintf(stderr, "usage: /load FILE\n");
        else
            cli_chat_load(c, arg);
    } else {
        fprintf(stderr, "unknown command '/%s' (see /help)\n", cmd);
    }
    return 0;
}

/* ------------------------------------------------------------------ main */

static void chat_usage(FILE *f) {
    fprintf(
        f,
        "usage: sdnpu chat [options]\n\n"
        "A conversation with the model. Reads messages from the terminal or from stdin; a model\n"
        "without a chat template gets a plain 'User: ...\\nAssistant:' script.\n\n"
        "options:\n"
        "  -m, --model MODEL      a GGUF file, or an installed model by name (qwen2.5-coder-1.5b-instruct;\n"
        "                         scripts/setup --list-models); default: $SDNPU_MODEL or "
        "models/default.gguf\n"
        "      --system TEXT      system text, before the conversation (default: the chat template's own\n"
        "                         where it has one; \"\" for no system turn at all)\n"
        "      --spec METHOD      speculative decoding: none, cpu-vanilla, npu-vanilla, pld, sam, sam-tree "
        "(+reuse)\n"
        "                         (default sam-tree, as the server; none for plain decoding)\n"
        "      --draft-max N      most draft tokens per verification\n"
        "      --no-adaptive      verify every draft (default: only when it pays, by cost and acceptance)\n"
        "      --history FILE     earlier replies as a drafting store; replies are appended\n"
        "      --context FILE     attach a document to the first message (without -c the context, 4096\n"
        "                         tokens, grows to fit a conversation that outgrows it, to the model's own)\n"
        "      --prompt-cache FILE\n"
        "                         load the context saved in FILE, if there is one: the first turn keeps the\n"
        "                         prefix it shares (a document asked about before) and prefills the rest;\n"
        "                         after it, the session is saved to FILE (as run's --prompt-cache)\n"
        "  -n, --n-predict N      most tokens per reply (default 256; -1 = until the context is "
        "full)\n" CLI_HELP_SAMPLING CLI_HELP_SESSION
        "      --kernels K        cpu summation order: fast (default) or ggml\n"
        "      --weights, --weight-cache DIR, --no-weight-cache, --head H: as for run\n\n");
    chat_help(f);
    fprintf(f, "\nTranscripts (/save, /load) hold one record a line, 'ROLE: TEXT', ROLE one of system,\n"
               "context, user, assistant, held (the text the saved FILE.session holds); in TEXT \\n is a\n"
               "newline, \\t a tab, \\\\ a backslash. Lines starting with # are comments.\n");
}

static void chat_free(struct chat *c) {
    cli_chat_editor_close(c->editor);
    cli_chat_transcript_clear(c);
    free(c->turns);
    str_free(&c->pending);
    str_free(&c->held);
    free(c->system);
    free(c->spec);
    free(c->history);
    sdnpu_session_free(c->s);
    sdnpu_model_free(c->model);
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
    const char *context, *prompt_cache;
};

static const struct cli_flag k_chat_flags[] = {
    {"--context", NULL, CLI_STR, CLI_AT(struct chat_opts, context)},
    {"--prompt-cache", NULL, CLI_STR, CLI_AT(struct chat_opts, prompt_cache)},
    {"--seed", NULL, CLI_FN, CLI_AT(struct chat_opts, g.gp.sampling.seed), .fn = parse_seed},
    {0},
};

/* The model, the session and what the options bring into it (a history
 * store, a prompt cache, a document for the first message). 0, or 1 with
 * the message said and c freed. */
static int chat_open(struct chat *c, struct chat_opts *o) {
    const char *model_path = cli_model(o->g.m.model), *history = o->g.history;
    struct sdnpu_model_params mp = sdnpu_model_default_params();
    mp.n_threads = o->g.m.n_threads;
    mp.head = o->g.m.head;
    char err[512];
    int rc = sdnpu_model_load(model_path, mp, &c->model, err, sizeof err);
    if (rc) {
        fprintf(stderr, "sdnpu chat: cannot load model: %s: %s\n", sdnpu_status_str(rc), err);
        cli_model_hint("sdnpu chat", o->g.m.model, model_path);
        chat_free(c);
        return 1;
    }
    cli_weight_cache(&o->g.sp, model_path);
    if ((rc = sdnpu_session_create(c->model, o->g.sp, &c->s))) {
        fprintf(stderr, "sdnpu chat: cannot make a session: %s: %s\n", sdnpu_status_str(rc),
                sdnpu_model_last_error(c->model));
        chat_free(c);
        return 1;
    }
    c->ctx_auto = o->g.sp.n_ctx <= 0;
    c->n_ctx = c->n_ctx0 = sdnpu_session_n_ctx(c->s);
    c->templ = sdnpu_model_has_chat_template(c->model);
    cli_chat_set_str(&c->system, o->g.system);
    cli_chat_set_str(&c->spec, o->g.spec);
    if (history) {
        if ((rc = sdnpu_session_set_history(c->s, history)) != SDNPU_OK) {
            fprintf(stderr, "sdnpu chat: cannot use history '%s': %s: %s\n", history, sdnpu_status_str(rc),
                    sdnpu_session_last_error(c->s));
            chat_free(c);
            return 1;
        }
        cli_chat_set_str(&c->history, history);
    }
    c->prompt_cache = o->prompt_cache;
    if (c->prompt_cache) cli_chat_load_prompt_cache(c);
    if (o->context) {
        size_t n = 0;
        char *text = cli_read_file(o->context, &n);
        if (!text) {
            chat_free(c);
            return 1;
        }
        str_add(&c->pending, text, n);
        free(text);
    }
    return 0;
}

/* Messages and commands until the end of input or /quit. 1 where a turn
 * failed and no one was at a terminal to see it, else 0. */
static int chat_loop(struct chat *c) {
    cli_chat_install_sigint(false);
    struct str msg = {0};
    char *line = NULL;
    size_t line_cap = 0;
    int code = 0;
    for (;;) {
        int r = read_message(c, &msg, &line, &line_cap);
        if (r == IN_EOF) break;
        if (r == IN_INTR) {
            if (c->tty) fprintf(stderr, "\n(/quit or Ctrl-D to leave)\n");
            continue;
        }
        char *m = msg.p ? msg.p : (char *)"";
        if (m[0] == '/' && m[1] != '/') {
            if (command(c, m)) break;
            continue;
        }
        if (m[0] == '/') m++; /* "//..." sends a literal "/..." */
        size_t ml = strlen(m);
        while (ml && is_space(m[ml - 1]))
            ml--;
        if (ml == 0) continue;
        m[ml] = '\0';
        if (cli_chat_turn(c, m) && !c->tty) code = 1;
    }
    if (c->tty) fputc('\n', stdout);
    signal(SIGINT, SIG_DFL);
    free(line);
    str_free(&msg);
    return code;
}

int cli_chat(int argc, char **argv) {
    struct chat_opts o = {.g = cli_gen_default_opts()};
    /* The server's default (server/server.c): a conversation over a
     * document copies from it, sampled replies too, and cost-aware
     * drafting keeps a reply with nothing to copy at plain speed. */
    o.g.spec = "sam-tree";
    if (cli_parse_spec("--spec", o.g.spec, &o.g.gp.spec)) return 1;
    o.g.sp.n_ctx = 0; /* 4,096, grown to fit where -c does not say (grow_context) */
    const struct cli_parser parser = {
        "sdnpu chat", chat_usage, {CLI_GEN_GROUPS(&o.g), {k_chat_flags, &o}}, .style = CLI_SEE_HELP};
    int parsed = cli_parse_flags(&parser, argc, argv);
    if (parsed != CLI_PARSED) return parsed;
    struct chat c;
    memset(&c, 0, sizeof c);
    c.gp = o.g.gp;
    c.tty = isatty(0) != 0;
    /* Line editing where someone types at a terminal and sees what is
     * typed; a pipe, or output going to a file, gets the plain reads. */
    if (c.tty && isatty(1)) c.editor = cli_chat_editor_open(&cli_chat_interrupted);
    if (chat_open(&c, &o)) return 1;
    if (c.tty)
        fprintf(stderr, "sdnpu chat: %s (%s). /help for commands; Ctrl-C stops a reply, Ctrl-D leaves.\n",
                sdnpu_model_arch(c.model),
                c.templ ? "chat template" : "base model: plain User/Assistant script");
    const int code = chat_loop(&c);
    chat_free(&c);
    return code;
}
