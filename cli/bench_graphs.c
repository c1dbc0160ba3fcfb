/* cli/bench_graphs.c - `sdnpu bench graphs`: what the static-graph runtime
 * costs on a model, beside llama.cpp in the same run.
 *
 *   prefill   tokens/s on a 1,024-token prompt (chunks of L1 on G1)
 *   decode    one-row decoding tokens/s (the G0 graph, cpu-vanilla), best
 *             of --repeat rounds of 32 steps: with the logits (as a caller
 *             that samples reads them), and as greedy decoding steps
 *             (verify/step.c: the head's argmax alone, certified where the
 *             model has a certificate, graphs/cert.h)
 *   verify    per-token cost of a verification batch of L rows (G2 with
 *             the head over every row) relative to one row
 *   memory    prepared bytes and peak resident memory with G0, G1 and G2
 *   roofline  this machine's read bandwidth and int8 peak, measured in the
 *             same run (cli/roofline.c), and each verification pass's
 *             achieved bytes/s and multiply-adds/s as shares of them
 *
 * llama.cpp runs through bench/peer_graphs.py in the test virtual
 * environment (.venv-test, or $SDNPU_PEER_PYTHON) as a child process, and
 * with --native also as its own llama-bench (built once by
 * bench/peer_native.sh): prefill of 1,024 and 4,096 tokens and decoding;
 * with --native-amx, on a CPU with AMX, also as llama-bench built with
 * ggml's AMX kernels (bench/peer_native.sh --amx), the peer of sdnpu's
 * tile kernels.
 *
 * The engines take turns: --repeat rounds, each one measurement of every
 * figure by sdnpu, then by the peer, then by llama-bench. The machines
 * this is measured on change speed by up to 2x over minutes, so a ratio
 * of two engines measured minutes apart says as much about the minute as
 * about the engines; taken in turns, each engine's best round comes from
 * the same stretch of time, and each round's own ratio is printed as a
 * range beside the ratio of the bests. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "cli.h"
#include "engine/tools.h"

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: sdnpu bench graphs [-m MODEL] [-t THREADS] [--backend NAME] [--n-verify L] [--verify-at N]\n"
        "                          [--repeat N] [--kernels fast|ggml] [--head auto|exact|certified]\n"
        "                          [--no-peer] [--native] [--native-amx] [--json OUT]\n"
        "  prefill of 1,024 tokens, one-row decoding (32 steps), verification cost at L (default 32)\n"
        "  after N tokens of context (--verify-at, default 512, up to the model's context: a\n"
        "  document's length makes attention part of the cost) relative to 1 row, and memory with\n"
        "  the prefill and decode graphs prepared; with llama.cpp (llama-cpp-python in .venv-test;\n"
        "  --native also its own llama-bench; --native-amx that and llama-bench with ggml's AMX\n"
        "  kernels, on a CPU with AMX) on the same model and threads. --repeat N rounds\n"
        "  (default 5), the engines in turn within each: the best round of each engine counts\n"
        "  (the median for verification), and the range of the rounds' own ratios is shown\n");
}

/* What one pass over the model reads and computes per row: the weight
 * bytes of every layer and the head, and the multiply-adds of their
 * matrix products (attention over the cache comes on top: attn_macs). */
struct pass_size {
    double weight_bytes, macs_per_row;
};

static void add_weight(struct pass_size *p, const struct sd_weight *w) {
    p->weight_bytes += (double)w->n_out * (double)w->row_bytes;
    p->macs_per_row += (double)w->n_out * (double)w->n_in;
}

static struct pass_size pass_size(const struct sd_model *m) {
    struct pass_size p = {0, 0};
    for (int32_t il = 0; il < m->cfg.n_layer; il++) {
        const struct sd_layer *L = &m->layers[il];
        const struct sd_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < SD_ARRAY_LEN(ws); i++) add_weight(&p, ws[i]);
    }
    add_weight(&p, &m->output);
    return p;
}

/* Multiply-adds of attention for one row at a context of ctx positions:
 * q.k and p.V for every head of every layer. */
static double attn_macs(const struct sd_model *m, int32_t ctx) {
    return 2.0 * m->cfg.n_layer * m->cfg.n_head * (double)m->cfg.head_dim * ctx;
}

/* The peer's GGUF dropped from the page cache and read whole, so that the
 * page cache holds it in large folios and llama.cpp's mapping of it can
 * take 2 MiB pages, as sdnpu's weight cache does (graphs/wcache.c): a
 * file left in 4 KiB folios decodes 15-36% slower (docs/benchmarks.md,
 * "The weight cache's pages in the page cache"). */
static void peer_file_fresh(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    static char buf[1 << 21];
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    while (read(fd, buf, sizeof buf) > 0) {
    }
    close(fd);
}

/* One round's figures, -1 where not measured: sdnpu's (tokens/s, and the
 * verification passes in ms) ... */
enum our_fig { O_PREFILL, O_LONG, O_DECODE, O_GREEDY, O_V1, O_VL, O_N };
/* ... and llama.cpp's: llama-cpp-python's (bench/peer_graphs.py), then
 * llama-bench's, then those of llama-bench with AMX (in llama-bench's
 * order: native_round fills either three). */
enum their_fig {
    T_PREFILL,
    T_DECODE,
    T_V1,
    T_VL,
    T_RSS,
    T_PP1024,
    T_PP4096,
    T_TG64,
    T_AMX_PP1024,
    T_AMX_PP4096,
    T_AMX_TG64,
    T_N
};
enum { MAX_ROUNDS = 100 };

/* The directory of llama.cpp's own programs, which bench/peer_native.sh
 * builds the first time (minutes; with amx, its build with ggml's AMX
 * kernels); false where it cannot. */
static bool find_native(char *bindir, size_t cap, bool amx) {
    *bindir = 0;
    char sbuf[4096], qs[4200], cmd[4300], line[8192];
    const char *script = cli_find_path("bench/peer_native.sh", sbuf, sizeof sbuf);
    if (!script) return false;
    cli_shell_quote(qs, sizeof qs, script);
    snprintf(cmd, sizeof cmd, "bash %s%s", qs, amx ? " --amx" : "");
    fprintf(stderr, "finding llama.cpp's native programs (bench/peer_native.sh%s)...\n", amx ? " --amx" : "");
    FILE *pp = popen(cmd, "r");
    while (pp && fgets(line, sizeof line, pp))
        if (strlen(line) < cap) memcpy(bindir, line, strlen(line) + 1);
    if (!pp || pclose(pp) != 0 || !*bindir) {
        fprintf(stderr, "sdnpu bench graphs: no native llama.cpp%s (bench/peer_native.sh failed)\n",
                amx ? " with AMX" : "");
        return false;
    }
    bindir[strcspn(bindir, "\n")] = 0;
    return true;
}

/* One round of llama-bench (its own warm-up, then one run of each test) on
 * the same model and threads: tokens/s of prefill at 1,024 tokens, at
 * 4,096 with long_too, and of decoding 64, into fig's pp1024, pp1024 + 1
 * and pp1024 + 2 (T_PP1024 or T_AMX_PP1024; left as they are where
 * missing). */
static void native_round(const char *bindir, const char *model_path, long threads, bool long_too, double *fig,
                         enum their_fig pp1024) {
    char qb[4200], qe[4300], qm[4200], exe[4200], cmd[16384], line[8192];
    snprintf(exe, sizeof exe, "%s/llama-bench", bindir);
    cli_shell_quote(qb, sizeof qb, bindir);
    cli_shell_quote(qe, sizeof qe, exe);
    cli_shell_quote(qm, sizeof qm, model_path);
    snprintf(cmd, sizeof cmd, "LD_LIBRARY_PATH=%s %s -m %s -t %ld -p %s -n 64 -r 1 -o jsonl 2>/dev/null", qb,
             qe, qm, threads, long_too ? "1024,4096" : "1024");
    fprintf(stderr, "running llama-bench (native llama.cpp%s)...\n", pp1024 == T_AMX_PP1024 ? ", AMX" : "");
    FILE *pp = popen(cmd, "r");
    while (pp && fgets(line, sizeof line, pp)) {
        const double np_ = cli_json_num(line, "n_prompt"), ng = cli_json_num(line, "n_gen"), ts = cli_json_num(line, "avg_ts");
        if (np_ == 1024 && ng == 0) fig[pp1024] = ts;
        if (np_ == 4096 && ng == 0) fig[pp1024 + 1] = ts;
        if (np_ == 0 && ng == 64) fig[pp1024 + 2] = ts;
    }
    if (pp) pclose(pp);
}

/* The largest of a figure's rounds (tokens/s; for peak RSS the peak of
 * them all), over the rounds that measured it; -1 where none did. */
static double best_of(const double *r, long n) {
    double b = -1;
    for (long i = 0; i < n; i++)
        if (r[i] > 0 && r[i] > b) b = r[i];
    return b;
}
/* Its median (the upper middle of an even count), likewise. */
static double median_of(const double *r, long n) {
    double v[MAX_ROUNDS];
    long k = 0;
    for (long i = 0; i < n; i++)
        if (r[i] > 0) v[k++] = r[i];
    if (!k) return -1;
    qsort(v, (size_t)k, sizeof *v, cmp_d);
    return v[k / 2];
}

/* The ratio of sdnpu's figure to the peer's in each round that measured
 * both: its smallest and largest (lo = hi = -1 where none did). */
struct range {
    double lo, hi;
};
static struct range round_ratios(const double *ours, const double *theirs, long n) {
    struct range g = {-1, -1};
    for (long i = 0; i < n; i++) {
        if (!(ours[i] > 0 && theirs[i] > 0)) continue;
        const double q = ours[i] / theirs[i];
        if (g.lo < 0 || q < g.lo) g.lo = q;
        if (g.hi < 0 || q > g.hi) g.hi = q;
    }
    return g;
}

/* Table cells of a peer's figure (scaled by div) and of sdnpu's over it,
 * with the range of the rounds' own ratios where there were several: "-"
 * where the peer was not run or did not report it. */
struct cells {
    char v[32], r[64];
};
static const struct cells *peer_cells(struct cells *c, const char *fmt, double peer, double div, double ours,
                                      struct range g) {
    if (!(peer > 0)) {
        snprintf(c->v, sizeof c->v, "-");
        snprintf(c->r, sizeof c->r, "-");
        return c;
    }
    snprintf(c->v, sizeof c->v, fmt, peer / div);
    if (g.lo > 0 && g.hi > g.lo)
        snprintf(c->r, sizeof c->r, "%.2fx (rounds %.2f-%.2f)", ours / peer, g.lo, g.hi);
    else
        snprintf(c->r, sizeof c->r, "%.2fx", ours / peer);
    return c;
}
static const struct range k_no_range = {-1, -1};

/* 1,024+ tokens of real text: the sample document, repeated. */
static int prompt_tokens(struct sdnpu_model *model, int32_t *out, int32_t n) {
    char buf[4096];
    const char *doc = cli_find_path("examples/data/sample.txt", buf, sizeof buf);
    size_t len = 0;
    char *text = doc ? cli_read_file(doc, &len) : NULL;
    if (!text) return -1;
    int32_t have = 0;
    sdnpu_token *tmp = malloc(sizeof *tmp * 8192);
    while (have < n && tmp) {
        size_t nt = 0;
        if (sdnpu_tokenize(model, text, len, have == 0 ? SDNPU_TOKENIZE_ADD_SPECIAL : 0, tmp, 8192, &nt) != SDNPU_OK ||
            nt == 0)
            break;
        for (size_t i = 0; i < nt && have < n; i++) out[have++] = tmp[i];
    }
    free(tmp);
    free(text);
    return have == n ? 0 : -1;
}

enum { N_PROMPT = 1024, N_LONG = 4096, N_DECODE = 64 };

/* sdnpu's side of a round: one session with every graph prepared, the
 * prompt's tokens, and where a failure's message is. */
struct ours {
    struct sdnpu_session *s;
    struct sd_rt *rt;
    const int32_t *toks;
    int32_t nv, at, Lv;
    bool long_fits; /* the context holds the 4,096-token prompt */
    struct sd_err e;
    const char *why; /* the failure's message */
};

/* Prefill of the first n tokens from an empty context: tokens/s. */
static int our_prefill(struct ours *b, int32_t n, double *tps) {
    sdnpu_session_reset(b->s);
    const double t0 = sd_time_ms();
    if (sdnpu_session_eval(b->s, b->toks, n, NULL, 0)) return (b->why = sdnpu_session_last_error(b->s)), 1;
    *tps = n / ((sd_time_ms() - t0) / 1e3);
    return 0;
}

/* N_DECODE / 2 one-row steps after the prompt the session holds, greedy:
 * with the logits (as a caller that samples reads them), then from the
 * same point as `sdnpu run --temp 0` takes them (the head's argmax alone,
 * certified where the model has a certificate); tokens/s of each. The
 * session is left at the prompt's end. */
static int our_decode(struct ours *b, double *decode_tps, double *greedy_tps) {
    const int32_t after = sdnpu_session_n_past(b->s), first = sd_amax_of(sd_tool_session_logits(b->s), b->nv);
    double t0 = sd_time_ms();
    for (int32_t i = 0, tok = first; i < N_DECODE / 2; i++) {
        if (sdnpu_session_eval(b->s, &tok, 1, NULL, 0)) return (b->why = sdnpu_session_last_error(b->s)), 1;
        tok = sd_amax_of(sd_tool_session_logits(b->s), b->nv);
    }
    *decode_tps = (N_DECODE / 2) / ((sd_time_ms() - t0) / 1e3);
    sd_tool_session_rewind(b->s, after);
    t0 = sd_time_ms();
    for (int32_t i = 0, p = after, tok = first, am[1]; i < N_DECODE / 2; i++, p++) {
        const struct sd_row row = {.token = tok, .pos = p, .slot = p, .n_prefix = p + 1};
        if (sd_rt_decode_greedy(b->rt, &row, 1, p, false, am, &b->e)) return (b->why = b->e.msg), 1;
        tok = am[0];
    }
    *greedy_tps = (N_DECODE / 2) / ((sd_time_ms() - t0) / 1e3);
    sd_tool_session_rewind(b->s, after);
    return 0;
}

/* Verification after `at` tokens: a chain of Lv draft rows, and one row,
 * as greedy decoding and verification run them (verify/step.c: the rows'
 * greedy tokens taken by the head, no logits kept); ms of each. */
static int our_verify(struct ours *b, double *v1, double *vL) {
    if (our_prefill(b, b->at, &(double){0})) return 1;
    struct sd_row rows[64];
    memset(rows, 0, sizeof rows);
    for (int32_t r = 0; r < b->Lv; r++) {
        rows[r].token = b->toks[b->at + r];
        rows[r].pos = rows[r].slot = b->at + r;
        rows[r].n_prefix = b->at + r + 1;
    }
    int32_t am[64];
    /* Two pairs, the second's times kept: the first passes after a prefill
     * find the decode graphs' buffers out of the caches (the peer does the
     * same). */
    for (int pass = 0; pass < 2; pass++) {
        const double t0 = sd_time_ms();
        if (sd_rt_decode_greedy(b->rt, rows, 1, b->at, false, am, &b->e)) return (b->why = b->e.msg), 1;
        const double t1 = sd_time_ms();
        if (sd_rt_decode_greedy(b->rt, rows, b->Lv, b->at, true, am, &b->e)) return (b->why = b->e.msg), 1;
        *vL = sd_time_ms() - t1;
        *v1 = t1 - t0;
        sd_rt_kv_truncate(b->rt, b->at);
    }
    return 0;
}

/* One round of every sdnpu figure into fig[O_*] (the 4,096-token prefill
 * with long_too). */
static int our_round(struct ours *b, bool long_too, double *fig) {
    if (long_too && b->long_fits && our_prefill(b, N_LONG, &fig[O_LONG])) return 1;
    if (our_prefill(b, N_PROMPT, &fig[O_PREFILL])) return 1;
    if (our_decode(b, &fig[O_DECODE], &fig[O_GREEDY])) return 1;
    return our_verify(b, &fig[O_V1], &fig[O_VL]);
}

/* llama-cpp-python's side (bench/peer_graphs.py, one measurement of each
 * figure a run) on the prompt's first N_PROMPT tokens, written to a file
 * for it: the command in cmd, false where there is no peer. */
struct peer {
    char cmd[16384], tokfile[64];
};
static bool peer_open(struct peer *p, const char *model_path, const int32_t *toks, long threads, long Lv,
                      int32_t at) {
    char pybuf[4096], scriptbuf[4096], qpy[4200], qs[4200], qm[4200];
    const char *py = getenv("SDNPU_PEER_PYTHON");
    if (!py || !*py) py = cli_find_path(".venv-test/bin/python", pybuf, sizeof pybuf);
    const char *script = cli_find_path("bench/peer_graphs.py", scriptbuf, sizeof scriptbuf);
    snprintf(p->tokfile, sizeof p->tokfile, "/tmp/sdnpu-bench-graphs-%d.txt", (int)getpid());
    FILE *tf = py && script ? fopen(p->tokfile, "w") : NULL;
    if (!tf) {
        fprintf(stderr,
                "sdnpu bench graphs: no peer (.venv-test with llama-cpp-python; scripts/setup --test)\n");
        return false;
    }
    for (int i = 0; i < N_PROMPT; i++)
        fprintf(tf, "%d\n", toks[i]);
    fclose(tf);
    cli_shell_quote(qpy, sizeof qpy, py);
    cli_shell_quote(qs, sizeof qs, script);
    cli_shell_quote(qm, sizeof qm, model_path);
    snprintf(p->cmd, sizeof p->cmd, "%s %s %s %s %ld %ld 1 %d", qpy, qs, qm, p->tokfile, threads, Lv,
             (int)at);
    return true;
}

static void peer_round(const struct peer *p, double *fig) {
    fprintf(stderr, "running llama.cpp (llama-cpp-python)...\n");
    FILE *pp = popen(p->cmd, "r");
    char line[4096];
    while (pp && fgets(line, sizeof line, pp)) {
        if (line[0] != '{') continue;
        fig[T_PREFILL] = cli_json_num(line, "prefill_tok_s");
        fig[T_DECODE] = cli_json_num(line, "decode_tok_s");
        fig[T_V1] = cli_json_num(line, "verify1_ms");
        fig[T_VL] = cli_json_num(line, "verifyL_ms");
        fig[T_RSS] = cli_json_num(line, "peak_rss_bytes");
    }
    if (pp && pclose(pp) != 0) fprintf(stderr, "sdnpu bench graphs: the peer failed\n");
}

struct graphs_opts {
    const char *model_path, *json, *backend, *kernels, *head;
    long threads, Lv, repeat, at;
    bool peer, native, native_amx;
};

#define OPT(field) CLI_AT(struct graphs_opts, field)
static const struct cli_flag k_flags[] = {
    {"-m", NULL, CLI_STR, OPT(model_path)},
    {"-t", NULL, CLI_INT, OPT(threads), .lo = 1, .hi = 256},
    {"--backend", NULL, CLI_STR, OPT(backend)},
    {"--n-verify", NULL, CLI_INT, OPT(Lv), .lo = 2, .hi = 64},
    {"--verify-at", NULL, CLI_INT, OPT(at), .lo = 16, .hi = 131072},
    {"--repeat", NULL, CLI_INT, OPT(repeat), .lo = 1, .hi = MAX_ROUNDS},
    {"--kernels", NULL, CLI_STR, OPT(kernels)},
    {"--head", NULL, CLI_CHOICE, OPT(head), .choices = cli_head_choices},
    {"--no-peer", NULL, CLI_CONST, OPT(peer), .lo = false},
    {"--native", NULL, CLI_CONST, OPT(native), .lo = true},
    {"--native-amx", NULL, CLI_CONST, OPT(native_amx), .lo = true},
    {"--json", NULL, CLI_STR, OPT(json)},
    {0},
};

/* The table and the JSON of a run's rounds: ours[O_*][round],
 * theirs[T_*][round]. */
struct report {
    const char *model_path, *json, *backend_desc, *head;
    long threads, Lv, rounds;
    int32_t at;
    bool native, native_amx, peers; /* llama-bench asked for (and with AMX); any peer run */
    double prepare_ms;
    size_t prepared, rss;
    struct pass_size ps;
    double attn1, attnL; /* attention's multiply-adds a row at L=1 and at Lv */
    struct cli_roofline roof;
};

/* sdnpu's figures against the peers': the table's rows (llama-bench's
 * with --native only, with AMX with --native-amx only) and the JSON's
 * round_ratios. */
enum peer_kind { K_PY, K_NATIVE, K_NATIVE_AMX };
struct pair {
    const char *what, *json, *target;
    enum our_fig ours;
    enum their_fig theirs;
    enum peer_kind kind;
};
static const struct pair k_pairs[] = {
    {"prefill, 1,024-token prompt", "prefill", ">= 1.0x", O_PREFILL, T_PREFILL, K_PY},
    {"one-row decode", "decode", ">= 1.0x", O_DECODE, T_DECODE, K_PY},
    {"prefill, 1,024 tokens, llama-bench", "pp1024", ">= 1.5x", O_PREFILL, T_PP1024, K_NATIVE},
    {"prefill, 4,096 tokens, llama-bench", "pp4096", ">= 1.5x", O_LONG, T_PP4096, K_NATIVE},
    {"one-row decode, llama-bench tg64", "tg64", ">= 1.2x", O_DECODE, T_TG64, K_NATIVE},
    {"greedy decoding step (argmax), llama-bench tg64", "greedy_tg64", "", O_GREEDY, T_TG64, K_NATIVE},
    {"prefill, 1,024 tokens, llama-bench with AMX", "amx_pp1024", ">= 1.5x", O_PREFILL, T_AMX_PP1024,
     K_NATIVE_AMX},
    {"prefill, 4,096 tokens, llama-bench with AMX", "amx_pp4096", ">= 1.5x", O_LONG, T_AMX_PP4096,
     K_NATIVE_AMX},
    {"one-row decode, llama-bench with AMX tg64", "amx_tg64", "", O_DECODE, T_AMX_TG64, K_NATIVE_AMX},
};

/* A figure of tokens/s for the table: "-" where not measured. */
static const char *tok_s(char buf[32], double v) {
    if (v > 0)
        snprintf(buf, 32, "%.1f", v);
    else
        snprintf(buf, 32, "-");
    return buf;
}

static void print_table(const struct report *R, const double (*ours)[MAX_ROUNDS],
                        const double (*theirs)[MAX_ROUNDS]) {
    const long n = R->rounds;
    const double greedy = best_of(ours[O_GREEDY], n), lng = best_of(ours[O_LONG], n);
    const double v1 = median_of(ours[O_V1], n), vL = median_of(ours[O_VL], n);
    const double p_v1 = median_of(theirs[T_V1], n), p_vL = median_of(theirs[T_VL], n);
    struct cells c;
    char buf[32];
    printf("\nsdnpu bench graphs: %s, %ld threads, backend %s, head %s, %ld rounds%s\n\n", R->model_path,
           R->threads, R->backend_desc, R->head, n, R->peers ? ", the engines in turn" : "");
    printf("| measure | sdnpu | llama.cpp | sdnpu / llama.cpp | target |\n|---|---|---|---|---|\n");
    for (size_t i = 0; i < SD_ARRAY_LEN(k_pairs); i++) {
        const struct pair *q = &k_pairs[i];
        if ((q->kind == K_NATIVE && !R->native) || (q->kind == K_NATIVE_AMX && !R->native_amx)) continue;
        const double v = best_of(ours[q->ours], n);
        peer_cells(&c, "%.1f", best_of(theirs[q->theirs], n), 1, v,
                   round_ratios(ours[q->ours], theirs[q->theirs], n));
        printf("| %s (tok/s) | %s | %s | %s | %s |\n", q->what, tok_s(buf, v), c.v, v > 0 ? c.r : "-",
               q->target);
    }
    if (!R->native) {
        printf("| greedy decoding step (argmax) (tok/s) | %s | | | |\n", tok_s(buf, greedy));
        printf("| prefill, 4,096-token prompt (tok/s) | %s | | | |\n", tok_s(buf, lng));
    }
    printf("| verification L=1 after %d tokens (ms) | %.2f | %s | | |\n", (int)R->at, v1,
           peer_cells(&c, "%.2f", p_v1, 1, v1, k_no_range)->v);
    printf("| verification L=%ld after %d tokens (ms) | %.2f | %s | | |\n", R->Lv, (int)R->at, vL,
           peer_cells(&c, "%.2f", p_vL, 1, vL, k_no_range)->v);
    const double ratio = (vL / (double)R->Lv) / v1,
                 p_ratio = p_v1 > 0 && p_vL > 0 ? (p_vL / (double)R->Lv) / p_v1 : -1;
    char pr[48] = "-";
    if (p_ratio > 0) snprintf(pr, sizeof pr, "%.3f (1/%.1f)", p_ratio, 1 / p_ratio);
    printf("| per-token cost at L=%ld / L=1 | %.3f (1/%.1f) | %s | | <= 1/6 |\n", R->Lv, ratio, 1 / ratio,
           pr);
    printf("| prepared graphs (MiB) | %.0f | | | |\n", (double)R->prepared / 1048576.0);
    peer_cells(&c, "%.0f", best_of(theirs[T_RSS], n), 1048576.0, (double)R->rss, k_no_range);
    printf("| peak RSS (MiB) | %.0f%s | %s | %s | |\n", (double)R->rss / 1048576.0,
           R->roof.rss_reset ? "" : " (with the roofline's buffer)", c.v, c.r);
}

/* Achieved rates of the two verification passes against the roofline. */
static void print_roofline(const struct report *R, double v1, double vL) {
    const struct cli_roofline *rf = &R->roof;
    const double floor_ms = R->ps.weight_bytes / (rf->read_gb_s * 1e9) * 1e3;
    const double gb1 = R->ps.weight_bytes / (v1 / 1e3) / 1e9, gbL = R->ps.weight_bytes / (vL / 1e3) / 1e9;
    const double mac1 = (R->ps.macs_per_row + R->attn1) / (v1 / 1e3) / 1e9;
    const double macL = (double)R->Lv * (R->ps.macs_per_row + R->attnL) / (vL / 1e3) / 1e9;
    printf("\nroofline: read bandwidth %.1f GB/s, int8 peak %.0f G multiply-adds/s (%s; %ld threads, this "
           "run); one pass "
           "reads %.0f MB of weights (floor %.2f ms) and does %.0f M multiply-adds a row\n\n",
           rf->read_gb_s, rf->int8_gmac_s, rf->int8_how ? rf->int8_how : "not measured on this CPU",
           R->threads, R->ps.weight_bytes / 1e6, floor_ms, R->ps.macs_per_row / 1e6);
    printf("| pass | ms | x bandwidth floor | GB/s | share of bandwidth | G multiply-adds/s | share of int8 "
           "peak |\n"
           "|---|---:|---:|---:|---:|---:|---:|\n");
    printf("| L=1 | %.2f | %.2f | %.1f | %.0f%% | %.1f | %.1f%% |\n", v1, v1 / floor_ms, gb1,
           100 * gb1 / rf->read_gb_s, mac1, rf->int8_gmac_s > 0 ? 100 * mac1 / rf->int8_gmac_s : 0);
    printf("| L=%ld | %.2f | %.2f | %.1f | %.0f%% | %.1f | %.1f%% |\n", R->Lv, vL, vL / floor_ms, gbL,
           100 * gbL / rf->read_gb_s, macL, rf->int8_gmac_s > 0 ? 100 * macL / rf->int8_gmac_s : 0);
}

static void json_range(FILE *f, const char *key, struct range g) {
    fprintf(f, "\"%s\": [%.4f, %.4f]", key, g.lo, g.hi);
}

/* Every round's figures, as "name": [round 1, round 2, ...] (-1 where not
 * measured). */
static void json_rounds(FILE *f, const char *what, const char *const *names, const double (*fig)[MAX_ROUNDS],
                        int nf, long n) {
    fprintf(f, " \"%s\": {", what);
    for (int k = 0; k < nf; k++) {
        fprintf(f, "%s\"%s\": [", k ? ", " : "", names[k]);
        for (long r = 0; r < n; r++)
            fprintf(f, "%s%.3f", r ? ", " : "", fig[k][r]);
        fprintf(f, "]");
    }
    fprintf(f, "},\n");
}
static const char *const k_our_names[O_N] = {"prefill_tok_s", "prefill4096_tok_s", "decode_tok_s",
                                             "greedy_tok_s",  "verify1_ms",        "verifyL_ms"};
static const char *const k_their_names[T_N] = {"prefill_tok_s",  "decode_tok_s", "verify1_ms", "verifyL_ms",
                                               "peak_rss_bytes", "pp1024",       "pp4096",     "tg64",
                                               "amx_pp1024",     "amx_pp4096",   "amx_tg64"};

static int write_json(const struct report *R, const double (*ours)[MAX_ROUNDS],
                      const double (*theirs)[MAX_ROUNDS]) {
    FILE *jf = fopen(R->json, "w");
    if (!jf) {
        fprintf(stderr, "sdnpu bench graphs: cannot write %s\n", R->json);
        return 1;
    }
    const long n = R->rounds;
    const double v1 = median_of(ours[O_V1], n), vL = median_of(ours[O_VL], n);
    const double p_v1 = median_of(theirs[T_V1], n), p_vL = median_of(theirs[T_VL], n);
    const double floor_ms = R->ps.weight_bytes / (R->roof.read_gb_s * 1e9) * 1e3;
    fprintf(
        jf,
        "{\"model\": \"%s\", \"threads\": %ld, \"backend\": \"%s\", \"n_verify\": %ld, \"verify_at\": %d, "
        "\"prepare_ms\": %.1f, \"rounds\": %ld,\n"
        " \"sdnpu\": {\"prefill_tok_s\": %.2f, \"decode_tok_s\": %.2f, \"greedy_tok_s\": %.2f, \"head\": "
        "\"%s\", "
        "\"verify1_ms\": %.3f, \"verifyL_ms\": %.3f, \"verify_cost_ratio\": %.4f, \"prepared_bytes\": %zu, "
        "\"peak_rss_bytes\": %zu},\n"
        " \"llama_cpp\": {\"prefill_tok_s\": %.2f, \"decode_tok_s\": %.2f, \"verify1_ms\": %.3f, "
        "\"verifyL_ms\": "
        "%.3f, \"verify_cost_ratio\": %.4f, \"peak_rss_bytes\": %.0f},\n"
        " \"sdnpu_long\": {\"prefill4096_tok_s\": %.2f}, \"llama_bench\": {\"pp1024\": %.2f, \"pp4096\": "
        "%.2f, "
        "\"tg64\": %.2f},\n"
        " \"llama_bench_amx\": {\"pp1024\": %.2f, \"pp4096\": %.2f, \"tg64\": %.2f},\n",
        R->model_path, R->threads, R->backend_desc, R->Lv, (int)R->at, R->prepare_ms, n,
        best_of(ours[O_PREFILL], n), best_of(ours[O_DECODE], n), best_of(ours[O_GREEDY], n), R->head, v1, vL,
        (vL / (double)R->Lv) / v1, R->prepared, R->rss, best_of(theirs[T_PREFILL], n),
        best_of(theirs[T_DECODE], n), p_v1, p_vL, p_v1 > 0 && p_vL > 0 ? (p_vL / (double)R->Lv) / p_v1 : -1,
        best_of(theirs[T_RSS], n), best_of(ours[O_LONG], n), best_of(theirs[T_PP1024], n),
        best_of(theirs[T_PP4096], n), best_of(theirs[T_TG64], n), best_of(theirs[T_AMX_PP1024], n),
        best_of(theirs[T_AMX_PP4096], n), best_of(theirs[T_AMX_TG64], n));
    /* Each round's own ratio of sdnpu to the peer, smallest and largest. */
    fprintf(jf, " \"round_ratios\": {");
    for (size_t i = 0; i < SD_ARRAY_LEN(k_pairs); i++) {
        fprintf(jf, "%s", i ? ", " : "");
        json_range(jf, k_pairs[i].json, round_ratios(ours[k_pairs[i].ours], theirs[k_pairs[i].theirs], n));
    }
    fprintf(jf, "},\n");
    json_rounds(jf, "rounds_sdnpu", k_our_names, ours, O_N, n);
    json_rounds(jf, "rounds_llama_cpp", k_their_names, theirs, T_N, n);
    fprintf(jf,
            " \"roofline\": {\"read_gb_s\": %.2f, \"int8_gmac_s\": %.1f, \"int8_how\": \"%s\", "
            "\"weight_bytes\": %.0f, "
            "\"floor_ms\": %.3f, \"L1_gb_s\": %.2f, \"L1_gmac_s\": %.2f, \"L_gb_s\": %.2f, \"L_gmac_s\": "
            "%.2f}}\n",
            R->roof.read_gb_s, R->roof.int8_gmac_s, R->roof.int8_how ? R->roof.int8_how : "",
            R->ps.weight_bytes, floor_ms, R->ps.weight_bytes / (v1 / 1e3) / 1e9,
            (R->ps.macs_per_row + R->attn1) / (v1 / 1e3) / 1e9, R->ps.weight_bytes / (vL / 1e3) / 1e9,
            (double)R->Lv * (R->ps.macs_per_row + R->attnL) / (vL / 1e3) / 1e9);
    fclose(jf);
    return 0;
}

/* The session of sdnpu's side, every graph prepared first (the timings are
 * of runs only): its preparation's ms, or -1 with the message said. */
static double open_session(struct sdnpu_model *model, const struct graphs_opts *o, int32_t n_toks,
                           struct ours *b) {
    struct sdnpu_session_params sp = sdnpu_session_default_params();
    sp.n_ctx = n_toks + 2 * N_DECODE; /* past the model's own context: the session says so */
    sp.n_verify = (int32_t)o->Lv;
    sp.backend = o->backend;
    sp.kernels = o->kernels;
    cli_weight_cache(&sp, o->model_path);
    if (sdnpu_session_create(model, sp, &b->s)) {
        fprintf(stderr, "sdnpu bench graphs: %s\n", sdnpu_model_last_error(model));
        return -1;
    }
    b->rt = sd_tool_session_rt(b->s);
    b->long_fits = sdnpu_session_n_ctx(b->s) >= N_LONG;
    if (!b->long_fits)
        fprintf(stderr,
                "the model's context (%d tokens) is too short for the %d-token prefill: not measured\n",
                (int)sdnpu_session_n_ctx(b->s), N_LONG);
    const double tp = sd_time_ms();
    for (int set = 0; set < SD_SET_N; set++)
        if (sd_rt_prepare_set(b->rt, (enum sd_graph_set)set, &b->e)) {
            fprintf(stderr, "sdnpu bench graphs: %s\n", b->e.msg);
            return -1;
        }
    const double ms = sd_time_ms() - tp;
    char gr[32] = "";
    if (sd_rt_set_rows(b->rt, SD_SET_GR) > 0)
        snprintf(gr, sizeof gr, ", GR (L=%d)", (int)sd_rt_set_rows(b->rt, SD_SET_GR));
    fprintf(stderr, "backend: %s | prepared G1 (L=%d), G2 (L=%ld), G0 (L=1)%s and heads in %.0f ms\n",
            sd_rt_backend_desc(b->rt), sd_rt_n_prefill(b->rt), o->Lv, gr, ms);
    return ms;
}

/* The rounds, each engine in turn: sdnpu, llama-cpp-python, llama-bench.
 * The 4,096-token prefill only in the first half of them (each takes
 * seconds to minutes). */
static int run_rounds(struct ours *b, const struct graphs_opts *o, const struct peer *peer,
                      const char *bindir, const char *bindir_amx, double (*ours)[MAX_ROUNDS],
                      double (*theirs)[MAX_ROUNDS]) {
    for (long r = 0; r < o->repeat; r++) {
        const bool long_too = r < (o->repeat + 1) / 2;
        fprintf(stderr, "round %ld of %ld: sdnpu...\n", r + 1, o->repeat);
        double fig[O_N], tf[T_N];
        for (int k = 0; k < O_N; k++)
            fig[k] = -1;
        for (int k = 0; k < T_N; k++)
            tf[k] = -1;
        if (our_round(b, long_too, fig)) {
            fprintf(stderr, "sdnpu bench graphs: %s\n", b->why);
            return 1;
        }
        if (peer) peer_round(peer, tf);
        if (bindir) native_round(bindir, o->model_path, o->threads, long_too, tf, T_PP1024);
        if (bindir_amx) native_round(bindir_amx, o->model_path, o->threads, long_too, tf, T_AMX_PP1024);
        for (int k = 0; k < O_N; k++)
            ours[k][r] = fig[k];
        for (int k = 0; k < T_N; k++)
            theirs[k][r] = tf[k];
    }
    return 0;
}

int cli_bench_graphs(int argc, char **argv) {
    struct graphs_opts o = {.threads = 2, .Lv = 32, .repeat = 5, .at = 512, .peer = true};
    const struct cli_parser parser = {"sdnpu bench graphs", usage, {{k_flags, &o}}, .style = CLI_STYLE_BENCH};
    int parsed = cli_parse_flags(&parser, argc, argv);
    if (parsed != CLI_PARSED) return parsed;
    o.model_path = cli_model(o.model_path);
    /* The machine first, with nothing else of ours in memory. */
    struct report R = {.model_path = o.model_path,
                       .json = o.json,
                       .threads = o.threads,
                       .Lv = o.Lv,
                       .rounds = o.repeat,
                       .at = (int32_t)o.at,
                       .native = o.native || o.native_amx,
                       .native_amx = o.native_amx};
    fprintf(stderr, "measuring this machine's read bandwidth and int8 peak (%ld threads)...\n", o.threads);
    if (cli_roofline((int)o.threads, &R.roof)) {
        fprintf(stderr, "sdnpu bench graphs: cannot measure the machine's limits\n");
        return 1;
    }
    struct sdnpu_model_params mp = sdnpu_model_default_params();
    mp.n_threads = (int32_t)o.threads;
    mp.head = o.head;
    struct sdnpu_model *model = NULL;
    struct ours b = {.at = R.at, .Lv = (int32_t)o.Lv};
    struct peer peer;
    bool have_peer = false;
    char err[512], bindir[4096], bindir_amx[4096];
    int ret = 1;
    /* The prompts, and a context of `at` tokens with the verified rows after it. */
    const int32_t n_toks = SD_MAX(N_LONG, R.at + (int32_t)o.Lv);
    int32_t *toks = malloc(sizeof *toks * (size_t)(n_toks + N_DECODE));
    static double ours[O_N][MAX_ROUNDS], theirs[T_N][MAX_ROUNDS];
    if (sdnpu_model_load(o.model_path, mp, &model, err, sizeof err)) {
        fprintf(stderr, "sdnpu bench graphs: %s\n", err);
        free(toks);
        return 1;
    }
    if (!toks || prompt_tokens(model, toks, n_toks)) {
        fprintf(stderr, "sdnpu bench graphs: cannot make a %d-token prompt from examples/data/sample.txt\n", n_toks);
        goto done;
    }
    b.toks = toks;
    b.nv = sdnpu_model_n_vocab(model);
    if ((R.prepare_ms = open_session(model, &o, n_toks, &b)) < 0) goto done;
    if (o.peer || R.native) peer_file_fresh(o.model_path);
    have_peer = o.peer && peer_open(&peer, o.model_path, toks, o.threads, o.Lv, R.at);
    const bool have_native = R.native && find_native(bindir, sizeof bindir, false);
    const bool have_amx = R.native_amx && find_native(bindir_amx, sizeof bindir_amx, true);
    if (run_rounds(&b, &o, have_peer ? &peer : NULL, have_native ? bindir : NULL,
                   have_amx ? bindir_amx : NULL, ours, theirs))
        goto done;
    R.peers = have_peer || have_native || have_amx;
    R.backend_desc = sd_rt_backend_desc(b.rt);
    R.head = sd_tool_model_head(model);
    R.prepared = sd_rt_prepared_bytes(b.rt);
    R.rss = sd_peak_rss();
    const struct sd_model *mw = sd_tool_model_weights(model);
    R.ps = pass_size(mw);
    R.attn1 = attn_macs(mw, R.at);
    R.attnL = attn_macs(mw, R.at + (int32_t)o.Lv / 2);
    print_table(&R, (const double(*)[MAX_ROUNDS])ours, (const double(*)[MAX_ROUNDS])theirs);
    print_roofline(&R, median_of(ours[O_V1], o.repeat), median_of(ours[O_VL], o.repeat));
    ret = o.json ? write_json(&R, (const double(*)[MAX_ROUNDS])ours, (const double(*)[MAX_ROUNDS])theirs) : 0;
done:
    if (have_peer) remove(peer.tokfile);
    free(toks);
    sdnpu_session_free(b.s);
    sdnpu_model_free(model);
    return ret;
}
