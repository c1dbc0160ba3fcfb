/*
 * examples/summarize.c - summarize a text file with sdnpu, streaming.
 *
 *     example_summarize [-m MODEL] [-n N] [FILE | -]
 *
 * Reads FILE (stdin when it is "-" or missing), streams a short summary to
 * stdout and prints one statistics line to stderr:
 *
 *     stats: prompt_tokens=339 prefill_ms=... generated=60 tok_s=... acceptance=3.16
 *
 * The model is MODEL, else $SDNPU_MODEL, else models/default.gguf. An
 * instruction-tuned model (one with a chat template) is asked for a summary
 * in a chat turn; a base model such as the default Gemma 3 270M continues
 * "TL;DR:" after the document and stops at the first blank line.
 *
 * The session's context fits the document (4,096 tokens at least, at most
 * the model's own).
 *
 * Decoding is greedy with suffix-automaton drafts taken from the document
 * itself ("sam"): summaries copy phrases from their source, so drafts are
 * often accepted, and the output is the same as plain greedy decoding.
 *
 * Uses only the public header.
 */
#include <errno.h>
#include <sdnpu.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Stream to stdout, without the space a base model puts after the cue. */
static bool print_piece(const char *piece, size_t len, void *user) {
    bool *started = user;
    while (!*started && len && (*piece == ' ' || *piece == '\n')) piece++, len--;
    *started = *started || len > 0;
    fwrite(piece, 1, len, stdout);
    fflush(stdout);
    return true;
}

/* Read all of f; NUL-terminated, caller frees. NULL when out of memory. */
static char *read_all(FILE *f, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n - 1, f);
        if (n + 1 < cap) break;
        char *nb = realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            return NULL;
        }
        buf = nb;
        cap *= 2;
    }
    if (buf) {
        buf[n] = '\0';
        *len = n;
    }
    return buf;
}

static void usage(FILE *f) {
    fprintf(f, "usage: example_summarize [-m MODEL] [-n N] [FILE | -]\n"
               "  -m MODEL  GGUF model (default: $SDNPU_MODEL or models/default.gguf)\n"
               "  -n N      most tokens of summary (default 128)\n");
}

int main(int argc, char **argv) {
    const char *model_path = getenv("SDNPU_MODEL");
    const char *path = NULL;
    int32_t n_predict = 128;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "-m") && i + 1 < argc) {
            model_path = argv[++i];
        } else if (!strcmp(argv[i], "-n") && i + 1 < argc) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 1 || v > 1 << 20) {
                fprintf(stderr, "example_summarize: -n expects a positive integer, got '%s'\n", argv[i]);
                return 2;
            }
            n_predict = (int32_t)v;
        } else if ((argv[i][0] != '-' || !strcmp(argv[i], "-")) && !path) {
            path = argv[i];
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (!model_path || !*model_path) model_path = "models/default.gguf";

    /* 1. The document. */
    FILE *f = (!path || !strcmp(path, "-")) ? stdin : fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "example_summarize: cannot open '%s': %s\n", path, strerror(errno));
        return 1;
    }
    size_t doc_len = 0;
    char *doc = read_all(f, &doc_len);
    if (f != stdin) fclose(f);
    if (!doc) {
        fprintf(stderr, "example_summarize: out of memory reading the document\n");
        return 1;
    }

    /* 2. The model and a session. */
    struct sdnpu_model *model = NULL;
    struct sdnpu_session *session = NULL;
    char err[512];
    int code = 1;
    enum sdnpu_status rc =
        sdnpu_model_load(model_path, sdnpu_model_default_params(), &model, err, sizeof err);
    if (rc != SDNPU_OK) {
        fprintf(stderr, "example_summarize: cannot load model: %s: %s\n", sdnpu_status_str(rc), err);
        goto done;
    }
    /* The context: the default 4,096 tokens, or what the document, the
     * turn around it and the summary need where that is more (the session
     * caps it at the model's own; a document longer than that is refused
     * by the request below, SDNPU_ERR_CONTEXT_FULL, with the sizes). */
    struct sdnpu_session_params sp = sdnpu_session_default_params();
    size_t n_doc = 0;
    sdnpu_tokenize(model, doc, doc_len, SDNPU_TOKENIZE_REPLACE_INVALID, NULL, 0, &n_doc);
    const size_t need = n_doc + 256 + (size_t)n_predict;
    if (need > 4096) sp.n_ctx = need < ((size_t)1 << 24) ? (int32_t)need : 1 << 24;
    if ((rc = sdnpu_session_create(model, sp, &session)) != SDNPU_OK) {
        fprintf(stderr, "example_summarize: cannot make a session: %s: %s\n", sdnpu_status_str(rc),
                sdnpu_model_last_error(model));
        goto done;
    }

    /* 3. The request: the document, and an instruction that is a chat
     * request for an instruction-tuned model and a "TL;DR:" cue for a base
     * model (which stops at the first blank line). */
    bool instruct = sdnpu_model_has_chat_template(model);
    const char *docs[] = {doc};
    static const char *const stops[] = {"\n\n"};
    struct sdnpu_request req = sdnpu_request_default_params(); /* greedy, "sam" drafts, stop on repeats */
    req.documents = docs;
    req.n_documents = 1;
    req.instruction =
        instruct ? "Summarize the document above in two or three short sentences of your own." : "TL;DR:";
    req.gen.n_predict = n_predict;
    req.gen.stop = instruct ? NULL : stops;
    req.gen.n_stop = instruct ? 0 : 1;
    req.gen.system = ""; /* no system turn, as `sdnpu summarize` asks: shorter summaries on the 0.5B */
    bool started = false;
    req.gen.on_text = print_piece;
    req.gen.user = &started;

    /* 4. Generate, streaming. */
    struct sdnpu_stats st;
    rc = sdnpu_session_request(session, &req, &st);
    printf("\n");
    fflush(stdout);
    if (rc < 0) {
        fprintf(stderr, "example_summarize: %s: %s\n", sdnpu_status_str(rc),
                sdnpu_session_last_error(session));
        goto done;
    }
    fprintf(stderr, "stats: prompt_tokens=%d prefill_ms=%.1f generated=%d tok_s=%.1f acceptance=%.2f\n",
            st.n_prompt_tokens, st.prefill_ms, st.n_generated, st.gen_tokens_per_s, st.acceptance);
    code = 0;
done:
    free(doc);
    sdnpu_session_free(session);
    sdnpu_model_free(model);
    return code;
}
