/* engine/model.c - a model file: architecture config and weight binding from
 * GGUF, the vocabulary and the chat template. */
#include "engine/model.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Read an optional u32 key: absent leaves *v unchanged; any other failure
 * (wrong type, value out of range) is returned. */
static int opt_u32(const struct sd_gguf *g, const char *key, uint32_t *v, struct sd_err *err) {
    int rc = sd_gguf_get_u32(g, key, v, err);
    if (rc == SDNPU_ERR_NOT_FOUND) {
        sd_err_clear(err);
        return SDNPU_OK;
    }
    return rc;
}

static int opt_f32(const struct sd_gguf *g, const char *key, float *v, struct sd_err *err) {
    int rc = sd_gguf_get_f32(g, key, v, err);
    if (rc == SDNPU_ERR_NOT_FOUND) {
        sd_err_clear(err);
        return SDNPU_OK;
    }
    return rc;
}

static int req_u32(const struct sd_gguf *g, const char *key, uint32_t *v, struct sd_err *err) {
    int rc = sd_gguf_get_u32(g, key, v, err);
    if (rc == SDNPU_ERR_NOT_FOUND) return sd_err_set(err, SDNPU_ERR_FORMAT, "required key '%s' is missing", key);
    return rc;
}

/* general.architecture: one of the families sdnpu runs. */
static int read_arch(const struct sd_gguf *g, struct sd_model_config *c, struct sd_err *err) {
    const char *s;
    size_t len;
    int rc = sd_gguf_get_str(g, "general.architecture", &s, &len, err);
    if (rc == SDNPU_ERR_NOT_FOUND) return sd_err_set(err, SDNPU_ERR_FORMAT, "key 'general.architecture' is missing");
    if (rc) return rc;
    if (len >= sizeof c->arch_name) len = sizeof c->arch_name - 1;
    memcpy(c->arch_name, s, len);
    c->arch_name[len] = '\0';
    if (!strcmp(c->arch_name, "llama")) {
        c->arch = SD_ARCH_LLAMA;
    } else if (!strcmp(c->arch_name, "qwen2")) {
        c->arch = SD_ARCH_QWEN2;
    } else if (!strcmp(c->arch_name, "gemma3")) {
        c->arch = SD_ARCH_GEMMA3;
    } else {
        return sd_err_set(err, SDNPU_ERR_UNSUPPORTED,
                          "architecture '%s' is not supported (sdnpu runs gemma3, qwen2, llama)", c->arch_name);
    }
    return SDNPU_OK;
}

/* The shape: layers, widths, heads and their sizes, each in range. */
static int read_shape(const struct sd_gguf *g, struct sd_model_config *c, struct sd_err *err) {
    const char *a = c->arch_name;
    char key[128];
    uint32_t u;
    int rc;

#define REQ(field, suffix)                                                                                   \
    do {                                                                                                     \
        snprintf(key, sizeof key, "%s." suffix, a);                                                          \
        if ((rc = req_u32(g, key, &u, err))) return rc;                                                      \
        if (u == 0 || u > (1u << 24)) return sd_err_set(err, SDNPU_ERR_FORMAT, "key '%s' = %u is out of range", key, u); \
        c->field = (int32_t)u;                                                                               \
    } while (0)
    REQ(n_layer, "block_count");
    REQ(d_model, "embedding_length");
    REQ(n_ff, "feed_forward_length");
    REQ(n_head, "attention.head_count");
#undef REQ
    if (c->n_layer > SD_MAX_LAYERS)
        return sd_err_set(err, SDNPU_ERR_UNSUPPORTED, "%d layers: at most %d are supported", c->n_layer, SD_MAX_LAYERS);

    u = (uint32_t)c->n_head;
    snprintf(key, sizeof key, "%s.attention.head_count_kv", a);
    if ((rc = opt_u32(g, key, &u, err))) return rc;
    if (u == 0 || u > (uint32_t)c->n_head || c->n_head % (int32_t)u != 0)
        return sd_err_set(err, SDNPU_ERR_FORMAT, "key '%s' = %u does not divide head_count %d", key, u, c->n_head);
    c->n_head_kv = (int32_t)u;

    u = (uint32_t)(c->d_model / c->n_head);
    snprintf(key, sizeof key, "%s.attention.key_length", a);
    if ((rc = opt_u32(g, key, &u, err))) return rc;
    uint32_t vlen = u;
    snprintf(key, sizeof key, "%s.attention.value_length", a);
    if ((rc = opt_u32(g, key, &vlen, err))) return rc;
    if (u == 0 || u > 1024 || (u & 1) || vlen != u)
        return sd_err_set(err, SDNPU_ERR_UNSUPPORTED, "head size key_length %u / value_length %u is not supported", u,
                          vlen);
    c->head_dim = (int32_t)u;

    u = 0;
    snprintf(key, sizeof key, "%s.rope.dimension_count", a);
    if ((rc = opt_u32(g, key, &u, err))) return rc;
    if (u != 0 && u != (uint32_t)c->head_dim)
        return sd_err_set(err, SDNPU_ERR_UNSUPPORTED, "partial RoPE (%s = %u, head size %d) is not supported", key, u,
                          c->head_dim);

    c->n_ctx_train = 2048;
    snprintf(key, sizeof key, "%s.context_length", a);
    u = 0;
    if ((rc = opt_u32(g, key, &u, err))) return rc;
    if (u) c->n_ctx_train = (int32_t)SD_MIN(u, (uint32_t)INT32_MAX);
    return SDNPU_OK;
}

/* The norm's epsilon (required), RoPE's base and its linear scaling. */
static int read_norm_rope(const struct sd_gguf *g, struct sd_model_config *c, struct sd_err *err) {
    const char *a = c->arch_name;
    char key[128];
    int rc;
    c->norm_eps = 1e-6f;
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", a);
    if ((rc = sd_gguf_get_f32(g, key, &c->norm_eps, err)))
        return rc == SDNPU_ERR_NOT_FOUND ? sd_err_set(err, SDNPU_ERR_FORMAT, "required key '%s' is missing", key) : rc;
    if (!(c->norm_eps > 0 && c->norm_eps < 1))
        return sd_err_set(err, SDNPU_ERR_FORMAT, "key '%s' = %g is out of range", key, (double)c->norm_eps);

    c->rope_base = 10000.0f; /* the GGUF specification's default */
    snprintf(key, sizeof key, "%s.rope.freq_base", a);
    if ((rc = opt_f32(g, key, &c->rope_base, err))) return rc;
    c->rope_freq_scale = 1.0f;
    snprintf(key, sizeof key, "%s.rope.scaling.type", a);
    const char *stype;
    size_t stlen;
    rc = sd_gguf_get_str(g, key, &stype, &stlen, err);
    if (rc == SDNPU_OK) {
        if (stlen == 6 && !memcmp(stype, "linear", 6)) {
            float factor = 1.0f;
            snprintf(key, sizeof key, "%s.rope.scaling.factor", a);
            if ((rc = opt_f32(g, key, &factor, err))) return rc;
            if (!(factor > 0)) return sd_err_set(err, SDNPU_ERR_FORMAT, "key '%s' = %g is invalid", key, (double)factor);
            c->rope_freq_scale = 1.0f / factor;
        } else if (!(stlen == 4 && !memcmp(stype, "none", 4))) {
            return sd_err_set(err, SDNPU_ERR_UNSUPPORTED, "RoPE scaling type '%.*s' is not supported", (int)stlen, stype);
        }
    } else if (rc != SDNPU_ERR_NOT_FOUND) {
        return rc;
    }
    sd_err_clear(err);
    return SDNPU_OK;
}

/* What the family fixes: RoPE's kind, the scales, the FFN's activation,
 * and Gemma 3's local layers. */
static int read_family(const struct sd_gguf *g, struct sd_model_config *c, struct sd_err *err) {
    c->rope_kind = c->arch == SD_ARCH_LLAMA ? SD_ROPE_NORM : SD_ROPE_NEOX;
    c->attn_scale = 1.0f / sqrtf((float)c->head_dim);
    c->embd_scale = 1.0f;
    c->gelu = false;
    c->attn_scale_q = false;
    c->rope_base_swa = c->rope_base;
    if (c->arch != SD_ARCH_GEMMA3) return SDNPU_OK;
    /* Gemma 3 (as in its reference implementation and llama.cpp): the
     * embedding is scaled by sqrt(d_model), the FFN is GELU-tanh gated,
     * local layers use RoPE base 10000 unless the file says otherwise,
     * and q is scaled by 1/sqrt(head_dim) (query_pre_attn_scalar). */
    char key[128];
    uint32_t u = 0;
    int rc;
    c->embd_scale = sqrtf((float)c->d_model);
    c->gelu = true;
    c->attn_scale_q = true;
    c->rope_base_swa = 10000.0f;
    snprintf(key, sizeof key, "%s.rope.freq_base_swa", c->arch_name);
    if ((rc = opt_f32(g, key, &c->rope_base_swa, err))) return rc;
    snprintf(key, sizeof key, "%s.attention.sliding_window", c->arch_name);
    if ((rc = req_u32(g, key, &u, err))) return rc;
    if (u == 0) return sd_err_set(err, SDNPU_ERR_FORMAT, "key '%s' is 0", key);
    c->swa_window = (int32_t)SD_MIN(u, (uint32_t)INT32_MAX);
    return SDNPU_OK;
}

static int read_config(const struct sd_gguf *g, struct sd_model_config *c, struct sd_err *err) {
    int rc = read_arch(g, c, err);
    if (!rc) rc = read_shape(g, c, err);
    if (!rc) rc = read_norm_rope(g, c, err);
    if (!rc) rc = read_family(g, c, err);
    return rc;
}

/* ------------------------------------------------------------ tensors */

static int bind_weight(const struct sd_gguf *g, const char *name, int64_t n_in, int64_t n_out, bool required,
                       struct sd_weight *w, struct sd_err *err) {
    const struct sd_gguf_tensor *t = sd_gguf_find_tensor(g, name);
    memset(w, 0, sizeof *w);
    if (!t) {
        if (!required) return SDNPU_OK;
        return sd_err_set(err, SDNPU_ERR_FORMAT, "tensor '%s' is missing", name);
    }
    if (t->n_dims != 2 || t->ne[0] != n_in || t->ne[1] != n_out)
        return sd_err_set(err, SDNPU_ERR_FORMAT, "tensor '%s' has shape [%lld, %lld, %lld] (%u dims), expected [%lld, %lld]",
                          name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], t->n_dims,
                          (long long)n_in, (long long)n_out);
    const struct sd_type_traits *tt = sd_type_get(t->type);
    if (!tt || !tt->can_compute)
        return sd_err_set(err, SDNPU_ERR_UNSUPPORTED, "tensor '%s' has type %s, which sdnpu cannot compute", name,
                          sd_type_name(t->type));
    size_t rb;
    if (!sd_row_size(t->type, n_in, &rb))
        return sd_err_set(err, SDNPU_ERR_FORMAT, "tensor '%s': row of %lld is not whole %s blocks", name,
                          (long long)n_in, tt->name);
    w->type = t->type;
    w->data = t->data;
    w->n_in = n_in;
    w->n_out = n_out;
    w->row_bytes = rb;
    return SDNPU_OK;
}

/* Vectors are converted to F32 into m->owned_f32 at *cursor. */
static int bind_vec(const struct sd_gguf *g, const char *name, int64_t n, bool required, struct sd_vec *v,
                    float *store, size_t *cursor, size_t cap, struct sd_err *err) {
    const struct sd_gguf_tensor *t = sd_gguf_find_tensor(g, name);
    memset(v, 0, sizeof *v);
    if (!t) {
        if (!required) return SDNPU_OK;
        return sd_err_set(err, SDNPU_ERR_FORMAT, "tensor '%s' is missing", name);
    }
    int64_t ne = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    if (ne != n || t->ne[0] != n)
        return sd_err_set(err, SDNPU_ERR_FORMAT, "tensor '%s' has %lld elements, expected %lld", name, (long long)ne,
                          (long long)n);
    if (t->type != SD_TYPE_F32 && t->type != SD_TYPE_F16 && t->type != SD_TYPE_BF16)
        return sd_err_set(err, SDNPU_ERR_UNSUPPORTED, "tensor '%s' has type %s; vectors must be f32, f16 or bf16", name,
                          sd_type_name(t->type));
    if (*cursor + (size_t)n > cap) return sd_err_set(err, SDNPU_ERR_FORMAT, "internal: vector store overflow at '%s'", name);
    float *dst = store + *cursor;
    sd_dequantize_row(t->type, t->data, dst, n);
    *cursor += (size_t)n;
    v->data = dst;
    v->n = n;
    return SDNPU_OK;
}

static int bind_tensors(const struct sd_gguf *g, struct sd_model *m, struct sd_err *err) {
    const struct sd_model_config *c = &m->cfg;
    int64_t d = c->d_model, hd = c->head_dim;
    int64_t nq = (int64_t)c->n_head * hd, nkv = (int64_t)c->n_head_kv * hd;
    int rc;

    const struct sd_gguf_tensor *te = sd_gguf_find_tensor(g, "token_embd.weight");
    if (!te) return sd_err_set(err, SDNPU_ERR_FORMAT, "tensor 'token_embd.weight' is missing");
    if (te->n_dims != 2 || te->ne[0] != d)
        return sd_err_set(err, SDNPU_ERR_FORMAT, "tensor 'token_embd.weight' has shape [%lld, %lld], expected [%lld, n_vocab]",
                          (long long)te->ne[0], (long long)te->ne[1], (long long)d);
    if (te->ne[1] != c->n_vocab)
        return sd_err_set(err, SDNPU_ERR_FORMAT, "tensor 'token_embd.weight' has %lld rows but the vocabulary has %d tokens",
                          (long long)te->ne[1], c->n_vocab);
    if ((rc = bind_weight(g, "token_embd.weight", d, c->n_vocab, true, &m->tok_embd, err))) return rc;
    if ((rc = bind_weight(g, "output.weight", d, c->n_vocab, false, &m->output, err))) return rc;
    m->cfg.tied_output = m->output.data == NULL;
    if (m->cfg.tied_output) m->output = m->tok_embd;

    /* Vector storage: norms and biases of every layer, converted to F32. */
    size_t cap = (size_t)d + (size_t)hd;
    cap += (size_t)c->n_layer * ((size_t)d * 4 + (size_t)nq + (size_t)nkv * 2 + (size_t)hd * 2);
    m->owned_f32 = sd_calloc(cap, sizeof(float));
    if (!m->owned_f32) return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for %zu norm/bias values", cap);
    size_t cur = 0;
    if ((rc = bind_vec(g, "output_norm.weight", d, true, &m->output_norm, m->owned_f32, &cur, cap, err))) return rc;

    const struct sd_gguf_tensor *rf = sd_gguf_find_tensor(g, "rope_freqs.weight");
    if (rf) {
        struct sd_vec v;
        if ((rc = bind_vec(g, "rope_freqs.weight", hd / 2, true, &v, m->owned_f32, &cur, cap, err))) return rc;
        m->rope_freqs = v.data;
    }

    m->layers = sd_calloc((size_t)c->n_layer, sizeof *m->layers);
    if (!m->layers) return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for %d layers", c->n_layer);
    bool gemma = c->arch == SD_ARCH_GEMMA3, qwen = c->arch == SD_ARCH_QWEN2;
    char n[96];
    for (int il = 0; il < c->n_layer; il++) {
        struct sd_layer *L = &m->layers[il];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d." s, il), n)
        if ((rc = bind_vec(g, NAME("attn_norm.weight"), d, true, &L->attn_norm, m->owned_f32, &cur, cap, err))) return rc;
        if ((rc = bind_weight(g, NAME("attn_q.weight"), d, nq, true, &L->wq, err))) return rc;
        if ((rc = bind_weight(g, NAME("attn_k.weight"), d, nkv, true, &L->wk, err))) return rc;
        if ((rc = bind_weight(g, NAME("attn_v.weight"), d, nkv, true, &L->wv, err))) return rc;
        if ((rc = bind_weight(g, NAME("attn_output.weight"), nq, d, true, &L->wo, err))) return rc;
        if ((rc = bind_vec(g, NAME("attn_q.bias"), nq, qwen, &L->bq, m->owned_f32, &cur, cap, err))) return rc;
        if ((rc = bind_vec(g, NAME("attn_k.bias"), nkv, qwen, &L->bk, m->owned_f32, &cur, cap, err))) return rc;
        if ((rc = bind_vec(g, NAME("attn_v.bias"), nkv, qwen, &L->bv, m->owned_f32, &cur, cap, err))) return rc;
        if ((rc = bind_vec(g, NAME("attn_q_norm.weight"), hd, gemma, &L->q_norm, m->owned_f32, &cur, cap, err))) return rc;
        if ((rc = bind_vec(g, NAME("attn_k_norm.weight"), hd, gemma, &L->k_norm, m->owned_f32, &cur, cap, err))) return rc;
        if ((rc = bind_vec(g, NAME("post_attention_norm.weight"), d, gemma, &L->post_attn_norm, m->owned_f32, &cur, cap,
                           err)))
            return rc;
        if ((rc = bind_vec(g, NAME("ffn_norm.weight"), d, true, &L->ffn_norm, m->owned_f32, &cur, cap, err))) return rc;
        if ((rc = bind_weight(g, NAME("ffn_gate.weight"), d, c->n_ff, true, &L->w_gate, err))) return rc;
        if ((rc = bind_weight(g, NAME("ffn_up.weight"), d, c->n_ff, true, &L->w_up, err))) return rc;
        if ((rc = bind_weight(g, NAME("ffn_down.weight"), c->n_ff, d, true, &L->w_down, err))) return rc;
        if ((rc = bind_vec(g, NAME("post_ffw_norm.weight"), d, gemma, &L->post_ffn_norm, m->owned_f32, &cur, cap, err)))
            return rc;
#undef NAME
        /* Gemma 3: five local (sliding-window) layers, then one global. */
        L->swa = gemma && (il % 6) < 5;
        L->rope_base = L->swa ? c->rope_base_swa : c->rope_base;
    }
    return SDNPU_OK;
}

static int read_chat_template(struct sd_model_file *m, struct sd_err *err) {
    const char *s;
    size_t len;
    int rc = sd_gguf_get_str(m->gguf, "tokenizer.chat_template", &s, &len, err);
    if (rc == SDNPU_ERR_NOT_FOUND) {
        sd_err_clear(err);
        return SDNPU_OK;
    }
    if (rc) return rc;
    m->chat_template = sd_strndup(s, len);
    if (!m->chat_template) return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for the chat template");
    return SDNPU_OK;
}

int sd_model_file_load(struct sd_gguf *g, bool vocab_only, struct sd_model_file **out, struct sd_err *err) {
    *out = NULL;
    struct sd_model_file *f = sd_calloc(1, sizeof *f);
    if (!f) {
        sd_gguf_close(g);
        return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for the model");
    }
    f->gguf = g;
    struct sd_model_config *c = &f->m.cfg;
    int rc = sd_vocab_load(g, &f->vocab, err);
    if (rc) goto fail;
    if ((rc = read_chat_template(f, err))) goto fail;
    if (!vocab_only) {
        if ((rc = read_config(g, c, err))) goto fail;
        c->n_vocab = sd_vocab_n_tokens(f->vocab);
        if ((rc = bind_tensors(g, &f->m, err))) goto fail;
        f->m.file_mapped = sd_gguf_is_mapped(g);
    } else {
        const char *s;
        size_t len;
        if (sd_gguf_get_str(g, "general.architecture", &s, &len, NULL) == SDNPU_OK) {
            len = SD_MIN(len, sizeof c->arch_name - 1);
            memcpy(c->arch_name, s, len);
        }
        c->n_vocab = sd_vocab_n_tokens(f->vocab);
    }
    *out = f;
    return SDNPU_OK;
fail:
    sd_model_file_free(f);
    return rc;
}

void sd_model_file_free(struct sd_model_file *f) {
    if (!f) return;
    sd_vocab_free(f->vocab);
    sd_free(f->m.layers);
    sd_free(f->m.owned_f32);
    sd_free(f->chat_template);
    sd_gguf_close(f->gguf);
    sd_free(f);
}
