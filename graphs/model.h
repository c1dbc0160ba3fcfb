/*
 * graphs/model.h - a model as the graphs see it: the architecture config
 * and typed views of the weights. Nothing here knows where the weights came
 * from; engine/ loads them from GGUF, validates every tensor the
 * architecture needs (present, the right shape, a type sdnpu can compute),
 * and hands the graphs this struct, which they trust.
 */
#ifndef SD_GRAPHS_MODEL_H
#define SD_GRAPHS_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "graphs/types.h"

enum sd_arch { SD_ARCH_LLAMA = 1, SD_ARCH_QWEN2 = 2, SD_ARCH_GEMMA3 = 3 };

enum sd_rope_kind {
    SD_ROPE_NORM = 0, /* pairs (2i, 2i+1): llama */
    SD_ROPE_NEOX = 1  /* pairs (i, i + d/2): qwen2, gemma3 */
};

#define SD_MAX_LAYERS 256

/* A matrix stored as rows: out = W x with W [n_out][n_in] in `type`. */
struct sd_weight {
    enum sd_type type;
    const void *data;
    int64_t n_in;      /* ne[0] in GGUF: the contiguous dimension */
    int64_t n_out;     /* ne[1] */
    size_t row_bytes;
    bool packed;       /* data is in graphs/packed.h's layout (a cpu graph's prepared copy), not GGUF rows */
    const void *cert;  /* a packed head's certificate (graphs/cert.h) where its graph uses one, else NULL */
};

/* A vector (norm weights, biases): always F32 after load. */
struct sd_vec {
    const float *data; /* [n] */
    int64_t n;
};

struct sd_layer {
    struct sd_vec attn_norm;
    struct sd_weight wq, wk, wv, wo;
    struct sd_vec bq, bk, bv;          /* qwen2 only; data NULL otherwise */
    struct sd_vec q_norm, k_norm;      /* gemma3 QK-norm: [head_dim] */
    struct sd_vec post_attn_norm;      /* gemma3 */
    struct sd_vec ffn_norm;
    struct sd_weight w_gate, w_up, w_down;
    struct sd_vec post_ffn_norm;       /* gemma3 */
    bool swa;                          /* sliding-window (local) layer */
    float rope_base;                   /* this layer's RoPE base */
};

struct sd_model_config {
    enum sd_arch arch;
    char arch_name[32];
    int32_t n_layer;
    int32_t d_model;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim;     /* key_length = value_length */
    int32_t n_ff;
    int32_t n_vocab;
    int32_t n_ctx_train;
    float norm_eps;
    float rope_base;      /* global layers */
    float rope_base_swa;  /* local layers (gemma3) */
    float rope_freq_scale; /* linear scaling: position * scale */
    enum sd_rope_kind rope_kind;
    int32_t swa_window;   /* 0 = no sliding window */
    float attn_scale;     /* multiplies q.k */
    bool attn_scale_q;    /* ... applied to q before the product (gemma), else to the product */
    float embd_scale;     /* multiplies the token embedding (gemma: sqrt(d_model)) */
    bool gelu;            /* GELU-tanh gated FFN (gemma), else SiLU (SwiGLU) */
    bool tied_output;
};

/* The weights and shapes the graphs compute with. The data points into
 * memory owned by whoever made the model (engine/'s GGUF loader maps the
 * file); layers and owned_f32 are that maker's allocations too. */
struct sd_model {
    struct sd_model_config cfg;
    struct sd_weight tok_embd;    /* [n_vocab][d_model] */
    struct sd_weight output;      /* [n_vocab][d_model]; equals tok_embd when tied */
    struct sd_vec output_norm;
    const float *rope_freqs;      /* llama3 frequency factors [head_dim/2], or NULL */
    struct sd_layer *layers;      /* [n_layer] */
    float *owned_f32;             /* norm/bias vectors converted to F32 at load */
    /* The weights' data are pages of a private read-only file mapping:
     * once a weight is copied elsewhere its pages may be given back
     * (sd_drop_pages), and a later read faults them in again. False
     * for weights in heap memory, whose pages must never be dropped. */
    bool file_mapped;
};

#endif /* SD_GRAPHS_MODEL_H */
