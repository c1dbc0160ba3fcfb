/* tests/fuzz/fuzz_tree.c - draft trees and the verification bookkeeping
 * on random trees and random model choices: the input builds a tree (a
 * parent and a token a node), then gives the model's token after each
 * row. Checks: the tree's invariants, the batch rows (each row sees
 * exactly its ancestors), an accepted path that walks parent to child
 * along the model's choices, rejected-draft reuse and the cost-aware
 * policy staying in bounds. */
#include <string.h>

#include "draft/draft.h"
#include "fuzz.h"
#include "verify/verify.h"

enum { NV = 16, CAP = 31 };

static bool is_ancestor_row(const struct sd_row *rows, int32_t r, int32_t a) {
    return (rows[r].anc[a >> 6] >> (a & 63)) & 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static struct sd_draft_tree t;
    static struct sd_reuse ru;
    static struct sd_policy pol;
    if (!t.cap) {
        FUZZ_CHECK(sd_draft_tree_init(&t, CAP, NULL) == SDNPU_OK);
        sd_reuse_reset(&ru);
        const int32_t L[2] = {1, CAP + 1};
        const double c[2] = {10, 16};
        sd_policy_init(&pol, true, L, c, 2);
    }
    struct sd_draft_params dp = sd_draft_default_params();
    dp.budget = CAP;
    dp.max_depth = 1 + (size ? data[0] % 12 : 0);
    dp.max_branch = 1 + (size > 1 ? data[1] % 4 : 0);
    sd_draft_tree_clear(&t);
    size_t i = 2;
    for (; i + 1 < size && data[i] != 0xFF; i += 2) sd_draft_tree_add(&t, (int32_t)(data[i] % (t.n + 1)) - 1, data[i + 1] % NV, &dp);
    FUZZ_CHECK(sd_draft_tree_validate(&t, &dp, NULL) == SDNPU_OK);
    t.n_main = 0;
    while (t.n_main < t.n && t.parent[t.n_main] == t.n_main - 1) t.n_main++;
    t.main_store = SD_DRAFT_STORE_CONTEXT;
    t.main_match = size > 2 ? data[2] : 1;
    if (i < size) sd_reuse_fill(&ru, &t, &dp);
    FUZZ_CHECK(sd_draft_tree_validate(&t, NULL, NULL) == SDNPU_OK);
    static struct sd_row rows[CAP + 1];
    int32_t n_rows = sd_verify_rows(&t, t.n, 1, 100, rows);
    FUZZ_CHECK(n_rows == t.n + 1);
    for (int32_t r = 1; r < n_rows; r++) {
        int32_t p = t.parent[r - 1] + 1; /* the parent's row; 0 is the root */
        FUZZ_CHECK(is_ancestor_row(rows, r, r) && is_ancestor_row(rows, r, 0) && is_ancestor_row(rows, r, p));
        FUZZ_CHECK(rows[r].pos == 100 + t.depth[r - 1]);
    }
    /* The model's token after each row: the next input bytes. */
    static float logits[(CAP + 1) * NV];
    memset(logits, 0, sizeof logits);
    for (int32_t r = 0; r < n_rows; r++) logits[r * NV + (i + 1 + (size_t)r < size ? data[i + 1 + r] % NV : 0)] = 1.0f;
    int32_t path[CAP], n_acc = -1, next = -1;
    sd_verify_accept(&t, t.n, logits, NULL, NV, NULL, NULL, path, &n_acc, &next);
    FUZZ_CHECK(n_acc >= 0 && n_acc <= t.n && next >= 0 && next < NV);
    for (int32_t k = 0; k < n_acc; k++) {
        FUZZ_CHECK(t.parent[path[k]] == (k ? path[k - 1] : -1));
        FUZZ_CHECK(logits[(k ? path[k - 1] + 1 : 0) * NV + t.tok[path[k]]] == 1.0f);
    }
    sd_reuse_update(&ru, &t, t.n, logits, NULL, NV, path, n_acc);
    FUZZ_CHECK(ru.n >= 0 && ru.n <= SD_REUSE_MAX && ru.n_accepted <= ru.n_offered);
    int32_t nv;
    int32_t opt = sd_policy_choose(&pol, &t, t.n, &nv);
    FUZZ_CHECK(opt >= 0 && opt < 2 && nv >= 0 && nv <= t.n);
    if (nv) sd_policy_observe(&pol, &t, t.n, path, n_acc);
    else sd_policy_observe_skipped(&pol, &t, t.n, next);
    for (int b = 0; b < SD_POLICY_BUCKETS; b++) FUZZ_CHECK(pol.rate[b] > 0 && pol.rate[b] < 1);
    return 0;
}
