/*
 * cli/eval.h - what the parts of `sdnpu eval` share (private to cli/eval*.c):
 * the run's settings and records (struct eval), the record store and
 * results.json (eval_results.c), and the reports written from the records
 * (eval_report.c). eval.c is the command and eval_run.c runs the
 * samples; see eval.c's opening comment.
 */
#ifndef SD_CLI_EVAL_H
#define SD_CLI_EVAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dataset.h"
#include "sdnpu.h"

#define EVAL_MAX_METHODS 24
#define EVAL_MAX_DATASETS 32

enum rec_status { REC_OK = 0, REC_ERROR = 1 };

/* One run of one method on one sample. */
struct rec {
    char *dataset, *id, *task, *method;
    int status;
    char *msg; /* error text, "" when ok */
    int32_t n_prompt, n_generated, verify_steps, drafted, accepted;
    double prefill_ms, decode_ms, draft_ms, verify_ms, acceptance;
    int64_t graph_rows, pad_rows;
    bool have_tokens; /* the generated token ids were read back (see read_output_tokens) */
    size_t n_out_tokens;
    uint64_t out_hash; /* FNV-1a of the generated token ids */
    int lossless;      /* 1 equal to cpu-vanilla, 0 different, -1 unknown */
    int stop_reason;   /* enum sdnpu_stop_reason; -1 unknown (a record from before it was kept) */
    char *output;
};

struct method {
    char name[64];
    struct sdnpu_spec spec; /* the name (without :fixed) parsed once, when the list is read */
    bool fixed;             /* METHOD:fixed: cost-aware drafting off */
    bool unavailable;
    bool no_history; /* the engine refused a history store for it: run without */
    char why[400];
};

struct eval {
    const char *model_path;
    const char *out_dir;
    const char *kernels; /* "fast" or "ggml" */
    int32_t n_predict, n_threads, n_verify, draft_max;
    int32_t l2; /* the rows the session's verification graph has: n_verify, or its profile's choice */
    long limit;
    uint64_t seed;
    bool strict;
    bool guard; /* the degeneration guard on every method (--guard) */
    bool analyze; /* --analyze: replay the drafters instead of running the methods */
    const char *costs; /* --costs PROFILE: with --analyze, the policy's graph options priced by it */
    const char *draft_model; /* --draft-model PATH: with --analyze, replay its greedy drafts too */
    const char *draft_costs; /* --draft-costs PROFILE: the draft model's passes priced by it */
    int32_t draft_window;    /* --draft-window N: the draft model reads the prompt's last N tokens (0: all) */
    struct method methods[EVAL_MAX_METHODS];
    size_t n_methods;
    struct ds_set sets[EVAL_MAX_DATASETS];
    size_t n_sets;
    struct rec *recs;
    size_t n_recs, cap_recs;
    struct sdnpu_model *model;
    struct sdnpu_session *session;
};

/* A sample's prompt as the methods get it: for a model with a chat template
 * a system turn and a user turn (cli_ds_build_chat; the engine renders them),
 * for a base model the text it continues (cli_ds_build_prompt). */
struct prompt {
    char *text; /* the user turn, or the whole base-model prompt */
    size_t len;
    const char *system; /* the system turn (chat), else NULL */
    const char *stops[DS_MAX_STOPS];
    size_t n_stops;
};

/* ------------------------------------------------ eval_results.c */

/* A copy of s; out of memory ends the command (exit 1): eval keeps no
 * half-made record. */
char *eval_strdup(const char *s);
void eval_rec_free(struct rec *r);
/* A new zeroed record at the end of ev->recs (lossless and stop_reason
 * unknown); moves ev->recs, so pointers to earlier records go stale. */
struct rec *eval_rec_push(struct eval *ev);
/* The last record of that sample and method, or NULL. */
const struct rec *eval_rec_find(const struct eval *ev, const char *dataset, const char *id,
                                const char *method);

/* Rewrite OUT/results.json atomically (temp + rename). 0, or -1 reported. */
int eval_write_results(const struct eval *ev);
/* Load an earlier run's records. Returns 0 (records loaded, or no file),
 * -1 when the file is unreadable or was made with other settings. */
int eval_load_results(struct eval *ev);

/* ------------------------------------------------- eval_report.c */

/* The per-dataset tables and the paper-layout tables, on stdout. */
void eval_print_tables(const struct eval *ev);
/* OUT/samples.csv and OUT/summary.csv. 0, or -1 reported. */
int eval_write_csvs(const struct eval *ev);
/* OUT/chart.svg. 0, or -1 reported. */
int eval_write_svg(const struct eval *ev);
/* OUT/prompts.jsonl. 0, or 1 reported. */
int eval_write_prompts(const struct eval *ev);

/* ------------------------------------------------ eval_analyze.c */

/* --analyze: one greedy generation per selected sample and a replay of the
 * drafting variants over it; tables on stdout, OUT/analysis.json. 0, or -1
 * reported. */
int eval_analyze(struct eval *ev);

/* ------------------------------------------------ eval_dmodel.c */

/* What a draft model (--draft-model) drafts along a sample's output, from
 * one teacher-forced pass over the prompt and the output (see the file's
 * opening comment). Index i is the draft for out[i], i >= 1. */
#define DM_SUBSETS 2
/* The subsets: the prompt's tokens and the ids below these. */
extern const int32_t k_dm_subset_ids[DM_SUBSETS];
struct dm_pred {
    int32_t n;                 /* output tokens */
    int32_t *tok;              /* greedy token, whole vocabulary */
    float *p;                  /* its probability */
    int32_t *sub[DM_SUBSETS];  /* greedy token among subset s */
    float *p_sub[DM_SUBSETS];  /* its probability over the subset */
    int32_t n_sub[DM_SUBSETS]; /* subset sizes */
    double prefill_ms;         /* the draft model's prefill of the prompt */
};
struct dm;
struct sd_err;
/* Load ev->draft_model (it must share ev->model's vocabulary) and a
 * session for it. 0, or -1 reported. */
int eval_dm_open(const struct eval *ev, struct dm **out);
void eval_dm_close(struct dm *dm); /* NULL is fine */
/* The predictions along all[n_prompt..n_all) after the prompt all[0..n_prompt). */
int eval_dm_predict(struct dm *dm, const int32_t *all, int32_t n_prompt, int32_t n_all, struct dm_pred *o,
                    struct sd_err *err);
void eval_dm_pred_free(struct dm_pred *p);

/* ---------------------------------------------------------- eval.c */

/* text tokenized as the model reads a history item (no special tokens):
 * *tok malloc'd ([*n]). SDNPU_OK or the tokenizer's status (SDNPU_ERR_OOM
 * when out of memory); *tok is NULL or to be freed either way. */
int eval_tokenize(struct sdnpu_model *model, const char *text, int32_t **tok, size_t *n);

/* The sample's prompt for ev's model (chat or base). 0, or -1 when out of
 * memory; p->text is malloc'd. */
int eval_sample_prompt(const struct eval *ev, const struct ds_sample *s, struct prompt *p);

/* Every selected sample with every method (cli/eval_run.c), then the
 * tables and files: the command's exit status (0; 1 a failure; 3 a method
 * not lossless; 130 interrupted, the results kept for --resume). */
int eval_run(struct eval *ev);

#endif /* SD_CLI_EVAL_H */
