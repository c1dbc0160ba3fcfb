/* cli/bench_state.c - `sdnpu bench state`: what a saved session
 * (sdnpu_session_save / sdnpu_session_load, docs/state.md) saves over
 * prefilling the same context again.
 *
 *     sdnpu bench state [-m MODEL] [-t N] [--tokens N] [--n-gen N] [--repeat N]
 *                       [--state FILE] [--json OUT]
 *
 * A session prefills --tokens tokens of the license texts (the warm-up: it
 * prepares the graphs) and saves them. Then, --repeat times, in an order
 * that alternates, it prefills the same tokens again from an empty
 * context, loads the file while the page cache holds it, and loads it
 * after asking the kernel to drop it from the page cache
 * (posix_fadvise DONTNEED: a cold read, as after a reboot, where the disk
 * allows). Medians are reported. The context must continue the same way
 * from both: a greedy generation of --n-gen tokens after a short prompt,
 * once after the warm-up's prefill and once after a load at the end, must
 * give the same text and token count (the command fails otherwise). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "cli.h"
#include "sdnpu.h"

static void usage(FILE *f) {
    fprintf(f, "usage: sdnpu bench state [-m MODEL] [-t N] [--tokens N] [--n-gen N] [--repeat N] [--state FILE]\n"
               "                         [--json OUT]\n\n"
               "Load a saved session against prefilling its context again, and check that both continue\n"
               "the same way.\n\n"
               "options:\n"
               "  -m MODEL          a GGUF model (default: $SDNPU_MODEL or models/default.gguf)\n"
               "  -t N              threads (default 2)\n"
               "      --tokens N    context length in tokens (default 4096)\n"
               "      --n-gen N     greedy tokens compared after prefill and after load (default 64)\n"
               "      --repeat N    runs of each, interleaved; medians reported (default 3)\n"
               "      --state FILE  where the state is saved (default: a file in $TMPDIR or /tmp, removed after)\n"
               "      --json OUT    also write the numbers as JSON\n");
}

struct state_opts {
    const char *model_path, *json, *state;
    long threads, tokens, n_gen, repeat;
};

#define OPT(field) CLI_AT(struct state_opts, field)
static const struct cli_flag k_flags[] = {
    {"-m", NULL, CLI_STR, OPT(model_path)},
    {"-t", NULL, CLI_INT, OPT(threads), .lo = 1, .hi = 256},
    {"--tokens", NULL, CLI_INT, OPT(tokens), .lo = 16, .hi = 1 << 17},
    {"--n-gen", NULL, CLI_INT, OPT(n_gen), .lo = 1, .hi = 4096},
    {"--repeat", NULL, CLI_INT, OPT(repeat), .lo = 1, .hi = 100},
    {"--state", NULL, CLI_STR, OPT(state)},
    {"--json", NULL, CLI_STR, OPT(json)},
    {0},
};

#define MAX_REPEAT 100
enum { PREFILL, LOAD, LOAD_COLD, N_KINDS };
static const char *k_names[N_KINDS] = {"prefill", "load, file cached", "load, file not cached"};
static const char *k_keys[N_KINDS] = {"prefill", "load", "load_cold"};

/* The median of v without reordering it (the runs are printed in order). */
static double median(const double *v, long n) {
    double s[MAX_REPEAT];
    memcpy(s, v, (size_t)n * sizeof *s);
    return cli_median(s, n);
}

/* Ask the kernel to forget the file's cached pages (it was fsynced by the
 * save, so they are clean and can go). */
static void drop_cache(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return;
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}

/* One timed run of kind k on an emptied session. */
static int run_kind(struct sdnpu_session *s, int k, const int32_t *toks, int32_t n, const char *path, double *ms) {
    sdnpu_session_reset(s);
    if (k == LOAD_COLD) drop_cache(path);
    double t0 = sd_time_ms();
    int rc = k == PREFILL ? sdnpu_session_eval(s, toks, (size_t)n, NULL, 0) : sdnpu_session_load(s, path);
    *ms = sd_time_ms() - t0;
    if (rc) fprintf(stderr, "sdnpu bench state: %s: %s\n", k_names[k], sdnpu_session_last_error(s));
    return rc;
}

struct text {
    char *buf;
    size_t n, cap;
};

static bool collect(const char *piece, size_t len, void *user) {
    struct text *t = user;
    if (t->n + len > t->cap) {
        size_t cap = (t->n + len) * 2;
        char *b = realloc(t->buf, cap);
        if (!b) return false;
        t->buf = b;
        t->cap = cap;
    }
    memcpy(t->buf + t->n, piece, len);
    t->n += len;
    return true;
}

/* The context's continuation: a short question after it, answered
 * greedily. */
static int continuation(struct sdnpu_session *s, long n_gen, struct text *out, int32_t *n_generated) {
    static const char q[] = "\n\nTL;DR:";
    struct sdnpu_generate_params gp = sdnpu_generate_default_params();
    gp.sampling.temperature = 0;
    gp.n_predict = (int32_t)n_gen;
    gp.on_text = collect;
    gp.user = out;
    struct sdnpu_stats st;
    int rc = sdnpu_session_generate(s, q, sizeof q - 1, &gp, &st);
    if (rc < 0) fprintf(stderr, "sdnpu bench state: generation: %s\n", sdnpu_session_last_error(s));
    *n_generated = st.n_generated;
    return rc < 0 ? rc : 0;
}

/* A run's figures: the interleaved runs of each kind and their medians,
 * the state file, and the continuations after a prefill and after a
 * load. */
struct state_figs {
    int32_t n;
    double ms[N_KINDS][MAX_REPEAT], med[N_KINDS], warm_ms, save_ms;
    long file_bytes;
    int32_t n_gen[2];
    bool same;
};

/* Save the session at path, timed; the file's size. 0, or 1 said. */
static int save_timed(struct sdnpu_session *s, const char *path, struct state_figs *F) {
    const double t0 = sd_time_ms();
    if (sdnpu_session_save(s, path)) {
        fprintf(stderr, "sdnpu bench state: save: %s\n", sdnpu_session_last_error(s));
        return 1;
    }
    F->save_ms = sd_time_ms() - t0;
    FILE *f = fopen(path, "rb");
    F->file_bytes = -1;
    if (f && !fseek(f, 0, SEEK_END)) F->file_bytes = ftell(f);
    if (f) fclose(f);
    return 0;
}

static void print_state_table(const struct state_opts *o, const struct sdnpu_model *model,
                              const struct state_figs *F) {
    printf("saved sessions: %s, %ld threads, a %d-token context; state file %.1f MiB, saved in %.0f ms; "
           "medians of %ld interleaved runs\n\n",
           sdnpu_model_arch(model), o->threads, F->n, (double)F->file_bytes / 1048576.0, F->save_ms,
           o->repeat);
    printf(
        "| how the context is had | median ms | runs ms | prefill / this |\n| --- | ---: | --- | ---: |\n");
    for (int k = 0; k < N_KINDS; k++) {
        char runs[512] = "";
        size_t len = 0;
        for (long r = 0; r < o->repeat && len < sizeof runs; r++)
            len += (size_t)snprintf(runs + len, sizeof runs - len, "%s%.1f", r ? ", " : "", F->ms[k][r]);
        printf("| %s | %.1f | %s | %.1fx |\n", k_names[k], F->med[k], runs, F->med[PREFILL] / F->med[k]);
    }
    printf("\nafter prefill and after load: %d and %d greedy tokens, %s\n", F->n_gen[0], F->n_gen[1],
           F->same ? "the same text" : "DIFFERENT TEXT");
}

static int write_state_json(const struct state_opts *o, const char *model_path,
                            const struct sdnpu_model *model, const struct state_figs *F) {
    FILE *jf = fopen(o->json, "w");
    if (!jf) {
        fprintf(stderr, "sdnpu bench state: cannot write %s\n", o->json);
        return 1;
    }
    fprintf(jf,
            "{\"model\": \"%s\", \"arch\": \"%s\", \"threads\": %ld, \"tokens\": %d, \"file_bytes\": %ld, "
            "\"save_ms\": %.3f, \"warmup_prefill_ms\": %.3f, \"repeat\": %ld",
            model_path, sdnpu_model_arch(model), o->threads, F->n, F->file_bytes, F->save_ms, F->warm_ms,
            o->repeat);
    for (int k = 0; k < N_KINDS; k++) {
        fprintf(jf, ", \"%s_median_ms\": %.3f, \"%s_ms\": [", k_keys[k], F->med[k], k_keys[k]);
        for (long r = 0; r < o->repeat; r++)
            fprintf(jf, "%s%.3f", r ? ", " : "", F->ms[k][r]);
        fprintf(jf, "]");
    }
    fprintf(jf, ", \"speedup\": %.3f, \"speedup_cold\": %.3f, \"n_gen\": [%d, %d], \"identical\": %s}\n",
            F->med[PREFILL] / F->med[LOAD], F->med[PREFILL] / F->med[LOAD_COLD], F->n_gen[0], F->n_gen[1],
            F->same ? "true" : "false");
    fclose(jf);
    return 0;
}

/* The measurement on an open session: the warm-up prefill and a save, the
 * continuation after it, the interleaved runs, and the continuation after
 * a load, which must equal the first. 0, or 1 said. */
static int measure_state(struct sdnpu_session *s, const struct state_opts *o, const int32_t *toks,
                         const char *path, struct text after[2], struct state_figs *F) {
    fprintf(stderr, "warm-up: prefill %d tokens (prepares the graphs), save...\n", F->n);
    if (run_kind(s, PREFILL, toks, F->n, path, &F->warm_ms) || save_timed(s, path, F)) return 1;
    /* The continuation after a prefill, here where one was just made (a
     * long prefill is the slow part of this benchmark); the one after a
     * load comes last. */
    fprintf(stderr, "%ld greedy tokens after the prefill...\n", o->n_gen);
    if (continuation(s, o->n_gen, &after[0], &F->n_gen[0])) return 1;
    for (long r = 0; r < o->repeat; r++) {
        /* Alternating orders, so that a machine that speeds up or slows
         * down over the run weighs on every kind alike. */
        for (int i = 0; i < N_KINDS; i++) {
            int k = r % 2 ? N_KINDS - 1 - i : i;
            fprintf(stderr, "run %ld/%ld: %s...\n", r + 1, o->repeat, k_names[k]);
            if (run_kind(s, k, toks, F->n, path, &F->ms[k][r])) return 1;
        }
    }
    fprintf(stderr, "%ld greedy tokens after a load...\n", o->n_gen);
    double unused;
    if (run_kind(s, LOAD, toks, F->n, path, &unused) || continuation(s, o->n_gen, &after[1], &F->n_gen[1]))
        return 1;
    F->same = F->n_gen[0] == F->n_gen[1] && after[0].n == after[1].n &&
              !memcmp(after[0].buf, after[1].buf, after[0].n);
    for (int k = 0; k < N_KINDS; k++)
        F->med[k] = median(F->ms[k], o->repeat);
    return 0;
}

int cli_bench_state(int argc, char **argv) {
    struct state_opts o = {.threads = 2, .tokens = 4096, .n_gen = 64, .repeat = 3};
    const struct cli_parser parser = {"sdnpu bench state", usage, {{k_flags, &o}}, .style = CLI_STYLE_BENCH};
    int parsed = cli_parse_flags(&parser, argc, argv);
    if (parsed != CLI_PARSED) return parsed;
    char tmp[4200];
    const char *path = o.state;
    if (!path) {
        const char *dir = getenv("TMPDIR");
        snprintf(tmp, sizeof tmp, "%s/sdnpu-bench-state-%ld.bin", dir && *dir ? dir : "/tmp", (long)getpid());
        path = tmp;
    }
    const char *model_path = cli_model(o.model_path);
    struct sdnpu_model_params mp = sdnpu_model_default_params();
    mp.n_threads = (int32_t)o.threads;
    struct sdnpu_model *model = NULL;
    struct sdnpu_session *s = NULL;
    int32_t *toks = NULL;
    struct text after[2] = {{0}, {0}};
    static struct state_figs F;
    char err[512];
    int ret = 1;
    if (sdnpu_model_load(model_path, mp, &model, err, sizeof err)) {
        fprintf(stderr, "sdnpu bench state: %s\n", err);
        return 1;
    }
    F.n = (int32_t)o.tokens;
    if (!(toks = cli_license_tokens(model, F.n))) {
        fprintf(stderr, "sdnpu bench state: cannot make a %d-token context from /usr/share/common-licenses\n",
                F.n);
        goto done;
    }
    struct sdnpu_session_params sp = sdnpu_session_default_params();
    sp.n_ctx = F.n + (int32_t)o.n_gen + 64; /* the context, the question and the answer */
    sp.n_threads = (int32_t)o.threads;
    cli_weight_cache(&sp, model_path);
    if (sdnpu_session_create(model, sp, &s)) {
        fprintf(stderr, "sdnpu bench state: %s\n", sdnpu_model_last_error(model));
        goto done;
    }
    if (measure_state(s, &o, toks, path, after, &F)) goto done;
    print_state_table(&o, model, &F);
    if (o.json && write_state_json(&o, model_path, model, &F)) goto done;
    ret = F.same ? 0 : 1;
done:
    if (!o.state) unlink(path);
    free(after[0].buf);
    free(after[1].buf);
    free(toks);
    sdnpu_session_free(s);
    sdnpu_model_free(model);
    return ret;
}
