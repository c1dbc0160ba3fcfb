/* tests/fuzz/fuzz_results.c - `sdnpu eval`'s resume: eval_load_results on
 * any results.json (a file in a folder anyone may have edited). A load
 * either fails (nothing loaded) or gives records whose numbers are in
 * their types' ranges; what loaded is written and read back the same. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/eval.h"
#include "fuzz.h"

static char g_dir[256], g_path[300];

/* The settings a results file must match to be resumed, two methods. */
static void setup(struct eval *ev) {
    memset(ev, 0, sizeof *ev);
    ev->model_path = "m.gguf";
    ev->out_dir = g_dir;
    ev->kernels = "fast";
    ev->n_predict = 64;
    ev->n_methods = 2;
    strcpy(ev->methods[0].name, "cpu-vanilla");
    strcpy(ev->methods[1].name, "sam");
}

static void release(struct eval *ev) {
    for (size_t i = 0; i < ev->n_recs; i++)
        eval_rec_free(&ev->recs[i]);
    free(ev->recs);
}

static bool same(const struct rec *a, const struct rec *b) {
    return !strcmp(a->dataset, b->dataset) && !strcmp(a->id, b->id) && !strcmp(a->method, b->method) &&
           a->status == b->status && !strcmp(a->output, b->output) && a->n_generated == b->n_generated &&
           a->graph_rows == b->graph_rows && a->n_out_tokens == b->n_out_tokens &&
           a->have_tokens == b->have_tokens && a->out_hash == b->out_hash && a->lossless == b->lossless &&
           a->stop_reason == b->stop_reason;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_dir[0]) {
        snprintf(g_dir, sizeof g_dir, "/tmp/sdnpu-fuzz-results-%d", (int)getpid());
        mkdir(g_dir, 0700);
        snprintf(g_path, sizeof g_path, "%s/results.json", g_dir);
    }
    fuzz_write_file(g_path, data, size);
    struct eval ev, again;
    setup(&ev);
    const int err = fuzz_quiet();
    int rc = eval_load_results(&ev);
    bool reread = false;
    if (rc == 0) {
        setup(&again);
        reread = eval_write_results(&ev) == 0 && eval_load_results(&again) == 0;
    }
    fuzz_loud(err);
    unlink(g_path);
    if (rc) {
        FUZZ_CHECK(ev.n_recs == 0);
        return 0;
    }
    FUZZ_CHECK(reread && again.n_recs == ev.n_recs);
    for (size_t i = 0; i < ev.n_recs; i++) {
        const struct rec *r = &ev.recs[i];
        FUZZ_CHECK(r->dataset && r->id && r->task && r->method && r->msg && r->output);
        FUZZ_CHECK(r->lossless >= -1 && r->lossless <= 1 && (r->status == REC_OK || r->status == REC_ERROR));
        FUZZ_CHECK(same(r, &again.recs[i]));
    }
    for (size_t m = 0; m < ev.n_methods; m++)
        FUZZ_CHECK(ev.methods[m].unavailable == again.methods[m].unavailable);
    release(&ev);
    release(&again);
    return 0;
}
