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
     * missing, so it is measured again: "cold", runs timed after evicting
     * the caches (evict_caches); "paired", every L's runs paired with the
     * first L's (measure_graph). */
    snprintf(key, cap, "model %lld bytes mtime %lld | %s | %d threads | %s | sdnpu %s | cold paired", size, mtime,
             backend_desc, n_threads, cpu, sdnpu_version());
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

/* A pass streams every block's weights from memory, one block after the
 * other; a block timed again and again right after itself would find its
 * weights in the last-level cache and look faster than any pass runs it,
 * most of all at one row. Reading this much first evicts them. */
enum { EVICT_BYTES = 128 << 20 };

static void evict_caches(const uint8_t *buf) {
    if (!buf) return;
    volatile uint8_t sink = 0;
    uint8_t s = 0;
    for (size_t i = 0; i < EVICT_BYTES; i += 64) s ^= buf[i];
    sink = s;
    (void)sink;
}

/* reps prepares of a shape, their median load time into e; the last one
 * stays prepared in g. */
static int prepare_timed(struct sd_backend *be, const struct sd_graph_shape *shape, int reps,
                         struct sd_profile_entry *e, struct sd_graph *g, struct sd_err *err) {
    double load[SD_PROFILE_MAX_REPS];
    for (int i = 0; i < reps; i++) {
        int rc = sd_graph_prepare(be, shape, SIZE_MAX, g, err);
        if (rc) return rc;
        load[i] = g->prepare_ms;
        e->bytes = g->prepared_bytes + sd_backend_shared_bytes(be); /* prepared alone: the scratch is its own */
        if (i + 1 < reps) sd_graph_release(g);
    }
    e->load_ms = median(load, reps);
    return SDNPU_OK;
}

struct measure_ctx {
    struct sd_backend *be;
    struct sd_kv_cache *kv;
    struct sd_row *rows;
    float *x, *logits;
    const uint8_t *evict;
    int reps;
    sd_profile_progress_fn progress;
    void *user;
    int done, total;
};

/* One cold run of g, from the same input each time, its time in *ms. */
static int run_timed(const struct measure_ctx *c, struct sd_graph *g, double *ms, struct sd_err *err) {
    const size_t d = (size_t)c->be->m->cfg.d_model;
    sd_embed_rows(c->be->m, c->rows, g->shape.n_rows, c->x);
    for (size_t k = 0; k < (size_t)g->shape.n_rows * d; k++) c->x[k] *= 0.01f;
    sd_kv_truncate(c->kv, 0);
    evict_caches(c->evict);
    const double t0 = sd_time_ms();
    const int rc = sd_graph_run(g, c->kv, c->rows, 0, c->x, c->logits, err);
    *ms = sd_time_ms() - t0;
    return rc;
}

/* Every L of one graph (a block or the head), entries e[0, n_L): the graph
 * of the first L stays prepared and runs right before each run of every
 * other L, and its time is the median of all those runs. A machine's
 * speed can wander over seconds to minutes (a compute-bound pass more than
 * a memory-bound one), so an L measured apart from the first one gives
 * ratios that move from one profile to the next. */
static int measure_graph(struct measure_ctx *c, const struct sd_graph_shape *shapes, int32_t n_L,
                         struct sd_profile_entry *e, struct sd_err *err) {
    double ref[SD_PROFILE_MAX_REPS * SD_PROFILE_MAX_L], comp[SD_PROFILE_MAX_REPS];
    int n_ref = 0, rc;
    struct sd_graph g0, g;
    if ((rc = prepare_timed(c->be, &shapes[0], c->reps, &e[0], &g0, err))) return rc;
    for (int32_t li = 1; li < n_L && !rc; li++) {
        if ((rc = prepare_timed(c->be, &shapes[li], c->reps, &e[li], &g, err))) break;
        for (int i = -1; i < c->reps && !rc; i++) { /* a warm-up round first */
            double t0, t;
            if (!(rc = run_timed(c, &g0, &t0, err)) && !(rc = run_timed(c, &g, &t, err)) && i >= 0) {
                ref[n_ref++] = t0;
                comp[i] = t;
            }
        }
        sd_graph_release(&g);
        if (rc) break;
        e[li].compute_ms = median(comp, c->reps);
        if (c->progress) c->progress(++c->done, c->total, &e[li], c->user);
    }
    for (int i = -1; i < c->reps && n_L == 1 && !rc; i++) {
        double t0;
        if (!(rc = run_timed(c, &g0, &t0, err)) && i >= 0) ref[n_ref++] = t0;
    }
    sd_graph_release(&g0);
    if (rc) return rc;
    e[0].compute_ms = median(ref, n_ref);
    if (c->progress) c->progress(++c->done, c->total, &e[0], c->user);
    return SDNPU_OK;
}

int sd_profile_measure(const struct sd_model *m, struct sd_pool *pool, const char *backend, int cl_device,
                       enum sd_kernels kernels, const int32_t *Ls, int32_t n_L, int reps, sd_profile_progress_fn progress, void *user,
                       struct sd_profile *out, struct sd_err *err) {
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
    /* Blocks as the runtime cuts them. */
    int32_t b0[SD_MAX_BLOCKS], b1[SD_MAX_BLOCKS];
    int32_t nb = sd_rt_plan_blocks(m, 0, b0, b1);
    struct sd_backend *be = NULL;
    struct sd_kv_cache kv = {0};
    struct sd_row *rows = NULL;
    float *x = NULL, *logits = NULL;
    uint8_t *evict = sd_aligned_alloc(EVICT_BYTES); /* NULL: time without evicting */
    int rc;
    if (evict) memset(evict, 1, EVICT_BYTES);
    out->n_blocks = nb;
    out->n_entries = (nb + 1) * n_L;
    out->entries = sd_calloc((size_t)out->n_entries, sizeof *out->entries);
    rows = sd_calloc((size_t)maxL, sizeof *rows);
    x = sd_aligned_alloc((size_t)maxL * (size_t)m->cfg.d_model * sizeof(float));
    logits = sd_aligned_alloc((size_t)maxL * (size_t)m->cfg.n_vocab * sizeof(float));
    if (!out->entries || !rows || !x || !logits) {
        rc = sd_err_set(err, SDNPU_ERR_OOM, "out of memory for profiling");
        goto done;
    }
    if ((rc = sd_backend_create(backend, cl_device, kernels, m, NULL, pool, &be, err))) goto done;
    if ((rc = sd_kv_create(m, maxL, sd_backend_kv_keys(be), &kv, err))) goto done;
    for (int32_t r = 0; r < maxL; r++) {
        rows[r].token = (int32_t)(((uint32_t)r * 2654435761u) % (uint32_t)m->cfg.n_vocab);
        rows[r].pos = rows[r].slot = r;
        rows[r].n_prefix = r + 1;
    }
    struct measure_ctx c = {be, &kv, rows, x, logits, evict, SD_MIN(SD_MAX(reps, 1), SD_PROFILE_MAX_REPS), progress,
                            user, 0, out->n_entries};
    for (int32_t b = 0; b <= nb; b++) {
        const bool head = b == nb;
        struct sd_graph_shape shapes[SD_PROFILE_MAX_L];
        struct sd_profile_entry *e = &out->entries[b * n_L];
        for (int32_t li = 0; li < n_L; li++) {
            shapes[li] = (struct sd_graph_shape){head ? SD_GRAPH_HEAD : SD_GRAPH_BLOCK, head ? 0 : b0[b],
                                                 head ? 0 : b1[b], Ls[li], maxL, NULL, 0};
            e[li].block = head ? -1 : b;
            e[li].l0 = shapes[li].l0;
            e[li].l1 = shapes[li].l1;
            e[li].L = Ls[li];
        }
        if ((rc = measure_graph(&c, shapes, n_L, e, err))) goto done;
    }
done:
    sd_kv_free(&kv);
    sd_backend_free(be);
    sd_free(rows);
    sd_aligned_free(x);
    sd_aligned_free(logits);
    sd_aligned_free(evict);
    if (rc) sd_profile_free(out);
    return rc;
}

int sd_profile_save(const struct sd_profile *p, const char *path, struct sd_err *err) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "profile path too long");
    FILE *f = fopen(tmp, "w");
    if (!f) return sd_err_set(err, SDNPU_ERR_IO, "%s: cannot write: %s", tmp, strerror(errno));
    fprintf(f, "{\n\"format\": \"sdnpu-profile-1\",\n\"key\": \"%s\",\n\"entries\": [\n", p->key);
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

/* One entry as sd_profile_save writes it; false when it is anything else. */
static bool read_entry(const json_t *o, struct sd_profile_entry *e) {
    long long block, l0, l1, L, bytes;
    const json_t *load = json_object_get(o, "load_ms"), *comp = json_object_get(o, "compute_ms");
    if (!int_in(o, "block", -1, SD_MAX_BLOCKS - 1, &block) || !int_in(o, "l0", INT32_MIN, INT32_MAX, &l0) ||
        !int_in(o, "l1", INT32_MIN, INT32_MAX, &l1) || !int_in(o, "L", 1, SD_MAX_BATCH_ROWS, &L) ||
        !int_in(o, "bytes", 0, LLONG_MAX, &bytes) || !json_is_number(load) || !json_is_number(comp))
        return false;
    *e = (struct sd_profile_entry){
        (int32_t)block,          (int32_t)l0,  (int32_t)l1, (int32_t)L, json_number_value(load),
        json_number_value(comp), (size_t)bytes};
    return true;
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
        return sd_err_set(err, SDNPU_ERR_FORMAT, "%s:%d: not a profile entry: column %d: %s", path, je.line,
                          je.column, je.text);
    int rc = SDNPU_OK;
    const char *k = json_string_value(json_object_get(doc, "key"));
    const json_t *entries = json_object_get(doc, "entries");
    size_t n = json_array_size(entries);
    if (!k || n == 0) {
        rc = sd_err_set(err, SDNPU_ERR_FORMAT, "%s: no key or no entries", path);
        goto done;
    }
    if (n > 100000) {
        rc = sd_err_set(err, SDNPU_ERR_FORMAT, "%s: too many entries", path);
        goto done;
    }
    snprintf(out->key, sizeof out->key, "%s", k);
    if (!(out->entries = sd_calloc(n, sizeof *out->entries))) {
        rc = sd_err_set(err, SDNPU_ERR_OOM, "out of memory reading %s", path);
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        struct sd_profile_entry e;
        if (!read_entry(json_array_get(entries, i), &e)) {
            rc = sd_err_set(err, SDNPU_ERR_FORMAT, "%s: entry %zu: not a profile entry", path, i + 1);
            goto done;
        }
        out->entries[out->n_entries++] = e;
        if (e.block + 1 > out->n_blocks) out->n_blocks = e.block + 1;
        bool seen = false;
        for (int32_t j = 0; j < out->n_L; j++)
            seen |= out->Ls[j] == e.L;
        if (!seen && out->n_L < SD_PROFILE_MAX_L) out->Ls[out->n_L++] = e.L;
    }
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
