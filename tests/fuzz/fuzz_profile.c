/* tests/fuzz/fuzz_profile.c - sd_profile_load on any file (a profile
 * beside a model is a file anyone may have copied or edited). A load
 * either fails with a format status and a message, or gives the grid a
 * measurement makes: every block from 0 and the head at each row count,
 * once, every time in range; what a session then derives from it (its
 * verification rows, its steps' costs) stays in range; and the profile
 * saved again loads back the same. */
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "engine/tools.h"
#include "fuzz.h"
#include "sched/profile.h"
#include "verify/verify.h"

/* The grid of a loaded profile, and its sums. */
static void check_profile(const struct sd_profile *p) {
    FUZZ_CHECK(p->n_L >= 1 && p->n_L <= SD_PROFILE_MAX_L);
    FUZZ_CHECK(p->n_blocks >= 1 && p->n_blocks <= SD_MAX_BLOCKS);
    FUZZ_CHECK(p->n_entries == (p->n_blocks + 1) * p->n_L);
    for (int32_t i = 0; i < p->n_entries; i++) {
        const struct sd_profile_entry *e = &p->entries[i];
        FUZZ_CHECK(e->block >= -1 && e->block < p->n_blocks);
        FUZZ_CHECK(e->L >= 1 && e->L <= SD_MAX_BATCH_ROWS && e->l0 <= e->l1);
        FUZZ_CHECK(isfinite(e->compute_ms) && e->compute_ms >= 0 && isfinite(e->load_ms) && e->load_ms >= 0);
    }
    for (int32_t li = 0; li < p->n_L; li++) {
        const double pass = sd_profile_pass_ms(p, p->Ls[li]), step = sd_profile_step_ms(p, p->Ls[li]);
        FUZZ_CHECK(pass >= 0 && step >= pass && isfinite(step));
    }
    const int32_t rows = sd_session_verify_rows(p);
    FUZZ_CHECK(rows >= 2 && rows <= SD_VERIFY_MAX_ROWS);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[256], again[256];
    if (!path[0]) {
        snprintf(path, sizeof path, "/tmp/sdnpu-fuzz-profile-%d.json", (int)getpid());
        snprintf(again, sizeof again, "/tmp/sdnpu-fuzz-profile-%d-again.json", (int)getpid());
    }
    fuzz_write_file(path, data, size);
    struct sd_profile p, q;
    struct sd_err err = {0};
    int rc = sd_profile_load(path, NULL, &p, &err);
    unlink(path);
    if (rc != SDNPU_OK) {
        FUZZ_CHECK(rc == SDNPU_ERR_FORMAT && err.msg[0] != '\0' && p.entries == NULL);
        return 0;
    }
    check_profile(&p);
    FUZZ_CHECK(sd_profile_save(&p, again, &err) == SDNPU_OK);
    FUZZ_CHECK(sd_profile_load(again, p.key, &q, &err) == SDNPU_OK);
    unlink(again);
    FUZZ_CHECK(q.n_entries == p.n_entries && q.n_blocks == p.n_blocks && q.n_L == p.n_L);
    for (int32_t i = 0; i < p.n_entries; i++) {
        FUZZ_CHECK(q.entries[i].block == p.entries[i].block && q.entries[i].L == p.entries[i].L);
        FUZZ_CHECK(fabs(q.entries[i].compute_ms - p.entries[i].compute_ms) <=
                   1e-4 * (1 + p.entries[i].compute_ms));
    }
    sd_profile_free(&q);
    sd_profile_free(&p);
    return 0;
}
