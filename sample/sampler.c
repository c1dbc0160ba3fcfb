/* sample/sampler.c - greedy and seeded sampling. */
#include "sample/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct cand {
    float logit;
    int32_t id;
};

struct sd_sampler {
    struct sd_sampler_params p;
    int32_t n_vocab;
    uint64_t rng[4];
    int32_t *recent; /* ring of the last repeat_last_n tokens */
    int32_t n_recent, recent_head;
    struct cand *cands; /* [n_vocab] */
    float *tmp;         /* [n_vocab] */
    const struct sd_grammar *grammar; /* NULL: unconstrained */
    struct sd_json js; /* the grammar's state after the output accepted since sd_sampler_constrain */
};

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/* xoshiro256** */
static uint64_t next_u64(struct sd_sampler *s) {
    uint64_t *r = s->rng;
    uint64_t result = rotl(r[1] * 5, 7) * 9, t = r[1] << 17;
    r[2] ^= r[0];
    r[3] ^= r[1];
    r[1] ^= r[2];
    r[0] ^= r[3];
    r[2] ^= t;
    r[3] = rotl(r[3], 45);
    return result;
}

double sd_sampler_uniform(struct sd_sampler *s) { return (double)(next_u64(s) >> 11) * 0x1.0p-53; }

void sd_sampler_reset(struct sd_sampler *s) {
    uint64_t seed = s->p.seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix(&seed);
    s->n_recent = 0;
    s->recent_head = 0;
}

int sd_sampler_create(const struct sd_sampler_params *p, int32_t n_vocab, struct sd_sampler **out, struct sd_err *err) {
    *out = NULL;
    if (n_vocab <= 0) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "sampler: vocabulary size %d", n_vocab);
    if (isnan(p->temperature) || isnan(p->top_p) || isnan(p->min_p) ||
        !(p->repeat_penalty > 0))
        return sd_err_set(err, SDNPU_ERR_INVALID_ARG,
                          "sampler: invalid parameters (temperature %g, top_p %g, min_p %g, repeat_penalty %g)",
                          (double)p->temperature, (double)p->top_p, (double)p->min_p, (double)p->repeat_penalty);
    struct sd_sampler *s = sd_calloc(1, sizeof *s);
    if (!s) return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for the sampler");
    s->p = *p;
    if (s->p.repeat_last_n < 0) s->p.repeat_last_n = 0;
    s->n_vocab = n_vocab;
    s->cands = sd_malloc((size_t)n_vocab * sizeof *s->cands);
    s->tmp = sd_malloc((size_t)n_vocab * sizeof *s->tmp);
    s->recent = sd_malloc((size_t)(s->p.repeat_last_n > 0 ? s->p.repeat_last_n : 1) * sizeof(int32_t));
    if (!s->cands || !s->tmp || !s->recent) {
        sd_sampler_free(s);
        return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for the sampler");
    }
    sd_sampler_reset(s);
    *out = s;
    return SDNPU_OK;
}

void sd_sampler_free(struct sd_sampler *s) {
    if (!s) return;
    sd_free(s->cands);
    sd_free(s->tmp);
    sd_free(s->recent);
    sd_free(s);
}

bool sd_sampler_is_greedy(const struct sd_sampler *s) {
    return s->p.temperature <= 0 && (s->p.repeat_penalty == 1.0f || s->p.repeat_last_n == 0);
}

bool sd_sampler_topk(const struct sd_sampler *s, int32_t *k, const int32_t **keep, int32_t *n_keep) {
    /* Greedy with a penalty takes the first of the largest: the best one. */
    *k = s->p.temperature <= 0 ? 1 : s->p.top_k;
    const bool penalty = s->p.repeat_penalty != 1.0f && s->n_recent > 0;
    *keep = penalty ? s->recent : NULL;
    *n_keep = penalty ? s->n_recent : 0;
    return !s->grammar && *k > 0 && *k < s->n_vocab;
}

void sd_sampler_constrain(struct sd_sampler *s, const struct sd_grammar *g, const struct sd_schema *schema) {
    s->grammar = g;
    sd_json_init_schema(&s->js, schema);
}

bool sd_sampler_allows(const struct sd_sampler *s, int32_t tok) {
    return !s->grammar || sd_grammar_allows(s->grammar, &s->js, tok);
}

bool sd_sampler_output_complete(const struct sd_sampler *s) { return s->grammar && sd_json_complete(&s->js); }

void sd_sampler_accept(struct sd_sampler *s, int32_t token) {
    if (s->grammar && !sd_json_dead(&s->js) && !sd_grammar_advance(s->grammar, &s->js, token))
        SD_LOGW("sampler: token %d was accepted against the grammar", token);
    if (s->p.repeat_last_n <= 0) return;
    s->recent[s->recent_head] = token;
    s->recent_head = (s->recent_head + 1) % s->p.repeat_last_n;
    if (s->n_recent < s->p.repeat_last_n) s->n_recent++;
}

/* base/base.h's definition over the whole vector (the heads that take it
 * piece by piece use the same). */
int32_t sd_argmax(const float *x, int32_t n) { return sd_amax_of(x, n); }

/* The llama.cpp penalty: each distinct recent token once. */
static void apply_penalty(struct sd_sampler *s, float *logits) {
    if (s->p.repeat_penalty == 1.0f || s->n_recent == 0) return;
    for (int32_t i = 0; i < s->n_recent; i++) {
        int32_t t = s->recent[i];
        if (t < 0 || t >= s->n_vocab) continue;
        bool seen = false;
        for (int32_t j = 0; j < i; j++)
            if (s->recent[j] == t) seen = true;
        if (seen) continue;
        logits[t] = logits[t] > 0 ? logits[t] / s->p.repeat_penalty : logits[t] * s->p.repeat_penalty;
    }
}

static int cmp_cand(const void *a, const void *b) {
    const struct cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Run the chain; leaves the kept candidates sorted in s->cands[0..n) with
 * their probabilities in s->tmp[0..n). Returns n. */
static int32_t chain(struct sd_sampler *s, float *logits) {
    if (s->grammar) sd_grammar_mask(s->grammar, &s->js, logits);
    apply_penalty(s, logits);
    int32_t n = s->n_vocab;
    int32_t k = s->p.top_k > 0 && s->p.top_k < n ? s->p.top_k : n;
    if (k < n) {
        /* Keep the k best in a min-heap (O(n log k)), then sort those. */
        struct cand *h = s->cands;
        for (int32_t i = 0; i < n; i++) {
            struct cand c = {logits[i], i};
            int32_t pos;
            if (i < k) {
                pos = i;
                while (pos > 0 && cmp_cand(&c, &h[(pos - 1) / 2]) > 0) {
                    h[pos] = h[(pos - 1) / 2];
                    pos = (pos - 1) / 2;
                }
                h[pos] = c;
            } else if (cmp_cand(&c, &h[0]) < 0) {
                /* c beats the worst kept: sift it down from the root. */
                pos = 0;
                for (;;) {
                    int32_t l = 2 * pos + 1, r = l + 1, m = pos;
                    const struct cand *mc = &c;
                    if (l < k && cmp_cand(&h[l], mc) > 0) m = l, mc = &h[l];
                    if (r < k && cmp_cand(&h[r], mc) > 0) m = r;
                    if (m == pos) break;
                    h[pos] = h[m];
                    pos = m;
                }
                h[pos] = c;
            }
        }
        n = k;
    } else {
        for (int32_t i = 0; i < n; i++) s->cands[i] = (struct cand){logits[i], i};
    }
    qsort(s->cands, (size_t)n, sizeof *s->cands, cmp_cand);
    /* Softmax at temperature 1 for top-p and min-p, as llama.cpp orders it. */
    float mx = s->cands[0].logit;
    double sum = 0;
    for (int32_t i = 0; i < n; i++) {
        s->tmp[i] = expf(s->cands[i].logit - mx);
        sum += s->tmp[i];
    }
    if (s->p.top_p < 1.0f) {
        double cum = 0;
        int32_t keep = n;
        for (int32_t i = 0; i < n; i++) {
            cum += s->tmp[i] / sum;
            if (cum >= s->p.top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }
    if (s->p.min_p > 0.0f) {
        int32_t keep = 1;
        while (keep < n && s->tmp[keep] >= s->p.min_p * s->tmp[0]) keep++;
        n = keep;
    }
    /* Temperature, then the final distribution. */
    float t = s->p.temperature > 0 ? s->p.temperature : 1.0f;
    sum = 0;
    for (int32_t i = 0; i < n; i++) {
        s->tmp[i] = expf((s->cands[i].logit - mx) / t);
        sum += s->tmp[i];
    }
    for (int32_t i = 0; i < n; i++) s->tmp[i] = (float)(s->tmp[i] / sum);
    return n;
}

/* The greedy choice: the best logit after the penalty, among the tokens
 * the grammar allows. */
static int32_t greedy(struct sd_sampler *s, float *logits) {
    apply_penalty(s, logits);
    return s->grammar ? sd_grammar_argmax(s->grammar, &s->js, logits) : sd_argmax(logits, s->n_vocab);
}

int32_t sd_sampler_sample(struct sd_sampler *s, float *logits) {
    if (s->p.temperature <= 0) return greedy(s, logits);
    int32_t n = chain(s, logits);
    double u = sd_sampler_uniform(s), cum = 0;
    for (int32_t i = 0; i < n; i++) {
        cum += s->tmp[i];
        if (u < cum) return s->cands[i].id;
    }
    return s->cands[n - 1].id;
}

void sd_sampler_probs(struct sd_sampler *s, float *logits, float *probs) {
    memset(probs, 0, (size_t)s->n_vocab * sizeof(float));
    if (s->p.temperature <= 0) {
        probs[greedy(s, logits)] = 1.0f;
        return;
    }
    int32_t n = chain(s, logits);
    for (int32_t i = 0; i < n; i++) probs[s->cands[i].id] = s->tmp[i];
}

int32_t sd_sampler_draw(struct sd_sampler *s, const float *probs, int32_t n) {
    double sum = 0;
    for (int32_t i = 0; i < n; i++) sum += probs[i];
    double u = sd_sampler_uniform(s) * sum, cum = 0;
    int32_t last = 0;
    for (int32_t i = 0; i < n; i++) {
        if (probs[i] <= 0) continue;
        cum += probs[i];
        last = i;
        if (u < cum) return i;
    }
    return last;
}
