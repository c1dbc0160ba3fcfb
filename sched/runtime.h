/*
 * sched/runtime.h - a session's graphs and how requests run on them.
 *
 * The model is cut into blocks of layers. For every block the runtime
 * holds up to three static graphs, each prepared on first use and kept:
 *   G1  L1 rows (the prefill graph, default 256),
 *   G2  L2 rows (the decode/verification graph, default 4),
 *   G0  1 row   (cpu-vanilla decoding),
 *   GR  32 rows (a final partial chunk's passes; only where L2 < 32 < L1,
 *       the weights are shared, so that the set costs its scratch alone,
 *       and neither a memory limit nor graph switching asks for fewer sets),
 * and head graphs (final norm + output projection) of 1 row (H1) and L2
 * rows (H2). Prefill runs whole chunks of L1 tokens on G1; a final partial
 * chunk runs as the passes of G1 (padded to L1: "pad"), GR, G2 and G0
 * ("pipe", after HeteroInfer) that cost least by the profile or, lacking
 * one, by the run times this session has measured. Decoding runs one row
 * on G0, or up to L2 rows padded to L2 on G2.
 *
 * Every graph counts against the session's memory limit; a graph that does
 * not fit fails to prepare with SDNPU_ERR_OOM and the runtime stays usable
 * with what it already holds.
 *
 * The runtime owns the KV cache its graphs write (graphs/kv.h): the layers
 * above change it only through sd_rt_kv_*, never through a backend.
 *
 * Per-block graph state. Each block has a prefill graph of its own: G1
 * until something above switches it (progressive graph switching, paper
 * section 3.2, moves blocks from G1 to G2 one at a time while prefill
 * runs). A block whose prefill graph is G2 runs an L1-row chunk as
 * ceil(L1 / L2) passes of L2 rows; because every graph is batch-invariant
 * the residual stream, the cache and the logits come out bit-identical
 * whichever graph each block is on.
 */
#ifndef SD_RUNTIME_H
#define SD_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "graphs/graph.h"

enum sd_prefill_policy { SD_PREFILL_AUTO = 0, SD_PREFILL_PAD = 1, SD_PREFILL_PIPE = 2 };
enum sd_graph_set { SD_SET_G1 = 0, SD_SET_G2 = 1, SD_SET_G0 = 2, SD_SET_GR = 3, SD_SET_N = 4 };
/* GR's rows, where it is used: 16, where a 16-row pass costs about the same a
 * row as a 32-row one on these CPUs and pads half as many rows (a chat
 * turn of 18 tokens prefills in 103 ms instead of 155 on the 1.5B). */
#define SD_REMAINDER_ROWS 16
/* How a prefill moves the blocks from G1 to G2 (sched/switch.h). */
enum sd_switch_mode { SD_SWITCH_OFF = 0, SD_SWITCH_SYNC = 1, SD_SWITCH_NAIVE = 2, SD_SWITCH_PROGRESSIVE = 3 };

#define SD_MAX_BLOCKS 64

struct sd_rt_params {
    const char *backend;   /* "cpu" (NULL) or "opencl" */
    int cl_device;
    enum sd_kernels kernels; /* cpu backend: fast (packed, default) or ggml order */
    struct sd_wstore *weights; /* the model's shared prepared weights (graphs/weights.h); NULL: private */
    int32_t n_ctx;
    int32_t n_prefill;     /* L1 */
    int32_t n_verify;      /* L2 */
    int32_t block_layers;  /* layers per block; 0 = about a sixth of the model */
    size_t mem_limit;      /* 0 = none */
    enum sd_prefill_policy prefill_policy;
};

/* Counters of rows computed, for the stats. */
struct sd_rt_counts {
    int64_t rows;     /* rows computed by block graphs */
    int64_t pad_rows; /* of which padding */
    int64_t prefill_passes[SD_SET_N]; /* prefill passes run on each set */
    double subset_ms; /* time in subset heads' runs (struct sd_subset_sink) */
    double switch_wait_ms; /* graph switching: the session's thread waiting for the loader */
    double loader_ms;      /* graph switching: the loader thread preparing */
};

struct sd_rt;

/* Cut the model into blocks of block_layers layers (0: about a sixth of
 * the model): block b is layers [b0[b], b1[b]). Returns the block count
 * (at most SD_MAX_BLOCKS). */
int32_t sd_rt_plan_blocks(const struct sd_model *m, int32_t block_layers, int32_t *b0, int32_t *b1);

/* Make the runtime and its KV cache of p->n_ctx slots (empty). */
int sd_rt_create(const struct sd_model *m, struct sd_pool *pool, const struct sd_rt_params *p, struct sd_rt **out,
                 struct sd_err *err);
void sd_rt_free(struct sd_rt *rt);

/* The logits of prefill, handed over as they are computed: rows
 * [pos0, pos0 + n) of the prefilled tokens (pos0 counts from the first
 * token of this prefill call), logits [n][n_vocab], valid during the call
 * only. n is at most L2, so no [n_tokens][n_vocab] buffer is ever needed
 * (4 GiB at 4,096 tokens of Gemma 3's vocabulary). Returning false stops
 * the prefill with SDNPU_ABORTED. */
struct sd_logit_sink {
    bool (*fn)(void *ud, int32_t pos0, int32_t n, const float *logits);
    void *ud;
};

/* In-context calibration's view of prefill (calib/calib.h, paper section
 * 3.3): every prefilled token's logits over a subset of the vocabulary,
 * tok[0..n_tok) (distinct ids). The runtime prepares a subset head for the
 * call (the output projection's rows for those tokens only, L1 rows; it
 * counts against the memory limit) and runs it once per prefill chunk:
 * L1 x n_tok x d multiply-adds instead of L1 x n_vocab x d, so it costs a
 * few per cent of the chunk, where a full head for every row would cost
 * more than the chunk's layers. fn gets rows [pos0, pos0 + n) of the
 * prefilled tokens, logits [n][n_tok], n <= L1, valid during the call;
 * returning false stops the prefill with SDNPU_ABORTED. The subset head is
 * released when the prefill returns. */
struct sd_subset_sink {
    const int32_t *tok;
    int32_t n_tok;
    bool (*fn)(void *ud, int32_t pos0, int32_t n, const float *logits);
    void *ud;
};

/* A prefill's progress: fn is called after each chunk with the tokens done
 * of n (the last call has done == n); returning false before the last
 * chunk stops the prefill there with SDNPU_ABORTED (what the chunks wrote
 * is the caller's to drop, as after any failed prefill). */
struct sd_prefill_watch {
    bool (*fn)(void *ud, int32_t done, int32_t n);
    void *ud;
};

/* Causal prefill of tokens[0..n) at slots and positions n_past.. . If sink
 * is not NULL every token's logits go to it, in order; if subset is not
 * NULL every token's subset logits go to it, in order; watch (may be NULL)
 * sees each chunk done; if last_logits is not NULL it receives the last
 * token's logits [n_vocab]. */
int sd_rt_prefill(struct sd_rt *rt, const int32_t *tokens, int32_t n, int32_t n_past,
                  const struct sd_logit_sink *sink, const struct sd_subset_sink *subset,
                  const struct sd_prefill_watch *watch, float *last_logits, struct sd_err *err);

/* Decode rows[0..n_real) (positions, slots and masks set by the caller;
 * base is the slot of batch row 0). With on_l2 false and n_real == 1 the
 * row runs on G0; otherwise on G2 padded to L2 rows (n_real <= L2).
 * logits: [n_real][n_vocab], or NULL to leave them where the head wrote
 * them (sd_rt_logits): a verification pass's rows are read in place, not
 * copied (8 MB at L2 = 8). argmax: NULL, or [n_real] for each row's
 * greedy token, sd_argmax of its logits, which the cpu head takes while
 * it writes them (greedy verification then never reads the logits). */
int sd_rt_decode(struct sd_rt *rt, const struct sd_row *rows, int32_t n_real, int32_t base, bool on_l2,
                 float *logits, int32_t *argmax, struct sd_err *err);
/* sd_rt_decode for the greedy tokens argmax[n_real] alone: the logits are
 * not kept (sd_rt_logits holds no valid rows afterwards), which spares a
 * pass writing them where the backend can (8 MB at L2 = 8). */
int sd_rt_decode_greedy(struct sd_rt *rt, const struct sd_row *rows, int32_t n_real, int32_t base, bool on_l2,
                        int32_t *argmax, struct sd_err *err);
/* sd_rt_decode for a top-k sampler (graphs/graph.h's sd_graph_run_topk):
 * logits exact for every token that can be among a row's k best and for
 * keep[0, n_keep), the rest possibly -infinity. */
int sd_rt_decode_topk(struct sd_rt *rt, const struct sd_row *rows, int32_t n_real, int32_t base, bool on_l2,
                      float *logits, int32_t k, const int32_t *keep, int32_t n_keep, struct sd_err *err);
/* The logits of the last sd_rt_decode given NULL: [n_real][n_vocab], valid
 * until the runtime runs again. */
float *sd_rt_logits(struct sd_rt *rt);

/* The KV cache. Forget slots [from, n_ctx); copy slot src to dst (moving
 * accepted draft rows into place). */
void sd_rt_kv_truncate(struct sd_rt *rt, int32_t from);
void sd_rt_kv_move(struct sd_rt *rt, int32_t src, int32_t dst);
/* Snapshots of the cache's first n slots (graphs/kv.h's sd_kv_snapshot). */
size_t sd_rt_kv_snapshot_bytes(const struct sd_rt *rt, int32_t n);
void sd_rt_kv_snapshot(const struct sd_rt *rt, int32_t n, void *dst);
/* A snapshot from a cache of src_keys (the same as this one's, or the other
 * kind, converted: graphs/kv.h). */
void sd_rt_kv_restore(struct sd_rt *rt, const void *src, enum sd_kv_keys src_keys, int32_t n_src, int32_t n);
/* The keys this runtime's cache holds. */
enum sd_kv_keys sd_rt_kv_keys(const struct sd_rt *rt);

/* Per-block graph state: the set block b runs prefill chunks on (SD_SET_G1
 * or SD_SET_G2; G1 at creation). Switching to a set whose graph for the
 * block is not prepared prepares it on the next run. */
enum sd_graph_set sd_rt_block_set(const struct sd_rt *rt, int32_t b);
int sd_rt_set_block_set(struct sd_rt *rt, int32_t b, enum sd_graph_set set, struct sd_err *err);

/* Give back every prepared graph (an app going to the background; a
 * benchmark starting over): blocks prefill on G1 again, graphs are
 * prepared again on use, and the times measured so far are kept. Not
 * during a switch's prefill (there is none between calls). */
void sd_rt_release_graphs(struct sd_rt *rt);

/* Prepare a graph set (all blocks) and its head now, e.g. at start so the
 * first request does not pay for it. A set the runtime does not use: OK,
 * nothing prepared. */
int sd_rt_prepare_set(struct sd_rt *rt, enum sd_graph_set set, struct sd_err *err);
/* Prepare the sets of which `like` holds every block (and their heads):
 * a runtime replacing another (a session's resized context) takes the
 * shared weights before the other gives them back, which would otherwise
 * drop them from the store and pack them again on first use. */
int sd_rt_prepare_like(struct sd_rt *rt, const struct sd_rt *like, struct sd_err *err);

/* Graph switching (sched/switch.h) for the prefills to come. OFF (the
 * default) prepares each set on first use and keeps them all. Any other
 * mode moves the blocks from G1 to G2 during each prefill, as the mode
 * plans it, preparing G2 graphs on a loader thread where the backend can
 * (else on this thread, as sync does), and gives back each G1 once its G2
 * is ready; the one-row head gives way to the L2-row head, so that after
 * a prefill the runtime holds the decode set alone. One-row decoding then
 * runs the one-row blocks (G0, prepared on first use, given back at the
 * next switch) that fit in a quarter of the decode set, the other blocks
 * on G2 padded, and the L2-row head: one head, never two. The output is
 * bit-identical in every mode. At the
 * start of a prefill, blocks left on G2 go back to G1 when the prompt's
 * whole chunks save more than preparing G1 again costs. */
void sd_rt_set_switch(struct sd_rt *rt, enum sd_switch_mode mode);
enum sd_switch_mode sd_rt_switch_mode(const struct sd_rt *rt);
/* Times the switch plans with (ms; NULL or entries <= 0 leave an estimate
 * to be measured): block b's run of one L1 chunk on G1 and on G2 (as L2
 * passes), and the G2 load of block b on the loader thread, the head's at
 * [n_blocks]. From the profile; measured values replace them as they come. */
void sd_rt_set_block_costs(struct sd_rt *rt, const double *g1_ms, const double *g2_ms, const double *load_ms);
/* The most bytes prepared and reserved at any moment since the last reset
 * (both threads' graphs; the memory limit bounds it). */
size_t sd_rt_peak_bytes(const struct sd_rt *rt);
void sd_rt_reset_peak(struct sd_rt *rt);

int32_t sd_rt_n_prefill(const struct sd_rt *rt);
/* The rows of a set's graphs; 0 for a set this runtime does not use (GR). */
int32_t sd_rt_set_rows(const struct sd_rt *rt, enum sd_graph_set set);
int32_t sd_rt_n_verify(const struct sd_rt *rt);
int32_t sd_rt_n_blocks(const struct sd_rt *rt);
size_t sd_rt_prepared_bytes(const struct sd_rt *rt);
/* Of those, the model's shared prepared weights (0 with private weights). */
size_t sd_rt_shared_weight_bytes(const struct sd_rt *rt);
/* Total time spent preparing graphs on the session's thread so far, and
 * waiting for the loader thread to prepare them. */
double sd_rt_prepare_ms(const struct sd_rt *rt);
const char *sd_rt_backend_desc(const struct sd_rt *rt);
struct sd_rt_counts sd_rt_counts(const struct sd_rt *rt);
/* The time of one pass of each set over all blocks (ms), from a profile,
 * for the auto prefill policy; an entry <= 0 leaves that set to be
 * measured by its runs. */
void sd_rt_set_costs(struct sd_rt *rt, const double ms[SD_SET_N]);

#endif /* SD_RUNTIME_H */
