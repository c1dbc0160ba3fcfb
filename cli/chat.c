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
 * The conversation itself, its rendering and its transcript files are
 * cli/chat_transcript.c's, the terminal's line editor cli/chat_edit.c's
 * (cli/chat.h has what the three share).
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

/* Around a call that runs the model: Ctrl-C cancels it (SA_RESTART keeps
 * the output's writes going), and after it Ctrl-C interrupts reads again. */
static void ctrl_c_cancels(struct sdnpu_session *s) {
    g_interrupted = 0;
    install_sigint(true);
    atomic_store(&g_target, s);
}

static void ctrl_c_interrupts_reads(void) {
    atomic_store(&g_target, NULL);
    install_sigint(false);
}

/* The plain format stops where the model starts writing the user's turn. */
static const char *const plain_stops[] = {"\nUser:"};

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
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
    return !g_interrupted;
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
    if (cli_chat_render(c, true, &want)) {
        str_free(&want);
        goto fail_turn;
    }
    if (c->cache_fresh) {
        /* The session holds a loaded prompt cache: the whole conversation
         * goes as a new context, which keeps the prefix it shares with the
         * cache (generate's new_context) and evaluates the rest. */
        str_clear(&c->held);
        c->dirty = false;
    } else if (c->dirty || c->held.n > want.n || memcmp(str_c(&c->held), want.p, c->held.n) != 0) {
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
    gp.new_context = c->cache_fresh;
    /* A document takes a while to read: its progress where someone watches. */
    if (c->tty && isatty(STDERR_FILENO)) gp.on_prefill = show_prefill;
    clock_gettime(CLOCK_MONOTONIC, &r.t0);
    struct sdnpu_stats st;
    memset(&st, 0, sizeof st);
    ctrl_c_cancels(c->s);
    int rc;
    bool reported = false; /* tokenize_text prints its own failures */
    if (c->templ) {
        /* The rendered turn holds the template's special tokens: tokenized
         * here with them parsed, and given to generate as tokens, whose
         * prefill then reports its chunks and stops on Ctrl-C. */
        sdnpu_token *toks = NULL;
        size_t n = 0;
        rc = tokenize_text(c, suffix, suffix_len, &toks, &n);
        reported = rc != SDNPU_OK;
        if (rc == SDNPU_OK) {
            gp.prompt_tokens = toks;
            gp.n_prompt_tokens = n;
            rc = sdnpu_session_generate(c->s, NULL, 0, &gp, &st);
        }
        free(toks);
    } else {
        rc = sdnpu_session_generate(c->s, suffix, suffix_len, &gp, &st);
    }
    if (rc >= 0 && st.stop_reason != SDNPU_STOP_PREFILL) str_add(&c->held, suffix, suffix_len);
    ctrl_c_interrupts_reads();
    if (rc == SDNPU_ABORTED && st.stop_reason == SDNPU_STOP_PREFILL) {
        /* Ctrl-C during the message's prefill: the session holds the
         * conversation as before it, and the message is dropped. */
        fprintf(stderr, "[stopped before the reply; the message is dropped]\n");
        str_free(&r.all);
        str_free(&want);
        goto fail_turn;
    }

    if (rc == SDNPU_OK && r.all.n > r.shown) show(&r, r.all.n);
    if (r.started || rc >= 0) printf("\n");
    fflush(stdout);
    if (rc == SDNPU_ERR_CONTEXT_FULL && c->ctx_auto) {
        const int64_t held = c->cache_fresh ? 0 : sdnpu_session_n_past(c->s); /* a new context holds none */
        *need = held + (int64_t)count_tokens(c, suffix, suffix_len) + reply_room(c);
        str_free(&r.all);
        str_free(&want);
        turn_undo(c);
        return TURN_FULL;
    }
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
        if (rc != SDNPU_ERR_CONTEXT_FULL) c->dirty = true, c->cache_fresh = false;
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
    if (c->prompt_cache && !c->cache_saved) save_prompt_cache(c, &st);
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
    return TURN_OK;
fail_turn:
    turn_undo(c);
    return TURN_FAILED;
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
static int chat_turn(struct chat *c, const char *msg) {
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
static void load_prompt_cache(struct chat *c) {
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

static void chat_save(struct chat *c, const char *path) {
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

static void chat_load(struct chat *c, const char *path) {
    char *held = NULL;
    if (cli_chat_transcript_load(c, path, &held)) return;
    bool restored = held && restore(c, path, held);
    free(held);
    if (!restored) replay(c);
}

/* --------------------------------------------------------------- stats */

static void print_stats(const struct chat *c) {
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
               "  /save FILE         write the conversation to FILE (a transcript) and the session to\n"
               "                     FILE.session\n"
               "  /load FILE         read them back and go on from where /save was; a transcript without\n"
               "                     its session is evaluated again\n"
               "  /quit              leave (so does Ctrl-D); Ctrl-C stops a reply\n\n"
               "At a terminal the line is edited as in a shell (arrows, Ctrl-A/E/K/W, Ctrl-R searches\n"
               "back), Up recalls earlier lines, kept in $XDG_STATE_HOME/sdnpu/chat_history\n"
               "(~/.local/state/sdnpu/chat_history; SDNPU_CHAT_HISTORY=FILE, or empty for none).\n");
}

enum { IN_EOF = -1, IN_INTR = -2 };

/* Read one message (a line, a \-continued run of lines, or a """ block)
 * into out. Returns 0, IN_EOF, or IN_INTR when Ctrl-C dropped the input. */
static int read_message(const struct chat *c, struct str *out, char **line, size_t *line_cap) {
    str_clear(out);
    g_interrupted = 0; /* a Ctrl-C that stopped the last reply is spent */
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
        cli_chat_transcript_clear(c);
        str_clear(&c->pending);
        sdnpu_session_reset(c->s);
        c->cache_fresh = false;
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
            chat_save(c, arg);
    } else if (!strcmp(cmd, "load")) {
        if (!*arg)
            fprintf(stderr, "usage: /load FILE\n");
        else
            chat_load(c, arg);
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
        "  -n, --n-predict N      most tokens per reply (default 256; -1 = until the context is full)\n"
        CLI_HELP_SAMPLING CLI_HELP_SESSION
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
    const char *context, *prompt_cache;
};

static const struct cli_flag k_chat_flags[] = {
    {"--context", NULL, CLI_STR, CLI_AT(struct chat_opts, context)},
    {"--prompt-cache", NULL, CLI_STR, CLI_AT(struct chat_opts, prompt_cache)},
    {"--seed", NULL, CLI_FN, CLI_AT(struct chat_opts, g.gp.sampling.seed), .fn = parse_seed},
    {0},
};

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
    const char *model_path = o.g.m.model, *history = o.g.history, *context = o.context;

    sdnpu_log_set(chat_log, NULL);
    struct chat c;
    memset(&c, 0, sizeof c);
    c.gp = o.g.gp;
    c.tty = isatty(0) != 0;
    /* Line editing where someone types at a terminal and sees what is
     * typed; a pipe, or output going to a file, gets the plain reads. */
    if (c.tty && isatty(1)) c.editor = cli_chat_editor_open(&g_interrupted);
    model_path = cli_model(model_path);
    struct sdnpu_model_params mp = sdnpu_model_default_params();
    mp.n_threads = o.g.m.n_threads;
    mp.head = o.g.m.head;
    char err[512];
    int rc = sdnpu_model_load(model_path, mp, &c.model, err, sizeof err);
    if (rc) {
        fprintf(stderr, "sdnpu chat: cannot load model: %s: %s\n", sdnpu_status_str(rc), err);
        cli_model_hint("sdnpu chat", o.g.m.model, model_path);
        cli_chat_editor_close(c.editor);
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
    c.ctx_auto = o.g.sp.n_ctx <= 0;
    c.n_ctx = sdnpu_session_n_ctx(c.s);
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
    c.prompt_cache = o.prompt_cache;
    if (c.prompt_cache) load_prompt_cache(&c);
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
