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
};

/** Defaults: n_threads 0 (all cores), vocab_only false, use_mmap true. */
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

/** Architecture name from the file, e.g. "gemma3". */
SDNPU_API const char *sdnpu_model_arch(const struct sdnpu_model *model);

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

#ifdef __cplusplus
}
#endif

#endif /* SDNPU_H */
