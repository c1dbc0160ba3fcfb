/*
 * cli/chat.c - `sdnpu chat`: a conversation over one session.
 *
 * Each message is one turn. The whole conversation is rendered as text (the
 * model's chat format when the file has a chat template, else a plain
 * "User: ...\nAssistant:" script that a base model continues); the session
 * already holds a prefix of that text, so only the new part is evaluated.
 * When what the session holds is no longer a prefix (an error, a loaded
 * transcript), the session is reset and the conversation is replayed.
 * /save keeps the session itself beside the transcript, with the text it
 * holds, so that /load restores both and the prefix holds again.
 *
 * Stop strings are matched here rather than by the engine: the engine keeps
 * every generated token in the context, including those that make up a stop
 * string, but drops their text from the stream. Seeing every piece keeps
 * `held` (the text the session holds) exact.
 *
 * The loop that reads messages and commands is cli/chat_main.c's; the
 * conversation itself, its rendering and its transcript files are
 * cli/chat_transcript.c's, the terminal's line editor cli/chat_edit.c's
 * (cli/chat.h has what the four share).
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
#include "chat.h"
#include "cli.h"
#include "sdnpu.h"

/* ------------------------------------------------------------- signals */

/* Ctrl-C stops the reply being generated, not the program. The handler
 * sets a flag the streaming callback reads and also calls
 * sdnpu_session_cancel, which only stores to a lock-free atomic int and so
 * is async-signal-safe; the session pointer is itself a lock-free atomic. */
volatile sig_atomic_t cli_chat_interrupted;
static struct sdnpu_session *_Atomic g_target;

static void on_sigint(int sig) {
    (void)sig;
    cli_chat_interrupted = 1;
    struct sdnpu_session *s = atomic_load(&g_target);
    if (s) sdnpu_session_cancel(s);
}

/* While reading input, SIGINT interrupts the read (no SA_RESTART) so the
 * half-typed message can be dropped; while generating, writes restart. */
void cli_chat_install_sigint(bool restart) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = restart ? SA_RESTART : 0;
    sigaction(SIGINT, &sa, NULL);
}

/* Around a call that runs the model: Ctrl-C cancels it (SA_RESTART keeps
 * the output's writes going), and after it Ctrl-C interrupts reads again. */
static void ctrl_c_cancels(struct sdnpu_session *s) {
    cli_chat_interrupted = 0;
    cli_chat_install_sigint(true);
    atomic_store(&g_target, s);
}

static void ctrl_c_interrupts_reads(void) {
    atomic_store(&g_target, NULL);
    cli_chat_install_sigint(false);
}

/* The plain format stops where the model starts writing the user's turn. */
static const char *const plain_stops[] = {"\nUser:"};

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void cli_chat_set_str(char **dst, const char *src) {
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

/* How the chat's text is tokenized: special-token text parsed where the
 * model has a chat template (generate parses it only in the turn it wraps
 * itself), and the model's BOS where the text starts a context: an empty
 * session, or one holding a prompt cache the turn starts a new context on. */
static uint32_t tokenize_flags(const struct chat *c) {
    const bool fresh = c->cache_fresh || sdnpu_session_n_past(c->s) == 0;
    return (c->templ ? SDNPU_TOKENIZE_PARSE_SPECIAL : 0) | (fresh ? SDNPU_TOKENIZE_ADD_SPECIAL : 0);
}

/* Tokenize text (tokenize_flags) into *out (free() it) and *n_tokens.
 * Prints why on failure. */
static int tokenize_text(struct chat *c, const char *text, size_t len, sdnpu_token **out, size_t *n_tokens) {
    const uint32_t flags = tokenize_flags(c);
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
    if (rc != SDNPU_OK) {
        fprintf(stderr, "sdnpu chat: cannot tokenize: %s: %s\n", sdnpu_status_str(rc),
                sdnpu_model_last_error(c->model));
        free(toks);
        return rc;
    }
    *out = toks;
    *n_tokens = n;
    return SDNPU_OK;
}

/* tokenize_text, then run the tokens through the session. */
static int eval_text(struct chat *c, const char *text, size_t len, size_t *n_tokens) {
    sdnpu_token *toks = NULL;
    int rc = tokenize_text(c, text, len, &toks, n_tokens);
    if (rc != SDNPU_OK) return rc;
    if ((rc = sdnpu_session_eval(c->s, toks, *n_tokens, NULL, 0)) != SDNPU_OK && rc != SDNPU_ABORTED)
        fprintf(stderr, "sdnpu chat: %s: %s\n", sdnpu_status_str(rc), sdnpu_session_last_error(c->s));
    free(toks);
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
    struct timespec t0; /* when the turn was asked (the prefill's rate) */
};

/* A long prompt's prefill on the terminal (cli_show_prefill). */
static bool show_prefill(int32_t done, int32_t total, void *user) {
    return cli_show_prefill(done, total, &((struct reply *)user)->t0);
}

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
    return !cli_chat_interrupted;
}

/* ---------------------------------------------------------------- turns */

enum { TURN_OK, TURN_FAILED, TURN_FULL };

/* Drop the last turn from the conversation, its documents given back for
 * the next message. */
static void turn_undo(struct chat *c) {
    struct turn *t = &c->turns[c->n_turns - 1];
    if (t->context && !c->pending.n) str_adds(&c->pending, t->context);
    cli_chat_turn_free(t);
    c->n_turns--;
}

/* Room a reply is given when the context grows: n_predict, else 1,024. */
static int32_t reply_room(const struct chat *c) { return c->gp.n_predict > 0 ? c->gp.n_predict : 1024; }

/* Tokens of text as the turn gives it to the session (tokenize_text's
 * flags); 0 where it cannot be tokenized (the turn says why). */
static size_t count_tokens(struct chat *c, const char *text, size_t len) {
    size_t n = 0;
    sdnpu_tokenize(c->model, text, len, tokenize_flags(c), NULL, 0, &n);
    return n;
}

/* --prompt-cache after the first turn: what the file gave the turn, and
 * the session (the document and the first exchange) saved for the next
 * chat that starts the same way. A file that cannot be written costs only
 * the reuse. */
static void save_prompt_cache(struct chat *c, const struct sdnpu_stats *st) {
    const bool loaded = c->cache_fresh;
    c->cache_fresh = false;
    c->cache_saved = true;
    const int rc = sdnpu_session_save(c->s, c->prompt_cache);
    fprintf(stderr, "prompt cache: %d of %d prompt tokens reused (%s)", st->n_prompt_reused,
            st->n_prompt_tokens, loaded ? "the file loaded" : "no usable file");
    if (rc)
        fprintf(stderr, "; not saved: %s: %s\n", sdnpu_status_str(rc), sdnpu_session_last_error(c->s));
    else
        fprintf(stderr, "; saved %d tokens to %s\n", sdnpu_session_n_past(c->s), c->prompt_cache);
}

/* Make what the session holds a prefix of the conversation want renders:
 * a session that holds a loaded prompt cache takes the whole conversation
 * as a new context, which keeps the prefix it shares with the cache
 * (generate's new_context) and evaluates the rest; one whose text went
 * out of step starts over. */
static void sync_held(struct chat *c, const struct str *want) {
    const bool in_step = !c->dirty && c->held.n <= want->n && !memcmp(str_c(&c->held), want->p, c->held.n);
    if (in_step && !c->cache_fresh) return;
    if (!c->cache_fresh) sdnpu_session_reset(c->s);
    str_clear(&c->held);
    c->dirty = false;
}

/* Generate after the suffix of the conversation the session does not
 * hold. With a chat template the suffix holds its special tokens: it is
 * tokenized here with them parsed and given as tokens, whose prefill then
 * reports its chunks and stops on Ctrl-C; *n_suffix is their count (0
 * where not tokenized here) and *reported whether a failure was said. */
static int generate_suffix(struct chat *c, const char *suffix, size_t len, struct sdnpu_generate_params *gp,
                           struct sdnpu_stats *st, size_t *n_suffix, bool *reported) {
    *n_suffix = 0;
    *reported = false;
    if (!c->templ) return sdnpu_session_generate(c->s, suffix, len, gp, st);
    sdnpu_token *toks = NULL;
    size_t n = 0;
    int rc = tokenize_text(c, suffix, len, &toks, &n);
    *reported = rc != SDNPU_OK; /* tokenize_text prints its own failures */
    if (rc == SDNPU_OK) {
        *n_suffix = n;
        gp->prompt_tokens = toks;
        gp->n_prompt_tokens = n;
        rc = sdnpu_session_generate(c->s, NULL, 0, gp, st);
    }
    free(toks);
    return rc;
}

/* A turn that failed with rc (< 0): said where it was not yet, and the
 * session marked out of step where it may be. */
static void turn_failure(struct chat *c, int rc, bool reported) {
    if (!reported)
        fprintf(stderr, "sdnpu chat: %s: %s\n", sdnpu_status_str(rc), sdnpu_session_last_error(c->s));
    if (rc == SDNPU_ERR_CONTEXT_FULL)
        fprintf(stderr,
                "sdnpu chat: the conversation does not fit the context (%d tokens); /reset to start "
                "over, or use a larger -c\n",
                c->n_ctx);
    /* A prompt that did not fit was not evaluated; any other failure may
     * leave the session out of step with the conversation. */
    if (rc != SDNPU_ERR_CONTEXT_FULL) c->dirty = true, c->cache_fresh = false;
}

/* A reply streamed (rc SDNPU_OK, or SDNPU_ABORTED by a stop string or
 * Ctrl-C): kept in the turn and counted. Every generated token is in the
 * context: what the session holds is the prompt and all of the text. */
static void turn_done(struct chat *c, struct turn *t, const struct reply *r, struct sdnpu_stats *st, int rc) {
    if (r->stopped) st->stop_reason = SDNPU_STOP_STRING; /* our stop string, not the callback */
    str_add(&c->held, str_c(&r->all), r->all.n);
    t->assistant = utf8_clean(str_c(&r->all), r->stopped ? r->stop_at : r->all.n);
    if (rc == SDNPU_ABORTED && !r->stopped) fprintf(stderr, "[stopped]\n");
    if (c->prompt_cache && !c->cache_saved) save_prompt_cache(c, st);
    c->last = *st;
    c->have_last = true;
    snprintf(c->last_spec, sizeof c->last_spec, "%s", c->spec ? c->spec : "none");
    c->tot.n_requests++;
    c->tot.n_generated += st->n_generated;
    c->tot.n_verify_steps += st->n_verify_steps;
    c->tot.n_accepted += st->n_accepted;
    c->tot.decode_ms += st->decode_ms;
}

/* Answer msg: render the conversation with it, evaluate what the session
 * does not hold yet, stream the reply. Returns TURN_OK, TURN_FAILED (the
 * message is dropped from the conversation), or, where the context grows
 * (c->ctx_auto) and the turn does not fit, TURN_FULL with nothing said
 * and *need the tokens the conversation and a reply would take. */
static int turn_once(struct chat *c, const char *msg, int64_t *need) {
    struct turn *t = cli_chat_turn_push(c);
    t->user = dup_n(msg, strlen(msg));
    if (c->pending.n) {
        t->context = c->pending.p;
        c->pending = (struct str){0};
    }
    struct str want = {0};
    struct reply r = {.stops = c->templ ? NULL : plain_stops, .n_stops = c->templ ? 0 : 1};
    int ret = TURN_FAILED;
    if (cli_chat_render(c, true, &want)) goto out;
    sync_held(c, &want);
    const char *suffix = want.p + c->held.n;
    const size_t suffix_len = want.n - c->held.n;
    struct sdnpu_generate_params gp = c->gp;
    gp.on_text = on_piece;
    gp.user = &r;
    gp.new_context = c->cache_fresh;
    /* A document takes a while to read: its progress where someone watches. */
    if (c->tty && isatty(STDERR_FILENO)) gp.on_prefill = show_prefill;
    clock_gettime(CLOCK_MONOTONIC, &r.t0);
    struct sdnpu_stats st;
    memset(&st, 0, sizeof st);
    ctrl_c_cancels(c->s);
    bool reported;
    size_t n_suffix;
    const int rc = generate_suffix(c, suffix, suffix_len, &gp, &st, &n_suffix, &reported);
    if (rc >= 0 && st.stop_reason != SDNPU_STOP_PREFILL) str_add(&c->held, suffix, suffix_len);
    ctrl_c_interrupts_reads();
    if (rc == SDNPU_ABORTED && st.stop_reason == SDNPU_STOP_PREFILL) {
        /* Ctrl-C during the message's prefill: the session holds the
         * conversation as before it, and the message is dropped. */
        fprintf(stderr, "[stopped before the reply; the message is dropped]\n");
        goto out;
    }
    if (rc == SDNPU_OK && r.all.n > r.shown) show(&r, r.all.n);
    if (r.started || rc >= 0) printf("\n");
    fflush(stdout);
    if (rc == SDNPU_ERR_CONTEXT_FULL && c->ctx_auto) {
        const int64_t held = c->cache_fresh ? 0 : sdnpu_session_n_past(c->s); /* a new context holds none */
        /* A document of thousands of tokens is not tokenized twice. */
        const size_t n = n_suffix ? n_suffix : count_tokens(c, suffix, suffix_len);
        *need = held + (int64_t)n + reply_room(c);
        ret = TURN_FULL;
    } else if (rc < 0) {
        turn_failure(c, rc, reported);
    } else {
        turn_done(c, t, &r, &st, rc);
        ret = TURN_OK;
    }
out:
    str_free(&r.all);
    str_free(&want);
    if (ret != TURN_OK) turn_undo(c);
    return ret;
}

/* Where -c was not given, a conversation that outgrows the context moves
 * to a larger one (sdnpu_session_reserve: twice the size, or what it needs
 * in whole 4,096s, at most the model's own; a document attached to a chat
 * is often longer than the default 4,096 tokens). What the session holds
 * moves over as it is. False, after saying why, where the model's context
 * is too small or the larger cache cannot be had. */
static bool grow_context(struct chat *c, int64_t need, const char *what) {
    const int32_t was = c->n_ctx, held = sdnpu_session_n_past(c->s);
    int rc = sdnpu_session_reserve(c->s, need, 0);
    if (rc == SDNPU_ERR_CONTEXT_FULL) {
        fprintf(stderr, "sdnpu chat: %s; the model's context holds %d\n", what,
                sdnpu_model_n_ctx_train(c->model));
        return false;
    }
    if (rc) {
        fprintf(stderr, "sdnpu chat: cannot grow the context to %lld tokens: %s: %s\n", (long long)need,
                sdnpu_status_str(rc), sdnpu_session_last_error(c->s));
        return false;
    }
    c->n_ctx = sdnpu_session_n_ctx(c->s);
    if (c->n_ctx == was) return true; /* it held them already */
    fprintf(stderr, "sdnpu chat: %s: the context grows from %d to %d tokens%s (-c sets it)\n", what, was,
            c->n_ctx, held > 0 ? ", what it holds carried over" : "");
    return true;
}

/* grow_context for need tokens of conversation and reply. */
static bool grow_to(struct chat *c, int64_t need) {
    char what[96];
    snprintf(what, sizeof what, "the conversation and a reply need %lld tokens", (long long)need);
    return grow_context(c, need, what);
}

/* A turn (turn_once), in a larger context where it does not fit the one
 * there is and may grow. Returns 0, or 1 when the turn failed. */
int cli_chat_turn(struct chat *c, const char *msg) {
    int64_t need = 0;
    int r = turn_once(c, msg, &need);
    if (r == TURN_FULL && grow_to(c, need)) r = turn_once(c, msg, &need);
    if (r == TURN_FULL)
        fprintf(stderr,
                "sdnpu chat: the conversation does not fit the context (%d tokens); /reset to start over\n",
                c->n_ctx);
    return r != TURN_OK;
}

/* --prompt-cache FILE at the start: the saved context, of which the first
 * turn keeps the prefix it shares. Where it holds more than the context
 * and -c was not given, the context doubles until it fits. A file that
 * cannot be used is said and costs only the reuse; one that is not there
 * yet is written after the first turn. */
void cli_chat_load_prompt_cache(struct chat *c) {
    if (access(c->prompt_cache, F_OK) != 0) return;
    int rc = sdnpu_session_load(c->s, c->prompt_cache);
    while (rc == SDNPU_ERR_CONTEXT_FULL && c->ctx_auto) {
        char what[64];
        snprintf(what, sizeof what, "the prompt cache does not fit %d tokens", c->n_ctx);
        if (!grow_context(c, 2 * (int64_t)c->n_ctx, what)) break;
        rc = sdnpu_session_load(c->s, c->prompt_cache);
    }
    if (rc) {
        fprintf(stderr, "sdnpu chat: warning: not using the prompt cache: %s: %s\n", sdnpu_status_str(rc),
                sdnpu_session_last_error(c->s));
        return;
    }
    c->cache_fresh = true;
    fprintf(stderr, "prompt cache: %d tokens from %s\n", sdnpu_session_n_past(c->s), c->prompt_cache);
}

/* Evaluate the whole conversation now (after /load of a transcript alone),
 * so the next message only adds its own text. */
static void replay(struct chat *c) {
    sdnpu_session_reset(c->s);
    c->cache_fresh = false;
    str_clear(&c->held);
    c->dirty = false;
    struct str text = {0};
    if (cli_chat_render(c, false, &text) == 0 && text.n > 0) {
        size_t n = 0;
        double t0 = now_ms();
        /* A long transcript takes a while: Ctrl-C stops its replay after
         * the chunk that is running, and the next message evaluates it. */
        const int64_t need = (int64_t)count_tokens(c, text.p, text.n) + reply_room(c);
        if (c->ctx_auto && need > c->n_ctx) grow_to(c, need); /* else it fails below, said */
        ctrl_c_cancels(c->s);
        int rc = eval_text(c, text.p, text.n, &n);
        ctrl_c_interrupts_reads();
        if (rc == SDNPU_OK) {
            str_add(&c->held, text.p, text.n);
            fprintf(stderr, "replayed %zu tokens in %.0f ms\n", n, now_ms() - t0);
        } else {
            c->dirty = true;
            if (rc == SDNPU_ABORTED)
                fprintf(stderr, "[replay stopped; the next message evaluates the conversation]\n");
            if (rc == SDNPU_ERR_CONTEXT_FULL)
                fprintf(stderr,
                        "sdnpu chat: the transcript does not fit the context (%d tokens); /reset, or use a "
                        "larger -c\n",
                        c->n_ctx);
        }
    }
    str_free(&text);
}

/* ---------------------------------------------------- saved sessions */

/* /save FILE writes the conversation to FILE as a transcript and the
 * session itself (its tokens and their KV cache, sdnpu_session_save) to
 * FILE.session, with the text that session holds in the transcript's held
 * record. /load FILE takes all three back, and the next message is then
 * evaluated only past that text: the chat continues as the one that saved
 * it would have, without evaluating the conversation again. The transcript
 * alone (a version 1 file, one written by hand, a session that cannot be
 * restored) is replayed instead. */
static char *state_path(const char *path) {
    struct str p = {0};
    str_adds(&p, path);
    str_adds(&p, ".session");
    return p.p;
}

void cli_chat_save(struct chat *c, const char *path) {
    char *state = state_path(path);
    /* After a failed turn the session may not hold the text the chat
     * thinks it does: a session saved then would not continue this
     * conversation, so the transcript goes alone. */
    bool with_state = !c->dirty && c->held.n > 0;
    if (with_state) {
        int rc = sdnpu_session_save(c->s, state);
        if (rc != SDNPU_OK) {
            fprintf(stderr,
                    "sdnpu chat: cannot save the session to '%s': %s: %s (the transcript is saved alone)\n",
                    state, sdnpu_status_str(rc), sdnpu_session_last_error(c->s));
            with_state = false;
        }
    }
    if (cli_chat_transcript_save(c, path, with_state ? str_c(&c->held) : NULL) == 0 && with_state)
        fprintf(stderr, "saved the session (%d tokens) to %s\n", sdnpu_session_n_past(c->s), state);
    free(state);
}

/* Restore the session saved beside the transcript at path, which holds
 * held. Returns true, or false after saying why (the session is as it was). */
static bool restore(struct chat *c, const char *path, const char *held) {
    char *state = state_path(path);
    int rc = sdnpu_session_load(c->s, state);
    /* A session saved from a grown context grows this one alike. */
    if (rc == SDNPU_ERR_CONTEXT_FULL && c->ctx_auto &&
        grow_to(c, (int64_t)count_tokens(c, held, strlen(held)) + reply_room(c)))
        rc = sdnpu_session_load(c->s, state);
    if (rc == SDNPU_OK) {
        str_clear(&c->held);
        str_adds(&c->held, held);
        c->dirty = false;
        c->cache_fresh = false;
        fprintf(stderr, "restored the session (%d tokens) from %s\n", sdnpu_session_n_past(c->s), state);
    } else {
        fprintf(stderr,
                "sdnpu chat: cannot restore the session from '%s': %s: %s; replaying the transcript\n", state,
                sdnpu_status_str(rc), sdnpu_session_last_error(c->s));
    }
    free(state);
    return rc == SDNPU_OK;
}

void cli_chat_load(struct chat *c, const char *path) {
    char *held = NULL;
    if (cli_chat_transcript_load(c, path, &held)) return;
    bool restored = held && restore(c, path, held);
    free(held);
    if (!restored) replay(c);
}

/* --------------------------------------------------------------- stats */

void cli_chat_print_stats(const struct chat *c) {
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
               cli_stop_words(st->stop_reason));
    }
    const struct totals *t = &c->tot;
    printf(
        "session: %d requests, %d tokens generated (%.1f tok/s), acceptance %.2f tokens/call | context %d of "
        "%d tokens | method %s | history %s\n",
        t->n_requests, t->n_generated, t->decode_ms > 0 ? t->n_generated / (t->decode_ms / 1e3) : 0.0,
        t->n_verify_steps > 0 ? (double)(t->n_verify_steps + t->n_accepted) / t->n_verify_steps : 1.0,
        sdnpu_session_n_past(c->s), c->n_ctx, c->spec ? c->spec : "none", c->history ? c->history : "off");
}
