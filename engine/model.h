/*
 * engine/model.h - loading a model file: the GGUF reader's tensors bound to
 * the graphs' model (graphs/model.h), the vocabulary and the chat template.
 *
 * Loading validates every tensor the architecture needs: present, the right
 * shape, a type sdnpu can compute. The forward pass trusts what it is given.
 */
#ifndef SD_MODEL_H
#define SD_MODEL_H

#include <stdbool.h>

#include "base/base.h"
#include "gguf/gguf.h"
#include "tok/tokenizer.h"
#include "graphs/graph.h"

struct sd_model_file {
    struct sd_gguf *gguf;   /* the mapped file the weights point into */
    struct sd_vocab *vocab;
    char *chat_template;    /* NUL-terminated copy, or NULL */
    struct sd_model m;      /* weights and config (cfg and vocabulary only when vocab_only) */
};

/* Load a model from an open GGUF (the result takes ownership of g on
 * success and on failure). vocab_only skips the weights. */
int sd_model_file_load(struct sd_gguf *g, bool vocab_only, struct sd_model_file **out, struct sd_err *err);
void sd_model_file_free(struct sd_model_file *f);

#endif /* SD_MODEL_H */
