/* tests/util_tiny_model.c - tiny deterministic models (see the header). */
#include "util_tiny_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graphs/quant.h"
#include "util_common.h"
#include "util_gguf_writer.h"

void sdt_tiny_defaults(struct sdt_tiny_opts *o) {
    bool gemma = o->arch && !strcmp(o->arch, "gemma3");
    if (!o->arch) o->arch = "llama";
    if (!o->seed) o->seed = 42;
    if (!o->n_layer) o->n_layer = gemma ? 6 : 2;
    if (!o->d_model) o->d_model = 256;
    if (!o->n_ff) o->n_ff = 512;
    if (!o->n_head) o->n_head = 4;
    if (!o->n_head_kv) o->n_head_kv = 2;
    if (!o->n_vocab) o->n_vocab = 384;
    if (!o->swa_window) o->swa_window = 8;
    if (!o->n_ctx_train) o->n_ctx_train = 2048;
}

/* A small SentencePiece-style vocabulary: <unk> <s> </s>, then the 256
 * byte tokens, then lowercase letter pairs as pieces (scored so merges happen). */
static char **make_vocab(int32_t n, float *scores, int32_t *types, bool gemma) {
    char **toks = calloc((size_t)n, sizeof *toks);
    int32_t i = 0;
    const char *specials[] = {"<unk>", "<s>", "</s>"};
    const char *gspecials[] = {"<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"};
    const char **sp = gemma ? gspecials : specials;
    int32_t nsp = gemma ? 6 : 3;
    for (; i < nsp; i++) {
        toks[i] = strdup(sp[i]);
        scores[i] = 0;
        types[i] = (gemma ? i == 3 : i == 0) ? 2 : 3; /* UNKNOWN or CONTROL */
    }
    for (int b = 0; b < 256 && i < n; b++, i++) {
        char buf[8];
        snprintf(buf, sizeof buf, "<0x%02X>", b);
        toks[i] = strdup(buf);
        scores[i] = 0;
        types[i] = 6; /* BYTE */
    }
    for (int k = 0; i < n; k++, i++) {
        char buf[16];
        /* "\xe2\x96\x81" + letter, then letter pairs */
        if (k < 26) {
            snprintf(buf, sizeof buf, "\xe2\x96\x81%c", 'a' + k);
        } else {
            int p = k - 26;
            snprintf(buf, sizeof buf, "%c%c", 'a' + (p / 26) % 26, 'a' + p % 26);
        }
        toks[i] = strdup(buf);
        scores[i] = -(float)k;
        types[i] = 1;
    }
    return toks;
}

static float rnd(uint64_t *s) { return sdt_rand_float(s); }

/* A matrix [n_out][n_in] of uniform values scaled by scale, stored as type. */
static void add_matrix(struct sdt_gguf_writer *w, const struct sdt_tiny_opts *o, const char *name, int64_t n_in,
                       int64_t n_out, int type, float scale, uint64_t *rng) {
    if (o->omit_tensor && !strcmp(o->omit_tensor, name)) return;
    if (o->weight_types == 1) type = SD_TYPE_F32;
    if (o->bad_shape_tensor && !strcmp(o->bad_shape_tensor, name)) n_out += 1;
    float *vals = malloc((size_t)(n_in * n_out) * sizeof(float));
    for (int64_t i = 0; i < n_in * n_out; i++) vals[i] = rnd(rng) * scale;
    int64_t ne[2] = {n_in, n_out};
    if (type == SD_TYPE_F32 || type == SD_TYPE_F16 || type == SD_TYPE_BF16) {
        sdt_gw_tensor_f32(w, name, 2, ne, type, vals);
    } else {
        size_t rb;
        sd_row_size(type, n_in, &rb);
        unsigned char *q = malloc(rb * (size_t)n_out);
        for (int64_t r = 0; r < n_out; r++) sd_quantize_row(type, vals + r * n_in, q + (size_t)r * rb, n_in);
        sdt_gw_tensor(w, name, 2, ne, type, q, rb * (size_t)n_out);
        free(q);
    }
    free(vals);
}

static void add_vector(struct sdt_gguf_writer *w, const struct sdt_tiny_opts *o, const char *name, int64_t n,
                       float center, float spread, uint64_t *rng) {
    if (o->omit_tensor && !strcmp(o->omit_tensor, name)) return;
    if (o->bad_shape_tensor && !strcmp(o->bad_shape_tensor, name)) n += 1;
    float *vals = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) vals[i] = center + rnd(rng) * spread;
    int64_t ne[1] = {n};
    sdt_gw_tensor_f32(w, name, 1, ne, SD_TYPE_F32, vals);
    free(vals);
}

int sdt_tiny_write(const struct sdt_tiny_opts *oin, const char *path) {
    struct sdt_tiny_opts o = *oin;
    sdt_tiny_defaults(&o);
    bool gemma = !strcmp(o.arch, "gemma3"), qwen = !strcmp(o.arch, "qwen2");
    int32_t hd = o.d_model / o.n_head;
    if (gemma) hd = 64;
    int64_t nq = (int64_t)o.n_head * hd, nkv = (int64_t)o.n_head_kv * hd;
    uint64_t rng = o.seed;
    struct sdt_gguf_writer *w = sdt_gw_new();
    char key[128];
#define K(s) (snprintf(key, sizeof key, "%s." s, o.arch), key)
    sdt_gw_kv_str(w, "general.architecture", o.arch);
    sdt_gw_kv_str(w, "general.name", "sdnpu tiny test model");
    sdt_gw_kv_u32(w, K("context_length"), (uint32_t)o.n_ctx_train);
    sdt_gw_kv_u32(w, K("embedding_length"), (uint32_t)o.d_model);
    sdt_gw_kv_u32(w, K("block_count"), (uint32_t)o.n_layer);
    sdt_gw_kv_u32(w, K("feed_forward_length"), (uint32_t)o.n_ff);
    sdt_gw_kv_u32(w, K("attention.head_count"), (uint32_t)o.n_head);
    sdt_gw_kv_u32(w, K("attention.head_count_kv"), (uint32_t)o.n_head_kv);
    sdt_gw_kv_f32(w, K("attention.layer_norm_rms_epsilon"), 1e-6f);
    sdt_gw_kv_f32(w, K("rope.freq_base"), gemma ? 1000000.0f : 10000.0f);
    if (gemma) {
        sdt_gw_kv_u32(w, K("attention.key_length"), (uint32_t)hd);
        sdt_gw_kv_u32(w, K("attention.value_length"), (uint32_t)hd);
        sdt_gw_kv_u32(w, K("attention.sliding_window"), (uint32_t)o.swa_window);
    } else {
        sdt_gw_kv_u32(w, K("rope.dimension_count"), (uint32_t)hd);
    }
#undef K
    /* Tokenizer. */
    float *scores = malloc((size_t)o.n_vocab * sizeof(float));
    int32_t *types = malloc((size_t)o.n_vocab * sizeof(int32_t));
    char **toks = make_vocab(o.n_vocab, scores, types, gemma);
    sdt_gw_kv_str(w, "tokenizer.ggml.model", "llama");
    sdt_gw_kv_str(w, "tokenizer.ggml.pre", "default");
    sdt_gw_kv_str_arr(w, "tokenizer.ggml.tokens", (const char *const *)toks, (size_t)o.n_vocab);
    sdt_gw_kv_arr(w, "tokenizer.ggml.scores", SD_GGUF_FLOAT32, scores, (size_t)o.n_vocab);
    sdt_gw_kv_arr(w, "tokenizer.ggml.token_type", SD_GGUF_INT32, types, (size_t)o.n_vocab);
    sdt_gw_kv_u32(w, "tokenizer.ggml.bos_token_id", gemma ? 2 : 1);
    sdt_gw_kv_u32(w, "tokenizer.ggml.eos_token_id", gemma ? 1 : 2);
    sdt_gw_kv_u32(w, "tokenizer.ggml.unknown_token_id", gemma ? 3 : 0);
    sdt_gw_kv_bool(w, "tokenizer.ggml.add_bos_token", true);
    if (o.chat_template) sdt_gw_kv_str(w, "tokenizer.chat_template", o.chat_template);
    sdt_gw_kv_bool(w, "tokenizer.ggml.add_space_prefix", !gemma);
    for (int32_t i = 0; i < o.n_vocab; i++) free(toks[i]);
    free(toks);
    free(scores);
    free(types);

    /* Weights: a mix of every computable type across the projections. */
    float s_in = 1.0f / sqrtf((float)o.d_model), s_ff = 1.0f / sqrtf((float)o.n_ff), s_q = 1.0f / sqrtf((float)nq);
    /* Gemma ties the output to the embedding: keep it small so the logits
     * are not so peaked that every sampled token is the same. */
    add_matrix(w, &o, "token_embd.weight", o.d_model, o.n_vocab, gemma ? SD_TYPE_Q8_0 : SD_TYPE_F16, gemma ? 0.1f : 1.0f,
               &rng);
    if (!gemma) /* A wide spread of logits, so near-ties (where any two engines may pick
     * differently) are rare and conformance measures the arithmetic. */
        add_matrix(w, &o, "output.weight", o.d_model, o.n_vocab, SD_TYPE_Q6_K, 16.0f * s_in, &rng);
    add_vector(w, &o, "output_norm.weight", o.d_model, 1.0f, 0.2f, &rng);
    static const int mix[][7] = {
        /* q, k, v, o, gate, up, down */
        {SD_TYPE_Q4_K, SD_TYPE_Q5_K, SD_TYPE_Q6_K, SD_TYPE_Q8_0, SD_TYPE_Q4_0, SD_TYPE_Q5_0, SD_TYPE_Q4_1},
        {SD_TYPE_Q5_0, SD_TYPE_Q5_1, SD_TYPE_Q8_0, SD_TYPE_Q4_K, SD_TYPE_F16, SD_TYPE_BF16, SD_TYPE_Q6_K},
    };
    for (int32_t il = 0; il < o.n_layer; il++) {
        const int *t = mix[il % 2];
        char n[96];
#define N(s) (snprintf(n, sizeof n, "blk.%d." s, il), n)
        add_vector(w, &o, N("attn_norm.weight"), o.d_model, 1.0f, 0.2f, &rng);
        add_matrix(w, &o, N("attn_q.weight"), o.d_model, nq, t[0], 2.0f * s_in, &rng);
        add_matrix(w, &o, N("attn_k.weight"), o.d_model, nkv, t[1], 2.0f * s_in, &rng);
        add_matrix(w, &o, N("attn_v.weight"), o.d_model, nkv, t[2], s_in, &rng);
        add_matrix(w, &o, N("attn_output.weight"), nq, o.d_model, t[3], s_q, &rng);
        if (qwen) {
            add_vector(w, &o, N("attn_q.bias"), nq, 0.0f, 0.1f, &rng);
            add_vector(w, &o, N("attn_k.bias"), nkv, 0.0f, 0.1f, &rng);
            add_vector(w, &o, N("attn_v.bias"), nkv, 0.0f, 0.1f, &rng);
        }
        if (gemma) {
            add_vector(w, &o, N("attn_q_norm.weight"), hd, 1.0f, 0.2f, &rng);
            add_vector(w, &o, N("attn_k_norm.weight"), hd, 1.0f, 0.2f, &rng);
            add_vector(w, &o, N("post_attention_norm.weight"), o.d_model, 1.0f, 0.2f, &rng);
            add_vector(w, &o, N("post_ffw_norm.weight"), o.d_model, 1.0f, 0.2f, &rng);
        }
        add_vector(w, &o, N("ffn_norm.weight"), o.d_model, 1.0f, 0.2f, &rng);
        add_matrix(w, &o, N("ffn_gate.weight"), o.d_model, o.n_ff, t[4], 2.0f * s_in, &rng);
        add_matrix(w, &o, N("ffn_up.weight"), o.d_model, o.n_ff, t[5], 2.0f * s_in, &rng);
        add_matrix(w, &o, N("ffn_down.weight"), o.n_ff, o.d_model, t[6], s_ff, &rng);
#undef N
    }
    int rc = sdt_gw_write(w, path);
    sdt_gw_free(w);
    return rc;
}

struct sdnpu_model *sdt_tiny_load(const struct sdt_tiny_opts *o, const char *path) {
    struct sdnpu_model *m = NULL;
    char err[256];
    if (sdt_tiny_write(o, path)) {
        fprintf(stderr, "cannot write the tiny model %s\n", path);
        return NULL;
    }
    if (sdnpu_model_load(path, sdnpu_model_default_params(), &m, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", path, err);
        return NULL;
    }
    return m;
}
