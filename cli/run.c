/* cli/run.c - `sdnpu run` and `sdnpu summarize`: load, prompt, stream. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "cli.h"
#include "sdnpu.h"

static struct sdnpu_session *g_session; /* for the SIGINT handler */
static volatile sig_atomic_t g_interrupted;

/* Ctrl-C stops the request (at the next token, or after the prefill chunk
 * that is running); what was generated and the stats are still printed,
 * and the exit status is then 130, as for a program SIGINT ended, so that
 * a script knows the output was cut short. */
static void on_sigint(int sig) {
    (void)sig;
    g_interrupted = 1;
    if (g_session) sdnpu_session_cancel(g_session);
}

static bool print_piece(const char *piece, size_t len, void *user) {
    (void)user;
    fwrite(piece, 1, len, stdout);
    fflush(stdout);
    return true;
}


/* The prompt's prefill on a terminal, where a long document keeps one
 * waiting (20,000 tokens take minutes on a laptop's CPU): tokens done, the
 * share, and the rate so far; the line is cleared when the prompt is in. */
bool cli_show_prefill(int32_t done, int32_t total, const struct timespec *t0) {
    if (done <= 0 || total < 1024) return true;
    if (done == total) {
        fputs("\r\033[K", stderr);
        return true;
    }
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    const double s = (double)(t.tv_sec - t0->tv_sec) + 1e-9 * (double)(t.tv_nsec - t0->tv_nsec);
    fprintf(stderr, "\rprompt: %d of %d tokens (%d%%)", done, total, (int)(100LL * done / total));
    if (s > 0.5) fprintf(stderr, ", %.0f tokens/s", (double)done / s);
    return true;
}

static struct timespec g_request_t0; /* when the request was made */

static bool show_prefill(int32_t done, int32_t total, void *user) {
    (void)user;
    return cli_show_prefill(done, total, &g_request_t0);
}

/* The help text keeps its own layout, one printed line to a source line. */
/* clang-format off */
/* The help lines run and summarize share: -m first, the rest last. */
#define RUN_HELP_MODEL                                                                                       \
    "  -m, --model MODEL      a GGUF file, or an installed model by name (qwen2.5-coder-1.5b-instruct;\n"   \
    "                         scripts/setup --list-models); default: $SDNPU_MODEL or models/default.gguf\n"
#define RUN_HELP_STAGES                                                                                      \
    "                         or a drafting method + stages: \"+reuse\" (rejected drafts refill the padding\n" \
    "                         rows), \"+calib\" (the model's own predictions over the prompt become a drafting\n" \
    "                         store); identical output to none when greedy, the same distribution when\n"     \
    "                         sampling\n"
#define RUN_HELP_TAIL                                                                                        \
    "      --draft-max N      most draft tokens per verification (default: L2 - 1)\n"                        \
    "      --no-adaptive      verify every draft (default: a step verifies its draft only when the\n"        \
    "                         tokens it is expected to yield per ms beat one plain row's)\n"                  \
    CLI_HELP_SESSION                                                                                         \
    "      --kernels K        cpu summation order: fast (default) or ggml (bit-identical to llama.cpp)\n"    \
    "      --weights W        shared (default: one prepared copy of each weight for every graph) or\n"       \
    "                         private (each graph its own, an NPU runtime without weight sharing)\n"         \
    "      --weight-cache DIR keep the packed weights in DIR and read them back at the next start\n"         \
    "                         (default for models of 64 MiB or more: ~/.cache/sdnpu/weights)\n"             \
    "      --no-weight-cache  pack the weights at every start\n"                                            \
    "      --head H           auto (default), certified or exact: greedy one- and few-row heads take a\n"    \
    "                         q8_0 head's argmax from a q5_0 copy and a bound a row, then the exact rows\n"  \
    "                         that can win (the same tokens, fewer bytes a step, the copy's memory);\n"     \
    "                         auto where the copy adds at most a quarter to the weights\n"                  \
    "      --history FILE     earlier responses as a drafting store; this response is appended\n"          \
    "      --prompt-cache FILE\n"                                                                            \
    "                         load the context saved in FILE, if there is one (a file of another\n"          \
    "                         model, damaged or too large is reported and skipped); the prompt keeps\n"      \
    "                         the longest prefix of it that it shares and prefills the rest; after\n"        \
    "                         generating, save the context (prompt and response) to FILE\n"                  \
    "      --stats-json FILE  write the request's statistics as JSON\n"                                      \
    "      --no-stats         do not print speed to stderr\n"

static void usage_run(FILE *f) {
    fprintf(f, "usage: sdnpu run [options] -p PROMPT | -f FILE\n\n"
               "options:\n" RUN_HELP_MODEL
               "  -p, --prompt TEXT      the prompt\n"
               "  -f, --file FILE        read the prompt from FILE ('-' for stdin)\n"
               "      --chat             wrap the prompt as a user turn in the model's chat format\n"
               "      --system TEXT      system text (with --chat; default: the chat template's own where it has\n"
               "                         one; \"\" for none)\n"
               "  -n, --n-predict N      most tokens to generate (default 256; -1 = until the context is full)\n"
               CLI_HELP_SAMPLING
               "      --stop TEXT        stop at TEXT (repeatable)\n"
               "      --spec METHOD      decoding: none (= cpu-vanilla), npu-vanilla, pld, sam, sam-tree (default,\n"
               "                         as for chat and serve),\n" RUN_HELP_STAGES
               "      --stop-on-repeat   stop when the output repeats one of its sentences or 16 of its tokens\n"
               RUN_HELP_TAIL);
}

/* The cue a base model continues after the document. */
#define SUMMARY_CUE "TL;DR:"

static void usage_summarize(FILE *f) {
    fprintf(f, "usage: sdnpu summarize [options] FILE|-\n\n"
               "Summarize a document (FILE, or - for standard input) with greedy decoding and speculative drafts\n"
               "from the document. An instruction-tuned model gets one user turn in its chat format, the\n"
               "document between <document> lines and then the instruction, and no system turn; a base model\n"
               "gets the document, a blank line and the cue \"" SUMMARY_CUE "\", and its summary ends at a blank line.\n\n"
               "options:\n" RUN_HELP_MODEL
               "      --instruction TEXT what to ask after the document; default:\n"
               "                         \"" CLI_SUMMARY_INSTRUCTION "\"\n"
               "                         (a base model's cue: \"" SUMMARY_CUE "\")\n"
               "      --system TEXT      system text for an instruction-tuned model (default: none)\n"
               "  -n, --n-predict N      most tokens to generate (default 256; -1 = until the context is full)\n"
               "  -c, --ctx-size N       context size (default: what the document and its summary need, at least\n"
               "                         4096, at most the model's own)\n" CLI_HELP_BATCH_THREADS
               "      --temp T           temperature (default 0 = greedy)\n" CLI_HELP_SAMPLER
               "      --stop TEXT        stop at TEXT (repeatable)\n"
               "      --spec METHOD      decoding: none (= cpu-vanilla), npu-vanilla, pld, sam (default), sam-tree,\n"
               RUN_HELP_STAGES
               "      --no-stop-on-repeat\n"
               "                         go on where the summary repeats one of its sentences or 16 of its tokens\n"
               "                         (by default it stops there)\n" RUN_HELP_TAIL);
}

/* clang-format on */

#define MAX_STOPS 16

/* --seed as run has always read it: strtoull's number, with nothing after. */
static int parse_seed(const char *flag, const char *v, void *field) {
    char *end;
    uint64_t seed = strtoull(v, &end, 10);
    memcpy(field, &seed, sizeof seed);
    if (!*end) return 0;
    fprintf(stderr, "sdnpu: %s expects an integer, got '%s'\n", flag, v);
    return -1;
}

struct run_opts {
    struct cli_gen_opts g;
    const char *prompt, *file, *stats_json, *prompt_cache;
    const char *instruction; /* summarize's --instruction, NULL for its default */
    struct cli_list stops;
    bool chat, stats_out;
};

#define RUN(field) CLI_AT(struct run_opts, field)
/* What run and summarize both take beyond the generation flags. */
static const struct cli_flag k_out_flags[] = {
    {"--seed", NULL, CLI_FN, RUN(g.gp.sampling.seed), .fn = parse_seed},
    {"--stop", NULL, CLI_LIST, RUN(stops)},
    {"--stop-on-repeat", NULL, CLI_CONST, RUN(g.gp.stop_on_repeat), .lo = true},
    {"--no-stop-on-repeat", NULL, CLI_CONST, RUN(g.gp.stop_on_repeat), .lo = false},
    {"--stats-json", NULL, CLI_STR, RUN(stats_json)},
    {"--prompt-cache", NULL, CLI_STR, RUN(prompt_cache)},
    {"--no-stats", NULL, CLI_CONST, RUN(stats_out), .lo = false},
    {0},
};
/* run's prompt; summarize takes a FILE and makes its own. */
static const struct cli_flag k_run_flags[] = {
    {"-p", "--prompt", CLI_STR, RUN(prompt)},
    {"-f", "--file", CLI_STR, RUN(file)},
    {"--chat", NULL, CLI_CONST, RUN(chat), .lo = true},
    {0},
};
static const struct cli_flag k_summarize_flags[] = {
    {"--instruction", NULL, CLI_STR, RUN(instruction)},
    {0},
};

/* summarize's FILE: the first argument that is no flag. */
static int summarize_file(const char *arg, void *ctx) {
    struct run_opts *o = ctx;
    bool stdin_dash = !strcmp(arg, "-"); /* FILE|-: a lone dash is standard input, not a flag */
    if ((arg[0] == '-' && !stdin_dash) || o->file) return 0;
    o->file = arg;
    return 1;
}

/* Whether a document (NUL-terminated, as cli_read_file gives it) holds
 * nothing but white space: the model would invent a summary of it (an
 * instruct model writes one of "a research paper" from an empty turn). */
static bool blank(const char *s, size_t n) { return strspn(s, " \t\n\r\f\v") == n; }

/* Whether a file's text is UTF-8; if not, says where in the file (byte
 * offset and line), before the model is loaded: the session would name an
 * offset in the prompt it wraps the file in. */
static bool file_utf8(const char *cmd, const char *file, const char *s, size_t n) {
    const size_t at = sd_utf8_validate(s, n);
    if (at == n) return true;
    size_t line = 1;
    for (size_t i = 0; i < at; i++)
        line += s[i] == '\n';
    fprintf(
        stderr,
        "%s: %s is not UTF-8 text: byte %zu (line %zu) is 0x%02x; convert it first (for Latin-1: iconv -f "
        "latin1 -t utf-8)\n",
        cmd, strcmp(file, "-") ? file : "standard input", at, line, (unsigned)(unsigned char)s[at]);
    return false;
}

/* summarize's context where -c is not given: the default 4,096 tokens,
 * or what the document needs where that is more (its tokens, the chat turn
 * around them and the summary: n_predict, else 1,024), so that a long
 * document is summarized rather than refused; the session caps it at the
 * model's own. The count tokenizes the document once more, some
 * milliseconds against its prefill. */
static int32_t summary_ctx(const struct sdnpu_model *m, const char *text, size_t len, int32_t n_predict) {
    size_t n = 0;
    sdnpu_tokenize(m, text, len, SDNPU_TOKENIZE_REPLACE_INVALID, NULL, 0, &n);
    const int64_t need = (int64_t)n + 64 + (n_predict > 0 ? n_predict : 1024);
    return need < 4096 ? 4096 : need > (1 << 24) ? (1 << 24) : (int32_t)need;
}

/* summarize's prompt (malloc'd; its length in *n) from the document, a C
 * string (a file with a NUL byte is refused before), and the instruction
 * (--instruction's, NULL for the default). An instruction-tuned model gets
 * a chat turn: the document between tags, as every surface gives one
 * (sdnpu_documents_format), then the instruction, which the 0.5B follows
 * where an instruction before the document made it copy the document
 * (docs/benchmarks.md, stop 87). A base model continues text, so it gets
 * the document and a cue. */
static char *summary_prompt(bool instruct, const char *doc, const char *ask, size_t *n) {
    const char *docs[] = {doc};
    if (!ask) ask = instruct ? CLI_SUMMARY_INSTRUCTION : SUMMARY_CUE;
    size_t need = 0;
    sdnpu_documents_format(docs, 1, ask, NULL, 0, &need);
    char *out = malloc(need);
    if (!out) return NULL;
    if (instruct)
        sdnpu_documents_format(docs, 1, ask, out, need, n);
    else
        *n = (size_t)snprintf(out, need, "%s\n\n%s", doc, ask); /* shorter than the tagged layout */
    return out;
}

/* The text run prompts with (-p's, or -f's file) or summarize summarizes
 * (FILE): 0 with *text and *len set (*owned the file's buffer, to free;
 * NULL for -p), else the exit code after saying what was wrong. A file is
 * refused before the model loads if it is not UTF-8; a document to
 * summarize also if it holds a NUL byte or nothing but white space. */
static int read_input(const struct run_opts *o, bool summarize, const char **text, size_t *len,
                      char **owned) {
    const char *cmd = summarize ? "sdnpu summarize" : "sdnpu run";
    *owned = NULL;
    if (!!o->prompt + !!o->file != 1) {
        fprintf(stderr,
                summarize ? "%s: give one FILE (or - for stdin)\n"
                          : "%s: give exactly one of -p PROMPT or -f FILE\n",
                cmd);
        return 2;
    }
    if (o->prompt) {
        *text = o->prompt;
        *len = strlen(o->prompt);
        return 0;
    }
    char *s = cli_read_file(o->file, len);
    if (!s) return 1;
    const char *name = strcmp(o->file, "-") ? o->file : "standard input";
    const char *nul = summarize ? memchr(s, '\0', *len) : NULL;
    if (!file_utf8(cmd, o->file, s, *len)) {
        /* said */
    } else if (nul) {
        fprintf(stderr, "%s: %s is not a text file (it holds a NUL byte at %zu)\n", cmd, name,
                (size_t)(nul - s));
    } else if (summarize && blank(s, *len)) {
        fprintf(stderr, "%s: %s holds no text to summarize\n", cmd, name);
    } else {
        *text = *owned = s;
        return 0;
    }
    free(s);
    return 1;
}

/* As llama-cli's --prompt-cache: a saved context the prompt may start
 * with. A file that cannot be used costs only the reuse; whether it was
 * loaded. */
static bool load_prompt_cache(struct sdnpu_session *s, const char *path) {
    if (access(path, F_OK) != 0) return false;
    int rc = sdnpu_session_load(s, path);
    if (rc == SDNPU_OK) return true;
    fprintf(stderr, "sdnpu: warning: not using the prompt cache: %s: %s\n", sdnpu_status_str(rc),
            sdnpu_session_last_error(s));
    return false;
}

/* After the request: the context (prompt and response) saved for the next
 * run, and what was reused said. 0, or 1 after saying why it was not saved. */
static int save_prompt_cache(struct sdnpu_session *s, const char *path, const struct sdnpu_stats *st,
                             bool loaded) {
    int rc = sdnpu_session_save(s, path);
    fprintf(stderr, "prompt cache: %d of %d prompt tokens reused (%s)", st->n_prompt_reused,
            st->n_prompt_tokens, loaded ? "the file loaded" : "no usable file");
    if (!rc) {
        fprintf(stderr, "; saved %d tokens to %s\n", sdnpu_session_n_past(s), path);
        return 0;
    }
    fprintf(stderr, "; not saved\nsdnpu: cannot save the prompt cache: %s: %s\n", sdnpu_status_str(rc),
            sdnpu_session_last_error(s));
    return 1;
}

/* The request's speed, drafting and memory on stderr. */
static void print_stats(const struct run_opts *o, const struct sdnpu_generate_params *gp,
                        const struct sdnpu_stats *st) {
    const char *method = o->g.spec ? o->g.spec : "none";
    if (st->stop_reason == SDNPU_STOP_PREFILL)
        fprintf(stderr,
                "\nprompt: %d tokens, stopped during their prefill after %.0f ms; nothing generated\n",
                st->n_prompt_tokens, st->prefill_ms);
    else
        fprintf(stderr,
                "\nprompt: %d tokens in %.0f ms (%.1f tok/s) | generated: %d tokens in %.0f ms (%.1f tok/s)\n"
                "speculative: %s | %d model calls, acceptance %.2f tokens/call | drafted %d, accepted %d "
                "(reuse %d/%d) | %d drafts skipped | drafting %.1f ms | padding %.0f%% of %lld graph rows | "
                "stop: %s\n",
                st->n_prompt_tokens, st->prefill_ms, st->prompt_tokens_per_s, st->n_generated, st->decode_ms,
                st->gen_tokens_per_s, method, st->n_verify_steps, st->acceptance, st->n_drafted,
                st->n_accepted, st->n_reuse_accepted, st->n_reuse_drafted, st->n_plain_steps, st->draft_ms,
                st->n_graph_rows ? 100.0 * (double)st->n_pad_rows / (double)st->n_graph_rows : 0.0,
                (long long)st->n_graph_rows, cli_stop_words(st->stop_reason));
    fprintf(
        stderr,
        "memory: prepared graphs %.0f MiB (%.0f ms to prepare, not in the times above), peak RSS %.0f MiB\n",
        (double)st->prepared_bytes / 1048576.0, st->prepare_ms, (double)st->peak_rss_bytes / 1048576.0);
    if (st->shared_weight_bytes)
        fprintf(stderr,
                "weights: shared, one copy of %.0f MiB for every graph; weight cache: %s; head: %s%s\n",
                (double)st->shared_weight_bytes / 1048576.0, st->weight_cache, st->head,
                gp->spec.graph_switching ? "; graph switching moved only the graphs' buffers" : "");
    else
        fprintf(stderr, "weights: private, each graph its own copy\n");
    if (gp->spec.calibration)
        fprintf(stderr, "calibration: %d sequences in %.1f ms (in the prompt's time), %.1f MiB\n",
                st->n_calib_records, st->calib_ms, (double)st->calib_bytes / 1048576.0);
}

/* --stats-json: the same statistics as one JSON object. 0, or 1 after
 * saying the file could not be written. */
static int write_stats_json(const struct run_opts *o, const struct sdnpu_generate_params *gp,
                            const struct sdnpu_stats *st) {
    FILE *jf = fopen(o->stats_json, "w");
    if (!jf) {
        fprintf(stderr, "sdnpu: cannot write '%s'\n", o->stats_json);
        return 1;
    }
    fprintf(jf,
            "{\"method\": \"%s\", \"prompt_tokens\": %d, \"generated\": %d, \"prefill_ms\": %.3f, "
            "\"prompt_reused\": %d, \"decode_ms\": %.3f, \"prompt_tokens_per_s\": %.3f, "
            "\"gen_tokens_per_s\": %.3f, "
            "\"verify_steps\": %d, \"acceptance\": %.4f, \"drafted\": %d, \"accepted\": %d, "
            "\"reuse_drafted\": %d, \"reuse_accepted\": %d, \"adaptive\": %s, \"plain_steps\": %d, "
            "\"draft_ms\": %.3f, \"verify_ms\": %.3f, \"stop_reason\": %d, \"graph_rows\": %lld, "
            "\"pad_rows\": %lld, \"prepared_bytes\": %zu, \"prepare_ms\": %.3f, \"peak_rss_bytes\": %zu, "
            "\"calib_ms\": %.3f, \"calib_records\": %d, \"calib_bytes\": %zu, \"shared_weight_bytes\": %zu, "
            "\"weight_cache\": \"%s\", \"head\": \"%s\"}\n",
            o->g.spec ? o->g.spec : "none", st->n_prompt_tokens, st->n_generated, st->prefill_ms,
            st->n_prompt_reused, st->decode_ms, st->prompt_tokens_per_s, st->gen_tokens_per_s,
            st->n_verify_steps, st->acceptance, st->n_drafted, st->n_accepted, st->n_reuse_drafted,
            st->n_reuse_accepted, gp->adaptive ? "true" : "false", st->n_plain_steps, st->draft_ms,
            st->verify_ms, st->stop_reason, (long long)st->n_graph_rows, (long long)st->n_pad_rows,
            st->prepared_bytes, st->prepare_ms, st->peak_rss_bytes, st->calib_ms, st->n_calib_records,
            st->calib_bytes, st->shared_weight_bytes, st->weight_cache, st->head);
    fclose(jf);
    return 0;
}

/* The request, streamed to stdout; Ctrl-C ends it early (on_sigint). */
static int generate(struct sdnpu_session *s, const char *prompt, size_t len,
                    const struct sdnpu_generate_params *gp, struct sdnpu_stats *st) {
    g_session = s;
    signal(SIGINT, on_sigint);
    clock_gettime(CLOCK_MONOTONIC, &g_request_t0);
    int rc = sdnpu_session_generate(s, prompt, len, gp, st);
    signal(SIGINT, SIG_DFL);
    g_session = NULL;
    printf("\n");
    fflush(stdout);
    return rc;
}

/* The defaults of the command: run's those of chat and serve, summarize's
 * greedy, linear suffix-automaton drafts filling the verification graph,
 * and a context sized to the document (summary_ctx) unless -c says. */
static void run_defaults(struct run_opts *o, bool summarize) {
    if (summarize) {
        o->g.gp.sampling.temperature = 0.0f;
        o->g.spec = "sam";
        o->g.gp.spec.drafter = SDNPU_DRAFTER_SAM;
        /* A summary that starts repeating itself is over (issue: a 270M
         * base model loops under greedy decoding). */
        o->g.gp.stop_on_repeat = true;
        o->g.sp.n_ctx = 0;
        return;
    }
    /* chat's and the server's default: the same greedy output as none, the
     * sampler's distribution when sampling, and cost-aware drafting at plain
     * speed where there is nothing to copy (the sample document with a
     * question, sampled: 1.45-1.9x none's tokens a second). */
    o->g.spec = "sam-tree";
    cli_parse_spec("--spec", o->g.spec, &o->g.gp.spec); /* a constant that parses */
}

static int run_main(int argc, char **argv, bool summarize) {
    const char *stops[MAX_STOPS];
    struct run_opts o = {
        .g = cli_gen_default_opts(), .stops = {stops, 0, MAX_STOPS, "--stop strings"}, .stats_out = true};
    run_defaults(&o, summarize);
    const struct cli_parser parser = {
        summarize ? "sdnpu summarize" : "sdnpu run",
        summarize ? usage_summarize : usage_run,
        {CLI_GEN_GROUPS(&o.g), {k_out_flags, &o}, {summarize ? k_summarize_flags : k_run_flags, &o}},
        .style = CLI_SEE_HELP,
        .missing_name = "sdnpu",
        .positional = summarize ? summarize_file : NULL,
        .ctx = &o};
    int code = cli_parse_flags(&parser, argc, argv);
    if (code != CLI_PARSED) return code;
    const char *prompt;
    size_t len, n_stops = o.stops.n;
    char *owned, *wrapped = NULL;
    if ((code = read_input(&o, summarize, &prompt, &len, &owned))) return code;
    struct sdnpu_session_params sp = o.g.sp;
    struct sdnpu_generate_params gp = o.g.gp;
    gp.chat = o.chat;
    const char *model_path = cli_model(o.g.m.model);
    struct sdnpu_model_params mp = sdnpu_model_default_params();
    mp.n_threads = o.g.m.n_threads;
    mp.head = o.g.m.head;
    struct sdnpu_model *model = NULL;
    struct sdnpu_session *s = NULL;
    char err[512];
    code = 1;
    int rc = sdnpu_model_load(model_path, mp, &model, err, sizeof err);
    if (rc) {
        fprintf(stderr, "sdnpu: cannot load model: %s: %s\n", sdnpu_status_str(rc), err);
        cli_model_hint("sdnpu", o.g.m.model, model_path);
        goto done;
    }
    if (summarize) {
        /* An instruction-tuned model gets a chat turn; a base model's
         * summary is one paragraph, and it would ramble on. */
        gp.chat = sdnpu_model_has_chat_template(model);
        if (!gp.chat && n_stops < MAX_STOPS) stops[n_stops++] = "\n\n";
        if (!(prompt = wrapped = summary_prompt(gp.chat, prompt, o.instruction, &len))) {
            fprintf(stderr, "sdnpu summarize: out of memory\n");
            goto done;
        }
        if (sp.n_ctx == 0) sp.n_ctx = summary_ctx(model, prompt, len, gp.n_predict);
    }
    cli_weight_cache(&sp, model_path);
    if ((rc = sdnpu_session_create(model, sp, &s))) {
        fprintf(stderr, "sdnpu: cannot make a session: %s: %s\n", sdnpu_status_str(rc), sdnpu_model_last_error(model));
        goto done;
    }
    if (o.g.history && (rc = sdnpu_session_set_history(s, o.g.history)) != SDNPU_OK) {
        fprintf(stderr, "sdnpu: cannot use history '%s': %s: %s\n", o.g.history, sdnpu_status_str(rc),
                sdnpu_session_last_error(s));
        goto done;
    }
    bool cache_loaded = o.prompt_cache && load_prompt_cache(s, o.prompt_cache);
    if (o.prompt_cache) gp.new_context = true;
    /* summarize's turn has no system text: the template's own (Qwen's
     * "You are Qwen, ...") makes the 0.5B copy the sample's first
     * paragraph back, where without it the model summarizes; on the
     * summary set the two are alike (docs/benchmarks.md, stop 89). */
    gp.system = o.g.system ? o.g.system : summarize ? "" : NULL;
    gp.stop = stops;
    gp.n_stop = n_stops;
    gp.on_text = print_piece;
    if (isatty(STDERR_FILENO)) gp.on_prefill = show_prefill;
    struct sdnpu_stats st;
    rc = generate(s, prompt, len, &gp, &st);
    if (rc < 0) {
        fprintf(stderr, "sdnpu: generation failed: %s: %s\n", sdnpu_status_str(rc), sdnpu_session_last_error(s));
        if (rc == SDNPU_ERR_CONTEXT_FULL && sdnpu_session_n_ctx(s) < sp.n_ctx)
            fprintf(stderr, "sdnpu: the model's context is %d tokens; give it a shorter %s\n",
                    sdnpu_session_n_ctx(s), summarize ? "document (a part of it)" : "prompt");
        else if (rc == SDNPU_ERR_CONTEXT_FULL)
            fprintf(stderr, "sdnpu: -c N gives the session a larger context, up to the model's own\n");
        goto done;
    }
    code = 0;
    if (o.prompt_cache) code |= save_prompt_cache(s, o.prompt_cache, &st, cache_loaded);
    if (o.stats_out) print_stats(&o, &gp, &st);
    if (o.stats_json) code |= write_stats_json(&o, &gp, &st);
    if (!code && g_interrupted) code = 128 + SIGINT;
done:
    sdnpu_session_free(s);
    sdnpu_model_free(model);
    free(owned);
    free(wrapped);
    return code;
}

int cli_run(int argc, char **argv) { return run_main(argc, argv, false); }
int cli_summarize(int argc, char **argv) { return run_main(argc, argv, true); }
