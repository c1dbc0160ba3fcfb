/*
 * examples/autoreply.c - draft the next reply in a message thread, in the
 * user's own style, with a history of the user's earlier replies.
 *
 *     example_autoreply [-m MODEL] [-n N] [--me NAME] THREAD HISTORY
 *
 * THREAD is a text file, one message a line:
 *
 *     # lines starting with '#' are comments; blank lines are skipped
 *     Alice: Are we still on for Saturday?
 *     Me: Yes! Bringing the cake.
 *     Alice: Great. What time?
 *       A line starting with a space or tab continues the message above.
 *
 * Each message line is "NAME: TEXT": NAME is 1 to 40 bytes without a
 * colon, then a colon and the text. The user is the sender named by --me
 * (default "Me"); the reply is written as that sender.
 *
 * HISTORY is the user's reply store (created if missing). It is attached to
 * the session with sdnpu_session_set_history: its earlier replies become a
 * drafting store for speculative decoding (people reuse their own phrases,
 * so drafts from it are often accepted), and the engine appends this reply
 * to it when generation ends, so the store grows from run to run.
 *
 * The reply streams to stdout; one statistics line goes to stderr:
 *
 *     stats: prompt_tokens=51 prefill_ms=... generated=9 tok_s=... acceptance=9.00 history_bytes=112
 *
 * The model is MODEL, else $SDNPU_MODEL, else models/default.gguf. A base
 * model continues the thread after "NAME:" and stops at the end of the
 * line; an instruction-tuned model is asked for the reply in a chat turn.
 *
 * Uses only the public header.
 */
#include <errno.h>
#include <sdnpu.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NAME 40

/* A growable string; on running out of memory the program reports and ends. */
struct text {
    char *p;
    size_t n, cap;
};

static int text_add(struct text *t, const char *p, size_t n) {
    if (t->n + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 1024;
        while (cap < t->n + n + 1) cap *= 2;
        char *q = realloc(t->p, cap);
        if (!q) return -1;
        t->p = q;
        t->cap = cap;
    }
    memcpy(t->p + t->n, p, n);
    t->n += n;
    t->p[t->n] = '\0';
    return 0;
}

static int text_adds(struct text *t, const char *s) { return text_add(t, s, strlen(s)); }

/* Stream to stdout, without the space a base model puts after the cue. */
static bool print_piece(const char *piece, size_t len, void *user) {
    bool *started = user;
    while (!*started && len && (*piece == ' ' || *piece == '\n')) piece++, len--;
    *started = *started || len > 0;
    fwrite(piece, 1, len, stdout);
    fflush(stdout);
    return true;
}

/* Parse the thread file into "NAME: TEXT" lines (normalized: one space
 * after the colon, continuation lines joined with a space). The file is
 * untrusted: a malformed line is reported with its number. Returns 0, or 1
 * after printing why. */
static int read_thread(const char *path, struct text *out, int *n_msgs) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "example_autoreply: cannot open '%s': %s\n", path, strerror(errno));
        return 1;
    }
    char line[4096];
    int line_no = 0, rc = 0;
    *n_msgs = 0;
    while (!rc && fgets(line, sizeof line, f)) {
        line_no++;
        size_t n = strlen(line);
        if (n == sizeof line - 1 && line[n - 1] != '\n') {
            fprintf(stderr, "example_autoreply: %s:%d: line longer than %zu bytes\n", path, line_no,
                    sizeof line - 2);
            rc = 1;
            break;
        }
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = '\0';
        if (n == 0 || line[0] == '#') continue;
        if (line[0] == ' ' || line[0] == '\t') {
            if (*n_msgs == 0) {
                fprintf(stderr, "example_autoreply: %s:%d: a continuation line before any message\n", path,
                        line_no);
                rc = 1;
                break;
            }
            const char *p = line;
            while (*p == ' ' || *p == '\t') p++;
            if (*p && (text_adds(out, " ") || text_adds(out, p))) rc = -1;
            continue;
        }
        const char *colon = strchr(line, ':');
        size_t name_len = colon ? (size_t)(colon - line) : 0;
        if (!colon || name_len == 0 || name_len > MAX_NAME) {
            fprintf(stderr, "example_autoreply: %s:%d: expected 'NAME: message' (NAME of 1 to %d bytes)\n",
                    path, line_no, MAX_NAME);
            rc = 1;
            break;
        }
        const char *msg = colon + 1;
        while (*msg == ' ' || *msg == '\t') msg++;
        if ((*n_msgs && text_adds(out, "\n")) || text_add(out, line, name_len) || text_adds(out, ": ") ||
            text_adds(out, msg))
            rc = -1;
        ++*n_msgs;
    }
    if (!rc && ferror(f)) {
        fprintf(stderr, "example_autoreply: reading '%s' failed\n", path);
        rc = 1;
    }
    fclose(f);
    if (rc < 0) fprintf(stderr, "example_autoreply: out of memory reading '%s'\n", path);
    if (!rc && *n_msgs == 0) {
        fprintf(stderr, "example_autoreply: '%s' holds no messages\n", path);
        rc = 1;
    }
    return rc ? 1 : 0;
}

static long file_size(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    fclose(f);
    return n;
}

static void usage(FILE *f) {
    fprintf(f, "usage: example_autoreply [-m MODEL] [-n N] [--me NAME] THREAD HISTORY\n"
               "  -m MODEL   GGUF model (default: $SDNPU_MODEL or models/default.gguf)\n"
               "  -n N       most tokens of reply (default 64)\n"
               "  --me NAME  the sender the reply is written as (default Me)\n"
               "THREAD: 'NAME: message' lines; HISTORY: the reply store (grows with each run)\n");
}

int main(int argc, char **argv) {
    const char *model_path = getenv("SDNPU_MODEL");
    const char *thread_path = NULL, *history_path = NULL, *me = "Me";
    int32_t n_predict = 64;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "-m") && i + 1 < argc) {
            model_path = argv[++i];
        } else if (!strcmp(argv[i], "--me") && i + 1 < argc) {
            me = argv[++i];
        } else if (!strcmp(argv[i], "-n") && i + 1 < argc) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 1 || v > 1 << 20) {
                fprintf(stderr, "example_autoreply: -n expects a positive integer, got '%s'\n", argv[i]);
                return 2;
            }
            n_predict = (int32_t)v;
        } else if (argv[i][0] != '-' && !thread_path) {
            thread_path = argv[i];
        } else if (argv[i][0] != '-' && !history_path) {
            history_path = argv[i];
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (!thread_path || !history_path) {
        usage(stderr);
        return 2;
    }
    if (!*me || strlen(me) > MAX_NAME || strchr(me, ':') || strchr(me, '\n')) {
        fprintf(stderr, "example_autoreply: --me needs a name of 1 to %d bytes without ':' or newline\n",
                MAX_NAME);
        return 2;
    }
    if (!model_path || !*model_path) model_path = "models/default.gguf";

    struct text thread = {0}, prompt = {0};
    struct sdnpu_model *model = NULL;
    struct sdnpu_session *session = NULL;
    int code = 1, n_msgs = 0;
    if (read_thread(thread_path, &thread, &n_msgs)) goto done;

    char err[512];
    enum sdnpu_status rc =
        sdnpu_model_load(model_path, sdnpu_model_default_params(), &model, err, sizeof err);
    if (rc != SDNPU_OK) {
        fprintf(stderr, "example_autoreply: cannot load model: %s: %s\n", sdnpu_status_str(rc), err);
        goto done;
    }
    if ((rc = sdnpu_session_create(model, sdnpu_session_default_params(), &session)) != SDNPU_OK) {
        fprintf(stderr, "example_autoreply: cannot make a session: %s: %s\n", sdnpu_status_str(rc),
                sdnpu_model_last_error(model));
        goto done;
    }
    /* The user's earlier replies: a drafting store, and where this reply goes. */
    if ((rc = sdnpu_session_set_history(session, history_path)) != SDNPU_OK) {
        fprintf(stderr, "example_autoreply: cannot use history '%s': %s: %s\n", history_path,
                sdnpu_status_str(rc), sdnpu_session_last_error(session));
        goto done;
    }

    /* An instruction-tuned model is asked; a base model continues the
     * thread as the user. */
    bool instruct = sdnpu_model_has_chat_template(model);
    int bad = 0;
    if (instruct) {
        bad |= text_adds(&prompt, "Here is a message thread:\n\n");
        bad |= text_add(&prompt, thread.p, thread.n);
        bad |= text_adds(&prompt, "\n\nWrite the next message from ");
        bad |= text_adds(&prompt, me);
        bad |= text_adds(&prompt,
                         ", in the same style as their earlier messages. Answer with the message only.");
    } else {
        bad |= text_adds(&prompt, "A message thread.\n\n");
        bad |= text_add(&prompt, thread.p, thread.n);
        bad |= text_adds(&prompt, "\n");
        bad |= text_adds(&prompt, me);
        bad |= text_adds(&prompt, ":");
    }
    if (bad) {
        fprintf(stderr, "example_autoreply: out of memory\n");
        goto done;
    }

    struct sdnpu_generate_params gp = sdnpu_generate_default_params();
    static const char *const stops[] = {"\n"};
    gp.n_predict = n_predict;
    gp.sampling.temperature = 0.0f; /* greedy: drafts never change the reply */
    gp.chat = instruct;
    gp.stop = instruct ? NULL : stops; /* a message is one line */
    gp.n_stop = instruct ? 0 : 1;
    gp.spec.drafter = SDNPU_DRAFTER_SAM; /* drafts from the thread and the history */
    gp.draft_max = 8;
    gp.stop_on_repeat = true;          /* a reply that repeats itself is over */
    bool started = false;
    gp.on_text = print_piece;
    gp.user = &started;

    struct sdnpu_stats st;
    rc = sdnpu_session_generate(session, prompt.p, prompt.n, &gp, &st);
    printf("\n");
    fflush(stdout);
    if (rc < 0) {
        fprintf(stderr, "example_autoreply: %s: %s\n", sdnpu_status_str(rc),
                sdnpu_session_last_error(session));
        goto done;
    }
    /* Detach so the history file is closed before its size is read. */
    sdnpu_session_set_history(session, NULL);
    fprintf(
        stderr,
        "stats: prompt_tokens=%d prefill_ms=%.1f generated=%d tok_s=%.1f acceptance=%.2f history_bytes=%ld\n",
        st.n_prompt_tokens, st.prefill_ms, st.n_generated, st.gen_tokens_per_s, st.acceptance,
        file_size(history_path));
    code = 0;
done:
    free(thread.p);
    free(prompt.p);
    sdnpu_session_free(session);
    sdnpu_model_free(model);
    return code;
}
