/*
 * sample/sampler.h - choosing the next token from logits: greedy, or a
 * llama.cpp-style chain (repetition penalty, top-k, top-p, min-p,
 * temperature, then a seeded draw). Same seed, same logits: same tokens.
 */
#ifndef SD_SAMPLER_H
#define SD_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "base/base.h"
#include "grammar/grammar.h"

struct sd_sampler_params {
    float temperature;    /* <= 0: greedy */
    int32_t top_k;        /* <= 0: off */
    float top_p;          /* >= 1: off */
    float min_p;          /* <= 0: off */
    float repeat_penalty; /* 1: off */
    int32_t repeat_last_n;
    uint64_t seed;
};

struct sd_sampler;

int sd_sampler_create(const struct sd_sampler_params *p, int32_t n_vocab, struct sd_sampler **out, struct sd_err *err);
void sd_sampler_free(struct sd_sampler *s);
void sd_sampler_reset(struct sd_sampler *s); /* history cleared, RNG re-seeded */
bool sd_sampler_is_greedy(const struct sd_sampler *s);
/* What this sampler reads of the logits (false when constrained: the
 * allowed tokens may lie anywhere): true where only each row's k
 * best by (logit, then lower index) and the logits of keep[0, n_keep)
 * (the tokens a repetition penalty changes; none without one) decide its
 * draw, so that a head may leave the rest out (graphs/graph.h's
 * sd_graph_run_topk); false where it reads them all (top-k off, or as
 * wide as the vocabulary). */
bool sd_sampler_topk(const struct sd_sampler *s, int32_t *k, const int32_t **keep, int32_t *n_keep);
/* Constrain what the sampler chooses from here on by grammar g (NULL:
 * nothing), starting from the empty output: every choice (sample, probs,
 * and the greedy choice) is then made among the tokens g allows after the
 * tokens accepted since (an object that satisfies schema, where not NULL),
 * with the logits of the others at -INFINITY. g and schema are the
 * caller's and must outlive the sampler's use of them. Call it after the
 * prompt's tokens were accepted. */
void sd_sampler_constrain(struct sd_sampler *s, const struct sd_grammar *g, const struct sd_schema *schema);
/* Whether the grammar allows tok next (always, unconstrained): a head's
 * argmax that it allows is the constrained greedy choice too. */
bool sd_sampler_allows(const struct sd_sampler *s, int32_t tok);
/* Whether the constrained output so far is complete (the object closed). */
bool sd_sampler_output_complete(const struct sd_sampler *s);
/* Record an accepted token (prompt or output) for the repetition penalty
 * and, once constrained, the grammar's state. */
void sd_sampler_accept(struct sd_sampler *s, int32_t token);
/* Pick a token. logits may be modified. */
int32_t sd_sampler_sample(struct sd_sampler *s, float *logits);
/* The index of the largest value; ties go to the lowest index. */
int32_t sd_argmax(const float *x, int32_t n);

/* The sampler's probability distribution after the whole chain (for
 * speculative sampling): probs[n_vocab], zero outside the kept set. */
void sd_sampler_probs(struct sd_sampler *s, float *logits, float *probs);
/* Draw from a distribution with the sampler's RNG. */
int32_t sd_sampler_draw(struct sd_sampler *s, const float *probs, int32_t n);
double sd_sampler_uniform(struct sd_sampler *s);

#endif /* SD_SAMPLER_H */
