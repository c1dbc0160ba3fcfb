/*
 * cli/eval_analyze.h - inside `sdnpu eval --analyze` (cli/eval.h is the
 * command's face): the drafting variants it replays, its counts, and what
 * the replay (cli/eval_analyze.c) hands the report
 * (cli/eval_analyze_report.c). The tables are static const: each file
 * reads their names and counts.
 */
#ifndef SD_CLI_EVAL_ANALYZE_H
#define SD_CLI_EVAL_ANALYZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "draft/draft.h"
#include "eval.h"
#include "sched/profile.h"
#include "verify/verify.h"

/* The ceiling's draft length: what an 8-row graph verifies. */
#define AN_DEPTH 7
#define AN_PAIRS 4096
#define AN_TOP_PAIRS 15
#define AN_PIECE 64

struct an_variant {
    const char *name, *drafter;
    bool calib;
    int32_t lead;  /* draft.h's calib_lead */
    int32_t rows;  /* graph rows: the root and rows - 1 draft tokens */
    int32_t depth; /* the longest draft path; 0: the engine's (16, at most rows - 1) */
    bool recent;   /* copy the most recent occurrence of the match, not the one the text follows (draft.h's
                      follow) */
    bool replies;  /* the earlier samples' outputs as the replies store, as the session keeps them */
};

static const struct an_variant k_variants[] = {
    {"pld", "pld", false, -1, 8, 0, false, false},
    {"pld+calib", "pld", true, -1, 8, 0, false, false},
    {"sam", "sam", false, -1, 8, 0, false, false},
    {"sam+calib", "sam", true, -1, 8, 0, false, false},
    {"sam+calib lead 0", "sam", true, 0, 8, 0, false, false},
    {"sam+calib lead 1", "sam", true, 1, 8, 0, false, false},
    {"sam-tree", "sam-tree", false, -1, 8, 0, false, false},
    {"sam-tree+calib", "sam-tree", true, -1, 8, 0, false, false},
    {"sam-tree 16 rows", "sam-tree", false, -1, 16, 0, false, false},
    {"sam-tree+calib 16 rows", "sam-tree", true, -1, 16, 0, false, false},
    {"sam-tree+calib 32 rows", "sam-tree", true, -1, 32, 0, false, false},
    {"sam-tree 8 rows depth 4", "sam-tree", false, -1, 8, 4, false, false},
    {"sam-tree 16 rows depth 4", "sam-tree", false, -1, 16, 4, false, false},
    {"sam-tree 16 rows depth 8", "sam-tree", false, -1, 16, 8, false, false},
    {"sam-tree, most recent occurrence", "sam-tree", false, -1, 8, 0, true, false},
    {"sam-tree 4 rows", "sam-tree", false, -1, 4, 0, false, false},
    {"sam-tree 4 rows, most recent occurrence", "sam-tree", false, -1, 4, 0, true, false},
    {"sam-tree 4 rows + earlier replies", "sam-tree", false, -1, 4, 0, false, true},
    {"sam-tree + earlier replies", "sam-tree", false, -1, 8, 0, false, true},
};
#define AN_VARIANTS ((int)(sizeof k_variants / sizeof k_variants[0]))
/* The variant whose steps the outcome tables follow. */
#define AN_FOCUS 3

/* Graph options for the priced replay (--costs): the rows of each graph a
 * step may run, 1 the plain one-row graph; sam-tree drafts for the
 * largest. */
struct an_opts {
    const char *name;
    int32_t n, L[SD_POLICY_MAX_OPTS];
    bool oracle; /* an oracle instead of the policy: the largest graph where its draft gains a token, else one
                    row */
};
static const struct an_opts k_opts[] = {
    {"1, 2", 2, {1, 2}, false},       {"1, 3", 2, {1, 3}, false},         {"1, 4", 2, {1, 4}, false},
    {"1, 8", 2, {1, 8}, false},       {"1, 16", 2, {1, 16}, false},       {"1, 2, 4", 3, {1, 2, 4}, false},
    {"1, 4, 8", 3, {1, 4, 8}, false}, {"1, 4 (oracle)", 2, {1, 4}, true}, {"1, 8 (oracle)", 2, {1, 8}, true},
};
#define AN_OPTS ((int)(sizeof k_opts / sizeof k_opts[0]))

/* Break-even replays (--costs): each pair's larger option set replayed
 * with its largest graph's step at AN_BE_GRID ratios of the smaller set's
 * largest (1.00, 1.02, ...), all else priced by the profile, to find the
 * ratio at which the rows it adds stop paying for themselves: the
 * evidence behind sd_session_verify_rows' thresholds. */
struct an_be_pair {
    int small, large; /* k_opts indices */
};
static const struct an_be_pair k_be_pairs[] = {{0, 1}, {1, 2}, {2, 3}}; /* 2 -> 3 rows, 3 -> 4, 4 -> 8 */
#define AN_BE_PAIRS ((int)(sizeof k_be_pairs / sizeof k_be_pairs[0]))
#define AN_BE_GRID 21
#define AN_BE_STEP 0.02
static inline double an_be_ratio(int g) { return 1.0 + AN_BE_STEP * g; }

/* Draft-model variants (--draft-model): up to k draft tokens a step (0:
 * none, retrieval alone),
 * verified on a graph of one row more, drafting stopped at a token whose
 * probability is below pmin, with the draft model's whole head or a subset
 * head (eval.h's k_dm_subset_ids); hybrid N: the default's retrieval
 * drafts (sam-tree on 4 rows, follow, the earlier replies) where their
 * main path matched at least N tokens, the draft model elsewhere. */
struct an_dm_variant {
    const char *name;
    int32_t k;
    float pmin;
    int32_t sub;    /* -1: the whole head */
    int32_t hybrid; /* 0: the draft model alone */
};
static const struct an_dm_variant k_dm_variants[] = {
    {"draft model, 1 token (2 rows)", 1, 0.0f, -1, 0},
    {"draft model, 3 tokens (4 rows)", 3, 0.0f, -1, 0},
    {"draft model, 3 tokens, p >= 0.5", 3, 0.5f, -1, 0},
    {"draft model, 7 tokens (8 rows)", 7, 0.0f, -1, 0},
    {"draft model, 7 tokens, p >= 0.5", 7, 0.5f, -1, 0},
    {"draft model, 3 tokens, head: ids < 8192 + prompt", 3, 0.0f, 0, 0},
    {"draft model, 3 tokens, head: ids < 32768 + prompt", 3, 0.0f, 1, 0},
    {"retrieval alone (4 rows, every draft verified)", 0, 0.0f, -1, 1},
    {"retrieval matching 1+, else draft model 1 token", 1, 0.0f, -1, 1},
    {"retrieval matching 1+, else draft model 1 token, head < 32768", 1, 0.0f, 1, 1},
    {"retrieval matching 1+, else draft model 2 tokens, head < 32768", 2, 0.0f, 1, 1},
    {"retrieval matching 1+, else draft model 3 tokens, p >= 0.5", 3, 0.5f, -1, 1},
    {"retrieval matching 2+, else draft model 3 tokens, p >= 0.5", 3, 0.5f, -1, 2},
    {"retrieval matching 2+, else draft model 3 tokens, p >= 0.5, head < 32768", 3, 0.5f, 1, 2},
    {"retrieval matching 3+, else draft model 3 tokens", 3, 0.0f, -1, 3},
};
#define AN_DM ((int)(sizeof k_dm_variants / sizeof k_dm_variants[0]))

struct an_dm_count {
    int64_t steps, tokens, passes, drafted, from_dm, from_ret; /* drafted: the draft model's tokens */
    double ms; /* priced (--draft-costs): the model's steps and the draft model's passes */
};

struct an_priced {
    int64_t steps, tokens, by_L[SD_POLICY_MAX_OPTS];
    double ms;
};

enum { RUN_BINS = 5 }; /* steps accepting 0, 1, 2-3, 4-7, 8 or more */
static const char *const k_run_names[RUN_BINS] = {"0", "1", "2-3", "4-7", "8+"};

struct an_count {
    int64_t steps, tokens, accepted, drafted, empty;
    int64_t by_store[SD_DRAFT_STORE_COUNT +
                     1]; /* accepted tokens by the main path's store; last: side branches */
    int64_t runs[RUN_BINS];
};

/* Ceilings: the stores a perfect selection may copy from. */
enum { OR_CTX, OR_CTX_OUT, OR_NO_CALIB, OR_ALL, OR_COUNT };
static const char *const k_oracle_names[OR_COUNT] = {
    "context", "context + output so far", "context + output + history", "all stores (+ calibrated)"};

enum { O_ABSENT, O_MISSED, O_FIRST, O_LATER, O_USED_UP, O_COUNT };
static const char *const k_outcome_names[O_COUNT] = {
    "no draft, no store holds the next token", "no draft, a store holds it",
    "rejected at the draft's first token", "rejected after accepting some", "whole draft accepted"};
enum { C_WORD, C_INSIDE, C_PUNCT, C_COUNT };
static const char *const k_class_names[C_COUNT] = {"a word's start", "inside a word", "punctuation or space"};

struct an_outcomes {
    int64_t outcome[O_COUNT];
    int64_t cls[C_COUNT]; /* the model's token where a draft was rejected */
    int64_t novel;        /* ... that occurs nowhere in the context */
    int64_t by_store[SD_DRAFT_STORE_COUNT];
};

struct an_set {
    const char *name;
    int64_t samples, n_out;
    struct an_count v[AN_VARIANTS];
    int64_t oracle_steps[OR_COUNT], oracle_tokens;
    struct an_outcomes oc;
    struct an_priced pr[AN_OPTS];
    struct an_priced be[AN_BE_PAIRS][AN_BE_GRID];
    struct an_dm_count dm[AN_DM];
    double prefill_ms, dm_prefill_ms; /* the model's prefill (calibration's share out), the draft model's */
};

struct an_pair {
    int32_t draft, model; /* -1: empty slot */
    int64_t n;
};

/* One sample's stores, built for the replay. */
struct an_stores {
    struct sd_sam *ctx, *out, *hist; /* out grows with the replay */
    const struct sd_sam *calib;      /* the session's; NULL without one */
    const struct sd_sam *replies;    /* the earlier samples' outputs */
};

struct an {
    struct eval *ev;
    struct sd_profile prof; /* --costs; n_entries 0 without */
    double step_ms[AN_OPTS][SD_POLICY_MAX_OPTS];
    struct an_set *sets;
    struct an_pair pairs[AN_PAIRS];
    struct sd_draft_tree tree;
    struct sd_sam *replies;  /* every analyzed sample's output so far, in run order */
    struct dm *dm;           /* --draft-model, else NULL */
    struct dm_pred pred;     /* its predictions along the sample in hand */
    struct sd_profile dprof; /* --draft-costs; n_entries 0 without */
    struct sd_err err;
};

/* Token tok's text, NUL-terminated in buf (AN_PIECE bytes; empty where it
 * has none), its length at *n. */
void an_piece(const struct an *an, int32_t tok, char *buf, size_t *n);
/* Whether every graph of option set oi has a step time (--costs). */
bool an_priced(const struct an *an, int oi);
/* Whether break-even pair p's two option sets are priced. */
bool an_be_priced(const struct an *an, int p);
/* The tables on stdout and OUT/analysis.json (cli/eval_analyze_report.c):
 * 0, or -1 when the file could not be written (said). */
int an_report(struct an *an);

#endif
