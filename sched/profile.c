/* sched/profile.c - measuring, saving and loading the graph profile
 * (sched/profile.h). */
#define _XOPEN_SOURCE 700 /* realpath */
#include "sched/profile.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "sdnpu.h"

static void cpu_name(char *buf, size_t cap) {
    snprintf(buf, cap, "unknown cpu");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0) {
            char *c = strchr(line, ':');
            if (c) {
                c++;
                while (*c == ' ') c++;
                c[strcspn(c, "\n")] = '\0';
                snprintf(buf, cap, "%s", c);
            }
            break;
        }
    }
    fclose(f);
}

void sd_profile_key(const char *model_path, const char *backend_desc, int n_threads, char *key, size_t cap) {
    struct stat st;
    long long size = -1, mtime = -1;
    if (model_path && stat(model_path, &st) == 0) {
        size = (long long)st.st_size;
        mtime = (long long)st.st_mtime;
    }
    char cpu[128];
    cpu_name(cpu, sizeof cpu);
    /* No quotes or backslashes: the key is written inside a JSON string.
     * The method's marks make a profile saved by an older method count as
     * missing, so it is measured again: "passes", each graph timed inside
     * whole forward passes (run_pass); "paired", every L's passes paired
     * with the first L's (measure_passes); "own rows", the head's first
     * row a row of the model's own continuation (decode_own). */
    snprintf(key, cap,
             "model %lld bytes mtime %lld | %s | %d threads | %s | sdnpu %s | passes paired, own rows", size,
             mtime, backend_desc, n_threads, cpu, sdnpu_version());
    for (char *p = key; *p; p++)
        if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20) *p = '_';
}

bool sd_profile_path(const char *model_path, char *path, size_t cap) {
    char *real = realpath(model_path, NULL);
    const int n = snprintf(path, cap, "%s.profile.json", real ? real : model_path);
    free(real);
    return n >= 0 && (size_t)n < cap;
}

int sd_profile_load_for(const char *model_path, const char *key, struct sd_profile *out, char *found, size_t cap,
                        struct sd_err *err) {
    char paths[2][PATH_MAX + 32];
    if (!sd_profile_path(model_path, paths[0], sizeof paths[0]) ||
        snprintf(paths[1], sizeof paths[1], "%s.profile.json", model_path) >= (int)sizeof paths[1])
        return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "the path of the model's profile is too long: %s", model_path);
    int rc = SDNPU_ERR_NOT_FOUND;
    for (int i = 0; i < 2 && rc == SDNPU_ERR_NOT_FOUND; i++) {
        if (i == 1 && strcmp(paths[0], paths[1]) == 0) break;
        rc = sd_profile_load(paths[i], key, out, err);
        if (found && cap) snprintf(found, cap, "%s", paths[i]);
    }
    return rc;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The first L's passes: one a pass of every other L. */
#define REF_RUNS (SD_PROFILE_MAX_REPS * SD_PROFILE_MAX_L)
/* The text's rows: one pass of this many rows (the most any graph has)
 * gives their states after every block; the head's rows after the first
 * are the last of them (rows near the text's start are far less sure:
 * `--L 1,8` timed the 0.5B's certified 8-row head on rows 0-7 at 8.2-10.1
 * ms, on rows 248-255 at 5.1). */
#define CTX_ROWS SD_MAX_BATCH_ROWS
/* The rows decoded after the text or prompt (decode_own). */
#define OWN_ROWS SD_PROFILE_MAX_REPS

/* One L's graphs, every block's and the head, prepared together as a
 * session's graph set is. */
struct pass_set {
    struct sd_graph g[SD_MAX_BLOCKS + 1];
    int32_t n;
};

static void release_set(struct pass_set *s) {
    for (int32_t i = 0; i < s->n; i++)
        sd_graph_release(&s->g[i]);
    s->n = 0;
}

/* The backend's shared buffers apart from the weights: the graphs' scratch. */
static size_t scratch_bytes(struct sd_backend *be) {
    return sd_backend_shared_bytes(be) - sd_backend_shared_weight_bytes(be);
}

/* Prepares the graphs of shapes[0, n) into s, each reps times (their
 * median load time into e[i * stride].load_ms; the last one stays), and
 * gives each the bytes it would take prepared alone: its own and its row
 * count's scratch (shared weights apart). */
static int prepare_set(struct sd_backend *be, const struct sd_graph_shape *shapes, int32_t n, int reps,
                       struct sd_profile_entry *e, int32_t stride, struct pass_set *s, struct sd_err *err) {
    const size_t before = scratch_bytes(be);
    s->n = 0;
    for (int32_t i = 0; i < n; i++) {
        double load[SD_PROFILE_MAX_REPS];
        for (int r = 0; r < reps; r++) {
            int rc = sd_graph_prepare(be, &shapes[i], SIZE_MAX, &s->g[i], err);
            if (rc) return rc;
            load[r] = s->g[i].prepare_ms;
            if (r + 1 < reps) sd_graph_release(&s->g[i]);
        }
        s->n = i + 1;
        e[i * stride].load_ms = median(load, reps);
    }
    for (int32_t i = 0; i < n; i++)
        e[i * stride].bytes = s->g[i].prepared_bytes + scratch_bytes(be) - before;
    return SDNPU_OK;
}

struct measure_ctx {
    struct sd_backend *be;
    struct sd_kv_cache *kv;
    struct sd_row *rows;
    float *x, *logits;
    float *ctx; /* [CTX_ROWS][d_model] the rows' hidden states after every block, from one pass of them */
    int32_t *argmax;
    int reps;
    float *own; /* [OWN_ROWS][d_model] the rows decoded after the text or prompt (decode_own; own_row) */
};

/* A row of a causal pass: token at slot (and position) slot, seeing the
 * slots before it and itself. */
static struct sd_row causal_row(int32_t token, int32_t slot) {
    return (struct sd_row){.token = token, .pos = slot, .slot = slot, .n_prefix = slot + 1};
}

/* The row of the model's own answer (decode_own) the head reads first in
 * round i of n: spread evenly over the answer's OWN_ROWS. */
static int32_t own_row(int i, int n) { return (int32_t)((2 * i + 1) * OWN_ROWS / (2 * n)); }

/* One forward pass over the set's graphs in order, as decoding runs them:
 * the blocks from the rows' embeddings, then the head's greedy tokens.
 * Each graph's weights come from memory because the others' went through
 * the caches since it last ran (a block timed again right after itself
 * found its weights in the last-level cache, up to twice as fast at one
 * row). The head's first row is the round's row of the model's own
 * continuation (c->own), its others the last of the text's CTX_ROWS rows
 * (c->ctx), where those are there. Each graph's time into ms[i]. */
static int run_pass(const struct measure_ctx *c, struct pass_set *s, int round, double *ms,
                    struct sd_err *err) {
    const int32_t L = s->g[0].shape.n_rows;
    const size_t d = (size_t)c->be->m->cfg.d_model;
    sd_embed_rows(c->be->m, c->rows, L, c->x);
    sd_kv_truncate(c->kv, 0);
    for (int32_t i = 0; i < s->n; i++) {
        struct sd_graph *g = &s->g[i];
        if (g->shape.kind == SD_GRAPH_HEAD && c->ctx)
            memcpy(c->x, c->ctx + (size_t)(CTX_ROWS - L) * d, (size_t)L * d * sizeof(float));
        if (g->shape.kind == SD_GRAPH_HEAD && c->own)
            memcpy(c->x, c->own + (size_t)own_row(round, c->reps) * d, d * sizeof(float));
        const double t0 = sd_time_ms();
        const int rc = g->shape.kind == SD_GRAPH_HEAD
                           ? sd_graph_run_argmax(g, c->x, c->logits, c->argmax, false, err)
                           : sd_graph_run(g, c->kv, c->rows, 0, c->x, c->logits, err);
        ms[i] = sd_time_ms() - t0;
        if (rc) return rc;
    }
    return SDNPU_OK;
}

/* ctx: the rows' states after every block of a pass of CTX_ROWS rows
 * (blocks: the blocks' shapes at any L). Then, with a prompt, a pass of
 * its rows (the rest padding) in the KV cache's place. The state of the
 * last row read (the prompt's, else the text's) is left in c->x's first
 * row, and the count of slots read in *n_read. */
static int context_states(struct measure_ctx *c, const struct sd_graph_shape *blocks, int32_t nb,
                          const int32_t *prompt, int32_t n_prompt, float *ctx, int32_t *n_read,
                          struct sd_err *err) {
    const size_t d = (size_t)c->be->m->cfg.d_model;
    struct pass_set *s = sd_calloc(1, sizeof *s);
    struct sd_row *text = c->rows, *rows = sd_calloc(CTX_ROWS, sizeof *rows);
    if (!s || !rows) {
        sd_free(s);
        sd_free(rows);
        return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for profiling");
    }
    int rc = SDNPU_OK;
    for (int32_t i = 0; i < nb && !rc; i++) {
        struct sd_graph_shape shape = blocks[i];
        shape.n_rows = CTX_ROWS;
        if (!(rc = sd_graph_prepare(c->be, &shape, SIZE_MAX, &s->g[i], err))) s->n = i + 1;
    }
    double ms[SD_MAX_BLOCKS + 1];
    if (!rc && !(rc = run_pass(c, s, 0, ms, err))) memcpy(ctx, c->x, (size_t)CTX_ROWS * d * sizeof(float));
    *n_read = n_prompt > 0 ? n_prompt : CTX_ROWS;
    if (!rc && n_prompt > 0) {
        for (int32_t r = 0; r < CTX_ROWS; r++)
            rows[r] = r < n_prompt ? causal_row(prompt[r], r) : (struct sd_row){.token = -1, .slot = -1};
        c->rows = rows;
        rc = run_pass(c, s, 0, ms, err);
        c->rows = text;
    }
    if (!rc) memmove(c->x, c->x + (size_t)(*n_read - 1) * d, d * sizeof(float));
    release_set(s);
    sd_free(s);
    sd_free(rows);
    return rc;
}

/* The OWN_ROWS rows greedy decoding computes after what context_states
 * read (its n_read slots in the KV cache, the last row's state in c->x):
 * from that row's greedy token on, each row's token the greedy token of
 * the row before; their states after every block into own, their tokens
 * into toks. A certified head costs what its rows' certainty makes it
 * (graphs/cert.h), and a decoding step's first row is the model's own
 * word: on the 1.5B the q4_K copy left ~2,000 candidate groups (median)
 * on rows of the profile's paragraph, even on those whose greedy token was
 * the text's next, and ~100 on the rows of its summary of the sample
 * document, and the certified one-row head took 7.1 ms against 5.8 exact
 * on the paragraph's last row, 3.3 against 4.1 on the summary's rows
 * (docs/benchmarks.md, "Stop 91"). */
static int decode_own(struct measure_ctx *c, const struct sd_graph_shape *blocks, int32_t nb, int32_t n_read,
                      float *own, int32_t *toks, struct sd_err *err) {
    const struct sd_model *m = c->be->m;
    const size_t d = (size_t)m->cfg.d_model;
    struct pass_set *s = sd_calloc(1, sizeof *s);
    if (!s) return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for profiling");
    int rc = SDNPU_OK;
    for (int32_t i = 0; i <= nb && !rc; i++) {
        struct sd_graph_shape shape = i < nb ? blocks[i] : (struct sd_graph_shape){.kind = SD_GRAPH_HEAD};
        shape.n_rows = 1;
        shape.n_ctx = CTX_ROWS + OWN_ROWS;
        if (!(rc = sd_graph_prepare(c->be, &shape, SIZE_MAX, &s->g[i], err))) s->n = i + 1;
    }
    struct sd_graph *head = &s->g[nb];
    if (!rc) rc = sd_graph_run_argmax(head, c->x, c->logits, c->argmax, false, err);
    for (int32_t i = 0; i < OWN_ROWS && !rc; i++) {
        const struct sd_row row = causal_row(toks[i] = c->argmax[0], n_read + i);
        sd_embed_rows(m, &row, 1, c->x);
        for (int32_t b = 0; b < nb && !rc; b++)
            rc = sd_graph_run(&s->g[b], c->kv, &row, row.slot, c->x, c->logits, err);
        if (!rc) memcpy(own + (size_t)i * d, c->x, d * sizeof(float));
        if (!rc) rc = sd_graph_run_argmax(head, c->x, c->logits, c->argmax, false, err);
    }
    release_set(s);
    sd_free(s);
    return rc;
}

/* reps passes of s0, each right before one of s (NULL: s0 alone), after
 * a warm-up round: s0's graphs' times appended to ref[g] at *n_ref, and
 * each of s's graphs' time over its s0 twin's of the same round into
 * comp[g][rep]. */
static int paired_passes(const struct measure_ctx *c, struct pass_set *s0, struct pass_set *s,
                         double (*ref)[REF_RUNS], int *n_ref, double (*comp)[SD_PROFILE_MAX_REPS],
                         struct sd_err *err) {
    double t0[SD_MAX_BLOCKS + 1], t[SD_MAX_BLOCKS + 1];
    for (int i = -1; i < c->reps; i++) {
        int rc = run_pass(c, s0, SD_MAX(i, 0), t0, err);
        if (!rc && s) rc = run_pass(c, s, SD_MAX(i, 0), t, err);
        if (rc) return rc;
        if (i < 0) continue;
        for (int32_t g = 0; g < s0->n; g++) {
            ref[g][*n_ref] = t0[g];
            if (s) comp[g][i] = t0[g] > 0 ? t[g] / t0[g] : 1.0;
        }
        ++*n_ref;
    }
    return SDNPU_OK;
}

/* Every L's graph set, e[g * n_L + li] graph g at the li-th L. The first
 * L's set stays prepared and its pass runs right before each pass of
 * every other L's set; its times are the medians of all of those, and
 * each other L's time is the median of its ratios to the first L's pass
 * of the same round, times that median. A machine's speed wanders over
 * seconds to minutes (a compute-bound pass more than a memory-bound one),
 * so an L measured apart from the first one gives ratios that move from
 * one profile to the next; and an L's own median, taken in its own
 * stretch of the run, moved as well against the first L's median of the
 * whole run (the 0.5B's 2-row step over its one-row one 0.98-1.15 across
 * five profiles on a Zen 3, 1.00-1.06 so; the rows a session verifies
 * follow such ratios: docs/benchmarks.md, "Profiles that agree with
 * themselves"). */
static int measure_passes(struct measure_ctx *c, struct sd_graph_shape (*shapes)[SD_MAX_BLOCKS + 1],
                          int32_t ng, int32_t n_L, struct sd_profile_entry *e,
                          sd_profile_progress_fn progress, void *user, struct sd_err *err) {
    double comp[SD_MAX_BLOCKS + 1][SD_PROFILE_MAX_REPS];
    double(*ref)[REF_RUNS] = sd_calloc((size_t)ng, sizeof *ref);
    struct pass_set *s0 = sd_calloc(2, sizeof *s0), *s = s0 ? s0 + 1 : NULL;
    int n_ref = 0, done = 0, total = ng * n_L;
    int rc = !ref || !s0 ? sd_err_set(err, SDNPU_ERR_OOM, "out of memory for profiling")
                         : prepare_set(c->be, shapes[0], ng, c->reps, e, n_L, s0, err);
    if (!rc && n_L == 1) rc = paired_passes(c, s0, NULL, ref, &n_ref, comp, err);
    double ratio[SD_MAX_BLOCKS + 1][SD_PROFILE_MAX_L];
    for (int32_t li = 1; li < n_L && !rc; li++) {
        if (!(rc = prepare_set(c->be, shapes[li], ng, c->reps, e + li, n_L, s, err)))
            rc = paired_passes(c, s0, s, ref, &n_ref, comp, err);
        release_set(s);
        for (int32_t g = 0; g < ng && !rc; g++) {
            ratio[g][li] = median(comp[g], c->reps);
            e[g * n_L + li].compute_ms = ratio[g][li] * median(ref[g], n_ref); /* so far */
            if (progress) progress(++done, total, &e[g * n_L + li], user);
        }
    }
    if (s0) release_set(s0);
    for (int32_t g = 0; g < ng && !rc; g++) {
        e[g * n_L].compute_ms = median(ref[g], n_ref);
        for (int32_t li = 1; li < n_L; li++)
            e[g * n_L + li].compute_ms = ratio[g][li] * e[g * n_L].compute_ms;
        if (progress) progress(++done, total, &e[g * n_L], user);
    }
    sd_free(s0);
    sd_free(ref);
    return rc;
}

int sd_profile_measure(const struct sd_model *m, struct sd_pool *pool, const struct sd_profile_spec *spec,
                       struct sd_profile *out, struct sd_err *err) {
    const int32_t *Ls = spec->Ls, n_L = spec->n_L;
    memset(out, 0, sizeof *out);
    if (n_L < 1 || n_L > SD_PROFILE_MAX_L) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "%d row counts to profile", n_L);
    int32_t maxL = 0;
    for (int32_t i = 0; i < n_L; i++) {
        if (Ls[i] < 1 || Ls[i] > SD_MAX_BATCH_ROWS)
            return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "row count %d: must be 1..%d", Ls[i], SD_MAX_BATCH_ROWS);
        maxL = SD_MAX(maxL, Ls[i]);
        out->Ls[i] = Ls[i];
    }
    out->n_L = n_L;
    if (spec->n_prompt < 0 || spec->n_prompt > SD_PROFILE_MAX_PROMPT || (spec->n_prompt > 0 && !spec->prompt))
        return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "a prompt of %d tokens to profile after: at most %d",
                          spec->n_prompt, SD_PROFILE_MAX_PROMPT);
    /* Blocks as the runtime cuts them. */
    int32_t b0[SD_MAX_BLOCKS], b1[SD_MAX_BLOCKS];
    int32_t nb = sd_rt_plan_blocks(m, 0, b0, b1);
    struct sd_backend *be = NULL;
    struct sd_kv_cache kv = {0};
    struct sd_row *rows = NULL;
    float *x = NULL, *ctx = NULL, *own = NULL, *logits = NULL;
    int32_t *argmax = NULL;
    int rc;
    out->n_blocks = nb;
    out->n_entries = (nb + 1) * n_L;
    out->entries = sd_calloc((size_t)out->n_entries, sizeof *out->entries);
    rows = sd_calloc(CTX_ROWS, sizeof *rows);
    x = sd_aligned_alloc(CTX_ROWS * (size_t)m->cfg.d_model * sizeof(float));
    ctx = sd_aligned_alloc(CTX_ROWS * (size_t)m->cfg.d_model * sizeof(float));
    own = sd_aligned_alloc(OWN_ROWS * (size_t)m->cfg.d_model * sizeof(float));
    logits = sd_aligned_alloc((size_t)maxL * (size_t)m->cfg.n_vocab * sizeof(float));
    argmax = sd_calloc((size_t)maxL, sizeof *argmax);
    if (!out->entries || !rows || !x || !ctx || !own || !logits || !argmax) {
        rc = sd_err_set(err, SDNPU_ERR_OOM, "out of memory for profiling");
        goto done;
    }
    if ((rc = sd_backend_create(spec->backend, spec->cl_device, spec->kernels, m, spec->weights, pool, &be,
                                err)))
        goto done;
    if ((rc = sd_kv_create(m, CTX_ROWS + OWN_ROWS, sd_backend_kv_keys(be), &kv, err))) goto done;
    for (int32_t r = 0; r < CTX_ROWS; r++) {
        const uint32_t t =
            spec->n_tokens > 0 ? (uint32_t)spec->tokens[r % spec->n_tokens] : (uint32_t)r * 2654435761u;
        rows[r] = causal_row((int32_t)(t % (uint32_t)m->cfg.n_vocab), r);
    }
    /* Every graph of every L: entry (graph b, L index li) at b * n_L + li. */
    struct sd_graph_shape shapes[SD_PROFILE_MAX_L][SD_MAX_BLOCKS + 1];
    for (int32_t li = 0; li < n_L; li++)
        for (int32_t b = 0; b <= nb; b++) {
            const bool head = b == nb;
            shapes[li][b] = (struct sd_graph_shape){head ? SD_GRAPH_HEAD : SD_GRAPH_BLOCK,
                                                    head ? 0 : b0[b],
                                                    head ? 0 : b1[b],
                                                    Ls[li],
                                                    CTX_ROWS,
                                                    NULL,
                                                    0};
            struct sd_profile_entry *e = &out->entries[b * n_L + li];
            *e = (struct sd_profile_entry){
                .block = head ? -1 : b, .l0 = shapes[li][b].l0, .l1 = shapes[li][b].l1, .L = Ls[li]};
        }
    struct measure_ctx c = {.be = be,
                            .kv = &kv,
                            .rows = rows,
                            .x = x,
                            .logits = logits,
                            .argmax = argmax,
                            .reps = SD_MIN(SD_MAX(spec->reps, 1), SD_PROFILE_MAX_REPS)};
    int32_t n_read = 0;
    if (!(rc = context_states(&c, shapes[0], nb, spec->prompt, spec->n_prompt, ctx, &n_read, err))) {
        c.ctx = ctx;
        if (!(rc = decode_own(&c, shapes[0], nb, n_read, own, out->decoded, err))) {
            c.own = own;
            out->n_decoded = OWN_ROWS;
            rc = measure_passes(&c, shapes, nb + 1, n_L, out->entries, spec->progress, spec->user, err);
        }
    }
done:
    sd_kv_free(&kv);
    sd_backend_free(be);
    sd_free(rows);
    sd_aligned_free(x);
    sd_aligned_free(ctx);
    sd_aligned_free(own);
    sd_aligned_free(logits);
    sd_free(argmax);
    if (rc) sd_profile_free(out);
    return rc;
}

int sd_profile_save(const struct sd_profile *p, const char *path, struct sd_err *err) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "profile path too long");
    json_t *k = json_string(p->key); /* quoted and escaped as JSON */
    char *key = k ? json_dumps(k, JSON_ENCODE_ANY) : NULL;
    json_decref(k);
    if (!key) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "a profile key that is not UTF-8");
    FILE *f = fopen(tmp, "w");
    if (!f) {
        free(key);
        return sd_err_set(err, SDNPU_ERR_IO, "%s: cannot write: %s", tmp, strerror(errno));
    }
    fprintf(f, "{\n\"format\": \"sdnpu-profile-1\",\n\"key\": %s,\n\"entries\": [\n", key);
    free(key);
    for (int32_t i = 0; i < p->n_entries; i++) {
        const struct sd_profile_entry *e = &p->entries[i];
        fprintf(f, "{\"block\": %d, \"l0\": %d, \"l1\": %d, \"L\": %d, \"load_ms\": %.4f, \"compute_ms\": %.4f, \"bytes\": %zu}%s\n",
                e->block, e->l0, e->l1, e->L, e->load_ms, e->compute_ms, e->bytes, i + 1 < p->n_entries ? "," : "");
    }
    fprintf(f, "]\n}\n");
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        int e = errno;
        remove(tmp);
        return sd_err_set(err, SDNPU_ERR_IO, "%s: cannot write: %s", path, strerror(e));
    }
    return SDNPU_OK;
}

/* One member of an entry: an integer in [lo, hi]. */
static bool int_in(const json_t *o, const char *k, long long lo, long long hi, long long *out) {
    const json_t *v = json_object_get(o, k);
    if (!json_is_integer(v)) return false;
    *out = json_integer_value(v);
    return *out >= lo && *out <= hi;
}

/* One member of an entry: a time in ms, from 0 to a day. */
static bool ms_in(const json_t *o, const char *k, double *out) {
    const json_t *v = json_object_get(o, k);
    if (!json_is_number(v)) return false;
    *out = json_number_value(v);
    return *out >= 0 && *out <= 864e5;
}

/* One entry as sd_profile_save writes it; NULL when it is that, else the
 * first member that is not. */
static const char *read_entry(const json_t *o, struct sd_profile_entry *e) {
    long long block, l0, l1, L, bytes;
    double load, comp;
    if (!json_is_object(o)) return "not an object";
    if (!int_in(o, "block", -1, SD_MAX_BLOCKS - 1, &block)) return "block";
    if (!int_in(o, "l0", 0, INT32_MAX, &l0)) return "l0";
    if (!int_in(o, "l1", l0, INT32_MAX, &l1)) return "l1";
    if (!int_in(o, "L", 1, SD_MAX_BATCH_ROWS, &L)) return "L";
    if (!int_in(o, "bytes", 0, LLONG_MAX, &bytes)) return "bytes";
    if (!ms_in(o, "load_ms", &load)) return "load_ms";
    if (!ms_in(o, "compute_ms", &comp)) return "compute_ms";
    *e = (struct sd_profile_entry){(int32_t)block, (int32_t)l0, (int32_t)l1,  (int32_t)L,
                                   load,           comp,        (size_t)bytes};
    return NULL;
}

/* Entries read into out, which must make the grid sd_profile_measure
 * makes: every block from 0 and the head at each of at most
 * SD_PROFILE_MAX_L row counts, once each (a sum over a row count that
 * missed a block, or counted one twice, would price passes wrongly). */
static int read_entries(const json_t *entries, size_t n, const char *path, struct sd_profile *out,
                        struct sd_err *err) {
    bool seen[SD_MAX_BLOCKS + 1][SD_PROFILE_MAX_L] = {{false}};
    for (size_t i = 0; i < n; i++) {
        struct sd_profile_entry e;
        const char *bad = read_entry(json_array_get(entries, i), &e);
        if (bad)
            return sd_err_set(err, SDNPU_ERR_FORMAT, "%s: entry %zu: not a profile entry (%s)", path, i + 1,
                              bad);
        int32_t li = 0;
        while (li < out->n_L && out->Ls[li] != e.L)
            li++;
        if (li == SD_PROFILE_MAX_L)
            return sd_err_set(err, SDNPU_ERR_FORMAT, "%s: more than %d row counts", path, SD_PROFILE_MAX_L);
        if (li == out->n_L) out->Ls[out->n_L++] = e.L;
        bool *at = &seen[e.block + 1][li];
        if (*at)
            return sd_err_set(err, SDNPU_ERR_FORMAT, "%s: entry %zu: a second time for its graph", path,
                              i + 1);
        *at = true;
        out->entries[out->n_entries++] = e;
        out->n_blocks = SD_MAX(out->n_blocks, e.block + 1);
    }
    for (int32_t b = -1; b < out->n_blocks; b++)
        for (int32_t li = 0; li < out->n_L; li++)
            if (!seen[b + 1][li]) {
                char graph[32] = "the head";
                if (b >= 0) snprintf(graph, sizeof graph, "block %d", b);
                return sd_err_set(err, SDNPU_ERR_FORMAT, "%s: no entry for %s at L=%d", path, graph,
                                  out->Ls[li]);
            }
    if (out->n_blocks == 0) return sd_err_set(err, SDNPU_ERR_FORMAT, "%s: no block", path);
    return SDNPU_OK;
}

/* The file is read with jansson, and must hold what sd_profile_save
 * writes; anything else is a format error (the profile is then measured
 * again). */
int sd_profile_load(const char *path, const char *key, struct sd_profile *out, struct sd_err *err) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "r");
    if (!f) return sd_err_set(err, SDNPU_ERR_NOT_FOUND, "%s: %s", path, strerror(errno));
    json_error_t je;
    json_t *doc = json_loadf(f, JSON_REJECT_DUPLICATES, &je);
    fclose(f);
    if (!doc)
        return sd_err_set(err, SDNPU_ERR_FORMAT, "%s:%d: not a profile: column %d: %s", path, je.line,
                          je.column, je.text);
    int rc = SDNPU_OK;
    const char *k = json_string_value(json_object_get(doc, "key"));
    const json_t *entries = json_object_get(doc, "entries");
    size_t n = json_array_size(entries);
    if (!k || n == 0) {
        rc = sd_err_set(err, SDNPU_ERR_FORMAT, "%s: no key or no entries", path);
        goto done;
    }
    if (n > (size_t)(SD_MAX_BLOCKS + 1) * SD_PROFILE_MAX_L) {
        rc = sd_err_set(err, SDNPU_ERR_FORMAT, "%s: %zu entries, more than a profile has", path, n);
        goto done;
    }
    snprintf(out->key, sizeof out->key, "%s", k);
    if (!(out->entries = sd_calloc(n, sizeof *out->entries))) {
        rc = sd_err_set(err, SDNPU_ERR_OOM, "out of memory reading %s", path);
        goto done;
    }
    if ((rc = read_entries(entries, n, path, out, err))) goto done;
    if (key && strcmp(key, out->key) != 0)
        rc = sd_err_set(err, SDNPU_ERR_STATE, "%s was measured for another model, machine or backend", path);
done:
    json_decref(doc);
    if (rc) sd_profile_free(out);
    return rc;
}

void sd_profile_free(struct sd_profile *p) {
    sd_free(p->entries);
    memset(p, 0, sizeof *p);
}

static double sum_ms(const struct sd_profile *p, int32_t L, bool head) {
    double sum = 0;
    int n = 0;
    for (int32_t i = 0; i < p->n_entries; i++)
        if (p->entries[i].L == L && (p->entries[i].block >= 0 || head)) {
            sum += p->entries[i].compute_ms;
            n++;
        }
    return n ? sum : -1.0;
}

double sd_profile_pass_ms(const struct sd_profile *p, int32_t L) { return sum_ms(p, L, false); }

double sd_profile_step_ms(const struct sd_profile *p, int32_t L) { return sum_ms(p, L, true); }
