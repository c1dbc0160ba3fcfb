/*
 * sched/profile.h - the offline profile of graph load and compute times.
 *
 * For each block of layers (and the head) and each row count L, the time
 * to prepare (load) its graph and the time to run it, repeated, median
 * kept. The scheduler reads it to choose between padding and piping the
 * last prefill chunk (and, in the progressive graph switching of a later
 * stage, to overlap loads with compute: the paper's eq. 1-2).
 *
 * The profile is written as JSON beside the model file (MODEL.profile.json,
 * symbolic links followed, so every name of one file shares one profile)
 * and reused while its key (model file size and time, backend, threads,
 * CPU, sdnpu version) matches.
 */
#ifndef SD_PROFILE_H
#define SD_PROFILE_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "sched/runtime.h"

#define SD_PROFILE_MAX_L 16
#define SD_PROFILE_MAX_REPS 32
/* The longest prompt a profile decodes after (sd_profile_spec). */
#define SD_PROFILE_MAX_PROMPT SD_MAX_BATCH_ROWS

struct sd_profile_entry {
    int32_t block;        /* block index, or -1 for the head */
    int32_t l0, l1;       /* its layers */
    int32_t L;
    double load_ms;       /* median prepare time */
    double compute_ms;    /* median run time */
    size_t bytes;         /* prepared bytes */
};

struct sd_profile {
    char key[512];
    int32_t n_L;
    int32_t Ls[SD_PROFILE_MAX_L];
    int32_t n_blocks;
    int32_t n_entries;
    struct sd_profile_entry *entries; /* (n_blocks + 1) * n_L: blocks, then the head, each over Ls */
    /* Measured only (not saved): the tokens greedy decoding wrote after
     * the text, the head's first row in each round (sd_profile_measure). */
    int32_t n_decoded;
    int32_t decoded[SD_PROFILE_MAX_REPS];
};

/* The cache key for a model file on this machine and backend. */
void sd_profile_key(const char *model_path, const char *backend_desc, int n_threads, char *key, size_t cap);

typedef void (*sd_profile_progress_fn)(int done, int total, const struct sd_profile_entry *e, void *user);

/* What sd_profile_measure measures, and on what. */
struct sd_profile_spec {
    const char *backend; /* as sd_backend_create takes them */
    int cl_device;
    enum sd_kernels kernels;
    struct sd_wstore *weights; /* the shared prepared copy the sessions run on; NULL: each graph its own */
    const int32_t *Ls;         /* [n_L] row counts */
    int32_t n_L;
    int reps; /* passes a row count, after a warm-up one */
    const int32_t
        *tokens; /* the rows' tokens, [n_tokens] repeated; NULL: tokens spread over the vocabulary */
    int32_t n_tokens;
    /* A request whose answer the head's first rows are decoded from
     * (greedy; [n_prompt] tokens, at most SD_PROFILE_MAX_PROMPT), as a
     * session decodes; NULL and 0: they continue the text. */
    const int32_t *prompt;
    int32_t n_prompt;
    sd_profile_progress_fn progress; /* NULL: none */
    void *user;
};

/* Measure every block and the head of model m at every L: each graph
 * timed inside whole forward passes over the rows' tokens (the blocks in
 * order, then the head's greedy tokens, as decoding runs them), so that
 * every graph reads its weights from memory as a pass does. The tokens
 * matter to the head: a certified head's cost follows how sure its rows
 * are (graphs/cert.h), so they should be text in the model's language.
 * The head's first row in each round is one of the rows greedy decoding
 * computes after the prompt, else after the text (out->decoded: the
 * model's own words, as a decoding step's first row is), its other rows
 * the text's last.
 * The first L's graphs run a pass right before each pass of every other
 * L (their times are the medians of all of those), and every other L's
 * time is the median of its ratios to those passes times the first L's
 * median, so that the ratios between any two Ls compare passes of the
 * same moments. Uses a scratch KV cache. */
int sd_profile_measure(const struct sd_model *m, struct sd_pool *pool, const struct sd_profile_spec *spec,
                       struct sd_profile *out, struct sd_err *err);

int sd_profile_save(const struct sd_profile *p, const char *path, struct sd_err *err);
/* SDNPU_ERR_NOT_FOUND if there is no file; SDNPU_ERR_FORMAT if it cannot be
 * read; SDNPU_ERR_STATE if its key differs from key (stale). */
int sd_profile_load(const char *path, const char *key, struct sd_profile *out, struct sd_err *err);
void sd_profile_free(struct sd_profile *p);

/* Where the profile of the model file model_path names is kept: beside the
 * file itself, symbolic links followed (models/default.gguf and the file it
 * links to share one), or beside model_path where it cannot be resolved.
 * false if the path does not fit in cap. */
bool sd_profile_path(const char *model_path, char *path, size_t cap);
/* sd_profile_load of the model's profile: from sd_profile_path, else (not
 * found there) from beside model_path as named, where profiles were kept
 * before; the path read in found (may be NULL). */
int sd_profile_load_for(const char *model_path, const char *key, struct sd_profile *out, char *found, size_t cap,
                        struct sd_err *err);

/* Whole-model compute time of one pass at L (sum over blocks, head
 * excluded), or -1 if L was not profiled. */
double sd_profile_pass_ms(const struct sd_profile *p, int32_t L);
/* The same with the head: one decoding step of L rows, as the cost-aware
 * drafting policy compares them; -1 if L was not profiled. */
double sd_profile_step_ms(const struct sd_profile *p, int32_t L);

#endif /* SD_PROFILE_H */
