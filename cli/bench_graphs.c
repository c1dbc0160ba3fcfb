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
 * bench/peer_native.sh): prefill of 1,024 and 4,096 tokens and decoding. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "engine/tools.h"

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void usage(FILE *f) {
    fprintf(f, "usage: sdnpu bench graphs [-m MODEL] [-t THREADS] [--backend NAME] [--n-verify L] [--verify-at N]\n"
               "                          [--repeat N] [--kernels fast|ggml] [--head auto|exact|certified] [--no-peer]\n"
               "                          [--native] [--json OUT]\n"
               "  prefill of 1,024 tokens (best of --repeat), one-row decoding (best of --repeat rounds of 32\n"
               "  steps), verification cost at L (default 32; median of --repeat) after N tokens of context\n"
               "  (--verify-at, default 512, up to the model's context: a document's length makes\n"
               "  attention part of the cost) relative to 1 row, and memory with the prefill and decode\n"
               "  graphs prepared; with llama.cpp (llama-cpp-python in .venv-test) on the same model and\n"
               "  threads\n");
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

/* llama.cpp's own llama-bench on the same model and threads: tokens/s of
 * prefill at 1,024 and 4,096 tokens and of decoding 64 (-1 where missing).
 * bench/peer_native.sh builds it the first time (minutes). */
struct native_peer {
    double pp1024, pp4096, tg64;
};

static void run_native(const char *model_path, long threads, struct native_peer *np) {
    np->pp1024 = np->pp4096 = np->tg64 = -1;
    char sbuf[4096], qs[4200], qm[4200], cmd[16384], line[8192], bindir[4096] = "";
    const char *script = cli_find_path("bench/peer_native.sh", sbuf, sizeof sbuf);
    if (!script) return;
    cli_shell_quote(qs, sizeof qs, script);
    snprintf(cmd, sizeof cmd, "bash %s", qs);
    fprintf(stderr, "finding llama.cpp's native programs (bench/peer_native.sh)...\n");
    FILE *pp = popen(cmd, "r");
    while (pp && fgets(line, sizeof line, pp))
        if (strlen(line) < sizeof bindir) memcpy(bindir, line, strlen(line) + 1);
    if (!pp || pclose(pp) != 0 || !*bindir) {
        fprintf(stderr, "sdnpu bench graphs: no native llama.cpp (bench/peer_native.sh failed)\n");
        return;
    }
    bindir[strcspn(bindir, "\n")] = 0;
    char qb[4200], qe[4300], exe[4200];
    snprintf(exe, sizeof exe, "%s/llama-bench", bindir);
    cli_shell_quote(qb, sizeof qb, bindir);
    cli_shell_quote(qe, sizeof qe, exe);
    cli_shell_quote(qm, sizeof qm, model_path);
    snprintf(cmd, sizeof cmd, "LD_LIBRARY_PATH=%s %s -m %s -t %ld -p 1024,4096 -n 64 -r 3 -o jsonl 2>/dev/null", qb, qe,
             qm, threads);
    fprintf(stderr, "running llama-bench (native llama.cpp)...\n");
    pp = popen(cmd, "r");
    while (pp && fgets(line, sizeof line, pp)) {
        const double np_ = cli_json_num(line, "n_prompt"), ng = cli_json_num(line, "n_gen"), ts = cli_json_num(line, "avg_ts");
        if (np_ == 1024 && ng == 0) np->pp1024 = ts;
        if (np_ == 4096 && ng == 0) np->pp4096 = ts;
        if (np_ == 0 && ng == 64) np->tg64 = ts;
    }
    if (pp) pclose(pp);
}

/* 1,024+ tokens of real text: the sample document, repeated. */
/* Table cells of a peer's figure (scaled by div) and of sdnpu over it:
 * "-" where the peer was not run or did not report it. */
struct cells {
    char v[32], r[32];
};
static const struct cells *peer_cells(struct cells *c, const char *fmt, double peer, double div, double ours) {
    if (!(peer > 0)) {
        snprintf(c->v, sizeof c->v, "-");
        snprintf(c->r, sizeof c->r, "-");
        return c;
    }
    snprintf(c->v, sizeof c->v, fmt, peer / div);
    snprintf(c->r, sizeof c->r, "%.2fx", ours / peer);
    return c;
}

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

struct graphs_opts {
    const char *model_path, *json, *backend, *kernels, *head;
    long threads, Lv, repeat, at;
    bool peer, native;
};

#define OPT(field) CLI_AT(struct graphs_opts, field)
static const struct cli_flag k_flags[] = {
    {"-m", NULL, CLI_STR, OPT(model_path)},
    {"-t", NULL, CLI_INT, OPT(threads), .lo = 1, .hi = 256},
    {"--backend", NULL, CLI_STR, OPT(backend)},
    {"--n-verify", NULL, CLI_INT, OPT(Lv), .lo = 2, .hi = 64},
    {"--verify-at", NULL, CLI_INT, OPT(at), .lo = 16, .hi = 131072},
    {"--repeat", NULL, CLI_INT, OPT(repeat), .lo = 1, .hi = 100},
    {"--kernels", NULL, CLI_STR, OPT(kernels)},
    {"--head", NULL, CLI_CHOICE, OPT(head), .choices = cli_head_choices},
    {"--no-peer", NULL, CLI_CONST, OPT(peer), .lo = false},
    {"--native", NULL, CLI_CONST, OPT(native), .lo = true},
    {"--json", NULL, CLI_STR, OPT(json)},
    {0},
};

int cli_bench_graphs(int argc, char **argv) {
    struct graphs_opts o = {.threads = 2, .Lv = 32, .repeat = 5, .at = 512, .peer = true};
    const struct cli_parser parser = {"sdnpu bench graphs", usage, {{k_flags, &o}}, .style = CLI_STYLE_BENCH};
    int parsed = cli_parse_flags(&parser, argc, argv);
    if (parsed != CLI_PARSED) return parsed;
    const char *model_path = o.model_path, *json = o.json, *backend = o.backend, *kernels = o.kernels;
    const long threads = o.threads, Lv = o.Lv, repeat = o.repeat;
    const int32_t at = (int32_t)o.at;
    model_path = cli_model(model_path);
    /* The machine first, with nothing else of ours in memory. */
    struct cli_roofline roof;
    fprintf(stderr, "measuring this machine's read bandwidth and int8 peak (%ld threads)...\n", threads);
    if (cli_roofline((int)threads, &roof)) {
        fprintf(stderr, "sdnpu bench graphs: cannot measure the machine's limits\n");
        return 1;
    }
    enum { N_PROMPT = 1024, N_LONG = 4096, N_DECODE = 64 };
    struct sdnpu_model_params mp = sdnpu_model_default_params();
    mp.n_threads = (int32_t)threads;
    mp.head = o.head;
    struct sdnpu_model *model = NULL;
    struct sdnpu_session *s = NULL;
    char err[512];
    int ret = 1, rc;
    /* The prompts, and a context of `at` tokens with the verified rows after it. */
    const int32_t n_toks = SD_MAX(N_LONG, at + (int32_t)Lv);
    int32_t *toks = malloc(sizeof *toks * (size_t)(n_toks + N_DECODE));
    float *logits = NULL;
    if ((rc = sdnpu_model_load(model_path, mp, &model, err, sizeof err))) {
        fprintf(stderr, "sdnpu bench graphs: %s\n", err);
        free(toks);
        return 1;
    }
    if (!toks || prompt_tokens(model, toks, n_toks)) {
        fprintf(stderr, "sdnpu bench graphs: cannot make a %d-token prompt from examples/data/sample.txt\n", n_toks);
        goto done;
    }
    struct sdnpu_session_params sp = sdnpu_session_default_params();
    sp.n_ctx = n_toks + 2 * N_DECODE; /* past the model's own context: the session says so */
    sp.n_verify = (int32_t)Lv;
    sp.backend = backend;
    sp.kernels = kernels;
    cli_weight_cache(&sp, model_path);
    if ((rc = sdnpu_session_create(model, sp, &s))) {
        fprintf(stderr, "sdnpu bench graphs: %s\n", sdnpu_model_last_error(model));
        goto done;
    }
    struct sd_rt *rt = sd_tool_session_rt(s);
    int32_t nv = sdnpu_model_n_vocab(model);
    logits = malloc((size_t)Lv * (size_t)nv * sizeof(float));
    if (!logits) goto done;
    /* Prepare every graph first: the timings below are of runs only. */
    struct sd_err e = {0};
    double tp = sd_time_ms();
    for (int set = 0; set < SD_SET_N; set++)
        if ((rc = sd_rt_prepare_set(rt, (enum sd_graph_set)set, &e))) {
            fprintf(stderr, "sdnpu bench graphs: %s\n", e.msg);
            goto done;
        }
    double prepare_ms = sd_time_ms() - tp;
    char gr[32] = "";
    if (sd_rt_set_rows(rt, SD_SET_GR) > 0) snprintf(gr, sizeof gr, ", GR (L=%d)", (int)sd_rt_set_rows(rt, SD_SET_GR));
    fprintf(stderr, "backend: %s | prepared G1 (L=%d), G2 (L=%ld), G0 (L=1)%s and heads in %.0f ms\n",
            sd_rt_backend_desc(rt), sd_rt_n_prefill(rt), Lv, gr, prepare_ms);

    /* Prefill: best of repeat runs of the whole prompt. */
    double best_prefill = 1e300;
    for (long r = 0; r < repeat; r++) {
        sdnpu_session_reset(s);
        double t0 = sd_time_ms();
        if ((rc = sdnpu_session_eval(s, toks, N_PROMPT, NULL, 0))) goto fail_eval;
        best_prefill = SD_MIN(best_prefill, sd_time_ms() - t0);
    }
    /* The long prompt: best of fewer runs (each takes seconds). */
    double best_long = 1e300;
    for (long r = 0; r < (repeat + 1) / 2; r++) {
        sdnpu_session_reset(s);
        double t0 = sd_time_ms();
        if ((rc = sdnpu_session_eval(s, toks, N_LONG, NULL, 0))) goto fail_eval;
        best_long = SD_MIN(best_long, sd_time_ms() - t0);
    }
    sdnpu_session_reset(s);
    if ((rc = sdnpu_session_eval(s, toks, N_PROMPT, NULL, 0))) goto fail_eval;
    /* Decode: greedy, one token per step, in `repeat` rounds of
     * N_DECODE / 2 steps after the prompt; the best round counts (this
     * machine's timings wander from run to run; the peer is timed alike). */
    double decode_ms = 1e300;
    int32_t after_prompt = sdnpu_session_n_past(s);
    for (long r = 0; r < repeat; r++) {
        double t0 = sd_time_ms();
        for (int i = 0; i < N_DECODE / 2; i++) {
            int32_t best = 0;
            const float *lg = sd_tool_session_logits(s);
            for (int32_t v = 1; v < nv; v++)
                if (lg[v] > lg[best]) best = v;
            if ((rc = sdnpu_session_eval(s, &best, 1, NULL, 0))) goto fail_eval;
        }
        decode_ms = SD_MIN(decode_ms, sd_time_ms() - t0);
        /* Back to the end of the prompt (and its logits) for the next round. */
        sd_tool_session_rewind(s, after_prompt - 1);
        if ((rc = sdnpu_session_eval(s, &toks[after_prompt - 1], 1, NULL, 0))) goto fail_eval;
    }
    /* Greedy steps as `sdnpu run --temp 0` takes them, from the same point. */
    double greedy_ms = 1e300;
    for (long r = 0; r < repeat && !rc; r++) {
        const float *lg = sd_tool_session_logits(s);
        int32_t tok = 0, am[1];
        for (int32_t v = 1; v < nv; v++)
            if (lg[v] > lg[tok]) tok = v;
        double t0 = sd_time_ms();
        for (int32_t i = 0, p = after_prompt; i < N_DECODE / 2; i++, p++) {
            const struct sd_row row = {.token = tok, .pos = p, .slot = p, .n_prefix = p + 1};
            if ((rc = sd_rt_decode_greedy(rt, &row, 1, p, false, am, &e))) break;
            tok = am[0];
        }
        greedy_ms = SD_MIN(greedy_ms, sd_time_ms() - t0);
        sd_rt_kv_truncate(rt, after_prompt);
    }
    if (rc) {
        fprintf(stderr, "sdnpu bench graphs: %s\n", e.msg);
        goto done;
    }
    /* Verification: a chain of Lv draft rows after the prompt vs one row. */
    sdnpu_session_reset(s);
    if ((rc = sdnpu_session_eval(s, toks, at, NULL, 0))) goto fail_eval;
    struct sd_row rows[64];
    memset(rows, 0, sizeof rows);
    for (int32_t r = 0; r < Lv; r++) {
        rows[r].token = toks[at + r];
        rows[r].pos = rows[r].slot = at + r;
        rows[r].n_prefix = at + r + 1;
    }
    double t1[100], tL[100];
    int32_t am[64];
    for (long r = 0; r < repeat; r++) {
        double a = sd_time_ms();
        if ((rc = sd_rt_decode_greedy(rt, rows, 1, at, false, am, &e))) break;
        double b = sd_time_ms();
        /* As greedy decoding and verification run them (verify/step.c):
         * the rows' greedy tokens taken by the head, no logits kept. */
        if ((rc = sd_rt_decode_greedy(rt, rows, (int32_t)Lv, at, true, am, &e))) break;
        tL[r] = sd_time_ms() - b;
        t1[r] = b - a;
        sd_rt_kv_truncate(rt, at);
    }
    if (rc) {
        fprintf(stderr, "sdnpu bench graphs: %s\n", e.msg);
        goto done;
    }
    qsort(t1, (size_t)repeat, sizeof *t1, cmp_d);
    qsort(tL, (size_t)repeat, sizeof *tL, cmp_d);
    double v1 = t1[repeat / 2], vL = tL[repeat / 2];
    double ratio = (vL / (double)Lv) / v1;
    double prefill_tps = N_PROMPT / (best_prefill / 1e3), decode_tps = (N_DECODE / 2) / (decode_ms / 1e3);
    const double greedy_tps = (N_DECODE / 2) / (greedy_ms / 1e3);
    const double long_tps = N_LONG / (best_long / 1e3);
    size_t prepared = sd_rt_prepared_bytes(rt), rss = sd_peak_rss();
    /* Achieved rates of the two verification passes (at `at` positions of context). */
    const struct pass_size ps = pass_size(sd_tool_model_weights(model));
    const double gb1 = ps.weight_bytes / (v1 / 1e3) / 1e9, gbL = ps.weight_bytes / (vL / 1e3) / 1e9;
    const double mac1 = (ps.macs_per_row + attn_macs(sd_tool_model_weights(model), at)) / (v1 / 1e3) / 1e9;
    const double macL = (double)Lv * (ps.macs_per_row + attn_macs(sd_tool_model_weights(model), at + (int32_t)Lv / 2)) / (vL / 1e3) / 1e9;
    const double floor_ms = ps.weight_bytes / (roof.read_gb_s * 1e9) * 1e3;

    /* llama.cpp on the same tokens. */
    double p_prefill = -1, p_decode = -1, p_v1 = -1, p_vL = -1, p_rss = -1;
    if (o.peer || o.native) peer_file_fresh(model_path);
    if (o.peer) {
        char pybuf[4096], scriptbuf[4096], cmd[16384], qpy[4200], qs[4200], qm[4200], tokfile[64];
        const char *py = getenv("SDNPU_PEER_PYTHON");
        if (!py || !*py) py = cli_find_path(".venv-test/bin/python", pybuf, sizeof pybuf);
        const char *script = cli_find_path("bench/peer_graphs.py", scriptbuf, sizeof scriptbuf);
        snprintf(tokfile, sizeof tokfile, "/tmp/sdnpu-bench-graphs-%d.txt", (int)getpid());
        FILE *tf = py && script ? fopen(tokfile, "w") : NULL;
        if (!tf) {
            fprintf(stderr, "sdnpu bench graphs: no peer (.venv-test with llama-cpp-python; scripts/setup --test)\n");
        } else {
            for (int i = 0; i < N_PROMPT; i++) fprintf(tf, "%d\n", toks[i]);
            fclose(tf);
            cli_shell_quote(qpy, sizeof qpy, py);
            cli_shell_quote(qs, sizeof qs, script);
            cli_shell_quote(qm, sizeof qm, model_path);
            snprintf(cmd, sizeof cmd, "%s %s %s %s %ld %ld %ld %d", qpy, qs, qm, tokfile, threads, Lv, repeat, (int)at);
            fprintf(stderr, "running llama.cpp (llama-cpp-python)...\n");
            FILE *pp = popen(cmd, "r");
            char line[4096];
            while (pp && fgets(line, sizeof line, pp)) {
                if (line[0] != '{') continue;
                p_prefill = cli_json_num(line, "prefill_tok_s");
                p_decode = cli_json_num(line, "decode_tok_s");
                p_v1 = cli_json_num(line, "verify1_ms");
                p_vL = cli_json_num(line, "verifyL_ms");
                p_rss = cli_json_num(line, "peak_rss_bytes");
            }
            if (pp && pclose(pp) != 0) fprintf(stderr, "sdnpu bench graphs: the peer failed\n");
            remove(tokfile);
        }
    }
    struct native_peer np = {-1, -1, -1};
    if (o.native) run_native(model_path, threads, &np);
    double p_ratio = p_v1 > 0 && p_vL > 0 ? (p_vL / (double)Lv) / p_v1 : -1;
    printf("\nsdnpu bench graphs: %s, %ld threads, backend %s\n\n", model_path, threads, sd_rt_backend_desc(rt));
    printf("| measure | sdnpu | llama.cpp | sdnpu / llama.cpp | target |\n|---|---|---|---|---|\n");
    struct cells c;
    peer_cells(&c, "%.1f", p_prefill, 1, prefill_tps);
    printf("| prefill, 1,024-token prompt (tok/s) | %.1f | %s | %s | >= 1.0x |\n", prefill_tps, c.v, c.r);
    peer_cells(&c, "%.1f", p_decode, 1, decode_tps);
    printf("| one-row decode (tok/s) | %.1f | %s | %s | >= 1.0x |\n", decode_tps, c.v, c.r);
    if (o.native) {
        peer_cells(&c, "%.1f", np.pp1024, 1, prefill_tps);
        printf("| prefill, 1,024 tokens, llama-bench (tok/s) | %.1f | %s | %s | >= 1.5x |\n", prefill_tps, c.v, c.r);
        peer_cells(&c, "%.1f", np.pp4096, 1, long_tps);
        printf("| prefill, 4,096 tokens, llama-bench (tok/s) | %.1f | %s | %s | >= 1.5x |\n", long_tps, c.v, c.r);
        peer_cells(&c, "%.1f", np.tg64, 1, decode_tps);
        printf("| one-row decode, llama-bench tg64 (tok/s) | %.1f | %s | %s | >= 1.2x |\n", decode_tps, c.v, c.r);
        peer_cells(&c, "%.1f", np.tg64, 1, greedy_tps);
        printf("| greedy decoding step (argmax, head %s), llama-bench tg64 (tok/s) | %.1f | %s | %s | |\n",
               sd_tool_model_head(model), greedy_tps, c.v, c.r);
    } else {
        printf("| greedy decoding step (argmax, head %s) (tok/s) | %.1f | | | |\n", sd_tool_model_head(model),
               greedy_tps);
        printf("| prefill, 4,096-token prompt (tok/s) | %.1f | | | |\n", long_tps);
    }
    printf("| verification L=1 after %d tokens (ms) | %.2f | %s | | |\n", (int)at, v1, peer_cells(&c, "%.2f", p_v1, 1, v1)->v);
    printf("| verification L=%ld after %d tokens (ms) | %.2f | %s | | |\n", Lv, (int)at, vL, peer_cells(&c, "%.2f", p_vL, 1, vL)->v);
    char pr[48] = "-";
    if (p_ratio > 0) snprintf(pr, sizeof pr, "%.3f (1/%.1f)", p_ratio, 1 / p_ratio);
    printf("| per-token cost at L=%ld / L=1 | %.3f (1/%.1f) | %s | | <= 1/6 |\n", Lv, ratio, 1 / ratio, pr);
    printf("| prepared graphs (MiB) | %.0f | | | |\n", (double)prepared / 1048576.0);
    peer_cells(&c, "%.0f", p_rss, 1048576.0, (double)rss);
    printf("| peak RSS (MiB) | %.0f | %s | %s | |\n", (double)rss / 1048576.0, c.v, c.r);
    printf("\nroofline: read bandwidth %.1f GB/s, int8 peak %.0f G multiply-adds/s (%s; %ld threads, this run); one pass "
           "reads %.0f MB of weights (floor %.2f ms) and does %.0f M multiply-adds a row\n\n",
           roof.read_gb_s, roof.int8_gmac_s, roof.int8_how ? roof.int8_how : "not measured on this CPU", threads,
           ps.weight_bytes / 1e6, floor_ms, ps.macs_per_row / 1e6);
    printf("| pass | ms | x bandwidth floor | GB/s | share of bandwidth | G multiply-adds/s | share of int8 peak |\n"
           "|---|---:|---:|---:|---:|---:|---:|\n");
    printf("| L=1 | %.2f | %.2f | %.1f | %.0f%% | %.1f | %.1f%% |\n", v1, v1 / floor_ms, gb1,
           100 * gb1 / roof.read_gb_s, mac1, roof.int8_gmac_s > 0 ? 100 * mac1 / roof.int8_gmac_s : 0);
    printf("| L=%ld | %.2f | %.2f | %.1f | %.0f%% | %.1f | %.1f%% |\n", Lv, vL, vL / floor_ms, gbL,
           100 * gbL / roof.read_gb_s, macL, roof.int8_gmac_s > 0 ? 100 * macL / roof.int8_gmac_s : 0);
    if (json) {
        FILE *jf = fopen(json, "w");
        if (!jf) {
            fprintf(stderr, "sdnpu bench graphs: cannot write %s\n", json);
            goto done;
        }
        fprintf(jf,
                "{\"model\": \"%s\", \"threads\": %ld, \"backend\": \"%s\", \"n_verify\": %ld, \"verify_at\": %d, \"prepare_ms\": %.1f,\n"
                " \"sdnpu\": {\"prefill_tok_s\": %.2f, \"decode_tok_s\": %.2f, \"greedy_tok_s\": %.2f, \"head\": \"%s\", "
                "\"verify1_ms\": %.3f, \"verifyL_ms\": %.3f, "
                "\"verify_cost_ratio\": %.4f, \"prepared_bytes\": %zu, \"peak_rss_bytes\": %zu},\n"
                " \"llama_cpp\": {\"prefill_tok_s\": %.2f, \"decode_tok_s\": %.2f, \"verify1_ms\": %.3f, \"verifyL_ms\": "
                "%.3f, \"verify_cost_ratio\": %.4f, \"peak_rss_bytes\": %.0f},\n"
                " \"sdnpu_long\": {\"prefill4096_tok_s\": %.2f}, \"llama_bench\": {\"pp1024\": %.2f, \"pp4096\": %.2f, "
                "\"tg64\": %.2f},\n"
                " \"roofline\": {\"read_gb_s\": %.2f, \"int8_gmac_s\": %.1f, \"int8_how\": \"%s\", \"weight_bytes\": %.0f, \"floor_ms\": %.3f, "
                "\"L1_gb_s\": %.2f, \"L1_gmac_s\": %.2f, \"L_gb_s\": %.2f, \"L_gmac_s\": %.2f}}\n",
                model_path, threads, sd_rt_backend_desc(rt), Lv, (int)at, prepare_ms, prefill_tps, decode_tps, greedy_tps,
                sd_tool_model_head(model), v1, vL, ratio,
                prepared, rss, p_prefill, p_decode, p_v1, p_vL, p_ratio, p_rss, long_tps, np.pp1024, np.pp4096, np.tg64,
                roof.read_gb_s, roof.int8_gmac_s, roof.int8_how ? roof.int8_how : "",
                ps.weight_bytes, floor_ms, gb1, mac1, gbL, macL);
        fclose(jf);
    }
    ret = 0;
    goto done;
fail_eval:
    fprintf(stderr, "sdnpu bench graphs: %s\n", sdnpu_session_last_error(s));
done:
    free(logits);
    free(toks);
    sdnpu_session_free(s);
    sdnpu_model_free(model);
    return ret;
}
