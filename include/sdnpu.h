/*
 * sdnpu.h - the public C API of sdnpu, an on-device LLM inference engine.
 *
 * Conventions (see docs/api.md for the full manual):
 *   - Opaque handles: struct sdnpu_model (read-only after load, shareable by
 *     threads) and struct sdnpu_session (one conversation, one thread at a time).
 *   - Every fallible call returns enum sdnpu_status; SDNPU_OK is 0, errors are
 *     negative, SDNPU_ABORTED (positive) means the caller stopped the work.
 *   - The detail of a failure is kept on the handle (sdnpu_model_last_error)
 *     and is also sent to the log callback. There is no global error state.
 *   - *_free(NULL) does nothing.
 *   - Caller-owned output buffers use size probing: when the buffer is too
 *     small the call returns SDNPU_ERR_BUFFER_TOO_SMALL and writes the size
 *     needed to the count pointer.
 */
#ifndef SDNPU_H
#define SDNPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32) && defined(SDNPU_SHARED)
#  if defined(SDNPU_BUILD)
#    define SDNPU_API __declspec(dllexport)
#  else
#    define SDNPU_API __declspec(dllimport)
#  endif
#elif defined(__GNUC__) && defined(SDNPU_SHARED)
#  define SDNPU_API __attribute__((visibility("default")))
#else
#  define SDNPU_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define SDNPU_VERSION_MAJOR 0
#define SDNPU_VERSION_MINOR 1
#define SDNPU_VERSION_PATCH 0

typedef int32_t sdnpu_token;

/** Status codes. Errors are negative; SDNPU_ABORTED is positive. */
enum sdnpu_status {
    SDNPU_OK = 0,
    SDNPU_ERR_INVALID_ARG = -1,      /**< a NULL handle, a bad parameter value */
    SDNPU_ERR_IO = -2,               /**< open/read/write/mmap failed */
    SDNPU_ERR_FORMAT = -3,           /**< a file or input is malformed */
    SDNPU_ERR_UNSUPPORTED = -4,      /**< well-formed, but not something sdnpu runs */
    SDNPU_ERR_OOM = -5,              /**< an allocation failed or a memory limit was hit */
    SDNPU_ERR_CONTEXT_FULL = -6,     /**< tokens would not fit the context */
    SDNPU_ERR_BUFFER_TOO_SMALL = -7, /**< caller's buffer too small; size needed was written */
    SDNPU_ERR_INVALID_UTF8 = -8,     /**< text is not valid UTF-8 */
    SDNPU_ERR_NOT_FOUND = -9,        /**< a key, tensor or file is missing */
    SDNPU_ERR_BACKEND = -10,         /**< the compute backend failed */
    SDNPU_ERR_STATE = -11,           /**< call made in the wrong order */
    SDNPU_ABORTED = 1                /**< the caller stopped the work (callback or cancel) */
};

/** A constant English name for a status, e.g. "SDNPU_ERR_FORMAT". Never NULL. */
SDNPU_API const char *sdnpu_status_str(enum sdnpu_status status);

/** The library version as "MAJOR.MINOR.PATCH". */
SDNPU_API const char *sdnpu_version(void);

/* ---------------------------------------------------------------- logging */

enum sdnpu_log_level {
    SDNPU_LOG_ERROR = 0,
    SDNPU_LOG_WARN = 1,
    SDNPU_LOG_INFO = 2,
    SDNPU_LOG_DEBUG = 3
};

typedef void (*sdnpu_log_cb)(enum sdnpu_log_level level, const char *msg, void *user);

/**
 * Install the log callback (NULL restores the default, which writes WARN and
 * ERROR lines to stderr). Call it before loading models; it is process-wide
 * configuration, not per-thread state.
 */
SDNPU_API void sdnpu_log_set(sdnpu_log_cb cb, void *user);

/* -------------------------------------------------------------- allocator */

/**
 * A swappable allocator. Every heap allocation sdnpu makes goes through it,
 * so an embedder can account memory and tests can inject failures. Install it
 * before any other call; memory must be freed by the allocator that made it.
 */
struct sdnpu_allocator {
    void *(*malloc_fn)(size_t size, void *user);
    void *(*realloc_fn)(void *ptr, size_t size, void *user);
    void (*free_fn)(void *ptr, void *user);
    void *user;
};

/** Install an allocator; NULL restores the C library's. */
SDNPU_API void sdnpu_allocator_set(const struct sdnpu_allocator *alloc);

/* ------------------------------------------------------------------ model */

struct sdnpu_model;

struct sdnpu_model_params {
    int32_t n_threads;   /**< worker threads for compute; 0 = number of cores */
    bool vocab_only;     /**< load only the tokenizer (no weights are touched) */
    bool use_mmap;       /**< map the file instead of reading it (default true) */
    const char *head;    /**< heads of up to 8 rows for greedy decoding, verification and top-k sampling
                              (k at most 20):
                              NULL or "auto" (default: "certified" where its copy adds at most a quarter
                              to the prepared weights), "certified" (a q8_0 output projection's argmax, or a
                              top-k sampler's k best logits, certified from a q5_0 copy of it and a bound a
                              row: the same tokens from 35% fewer of the head's bytes, for the copy's
                              memory; shared weights, fast kernels) or "exact" (the whole head) */
};

/** Defaults: n_threads 0 (all cores), vocab_only false, use_mmap true, head NULL ("auto"). */
SDNPU_API struct sdnpu_model_params sdnpu_model_default_params(void);

/**
 * Load a GGUF model. On success *out owns the model; free it with
 * sdnpu_model_free. On failure *out is NULL, nothing is leaked, and a message
 * naming what was wrong is written to err (if err_size > 0, always
 * NUL-terminated) and sent to the log callback.
 * Any thread may call it.
 */
SDNPU_API enum sdnpu_status sdnpu_model_load(const char *path, struct sdnpu_model_params params,
                                             struct sdnpu_model **out, char *err, size_t err_size);

/** Free a model. NULL is allowed. No session of the model may be alive. */
SDNPU_API void sdnpu_model_free(struct sdnpu_model *model);

/** The message of the last failure on this model (empty if none). */
SDNPU_API const char *sdnpu_model_last_error(const struct sdnpu_model *model);

/** Number of tokens in the vocabulary. */
SDNPU_API int32_t sdnpu_model_n_vocab(const struct sdnpu_model *model);

/** The model's own context in tokens (its GGUF context_length): the most a
 *  session's context can hold. */
SDNPU_API int32_t sdnpu_model_n_ctx_train(const struct sdnpu_model *model);

/**
 * Bytes of the model's shared prepared weights held now: the one packed
 * copy every graph of every session over the model reads (sessions with
 * private weights hold their own, not counted here). Thread-safe.
 */
SDNPU_API size_t sdnpu_model_shared_weight_bytes(const struct sdnpu_model *model);

/** Architecture name from the file, e.g. "gemma3". */
SDNPU_API const char *sdnpu_model_arch(const struct sdnpu_model *model);

/** Whether the file carries a chat template (an instruction-tuned model).
 *  Base models (the default Gemma 3 270M file has none) continue text
 *  rather than answer turns, so pipelines prompt them as plain text. */
SDNPU_API bool sdnpu_model_has_chat_template(const struct sdnpu_model *model);

/* -------------------------------------------------------------- tokenizer */

/** Flags for sdnpu_tokenize. */
enum sdnpu_tokenize_flags {
    SDNPU_TOKENIZE_ADD_SPECIAL = 1u << 0,   /**< add BOS/EOS as the vocabulary asks */
    SDNPU_TOKENIZE_PARSE_SPECIAL = 1u << 1, /**< recognize special token text such as "<start_of_turn>" */
    SDNPU_TOKENIZE_REPLACE_INVALID = 1u << 2 /**< invalid UTF-8 becomes U+FFFD instead of an error */
};

/**
 * Tokenize len bytes of text. Writes at most cap tokens and sets *n_tokens to
 * the count. If cap is too small, returns SDNPU_ERR_BUFFER_TOO_SMALL and sets
 * *n_tokens to the count needed. Invalid UTF-8 is SDNPU_ERR_INVALID_UTF8 (the
 * byte offset is in the model's last error) unless REPLACE_INVALID is set.
 * Thread-safe: the model is only read.
 */
SDNPU_API enum sdnpu_status sdnpu_tokenize(const struct sdnpu_model *model, const char *text, size_t len,
                                           uint32_t flags, sdnpu_token *tokens, size_t cap, size_t *n_tokens);

/**
 * Turn tokens back into text (the exact inverse of tokenize for valid input;
 * special tokens are rendered only if render_special). Writes at most cap
 * bytes (no NUL is added) and sets *n_bytes; probing as for sdnpu_tokenize.
 */
SDNPU_API enum sdnpu_status sdnpu_detokenize(const struct sdnpu_model *model, const sdnpu_token *tokens,
                                             size_t n_tokens, bool render_special, char *text, size_t cap,
                                             size_t *n_bytes);


/* ---------------------------------------------------------------- session */

struct sdnpu_session;

/** The final partial prefill chunk (struct sdnpu_session_params.prefill_policy). */
enum sdnpu_prefill_policy {
    SDNPU_PREFILL_AUTO = 0, /**< the passes that cost least by the profile or the times measured: the prefill
                                 graph padded, 16-row remainder graphs (with shared weights, no memory limit and
                                 no graph switching), L2-row and one-row graphs (default) */
    SDNPU_PREFILL_PAD = 1,  /**< pad it to the prefill graph's length L1 */
    SDNPU_PREFILL_PIPE = 2, /**< run it as L2-row and one-row graphs in sequence */
};

/** How a request with spec "switch" moves from the prefill graphs to the decode graphs
 *  (struct sdnpu_session_params.graph_switch). Output is the same in all. */
enum sdnpu_graph_switch {
    SDNPU_GRAPH_SWITCH_PROGRESSIVE = 0, /**< the decode graphs are prepared on a loader thread while prefill
                                             computes, block by block, paper section 3.2 (default) */
    SDNPU_GRAPH_SWITCH_SYNC = 1,        /**< after prefill */
    SDNPU_GRAPH_SWITCH_NAIVE_ASYNC = 2, /**< each block's after its last chunk */
};

/** How cost-aware drafting estimates a draft's acceptance
 *  (struct sdnpu_session_params.policy_estimator). Output is the same in all. */
enum sdnpu_policy_estimator {
    SDNPU_POLICY_ESTIMATOR_MATCH = 0,  /**< a rate per length of the match the draft came from (default) */
    SDNPU_POLICY_ESTIMATOR_STORE = 1,  /**< a rate per drafting store */
    SDNPU_POLICY_ESTIMATOR_GLOBAL = 2, /**< one rate for every draft */
};

struct sdnpu_session_params {
    int32_t n_ctx;     /**< context size in tokens (KV-cache slots); 0 = 4096, capped at the model's */
    int32_t n_batch;   /**< prefill chunk length (rows of the prefill graph); 0 = 256 */
    int32_t n_threads; /**< 0 = the model's n_threads */
    int32_t n_verify;  /**< rows of the decode/verification graph (L2); 0 (the default) = from the
                            profile beside the model (`sdnpu profile`) for this machine, backend and
                            threads: 4; 3 where a step of 4 rows costs over 1.13x one of 3, and 2
                            where that step of 3 costs over 1.2x one of 2 (rows that cost much, as
                            with AVX2 alone); else doubled to 8 where a step of 8 rows costs at
                            most 1.15x one of 4, and on up to 64 while a step of twice the rows
                            costs at most 1.05x one of half (a matrix unit can make them nearly
                            free); 4 without a profile. Every verification computes this many
                            rows; rows without a draft token are padding */
    const char *backend; /**< graph backend: NULL or "cpu" (default), "opencl" (falls back to "cpu" with a
                              warning where no OpenCL device exists) */
    int32_t cl_device;   /**< OpenCL device index across all platforms (see `sdnpu info --devices`); default 0 */
    size_t mem_limit;    /**< most bytes of prepared graphs (their weights, shared ones counted once, and buffers);
                              0 = no limit. Preparing a graph past it fails with SDNPU_ERR_OOM */
    enum sdnpu_prefill_policy prefill_policy; /**< final partial prefill chunk; default SDNPU_PREFILL_AUTO */
    const char *kernels; /**< summation order of the cpu backend: NULL or "fast" (default; weights repacked
                              per graph, sdnpu's own fixed order), "ggml" (llama.cpp's vec_dot order, bit for
                              bit; slower). Both are batch-invariant, so speculative output equals greedy */
    enum sdnpu_graph_switch graph_switch; /**< how a request with spec "switch" moves from prefill graphs to
                                               decode graphs; default SDNPU_GRAPH_SWITCH_PROGRESSIVE */
    const char *weights;  /**< NULL or "shared" (default): every graph of every session over the model reads one
                               prepared copy of each weight; "private": each graph prepares its own, as an NPU
                               runtime without weight sharing must (graph switching then moves real copies) */
    const char *weight_cache; /**< directory of the prepared-weights cache (shared weights, fast kernels): the
                                   packed model is written there once and read back at the next start instead of
                                   packed again; a stale or damaged file is reported and rebuilt. NULL: none.
                                   The weights are the model's: the first session over it that names a
                                   cache while no other holds them sets it for the model */
    /* Drafting's tuning, for the measurements that chose its defaults (docs/benchmarks-gemma.md,
     * docs/benchmarks-stages.md). None of them changes the output, only how much is drafted. */
    enum sdnpu_policy_estimator policy_estimator; /**< cost-aware drafting's acceptance estimate; default
                                                       SDNPU_POLICY_ESTIMATOR_MATCH */
    int32_t calib_lead;      /**< where calibrated sequences (+calib) rank among the drafting stores: -1
                                  (default) after every other store, 0 by match length, N > 0 first once the
                                  match is N tokens long */
    int32_t calib_min_match; /**< shortest match a calibrated sequence drafts from; default 2 */
    size_t prompt_cache_bytes; /**< the session's prompt cache: KV snapshots of earlier contexts held in host
                                    memory, keyed by their tokens, least recently used out first, at most this
                                    many bytes (and, with mem_limit, never past what the prepared graphs leave
                                    of it). A request on a new context (generate's new_context,
                                    sdnpu_session_request) takes the longest prefix it or the live context
                                    holds. 0 (default): no cache; the live context is still reused */
    const char *calib_params; /**< calibration's parameters, any of them, as "top_k=3,min_prob=0.2,max_depth=8,
                                   node_budget=12,prefix=3,max_store=24" (the defaults); NULL or "": the
                                   defaults. An unknown name or a value out of range is SDNPU_ERR_INVALID_ARG */
    int64_t replies_bytes; /**< the replies store: the session keeps its own earlier replies in memory (tokens
                                only, at most this many bytes of records, 20 + 4 per token, oldest out first)
                                and drafts from them, so a model's recurring phrasing and formats (a UI agent's
                                actions, a reply's greeting) are drafted on the next greedy request (a sampled
                                one drafts from the request alone, so its output for a seed does not depend on
                                earlier requests). 0 (default): 64 KiB, about 16,000 tokens; < 0: none. Output
                                never depends on it; a request's speed can (a timing side channel between the
                                users of one session) */
};

/** Defaults: n_ctx 4096, n_batch 256, n_threads from the model, n_verify 0 (the profile's, else 4), calib_lead -1,
 *  calib_min_match 2, every other field 0 or NULL (replies_bytes 0: a 64 KiB replies store). */
SDNPU_API struct sdnpu_session_params sdnpu_session_default_params(void);

/**
 * Make a session (a KV cache, scratch buffers, worker threads) over a model.
 * Many sessions may share one model. On failure *out is NULL and the message
 * is in sdnpu_model_last_error(model).
 */
SDNPU_API enum sdnpu_status sdnpu_session_create(struct sdnpu_model *model, struct sdnpu_session_params params,
                                                 struct sdnpu_session **out);

/** Free a session. NULL is allowed. */
SDNPU_API void sdnpu_session_free(struct sdnpu_session *session);

/** The message of the last failure on this session (empty if none). */
SDNPU_API const char *sdnpu_session_last_error(const struct sdnpu_session *session);

/** Forget the conversation (the KV cache is emptied). */
SDNPU_API void sdnpu_session_reset(struct sdnpu_session *session);

/** Tokens now held in the session's context. */
SDNPU_API int32_t sdnpu_session_n_past(const struct sdnpu_session *session);

/** The session's context size in tokens: n_ctx as created, capped at the
 *  model's own context (0 for NULL). */
SDNPU_API int32_t sdnpu_session_n_ctx(const struct sdnpu_session *session);

/**
 * Give the session a context of n_ctx tokens (capped at the model's own),
 * keeping what it holds: its tokens and their KV cache move to the new
 * cache as they are, so what it generates next is what it would have
 * generated (bit for bit). The graphs it held are prepared again for the
 * new size (their buffers are sized to the context; the model's shared
 * weights stay as they are). SDNPU_ERR_CONTEXT_FULL where
 * the session holds more than n_ctx tokens, SDNPU_ERR_INVALID_ARG for
 * n_ctx < 1, SDNPU_ERR_OOM where the new cache cannot be had (within the
 * session's mem_limit): the session is then left as it was. One thread at
 * a time per session.
 */
SDNPU_API enum sdnpu_status sdnpu_session_set_n_ctx(struct sdnpu_session *session, int32_t n_ctx);

/**
 * Make room for n_tokens in the session's context: where it has fewer
 * slots, grow it (sdnpu_session_set_n_ctx) to twice its size or n_tokens
 * in whole 4,096s, whichever is larger, at most n_ctx_max (0, or more than
 * the model's own context: the model's own). SDNPU_OK when the context
 * then holds n_tokens (also when it did already); SDNPU_ERR_CONTEXT_FULL,
 * nothing changed, where n_ctx_max cannot hold them; otherwise as
 * sdnpu_session_set_n_ctx. sdnpu chat and sdnpu serve grow so.
 */
SDNPU_API enum sdnpu_status sdnpu_session_reserve(struct sdnpu_session *session, int64_t n_tokens,
                                                  int32_t n_ctx_max);

/**
 * How many leading tokens of tokens[0..n) a request on a new context would
 * not have to prefill: the longest prefix that the session's context or
 * its prompt cache holds (at most n - 1: the last token is always
 * evaluated). For routing a request to the session that holds most of it.
 * Not while the session runs a request on another thread.
 */
SDNPU_API int32_t sdnpu_session_prefix_match(const struct sdnpu_session *session, const sdnpu_token *tokens, size_t n);

/** What the session's prompt cache did since the session was made. */
struct sdnpu_prompt_cache_stats {
    int64_t hits;        /**< new-context requests that took their prefix from a cached snapshot */
    int64_t misses;      /**< new-context requests that found no snapshot longer than the live context's match */
    int64_t reused_tokens; /**< prompt tokens not prefilled, from the live context or a snapshot */
    int64_t evictions;   /**< snapshots dropped for room */
    int32_t n_entries;   /**< snapshots held now */
    size_t bytes;        /**< bytes they hold now */
    size_t capacity;     /**< most bytes it may hold (struct sdnpu_session_params.prompt_cache_bytes) */
};
SDNPU_API enum sdnpu_status sdnpu_session_prompt_cache_stats(const struct sdnpu_session *session,
                                                             struct sdnpu_prompt_cache_stats *out);

/**
 * Saved sessions. sdnpu_session_save writes the session's state (its
 * tokens, their KV cache, the model's identity, a format version and a
 * checksum) to path, through a temporary file renamed into place.
 * sdnpu_session_load replaces the session's context with a saved one: the
 * file is untrusted input, and one from another model, truncated, damaged
 * or larger than the session's context is refused with
 * SDNPU_ERR_FORMAT (SDNPU_ERR_CONTEXT_FULL for a context too large,
 * SDNPU_ERR_NOT_FOUND for no such file, SDNPU_ERR_IO where it cannot be
 * read or is not a regular file) and a message naming what is wrong,
 * the session left as it was. Generating after a load continues the saved
 * context exactly as the saved session would have (bit-identical).
 * One thread at a time per session.
 */
SDNPU_API enum sdnpu_status sdnpu_session_save(struct sdnpu_session *session, const char *path);
SDNPU_API enum sdnpu_status sdnpu_session_load(struct sdnpu_session *session, const char *path);

/**
 * Run tokens through the model after what the session already holds. If
 * logits is not NULL it receives [n_tokens][n_vocab] floats (the model's
 * next-token logits after each token); logits_cap is its length in floats.
 * Tokens that would overflow the context give SDNPU_ERR_CONTEXT_FULL with
 * nothing evaluated. sdnpu_session_cancel from another thread stops it
 * after the prefill chunk that is running: SDNPU_ABORTED, none of the
 * tokens kept (the logits buffer then holds unspecified values).
 */
SDNPU_API enum sdnpu_status sdnpu_session_eval(struct sdnpu_session *session, const sdnpu_token *tokens,
                                               size_t n_tokens, float *logits, size_t logits_cap);

/** Sampling. temperature <= 0 is greedy decoding. */
struct sdnpu_sampling_params {
    float temperature;    /**< default 0.8 */
    int32_t top_k;        /**< default 40; <= 0 off */
    float top_p;          /**< default 0.95; >= 1 off */
    float min_p;          /**< default 0.05; <= 0 off */
    float repeat_penalty; /**< default 1.0 (off) */
    int32_t repeat_last_n; /**< default 64 */
    uint64_t seed;        /**< default 0xC0FFEE; same seed, same output */
};

SDNPU_API struct sdnpu_sampling_params sdnpu_sampling_default_params(void);

/**
 * Streaming callback: called with each piece of generated text (whole UTF-8
 * characters; text that could begin a stop string is held back until it is
 * known not to). Return false to stop generation cleanly (SDNPU_ABORTED).
 */
typedef bool (*sdnpu_token_cb)(const char *piece, size_t len, void *user);

/**
 * Prefill progress: called after each chunk of the prompt is evaluated
 * with the prompt tokens evaluated so far and their total (tokens kept by
 * prefix reuse not counted); the last call has done == total. Return false
 * before the last chunk to stop the request there: SDNPU_ABORTED with
 * stop_reason SDNPU_STOP_PREFILL, nothing generated, the context as before
 * the prompt (a kept prefix stays).
 */
typedef bool (*sdnpu_progress_cb)(int32_t done, int32_t total, void *user);

/**
 * The speculative-decoding configuration: one drafter and the sd.npu
 * stages switched on over it. Parsed once at the edge (a command line's
 * `--spec sam-tree+reuse`, a server request's "spec" field) by
 * sdnpu_spec_parse, and passed down as this struct.
 */
enum sdnpu_drafter {
    SDNPU_DRAFTER_NONE = 0,        /**< one token per model call on the one-row graph ("none", "cpu-vanilla") */
    SDNPU_DRAFTER_NPU_VANILLA = 1, /**< one real row on the L2-row graph, the rest padding, as a static NPU
                                        runtime must ("npu-vanilla") */
    SDNPU_DRAFTER_PLD = 2,         /**< prompt lookup: linear drafts from the request's context ("pld") */
    SDNPU_DRAFTER_SAM = 3,         /**< suffix automata over context, output and history, linear drafts ("sam") */
    SDNPU_DRAFTER_SAM_TREE = 4,    /**< the same stores, draft trees ("sam-tree") */
};

struct sdnpu_spec {
    enum sdnpu_drafter drafter;
    bool reuse;           /**< "reuse": rejected-draft reuse fills the rows the draft leaves as padding
                               (needs a drafting drafter: pld, sam, sam-tree) */
    bool calibration;     /**< "calib": in-context distribution calibration: the model's own predictions at
                               every prompt position, collected during prefill, become a drafting store */
    bool graph_switching; /**< "switch": graph switching: prefill moves the blocks from the prefill graphs to the
                               decode graphs (struct sdnpu_session_params.graph_switch says how), so that the
                               session then holds one graph set; one-row steps run the one-row blocks with the
                               L2-row head (one head, never two) */
};

/**
 * Parse "drafter[+stage...]": a drafter name (none, cpu-vanilla,
 * npu-vanilla, pld, sam, sam-tree) and any of the stages reuse, calib,
 * switch, in any order, each once ("sam+calib+reuse"); "sdnpu" is the
 * paper's full method, sam-tree+reuse+calib+switch. NULL or "" is "none".
 * Only the spelling is checked here; sdnpu_spec_check says whether this
 * build can run it. Returns SDNPU_OK, or SDNPU_ERR_INVALID_ARG with a
 * message naming the bad part in err (may be NULL). Any thread.
 */
SDNPU_API enum sdnpu_status sdnpu_spec_parse(const char *text, struct sdnpu_spec *out, char *err, size_t err_size);
/**
 * Whether spec can run: SDNPU_OK, SDNPU_ERR_INVALID_ARG (reuse without a
 * drafting drafter, an unknown drafter) or SDNPU_ERR_UNSUPPORTED naming a
 * stage this version does not have yet, with the message in err.
 */
SDNPU_API enum sdnpu_status sdnpu_spec_check(struct sdnpu_spec spec, char *err, size_t err_size);
/** The canonical text of spec ("sam-tree+reuse"), NUL-terminated in buf; *n_bytes excludes the NUL;
 *  probing as for sdnpu_tokenize (the size needed includes the NUL). Any thread. */
SDNPU_API enum sdnpu_status sdnpu_spec_str(struct sdnpu_spec spec, char *buf, size_t cap, size_t *n_bytes);

/** What a reply must be (sdnpu_generate_params.format). */
enum sdnpu_format {
    SDNPU_FORMAT_TEXT = 0,        /**< anything the model writes */
    SDNPU_FORMAT_JSON = 1,        /**< one JSON object (RFC 8259, strict UTF-8; OpenAI's response_format
                                       "json_object"): each token is chosen among those that keep the reply a prefix
                                       of one, and the end of generation may come only once it is closed. Lossless
                                       as ever: speculative output equals plain output under the same constraint
                                       (a greedy row whose head argmax the grammar refuses runs again alone for
                                       its full logits). A reply cut by n_predict, a stop string or the degeneration
                                     guard is        not complete; stop_reason says so */
    SDNPU_FORMAT_JSON_SCHEMA = 2, /**< one JSON object that satisfies the JSON Schema in
                                       sdnpu_generate_params.json_schema (OpenAI's response_format
                                       "json_schema"; the subset: sdnpu_json_schema_check), checked token by
                                       token as SDNPU_FORMAT_JSON is: properties come in the schema's order
                                     and no others; lossless the same way */
};

/** Whether schema (JSON Schema text, NUL-terminated) is one a reply can be held to
 *  (SDNPU_FORMAT_JSON_SCHEMA). The subset: type (a name or a list: object, array, string, number,
 *  integer, boolean, null), properties (written in the schema's order, each at most once, no others),
 *  required, additionalProperties (true or false; a schema only beside properties), items, minItems,
 *  maxItems (at most 65,535 items), enum and const (strings, integers, booleans, null), and the
 *  annotations description, title, default, examples, $schema, $id, $comment, $defs, definitions,
 *  deprecated, readOnly, writeOnly. The root is an object; at most 16 constrained objects and arrays
 *  nest. Anything else (pattern, format, minimum, anyOf, $ref, ...), or a schema nothing satisfies, is
 *  SDNPU_ERR_INVALID_ARG with a message naming the keyword and its JSON pointer in err (may be NULL;
 *  err_size bytes). Any thread. */
SDNPU_API enum sdnpu_status sdnpu_json_schema_check(const char *schema, char *err, size_t err_size);

struct sdnpu_generate_params {
    int32_t n_predict;               /**< most tokens to generate; default 256; < 0 until the context is full */
    struct sdnpu_sampling_params sampling;
    const char *const *stop;         /**< stop strings (not included in the output), may be NULL */
    size_t n_stop;
    bool chat;                       /**< wrap the prompt as a user turn in the model's chat format (plain
                                          format: generation also stops where the model starts a "User:" line) */
    const char *system;              /**< system text when chat; NULL: the chat template's own where it has
                                          one (Qwen2.5's "You are Qwen, created by Alibaba Cloud. You are a
                                          helpful assistant."); "": no system turn at all */
    sdnpu_token_cb on_text;          /**< may be NULL */
    void *user;
    /** Speculative decoding (default: none). Output is identical to plain decoding for greedy decoding,
     *  and identically distributed when sampling. */
    struct sdnpu_spec spec;
    int32_t draft_max;               /**< most draft tokens per verification; 0 = n_verify - 1 (fill the
                                          verification graph); never more than n_verify - 1 */
    int32_t draft_depth;             /**< longest draft path; default 16, at most the draft budget */
    bool stop_on_repeat;             /**< degeneration guard (default false here; true in
                                          sdnpu_request_default_params and `sdnpu summarize`): stop, with
                                          stop_reason SDNPU_STOP_REPETITION, when the output repeats one of its
                                          own sentences (12 characters or more) or a run of 16 of its own tokens;
                                          the repeated sentence is not emitted, nor kept in the context */
    bool new_context;                /**< the prompt starts a new context, as after sdnpu_session_reset: the
                                          tokens the session holds (or its prompt cache, see
                                          prompt_cache_bytes) are kept as far as they equal the prompt's and
                                          only the rest is prefilled, bit-identically (prefix reuse) */
    const sdnpu_token *prompt_tokens; /**< the prompt as tokens (used as they are: no chat wrapping, no BOS
                                          added) instead of the text; NULL: the text */
    size_t n_prompt_tokens;
    bool adaptive;                   /**< cost-aware drafting (default true): each step verifies its draft on
                                          the L2-row graph only when the tokens it is expected to yield per
                                          millisecond beat one plain row's, by the measured graph costs and the
                                          request's running acceptance; else it runs one row without the draft.
                                          false: every draft is verified (the ablation). Lossless either way. */
    bool forget;                     /**< this reply does not join the session's replies store (replies_bytes;
                                          default false: it does) */
    sdnpu_progress_cb on_prefill;    /**< may be NULL; the prompt's prefill, chunk by chunk, with user */
    enum sdnpu_format format;        /**< SDNPU_FORMAT_TEXT (default), SDNPU_FORMAT_JSON or
                                          SDNPU_FORMAT_JSON_SCHEMA; another value is SDNPU_ERR_INVALID_ARG */
    const char *json_schema;         /**< the schema of SDNPU_FORMAT_JSON_SCHEMA (JSON text; read during the
                                          call only); NULL otherwise */
};

SDNPU_API struct sdnpu_generate_params sdnpu_generate_default_params(void);

/** Why a generation ended (sdnpu_stats.stop_reason). */
enum sdnpu_stop_reason {
    SDNPU_STOP_LENGTH = 0,       /**< n_predict tokens */
    SDNPU_STOP_EOG = 1,          /**< an end-of-generation token */
    SDNPU_STOP_STRING = 2,       /**< a stop string (or the plain chat format's next "User:" line) */
    SDNPU_STOP_CALLBACK = 3,     /**< the callback returned false, or sdnpu_session_cancel */
    SDNPU_STOP_CONTEXT_FULL = 4, /**< the context is full */
    SDNPU_STOP_REPETITION = 5,   /**< the degeneration guard (stop_on_repeat): the output repeated itself */
    SDNPU_STOP_PREFILL = 6,      /**< stopped during the prompt's prefill (on_prefill said no, or
                                      sdnpu_session_cancel): nothing generated, the context as before the
                                      prompt; the stats hold the time and memory only */
};

/** What one request cost and did. Times in milliseconds. */
struct sdnpu_stats {
    int32_t n_prompt_tokens;
    int32_t n_prompt_reused;   /**< of n_prompt_tokens, tokens kept from the session's context or its prompt
                                    cache instead of prefilled (generate's new_context) */
    int32_t n_generated;
    double prefill_ms;
    double decode_ms;
    double prompt_tokens_per_s;
    double gen_tokens_per_s;
    int32_t n_verify_steps;    /**< model calls during decoding */
    double acceptance;         /**< tokens produced per model call during decoding (accepted drafts + the
                                    model's own token; plain decoding is 1.0) */
    int32_t n_drafted;         /**< draft tokens proposed */
    int32_t n_accepted;        /**< draft tokens accepted */
    int32_t n_reuse_drafted;   /**< of n_drafted, rows filled by rejected-draft reuse ("+reuse") */
    int32_t n_reuse_accepted;  /**< of those, rows accepted */
    int32_t n_plain_steps;     /**< steps that had a draft but ran one plain row instead (cost-aware drafting) */
    double draft_ms;           /**< time spent drafting */
    double verify_ms;          /**< time spent in the model during decoding */
    int64_t n_graph_rows;      /**< rows computed by decoding graphs (real + padding) */
    int64_t n_pad_rows;        /**< of which padding; padding share = n_pad_rows / n_graph_rows */
    size_t prepared_bytes;     /**< bytes held by the session's prepared graphs */
    double prepare_ms;         /**< time spent preparing graphs in this request (a graph is prepared on its
                                    first use); not counted in prefill_ms or decode_ms */
    size_t peak_rss_bytes;
    enum sdnpu_stop_reason stop_reason; /**< why generation ended */
    double calib_ms;           /**< in-context calibration ("+calib"): its subset head's runs and the sink
                                    during prefill (also in prefill_ms), and building the store after it */
    int32_t n_calib_records;   /**< calibrated sequences stored */
    size_t calib_bytes;        /**< memory calibration held at its peak */
    size_t shared_weight_bytes; /**< of prepared_bytes, the model's shared prepared weights the session reads
                                     (counted once whatever the graphs; 0 with private weights). Graph
                                     switching ("+switch") moves none of them, only the graphs' buffers */
    const char *weight_cache;  /**< what the weight cache did: "none", "loaded" (read back, nothing packed),
                                    "built" (packed and written) or "failed" (packed; the file could not be
                                    written) */
    const char *head;          /**< "certified" where the shared weights hold the output projection's
                                    certificate (sdnpu_model_params' head), else "exact" */
};

/**
 * Generate a continuation of prompt (appended to what the session holds).
 * Text streams through params->on_text; stats (may be NULL) is filled.
 * Returns SDNPU_OK when generation ended by EOS, a stop string or n_predict,
 * SDNPU_ABORTED when the callback or sdnpu_session_cancel stopped it,
 * SDNPU_ERR_CONTEXT_FULL if the prompt does not fit (nothing evaluated).
 * The session then holds the prompt and every emitted token (not an
 * end-of-generation token). The last emitted token is not evaluated: the
 * stop it makes needs no model call, so the next request on this context
 * (a continuation, sdnpu_session_eval, sdnpu_session_save) evaluates it
 * first.
 * One thread at a time per session.
 */
SDNPU_API enum sdnpu_status sdnpu_session_generate(struct sdnpu_session *session, const char *prompt, size_t len,
                                                   const struct sdnpu_generate_params *params,
                                                   struct sdnpu_stats *stats);

/**
 * Use a history file (earlier outputs, one record per response) as a
 * drafting store: it is loaded now (a torn or corrupt tail is reported in
 * the log and skipped), and every later response of this session is
 * appended to it crash-safely. NULL detaches. One history per session.
 */
SDNPU_API enum sdnpu_status sdnpu_session_set_history(struct sdnpu_session *session, const char *path);

/**
 * Forget the session's earlier replies (the replies store of
 * sdnpu_session_params.replies_bytes): later requests draft as on a new
 * session. sdnpu_session_reset keeps them; this is the call that does not.
 */
SDNPU_API void sdnpu_session_forget_replies(struct sdnpu_session *session);

/** Ask a running generate to stop: at the next token, or during the
 *  prompt's prefill after the chunk it is in (nothing generated, the context
 *  as before the prompt); a running sdnpu_session_eval after the chunk it
 *  is in (nothing kept). Safe from any thread. */
SDNPU_API void sdnpu_session_cancel(struct sdnpu_session *session);

/* --------------------------------------------------------------- requests */

/**
 * A context-augmented request, as summarization and auto-reply pipelines
 * make them: an instruction over context documents, for one user.
 */
struct sdnpu_request {
    const char *instruction;        /**< what to do: "Summarize the document.", a question, "TL;DR:" */
    const char *const *documents;   /**< context documents (NUL-terminated), may be NULL */
    size_t n_documents;
    const char *history_path;       /**< optional: this user's history file (see sdnpu_session_set_history);
                                         NULL keeps whatever the session has attached */
    struct sdnpu_generate_params gen; /**< sampling, stops, streaming, n_predict; gen.spec the drafter and
                                           stages; gen.adaptive (default true): cost-aware drafting, false
                                           to verify every draft */
};

/** The system text sdnpu_session_request gives a model with a chat template where gen.system is NULL. */
#define SDNPU_REQUEST_SYSTEM "You are a helpful assistant. Answer from the documents the user gives."

/** Defaults: no documents, no history, sdnpu_generate_default_params() with greedy sampling, spec "sam"
 *  and the degeneration guard on. */
SDNPU_API struct sdnpu_request sdnpu_request_default_params(void);

/**
 * The user's text of a context-augmented turn for an instruction-tuned
 * model: each document between a "<document>" and a "</document>" line, a
 * blank line after each, then text (an instruction, a question, a message).
 * The layout every surface sends such a model its documents in (the
 * request API, the server's sdnpu.documents in a chat, `sdnpu chat
 * --context`, `sdnpu summarize`); wrap the result in a user turn with
 * sdnpu_chat_format. Writes a NUL-terminated string; *n_bytes excludes the
 * NUL; probing as for sdnpu_tokenize (the size needed includes the NUL).
 * Returns SDNPU_ERR_INVALID_ARG for NULL text or n_bytes, NULL documents
 * with n_documents > 0, a NULL document, or NULL buf with cap > 0. Any
 * thread.
 */
SDNPU_API enum sdnpu_status sdnpu_documents_format(const char *const *documents, size_t n_documents,
                                                   const char *text, char *buf, size_t cap, size_t *n_bytes);

/**
 * Run a request on a fresh context (generate's new_context: the tokens the
 * session or its prompt cache holds of the same prompt are kept, not
 * prefilled again; the output is that of a reset session), the history (if
 * given) attached, and the prompt built from the documents and the
 * instruction: for a model with a chat template, a system turn
 * (gen.system, else SDNPU_REQUEST_SYSTEM; none for gen.system "", as
 * `sdnpu summarize` asks) and
 * one user turn holding the documents and then the
 * instruction as sdnpu_documents_format lays them out, answered until the
 * model ends its turn; for a base model, the documents
 * separated by blank lines, a blank line, and the instruction (which then
 * works as a cue, e.g. "TL;DR:"). Returns what sdnpu_session_generate
 * returns (SDNPU_ERR_UNSUPPORTED naming a stage of gen.spec this version
 * does not have yet). One thread at a time per session.
 */
SDNPU_API enum sdnpu_status sdnpu_session_request(struct sdnpu_session *session, const struct sdnpu_request *req,
                                                  struct sdnpu_stats *stats);

/* ------------------------------------------------------------------- chat */

struct sdnpu_chat_message {
    const char *role;    /**< "system", "user" or "assistant"; "tool" (a tool's result) where the model calls
                              tools (sdnpu_model_chat_tools) */
    const char *content; /**< NULL reads as ""; for a system message, no system turn at all */
};

/**
 * Render messages in the model's chat format (recognized from the GGUF's
 * template, never executed; without one, plain "User: ..." / "Assistant:"
 * lines that a base model continues), as the template renders them: where
 * the first message is not a system one, the template's own system turn
 * first if it has one (Qwen2 and Qwen2.5: "You are Qwen, created by
 * Alibaba Cloud. You are a helpful assistant."; a system message with
 * empty content gives an empty turn instead, and one with NULL content no
 * system turn at all, as a generation's system ""). Opens the assistant's
 * turn when add_assistant. Writes a NUL-terminated string; *n_bytes excludes the NUL;
 * probing as for sdnpu_tokenize (the size needed includes the NUL).
 */
SDNPU_API enum sdnpu_status sdnpu_chat_format(const struct sdnpu_model *model, const struct sdnpu_chat_message *msgs,
                                              size_t n_msgs, bool add_assistant, char *buf, size_t cap,
                                              size_t *n_bytes);

/** Whether the model's chat template calls tools in the layout sdnpu renders: Qwen2.5's (its template
 *  mentions <tool_call> and <tool_response>): the tools listed in the system turn, each call written by
 *  the model as a line "<tool_call>", one line of JSON {"name": ..., "arguments": {...}}, and a line
 *  "</tool_call>", each result read back in a <tool_response> block of a user turn. */
SDNPU_API bool sdnpu_model_chat_tools(const struct sdnpu_model *model);

/**
 * As sdnpu_chat_format, for a conversation with tools the model may call:
 * tools_json, a JSON array of tool objects (OpenAI's {"type": "function",
 * "function": {"name": ..., "description": ..., "parameters": {...}}}), is
 * written into the system turn, after the first system message's text or
 * else the template's own system text, each tool as the template's tojson
 * writes it (Python's json.dumps: ", " and ": ", the keys in their order);
 * a message of role "tool" is a tool's result (consecutive ones share one
 * user turn), and an assistant message's content holds its calls as the
 * model writes them (sdnpu_model_chat_tools), after any text and a line
 * break. Returns SDNPU_ERR_UNSUPPORTED where the model calls no tools,
 * SDNPU_ERR_INVALID_ARG where tools_json is not a JSON array of objects
 * (or as sdnpu_chat_format's arguments are), SDNPU_ERR_OOM.
 */
SDNPU_API enum sdnpu_status sdnpu_chat_format_tools(const struct sdnpu_model *model,
                                                    const struct sdnpu_chat_message *msgs, size_t n_msgs,
                                                    const char *tools_json, bool add_assistant, char *buf,
                                                    size_t cap, size_t *n_bytes);

#ifdef __cplusplus
}
#endif

#endif /* SDNPU_H */
