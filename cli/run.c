/* cli/run.c - `sdnpu run` and `sdnpu summarize`: load, prompt, stream. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "cli.h"
#include "sdnpu.h"

static struct sdnpu_session *g_session; /* for the SIGINT handler */

static void on_sigint(int sig) {
    (void)sig;
    if (g_session) sdnpu_session_cancel(g_session);
}

static bool print_piece(const char *piece, size_t len, void *user) {
    (void)user;
    fwrite(piece, 1, len, stdout);
    fflush(stdout);
    return true;
}


static void run_usage(FILE *f, const char *cmd) {
    if (!strcmp(cmd, "summarize")) {
        fprintf(f, "usage: sdnpu summarize [options] FILE|-\n\n"
                   "Summarize a document with the model's chat format and greedy decoding.\n\n");
    } else {
        fprintf(f, "usage: sdnpu run [options] -p PROMPT | -f FILE\n\n");
    }
    fprintf(f, "options:\n"
               "  -m, --model FILE       GGUF model (default: $SDNPU_MODEL or models/default.gguf)\n"
               "  -p, --prompt TEXT      the prompt\n"
               "  -f, --file FILE        read the prompt from FILE ('-' for stdin)\n"
               "      --chat             wrap the prompt as a user turn in the model's chat format\n"
               "      --system TEXT      system text (with --chat)\n"
               "  -n, --n-predict N      most tokens to generate (default 256; -1 = until the context is full)\n"
               "  -c, --ctx-size N       context size (default 4096)\n"
               "  -b, --batch-size N     prefill chunk length (default 256)\n"
               "  -t, --threads N        threads (default: all cores)\n"
               "      --temp T           temperature (default 0.8; 0 = greedy)\n"
               "      --top-k N          (default 40)\n"
               "      --top-p P          (default 0.95)\n"
               "      --min-p P          (default 0.05)\n"
               "      --repeat-penalty R (default 1.0 = off)\n"
               "      --repeat-last-n N  (default 64)\n"
               "      --seed N           (default 12648430)\n"
               "      --stop TEXT        stop at TEXT (repeatable)\n"
               "      --spec METHOD      decoding: none (= cpu-vanilla), npu-vanilla, pld, sam, sam-tree (default: sam for\n"
               "                         summarize, none for run), or a drafting method + \"+reuse\" (sam+reuse:\n"
               "                         rejected drafts refill the padding rows); identical output to none when greedy\n"
               "      --draft-max N      most draft tokens per verification (default: L2 - 1)\n"
               "      --stop-on-repeat   stop when the output repeats one of its sentences or 16 of its tokens\n"
               "                         (default for summarize; --no-stop-on-repeat turns it off)\n"
               "      --no-adaptive      verify every draft (default: a step verifies its draft only when the\n"
               "                         tokens it is expected to yield per ms beat one plain row's)\n"
               "      --backend NAME     graph backend: cpu (default) or opencl\n"
               "      --cl-device N      OpenCL device index (see sdnpu info --devices)\n"
               "      --n-verify N       rows of the decode/verification graph L2 (default 8)\n"
               "      --mem-limit SIZE   most memory for prepared graphs, e.g. 600M (default: no limit)\n"
               "      --prefill-policy P last partial prefill chunk: auto (default), pad, pipe\n"
               "      --kernels K        cpu summation order: fast (default) or ggml (bit-identical to llama.cpp)\n"
               "      --history FILE     earlier responses as a drafting store; this response is appended\n"
               "      --stats-json FILE  write the request's statistics as JSON\n"
               "      --no-stats         do not print speed to stderr\n");
}

int cli_parse_int(const char *s, const char *flag, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi) {
        fprintf(stderr, "sdnpu: %s expects an integer in [%ld, %ld], got '%s'\n", flag, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_size(const char *s, const char *flag, size_t *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    double mul = 1;
    if (end != s && *end) {
        switch (*end) {
        case 'k': case 'K': mul = 1024.0; break;
        case 'm': case 'M': mul = 1048576.0; break;
        case 'g': case 'G': mul = 1073741824.0; break;
        default: mul = 0;
        }
        if (mul > 0 && end[1] && strcmp(end + 1, "iB") && strcmp(end + 1, "B")) mul = 0;
    }
    if (errno || end == s || mul == 0 || !(v >= 0) || v * mul > 1e18) {
        fprintf(stderr, "sdnpu: %s expects a size such as 512M, 2G or 1048576, got '%s'\n", flag, s);
        return -1;
    }
    *out = (size_t)(v * mul);
    return 0;
}

int cli_session_flag(const char *a, const char *v, struct sdnpu_session_params *sp) {
    static const char *const flags[] = {"--backend", "--cl-device", "--n-verify", "--mem-limit", "--prefill-policy",
                                        "--kernels"};
    size_t k = 0;
    while (k < SD_ARRAY_LEN(flags) && strcmp(a, flags[k])) k++;
    if (k == SD_ARRAY_LEN(flags)) return 0;
    long n;
    if (!v) {
        fprintf(stderr, "sdnpu: %s needs a value\n", a);
        return -1;
    }
    switch (k) {
    case 0: sp->backend = v; return 1;
    case 1:
        if (cli_parse_int(v, a, 0, 1024, &n)) return -1;
        sp->cl_device = (int32_t)n;
        return 1;
    case 2:
        if (cli_parse_int(v, a, 1, 64, &n)) return -1;
        sp->n_verify = (int32_t)n;
        return 1;
    case 3: return cli_parse_size(v, a, &sp->mem_limit) ? -1 : 1;
    case 5:
        if (strcmp(v, "fast") && strcmp(v, "ggml")) {
            fprintf(stderr, "sdnpu: --kernels expects fast or ggml, got '%s'\n", v);
            return -1;
        }
        sp->kernels = v;
        return 1;
    default:
        for (int p = 0; p < 3; p++)
            if (!strcmp(v, (const char *[]){"auto", "pad", "pipe"}[p])) {
                sp->prefill_policy = p;
                return 1;
            }
        fprintf(stderr, "sdnpu: --prefill-policy expects auto, pad or pipe, got '%s'\n", v);
        return -1;
    }
}

int cli_parse_float(const char *s, const char *flag, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || *end || end == s || v != v) {
        fprintf(stderr, "sdnpu: %s expects a number, got '%s'\n", flag, s);
        return -1;
    }
    *out = v;
    return 0;
}

#define MAX_STOPS 16

static int run_main(int argc, char **argv, bool summarize) {
    const char *model_path = NULL, *prompt = NULL, *file = NULL, *system = NULL, *history = NULL;
    const char *stats_json = NULL;
    const char *stops[MAX_STOPS];
    size_t n_stops = 0;
    bool chat = summarize, stats_out = true;
    struct sdnpu_session_params sp = sdnpu_session_default_params();
    struct sdnpu_generate_params gp = sdnpu_generate_default_params();
    int32_t n_threads = 0;
    if (summarize) {
        gp.sampling.temperature = 0.0f;
        /* Linear suffix-automaton drafts filling the verification graph. */
        gp.spec = "sam";
        /* A summary that starts repeating itself is over (issue: a 270M
         * base model loops under greedy decoding). */
        gp.stop_on_repeat = true;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n;
#define NEED_VALUE                                                                                           \
    if (!v) {                                                                                                \
        fprintf(stderr, "sdnpu: %s needs a value\n", a);                                                     \
        return 2;                                                                                            \
    }                                                                                                        \
    i++
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            run_usage(stdout, argv[0]);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            NEED_VALUE;
            model_path = v;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            NEED_VALUE;
            prompt = v;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            NEED_VALUE;
            file = v;
        } else if (!strcmp(a, "--chat")) {
            chat = true;
        } else if (!strcmp(a, "--system")) {
            NEED_VALUE;
            system = v;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            NEED_VALUE;
            if (cli_parse_int(v, a, -1, 1 << 30, &n)) return 2;
            gp.n_predict = (int32_t)n;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) {
            NEED_VALUE;
            if (cli_parse_int(v, a, 16, 1 << 24, &n)) return 2;
            sp.n_ctx = (int32_t)n;
        } else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size")) {
            NEED_VALUE;
            if (cli_parse_int(v, a, 1, 256, &n)) return 2;
            sp.n_batch = (int32_t)n;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            NEED_VALUE;
            if (cli_parse_int(v, a, 1, 256, &n)) return 2;
            n_threads = (int32_t)n;
        } else if (!strcmp(a, "--temp")) {
            NEED_VALUE;
            if (cli_parse_float(v, a, &gp.sampling.temperature)) return 2;
        } else if (!strcmp(a, "--top-k")) {
            NEED_VALUE;
            if (cli_parse_int(v, a, 0, 1 << 30, &n)) return 2;
            gp.sampling.top_k = (int32_t)n;
        } else if (!strcmp(a, "--top-p")) {
            NEED_VALUE;
            if (cli_parse_float(v, a, &gp.sampling.top_p)) return 2;
        } else if (!strcmp(a, "--min-p")) {
            NEED_VALUE;
            if (cli_parse_float(v, a, &gp.sampling.min_p)) return 2;
        } else if (!strcmp(a, "--repeat-penalty")) {
            NEED_VALUE;
            if (cli_parse_float(v, a, &gp.sampling.repeat_penalty)) return 2;
        } else if (!strcmp(a, "--repeat-last-n")) {
            NEED_VALUE;
            if (cli_parse_int(v, a, 0, 1 << 20, &n)) return 2;
            gp.sampling.repeat_last_n = (int32_t)n;
        } else if (!strcmp(a, "--seed")) {
            NEED_VALUE;
            char *end;
            gp.sampling.seed = strtoull(v, &end, 10);
            if (*end) {
                fprintf(stderr, "sdnpu: --seed expects an integer, got '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--stop")) {
            NEED_VALUE;
            if (n_stops == MAX_STOPS) {
                fprintf(stderr, "sdnpu: at most %d --stop strings\n", MAX_STOPS);
                return 2;
            }
            stops[n_stops++] = v;
        } else if (!strcmp(a, "--spec")) {
            NEED_VALUE;
            gp.spec = v;
        } else if (!strcmp(a, "--draft-max")) {
            NEED_VALUE;
            if (cli_parse_int(v, a, 1, 63, &n)) return 2;
            gp.draft_max = (int32_t)n;
        } else if (!strcmp(a, "--no-adaptive")) {
            gp.adaptive = false;
        } else if (!strcmp(a, "--stop-on-repeat")) {
            gp.stop_on_repeat = true;
        } else if (!strcmp(a, "--no-stop-on-repeat")) {
            gp.stop_on_repeat = false;
        } else if ((n = cli_session_flag(a, v, &sp)) != 0) {
            if (n < 0) return 2;
            i++;
        } else if (!strcmp(a, "--history")) {
            NEED_VALUE;
            history = v;
        } else if (!strcmp(a, "--stats-json")) {
            NEED_VALUE;
            stats_json = v;
        } else if (!strcmp(a, "--no-stats")) {
            stats_out = false;
        } else if (a[0] != '-' && summarize && !file) {
            file = a;
        } else {
            fprintf(stderr, "sdnpu %s: unknown option '%s' (see sdnpu %s -h)\n", argv[0], a, argv[0]);
            return 2;
        }
#undef NEED_VALUE
    }
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
        prompt = owned;
    } else {
        len = strlen(prompt);
    }
    char *wrapped = NULL;
    if (!model_path) model_path = cli_default_model();
    struct sdnpu_model_params mp = sdnpu_model_default_params();
    mp.n_threads = n_threads;
    struct sdnpu_model *model = NULL;
    char err[512];
    int rc = sdnpu_model_load(model_path, mp, &model, err, sizeof err);
    if (rc) {
        fprintf(stderr, "sdnpu: cannot load model: %s: %s\n", sdnpu_status_str(rc), err);
        if (!strcmp(model_path, "models/default.gguf"))
            fprintf(stderr, "sdnpu: run scripts/setup to install the default model, or pass -m FILE\n");
        free(owned);
        free(wrapped);
        return 1;
    }
    if (summarize) {
        /* An instruction-tuned model gets the request as a chat turn; a base
         * model continues text, so it gets the document and a "TL;DR:" cue. */
        bool instruct = sdnpu_model_has_chat_template(model);
        static const char *pre = "Summarize the following document in a few sentences.\n\n", *post = "\n\nTL;DR:";
        const char *a = instruct ? pre : "", *b = instruct ? "" : post;
        chat = instruct;
        /* A base model's summary is one paragraph; it would ramble on. */
        if (!instruct && n_stops < MAX_STOPS) stops[n_stops++] = "\n\n";
        wrapped = malloc(strlen(a) + len + strlen(b) + 1);
        if (!wrapped) {
            sdnpu_model_free(model);
            free(owned);
            return 1;
        }
        memcpy(wrapped, a, strlen(a));
        memcpy(wrapped + strlen(a), prompt, len);
        memcpy(wrapped + strlen(a) + len, b, strlen(b) + 1);
        len += strlen(a) + strlen(b);
        prompt = wrapped;
    }
    struct sdnpu_session *s = NULL;
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
    gp.chat = chat;
    gp.system = system;
    gp.stop = stops;
    gp.n_stop = n_stops;
    gp.on_text = print_piece;
    g_session = s;
    signal(SIGINT, on_sigint);
    struct sdnpu_stats st;
    rc = sdnpu_session_generate(s, prompt, len, &gp, &st);
    signal(SIGINT, SIG_DFL);
    g_session = NULL;
    printf("\n");
    fflush(stdout);
    int code = 0;
    if (rc < 0) {
        fprintf(stderr, "sdnpu: generation failed: %s: %s\n", sdnpu_status_str(rc), sdnpu_session_last_error(s));
        code = 1;
    }
    if (stats_out && rc >= 0) {
        static const char *why[] = {"length", "end of turn", "stop string", "stopped", "context full", "repetition"};
        const char *method = gp.spec ? gp.spec : "none";
        fprintf(stderr,
                "\nprompt: %d tokens in %.0f ms (%.1f tok/s) | generated: %d tokens in %.0f ms (%.1f tok/s)\n"
                "speculative: %s | %d model calls, acceptance %.2f tokens/call | drafted %d, accepted %d "
                "(reuse %d/%d) | %d drafts skipped | drafting %.1f ms | padding %.0f%% of %lld graph rows | stop: %s\n"
                "memory: prepared graphs %.0f MiB (%.0f ms to prepare, not in the times above), peak RSS %.0f MiB\n",
                st.n_prompt_tokens, st.prefill_ms, st.prompt_tokens_per_s, st.n_generated, st.decode_ms,
                st.gen_tokens_per_s, method, st.n_verify_steps, st.acceptance, st.n_drafted, st.n_accepted,
                st.n_reuse_accepted, st.n_reuse_drafted, st.n_plain_steps, st.draft_ms, st.n_graph_rows ? 100.0 * (double)st.n_pad_rows / (double)st.n_graph_rows : 0.0,
                (long long)st.n_graph_rows, why[st.stop_reason >= 0 && st.stop_reason < 6 ? st.stop_reason : 0], (double)st.prepared_bytes / 1048576.0,
                st.prepare_ms, (double)st.peak_rss_bytes / 1048576.0);
    }
    if (stats_json && rc >= 0) {
        FILE *jf = fopen(stats_json, "w");
        if (!jf) {
            fprintf(stderr, "sdnpu: cannot write '%s'\n", stats_json);
            code = 1;
        } else {
            fprintf(jf,
                    "{\"method\": \"%s\", \"prompt_tokens\": %d, \"generated\": %d, \"prefill_ms\": %.3f, "
                    "\"decode_ms\": %.3f, \"prompt_tokens_per_s\": %.3f, \"gen_tokens_per_s\": %.3f, "
                    "\"verify_steps\": %d, \"acceptance\": %.4f, \"drafted\": %d, \"accepted\": %d, "
                    "\"reuse_drafted\": %d, \"reuse_accepted\": %d, \"adaptive\": %s, \"plain_steps\": %d, "
                    "\"draft_ms\": %.3f, \"verify_ms\": %.3f, \"stop_reason\": %d, \"graph_rows\": %lld, "
                    "\"pad_rows\": %lld, \"prepared_bytes\": %zu, \"prepare_ms\": %.3f, \"peak_rss_bytes\": %zu}\n",
                    gp.spec ? gp.spec : "none", st.n_prompt_tokens, st.n_generated, st.prefill_ms, st.decode_ms,
                    st.prompt_tokens_per_s, st.gen_tokens_per_s, st.n_verify_steps, st.acceptance, st.n_drafted,
                    st.n_accepted, st.n_reuse_drafted, st.n_reuse_accepted, gp.adaptive ? "true" : "false",
                    st.n_plain_steps, st.draft_ms, st.verify_ms, st.stop_reason, (long long)st.n_graph_rows,
                    (long long)st.n_pad_rows, st.prepared_bytes, st.prepare_ms, st.peak_rss_bytes);
            fclose(jf);
        }
    }
    sdnpu_session_free(s);
    sdnpu_model_free(model);
    free(owned);
    free(wrapped);
    return code;
}

int cli_run(int argc, char **argv) { return run_main(argc, argv, false); }
int cli_summarize(int argc, char **argv) { return run_main(argc, argv, true); }
