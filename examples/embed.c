/* examples/embed.c - the README's embedding example; CI compiles it. */
#include <sdnpu.h>
#include <stdio.h>
#include <string.h>

static bool print(const char *piece, size_t len, void *user) {
    (void)user;
    fwrite(piece, 1, len, stdout);
    return true; /* false stops generation */
}

int main(void) {
    struct sdnpu_model *model;
    char err[512];
    if (sdnpu_model_load("models/default.gguf", sdnpu_model_default_params(), &model, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    struct sdnpu_session *s;
    if (sdnpu_session_create(model, sdnpu_session_default_params(), &s)) return 1;
    struct sdnpu_generate_params gp = sdnpu_generate_default_params();
    gp.sampling.temperature = 0;  /* greedy */
    gp.spec.drafter = SDNPU_DRAFTER_SAM_TREE; /* speculative decoding from the prompt's own text */
    gp.on_text = print;
    const char *doc = "...a document...\n\nTL;DR:";
    struct sdnpu_stats st;
    sdnpu_session_generate(s, doc, strlen(doc), &gp, &st);
    fprintf(stderr, "\n%.1f tokens/s, %.2f tokens per model call\n", st.gen_tokens_per_s, st.acceptance);
    sdnpu_session_free(s);
    sdnpu_model_free(model);
}
