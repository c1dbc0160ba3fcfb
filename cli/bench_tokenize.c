/* cli/bench_tokenize.c - `sdnpu bench tokenize`: encode and decode one text
 * (default: the license texts in /usr/share/common-licenses, concatenated
 * and repeated to 4 MiB) and, when the test virtual environment is there
 * ($SDNPU_PEER_PYTHON, or .venv-test/bin/python in the current directory
 * or the source tree), run bench/peer_tokenize.py on the same text and
 * model so llama.cpp's numbers print beside ours, and its token ids are
 * compared with ours. The library never calls Python; only this command
 * runs it, as a child process. */
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
    (void)flag;
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

/* One engine's figures. */
struct tok_numbers {
    double load_ms, encode_mb_s, decode_mb_s, tokens_per_s;
    size_t n_tokens, decoded_bytes;
};

/* A run: the options, the text and what each side measured. */
struct tok_run {
    struct tokenize_opts o;
    char *text;
    size_t len;
    char text_desc[1100];
    struct sd_gguf *g;
    struct sd_vocab *v;
    struct sd_tokvec tv; /* our ids */
    struct tok_numbers us, them;
    bool round_trip, have_peer;
    int ids_same; /* -1: not compared */
    char why_no_peer[256];
};

static unsigned tok_flags(const struct tok_run *r) {
    return r->o.special ? (SD_TOK_ADD_SPECIAL | SD_TOK_PARSE_SPECIAL) : 0;
}

/* The whole text encoded into r->tv, in one call or a line a call. */
static int encode_all(struct tok_run *r, struct sd_err *err) {
    r->tv.n = 0;
    for (size_t at = 0; at < r->len;) {
        size_t end = r->len;
        const char *nl = r->o.lines ? memchr(r->text + at, '\n', r->len - at) : NULL;
        if (nl) end = (size_t)(nl - r->text) + 1;
        int rc = sd_tokenize(r->v, r->text + at, end - at, tok_flags(r), &r->tv, err);
        if (rc) return rc;
        at = end;
    }
    return SDNPU_OK;
}

/* Our side: the vocabulary's load, the best of --repeat encodings and
 * decodings, and whether decoding gives the text back. */
static int measure_ours(struct tok_run *r) {
    struct sd_err err;
    sd_err_clear(&err);
    double t0 = sd_time_ms();
    if (sd_gguf_open(r->o.model, true, &r->g, &err) || sd_vocab_load(r->g, &r->v, &err)) {
        fprintf(stderr, "sdnpu bench tokenize: %s: %s\n", r->o.model, err.msg);
        return 1;
    }
    r->us.load_ms = sd_time_ms() - t0;
    double best = 1e300;
    for (int k = 0; k < r->o.repeat; k++) {
        double t = sd_time_ms();
        if (encode_all(r, &err)) {
            fprintf(stderr, "sdnpu bench tokenize: %s\n", err.msg);
            return 1;
        }
        best = SD_MIN(best, sd_time_ms() - t);
    }
    r->us.n_tokens = r->tv.n;
    r->us.encode_mb_s = (double)r->len / (best * 1e-3) / 1e6;
    r->us.tokens_per_s = (double)r->tv.n / (best * 1e-3);
    int64_t need = sd_detokenize(r->v, r->tv.ids, r->tv.n, r->o.special, NULL, 0);
    size_t cap = (size_t)(need < 0 ? -need : need) + 1;
    char *dec = malloc(cap);
    if (!dec) return 1;
    best = 1e300;
    for (int k = 0; k < r->o.repeat; k++) {
        double t = sd_time_ms();
        need = sd_detokenize(r->v, r->tv.ids, r->tv.n, r->o.special, dec, cap);
        best = SD_MIN(best, sd_time_ms() - t);
    }
    r->us.decoded_bytes = need > 0 ? (size_t)need : 0;
    r->us.decode_mb_s = (double)r->us.decoded_bytes / (best * 1e-3) / 1e6;
    r->round_trip = !r->o.special && r->us.decoded_bytes == r->len && !memcmp(dec, r->text, r->len);
    free(dec);
    return 0;
}

/* A temporary file made from templ (mkstemp's), holding n bytes of p
 * (none where p is NULL); false where it could not be made. */
static bool temp_file(char *templ, const void *p, size_t n) {
    int fd = mkstemp(templ);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    bool ok = f && (!p || fwrite(p, 1, n, f) == n);
    if (f)
        fclose(f);
    else if (fd >= 0)
        close(fd);
    if (!ok && fd >= 0) unlink(templ);
    if (!ok) templ[0] = '\0';
    return ok;
}

/* The peer's JSON line: its figures, and its ids (in ids_path) against
 * ours. */
static void read_peer_reply(struct tok_run *r, const char *line, const char *ids_path) {
    r->them.load_ms = cli_json_num(line, "load_ms");
    r->them.encode_mb_s = cli_json_num(line, "encode_mb_s");
    r->them.decode_mb_s = cli_json_num(line, "decode_mb_s");
    const double n_tokens = cli_json_num(line, "n_tokens");
    r->them.n_tokens = n_tokens >= 0 && n_tokens < 1e15 ? (size_t)n_tokens : 0;
    json_t *reply = json_loads(line, 0, NULL);
    double enc_best = 1e300;
    size_t k;
    json_t *x;
    json_array_foreach(json_object_get(reply, "encode_s"), k, x) {
        if (json_is_number(x)) enc_best = SD_MIN(enc_best, json_number_value(x));
    }
    json_decref(reply);
    if (enc_best < 1e300) r->them.tokens_per_s = (double)r->them.n_tokens / enc_best;
    r->ids_same = 0;
    FILE *f = fopen(ids_path, "rb");
    int32_t *ids = f && r->them.n_tokens == r->tv.n ? malloc(r->tv.n * sizeof *ids + 1) : NULL;
    if (ids && fread(ids, sizeof *ids, r->tv.n, f) == r->tv.n)
        r->ids_same = !memcmp(ids, r->tv.ids, r->tv.n * sizeof *ids);
    free(ids);
    if (f) fclose(f);
}

/* llama.cpp's side through bench/peer_tokenize.py on the same bytes (a
 * temporary copy where the text is not a file); why_no_peer says why
 * where it did not run. */
static void run_peer(struct tok_run *r) {
    char pybuf[1024], scriptbuf[1024], tmp_text[64] = "/tmp/sdnpu-bench-XXXXXX",
                                       tmp_ids[64] = "/tmp/sdnpu-bench-ids-XXXXXX";
    const char *py = getenv("SDNPU_PEER_PYTHON");
    if (!py || !*py) py = cli_find_path(".venv-test/bin/python", pybuf, sizeof pybuf);
    const char *script = cli_find_path("bench/peer_tokenize.py", scriptbuf, sizeof scriptbuf);
    if (!py || !script) {
        snprintf(r->why_no_peer, sizeof r->why_no_peer, "no %s",
                 !py ? "test venv (.venv-test/bin/python or $SDNPU_PEER_PYTHON)" : "bench/peer_tokenize.py");
        return;
    }
    const char *text_path = r->o.file;
    if (!text_path || !strcmp(text_path, "-")) {
        if (!temp_file(tmp_text, r->text, r->len)) {
            snprintf(r->why_no_peer, sizeof r->why_no_peer, "cannot write a copy of the text: %s",
                     strerror(errno));
            return;
        }
        text_path = tmp_text;
    }
    if (!temp_file(tmp_ids, NULL, 0)) {
        snprintf(r->why_no_peer, sizeof r->why_no_peer, "cannot make a file for its ids: %s",
                 strerror(errno));
    } else {
        char q[5][1100], cmd[6000], line[4096] = "";
        cli_shell_quote(q[0], sizeof q[0], py);
        cli_shell_quote(q[1], sizeof q[1], script);
        cli_shell_quote(q[2], sizeof q[2], r->o.model);
        cli_shell_quote(q[3], sizeof q[3], text_path);
        cli_shell_quote(q[4], sizeof q[4], tmp_ids);
        snprintf(cmd, sizeof cmd, "%s %s --model %s --file %s --repeat %d --ids-out %s%s%s", q[0], q[1], q[2],
                 q[3], r->o.repeat, q[4], r->o.special ? " --special" : "", r->o.lines ? " --lines" : "");
        fflush(stdout);
        FILE *p = popen(cmd, "r");
        if (!p) {
            snprintf(r->why_no_peer, sizeof r->why_no_peer, "cannot run %s: %s", py, strerror(errno));
        } else {
            while (fgets(line, sizeof line, p) && line[0] != '{') {
            }
            int st = pclose(p);
            if (st == 0 && line[0] == '{') {
                r->have_peer = true;
                read_peer_reply(r, line, tmp_ids);
            } else {
                snprintf(r->why_no_peer, sizeof r->why_no_peer, "peer failed (status %d)", st);
            }
        }
        unlink(tmp_ids);
    }
    if (tmp_text[0] && text_path == tmp_text) unlink(tmp_text);
}

/* One row of the table: ours, and theirs with their ratio where the peer ran. */
static void print_row(const struct tok_run *r, const char *what, const char *fmt, double ours, double theirs,
                      double ratio) {
    char a[32], b[32];
    snprintf(a, sizeof a, fmt, ours);
    printf("%-18s %14s", what, a);
    if (r->have_peer) {
        snprintf(b, sizeof b, fmt, theirs);
        printf(" %14s %9.2fx", b, ratio);
    }
    printf("\n");
}

static void print_report(const struct tok_run *r) {
    const struct tok_numbers *u = &r->us, *t = &r->them;
    const char *mode = r->o.special ? (r->o.lines ? "BOS + special tokens parsed, line by line"
                                                  : "BOS + special tokens parsed")
                                    : (r->o.lines ? "plain text, line by line" : "plain text, one call");
    printf("bench tokenize: %s (%s, %d tokens, pre '%s')\n", r->o.model,
           sd_vocab_kind(r->v) == SD_VOCAB_SPM ? "SentencePiece BPE" : "byte-level BPE",
           sd_vocab_n_tokens(r->v), sd_vocab_pre(r->v));
    printf("text: %s, %.2f MB; %s; best of %d\n", r->text_desc, (double)r->len / 1e6, mode, r->o.repeat);
    printf("%-18s %14s %14s %10s\n", "", "sdnpu", r->have_peer ? "llama.cpp" : "",
           r->have_peer ? "ratio" : "");
    print_row(r, "vocab load (ms)", "%.1f", u->load_ms, t->load_ms, t->load_ms / u->load_ms);
    print_row(r, "encode (MB/s)", "%.2f", u->encode_mb_s, t->encode_mb_s, u->encode_mb_s / t->encode_mb_s);
    print_row(r, "encode (tokens/s)", "%.0f", u->tokens_per_s, t->tokens_per_s,
              u->tokens_per_s / t->tokens_per_s);
    print_row(r, "decode (MB/s)", "%.2f", u->decode_mb_s, t->decode_mb_s, u->decode_mb_s / t->decode_mb_s);
    printf("%-18s %14zu", "tokens", u->n_tokens);
    if (r->have_peer) printf(" %14zu %10s", t->n_tokens, r->ids_same == 1 ? "identical" : "DIFFER");
    printf("\n");
    if (!r->o.special)
        printf("round trip (decode(encode(text)) == text): %s\n", r->round_trip ? "yes" : "NO");
    if (!r->have_peer) printf("llama.cpp: not run (%s)\n", r->why_no_peer);
}

static json_t *numbers_json(const struct tok_numbers *n) {
    return json_pack("{s:f, s:f, s:f, s:f, s:I}", "load_ms", n->load_ms, "encode_mb_s", n->encode_mb_s,
                     "encode_tokens_s", n->tokens_per_s, "decode_mb_s", n->decode_mb_s, "n_tokens",
                     (json_int_t)n->n_tokens);
}

/* The numbers as JSON (jansson: every string escaped, the model's path and
 * the text's name included). */
static int write_json(const struct tok_run *r) {
    const struct tok_numbers *u = &r->us, *t = &r->them;
    json_t *ours = numbers_json(u);
    json_object_set_new(ours, "round_trip", r->o.special ? json_null() : json_boolean(r->round_trip));
    json_t *o =
        json_pack("{s:s, s:s, s:s, s:i, s:s, s:I, s:i, s:b, s:b, s:o}", "bench", "tokenize", "model",
                  r->o.model, "vocab_kind", sd_vocab_kind(r->v) == SD_VOCAB_SPM ? "spm" : "bpe", "n_vocab",
                  sd_vocab_n_tokens(r->v), "text", r->text_desc, "bytes", (json_int_t)r->len, "repeat",
                  r->o.repeat, "special", r->o.special, "lines", r->o.lines, "sdnpu", ours);
    if (r->have_peer) {
        json_object_set_new(o, "llama_cpp", numbers_json(t));
        json_object_set_new(o, "ratio",
                            json_pack("{s:f, s:f, s:f}", "encode", u->encode_mb_s / t->encode_mb_s, "decode",
                                      u->decode_mb_s / t->decode_mb_s, "load", t->load_ms / u->load_ms));
        json_object_set_new(o, "ids_identical", json_boolean(r->ids_same == 1));
    } else {
        json_object_set_new(o, "llama_cpp", json_null());
        json_object_set_new(o, "ids_identical", json_null());
    }
    if (!o) { /* jansson encodes UTF-8 strings only */
        fprintf(stderr,
                "sdnpu bench tokenize: cannot write %s: the model's or the text's name is not UTF-8\n",
                r->o.json);
        return 1;
    }
    int rc = json_dump_file(o, r->o.json, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
    json_decref(o);
    if (rc) fprintf(stderr, "sdnpu bench tokenize: cannot write %s: %s\n", r->o.json, strerror(errno));
    return rc ? 1 : 0;
}

/* The text: -f FILE, else the license texts. */
static int read_text(struct tok_run *r) {
    if (r->o.file) {
        if (!(r->text = cli_read_file(r->o.file, &r->len))) return 1;
        snprintf(r->text_desc, sizeof r->text_desc, "%s", r->o.file);
    } else {
        if (!(r->text = cli_license_text((size_t)4 << 20, &r->len))) {
            fprintf(stderr, "sdnpu bench tokenize: no /usr/share/common-licenses here; pass -f FILE\n");
            return 1;
        }
        snprintf(r->text_desc, sizeof r->text_desc, "license texts, repeated");
    }
    return 0;
}

int cli_bench_tokenize(int argc, char **argv) {
    struct tok_run r = {.o = {.repeat = 5, .peer = true}, .ids_same = -1, .why_no_peer = "--no-peer"};
    const struct cli_parser parser = {
        "sdnpu bench tokenize", tokenize_usage, {{k_tokenize_flags, &r.o}}, .style = CLI_STYLE_BENCH};
    int parsed = cli_parse_flags(&parser, argc, argv);
    if (parsed != CLI_PARSED) return parsed;
    if (r.o.repeat < 1) r.o.repeat = 1;
    r.o.model = cli_model(r.o.model);
    int ret = 1;
    if (!read_text(&r) && !measure_ours(&r)) {
        if (r.o.peer) run_peer(&r);
        print_report(&r);
        if (!r.o.json || !write_json(&r))
            ret = (r.have_peer && r.ids_same != 1) || (!r.o.special && !r.round_trip) ? 1 : 0;
    }
    free(r.text);
    sd_tokvec_free(&r.tv);
    sd_vocab_free(r.v);
    sd_gguf_close(r.g);
    return ret;
}
