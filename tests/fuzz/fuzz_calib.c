/* tests/fuzz/fuzz_calib.c - in-context calibration on random contexts and
 * random prediction tables: the input gives the parameters, the context
 * (old and prompt tokens from a small vocabulary, so tokens repeat and the
 * search meets cycles) and each prompt position's predictions. Checks:
 * the build succeeds within its bounds (store tokens, search nodes), every
 * record is a key of context tokens then a path no longer than max_depth,
 * and a sam drafter drafts from the store without breaking the tree. */
#include <string.h>

#include "calib/calib.h"
#include "draft/draft.h"
#include "fuzz.h"

enum { NV = 24, MAX_CTX = 512 };

static uint8_t next(const uint8_t *data, size_t size, size_t *i) { return *i < size ? data[(*i)++] : 0; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t i = 0;
    struct sd_calib_params p = sd_calib_default_params();
    p.top_k = 1 + next(data, size, &i) % SD_CALIB_MAX_K;
    p.min_prob = (float)(next(data, size, &i) % 8) / 8.0f;
    p.max_depth = 1 + next(data, size, &i) % 12;
    p.node_budget = 1 + next(data, size, &i) % 24;
    p.prefix = 1 + next(data, size, &i) % 5;
    p.max_store = 1 + next(data, size, &i) % 32;
    int32_t n_old = next(data, size, &i) % 16;
    int32_t n_prompt = (int32_t)((size > i ? size - i : 0) / 3);
    if (n_prompt > MAX_CTX) n_prompt = MAX_CTX;
    static int32_t ctx[16 + MAX_CTX];
    for (int32_t k = 0; k < n_old + n_prompt; k++) ctx[k] = next(data, size, &i) % NV;
    struct sd_calib *c;
    struct sd_sam *store;
    FUZZ_CHECK(sd_calib_create(&p, &c, NULL) == SDNPU_OK);
    FUZZ_CHECK(sd_sam_create(0, &store, NULL) == SDNPU_OK);
    FUZZ_CHECK(sd_calib_begin(c, ctx, n_old, ctx + n_old, n_prompt, NULL) == SDNPU_OK);
    int32_t n_sub;
    const int32_t *sub = sd_calib_subset(c, &n_sub);
    for (int32_t k = 1; k < n_sub; k++) FUZZ_CHECK(sub[k - 1] < sub[k]);
    /* Each position: two predicted tokens from the rest of the input (any
     * tokens, in the vocabulary or not), probabilities falling. */
    for (int32_t q = 0; q < n_prompt; q++) {
        int32_t tok[2] = {next(data, size, &i) % (NV + 4), next(data, size, &i) % (NV + 4)};
        float prob[2] = {0.9f - 0.1f * (float)(q % 5), 0.3f};
        int32_t k = tok[0] == tok[1] ? 1 : 2;
        FUZZ_CHECK(sd_calib_set(c, q, tok, prob, k, NULL) == SDNPU_OK);
    }
    FUZZ_CHECK(sd_calib_build(c, store, NULL) == SDNPU_OK);
    struct sd_calib_stats st = sd_calib_stats(c);
    FUZZ_CHECK(st.n_tokens <= (int64_t)n_prompt * p.max_store);
    FUZZ_CHECK(st.n_nodes <= (int64_t)n_prompt * p.node_budget);
    FUZZ_CHECK((int64_t)sd_sam_n_tokens(store) == st.n_tokens);
    const int32_t *t = sd_sam_text(store);
    int32_t len = 0, records = 0;
    for (size_t k = 0; k < sd_sam_n_tokens(store); k++) {
        if (t[k] >= 0) {
            len++;
            continue;
        }
        FUZZ_CHECK(len >= 2 && len <= p.prefix + p.max_depth);
        len = 0;
        records++;
    }
    FUZZ_CHECK(len == 0 && records == st.n_records);
    /* A drafter over the context with the store attached. */
    struct sd_drafter *d;
    static struct sd_draft_tree tree;
    if (!tree.cap) FUZZ_CHECK(sd_draft_tree_init(&tree, 16, NULL) == SDNPU_OK);
    FUZZ_CHECK(sd_drafter_create("sam-tree", 64, &d, NULL) == SDNPU_OK);
    FUZZ_CHECK(sd_drafter_observe_context(d, ctx, (size_t)(n_old + n_prompt), NULL) == SDNPU_OK);
    FUZZ_CHECK(sd_drafter_attach(d, SD_DRAFT_STORE_CALIB, store, NULL) == SDNPU_OK);
    struct sd_draft_params dp = sd_draft_default_params();
    dp.budget = 15;
    dp.calib_lead = (int32_t)(size % 3) - 1;
    for (int s = 0; s < 4; s++) {
        FUZZ_CHECK(sd_drafter_draft(d, &dp, &tree, NULL) == SDNPU_OK);
        FUZZ_CHECK(sd_draft_tree_validate(&tree, &dp, NULL) == SDNPU_OK);
        FUZZ_CHECK(sd_drafter_observe_output(d, tree.n ? tree.tok[0] : 1, NULL) == SDNPU_OK);
    }
    sd_drafter_free(d);
    sd_sam_free(store);
    sd_calib_free(c);
    return 0;
}
