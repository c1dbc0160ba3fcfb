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

static void run_usage(FILE *f, const char *cmd) {
    if (!strcmp(cmd, "summarize")) {
        fprintf(f, "usage: sdnpu summarize [options] FILE|-\n\n"
                   "Summarize a document with the model's chat format and greedy decoding.\n\n");
    } else {
        fprintf(f, "usage: sdnpu run [options] -p PROMPT | -f FILE\n\n");
    }
    fprintf(f, "options:\n"
               "  -m, --model MODEL      a GGUF file, or an installed model by name (qwen2.5-coder-1.5b-instruct;\n"
               "                         scripts/setup --list-models); default: $SDNPU_MODEL or models/default.gguf\n"
               "  -p, --prompt TEXT      the prompt\n"
               "  -f, --file FILE        read the prompt from FILE ('-' for stdin)\n"
               "      --chat             wrap the prompt as a user turn in the model's chat format\n"
               "      --system TEXT      system text (with --chat; default: the chat template's own where it has one,\n"
               "                         none for summarize; \"\" for none)\n"
               "  -n, --n-predict N      most tokens to generate (default 256; -1 = until the context is full)\n"
               CLI_HELP_SAMPLING
               "      --stop TEXT        stop at TEXT (repeatable)\n"
               "      --spec METHOD      decoding: none (= cpu-vanilla), npu-vanilla, pld, sam, sam-tree (default: sam for\n"
               "                         summarize, sam-tree for run, as for chat and serve), or a drafting method +\n"
               "                         stages: \"+reuse\" (rejected drafts refill the padding rows), \"+calib\" (the\n"
               "                         model's own predictions over the prompt become a drafting store); identical\n"
               "                         output to none when greedy, the same distribution when sampling\n"
               "      --draft-max N      most draft tokens per verification (default: L2 - 1)\n"
               "      --stop-on-repeat   stop when the output repeats one of its sentences or 16 of its tokens\n"
               "                         (default for summarize; --no-stop-on-repeat turns it off)\n"
               "      --no-adaptive      verify every draft (default: a step verifies its draft only when the\n"
               "                         tokens it is expected to yield per ms beat one plain row's)\n"
               CLI_HELP_SESSION
               "      --kernels K        cpu summation order: fast (default) or ggml (bit-identical to llama.cpp)\n"
               "      --weights W        shared (default: one prepared copy of each weight for every graph) or\n"
               "                         private (each graph its own, an NPU runtime without weight sharing)\n"
               "      --weight-cache DIR keep the packed weights in DIR and read them back at the next start\n"
               "                         (default for models of 64 MiB or more: ~/.cache/sdnpu/weights)\n"
               "      --no-weight-cache  pack the weights at every start\n"
               "      --head H           auto (default), certified or exact: greedy one- and few-row heads take a\n"
               "                         q8_0 head's argmax from a q5_0 copy and a bound a row, then the exact rows\n"
               "                         that can win (the same tokens, fewer bytes a step, the copy's memory);\n"
               "                         auto where the copy adds at most a quarter to the weights\n"
               "      --history FILE     earlier responses as a drafting store; this response is appended\n"
               "      --prompt-cache FILE\n"
               "                         load the context saved in FILE, if there is one (a file of another\n"
               "                         model, damaged or too large is reported and skipped); the prompt keeps\n"
               "                         the longest prefix of it that it shares and prefills the rest; after\n"
               "                         generating, save the context (prompt and response) to FILE\n"
               "      --stats-json FILE  write the request's statistics as JSON\n"
               "      --no-stats         do not print speed to stderr\n");
}

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
    struct cli_list stops;
    bool chat, stats_out;
};

#define RUN(field) CLI_AT(struct run_opts, field)
static const struct cli_flag k_run_flags[] = {
    {"-p", "--prompt", CLI_STR, RUN(prompt)},
    {"-f", "--file", CLI_STR, RUN(file)},
    {"--chat", NULL, CLI_CONST, RUN(chat), .lo = true},
    {"--seed", NULL, CLI_FN, RUN(g.gp.sampling.seed), .fn = parse_seed},
    {"--stop", NULL, CLI_LIST, RUN(stops)},
    {"--stop-on-repeat", NULL, CLI_CONST, RUN(g.gp.stop_on_repeat), .lo = true},
    {"--no-stop-on-repeat", NULL, CLI_CONST, RUN(g.gp.stop_on_repeat), .lo = false},
    {"--stats-json", NULL, CLI_STR, RUN(stats_json)},
    {"--prompt-cache", NULL, CLI_STR, RUN(prompt_cache)},
    {"--no-stats", NULL, CLI_CONST, RUN(stats_out), .lo = false},
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

static void usage_run(FILE *f) { run_usage(f, "run"); }
/* summarize's prompt (malloc'd; its length in *n) from the document, a C
 * string (a file with a NUL byte is refused before). An instruction-tuned
 * model gets a chat turn: the document between tags, as every surface
 * gives one (sdnpu_documents_format), then the instruction, which the 0.5B
 * follows where an instruction before the document made it copy the
 * document (docs/benchmarks.md, stop 87). A base model continues text, so
 * it gets the document and a "TL;DR:" cue. */
static char *summary_prompt(bool instruct, const char *doc, size_t *n) {
    const char *docs[] = {doc};
    const char *ask =
        instruct ? "Summarize the document above in two or three short sentences of your own." : "TL;DR:";
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

static void usage_summarize(FILE *f) { run_usage(f, "summarize"); }

static int run_main(int argc, char **argv, bool summarize) {
    const char *stops[MAX_STOPS];
    struct run_opts o = {.g = cli_gen_default_opts(),
                         .stops = {stops, 0, MAX_STOPS, "--stop strings"},
                         .chat = summarize,
                         .stats_out = true};
    if (summarize) {
        o.g.gp.sampling.temperature = 0.0f;
        /* Linear suffix-automaton drafts filling the verification graph. */
        o.g.spec = "sam";
        o.g.gp.spec.drafter = SDNPU_DRAFTER_SAM;
        /* A summary that starts repeating itself is over (issue: a 270M
         * base model loops under greedy decoding). */
        o.g.gp.stop_on_repeat = true;
        o.g.sp.n_ctx = 0; /* sized to the document unless -c says (summary_ctx) */
    } else {
        /* chat's and the server's default: the same greedy output as none,
         * the sampler's distribution when sampling, and cost-aware drafting
         * at plain speed where there is nothing to copy (the sample
         * document with a question, sampled: 1.45-1.9x none's tokens a
         * second). */
        o.g.spec = "sam-tree";
        if (cli_parse_spec("--spec", o.g.spec, &o.g.gp.spec)) return 1;
    }
    const struct cli_parser parser = {summarize ? "sdnpu summarize" : "sdnpu run",
                                      summarize ? usage_summarize : usage_run,
                                      {CLI_GEN_GROUPS(&o.g), {k_run_flags, &o}},
                                      .style = CLI_SEE_HELP,
                                      .missing_name = "sdnpu",
                                      .positional = summarize ? summarize_file : NULL,
                                      .ctx = &o};
    int parsed = cli_parse_flags(&parser, argc, argv);
    if (parsed != CLI_PARSED) return parsed;
    const char *model_path = o.g.m.model, *prompt = o.prompt, *file = o.file, *history = o.g.history;
    size_t n_stops = o.stops.n;
    bool chat = o.chat;
    struct sdnpu_session_params sp = o.g.sp;
    struct sdnpu_generate_params gp = o.g.gp;
    if (!!prompt + !!file != 1) {
        fprintf(stderr, summarize ? "sdnpu summarize: give one FILE (or - for stdin)\n"
                                  : "sdnpu run: give exactly one of -p PROMPT or -f FILE\n");
        return 2;
    }
    char *owned = NULL;
    size_t len = 0;
    if (file) {
        owned = cli_read_file(file, &len);
        if (!owned) return 1;
        if (!file_utf8(summarize ? "sdnpu summarize" : "sdnpu run", file, owned, len)) {
            free(owned);
            return 1;
        }
        const char *nul = summarize ? memchr(owned, '\0', len) : NULL;
        if (nul) {
            fprintf(stderr, "sdnpu summarize: %s is not a text file (it holds a NUL byte at %zu)\n",
                    strcmp(file, "-") ? file : "standard input", (size_t)(nul - owned));
            free(owned);
            return 1;
        }
        if (summarize && blank(owned, len)) {
            fprintf(stderr, "sdnpu summarize: %s holds no text to summarize\n",
                    strcmp(file, "-") ? file : "standard input");
            free(owned);
            return 1;
        }
        prompt = owned;
    } else {
        len = strlen(prompt);
    }
    char *wrapped = NULL;
    model_path = cli_model(model_path);
    struct sdnpu_model_params mp = sdnpu_model_default_params();
    mp.n_threads = o.g.m.n_threads;
    mp.head = o.g.m.head;
    struct sdnpu_model *model = NULL;
    char err[512];
    int rc = sdnpu_model_load(model_path, mp, &model, err, sizeof err);
    if (rc) {
        fprintf(stderr, "sdnpu: cannot load model: %s: %s\n", sdnpu_status_str(rc), err);
        cli_model_hint("sdnpu", o.g.m.model, model_path);
        free(owned);
        free(wrapped);
        return 1;
    }
    if (summarize) {
        bool instruct = sdnpu_model_has_chat_template(model);
        chat = instruct;
        /* A base model's summary is one paragraph; it would ramble on. */
        if (!instruct && n_stops < MAX_STOPS) stops[n_stops++] = "\n\n";
        wrapped = summary_prompt(instruct, prompt, &len);
        if (!wrapped) {
            fprintf(stderr, "sdnpu summarize: out of memory\n");
            sdnpu_model_free(model);
            free(owned);
            return 1;
        }
        prompt = wrapped;
        if (sp.n_ctx == 0) sp.n_ctx = summary_ctx(model, prompt, len, gp.n_predict);
    }
    struct sdnpu_session *s = NULL;
    cli_weight_cache(&sp, model_path);
    rc = sdnpu_session_create(model, sp, &s);
    if (rc) {
        fprintf(stderr, "sdnpu: cannot make a session: %s: %s\n", sdnpu_status_str(rc), sdnpu_model_last_error(model));
        sdnpu_model_free(model);
        free(owned);
        free(wrapped);
        return 1;
    }
    if (history && (rc = sdnpu_session_set_history(s, history)) != SDNPU_OK) {
        fprintf(stderr, "sdnpu: cannot use history '%s': %s: %s\n", history, sdnpu_status_str(rc),
                sdnpu_session_last_error(s));
        sdnpu_session_free(s);
        sdnpu_model_free(model);
        free(owned);
        free(wrapped);
        return 1;
    }
    /* As llama-cli's --prompt-cache: a saved context the prompt may start
     * with. A file that cannot be used costs only the reuse. */
    bool cache_loaded = false;
    if (o.prompt_cache) {
        if (access(o.prompt_cache, F_OK) == 0) {
            rc = sdnpu_session_load(s, o.prompt_cache);
            if (rc == SDNPU_OK) cache_loaded = true;
            else
                fprintf(stderr, "sdnpu: warning: not using the prompt cache: %s: %s\n", sdnpu_status_str(rc),
                        sdnpu_session_last_error(s));
        }
        gp.new_context = true;
    }
    gp.chat = chat;
    /* summarize's turn has no system text: the template's own (Qwen's
     * "You are Qwen, ...") makes the 0.5B copy the sample's first
     * paragraph back, where without it the model summarizes; on the
     * summary set the two are alike (docs/benchmarks.md, stop 89). */
    gp.system = o.g.system ? o.g.system : summarize ? "" : NULL;
    gp.stop = stops;
    gp.n_stop = n_stops;
    gp.on_text = print_piece;
    if (isatty(STDERR_FILENO)) gp.on_prefill = show_prefill;
    g_session = s;
    signal(SIGINT, on_sigint);
    struct sdnpu_stats st;
    clock_gettime(CLOCK_MONOTONIC, &g_request_t0);
    rc = sdnpu_session_generate(s, prompt, len, &gp, &st);
    signal(SIGINT, SIG_DFL);
    g_session = NULL;
    printf("\n");
    fflush(stdout);
    int code = 0;
    if (rc < 0) {
        fprintf(stderr, "sdnpu: generation failed: %s: %s\n", sdnpu_status_str(rc), sdnpu_session_last_error(s));
        if (rc == SDNPU_ERR_CONTEXT_FULL && sdnpu_session_n_ctx(s) < sp.n_ctx)
            fprintf(stderr, "sdnpu: the model's context is %d tokens; give it a shorter %s\n",
                    sdnpu_session_n_ctx(s), summarize ? "document (a part of it)" : "prompt");
        else if (rc == SDNPU_ERR_CONTEXT_FULL)
            fprintf(stderr, "sdnpu: -c N gives the session a larger context, up to the model's own\n");
        code = 1;
    }
    if (o.prompt_cache && rc >= 0) {
        int src = sdnpu_session_save(s, o.prompt_cache);
        fprintf(stderr, "prompt cache: %d of %d prompt tokens reused (%s)", st.n_prompt_reused, st.n_prompt_tokens,
                cache_loaded ? "the file loaded" : "no usable file");
        if (src) {
            fprintf(stderr, "; not saved\nsdnpu: cannot save the prompt cache: %s: %s\n", sdnpu_status_str(src),
                    sdnpu_session_last_error(s));
            code = 1;
        } else {
            fprintf(stderr, "; saved %d tokens to %s\n", sdnpu_session_n_past(s), o.prompt_cache);
        }
    }
    if (o.stats_out && rc >= 0) {
        const char *method = o.g.spec ? o.g.spec : "none";
        if (st.stop_reason == SDNPU_STOP_PREFILL)
            fprintf(stderr, "\nprompt: %d tokens, stopped during their prefill after %.0f ms; nothing generated\n",
                    st.n_prompt_tokens, st.prefill_ms);
        else
            fprintf(stderr,
                    "\nprompt: %d tokens in %.0f ms (%.1f tok/s) | generated: %d tokens in %.0f ms (%.1f tok/s)\n"
                    "speculative: %s | %d model calls, acceptance %.2f tokens/call | drafted %d, accepted %d "
                    "(reuse %d/%d) | %d drafts skipped | drafting %.1f ms | padding %.0f%% of %lld graph rows | "
                    "stop: %s\n",
                    st.n_prompt_tokens, st.prefill_ms, st.prompt_tokens_per_s, st.n_generated, st.decode_ms,
                    st.gen_tokens_per_s, method, st.n_verify_steps, st.acceptance, st.n_drafted, st.n_accepted,
                    st.n_reuse_accepted, st.n_reuse_drafted, st.n_plain_steps, st.draft_ms,
                    st.n_graph_rows ? 100.0 * (double)st.n_pad_rows / (double)st.n_graph_rows : 0.0,
                    (long long)st.n_graph_rows, cli_stop_words(st.stop_reason));
        fprintf(stderr, "memory: prepared graphs %.0f MiB (%.0f ms to prepare, not in the times above), peak RSS %.0f MiB\n",
                (double)st.prepared_bytes / 1048576.0, st.prepare_ms, (double)st.peak_rss_bytes / 1048576.0);
        if (st.shared_weight_bytes)
            fprintf(stderr, "weights: shared, one copy of %.0f MiB for every graph; weight cache: %s; head: %s%s\n",
                    (double)st.shared_weight_bytes / 1048576.0, st.weight_cache, st.head,
                    gp.spec.graph_switching ? "; graph switching moved only the graphs' buffers" : "");
        else
            fprintf(stderr, "weights: private, each graph its own copy\n");
        if (gp.spec.calibration)
            fprintf(stderr, "calibration: %d sequences in %.1f ms (in the prompt's time), %.1f MiB\n", st.n_calib_records,
                    st.calib_ms, (double)st.calib_bytes / 1048576.0);
    }
    if (o.stats_json && rc >= 0) {
        FILE *jf = fopen(o.stats_json, "w");
        if (!jf) {
            fprintf(stderr, "sdnpu: cannot write '%s'\n", o.stats_json);
            code = 1;
        } else {
            fprintf(jf,
                    "{\"method\": \"%s\", \"prompt_tokens\": %d, \"generated\": %d, \"prefill_ms\": %.3f, "
                    "\"prompt_reused\": %d, \"decode_ms\": %.3f, \"prompt_tokens_per_s\": %.3f, \"gen_tokens_per_s\": %.3f, "
                    "\"verify_steps\": %d, \"acceptance\": %.4f, \"drafted\": %d, \"accepted\": %d, "
                    "\"reuse_drafted\": %d, \"reuse_accepted\": %d, \"adaptive\": %s, \"plain_steps\": %d, "
                    "\"draft_ms\": %.3f, \"verify_ms\": %.3f, \"stop_reason\": %d, \"graph_rows\": %lld, "
                    "\"pad_rows\": %lld, \"prepared_bytes\": %zu, \"prepare_ms\": %.3f, \"peak_rss_bytes\": %zu, "
                    "\"calib_ms\": %.3f, \"calib_records\": %d, \"calib_bytes\": %zu, \"shared_weight_bytes\": %zu, "
                    "\"weight_cache\": \"%s\", \"head\": \"%s\"}\n",
                    o.g.spec ? o.g.spec : "none", st.n_prompt_tokens, st.n_generated, st.prefill_ms, st.n_prompt_reused,
                    st.decode_ms,
                    st.prompt_tokens_per_s, st.gen_tokens_per_s, st.n_verify_steps, st.acceptance, st.n_drafted,
                    st.n_accepted, st.n_reuse_drafted, st.n_reuse_accepted, gp.adaptive ? "true" : "false",
                    st.n_plain_steps, st.draft_ms, st.verify_ms, st.stop_reason, (long long)st.n_graph_rows,
                    (long long)st.n_pad_rows, st.prepared_bytes, st.prepare_ms, st.peak_rss_bytes, st.calib_ms,
                    st.n_calib_records, st.calib_bytes, st.shared_weight_bytes, st.weight_cache, st.head);
            fclose(jf);
        }
    }
    sdnpu_session_free(s);
    sdnpu_model_free(model);
    free(owned);
    free(wrapped);
    return code ? code : g_interrupted ? 128 + SIGINT : 0;
}

int cli_run(int argc, char **argv) { return run_main(argc, argv, false); }
int cli_summarize(int argc, char **argv) { return run_main(argc, argv, true); }
