/* cli/bench.c - `sdnpu bench KIND ...`: benchmarks that print a table and,
 * with --json, write their numbers to a file.
 *
 * Each kind is one entry of k_kinds; a new benchmark adds a function and a
 * line there. Timings are best-of-N wall-clock times of one thread.
 *
 *     sdnpu bench tokenize [-m MODEL] [-f FILE] [--repeat N] [--special]
 *                          [--lines] [--no-peer] [--json OUT]
 *
 * bench tokenize encodes and decodes one text (default: the license texts in
 * /usr/share/common-licenses, concatenated and repeated to 4 MiB) and, when
 * the test virtual environment is there ($SDNPU_PEER_PYTHON, or
 * .venv-test/bin/python in the current directory or the source tree), runs
 * bench/peer_tokenize.py on the same text and model so llama.cpp's numbers
 * print beside ours. The library never calls Python; only this command runs
 * it, as a child process. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "base/base.h"
#include "cli.h"
#include "gguf/gguf.h"
#include "tok/tokenizer.h"

struct bench_kind {
    const char *name;
    const char *help;
    int (*fn)(int argc, char **argv);
};

static int bench_tokenize(int argc, char **argv);

static const struct bench_kind k_kinds[] = {
    {"tokenize", "encode/decode speed of the tokenizer, beside llama.cpp's", bench_tokenize},
    {"graphs", "prefill, decode, verification cost and memory of the static graphs, beside llama.cpp", cli_bench_graphs},
    {"verify", "a verification pass of L rows against one row, after documents of several lengths", cli_bench_verify},
    {"policy", "what the cost-aware drafting decision costs a decoding step", cli_bench_policy},
    {"calib", "what in-context calibration costs prefill, and what its subset head gives up", cli_bench_calib},
    {"prefix", "time to the first token of a request on a document seen before (prefix reuse, prompt cache)",
     cli_bench_prefix},
    {"switch", "graph switching: time to the first decoded token and peak prepared memory, each mode", cli_bench_switch},
    {"state", "loading a saved session against prefilling its context again", cli_bench_state},
};

static void bench_usage(FILE *f) {
    fprintf(f, "usage: sdnpu bench KIND [options]   (sdnpu bench KIND -h for its options)\n\nkinds:\n");
    for (size_t i = 0; i < SD_ARRAY_LEN(k_kinds); i++)
        fprintf(f, "  %-12s %s\n", k_kinds[i].name, k_kinds[i].help);
}

int cli_bench(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        bench_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < SD_ARRAY_LEN(k_kinds); i++)
        if (!strcmp(argv[1], k_kinds[i].name)) return k_kinds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "sdnpu bench: unknown kind '%s'\n", argv[1]);
    bench_usage(stderr);
    return 2;
}

/* ------------------------------------------------------------- helpers */

static bool file_exists(const char *p) { return access(p, R_OK) == 0; }

/* Look for rel under the current directory, then under the source tree. */
const char *cli_find_path(const char *rel, char *buf, size_t cap) {
    if (file_exists(rel)) {
        snprintf(buf, cap, "%s", rel);
        return buf;
    }
#ifdef SDNPU_SOURCE_DIR
    snprintf(buf, cap, "%s/%s", SDNPU_SOURCE_DIR, rel);
    if (file_exists(buf)) return buf;
#endif
    return NULL;
}

/* Single-quote s for /bin/sh. */
void cli_shell_quote(char *out, size_t cap, const char *s) {
    size_t o = 0;
    if (o + 1 < cap) out[o++] = '\'';
    for (; *s && o + 5 < cap; s++) {
        if (*s == '\'') {
            memcpy(out + o, "'\\''", 4);
            o += 4;
        } else {
            out[o++] = *s;
        }
    }
    if (o + 1 < cap) out[o++] = '\'';
    out[o] = 0;
}

/* The number member key of object o, or -1 when o is NULL or has no such
 * number: a peer's figure it did not report. */
static double num_or_none(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : -1;
}

/* The number member key of the JSON object on line (jansson reads it), or
 * -1 when it has none or the line is no JSON object. */
double cli_json_num(const char *line, const char *key) {
    json_t *o = json_loads(line, 0, NULL);
    double v = num_or_none(o, key);
    json_decref(o);
    return v;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double cli_median(double *v, long n) {
    if (n <= 0) return 0.0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The first n tokens of the license texts. */
int32_t *cli_license_tokens(struct sdnpu_model *model, int32_t n) {
    size_t len = 0;
    char *text = cli_license_text((size_t)1 << 20, &len);
    size_t cap = len + 16, nt = 0;
    sdnpu_token *tok = text ? malloc(cap * sizeof *tok) : NULL;
    if (tok && (sdnpu_tokenize(model, text, len, SDNPU_TOKENIZE_ADD_SPECIAL, tok, cap, &nt) || nt < (size_t)n)) {
        free(tok);
        tok = NULL;
    }
    free(text);
    return tok;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The default text: every license text, sorted by name, concatenated and
 * repeated up to target bytes. Returns malloc'd text or NULL. */
char *cli_license_text(size_t target, size_t *len) {
    const char *dir = "/usr/share/common-licenses";
    DIR *d = opendir(dir);
    if (!d) return NULL;
    char *names[256];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 256)
        if (e->d_name[0] != '.') names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    char *all = NULL;
    size_t all_len = 0;
    for (int i = 0; i < n; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        free(names[i]);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        char chunk[65536];
        size_t r;
        while ((r = fread(chunk, 1, sizeof chunk, f)) > 0) {
            char *p = realloc(all, all_len + r);
            if (!p) break;
            all = p;
            memcpy(all + all_len, chunk, r);
            all_len += r;
        }
        fclose(f);
    }
    if (!all_len) {
        free(all);
        return NULL;
    }
    size_t reps = (target + all_len - 1) / all_len;
    char *text = malloc(all_len * reps);
    if (!text) {
        free(all);
        return NULL;
    }
    for (size_t i = 0; i < reps; i++)
        memcpy(text + i * all_len, all, all_len);
    free(all);
    *len = all_len * reps;
    return text;
}

/* ------------------------------------------------------------ tokenize */

struct tok_numbers {
    double load_ms, encode_mb_s, decode_mb_s, tokens_per_s;
    size_t n_tokens, decoded_bytes;
};

static void tokenize_usage(FILE *f) {
    fprintf(
        f,
        "usage: sdnpu bench tokenize [-m MODEL] [-f FILE] [--repeat N] [--special] [--lines] [--no-peer]\n"
        "                            [--json OUT]\n"
        "  -m MODEL     a GGUF model (default: %s)\n"
        "  -f FILE      the text (default: the license texts, repeated to 4 MiB)\n"
        "  --repeat N   runs of each measurement; the best counts (default 5)\n"
        "  --special    add BOS and parse special-token text (default: plain text)\n"
        "  --lines      encode each line (with its newline) in its own call (default: one call)\n"
        "  --no-peer    do not run llama.cpp beside sdnpu\n"
        "  --json OUT   also write the numbers to OUT\n",
        cli_default_model());
}

/* --repeat as bench tokenize has always read it: atoi's number. */
static int parse_repeat(const char *flag, const char *v, void *field) {
    *(int *)field = atoi(v);
    return 0;
}

struct tokenize_opts {
    const char *model, *file, *json;
    int repeat;
    bool special, peer, lines;
};

#define OPT(field) CLI_AT(struct tokenize_opts, field)
static const struct cli_flag k_tokenize_flags[] = {
    {"-m", NULL, CLI_STR, OPT(model)},
    {"-f", NULL, CLI_STR, OPT(file)},
    {"--json", NULL, CLI_STR, OPT(json)},
    {"--repeat", NULL, CLI_FN, OPT(repeat), .fn = parse_repeat},
    {"--special", NULL, CLI_CONST, OPT(special), .lo = true},
    {"--no-peer", NULL, CLI_CONST, OPT(peer), .lo = false},
    {"--lines", NULL, CLI_CONST, OPT(lines), .lo = true},
    {0},
};

static int bench_tokenize(int argc, char **argv) {
    struct tokenize_opts o = {.repeat = 5, .peer = true};
    const struct cli_parser parser = {
        "sdnpu bench tokenize", tokenize_usage, {{k_tokenize_flags, &o}}, .style = CLI_STYLE_BENCH};
    int parsed = cli_parse_flags(&parser, argc, argv);
    if (parsed != CLI_PARSED) return parsed;
    const char *model = o.model, *file = o.file, *json = o.json;
    int repeat = o.repeat;
    const bool special = o.special, peer = o.peer, lines = o.lines;
    if (repeat < 1) repeat = 1;
    model = cli_model(model);

    int ret = 1;
    char *text = NULL, *dec = NULL;
    size_t len = 0;
    char tmp_text[64] = "", tmp_ids[64] = "", text_desc[1100];
    struct sd_gguf *g = NULL;
    struct sd_vocab *v = NULL;
    struct sd_tokvec tv = {0};
    int32_t *peer_ids = NULL;
    struct sd_err err;
    sd_err_clear(&err);

    if (file) {
        if (!(text = cli_read_file(file, &len))) return 1;
        snprintf(text_desc, sizeof text_desc, "%s", file);
    } else {
        if (!(text = cli_license_text((size_t)4 << 20, &len))) {
            fprintf(stderr, "sdnpu bench tokenize: no /usr/share/common-licenses here; pass -f FILE\n");
            return 1;
        }
        snprintf(text_desc, sizeof text_desc, "license texts, repeated");
    }

    /* ---- sdnpu */
    struct tok_numbers us = {0};
    double t0 = sd_time_ms();
    if (sd_gguf_open(model, true, &g, &err) || sd_vocab_load(g, &v, &err)) {
        fprintf(stderr, "sdnpu bench tokenize: %s: %s\n", model, err.msg);
        goto done;
    }
    us.load_ms = sd_time_ms() - t0;
    unsigned flags = special ? (SD_TOK_ADD_SPECIAL | SD_TOK_PARSE_SPECIAL) : 0;
    double best = 1e300;
    for (int r = 0; r < repeat; r++) {
        tv.n = 0;
        double t = sd_time_ms();
        for (size_t at = 0; at < len;) {
            size_t end = len;
            if (lines) {
                const char *nl = memchr(text + at, '\n', len - at);
                if (nl) end = (size_t)(nl - text) + 1;
            }
            if (sd_tokenize(v, text + at, end - at, flags, &tv, &err)) {
                fprintf(stderr, "sdnpu bench tokenize: %s\n", err.msg);
                goto done;
            }
            at = end;
        }
        best = SD_MIN(best, sd_time_ms() - t);
    }
    us.n_tokens = tv.n;
    us.encode_mb_s = (double)len / (best * 1e-3) / 1e6;
    us.tokens_per_s = (double)tv.n / (best * 1e-3);
    int64_t need = sd_detokenize(v, tv.ids, tv.n, special, NULL, 0);
    size_t dec_cap = (size_t)(need < 0 ? -need : need) + 1;
    if (!(dec = malloc(dec_cap))) goto done;
    best = 1e300;
    for (int r = 0; r < repeat; r++) {
        double t = sd_time_ms();
        need = sd_detokenize(v, tv.ids, tv.n, special, dec, dec_cap);
        best = SD_MIN(best, sd_time_ms() - t);
    }
    us.decoded_bytes = need > 0 ? (size_t)need : 0;
    us.decode_mb_s = (double)us.decoded_bytes / (best * 1e-3) / 1e6;
    bool round_trip = !special && us.decoded_bytes == len && !memcmp(dec, text, len);
    const char *mode =
        special ? (lines ? "BOS + special tokens parsed, line by line" : "BOS + special tokens parsed")
                : (lines ? "plain text, line by line" : "plain text, one call");

    /* ---- llama.cpp */
    struct tok_numbers them = {0};
    bool have_peer = false;
    int ids_same = -1; /* unknown */
    char why_no_peer[256] = "--no-peer";
    if (peer) {
        char pybuf[1024], scriptbuf[1024];
        const char *py = getenv("SDNPU_PEER_PYTHON");
        if (!py || !*py) py = cli_find_path(".venv-test/bin/python", pybuf, sizeof pybuf);
        const char *script = cli_find_path("bench/peer_tokenize.py", scriptbuf, sizeof scriptbuf);
        if (!py || !script) {
            snprintf(why_no_peer, sizeof why_no_peer, "no %s",
                     !py ? "test venv (.venv-test/bin/python or $SDNPU_PEER_PYTHON)"
                         : "bench/peer_tokenize.py");
        } else {
            const char *text_path = file;
            if (!text_path || !strcmp(text_path, "-")) { /* the peer reads the same bytes from a file */
                snprintf(tmp_text, sizeof tmp_text, "/tmp/sdnpu-bench-XXXXXX");
                int fd = mkstemp(tmp_text);
                FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
                if (!f || fwrite(text, 1, len, f) != len) {
                    fprintf(stderr, "sdnpu bench tokenize: cannot write %s\n", tmp_text);
                    if (f) fclose(f);
                    goto done;
                }
                fclose(f);
                text_path = tmp_text;
            }
            snprintf(tmp_ids, sizeof tmp_ids, "/tmp/sdnpu-bench-ids-XXXXXX");
            int fd = mkstemp(tmp_ids);
            if (fd >= 0) close(fd);
            char q[5][1100], cmd[6000];
            cli_shell_quote(q[0], sizeof q[0], py);
            cli_shell_quote(q[1], sizeof q[1], script);
            cli_shell_quote(q[2], sizeof q[2], model);
            cli_shell_quote(q[3], sizeof q[3], text_path);
            cli_shell_quote(q[4], sizeof q[4], tmp_ids);
            snprintf(cmd, sizeof cmd, "%s %s --model %s --file %s --repeat %d --ids-out %s%s%s", q[0], q[1],
                     q[2], q[3], repeat, q[4], special ? " --special" : "", lines ? " --lines" : "");
            fflush(stdout);
            FILE *p = popen(cmd, "r");
            char line[4096] = "";
            if (p) {
                while (fgets(line, sizeof line, p) && line[0] != '{') {
                }
                int st = pclose(p);
                if (st == 0 && line[0] == '{') {
                    have_peer = true;
                    json_t *reply = json_loads(line, 0, NULL);
                    them.load_ms = num_or_none(reply, "load_ms");
                    them.encode_mb_s = num_or_none(reply, "encode_mb_s");
                    them.decode_mb_s = num_or_none(reply, "decode_mb_s");
                    them.n_tokens = (size_t)num_or_none(reply, "n_tokens");
                    them.decoded_bytes = (size_t)num_or_none(reply, "decoded_bytes");
                    double enc_best = 1e300;
                    size_t k;
                    json_t *x;
                    json_array_foreach(json_object_get(reply, "encode_s"), k, x) {
                        if (json_is_number(x)) enc_best = SD_MIN(enc_best, json_number_value(x));
                    }
                    json_decref(reply);
                    if (enc_best < 1e300) them.tokens_per_s = (double)them.n_tokens / enc_best;
                    FILE *f = fopen(tmp_ids, "rb");
                    if (f && them.n_tokens == tv.n) {
                        peer_ids = malloc(tv.n * sizeof *peer_ids + 1);
                        ids_same = peer_ids && fread(peer_ids, sizeof *peer_ids, tv.n, f) == tv.n &&
                                   !memcmp(peer_ids, tv.ids, tv.n * sizeof *peer_ids);
                    } else {
                        ids_same = 0;
                    }
                    if (f) fclose(f);
                } else {
                    snprintf(why_no_peer, sizeof why_no_peer, "peer failed (status %d)", st);
                }
            } else {
                snprintf(why_no_peer, sizeof why_no_peer, "cannot run %s: %s", py, strerror(errno));
            }
        }
    }

    /* ---- report */
    printf("bench tokenize: %s (%s, %d tokens, pre '%s')\n", model,
           sd_vocab_kind(v) == SD_VOCAB_SPM ? "SentencePiece BPE" : "byte-level BPE", sd_vocab_n_tokens(v),
           sd_vocab_pre(v));
    printf("text: %s, %.2f MB; %s; best of %d\n", text_desc, (double)len / 1e6, mode, repeat);
    printf("%-18s %14s %14s %10s\n", "", "sdnpu", have_peer ? "llama.cpp" : "", have_peer ? "ratio" : "");
    printf("%-18s %14.1f", "vocab load (ms)", us.load_ms);
    if (have_peer) printf(" %14.1f %9.2fx", them.load_ms, them.load_ms / us.load_ms);
    printf("\n%-18s %14.2f", "encode (MB/s)", us.encode_mb_s);
    if (have_peer) printf(" %14.2f %9.2fx", them.encode_mb_s, us.encode_mb_s / them.encode_mb_s);
    printf("\n%-18s %14.0f", "encode (tokens/s)", us.tokens_per_s);
    if (have_peer) printf(" %14.0f %9.2fx", them.tokens_per_s, us.tokens_per_s / them.tokens_per_s);
    printf("\n%-18s %14.2f", "decode (MB/s)", us.decode_mb_s);
    if (have_peer) printf(" %14.2f %9.2fx", them.decode_mb_s, us.decode_mb_s / them.decode_mb_s);
    printf("\n%-18s %14zu", "tokens", us.n_tokens);
    if (have_peer) printf(" %14zu %10s", them.n_tokens, ids_same == 1 ? "identical" : "DIFFER");
    printf("\n");
    if (!special) printf("round trip (decode(encode(text)) == text): %s\n", round_trip ? "yes" : "NO");
    if (!have_peer) printf("llama.cpp: not run (%s)\n", why_no_peer);

    if (json) {
        FILE *f = fopen(json, "w");
        if (!f) {
            fprintf(stderr, "sdnpu bench tokenize: cannot write %s: %s\n", json, strerror(errno));
            goto done;
        }
        fprintf(f,
                "{\n  \"bench\": \"tokenize\",\n  \"model\": \"%s\",\n  \"vocab_kind\": \"%s\",\n"
                "  \"n_vocab\": %d,\n  \"text\": \"%s\",\n  \"bytes\": %zu,\n  \"repeat\": %d,\n"
                "  \"special\": %s,\n  \"lines\": %s,\n",
                model, sd_vocab_kind(v) == SD_VOCAB_SPM ? "spm" : "bpe", sd_vocab_n_tokens(v), text_desc, len,
                repeat, special ? "true" : "false", lines ? "true" : "false");
        fprintf(f,
                "  \"sdnpu\": {\"load_ms\": %.3f, \"encode_mb_s\": %.3f, \"encode_tokens_s\": %.0f, "
                "\"decode_mb_s\": %.3f, \"n_tokens\": %zu, \"round_trip\": %s},\n",
                us.load_ms, us.encode_mb_s, us.tokens_per_s, us.decode_mb_s, us.n_tokens,
                special      ? "null"
                : round_trip ? "true"
                             : "false");
        if (have_peer) {
            fprintf(f,
                    "  \"llama_cpp\": {\"load_ms\": %.3f, \"encode_mb_s\": %.3f, \"encode_tokens_s\": %.0f, "
                    "\"decode_mb_s\": %.3f, \"n_tokens\": %zu},\n"
                    "  \"ratio\": {\"encode\": %.3f, \"decode\": %.3f, \"load\": %.3f},\n"
                    "  \"ids_identical\": %s\n}\n",
                    them.load_ms, them.encode_mb_s, them.tokens_per_s, them.decode_mb_s, them.n_tokens,
                    us.encode_mb_s / them.encode_mb_s, us.decode_mb_s / them.decode_mb_s,
                    them.load_ms / us.load_ms, ids_same == 1 ? "true" : "false");
        } else {
            fprintf(f, "  \"llama_cpp\": null,\n  \"ids_identical\": null\n}\n");
        }
        fclose(f);
    }
    ret = (have_peer && ids_same != 1) || (!special && !round_trip) ? 1 : 0;
done:
    if (tmp_text[0]) unlink(tmp_text);
    if (tmp_ids[0]) unlink(tmp_ids);
    free(peer_ids);
    free(dec);
    free(text);
    sd_tokvec_free(&tv);
    sd_vocab_free(v);
    sd_gguf_close(g);
    return ret;
}
